"""The driver's direct path (`amqp_async.io.direct_stream.DirectStream`): which streams get it, that what it writes
arrives whole and in order, that input reaches the handler whole and then the end of the stream is seen, that the
handler's failure is raised where a task can see it, and that a lost connection is an error, not a hang."""

from __future__ import annotations

import socket
import ssl
from pathlib import Path
from typing import Any

import anyio
import anyio.streams.tls
import pytest

from amqp_async.io.direct_stream import DirectStream

try:
    from tls_certs import make_ca, make_cert, openssl_available
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.tls_certs import make_ca, make_cert, openssl_available

ASYNCIO_LOOPS = [
    pytest.param(("asyncio", {}), id="asyncio"),
    pytest.param(("asyncio", {"use_uvloop": True}), id="uvloop"),
]


async def _pair() -> tuple[anyio.abc.SocketStream, anyio.abc.SocketStream, Any]:
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    accepted: list[anyio.abc.SocketStream] = []

    async def accept() -> None:
        async with anyio.create_task_group() as group:

            async def handler(stream: anyio.abc.SocketStream) -> None:
                accepted.append(stream)
                group.cancel_scope.cancel()

            await listener.serve(handler)

    async with anyio.create_task_group() as group:
        group.start_soon(accept)
        client = await anyio.connect_tcp("127.0.0.1", port)
    return client, accepted[0], listener


#: 12 MB in 40 uneven writes: far more than the kernel's socket buffers take at once.
MANY_MEGABYTES = [bytes([n]) * (300_000 + n) for n in range(40)]


async def _close(*resources: Any) -> None:
    for resource in resources:
        await resource.aclose()


