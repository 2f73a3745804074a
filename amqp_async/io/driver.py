"""Drive one protocol engine over one byte stream: the reader and writer tasks of a connection.

The awaitable client and the embedded broker both run one :class:`EngineDriver` per connection (the client makes
a new one for each transport when it reconnects). The owner handles the engine's events in ``on_events``, which is
called on the event loop with no ``await`` in between, so the engine is only ever touched there:

- the reader takes large reads, feeds them to the engine, hands the events to the owner, and wakes the writer;
  when we have an idle timeout (heartbeats), a read waits no longer than it, so that a silent peer is declared
  dead even while the writer is stuck on a peer that does not read;
- the writer sleeps until woken, then writes everything the engine has queued in one socket write; it also keeps
  the engine's time (``tick``: heartbeats, the peer's idle timeout), sleeping no longer than the engine's next
  deadline, and when a timeout closed the connection it writes the close and closes the stream (a silent peer
  will not answer);
- the reader writes what the owner's handling of a read queued as soon as it returns (a :meth:`EngineDriver.kick`
  made meanwhile wakes no writer: that write takes its output), and a caller that waits
  on its output (a confirmed send) has it written at once (:meth:`EngineDriver.write_eagerly`): a round trip
  does not wait for the writer task's turn, and when the kernel takes all of it, the writer is not woken at all
  (what went out counts as flushed);
- once our close is written, the peer has :data:`CLOSE_TIMEOUT` seconds to answer it; then the writer closes the
  stream (§2.4.3: a peer that never answers a close must not hold the connection open for ever);
- :meth:`EngineDriver.abort` closes the stream at once (an owner whose caller gave up waiting);
- an owner whose synchronous code queues much output before it returns to the loop (a callback that sends a
  thousand messages) calls :meth:`EngineDriver.write_now`, which hands the output to the socket at once when that
  takes no waiting, so that the peer works on it while the callback goes on.

On asyncio TCP streams both go through a :class:`~amqp_async.io.direct_stream.DirectStream`: the whole output in one
gathered write, frame heads and payloads together, where anyio's ``send`` would take one buffer at a time; and the
input is handed to the engine by the transport's own callback, where anyio's ``receive`` would queue it for the
reader task's next turn (the reader then only waits for the stream's end and keeps the idle deadline).

An idle connection costs two tasks and one wake-up object: the other synchronisation objects are made only while
someone waits on them.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import anyio.abc

from ..protocol import Connection as Engine
from ..protocol.endpoint import CLOSED
from ..protocol.events import Event
from .direct_stream import DirectStream
from .read_size import SMALL_READ, next_read_size

__all__ = ["CLOSE_TIMEOUT", "STREAMING_CHUNK", "EngineDriver", "describe_transport_error", "underlying_error"]

#: Seconds the peer has to answer our close before the stream is closed without its answer (read when the close
#: is written, so that tests may lower it).
CLOSE_TIMEOUT = 10.0

# Output buffers are joined into writes of up to this size; a larger buffer is written on its own, uncopied.
_WRITE_SIZE = 262144
#: The output a producer that does not yield may queue before it is written at once (see kick_streaming; proton's
#: callback API writes through past it too). Measured against proton's C ``direct`` with small messages: 8 to 32 KiB
#: keep both ends busy, 64 KiB let them fall into taking turns again in some runs.
STREAMING_CHUNK = 16384
# A chunk goes out once it also holds this many messages, or this many bytes whatever their number: a write per
# 16 KiB of 4 KiB messages (four a write) halved a trio sender's rate (a write costs a trio task more than it costs
# asyncio's callback).
_STREAMING_BURST = 64
_STREAMING_MOST = 256 << 10
# How long the final write may take once the connection has ended, and how long the writer may take to do it.
_FINAL_WRITE = 1.0
_STOP_GRACE = 2.0

_STREAM_ERRORS = (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError)
_SEND_ERRORS = (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError)


def describe_transport_error(exc: BaseException) -> str | None:
    """The reason a stream ended, with the TLS alert or OS error behind anyio's wrapper, if there is one."""
    if isinstance(exc, anyio.EndOfStream):
        return None
    cause = exc.__cause__ or exc.__context__
    for candidate in (cause, exc):
        if candidate is not None and str(candidate):
            return f"{type(candidate).__name__}: {candidate}"
    return type(exc).__name__


