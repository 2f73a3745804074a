"""The driver's fast path on anyio's asyncio TCP streams: synchronous, gathered writes and reads that do not
toggle the socket's registration.

Writing. anyio's ``ByteStream.send`` takes one buffer and yields to the event loop after it. The driver's output is
a list of buffers (frame heads, and large message payloads by reference, uncopied); sent one ``send`` at a time, a
transfer's few-byte head goes out as a TCP segment of its own before its payload, and each segment costs the
sender (and on loopback, the receiver) a trip through the network stack. Under anyio's asyncio backend a TCP
stream is an asyncio transport (uvloop's, when installed) whose ``write`` and ``writelines`` are synchronous: they
hand the bytes to the kernel, and buffer, in order, what it does not take yet. :class:`DirectStream` writes the
whole list through it in one call (one ``writev`` where the transport gathers), and waits afterwards as anyio's
``send`` does: until the transport's buffer has gone to the kernel. The same synchronous write lets an owner hand
output to the socket from inside a long callback (``EngineDriver.write_now``).

Reading. anyio's ``receive`` resumes the transport's reading before it waits and pauses it after each chunk, so
that data it is not asked for stays in the kernel; on asyncio's own loop each of those is an ``epoll_ctl``
system call, two per read, which on a request/response exchange cost as much as the read itself.
:meth:`DirectStream.receive` leaves reading on and takes what the transport has queued, without yielding when
there is some: the driver's reader hands each read to the engine before it asks for more, and the loop adds to
the queue only when that reader waits, so the queue holds at most what one turn of the loop reads. The peer's
input is bounded by the protocol itself (credit and session windows; a peer that floods is a protocol error),
and past :data:`_PAUSE_ABOVE` queued bytes reading is paused anyway.

This reaches under anyio's public API (its stream's ``_transport`` and ``_protocol``). :meth:`DirectStream.of`
checks every piece it uses and returns None when anything differs (trio, TLS streams, another anyio), and the
driver then uses ``send`` and ``receive`` as before.
"""

from __future__ import annotations

import asyncio
import sys
from collections import deque
from collections.abc import Sequence
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel

__all__ = ["DirectStream"]

Buffer = bytes | bytearray | memoryview

# Reading pauses while more than this waits in the transport's queue (a safety net: see the module's docstring).
_PAUSE_ABOVE = 4 << 20


def _gathers(transport: Any) -> bool:
    """Whether ``transport.writelines`` writes a list without joining it first: uvloop's does (one ``writev``),
    and CPython's since 3.12 (``sendmsg``); 3.11's joins the buffers into one copy, so we write them one by one."""
    return type(transport).__module__.startswith("uvloop") or sys.version_info >= (3, 12)


class DirectStream:
    """Reads from and writes to the asyncio transport under an anyio TCP stream (see the module's docstring)."""

    __slots__ = ("_event", "_gather", "_paused", "_protocol", "_queue", "_readable", "_transport")

    def __init__(self, transport: Any, protocol: Any) -> None:
        self._transport = transport
        self._protocol = protocol
        self._event: asyncio.Event = protocol.write_event
        self._readable: asyncio.Event = protocol.read_event
        self._queue: deque[bytes] = protocol.read_queue
        self._gather = _gathers(transport)
        self._paused = True  # anyio keeps reading paused between its receives

    @classmethod
    def of(cls, stream: anyio.abc.ByteStream) -> DirectStream | None:
        """The writer for ``stream`` if it is anyio's asyncio TCP stream as we know it; else None."""
        if type(stream).__module__ != "anyio._backends._asyncio" or type(stream).__name__ != "SocketStream":
            return None
        transport = getattr(stream, "_transport", None)
        protocol = getattr(stream, "_protocol", None)
        methods = ("write", "writelines", "get_write_buffer_size", "is_closing", "pause_reading", "resume_reading")
        if transport is None or not all(callable(getattr(transport, name, None)) for name in methods):
            return None
        events = ("write_event", "read_event")
        if not all(isinstance(getattr(protocol, name, None), asyncio.Event) for name in events):
            return None
        if not isinstance(getattr(protocol, "read_queue", None), deque):
            return None
        if not hasattr(protocol, "exception") or not hasattr(protocol, "is_at_eof"):
            return None
        return cls(transport, protocol)

    def idle(self) -> bool:
        """True when a write now goes straight to the kernel: nothing of ours is still buffered, the stream is open."""
        return not self._transport.get_write_buffer_size() and not self._transport.is_closing()

    def write(self, buffers: Sequence[Buffer]) -> None:
        """Hand ``buffers`` to the transport, in order, without waiting.

        Raises:
            anyio.BrokenResourceError: the connection is lost or closing.
        """
        transport = self._transport
        if transport.is_closing() or self._protocol.exception is not None:
            raise anyio.BrokenResourceError from self._protocol.exception
        try:
            if len(buffers) == 1:
                transport.write(buffers[0])
            elif self._gather:
                transport.writelines(buffers)
            else:
                for buffer in buffers:
                    transport.write(buffer)
        except RuntimeError as exc:  # asyncio's "transport is closing"
            raise anyio.BrokenResourceError from exc

    async def drain(self) -> None:
        """Wait until what was written has gone to the kernel (anyio's stream does the same after each ``send``),
        or yield once if it already has.

        Raises:
            anyio.BrokenResourceError: the connection was lost meanwhile.
        """
        event = self._event
        if event.is_set():
            await anyio.lowlevel.cancel_shielded_checkpoint()
            return
        await event.wait()
        if self._protocol.exception is not None:
            raise anyio.BrokenResourceError from self._protocol.exception
        if self._transport.is_closing():
            raise anyio.BrokenResourceError

    async def receive(self) -> bytes:
        """The next bytes the peer sent: everything queued, or, when nothing is, the first chunk to arrive.

        Raises:
            anyio.EndOfStream: the peer closed its side.
            anyio.BrokenResourceError: the connection was lost.
            anyio.ClosedResourceError: the stream was closed here.
        """
        queue = self._queue
        if not queue:
            if self._paused:
                self._paused = False
                self._transport.resume_reading()
            while not queue:
                protocol = self._protocol
                if protocol.exception is not None:
                    raise anyio.BrokenResourceError from protocol.exception
                if protocol.is_at_eof:
                    raise anyio.EndOfStream
                if self._transport.is_closing():
                    raise anyio.ClosedResourceError
                self._readable.clear()
                await self._readable.wait()
        if len(queue) == 1:
            data = queue.popleft()
        else:
            data = b"".join(queue)
            queue.clear()
        self._readable.clear()
        if len(data) > _PAUSE_ABOVE and not self._paused:
            # More came in one turn of the loop than we ever expect (see the module's docstring): let the kernel
            # hold the rest until we ask again.
            self._paused = True
            self._transport.pause_reading()
        return data
