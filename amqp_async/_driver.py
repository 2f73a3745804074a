"""Drive one protocol engine over one byte stream: the reader, writer and timer tasks of a connection.

The awaitable client and the embedded broker both run one :class:`EngineDriver` per connection (the client makes
a new one for each transport when it reconnects). The owner handles the engine's events in ``on_events``, which is
called on the event loop with no ``await`` in between, so the engine is only ever touched there:

- the reader takes large reads, feeds them to the engine, hands the events to the owner, and wakes the writer;
- the writer sleeps until woken, then writes everything the engine has queued in one socket write;
- the timer calls the engine's ``tick`` (heartbeats, the peer's idle timeout), and when a timeout closed the
  connection, flushes the close and closes the stream: a silent peer will not answer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import anyio.abc

from .protocol import Connection as Engine
from .protocol.events import Event

__all__ = ["EngineDriver", "describe_transport_error"]

_READ_SIZE = 65536


def describe_transport_error(exc: BaseException) -> str | None:
    """The reason a stream ended, with the TLS alert or OS error behind anyio's wrapper, if there is one."""
    if isinstance(exc, anyio.EndOfStream):
        return None
    cause = exc.__cause__ or exc.__context__
    for candidate in (cause, exc):
        if candidate is not None and str(candidate):
            return f"{type(candidate).__name__}: {candidate}"
    return type(exc).__name__


class EngineDriver:
    """The tasks that move bytes between one engine and one stream.

    Args:
        engine: the protocol engine.
        stream: the connected byte stream (TCP or TLS).
        on_events: called with each batch of the engine's events.
        tracer: an optional frame tracer (``received(data)`` / ``sent(data)``).

    Attributes:
        transport_failed: the stream broke or ended without a close (set before ``on_events`` hears of it).
        transport_error: why, when the stream said.
        flush_epoch, flushed_epoch: output requested and output written, counted in wake-ups; an owner waits for
            ``flushed_epoch >= epoch`` to know that what it queued was written.
    """

    def __init__(
        self,
        engine: Engine,
        stream: anyio.abc.ByteStream,
        on_events: Callable[[list[Event]], None],
        *,
        tracer: Any = None,
    ) -> None:
        self.engine = engine
        self.stream = stream
        self._on_events = on_events
        self._tracer = tracer
        self._wake = anyio.Event()
        self._timer_wake = anyio.Event()
        self._flushed = anyio.Event()
        self.flush_epoch = 0
        self.flushed_epoch = 0
        self.transport_failed = False
        self.transport_error: str | None = None
        self.closing = False

    # --- coordination ------------------------------------------------------------------------------------

    def kick(self) -> None:
        """Wake the writer: the engine has (or may have) output."""
        self.flush_epoch += 1
        self._wake.set()

    def wake_timer(self) -> None:
        """Make the timer recompute its deadline now (e.g. the peer's idle timeout just became known)."""
        self._timer_wake.set()

    async def wait_flushed(self, epoch: int, check: Callable[[], None]) -> None:
        """Wait until the output requested by ``epoch`` is written (``check`` raises if waiting is pointless)."""
        while self.flushed_epoch < epoch:
            check()
            await self._flushed.wait()

    async def wait_output_below(self, limit: int, check: Callable[[], None]) -> None:
        """Wait while more than ``limit`` bytes of output are queued."""
        while self.engine.output_buffered > limit:
            check()
            await self._flushed.wait()

    # --- the tasks ---------------------------------------------------------------------------------------

    async def run(self) -> None:
        """Run reader, writer and timer until the reader ends (the stream ended or the engine closed)."""
        async with anyio.create_task_group() as group:
            group.start_soon(self._writer)
            group.start_soon(self._timer)
            await self._reader()
            await self._flush()
            group.cancel_scope.cancel()

    async def _reader(self) -> None:
        engine = self.engine
        self.kick()
        while not engine.closed:
            try:
                data = await self.stream.receive(_READ_SIZE)
            except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
                data = b""
                self.transport_failed = not self.closing
                self.transport_error = describe_transport_error(exc)
            if self._tracer is not None:
                self._tracer.received(data)
            engine.receive_data(data, anyio.current_time())
            self._on_events(engine.next_events())
            self.kick()
            if not data:
                return

    async def _flush(self) -> None:
        """Write what is left (a close answering the peer's), if the stream still takes it."""
        data = self.engine.data_to_send(anyio.current_time())
        if data:
            if self._tracer is not None:
                self._tracer.sent(data)
            try:
                with anyio.move_on_after(1.0):
                    await self.stream.send(data)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                pass

    async def _writer(self) -> None:
        engine = self.engine
        while True:
            await self._wake.wait()
            self._wake = anyio.Event()
            epoch = self.flush_epoch
            data = engine.data_to_send(anyio.current_time())
            if data:
                if self._tracer is not None:
                    self._tracer.sent(data)
                try:
                    await self.stream.send(data)
                except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
                    self.transport_failed = not self.closing
                    self.transport_error = describe_transport_error(exc)
                    await self.stream.aclose()  # the reader sees the end and reports it
                    return
            self.flushed_epoch = epoch
            self._flushed.set()
            self._flushed = anyio.Event()

    async def _timer(self) -> None:
        engine = self.engine
        while True:
            deadline = engine.tick(anyio.current_time())
            events = engine.next_events()
            if events:
                self._on_events(events)  # e.g. our idle timeout closed the connection
            if engine.has_output:
                self.kick()
            if engine.closed:
                # A silent peer will not answer our close: flush it, then stop waiting for input.
                with anyio.move_on_after(1.0):
                    while self.flushed_epoch < self.flush_epoch:
                        await self._flushed.wait()
                with anyio.CancelScope(shield=True):
                    await self.stream.aclose()
                return
            delay = 1.0 if deadline is None else max(0.0, min(deadline - anyio.current_time(), 1.0))
            with anyio.move_on_after(delay):
                await self._timer_wake.wait()
            if self._timer_wake.is_set():
                self._timer_wake = anyio.Event()