def underlying_error(exc: BaseException) -> BaseException | None:
    """The error behind a stream's end, for the owner to chain: the OS (or TLS) error anyio's wrapper was raised
    from, the error itself when it is one, or None for a plain end of stream (the peer closed the socket)."""
    if isinstance(exc, anyio.EndOfStream):
        return None
    if isinstance(exc, OSError):
        return exc
    return exc.__cause__ or exc.__context__ or exc


def _coalesce(buffers: list[bytes | bytearray | memoryview]) -> Iterator[bytes | bytearray | memoryview]:
    """The engine's output buffers as few writes of moderate size: small buffers joined up to :data:`_WRITE_SIZE`,
    a large one (a message payload, by reference) alone. A write costs more than copying a small buffer; joining
    megabytes at once costs fresh memory (page faults) where moderate writes reuse the same."""
    run: list[bytes | bytearray | memoryview] = []
    size = 0
    for buffer in buffers:
        length = len(buffer)
        if run and size + length > _WRITE_SIZE:
            yield b"".join(run) if len(run) > 1 else run[0]
            run = []
            size = 0
        if length >= _WRITE_SIZE:
            yield buffer
            continue
        run.append(buffer)
        size += length
    if run:
        yield b"".join(run) if len(run) > 1 else run[0]


def _write_direct(direct: DirectStream, buffers: list[bytes | bytearray | memoryview]) -> None:
    """Hand ``buffers`` to a direct stream in one call: one buffer as it is, several coalesced."""
    direct.write(buffers if len(buffers) == 1 else list(_coalesce(buffers)))


def _resolve(future: asyncio.Future[None]) -> None:
    """The writer's deadline came (a loop timer's callback): wake it, unless something else did first."""
    if not future.done():
        future.set_result(None)


def _loop_clock() -> Callable[[], float]:
    """The event loop's clock (anyio's ``current_time``), looked up once: asyncio's ``loop.time`` directly, a
    fifth of the cost of going through anyio each time."""
    try:
        return asyncio.get_running_loop().time
    except RuntimeError:  # not asyncio (trio)
        return anyio.current_time


