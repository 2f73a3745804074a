"""One broker per data directory (``--data-dir``, ``Broker(data_dir=...)``).

Two brokers started on one directory both ran: each numbered its durable messages from the same ``max(id)`` and
wrote over the other's rows, so accepted messages were lost at the next restart. The store now locks the
directory (``flock`` on ``DIR/broker.lock``, which names the holder's pid) for as long as it is open. Checked: a
second broker is refused (the command line with exit code 1 and one line naming the first one's pid, the Python API
with :class:`DataDirInUse`, an ``OSError``); the first goes on serving; after a ``kill -9`` of the first (the
operating system releases its lock) a new broker starts on the directory and finds its messages; a broker stopped
cleanly releases the directory.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio
import pytest

import amqp_async
from amqp_async import Message
from amqp_async.broker import Broker, DataDirInUse
from amqp_async.broker._store import LOCK_FILE
from amqp_async.codec.delivery_states import Accepted

try:
    from test_broker_cli import TIMEOUT, BrokerProcess, one_error_line, run_cli
    from test_broker_durable import drain
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.test_broker_cli import TIMEOUT, BrokerProcess, one_error_line, run_cli
    from tests.test_broker_durable import drain

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="flock and POSIX signals")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def send_durable(url: str, bodies: list[str]) -> None:
    """Send ``bodies`` to ``q`` as durable messages, each accepted (that is, stored)."""
    async with amqp_async.connect(url, reconnect=False) as conn:
        sender = await conn.open_sender("q")
        for body in bodies:
            assert isinstance(await sender.send(Message(body=body, durable=True)), Accepted)


@pytest.mark.anyio
async def test_a_second_broker_on_the_data_dir_is_refused_and_one_after_a_kill_9_finds_the_messages(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    first = BrokerProcess(tmp_path, "--port", "0", "--data-dir", str(data), "--quiet")
    try:
        with anyio.fail_after(TIMEOUT):
            await send_durable(first.url, ["one", "two"])
        second = await anyio.to_thread.run_sync(lambda: run_cli("--port", "0", "--data-dir", str(data)))
        assert second.returncode == 1, second.stderr
        assert one_error_line(second) == (f"--data-dir {data} is in use by another broker (pid {first.process.pid})")
        assert (data / LOCK_FILE).read_text().strip() == str(first.process.pid)
        with anyio.fail_after(TIMEOUT):
            await send_durable(first.url, ["three"])  # the first broker goes on, its store untouched
        first.process.kill()  # kill -9: no chance to release anything itself
        first.process.wait(TIMEOUT)
    finally:
        first.stop()
    after = await anyio.to_thread.run_sync(
        lambda: BrokerProcess(tmp_path, "--port", "0", "--data-dir", str(data), "--quiet")
    )
    try:
        with anyio.fail_after(TIMEOUT):
            assert await drain(after.url, "q") == ["one", "two", "three"]
    finally:
        after.stop()


@pytest.mark.anyio
async def test_the_python_api_raises_data_dir_in_use_and_a_stopped_broker_releases_the_directory(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    with anyio.fail_after(TIMEOUT):
        async with Broker(port=0, data_dir=data) as broker:
            await send_durable(broker.url, ["kept"])
            with pytest.raises(DataDirInUse) as raised:
                async with Broker(port=0, data_dir=data):
                    pytest.fail("a second broker served on the data directory")
            assert isinstance(raised.value, OSError)  # as for a directory that cannot be made
            assert raised.value.pid == os.getpid()  # this process's first broker holds it
            assert str(raised.value) == f"{data} is in use by another broker (pid {os.getpid()})"
        async with Broker(port=0, data_dir=data) as broker:  # the first one stopped: the directory is free
            assert await drain(broker.url, "q") == ["kept"]
