"""A connection reset by the peer while a large message is being written: one ``ConnectionLost``, no log noise.

On CPython 3.11's asyncio transport (which copies what the kernel does not take) the driver hands a large output
over a piece (256 KiB) at a time (``DirectStream._write_held``). When the peer's reset had arrived but the event
loop had not read it yet, the first piece's ``send`` failed, the transport closed itself and held nothing, and the
loop went on handing it every other piece: it dropped each, and asyncio logged "socket.send() raised exception."
for each from the fifth on (75 lines for a 12 MB message, hundreds for the CLI's streamed bodies). Now the pieces
left are dropped at once, the write raises, and the send fails with ``ConnectionLost``.

The peer is python-qpid-proton behind a relay (a thread, plain sockets) that resets the client's side on demand
(SO_LINGER 0). The test blocks the event loop while the reset arrives, so that the next write meets it first.
"""

from __future__ import annotations

import logging
import select
import socket
import struct
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import anyio
import pytest

import amqp_async
from amqp_async import ConnectionLost, DeliveryInDoubt, Message
from amqp_async.errors import IO_ERROR

pytest.importorskip("proton", reason="python-qpid-proton is a test dependency (the independent peer)")
from proton.handlers import MessagingHandler
from proton_peer import proton_server

pytestmark = pytest.mark.anyio

BIG = b"x" * (12 << 20)  # far more than the kernel takes at once: many pieces
TIMEOUT = 30.0


@pytest.fixture
def anyio_backend() -> tuple[str, dict[str, Any]]:
    # asyncio's own loop: the transport that copies (on 3.12+ and uvloop the transport keeps views: no pieces)
    return ("asyncio", {"use_uvloop": False})


class _Receiver(MessagingHandler):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__(prefetch=10)


@contextmanager
def _resetting_relay(port: int) -> Iterator[tuple[str, threading.Event, threading.Event]]:
    """A relay (a thread) to ``127.0.0.1:port``; yields its URL, an event that resets the client's connection
    (a TCP RST: SO_LINGER 0, then close), and an event set once it did."""
    listener = socket.create_server(("127.0.0.1", 0))
    reset, done, stop = threading.Event(), threading.Event(), threading.Event()

    def relay() -> None:
        client, _ = listener.accept()
        upstream = socket.create_connection(("127.0.0.1", port))
        ends = {client: upstream, upstream: client}
        try:
            while not stop.is_set() and not reset.is_set():
                readable, _, _ = select.select(list(ends), [], [], 0.05)
                for sock in readable:
                    data = sock.recv(1 << 16)
                    if not data:
                        return
                    ends[sock].sendall(data)
            if reset.is_set():
                client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        finally:
            client.close()
            upstream.close()
            done.set()

    thread = threading.Thread(target=relay, daemon=True)
    thread.start()
    try:
        yield f"amqp://127.0.0.1:{listener.getsockname()[1]}", reset, done
    finally:
        stop.set()
        thread.join(10)
        listener.close()


async def test_a_reset_met_by_a_large_write_is_one_connection_lost_without_log_noise(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="asyncio")
    with proton_server(_Receiver()) as url, anyio.fail_after(TIMEOUT):
        relay = _resetting_relay(int(url.rsplit(":", 1)[1]))
        with relay as (relayed, reset, done):
            conn = await amqp_async.connect(relayed, reconnect=False)
            sender = await conn.open_sender("big")
            await sender.send(Message(body=b"first"))
            reset.set()
            assert done.wait(10)
            time.sleep(0.3)  # the loop blocked: the reset is in the kernel, the transport does not know yet
            with pytest.raises(DeliveryInDoubt) as raised:  # handed to the transport: it may have gone out
                await sender.send(Message(body=BIG))
            await conn.close()
    noise = [record.getMessage() for record in caplog.records if "raised exception" in record.getMessage()]
    assert noise == []  # before: "socket.send() raised exception." once per piece from the fifth on (44)
    assert isinstance(raised.value.__cause__, ConnectionLost)
    assert raised.value.condition == IO_ERROR


async def test_the_direct_writer_drops_what_it_holds_once_the_transport_broke() -> None:
    """Under the client: the write that meets the reset raises, nothing stays held (drain has nothing to hand a
    dead transport: it raises at once rather than loop), and the transport was handed no piece after it broke."""
    from amqp_async.io.direct_stream import DirectStream

    listener = socket.create_server(("127.0.0.1", 0))
    client = await anyio.connect_tcp("127.0.0.1", listener.getsockname()[1])
    peer, _ = listener.accept()
    writer = DirectStream.of(client)
    assert writer is not None
    transport = client._transport  # type: ignore[attr-defined]
    handed: list[int] = []
    write = transport.write
    transport.write = lambda data: (handed.append(len(data)), write(data))  # counts the pieces handed over
    peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    peer.close()
    time.sleep(0.3)  # the loop blocked: the reset is in the kernel, the transport does not know yet
    with anyio.fail_after(TIMEOUT):
        try:
            writer.write([BIG])
        except anyio.BrokenResourceError:
            pass  # the transport broke on the first piece (3.11's): raised at once
        assert writer._held is None
        with pytest.raises(anyio.BrokenResourceError):
            await writer.drain()
    assert len(handed) <= 1  # before: all 48 pieces of 256 KiB, each dropped
    await client.aclose()
    listener.close()