async def _read(stream: anyio.abc.SocketStream, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        data += await stream.receive()
    return bytes(data)


@pytest.mark.parametrize("loop", ASYNCIO_LOOPS)
def test_writes_arrive_whole_and_in_order(loop: tuple[str, dict[str, Any]]) -> None:
    big = bytes(range(256)) * 8192  # 2 MiB: more than the socket takes at once
    buffers = [b"head-1", memoryview(big), b"head-2", bytearray(b"tail")]
    expected = b"".join(buffers)

    async def main() -> None:
        client, server, listener = await _pair()
        writer = DirectStream.of(client)
        assert writer is not None
        assert writer.idle()
        with anyio.fail_after(10):
            async with anyio.create_task_group() as group:
                received: list[bytes] = []

                async def read() -> None:
                    received.append(await _read(server, len(expected) * 2))

                group.start_soon(read)
                writer.write(buffers)
                await writer.drain()  # returns once nothing is held and the transport is below its high-water mark
                while not writer.idle():  # and the reader takes the rest (bounded by fail_after)
                    await anyio.sleep(0.001)
                writer.write([b"".join(buffers)])
                await writer.drain()
        assert received[0] == expected * 2
        await _close(client, server, listener)

    anyio.run(main, backend=loop[0], backend_options=loop[1])


def test_a_transport_that_copies_is_handed_a_piece_at_a_time() -> None:
    """CPython 3.11's transport copies what the kernel does not take into one bytearray, reallocated as it grows
    and shrinks (a sender grew by tens of MiB that way): while the peer reads nothing, it holds at most a piece
    (256 KiB) beyond its low-water mark (64 KiB), the rest is kept by reference; all of it arrives in order once
    the peer reads."""
    expected = b"".join(MANY_MEGABYTES)

    async def main() -> None:
        client, server, listener = await _pair()
        writer = DirectStream.of(client)
        assert writer is not None
        if writer._gather:
            pytest.skip("this Python's transport keeps views of what it is given (3.12+), it copies nothing")
        transport = client._transport  # type: ignore[attr-defined]
        for stream, option in ((client, socket.SO_SNDBUF), (server, socket.SO_RCVBUF)):
            # small kernel buffers, so that the kernel cannot take the 12 MB whatever its autotuning did
            stream.extra(anyio.abc.SocketAttribute.raw_socket).setsockopt(socket.SOL_SOCKET, option, 1 << 16)
        writer.write(MANY_MEGABYTES)
        held_by_transport = transport.get_write_buffer_size()
        assert 0 < held_by_transport <= (256 + 64) << 10  # the peer reads nothing yet: the kernel's buffers are full
        assert not writer.idle()
        with anyio.fail_after(10):
            async with anyio.create_task_group() as group:
                received: list[bytes] = []

                async def read() -> None:
                    received.append(await _read(server, len(expected)))

                group.start_soon(read)
                most = 0

                async def watch() -> None:
                    nonlocal most
                    while not received:
                        most = max(most, transport.get_write_buffer_size())
                        await anyio.sleep(0)

                group.start_soon(watch)
                await writer.drain()  # returns once nothing is held and the transport is below its high-water mark
        assert received[0] == expected
        assert writer.idle()  # every byte was read, so the transport holds none (drain alone does not say that)
        assert writer._held is None  # the emptied queue is let go: an idle connection keeps none
        assert most <= (256 + 64) << 10
        await _close(client, server, listener)

    anyio.run(main, backend="asyncio")


@pytest.mark.parametrize("loop", ASYNCIO_LOOPS)
def test_output_goes_out_with_no_task_waiting_on_it(loop: tuple[str, dict[str, Any]]) -> None:
    """What the transport did not take at once goes out as the peer reads, though nobody awaits ``drain`` (the
    driver's ``write_now`` hands a whole message over from a callback and returns): on a transport that copies,
    the pieces held back follow as it drains."""
    expected = b"".join(MANY_MEGABYTES)

    async def main() -> None:
        client, server, listener = await _pair()
        writer = DirectStream.of(client)
        assert writer is not None
        assert writer.deliver_input(lambda data: None) == b""
        writer.write(MANY_MEGABYTES)
        with anyio.fail_after(10):
            assert await _read(server, len(expected)) == expected
        assert writer.idle()
        await _close(client, server, listener)

    anyio.run(main, backend=loop[0], backend_options=loop[1])


@pytest.mark.parametrize("loop", ASYNCIO_LOOPS)
def test_a_lost_connection_is_an_error_not_a_hang(loop: tuple[str, dict[str, Any]]) -> None:
    async def main() -> None:
        client, server, listener = await _pair()
        writer = DirectStream.of(client)
        assert writer is not None
        await server.aclose()
        with anyio.fail_after(10), pytest.raises(anyio.BrokenResourceError):
            for _ in range(10_000):  # the peer's reset arrives after a write or two
                writer.write([bytes(65536)])
                await writer.drain()
        await client.aclose()
        await listener.aclose()

    anyio.run(main, backend=loop[0], backend_options=loop[1])


@pytest.mark.parametrize("loop", ASYNCIO_LOOPS)
def test_input_goes_to_the_handler_whole_then_the_end_of_the_stream(loop: tuple[str, dict[str, Any]]) -> None:
    chunks = [bytes([n]) * (1000 + n * 7919) for n in range(50)]  # about 10 MB in uneven writes

    async def main() -> None:
        client, server, listener = await _pair()
        await server.send(b"before")  # queued by anyio's protocol before the handler is installed: handed back
        client._transport.resume_reading()  # type: ignore[attr-defined]  # (anyio reads only inside receive())
        await anyio.sleep(0.05)
        reader = DirectStream.of(client)
        assert reader is not None
        received = bytearray()
        received += reader.deliver_input(received.extend)
        assert bytes(received) == b"before"

        async def write() -> None:
            for chunk in chunks:
                await server.send(chunk)
            await server.aclose()  # a clean close: the end of the stream

        with anyio.fail_after(10):
            async with anyio.create_task_group() as group:
                group.start_soon(write)
                with pytest.raises(anyio.EndOfStream):
                    await reader.wait_end()
        assert bytes(received) == b"before" + b"".join(chunks)
        await client.aclose()
        await listener.aclose()

    anyio.run(main, backend=loop[0], backend_options=loop[1])


def test_reads_are_small_until_they_come_back_full() -> None:
    # asyncio's transport reads into a fresh buffer of its max_size: at 256 KiB that is an mmap, an mremap and a
    # munmap per read, however small. The tap reads 64 KiB at a time, more only while reads fill that (a large
    # message), and goes back to small reads once they are small again.
    async def main() -> None:
        client, server, listener = await _pair()
        client._transport.resume_reading()  # type: ignore[attr-defined]
        reader = DirectStream.of(client)
        assert reader is not None
        transport: Any = client._transport  # type: ignore[attr-defined]
        sizes: list[int] = []
        received = bytearray()

        def handle(data: bytes) -> None:
            sizes.append(len(data))
            received.extend(data)

        async def until_received(total: int) -> None:
            while len(received) < total:
                await anyio.sleep(0.005)

        reader.deliver_input(handle)
        assert transport.max_size == 65536
        with anyio.fail_after(10):
            await server.send(b"small")
            await until_received(5)
            assert transport.max_size == 65536
            big = bytes(4 << 20)
            await server.send(big)
            await until_received(5 + len(big))
            assert max(sizes) > 65536  # reads grew once they came back full
            await server.send(b"small again")
            await until_received(5 + len(big) + 11)
            assert sizes[-1] == 11
            assert transport.max_size == 65536
        assert bytes(received) == b"small" + big + b"small again"
        await _close(client, server, listener)

    anyio.run(main, backend="asyncio")


@pytest.mark.parametrize("loop", ASYNCIO_LOOPS)
def test_what_the_handler_raises_is_raised_by_wait_end_and_reading_stops(loop: tuple[str, dict[str, Any]]) -> None:
    async def main() -> None:
        client, server, listener = await _pair()
        reader = DirectStream.of(client)
        assert reader is not None
        calls: list[bytes] = []

        def handler(data: bytes) -> None:
            calls.append(data)
            raise ValueError("the owner failed")

        reader.deliver_input(handler)
        await server.send(b"one")
        with anyio.fail_after(10), pytest.raises(ValueError, match="the owner failed"):
            await reader.wait_end()
        await server.send(b"two")
        await anyio.sleep(0.05)
        assert calls == [b"one"]  # nothing more is read once the handler failed
        await _close(client, server, listener)

    anyio.run(main, backend=loop[0], backend_options=loop[1])


@pytest.mark.parametrize("loop", ASYNCIO_LOOPS)
def test_wait_end_returns_on_interrupt_and_ends_when_the_stream_is_closed_here(
    loop: tuple[str, dict[str, Any]],
) -> None:
    async def main() -> None:
        client, server, listener = await _pair()
        reader = DirectStream.of(client)
        assert reader is not None
        reader.deliver_input(lambda data: None)

        async def soon(action: Any) -> None:
            await anyio.sleep(0.05)
            await action()

        async def interrupt() -> None:
            reader.interrupt()

        with anyio.fail_after(10):
            async with anyio.create_task_group() as group:
                group.start_soon(soon, interrupt)
                await reader.wait_end()  # returns: interrupted
            async with anyio.create_task_group() as group:
                group.start_soon(soon, client.aclose)
                with pytest.raises((anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream)):
                    await reader.wait_end()
        await server.aclose()
        await listener.aclose()

    anyio.run(main, backend=loop[0], backend_options=loop[1])


def test_streams_without_a_synchronous_transport_get_none() -> None:
    """trio's streams, and TLS over any backend, are written through anyio's ``send``."""

    async def main() -> None:
        client, server, listener = await _pair()
        assert DirectStream.of(client) is None
        await _close(client, server, listener)

    anyio.run(main, backend="trio")


@pytest.mark.skipif(not openssl_available(), reason="the openssl command makes the test certificates")
def test_a_tls_stream_gets_none(tmp_path: Path) -> None:
    ca = make_ca(tmp_path, "ca")
    cert = make_cert(tmp_path, "server", ca, "localhost", san=["DNS:localhost"])
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.load_cert_chain(cert.cert, cert.key)
    client_context = ssl.create_default_context(cafile=ca.cert)

    async def main() -> None:
        listener = anyio.streams.tls.TLSListener(
            await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0), server_context
        )
        port = listener.listener.extra(anyio.abc.SocketAttribute.local_port)  # type: ignore[attr-defined]

        async def handler(stream: Any) -> None:
            await stream.aclose()

        async with anyio.create_task_group() as group:
            group.start_soon(listener.serve, handler)
            stream = await anyio.connect_tcp("127.0.0.1", port, ssl_context=client_context, tls_hostname="localhost")
            assert DirectStream.of(stream) is None
            await stream.aclose()
            group.cancel_scope.cancel()

    anyio.run(main)
