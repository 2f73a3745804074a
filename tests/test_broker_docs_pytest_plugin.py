"""The ``amqp_broker`` pytest fixture, used as docs/broker.md says a user's test suite uses it: a conftest.py with
``pytest_plugins = ["amqp_async.broker.pytest_plugin"]``, run by pytest in a process of its own.

Its broker takes options (a dead-letter queue, a delivery limit, a queue depth...) from an ``amqp_broker`` marker
or an ``amqp_broker_options`` fixture. Before, it took none: a test of a poison message, of expiry or of a full
queue could not use the fixture at all, and had to start a ``BrokerThread`` of its own.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("proton", reason="python-qpid-proton is the independent client; CI installs it")

REPO = Path(__file__).resolve().parent.parent
#: A whole pytest run in a subprocess, on a loaded machine.
RUN_TIMEOUT = 120.0

CONFTEST = 'pytest_plugins = ["amqp_async.broker.pytest_plugin"]\n'

USER_TESTS = '''
import pytest
from proton import Message
from proton.utils import BlockingConnection

TIMEOUT = 10.0


def reject_one(url, address):
    """Send one message to address and reject it with proton; return the connection."""
    connection = BlockingConnection(url, timeout=TIMEOUT)
    connection.create_sender(address).send(Message(body="poison"))
    receiver = connection.create_receiver(address)
    assert receiver.receive(timeout=TIMEOUT).body == "poison"
    receiver.reject()
    return connection


@pytest.mark.amqp_broker(dead_letter_queue="DLQ")
def test_marker_options(amqp_broker):
    connection = reject_one(amqp_broker.url, "orders")
    dead = connection.create_receiver("DLQ")
    message = dead.receive(timeout=TIMEOUT)
    assert message.body == "poison"
    assert message.annotations["x-opt-dead-letter-reason"] == "rejected"
    assert message.annotations["x-opt-dead-letter-source"] == "orders"
    dead.accept()
    connection.close()


def test_defaults(amqp_broker):
    assert amqp_broker.broker.dead_letter_queue is None
    reject_one(amqp_broker.url, "orders").close()


class TestFixtureOptions:
    @pytest.fixture
    def amqp_broker_options(self):
        return {"dead_letter_queue": "class-DLQ", "max_queue_depth": 5}

    def test_fixture_options(self, amqp_broker):
        assert amqp_broker.broker.dead_letter_queue == "class-DLQ"
        assert amqp_broker.broker.max_queue_depth == 5

    @pytest.mark.amqp_broker(dead_letter_queue="own-DLQ")
    def test_the_marker_wins(self, amqp_broker):
        assert amqp_broker.broker.dead_letter_queue == "own-DLQ"
        assert amqp_broker.broker.max_queue_depth == 5
'''


def test_a_users_suite_gives_the_fixture_options(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_user.py").write_text(textwrap.dedent(USER_TESTS))
    env = dict(os.environ, PYTHONPATH=str(REPO))
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "--strict-markers"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=RUN_TIMEOUT,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "4 passed" in result.stdout, result.stdout
