"""A misbehaving AMQP "server" for client tests: a TCP listener on a free port of 127.0.0.1, run as tasks of the
test's own event loop, that serves each accepted connection with a script (an async function of the connection).

The script writes whatever bytes it likes (:meth:`Peer.send`), waits for the client's input
(:meth:`Peer.wait_received`), and returns; the server then either closes the socket (``linger=False``) or keeps it
open, silent, until the client closes its side (``linger=True``: the client alone must end the connection).
For every connection the server records what the client sent and whether (and when) the client closed its side,
so that a test can check that no socket of the client was left open.

Scripts for the common cases: :func:`open_then` (answer the AMQP header and open, then do more), :func:`replay`
(send recorded server chunks, each after the client sent what preceded it in the recording).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import anyio
import anyio.abc

try:
    from frames import AMQP_HEADER, frame
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.frames import AMQP_HEADER, frame

from amqp_async.codec.performatives import Open

__all__ = ["Peer", "ScriptedServer", "client_tasks", "open_then", "replay"]

Script = Callable[["Peer"], Awaitable[None]]


def client_tasks() -> list[asyncio.Task[Any]]:
    """The background tasks of the awaitable client's connections still running on this loop (asyncio)."""
    return [task for task in asyncio.all_tasks() if task.get_coro().__qualname__ == "Connection._run"]  # type: ignore[union-attr]


class Peer:
    """One accepted connection, as the script sees it."""

    def __init__(self, stream: anyio.abc.ByteStream, index: int) -> None:
        self.stream = stream
        self.index = index  # 0 for the first connection the server accepted
        self.received = bytearray()
        self.closed = anyio.Event()  # the client closed (or reset) its side, or the server closed the socket
        self._input = anyio.Event()

    async def send(self, data: bytes) -> None:
        """Write ``data`` (a client that is gone makes this a no-op: the script goes on)."""
        if data:
            try:
                await self.stream.send(data)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                pass

    async def wait_received(self, count: int, timeout: float) -> bool:
        """Wait until the client has sent at least ``count`` bytes in all; False after ``timeout`` seconds or
        once the client closed its side without doing so."""
        with anyio.move_on_after(timeout):
            while len(self.received) < count and not self.closed.is_set():
                self._input = anyio.Event()
                await self._input.wait()
        return len(self.received) >= count

    async def _read(self) -> None:
        try:
            while True:
                data = await self.stream.receive()
                self.received += data
                self._input.set()
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            pass
        self.closed.set()
        self._input.set()


class ScriptedServer:
    """Serve each connection with ``script``; an async context manager (the listener closes at its end).

    Args:
        script: the async function run for each accepted connection.
        linger: after the script, keep the socket open until the client closes it (True), or close it (False).

    Attributes:
        peers: the accepted connections, in order.
    """

    def __init__(self, script: Script, *, linger: bool = False) -> None:
        self.script = script
        self.linger = linger
        self.peers: list[Peer] = []
        self.port = 0
        self._group: anyio.abc.TaskGroup | None = None
        self._listener: anyio.abc.SocketListener | None = None

    @property
    def url(self) -> str:
        return f"amqp://127.0.0.1:{self.port}"

    @property
    def accepted(self) -> int:
        return len(self.peers)

    async def __aenter__(self) -> ScriptedServer:
        listener = self._listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
        self.port = int(listener.extra(anyio.abc.SocketAttribute.local_port))
        self._group = anyio.create_task_group()
        await self._group.__aenter__()
        self._group.start_soon(listener.serve, self._serve)
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        assert self._group is not None
        self._group.cancel_scope.cancel()
        await self._group.__aexit__(None, None, None)
        if self._listener is not None:
            await self._listener.aclose()  # serve() leaves it open: the garbage collector would close it, some day

    async def all_clients_closed(self, timeout: float) -> bool:
        """Wait until every connection is closed (with ``linger``: by the client); False if one is still open
        after ``timeout``."""
        with anyio.move_on_after(timeout):
            for peer in self.peers:
                await peer.closed.wait()
            return True
        return False

    async def _serve(self, stream: anyio.abc.ByteStream) -> None:
        peer = Peer(stream, len(self.peers))
        self.peers.append(peer)
        try:
            async with stream, anyio.create_task_group() as group:
                group.start_soon(peer._read)
                await self.script(peer)
                if self.linger:
                    await peer.closed.wait()
                group.cancel_scope.cancel()
        finally:
            peer.closed.set()


def open_then(*after: bytes, container_id: str = "scripted", wait_open: bool = True) -> Script:
    """A script for a client without SASL: answer its AMQP header with ours and an open, then send ``after``
    (each item once the client said more: the begin before the first, and so on), then return."""

    async def script(peer: Peer) -> None:
        await peer.wait_received(9, timeout=5.0)  # the header (8 bytes) and at least the start of the open
        await peer.send(AMQP_HEADER + (frame(Open(container_id=container_id)) if wait_open else b""))
        for data in after:
            await peer.send(data)

    return script


def replay(chunks: Sequence[tuple[int, bytes]], *, pace: float = 0.5) -> Script:
    """A script sending recorded server output: each ``(client_bytes, data)`` chunk once the client has sent
    ``client_bytes`` bytes in all (as it had in the recording), or after ``pace`` seconds if it does not."""

    async def script(peer: Peer) -> None:
        for client_bytes, data in chunks:
            await peer.wait_received(client_bytes, timeout=pace)
            await peer.send(data)

    return script
