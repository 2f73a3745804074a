"""A TCP relay to a local peer that slows the peer's bytes to the client down, for tests of what a slow network
shows: a message of many frames arriving over many reads, an answer that comes after a cancellation.

Run as tasks of the test's own event loop (asyncio or trio); the client's bytes go to the peer at once.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import anyio
import anyio.abc

__all__ = ["slow_relay"]

_QUIET = (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError)


@contextlib.asynccontextmanager
async def slow_relay(port: int, *, delay: list[float] | None = None, piece: int | None = None) -> AsyncIterator[str]:
    """A relay to ``127.0.0.1:port``; yields its URL. The peer's bytes reach the client ``delay[0]`` seconds late
    (read as each chunk comes, so a test may change it), or, with ``piece``, that many bytes at a time a
    millisecond apart (a trickle)."""

    async def forward(source: anyio.abc.SocketStream, sink: anyio.abc.SocketStream, slow: bool) -> None:
        send, receive = anyio.create_memory_object_stream[tuple[float, bytes]](1000)

        async def deliver() -> None:
            with contextlib.suppress(*_QUIET):
                async for due, data in receive:
                    await anyio.sleep(max(0.0, due - anyio.current_time()))
                    await sink.send(data)
                    if slow and piece is not None:
                        await anyio.sleep(0.001)

        async with anyio.create_task_group() as group:
            group.start_soon(deliver)
            async with send:
                with contextlib.suppress(*_QUIET):
                    while True:
                        data = await source.receive(piece if slow and piece is not None else 65536)
                        late = delay[0] if slow and delay is not None else 0.0
                        await send.send((anyio.current_time() + late, data))

    async def relay(client: anyio.abc.SocketStream) -> None:
        async with client, await anyio.connect_tcp("127.0.0.1", port) as upstream, anyio.create_task_group() as group:
            group.start_soon(forward, client, upstream, False)
            await forward(upstream, client, True)
            group.cancel_scope.cancel()

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    async with listener, anyio.create_task_group() as group:
        group.start_soon(listener.serve, relay)
        yield f"amqp://127.0.0.1:{listener.extra(anyio.abc.SocketAttribute.local_port)}"
        group.cancel_scope.cancel()
