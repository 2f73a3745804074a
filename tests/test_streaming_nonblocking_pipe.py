"""``send_stream`` from a file object in non-blocking mode sends the whole body, not what had come so far.

A file in non-blocking mode with nothing to read yet gives None from ``read`` (io's ``RawIOBase.read``), not b"".
The body's reader took None for the end of the body: the message went complete with the bytes that had come, and
the broker accepted it (1,000 bytes of a pipe's 5,000, silently). Now the reader waits for the file to be readable
and reads again; a cancel scope around the wait still ends it at once.

The peer is the embedded broker; the pipe is ``os.pipe()`` with its reading end set non-blocking.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import anyio
import pytest
from broker_serving import serving

import amqp_async
from amqp_async import Message

pytestmark = pytest.mark.anyio

PIECES = 5
PIECE = b"x" * 1000
TIMEOUT = 30.0


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _nonblocking_pipe() -> tuple[Any, int]:
    read_fd, write_fd = os.pipe()
    os.set_blocking(read_fd, False)
    return os.fdopen(read_fd, "rb"), write_fd


async def test_a_nonblocking_pipe_is_sent_whole() -> None:
    source, write_fd = _nonblocking_pipe()

    def write_slowly() -> None:
        for _ in range(PIECES):
            os.write(write_fd, PIECE)
            time.sleep(0.1)  # the reader finds nothing between two pieces
        os.close(write_fd)

    writer = threading.Thread(target=write_slowly)
    try:
        async with serving() as broker, amqp_async.connect(broker.url) as conn:
            sender = await conn.open_stream_sender("piped")
            with anyio.fail_after(TIMEOUT):
                writer.start()
                assert await sender.send_stream(source, Message(subject="nb")) == amqp_async.Accepted()
                async with conn.open_stream_receiver("piped") as receiver:
                    delivery = await receiver.receive()
                    body = b"".join([bytes(chunk) async for chunk in delivery.body_chunks()])
                    await delivery.accept()
        assert body == PIECE * PIECES  # before: the first piece only
    finally:
        writer.join(TIMEOUT)
        source.close()


async def test_a_timeout_ends_a_wait_on_a_silent_nonblocking_pipe() -> None:
    source, write_fd = _nonblocking_pipe()
    try:
        async with serving() as broker, amqp_async.connect(broker.url) as conn:
            sender = await conn.open_stream_sender("piped")
            with anyio.fail_after(TIMEOUT):
                with pytest.raises(TimeoutError), anyio.fail_after(1.0):
                    await sender.send_stream(source, Message(subject="silent"))
                assert await sender.send_stream(b"after", Message(subject="after")) == amqp_async.Accepted()
    finally:
        os.close(write_fd)
        source.close()
