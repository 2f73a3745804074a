"""``send_stream`` from a pipe that stays silent is cancellable: a cancel scope around it ends it promptly.

A file object that is not a regular file is read in a worker thread. The thread's read was not abandoned on
cancellation (``anyio.to_thread.run_sync`` without ``abandon_on_cancel``), so ``fail_after(1)`` around
``send_stream(pipe)`` waited for the read, that is for as long as the pipe's writer wrote nothing: for ever. Now the
read is abandoned to its thread, the delivery is aborted (the broker discards it) and the sender stays usable; the
thread is a daemon, so a read that never ends does not keep the process alive either (``abandon_on_cancel`` alone
left it in anyio's pool, whose threads Python joins at exit).

The peer is the embedded broker; the pipe is ``os.pipe()`` whose writer never writes until the test ends.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest
from broker_serving import serving

import amqp_async
from amqp_async import Message

pytestmark = pytest.mark.anyio

REPO = Path(__file__).resolve().parent.parent
BOUND = 1.0  # the caller's timeout around send_stream
PROMPT = 10.0  # how much longer than BOUND send_stream may take to end (a loaded machine)
#: When the pipe's writer end is closed whatever happens, so that a read that was not abandoned ends (the test
#: then fails on the time it took, rather than hang).
WRITER_CLOSED_AFTER = BOUND + PROMPT + 5.0


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def test_a_timeout_around_send_stream_ends_a_read_from_a_silent_pipe() -> None:
    read_fd, write_fd = os.pipe()
    source: Any = os.fdopen(read_fd, "rb")
    closed = threading.Lock()

    def close_writer() -> None:
        if closed.acquire(blocking=False):
            os.close(write_fd)  # the read ends (end of the pipe), and its worker thread with it

    closer = threading.Timer(WRITER_CLOSED_AFTER, close_writer)
    closer.start()
    try:
        async with serving() as broker, amqp_async.connect(broker.url) as conn:
            sender = await conn.open_stream_sender("piped")
            with anyio.fail_after(WRITER_CLOSED_AFTER + 30):
                started = anyio.current_time()
                with pytest.raises(TimeoutError):
                    with anyio.fail_after(BOUND):
                        await sender.send_stream(source, Message(subject="silent"))
                # before: only once the pipe ended (WRITER_CLOSED_AFTER), the read holding the cancellation
                assert anyio.current_time() - started < BOUND + PROMPT
                # the sender is usable, and the aborted delivery was discarded: only the next message arrives
                assert await sender.send_stream(b"after", Message(subject="after")) == amqp_async.Accepted()
                async with conn.open_receiver("piped") as receiver:
                    delivery = await receiver.receive()
                    assert delivery.message.subject == "after"
                    await delivery.accept()
                    assert await receiver.receive_many(1, timeout=0.5) == []
    finally:
        closer.cancel()
        close_writer()
        source.close()


_SILENT_PIPE_PROGRAM = """\
import os, sys
import anyio, amqp_async
from amqp_async import Message
from amqp_async.broker import Broker

read_fd, write_fd = os.pipe()  # the writer end stays open: the read never ends


async def main() -> None:
    async with Broker(port=0) as broker, amqp_async.connect(broker.url) as conn:
        sender = await conn.open_stream_sender("piped")
        with anyio.move_on_after(0.5):
            await sender.send_stream(os.fdopen(read_fd, "rb"), Message(subject="silent"))
    print("cancelled", flush=True)


anyio.run(main, backend=sys.argv[1])
"""


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_read_abandoned_on_a_silent_pipe_does_not_keep_the_process_alive(backend: str) -> None:
    """The abandoned read blocks its thread for as long as the pipe stays open: a thread of anyio's pool (not a
    daemon) kept the process from exiting once its work was done (on asyncio: Python joins it at exit)."""
    done = subprocess.run(
        [sys.executable, "-c", _SILENT_PIPE_PROGRAM, backend],
        capture_output=True,
        timeout=30,  # before (with anyio's worker thread): the process never exited
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])},
    )
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode().split() == ["cancelled"]
