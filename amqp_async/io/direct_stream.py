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

Reading. anyio's ``receive`` resumes the transport's reading before it waits and pauses it after each chunk (on
asyncio's own loop each of those is an ``epoll_ctl`` system call), and the chunk reaches the reading task only on
the loop's next turn, after the protocol callback queued it. :meth:`DirectStream.deliver_input` has the
transport's protocol call the driver's input handler directly with each chunk, so the engine takes it in the same
turn, and reading stays on: a request/response round trip is one turn of the loop, two system calls and one task
switch shorter. Nothing is queued: each chunk is handled before the loop reads again, and the peer's input is
bounded by the protocol itself (credit and session windows; a peer that floods is a protocol error). The reading
task only waits for the end of the stream (:meth:`DirectStream.wait_end`).

This reaches under anyio's public API (its stream's ``_transport`` and ``_protocol``). :meth:`DirectStream.of`
checks every piece it uses and returns None when anything differs (trio, TLS streams, another anyio), and the
driver then uses ``send`` and ``receive`` as before.
"""

from __future__ import annotations

import asyncio
import importlib
import sys
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel

from .read_size import SMALL_READ, next_read_size

# anyio finds its backend through sniffio when sniffio is installed (it is optional): see _InputTap.data_received.
sniffio: Any
try:
    sniffio = importlib.import_module("sniffio")
except ImportError:  # anyio then recognises asyncio by its running loop, which a loop callback has too
    sniffio = None

__all__ = ["DirectStream"]

Buffer = bytes | bytearray | memoryview


def _read_size_settable(transport: Any) -> bool:
    """Whether ``transport`` is asyncio's own selector socket transport, whose ``max_size`` sizes each read (see
    ``_read_size``; uvloop reads into one buffer of its own and copies out what came)."""
    return type(transport).__module__ == "asyncio.selector_events" and isinstance(
        getattr(type(transport), "max_size", None), int
    )


#: The most bytes handed at once to a transport that copies what the kernel does not take (see ``_write_held``).
_PIECE = 256 << 10
#: ... and how much it may still hold when handed the next piece: enough that the kernel is not left waiting for
#: our task's turn, little enough that what it copies stays small.
_LOW_WATER = 64 << 10


def _gathers(transport: Any) -> bool:
    """Whether the transport keeps what the kernel does not take by reference: uvloop's ``writelines`` (one
    ``writev``) and CPython's since 3.12 (``sendmsg``, a queue of views). CPython 3.11's joins a list into one copy,
    and its ``write`` copies what the kernel did not take into one growing bytearray: we feed it ourselves."""
    return type(transport).__module__.startswith("uvloop") or sys.version_info >= (3, 12)


def _pause_if_full(transport: Any) -> None:
    """Have ``transport`` pause its protocol if it holds more than its high-water mark, as its ``write`` does.

    CPython's selector transport (3.12, 3.13) does not in ``writelines``: its protocol was never paused by what
    ``writelines`` left over, so :meth:`DirectStream.drain` (which waits for the protocol's resumption) returned
    at once however much it held, and the driver handed it the next output, and the next. Against a peer slower
    than the producer it held tens of MiB (93 MiB while a 96 MiB body was streamed at 30 MB/s; the CLI's
    ``send --size`` peaked at 78 MiB RSS on a loaded machine, 30 otherwise). Setting the limits again (to what
    they are) is the public call that checks them: it pauses the protocol when the transport holds more.
    """
    low, high = transport.get_write_buffer_limits()
    transport.set_write_buffer_limits(high=high, low=low)


class DirectStream:
    """Reads from and writes to the asyncio transport under an anyio TCP stream (see the module's docstring)."""

    __slots__ = (
        "_failure",
        "_gather",
        "_held",
        "_interrupted",
        "_protocol",
        "_queue",
        "_readable",
        "_transport",
    )

    def __init__(self, transport: Any, protocol: Any) -> None:
        self._transport = transport
        self._protocol = protocol
        self._readable: asyncio.Event = protocol.read_event
        self._queue: deque[bytes] = protocol.read_queue
        self._gather = _gathers(transport)
        # Written, not yet handed to a transport that copies (see _write_held); made while it holds something
        # (an empty deque is 760 bytes, a thirtieth of an idle connection).
        self._held: deque[Buffer] | None = None
        if not self._gather:
            # Its protocol is paused once it holds more than the low-water mark, and resumed below: drain() then
            # sleeps while it does, and hands it the next piece.
            transport.set_write_buffer_limits(high=_LOW_WATER, low=_LOW_WATER)
        self._failure: BaseException | None = None  # what the input handler raised
        self._interrupted = False

    @classmethod
    def of(cls, stream: anyio.abc.ByteStream) -> DirectStream | None:
        """The writer for ``stream`` if it is anyio's asyncio TCP stream as we know it; else None."""
        if type(stream).__module__ != "anyio._backends._asyncio" or type(stream).__name__ != "SocketStream":
            return None
        transport = getattr(stream, "_transport", None)
        protocol = getattr(stream, "_protocol", None)
        methods = (
            "write",
            "writelines",
            "get_write_buffer_size",
            "get_write_buffer_limits",
            "set_write_buffer_limits",
            "is_closing",
            "pause_reading",
            "resume_reading",
            "set_protocol",
        )
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
        return not self._held and not self._transport.get_write_buffer_size() and not self._transport.is_closing()

    def write(self, buffers: Sequence[Buffer]) -> None:
        """Hand ``buffers`` to the transport, in order, without waiting.

        Raises:
            anyio.BrokenResourceError: the connection is lost or closing.
        """
        transport = self._transport
        if transport.is_closing() or self._protocol.exception is not None:
            raise anyio.BrokenResourceError from self._protocol.exception
        try:
            if not self._gather:
                if (
                    self._held is None
                    and len(buffers) == 1
                    and len(buffers[0]) <= _PIECE
                    and transport.get_write_buffer_size() <= _LOW_WATER
                ):
                    transport.write(buffers[0])  # what _write_held does with one piece, without its queue
                    return
                if self._held is None:
                    self._held = deque(buffers)
                else:
                    self._held.extend(buffers)
                self._write_held()
            elif len(buffers) == 1:
                transport.write(buffers[0])
            else:
                transport.writelines(buffers)
                if transport.get_write_buffer_size():
                    _pause_if_full(transport)
        except RuntimeError as exc:  # asyncio's "transport is closing"
            raise anyio.BrokenResourceError from exc

    def _write_held(self) -> None:
        """Hand the held buffers to a transport that copies (CPython 3.11's), a piece of at most :data:`_PIECE`
        bytes at a time, while it holds at most :data:`_LOW_WATER`; keep the rest, by reference, for when it
        drained (its protocol's ``resume_writing``, or :meth:`drain`).

        That transport copies whatever the kernel does not take into one bytearray, which it grows and shrinks
        as it goes: handed megabytes while the peer reads slowly, it reallocated copies of varying sizes, and a
        sender was seen to grow by tens of MiB for a moment (the allocator's fragments). Fed this way, it copies
        at most a piece.

        Raises:
            anyio.BrokenResourceError: the transport is closing (a piece just handed to it met the peer's reset,
                say): what is held is dropped, as the transport dropped what it held, and the loss is raised.
        """
        transport = self._transport
        held = self._held
        if held is None:
            return
        while held and transport.get_write_buffer_size() <= _LOW_WATER:
            if transport.is_closing():
                # Lost (or closed) since the last piece: a broken transport holds nothing, so the loop went on,
                # and it dropped each further piece, counting them ("socket.send() raised exception." logged for
                # each from the fifth on: hundreds for a message of megabytes). Dropped here, once; the writer
                # learns of the loss now, and drain() finds nothing held to retry (no loop on a dead transport).
                self._held = None
                raise anyio.BrokenResourceError from self._protocol.exception
            buffer = held.popleft()
            if len(buffer) > _PIECE:
                view = memoryview(buffer).cast("B")
                held.appendleft(view[_PIECE:])
                buffer = view[:_PIECE]
            transport.write(buffer)
        if not held:
            self._held = None

    def _write_held_on_resume(self) -> None:
        """The transport went below its low-water mark: hand it the next held pieces, from the loop's callback, as
        the transport would write what it holds itself (no task needs to run for held output to go out)."""
        if self._held:
            try:
                self._write_held()
            except (RuntimeError, anyio.BrokenResourceError):  # lost or closing: the reader sees the end
                self._held = None

    async def drain(self) -> None:
        """Wait until what was written has gone to the kernel (anyio's stream does the same after each ``send``),
        or yield once if it already has.

        Raises:
            anyio.BrokenResourceError: the connection was lost meanwhile.
        """
        while True:
            await self._wait_writable()
            if not self._held:
                return
            try:
                self._write_held()
            except RuntimeError as exc:  # asyncio's "transport is closing"
                raise anyio.BrokenResourceError from exc

    async def _wait_writable(self) -> None:
        """Wait while the transport holds more than its high-water mark (:data:`_LOW_WATER`, for a transport that
        copies), or yield once; then raise if the connection was lost."""
        # Read each time: anyio's protocol replaces its write event with a new one whenever the transport pauses it
        # (kept from the start, the first one stayed set, and a writer facing a full socket yielded in a loop).
        event: asyncio.Event = self._protocol.write_event
        if event.is_set():
            await anyio.lowlevel.cancel_shielded_checkpoint()
        else:
            await event.wait()
        if self._protocol.exception is not None:
            raise anyio.BrokenResourceError from self._protocol.exception
        if self._transport.is_closing():
            raise anyio.BrokenResourceError

    # --- reading ---------------------------------------------------------------------------------------

    def deliver_input(self, handler: Callable[[bytes], None]) -> bytes:
        """From now on, call ``handler(data)`` with each chunk the peer sends, from the event loop's callback,
        and return what had already arrived (for the caller to handle first; b"" if nothing).

        ``handler`` runs outside any task, so what it raises cannot propagate: it is kept, reading stops, and
        :meth:`wait_end` raises it.
        """
        transport = self._transport
        sized = transport if _read_size_settable(transport) else None
        transport.set_protocol(_InputTap(self._protocol, self, handler, sized))
        queue = self._queue
        data = queue.popleft() if len(queue) == 1 else b"".join(queue)
        queue.clear()
        self._transport.resume_reading()  # anyio pauses it between its reads; ours stays on
        return data

    def _handler_failed(self, exc: BaseException) -> None:
        self._failure = exc
        self._transport.pause_reading()
        self._readable.set()

    def interrupt(self) -> None:
        """Make :meth:`wait_end` return (the owner has something for the waiting task to look at)."""
        self._interrupted = True
        self._readable.set()

    async def wait_end(self) -> None:
        """Wait, while input goes to the handler, for the end of the stream; return early after :meth:`interrupt`.

        Raises:
            anyio.EndOfStream: the peer closed its side.
            anyio.BrokenResourceError: the connection was lost.
            anyio.ClosedResourceError: the stream was closed here.
            BaseException: what the input handler raised.
        """
        protocol = self._protocol
        while True:
            if self._failure is not None:
                raise self._failure
            if self._interrupted:
                self._interrupted = False
                return
            if protocol.exception is not None:
                raise anyio.BrokenResourceError from protocol.exception
            if protocol.is_at_eof:
                raise anyio.EndOfStream
            if self._transport.is_closing():
                raise anyio.ClosedResourceError
            self._readable.clear()
            await self._readable.wait()


class _InputTap(asyncio.Protocol):
    """The transport's protocol while input goes straight to a handler: anyio's protocol keeps everything else
    (the end of the stream, a lost connection, write flow control), so its stream still works for writes and
    closes."""

    __slots__ = ("_handler", "_inner", "_read_size", "_stream", "_transport")

    def __init__(
        self, inner: Any, stream: DirectStream, handler: Callable[[bytes], None], sized_transport: Any
    ) -> None:
        self._inner = inner
        self._stream = stream
        self._handler = handler
        self._transport = sized_transport  # the transport whose read size we adapt (None: one we cannot)
        self._read_size = SMALL_READ
        if sized_transport is not None:
            sized_transport.max_size = SMALL_READ

    def data_received(self, data: bytes) -> None:
        if self._transport is not None:
            size = next_read_size(self._read_size, len(data))
            if size != self._read_size:
                self._transport.max_size = self._read_size = size
        # The handler runs in a loop callback, outside any task: sniffio (through which anyio finds its backend)
        # recognises asyncio by its current task, so it is told here, as its documentation has libraries do.
        previous = None if sniffio is None else sniffio.thread_local.name
        if sniffio is not None:
            sniffio.thread_local.name = "asyncio"
        try:
            self._handler(data)
        except BaseException as exc:  # nothing above a loop callback would see it: kept for wait_end to raise
            self._stream._handler_failed(exc)
        finally:
            if sniffio is not None:
                sniffio.thread_local.name = previous

    def eof_received(self) -> bool | None:
        return self._inner.eof_received()  # type: ignore[no-any-return]

    def connection_made(self, transport: Any) -> None:
        self._inner.connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self._inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()
        self._stream._write_held_on_resume()