class EngineDriver:
    """The tasks that move bytes between one engine and one stream.

    Args:
        engine: the protocol engine.
        stream: the connected byte stream (TCP or TLS).
        on_events: called with each batch of the engine's events.
        tracer: an optional frame tracer (``received(data)`` / ``sent(data)``).
        on_error: isolates the owner's failures: an exception that the engine or ``on_events`` raises while handling
            input or time is passed to it (the owner closes the engine, e.g. with ``amqp:internal-error``), and
            the driver then stops (:meth:`give_up`) instead of raising it out of :meth:`run`. None: it propagates.

    Attributes:
        transport_failed: the stream broke or ended without a close (set before ``on_events`` hears of it).
        transport_error: why, when the stream said.
        transport_exception: the error behind it (:func:`underlying_error`), None for a plain end of stream.
        failed: ``on_error`` was called (or :meth:`give_up`): the driver stops reading and writes what is left.
        closing: set by the owner once it closes on purpose (the stream ending then is no failure).
        ended: :meth:`run` has returned: nothing more is written (waiters on this driver's output stop waiting).
        flush_epoch, flushed_epoch: output requested and output written, counted in wake-ups; an owner waits for
            ``flushed_epoch >= epoch`` to know that what it queued was written.
    """

    __slots__ = (
        "_aborted",
        "_clock",
        "_close_deadline",
        "_direct",
        "_eager_written",
        "_flushed",
        "_handling_input",
        "_on_error",
        "_on_events",
        "_opened",
        "_read_size",
        "_reader_scope",
        "_retime",
        "_stopping",
        "_streamed",
        "_streaming_yield_at",
        "_streaming_yields",
        "_tracer",
        "_wake",
        "_woken",
        "_write_scope",
        "_writing",
        "closing",
        "ended",
        "engine",
        "failed",
        "flush_epoch",
        "flushed_epoch",
        "stream",
        "transport_error",
        "transport_exception",
        "transport_failed",
    )

    def __init__(
        self,
        engine: Engine,
        stream: anyio.abc.ByteStream,
        on_events: Callable[[list[Event]], None],
        *,
        tracer: Any = None,
        on_error: Callable[[Exception], None] | None = None,
    ) -> None:
        self.engine = engine
        self.stream = stream
        self._on_events = on_events
        self._tracer = tracer
        self._on_error = on_error
        self._reader_scope: anyio.CancelScope | None = None
        self.failed = False
        # Wake-ups: a flag says why, and an event exists only while the writer (or a flush waiter) sleeps on it.
        self._woken = False  # output to write
        self._retime = True  # the engine's deadlines may have changed: tick now
        self._stopping = False  # the reader is done: write what is left and stop
        self._opened = False
        self._aborted = False  # abort(): the writer closes the stream now
        self._close_deadline: float | None = None  # when we stop waiting for the peer's answer to our close
        self._write_scope: anyio.CancelScope | None = None  # the writer's current write, while it waits
        self._writing = False  # the writer holds output it took from the engine and has not handed to the stream
        self._eager_written = False  # write_eagerly wrote since the last input or the writer's last turn
        # The output size from which kick_streaming asks its producer to yield (0: the first chunk), and how many
        # times it did since the writer last took output.
        self._streaming_yield_at = 0
        self._streaming_yields = 0
        self._streamed = 0  # kick_streaming calls since the writer last took output
        self._handling_input = False  # in _on_input's handling: its write follows, a kick needs no writer
        self._direct = DirectStream.of(stream)
        self._clock = _loop_clock()
        self._read_size = SMALL_READ  # for streams read through anyio (trio, TLS): see _read_size
        self._wake: asyncio.Future[None] | anyio.Event | None = None
        self._flushed: anyio.Event | None = None
        self.flush_epoch = 0
        self.flushed_epoch = 0
        self.transport_failed = False
        self.transport_error: str | None = None
        self.transport_exception: BaseException | None = None
        self.closing = False
        self.ended = False

    # --- coordination ------------------------------------------------------------------------------------

    def kick(self) -> None:
        """Wake the writer: the engine has (or may have) output. While the owner handles input (``on_events``
        called from the reader), only counted: the reader writes what the handling queued once it returns, and
        wakes the writer for what the socket does not take (a callback API's handler that sends as it handles an
        outcome: no turn of the writer per round trip)."""
        self.flush_epoch += 1
        if not self._woken and not self._handling_input:
            self._woken = True
            self._wake_writer()

    def kick_streaming(self) -> bool:
        """:meth:`kick`, for output queued by a producer that may go on without yielding (sends in a loop while
        the link has credit): once :data:`STREAMING_CHUNK` bytes wait in :data:`_STREAMING_BURST` messages or more
        (or :data:`_STREAMING_MOST` bytes in fewer), they are written at once, or, where there is no writing from
        synchronous code (trio, TLS), True tells the producer to yield to the writer once.

        The writer runs only when the producer yields. Left to it, a window of a thousand sends reaches the peer
        in one burst once the producer waits for their outcomes; the peer, idle until then, answers only once it
        has handled the whole burst, while the producer waits idle in turn: the two ends take turns instead of
        working at once (measured against proton's C ``direct``: runs at 120,000 messages a second with 3 ms
        pauses, against 200,000 when written in chunks).
        """
        # kick(), inline (once per message submitted)
        self.flush_epoch += 1
        if not self._woken and not self._handling_input:
            self._woken = True
            self._wake_writer()
        streamed = self._streamed = self._streamed + 1
        buffered = self.engine.output_buffered
        if buffered < STREAMING_CHUNK or (streamed < _STREAMING_BURST and buffered < _STREAMING_MOST):
            return False
        if self._direct is not None:
            self.write_now()  # else the socket is backed up: the writer waits for it, with what it took
            return False
        if buffered < self._streaming_yield_at:
            return False
        # Twice a chunk: trio runs the tasks ready at a time in a random order, so the producer may go on first once.
        # Then not before the next chunk: the writer is blocked on a socket the peer does not empty (yielding on
        # every send would only cost), or waits for its next turn to take what is queued.
        self._streaming_yields += 1
        if self._streaming_yields >= 2:
            self._streaming_yields = 0
            self._streaming_yield_at = buffered + STREAMING_CHUNK
        return True

    def write_now(self) -> bool:
        """Hand the engine's output to the stream at once, from synchronous code on the event loop; True if all of
        it is with the kernel now, and then everything requested so far counts as flushed (the writer need not
        run for it).

        It does so only when that needs no waiting and keeps the order of the bytes: the stream is a TCP stream
        on asyncio, the writer holds no output it took earlier, and the socket took everything written before
        (else the output stays queued for the writer, which waits for the socket: memory stays bounded by what
        the owner queues between two calls).
        """
        direct = self._direct
        if direct is None or self._writing or self._stopping or not direct.idle():
            return False
        epoch = self.flush_epoch
        buffers = self._take_output()
        if buffers:
            try:
                _write_direct(direct, buffers)
            except anyio.BrokenResourceError:
                return False  # the reader sees the end and reports it
            if not direct.idle():
                return False  # the kernel did not take it all: the transport keeps the rest, the writer waits
        if epoch > self.flushed_epoch:
            self.flushed_epoch = epoch
            self._wake_flush_waiters()
        return True

    def write_eagerly(self) -> None:
        """Write now the output that one caller waits on (a confirmed send, queued without :meth:`kick`), rather
        than wake the writer for it: the round trip is one task switch shorter, and the writer sleeps on. Only the
        first such call after an input or a turn of the writer writes; output queued by the calls after it (many
        sends at once) is left to the writer, which writes it together, so a burst of sends still costs one
        socket write."""
        if self._eager_written:
            self.kick()
            return
        self._eager_written = True
        self.write_or_wake()

    def write_or_wake(self) -> None:
        """Write the engine's output now when the socket takes all of it (it then counts as flushed); else wake
        the writer for it."""
        self.flush_epoch += 1
        if not self.write_now():
            self.kick()

    def _take_output(self) -> list[bytes | bytearray | memoryview]:
        """The engine's output, as buffers to write in order (shown to the tracer, if any)."""
        self._streaming_yield_at = self._streaming_yields = self._streamed = 0
        buffers = self.engine.buffers_to_send(self._clock())
        if buffers and self._tracer is not None:
            self._tracer.sent(b"".join(buffers))
        return buffers

    def abort(self) -> None:
        """Close the stream now, without waiting for the peer (the owner's caller gave up): the reader ends, and
        :meth:`run` returns. What the engine still had to write may be lost."""
        self._aborted = True
        if self._write_scope is not None:
            self._write_scope.cancel()
        self._wake_writer()

    def start_close_timer(self) -> None:
        """Our close is queued: give the peer :data:`CLOSE_TIMEOUT` seconds to answer it, then close the stream.

        §2.4.3: "a peer SHOULD implement a timeout to give its partner a reasonable amount of time to receive and
        process the close before giving up and simply closing the transport". The time also bounds writing what
        was queued before the close to a peer that reads nothing.
        """
        if self._close_deadline is not None:
            return
        self._close_deadline = self._clock() + CLOSE_TIMEOUT
        if self._write_scope is not None:
            self._write_scope.deadline = self._close_deadline
        self._wake_writer()

    def _write_deadline(self) -> float:
        if self._aborted:
            return -math.inf
        return math.inf if self._close_deadline is None else self._close_deadline

    def wake_timer(self) -> None:
        """Make the writer recompute the engine's deadline now (e.g. the peer's idle timeout just became known)."""
        self._retime = True
        self._wake_writer()

    def _wake_writer(self) -> None:
        wake = self._wake
        if wake is not None:
            self._wake = None
            if isinstance(wake, anyio.Event):
                wake.set()
            elif not wake.done():
                wake.set_result(None)

    async def _sleep(self, deadline: float | None) -> None:
        """The writer sleeps until woken (or until ``deadline``). On asyncio a bare future is its wake-up, and a
        timer of the loop its deadline: a tenth of the memory of an event (this is the one thing an idle connection
        waits on besides its socket), and a fraction of the cost of a cancel scope (a writer with a heartbeat to
        keep sleeps with a deadline after every write)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not asyncio (trio)
            event = self._wake = anyio.Event()
            try:
                if deadline is None:
                    await event.wait()
                else:
                    with anyio.CancelScope(deadline=deadline):
                        await event.wait()
            finally:
                self._wake = None
            return
        future = self._wake = loop.create_future()
        # The deadline is on the loop's clock (self._clock is loop.time): the loop's timer needs no conversion.
        timer = None if deadline is None or deadline == math.inf else loop.call_at(deadline, _resolve, future)
        try:
            await future
        finally:
            self._wake = None
            if timer is not None:
                timer.cancel()

    def _wake_flush_waiters(self) -> None:
        flushed = self._flushed
        if flushed is not None:
            self._flushed = None
            flushed.set()

    async def _wait_written(self) -> None:
        flushed = self._flushed
        if flushed is None:
            flushed = self._flushed = anyio.Event()
        await flushed.wait()

    async def wait_flushed(self, epoch: int, check: Callable[[], None]) -> bool:
        """Wait until the output requested by ``epoch`` is written (``check`` raises if waiting is pointless);
        False when the driver ended first (what was not written is lost with its stream)."""
        while self.flushed_epoch < epoch:
            if self.ended:
                return False
            check()
            await self._wait_written()
        return True

    async def wait_output_below(self, limit: int, check: Callable[[], None]) -> None:
        """Wait while more than ``limit`` bytes of output are queued (``check`` raises if waiting is pointless:
        it is called on each wake-up, the last one when :meth:`run` ends)."""
        while self.engine.output_buffered > limit:
            check()
            await self._wait_written()

    # --- the tasks ---------------------------------------------------------------------------------------

    async def run(self) -> None:
        """Run reader and writer until the reader ends (the stream ended or the engine closed), write what is left
        (a close answering the peer's) if the stream still takes it, and close the stream."""
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(self._writer)
                with anyio.CancelScope() as self._reader_scope:
                    if not self.failed:
                        await self._reader()
                self._stopping = True
                self.kick()
                # The writer stops once it wrote what is left; a writer stuck on a peer that reads nothing is cancelled.
                group.cancel_scope.deadline = anyio.current_time() + _STOP_GRACE
        finally:
            self.ended = True
            self._wake_flush_waiters()
            with anyio.CancelScope(shield=True):
                try:
                    await self.stream.aclose()
                except _SEND_ERRORS:
                    pass

    async def _reader(self) -> None:
        if self._direct is not None:
            await self._read_direct(self._direct)
            return
        engine = self.engine
        self.kick()
        while not engine.closed:
            expires = engine.input_deadline
            try:
                if expires is None:
                    data = await self._receive()
                else:
                    received: bytes | None = None
                    with anyio.CancelScope(deadline=expires):
                        received = await self._receive()
                    if received is None:
                        self._tick()  # the peer said nothing for our whole idle timeout: the engine closes
                        continue
                    data = received
            except _STREAM_ERRORS as exc:
                data = b""
                self.transport_failed = not self.closing
                self._transport_ended(exc)
            self._on_input(data)
            if not data:
                return

    async def _read_direct(self, direct: DirectStream) -> None:
        """The reader on an asyncio TCP stream: input goes to :meth:`_on_input` from the transport's callback
        (see ``_direct_stream``); this task waits for the end of the stream, keeps the idle deadline, and stops
        once the engine has closed."""
        engine = self.engine
        self.kick()
        queued = direct.deliver_input(self._on_input)
        if queued:
            self._on_input(queued)
        while not engine.closed:
            expires = engine.input_deadline
            try:
                with anyio.CancelScope(deadline=math.inf if expires is None else expires) as scope:
                    await direct.wait_end()
                if scope.cancelled_caught:
                    self._tick()  # the peer may have said nothing for our whole idle timeout: the engine decides
            except _STREAM_ERRORS as exc:
                self.transport_failed = not self.closing
                self._transport_ended(exc)
                self._on_input(b"")
                return

    def _transport_ended(self, exc: BaseException) -> None:
        """Note why the stream ended (the owner reports it)."""
        self.transport_error = describe_transport_error(exc)
        self.transport_exception = underlying_error(exc)

    def give_up(self) -> None:
        """Stop reading: what the engine has queued (a close) is written, within a grace period, and the stream
        closed. For an owner that gave up on the connection (see ``on_error``); :meth:`abort` does not wait to
        write."""
        self.failed = True
        if self._reader_scope is not None:
            self._reader_scope.cancel()
        self.kick()

    def _failure(self, exc: Exception) -> None:
        """The owner's handling (or the engine) raised: the owner hears of it once (``on_error``), and the driver
        stops."""
        assert self._on_error is not None
        if not self.failed:
            self.failed = True
            self._on_error(exc)
        self.give_up()

    def _on_input(self, data: bytes) -> None:
        """Hand what the peer sent (b"": the stream ended) to the engine, and its events to the owner; write the
        owner's answer at once (one task switch less on every round trip), waking the writer only for what the
        socket did not take."""
        if self.failed:
            return  # the owner gave up on the connection: nothing more is read
        engine = self.engine
        if self._tracer is not None:
            self._tracer.received(data)
        self._handling_input = True
        try:
            engine.receive_data(data, self._clock())
            self._on_events(engine.next_events())
        except Exception as exc:
            self._handling_input = False
            self.kick()  # what the handling queued before it failed (a kick made meanwhile woke nothing)
            if self._on_error is None:
                raise
            self._failure(exc)
            return
        finally:
            self._handling_input = False  # whatever ended the handling (a KeyboardInterrupt too)
        self._eager_written = False
        self.write_or_wake()  # on streams other than asyncio TCP, the writer takes all of it
        if not self._opened and engine.remote_open is not None:
            self._opened = True
            self.wake_timer()  # the peer's idle timeout is known now
        if engine.closed and data and self._direct is not None:
            self._direct.interrupt()  # the reading task (waiting in _read_direct) stops now

    async def _receive(self) -> bytes:
        size = self._read_size
        data = await self.stream.receive(size)
        self._read_size = next_read_size(size, len(data))
        return data

    def _tick(self) -> float | None:
        """Let the engine do what time calls for; return its next deadline."""
        engine = self.engine
        try:
            deadline = engine.tick(self._clock())
            events = engine.next_events()
            if events:
                self._on_events(events)  # e.g. our idle timeout closed the connection
        except Exception as exc:
            if self._on_error is None:
                raise
            self._failure(exc)
            return None
        if engine.has_output:
            self.kick()
        return deadline

    async def _writer(self) -> None:
        engine = self.engine
        next_tick: float | None = None
        while True:
            if self._retime or (next_tick is not None and self._clock() >= next_tick):
                self._retime = False
                next_tick = self._tick()
            if self._aborted or (
                self._close_deadline is not None and self._clock() >= self._close_deadline and not self._stopping
            ):
                # Aborted, or the peer did not answer our close in time (§2.4.3 lets us close the transport then).
                with anyio.CancelScope(shield=True):
                    await self._close_stream()
                return
            if engine.closed and not self._stopping:
                # The engine closed while the reader waits for input (a timeout: a silent peer will not answer
                # our close): write what is left, then close the stream so that the reader stops waiting.
                with anyio.move_on_after(_FINAL_WRITE):
                    await self._write()
                with anyio.CancelScope(shield=True):
                    await self._close_stream()
                return
            if self._woken:
                self._woken = False
                if self._stopping:
                    with anyio.move_on_after(_FINAL_WRITE):
                        await self._write()
                    return
                if not await self._write():
                    return
                continue
            if self._close_deadline is None and engine.local_state is CLOSED:
                self.start_close_timer()  # a close the owner did not announce (the broker's, proton's)
            deadline = next_tick
            if self._close_deadline is not None:
                deadline = self._close_deadline if deadline is None else min(deadline, self._close_deadline)
            await self._sleep(deadline)

    async def _close_stream(self) -> None:
        """Close the stream (the reader then sees its end); a stream that is already broken is closed too."""
        try:
            await self.stream.aclose()
        except _SEND_ERRORS:
            pass

    async def _write(self) -> bool:
        """Write everything the engine has queued; False once the stream is broken (it is closed then)."""
        epoch = self.flush_epoch
        self._eager_written = False
        buffers = self._take_output()
        if buffers:
            self._writing = True
            try:
                direct = self._direct
                waits = True
                if direct is not None:
                    _write_direct(direct, buffers)
                    # Handed over, in order: write_now (a long callback) may add behind it while we wait.
                    self._writing = False
                    # The socket took it all: nothing to wait for, so no cancel scope (and its timer) either, and
                    # no yield: the writer suspends next, in _sleep, unless more was queued meanwhile. Otherwise
                    # (or the connection is lost) it waits for room, or the error.
                    waits = not direct.idle()
                if waits:
                    # A peer that reads nothing must not hold the writer past an abort or the close's deadline.
                    with anyio.CancelScope(deadline=self._write_deadline()) as scope:
                        self._write_scope = scope
                        if direct is not None:
                            await direct.drain()
                        elif len(buffers) == 1:
                            await self.stream.send(buffers[0])  # type: ignore[arg-type]  # any bytes-like object
                        else:
                            for data in _coalesce(buffers):
                                await self.stream.send(data)  # type: ignore[arg-type]
                    if scope.cancelled_caught:
                        with anyio.CancelScope(shield=True):
                            await self._close_stream()  # the reader sees the end
                        return False
            except _SEND_ERRORS as exc:
                if not self._stopping:
                    self.transport_failed = not self.closing
                    self._transport_ended(exc)
                await self.stream.aclose()  # the reader sees the end and reports it
                return False
            finally:
                self._write_scope = None
                self._writing = False
        self.flushed_epoch = epoch
        self._wake_flush_waiters()
        return True
