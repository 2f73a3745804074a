"""A pytest fixture for users' own tests: an embedded broker on a free port.

Use it with ``pytest_plugins = ["amqp_async.broker.pytest_plugin"]`` in a conftest.py; then::

    def test_something(amqp_broker):
        url = amqp_broker.url  # amqp://127.0.0.1:PORT, fresh for each test

The broker runs in a background thread, so the fixture serves synchronous and asynchronous tests alike.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ._thread import BrokerThread

__all__ = ["amqp_broker"]


@pytest.fixture
def amqp_broker() -> Iterator[BrokerThread]:
    """An embedded broker on a free port for one test."""
    with BrokerThread() as broker:
        yield broker
