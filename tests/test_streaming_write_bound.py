"""What the socket's transport holds stays bounded while a large body is streamed to a peer slower than the producer.

On CPython 3.12 and 3.13, asyncio's selector transport does not pause its protocol in ``writelines`` (its
``write`` does): the driver's direct writer (``DirectStream.drain``) waits for that pause to end, so it returned at
once, and the driver handed the transport the next output, and the next. Against a peer slower than the producer
the transport held tens of MiB: 93 MiB while a 96 MiB body was streamed through a 30 MB/s relay, and the CLI's
``send --size`` of 96 MiB peaked at 76-78 MiB RSS on a loaded CI run (29-33 otherwise). Now the writer waits until
the transport is below its high-water mark again, whatever the Python.

Python 3.11's asyncio transport (which copies) is fed a piece at a time, and uvloop's pauses its protocol itself:
these tests pass there before the fix too; they fail on 3.12 and 3.13 without it.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import anyio
import anyio.abc
import pytest
from broker_serving import serving

import amqp_async
from amqp_async import Message
from amqp_async.io.direct_stream import DirectStream

MiB = 1 << 20
TIMEOUT = 60.0
#: What the transport may hold at most: the engine's output the stream sender lets queue (1 MiB) plus a batch of
#: frames (its buffer, 1 MiB by default) and change. Before the fix it grew with the body: 19.9 MiB of the 24 here.
TRANSPORT_BOUND = 4 * MiB
ASYNCIO_LOOPS = [
    pytest.param(("asyncio", {}), id="asyncio"),
    pytest.param(("asyncio", {"use_uvloop": True}), id="uvloop"),
]


def test_drain_waits_while_the_transport_holds_what_a_gathered_write_left() -> None:
    """A write of several buffers (``writelines`` under it) that the kernel does not take whole: drain waits for
    the peer to read (it returned at once on 3.12 and 3.13)."""

    async def main() -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 16)  # inherited: the peer's kernel takes little
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        client = await anyio.connect_tcp("127.0.0.1", listener.getsockname()[1])
        peer, _ = listener.accept()  # it reads nothing
        raw = client.extra(anyio.abc.SocketAttribute.raw_socket)
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 16)  # and ours takes little
        writer = DirectStream.of(client)
        assert writer is not None
        writer.write([b"head", bytes(8 * MiB), b"head", bytes(8 * MiB)])
        with anyio.move_on_after(1.0) as waited:
            await writer.drain()
        assert waited.cancelled_caught, "drain returned while the transport held megabytes the peer did not read"
        await client.aclose()
        peer.close()
        listener.close()

    anyio.run(main, backend="asyncio")


@contextlib.contextmanager
def _slow_relay(port: int, rate: float = 8e6) -> Iterator[int]:
    """A relay (threads, plain sockets) to ``127.0.0.1:port``, yielding its port: the client's bytes go on at
    ``rate`` bytes a second (16 KiB reads), the peer's at once. Threads, so that it is slow whatever the event loop
    of the test does."""
    listener = socket.create_server(("127.0.0.1", 0))
    sockets: list[socket.socket] = [listener]

    def pump(source: socket.socket, sink: socket.socket, slow: bool) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(16384):
                sink.sendall(data)
                if slow:
                    time.sleep(len(data) / rate)
            sink.shutdown(socket.SHUT_WR)

    def serve() -> None:
        with contextlib.suppress(OSError):
            client, _ = listener.accept()
            upstream = socket.create_connection(("127.0.0.1", port))
            sockets.extend((client, upstream))
            threading.Thread(target=pump, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=pump, args=(upstream, client, False), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield listener.getsockname()[1]
    finally:
        for sock in sockets:
            sock.close()


@pytest.mark.parametrize("anyio_backend", ASYNCIO_LOOPS)
@pytest.mark.anyio
async def test_a_body_streamed_to_a_slow_peer_keeps_the_transport_bounded() -> None:
    body = 24 * MiB
    part = b"x" * (256 << 10)
    async with serving() as broker, anyio.create_task_group() as group:
        with _slow_relay(int(broker.url.rsplit(":", 1)[1])) as port:
            async with amqp_async.connect(f"amqp://127.0.0.1:{port}") as conn:
                direct = conn._driver._direct if conn._driver is not None else None
                assert direct is not None  # an asyncio TCP stream: the driver writes through its transport
                transport = direct._transport
                sender = await conn.open_stream_sender("slow")
                most = 0

                async def watch() -> None:
                    nonlocal most
                    while True:
                        most = max(most, transport.get_write_buffer_size())
                        await anyio.sleep(0.001)

                group.start_soon(watch)
                with anyio.fail_after(TIMEOUT):
                    async with sender.open_stream(Message(subject="big"), body_size=body) as stream:
                        for offset in range(0, body, len(part)):
                            await stream.write(part[: min(len(part), body - offset)])
                assert stream.outcome == amqp_async.Accepted()
        group.cancel_scope.cancel()
    assert most <= TRANSPORT_BOUND, f"the transport held {most / MiB:.1f} MiB"  # before (3.12, 3.13): 19.9 MiB
