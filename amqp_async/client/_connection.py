"""The awaitable connection: one background task per connection drives the Sans-IO engine over an anyio stream.

Ownership. The engine (:class:`amqp_async.protocol.Connection`) is only ever touched on the connection's event loop,
and never across an ``await``: public coroutines (``send``, ``receive``, ``accept``...) hand their work to it
synchronously and wake the writer, so any number of tasks may share a connection, a sender or a receiver. From
another thread, run the coroutine on the loop (``anyio.from_thread.run`` with a portal, or
``asyncio.run_coroutine_threadsafe(coro, loop)``); :meth:`Connection.run_threadsafe` does the latter for asyncio.

The background task drives the engine with an :class:`~amqp_async.io.driver.EngineDriver` (shared with the
embedded broker): a reader taking large reads and dispatching the engine's events to the waiting senders, receivers
and trackers; a writer that writes everything queued in one socket write (callers that produce output faster than
the socket takes it wait while more than :data:`HIGH_WATER` bytes are queued, so nothing grows without bound); and
a timer for heartbeats and idle timeouts.

Reconnect: when the transport fails and reconnect is on, the task connects again (the next URL of the failover
list, after the Backoff's delay), re-begins the sessions and re-attaches the links; deliveries that were sent but
not settled are reported to their trackers as :class:`DeliveryInDoubt` — never resent silently. It gives up after
the Backoff's ``max_time`` (60 s by default) or ``max_tries``: every waiter then raises a :class:`ConnectionLost`
whose ``__cause__`` is the last attempt's error.

Errors and state: each way a connection fails has its own error class (``amqp_async.errors``; the transport's in
``_transport``), and each change of :attr:`Connection.state` is published to ``conn.state_changes()``
(``_state``) and logged on ``amqp_async.connection``.
"""

from __future__ import annotations

import importlib
import logging
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Mapping, Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
import anyio.abc
from anyio.streams.memory import MemoryObjectReceiveStream

from .. import protocol
from ..codec import conditions
from ..codec.performatives import SENDER, Error
from ..errors import (
    AMQPError,
    AuthenticationError,
    ClosedByApplication,
    ConnectError,
    ConnectionClosed,
    ConnectionError,
    ConnectionLost,
)
from ..io import driver as _driver
from ..io.driver import EngineDriver
from ..protocol import events as ev
from ..protocol.sasl import SaslClient
from ._arguments import check_thread, check_uint, get_ident
from ._attempts import Attempts, failed_before_open, first_connect_failure, lost
from ._capabilities import PeerCapabilities
from ._config import ResolvedOptions
from ._link_options import ReceiverOptions, SenderOptions, _fields, _symbols
from ._links import Receiver, Sender, hand_dropped
from ._open_endpoints import PRUNE_FROM, forget, with_added
from ._opener import LinkOpener
from ._opening import Opening
from ._session import Session
from ._state import DEFAULT_STATE_BUFFER, ConnectionState, StateChange, StatePublisher, log_change
from ._stream_receiver import StreamReceiver, window_frames
from ._stream_sender import StreamSender
from ._threadsafe import LoopHandle
from ._trace import FrameTracer
from ._transport import ATTEMPT_ERRORS, attempt_failure, open_stream, where
from ._url import Address

if TYPE_CHECKING:
    from ..codec.values import AMQPValue
    from ..types import symbol
    from ._tracing import MessageTracing
    from ._transaction import Transaction

__all__ = ["HIGH_WATER", "Connection"]

_T = TypeVar("_T")

log = logging.getLogger("amqp_async.connection")

#: Bytes of queued output above which producers wait for the writer.
HIGH_WATER = 1 << 20

#: How long, beyond the driver's close timeout, :meth:`Connection.close` waits before it aborts the transport.
_CLOSE_GRACE = 5.0
#: How long an abort may take (the background task only closes its socket then).
_ABORT_GRACE = 5.0


def _error_text(error: Error | None) -> tuple[str, str]:
    if error is None:
        return "amqp:connection:forced", ""
    return str(error.condition), error.description or ""


def _spawn_system_task(function: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """Start a task that outlives the caller's scope (the connection lives until closed, not until a ``with``).

    anyio has no portable "system task", so this asks the running loop: asyncio's ``create_task`` (the task is
    kept referenced until done), else trio's ``spawn_system_task``.
    """
    import asyncio

    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        trio = importlib.import_module("trio")
        trio.lowlevel.spawn_system_task(function)
        return
    task: asyncio.Task[None] = loop.create_task(function())
    _BACKGROUND.add(task)
    task.add_done_callback(_BACKGROUND.discard)


_BACKGROUND: set[Any] = set()


class _DriverEnded(Exception):
    """The driver a caller waited on has ended (the connection was lost): stop waiting on it."""


class Connection(LinkOpener):
    """An open AMQP connection. Get one with :func:`connect`.

    Use :meth:`open_sender`, :meth:`open_receiver` (on the connection's default session) or :meth:`open_session`.
    Closing the connection (``await conn.close()``, or leaving ``async with``) ends every session and link.

    Attributes:
        container_id: our container id.
        remote_container_id: the peer's container id.
        remote_properties: the peer's open properties.
        offered_capabilities, desired_capabilities: what the peer announced in its open.
    """

    # An idle connection is mostly its objects' headers: without slots its 33 attributes would take a dict of
    # 1.5 KiB (CPython shares an instance dict's keys only up to 30), a fifteenth of a connection's footprint.
    __slots__ = (
        "__weakref__",
        "_address",
        "_attempts",
        "_close_seen",
        "_closing",
        "_controller",
        "_controller_lock",
        "_default_session",
        "_deliveries_changed",
        "_done",
        "_driver",
        "_engine",
        "_error",
        "_finished",
        "_first_failures",
        "_first_pass",
        "_loop",
        "_loop_handle",
        "_loss",
        "_next_url_failure",
        "_open_timed_out",
        "_open_watch",
        "_opened",
        "_opened_at",
        "_options",
        "_prune_sessions_at",
        "_publisher",
        "_reconnecting",
        "_reconnects",
        "_returned",
        "_run_scope",
        "_sessions",
        "_state",
        "_state_changed",
        "_stream",
        "_thread",
        "_tracer",
        "_tracing",
        "_transport_failed",
        "container_id",
    )

    def __init__(self, options: ResolvedOptions) -> None:
        self._options = options
        self.container_id = options.container_id
        self._engine: protocol.Connection | None = None
        self._stream: anyio.abc.ByteStream | None = None
        self._address: Address | None = None
        # Made only while someone waits (an idle connection holds none): see _notify and _wait_state. Receivers
        # waiting for deliveries have one of their own, which the credit given to our senders does not set.
        self._state_changed: anyio.Event | None = None
        self._deliveries_changed: anyio.Event | None = None
        self._finished = False  # the background task has ended
        self._done: anyio.Event | None = None
        self._opened = False
        self._returned = False  # connect() returned it (its failure is news from then on: logged as a warning)
        self._closing = False
        self._error: AMQPError | None = None
        self._sessions: list[Session] = []
        self._prune_sessions_at = PRUNE_FROM
        self._default_session: Session | None = None
        self._controller: Any = None  # the link to the peer's transaction coordinator, made on first use
        self._controller_lock: anyio.Lock | None = None
        self._tracer = FrameTracer.from_environment()
        # OpenTelemetry message tracing (docs/client.md, "Tracing"): None when off, as it is by default.
        self._tracing: MessageTracing | None = None
        if options.tracing is not None:
            from ._tracing import MessageTracing

            self._tracing = MessageTracing(self, options.tracing)
        self._driver: EngineDriver | None = None
        self._reconnects = 0
        self._transport_failed = False
        self._reconnecting = False
        self._attempts = Attempts(options)
        # The first connect's pass over the URLs, and why each tried failed: a peer that accepts TCP and then does
        # not open the connection sends it to the next URL, as a refused one does (_on_closed).
        self._first_pass: Iterator[tuple[float, Address]] | None = None
        self._first_failures: list[ConnectError] = []
        self._next_url_failure: ConnectError | None = None
        self._loss: ConnectionLost | None = None  # how the connection was last lost
        self._opened_at: float | None = None  # when the current connection opened (for the Backoff's restart)
        self._close_seen = False  # the engine reported the end of the current connection
        self._open_timed_out = False  # the peer did not open the current connection within connect_timeout
        self._state = ConnectionState.DISCONNECTED  # OPEN once the first connection opened (connect() returns)
        self._publisher = StatePublisher()
        self._open_watch: anyio.CancelScope | None = None
        # The background task's scope: cancelled to abort the connection (a cancelled connect or close).
        self._run_scope = anyio.CancelScope()
        self._loop: Any = None
        self._loop_handle = LoopHandle.current()  # for run_threadsafe, from other threads
        # The thread whose event loop runs the connection: calls from any other are refused (check_thread).
        self._thread = threading.get_ident()

    # --- state -------------------------------------------------------------------------------------------

    @property
    def engine(self) -> protocol.Connection:
        """The protocol engine (for advanced use, on the connection's event loop only)."""
        if self._engine is None:
            raise ConnectionError("the connection is not established")
        return self._engine

    @property
    def address(self) -> Address | None:
        """The address of the peer we are connected to (with failover: the current one)."""
        return self._address

    @property
    def is_closed(self) -> bool:
        """True once the connection is closed, or failed for good (even while its task is still winding down)."""
        return self._finished or self._closing or self._error is not None

    @property
    def state(self) -> ConnectionState:
        """Where the connection stands: OPEN, DISCONNECTED or RECONNECTING (an outage, while reconnect goes on),
        FAILED or CLOSED. See :meth:`state_changes`."""
        return self._state

    @property
    def error(self) -> AMQPError | None:
        """The error the connection failed with (what every waiter raises), or None while it has not failed."""
        return self._error

    def state_changes(self, max_buffer: float = DEFAULT_STATE_BUFFER) -> MemoryObjectReceiveStream[StateChange]:
        """A stream of this connection's state changes from now on, one :class:`StateChange` each, ending after
        the final one (FAILED or CLOSED; at once if the connection is already there)::

            async with conn.state_changes() as changes:
                async for change in changes:
                    if change.state is ConnectionState.DISCONNECTED:
                        ...  # change.error says why

        An anyio memory object stream: close it (or leave its ``with``) when done with it. It holds up to
        ``max_buffer`` changes not yet taken; changes beyond that are dropped for it (and a warning logged),
        never waited for. Each call gives an independent stream.

        Raises:
            ValueError: ``max_buffer`` below 1.
        """
        return self._publisher.subscribe(max_buffer, ended=self._state.final)

    def _set_state(
        self, state: ConnectionState, *, error: AMQPError | None = None, address: Address | None = None
    ) -> None:
        """Enter ``state``: log it and publish the change (a final state is never left)."""
        previous = self._state
        if previous.final or (state is previous and state is not ConnectionState.DISCONNECTED):
            return
        self._state = state
        # a reconnected change (OPEN from RECONNECTING) names the attempt that opened the new connection
        reconnecting = state in (ConnectionState.RECONNECTING, ConnectionState.DISCONNECTED) or (
            state is ConnectionState.OPEN and previous is ConnectionState.RECONNECTING
        )
        attempt = self._attempts.count if reconnecting else 0
        url = str(address) if address is not None else None
        change = StateChange(state, previous, error, url, attempt, anyio.current_time())
        log_change(change, self._attempts, opened=self._returned)
        self._publisher.publish(change)
        if state.final:
            self._publisher.close()

    def _closed_error(self) -> ClosedByApplication:
        return ClosedByApplication(f"the connection to {self._address} was closed by the application")

    @property
    def remote_container_id(self) -> str | None:
        """The peer's container id, from its open frame."""
        remote = self._engine.remote_open if self._engine is not None else None
        return None if remote is None else remote.container_id

    @property
    def remote_properties(self) -> dict[str, AMQPValue] | None:
        """The peer's connection properties, from its open frame."""
        remote = self._engine.remote_open if self._engine is not None else None
        return None if remote is None else remote.properties

    @property
    def remote_offered_capabilities(self) -> tuple[symbol, ...]:
        """The capabilities the peer offered in its open frame."""
        remote = self._engine.remote_open if self._engine is not None else None
        return tuple(remote.offered_capabilities or ()) if remote is not None else ()

    @property
    def peer_capabilities(self) -> PeerCapabilities:
        """What the peer can do, from its open frame, in typed form (anonymous relay, transactions, dynamic
        nodes...: see :class:`~amqp_async.PeerCapabilities` for what is known when)."""
        return PeerCapabilities.from_open(self._engine.remote_open if self._engine is not None else None)

    def _check(self) -> None:
        """Raise the connection's error if it has one (or :class:`ClosedByApplication` if the application closed
        it)."""
        if get_ident() != self._thread:
            check_thread(self)
        error = self._error
        if error is not None:
            # One error object for every waiter, raised again and again: each raise starts a fresh traceback, else
            # it would grow by the frames of every call that raised it (and keep those frames alive).
            raise error.with_traceback(None)
        if self._closing or self._finished:
            raise self._closed_error()

    # --- opening -----------------------------------------------------------------------------------------

    async def _establish(self) -> None:
        """Connect (trying each URL in turn, with the reconnect policy's delays), then start the driver.

        A connect that fails or is cancelled leaves nothing behind: the background task has ended when it raises.
        """
        await self._connect_transport(first=True)
        _spawn_system_task(self._run)
        try:
            while not self._opened:
                if self._error is not None:
                    raise self._error
                await self._wait_state()
            if self._error is not None:
                # The peer's close came with its open: how a peer refuses a connection (§2.4.1: an open, then at
                # once a close with the error, e.g. amqp:resource-limit-exceeded). connect() returned a connection
                # failed already before, its error logged, and the first use raised it.
                raise self._error
        except BaseException:
            self._closing = True
            await self._abort()
            raise
        self._returned = True

    async def _abort(self) -> None:
        """End the background task now, without a close handshake, and wait until it has ended (shielded: this
        runs on the way out of a cancelled caller too)."""
        self._run_scope.cancel()
        with anyio.CancelScope(shield=True), anyio.move_on_after(_ABORT_GRACE):
            await self._wait_done()

    async def _wait_done(self) -> None:
        """Wait until the background task has ended."""
        if self._finished:
            return
        done = self._done
        if done is None:
            done = self._done = anyio.Event()
        await done.wait()

    def _new_engine(self, address: Address) -> protocol.Connection:
        options = self._options
        user, password = options.credentials_for(address)
        hostname = options.virtual_host_for(address) or None
        sasl = None
        if options.sasl_enabled:
            sasl = SaslClient(
                user=user,
                password=password,
                allowed_mechs=options.allowed_mechs,
                allow_insecure_mechs=options.allow_insecure_mechs,
                encrypted=address.tls,
                hostname=hostname,
            )
        engine = protocol.Connection(
            role=protocol.CLIENT,
            container_id=options.container_id,
            hostname=hostname,
            max_frame_size=options.max_frame_size or 65536,
            idle_timeout=options.heartbeat,
            # §2.4.5: "the value in idle-time-out SHOULD be half the peer's actual timeout threshold"
            advertised_idle_timeout=options.heartbeat / 2 if options.heartbeat else None,
            properties=options.properties,
            offered_capabilities=options.offered_capabilities,
            desired_capabilities=options.desired_capabilities,
            sasl=sasl,
        )
        engine.open()
        return engine

    async def _connect_transport(self, *, first: bool) -> None:
        """Open a TCP, TLS or WebSocket stream (``_transport``) to the first address that answers.

        The first connection tries each URL once and fails fast (the caller owns retries of ``connect``); a
        reconnect follows the Backoff policy across the failover list, as proton's reconnect does, until its
        ``max_tries`` or ``max_time``.

        Raises:
            ConnectError: (first connection) no URL answered: the last one's error, naming every URL tried.
            ConnectionLost: (reconnect) reconnecting gave up; its cause is the last attempt's error.
        """
        attempts = self._attempts
        if first:
            if self._first_pass is None:
                self._first_pass = attempts.first()
            plan, failures = self._first_pass, self._first_failures  # resumed at the next URL (_run)
        else:
            plan, failures = attempts.reconnecting(), []  # (the call starts an outage's clock: only here)
        out_of_time = False
        for delay, address in plan:
            if not first and attempts.out_of_time(delay):
                out_of_time = True  # no attempt could start in time
                break
            if delay:
                await anyio.sleep(delay)
            if self._closing:
                return
            attempt = attempts.start(address, reconnecting=not first)
            if not first:
                self._set_state(ConnectionState.RECONNECTING, address=address)
            try:
                with anyio.fail_after(attempt.timeout):  # TimeoutError is an OSError
                    stream = await self._open_stream(address)
            except ATTEMPT_ERRORS as exc:
                failure = attempt_failure(exc, address, attempt.timeout, attempt.limit)
                failures.append(failure)
                if first:
                    log.debug("%s", failure)
                else:
                    attempts.last_error = failure
                    self._set_state(ConnectionState.DISCONNECTED, error=failure, address=address)
                continue
            self._stream = stream
            self._address = address
            self._engine = self._new_engine(address)
            log.info("connected to %s", address)
            return
        if first:
            raise first_connect_failure(failures)
        raise attempts.gave_up(self._loss, self._address, out_of_time=out_of_time)

    async def _open_stream(self, address: Address) -> anyio.abc.ByteStream:
        return await open_stream(address, self._options)

    # --- the background task -----------------------------------------------------------------------------

    async def _run(self) -> None:
        try:
            with self._run_scope:
                while True:
                    await self._drive()
                    failure = self._next_url_failure
                    if failure is not None:  # the first connect: on to the next URL of the list
                        self._next_url_failure = None
                        self._first_failures.append(failure)
                        await self._close_stream()
                        await self._connect_transport(first=True)  # or raises, naming every URL tried
                        continue
                    if not self._should_reconnect():
                        break
                    await self._reconnect()
        except AMQPError as exc:
            if not self._closing:
                self._fail(exc)  # e.g. reconnecting gave up: the waiters learn why
        except Exception as exc:  # the driver must never die silently: its waiters learn why
            if self._error is None:
                self._fail(
                    ConnectionError(
                        f"the driver of the connection to {self._address} failed: {exc!r}", **where(self._address)
                    )
                )
            log.exception("connection driver failed")
        finally:
            await self._close_stream()
            if self._error is None and not self._closing:
                self._fail(ConnectionLost(f"connection to {self._address} ended", **where(self._address)))
            self._fail_all()
            self._finished = True
            if self._done is not None:
                self._done.set()
            self._notify()

    async def _drive(self) -> None:
        """Run the engine over the current stream (reader, writer, timer) until the connection ends.

        Whether to reconnect afterwards is decided where the engine reports the end (:meth:`_on_closed`); only a
        transport that ended with no such report (none is expected) falls back on the driver's view.
        """
        engine = self._engine
        assert engine is not None and self._stream is not None
        self._transport_failed = False
        self._close_seen = False
        self._open_timed_out = False
        driver = self._driver = EngineDriver(engine, self._stream, self._dispatch, tracer=self._tracer)
        driver.closing = self._closing
        attempt = self._attempts.current
        deadline = attempt.deadline if attempt is not None else None
        if deadline is None or engine.remote_open is not None:
            await driver.run()
        else:
            async with anyio.create_task_group() as group:
                group.start_soon(self._watch_open, driver, deadline)
                await driver.run()
                group.cancel_scope.cancel()
        if not self._close_seen:
            self._transport_failed = driver.transport_failed and not self._closing

    async def _watch_open(self, driver: EngineDriver, deadline: float) -> None:
        """Abort the transport when the peer has not opened the connection by ``deadline`` (connect_timeout, or the
        end of the reconnect's max_time: TLS, SASL and the open exchange of one attempt). Ends as soon as the
        peer's open arrives."""
        with anyio.CancelScope() as scope:
            self._open_watch = scope
            await anyio.sleep_until(deadline)
            if driver.engine.remote_open is None:
                self._open_timed_out = True
                driver.abort()
        self._open_watch = None

    def _should_reconnect(self) -> bool:
        return bool(self._options.reconnect) and self._opened and self._transport_failed and not self._closing

    async def _reconnect(self) -> None:
        """Connect again and restore sessions and links (the links report in-doubt deliveries first)."""
        self._reconnects += 1
        self._attempts.restart_if_stable(self._opened_at)
        self._opened_at = None
        self._reconnecting = True
        for session in self._sessions:
            session._on_transport_lost()
        self._error = None
        self._keep_open_sessions()
        self._notify()  # closes that wait for the peer's answer: it will not come on this transport
        await self._connect_transport(first=False)
        self._keep_open_sessions()  # some may have been closed meanwhile
        for session in list(self._sessions):
            session._restore()
        self._kick()
        self._notify()  # waiters on the old links and sessions find them replaced

    def _keep_open_sessions(self) -> None:
        """After a transport loss: sessions closed, or being closed by the application, end here and are not begun
        again (a close waiting for the peer's end returns: it will not come on the lost transport)."""
        for session in self._sessions:
            if session._closing:
                session._ended = True
        self._sessions = [session for session in self._sessions if not session.is_closed]

    async def _close_stream(self) -> None:
        if self._stream is not None:
            with anyio.CancelScope(shield=True):
                try:
                    await self._stream.aclose()
                except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
                    pass

    # --- coordination ------------------------------------------------------------------------------------

    def _kick(self) -> None:
        """Wake the writer: the engine has (or may have) output."""
        if self._driver is not None:
            self._driver.kick()

    def _write_soon(self) -> None:
        """Hand the engine's output to the socket now when it takes it without waiting, else wake the writer: for
        output the peer waits on while the application goes on without yielding (a credit top-up while it takes
        queued deliveries), which waking the writer would hold until the application's next ``await`` that
        suspends."""
        if self._driver is not None:
            self._driver.write_or_wake()

    def _write_eagerly(self) -> None:
        """Write now the output a caller waits on (see :meth:`EngineDriver.write_eagerly`), or wake the writer."""
        if self._driver is not None:
            self._driver.write_eagerly()

    def _notify(self) -> None:
        """Wake everything that waits for a state change (credit, deliveries, outcomes, attach, close...)."""
        self._notify_credit()
        changed = self._deliveries_changed
        if changed is not None:
            self._deliveries_changed = None
            changed.set()

    def _notify_credit(self) -> None:
        """Wake what waits for a state change, but not receivers waiting for deliveries (:meth:`_wait_deliveries`):
        for credit given to a sender of ours, which changes nothing a receiver looks at."""
        changed = self._state_changed
        if changed is not None:
            self._state_changed = None
            changed.set()

    async def _wait_state(self) -> None:
        """Wait for a state change: any event of the connection but the outcomes of messages sent (those wake
        their trackers)."""
        changed = self._state_changed
        if changed is None:
            changed = self._state_changed = anyio.Event()
        await changed.wait()

    async def _wait_deliveries(self) -> None:
        """Wait, as a receiver does for its next delivery, for a state change other than credit given to our
        senders (a peer that tops credit up after every message would wake a waiting receiver as often)."""
        changed = self._deliveries_changed
        if changed is None:
            changed = self._deliveries_changed = anyio.Event()
        await changed.wait()

    async def _wait_writable(self) -> None:
        """Wait while the queued output is above :data:`HIGH_WATER`, or until the connection is lost (the caller
        then finds out what to wait for next)."""
        driver = self._driver
        if driver is None:
            return

        def check() -> None:
            self._check()
            if driver.ended:
                raise _DriverEnded

        try:
            await driver.wait_output_below(HIGH_WATER, check)
        except _DriverEnded:
            pass

    async def _wait_flushed(self) -> None:
        """Wait until everything queued before this call has been written to the socket, or until the connection
        is lost (what it had not written is lost with it: at-most-once)."""
        driver = self._driver
        if driver is not None:
            await driver.wait_flushed(driver.flush_epoch, self._check)

    def _dispatch(self, events: list[ev.Event]) -> None:
        changed = credit = False
        for event in events:
            kind = type(event)
            handler = _EVENT_HANDLERS.get(kind)
            if handler is not None:
                handler(self, event)
            if kind is ev.DeliveriesUpdated and _outcomes_of_sent(event):  # type: ignore[arg-type]
                continue
            if kind is ev.FlowReceived and _credit_of_sender(event):  # type: ignore[arg-type]
                credit = True
                continue
            changed = True
        if changed:
            self._notify()
        elif credit:
            self._notify_credit()

    def _on_opened(self, event: ev.ConnectionOpened) -> None:
        if self._driver is not None:
            self._driver.wake_timer()  # the peer's idle timeout may need our first heartbeat soon
        if self._open_watch is not None:
            self._open_watch.cancel()
        if self._opened:
            self._set_state(ConnectionState.OPEN, address=self._address)  # reconnected
        else:
            self._state = ConnectionState.OPEN  # connect() returns it: nobody can have subscribed before
        self._opened = True
        self._opened_at = anyio.current_time()
        self._reconnecting = False
        self._reconnects = 0

    def _on_closed(self, event: ev.ConnectionClosed) -> None:
        """The engine reports the end of the connection: decide whether it is retried (see docs/client.md,
        "Reconnect": only network faults are) and which error the waiters get otherwise."""
        self._close_seen = True
        hand_dropped(event.dropped, "connection")  # what the peer's close (or the transport's end) cut short
        if self._closing and event.transport_ended:
            return  # we closed, and the peer dropped the transport (or did not answer in time): nothing failed
        idle_expired = (
            not event.remote
            and event.error is not None
            and event.error.condition == conditions.RESOURCE_LIMIT_EXCEEDED
            and event.sasl_code is None
        )
        # This connection had opened (else: an attempt that failed before the peer's open).
        opened = self._engine is not None and self._engine.remote_open is not None
        # Network faults: the transport broke or ended without a close frame (this includes an attempt aborted by
        # connect_timeout), or the peer fell silent past our idle timeout. Everything else is final: a close
        # frame from the peer (its deliberate decision), a failed authentication, and the close we sent because
        # the peer broke the protocol (decode or framing error, a frame out of place): a peer that did so once
        # will do so again.
        # A peer that answered with another protocol's header (an AMQP 0-9-1 port, HTTP) before any open: the
        # wrong port, or a URL of a failover list served by something else; as for a URL that refuses, the next one
        # is tried (it stopped the first connect at the first such URL).
        foreign = event if event.protocol_header is not None and not opened and event.error is not None else None
        network_fault = event.transport_ended or idle_expired or foreign is not None
        if network_fault and self._options.reconnect and self._opened and not self._closing:
            # The network failed: the driver reconnects, and callers keep waiting rather than fail.
            self._transport_failed = True
            self._reconnecting = True
            if opened:
                self._loss = self._lost(idle_expired)
                self._set_state(ConnectionState.DISCONNECTED, error=self._loss, address=self._address)
            else:
                failure = self._attempts.last_error = self._failed_before_open(foreign)
                self._set_state(ConnectionState.DISCONNECTED, error=failure, address=self._address)
            return
        self._transport_failed = False
        located = where(self._address)
        if network_fault:
            if not self._opened and not self._closing:
                # The first connect: the stream connected, and ended or timed out before the peer's open. As for a
                # URL that refuses, the next one of the list is tried (connect() raises once each was, _run).
                self._next_url_failure = self._failed_before_open(foreign)
                return
            self._fail(self._lost(idle_expired) if opened else self._failed_before_open(foreign))
            return
        if event.sasl_code is not None or (
            event.error is not None and event.error.condition == conditions.UNAUTHORIZED_ACCESS and not event.remote
        ):
            # A failed SASL outcome, or no mechanism both sides accept: an authentication error either way.
            condition, description = _error_text(event.error)
            self._fail(
                AuthenticationError(
                    f"cannot connect to {self._address}: {description}",
                    sasl_code=event.sasl_code,
                    condition=condition,
                    **located,
                )
            )
            return
        if event.error is not None and not (self._closing and not event.remote):
            condition, description = _error_text(event.error)
            if event.remote:
                self._fail(ConnectionClosed(description, condition=condition, info=event.error.info, **located))
            else:  # we closed it: the peer broke the protocol (the condition names the breach)
                self._fail(
                    ConnectionError(
                        f"closed the connection to {self._address}: {description}",
                        condition=condition,
                        info=event.error.info,
                        **located,
                    )
                )
        elif event.error is None and event.remote and not self._closing:
            # A close frame without an error (§2.4.3): the peer's decision all the same, never retried. The waiters
            # raised ConnectionLost (amqp-async:io, "ended"), a network failure, which it is not. The condition is
            # amqp:connection:forced, as a peer's detach without an error is amqp:link:detach-forced (LinkDetached).
            self._fail(
                ConnectionClosed("it gave no error condition", condition=str(conditions.CONNECTION_FORCED), **located)
            )

    def _lost(self, idle_expired: bool) -> ConnectionLost:
        return lost(self._address, self._options.heartbeat if idle_expired else None, self._driver)

    def _failed_before_open(self, foreign: ev.ConnectionClosed | None = None) -> ConnectError:
        """Why an attempt ended before the peer's open; ``foreign``: the event of a peer that spoke another
        protocol (its header named in the error, with the engine's condition)."""
        if foreign is not None and foreign.error is not None:
            condition, description = _error_text(foreign.error)
            return ConnectError(
                f"cannot connect to {self._address}: {description}", condition=condition, **where(self._address)
            )
        return failed_before_open(self._address, self._attempts.current, self._driver, timed_out=self._open_timed_out)

    def _fail(self, error: AMQPError) -> None:
        """The connection failed for good with ``error``: what every waiter raises from now on."""
        self._error = error
        self._set_state(ConnectionState.FAILED, error=error, address=self._address)

    def _fail_all(self) -> None:
        error = self._error if self._error is not None else self._closed_error()
        for session in self._sessions:
            session._on_connection_failed(error)

    def _on_session_event(self, event: Any) -> None:
        owner = event.session.user_data
        if owner is not None:
            owner._on_event(event)

    def _on_link_event(self, event: Any) -> None:
        owner = event.link.user_data
        if isinstance(event, ev.LinkDetached) and event.dropped:
            hand_dropped(event.dropped, "sender")  # (before the link fails what it held)
        if owner is not None:
            owner._on_event(event)
        elif isinstance(event, ev.LinkAttached) and not event.link.locally_attached:
            # A link the peer starts towards a client: refuse it, as nothing here listens.
            event.link.detach(
                error=Error(condition=conditions.NOT_IMPLEMENTED, description="this client accepts no incoming links")
            )

    def _on_flow(self, event: ev.FlowReceived) -> None:
        if event.link is not None and event.link.user_data is not None:
            event.link.user_data._on_event(event)

    def _on_updated(self, event: ev.DeliveriesUpdated) -> None:
        for delivery in event.deliveries:
            tracker = delivery.user_data
            if tracker is not None:
                tracker._update(delivery)

    def _on_session_begun(self, event: ev.SessionBegun) -> None:
        owner = event.session.user_data
        if owner is not None:
            owner._on_event(event)
        elif not event.session.locally_begun:
            event.session.begin()  # a session the peer starts: answer it (links on it are refused)

    # --- public API --------------------------------------------------------------------------------------

    def open_session(
        self,
        *,
        incoming_window: int | None = None,
        handle_max: int | None = None,
        offered_capabilities: str | Sequence[str] | None = None,
        desired_capabilities: str | Sequence[str] | None = None,
        properties: Mapping[str, object] | None = None,
    ) -> Opening[Session]:
        """Begin a session (§2.5): ``await`` it for the :class:`Session`, or ``async with`` it to end the session
        (and its links) at the end of the block.

        Args:
            incoming_window: the session's incoming window, in transfer frames (§2.5.6); default: the engine's
                (2048).
            handle_max: the highest link handle the session accepts (§2.7.2); default: 2**32 - 1.
            offered_capabilities: the capabilities the session offers (symbols; a str is one).
            desired_capabilities: the capabilities the session desires of the peer.
            properties: the session's properties (str keys are sent as symbols).

        Raises:
            TypeError, ValueError: an option the begin frame cannot carry (a window or handle-max that is not a
                uint, §2.7.2; a window of 0), at the call.
            ConnectionError: (when awaited) the connection has ended.
        """
        options: dict[str, Any] = {}
        if incoming_window is not None:
            options["incoming_window"] = check_uint(
                incoming_window, "incoming_window", minimum=1, why=" (with 0 the peer could send no transfer)"
            )
        if handle_max is not None:
            options["handle_max"] = check_uint(handle_max, "handle_max")
        if offered_capabilities is not None:
            options["offered_capabilities"] = _symbols(offered_capabilities, "offered_capabilities")
        if desired_capabilities is not None:
            options["desired_capabilities"] = _symbols(desired_capabilities, "desired_capabilities")
        if properties is not None:
            options["properties"] = _fields(properties, "properties")
        return Opening(self._begin_session(options), call="open_session()")

    async def _begin_session(self, options: dict[str, Any]) -> Session:
        self._check()
        session = Session(self, options)
        self._sessions, self._prune_sessions_at = with_added(self._sessions, session, self._prune_sessions_at)
        try:
            await session._begin()
        except BaseException:
            session._abandon()
            forget(self._sessions, session)
            raise
        return session

    async def _session(self) -> Session:
        if self._default_session is None or self._default_session.is_closed:
            self._default_session = await self._begin_session({})
        return self._default_session

    async def _attach_sender(self, options: SenderOptions) -> Sender[Any]:
        # Links opened on the connection go on its default session, begun with the first of them.
        return await (await self._session())._attach_sender(options)

    async def _attach_receiver(self, options: ReceiverOptions) -> Receiver:
        return await (await self._session())._attach_receiver(options)

    async def _attach_stream_sender(self, options: SenderOptions, buffer_size: int) -> StreamSender[Any]:
        return await (await self._session())._attach_stream_sender(options, buffer_size)

    async def _attach_stream_receiver(self, options: ReceiverOptions, buffer_size: int) -> StreamReceiver:
        # A session of its own, whose incoming window is the receiver's buffer (§2.5.6): its unread frames hold the
        # peer back without holding back the other links of the connection.
        window = window_frames(buffer_size, self.engine.max_frame_size)
        session = await self._begin_session({"incoming_window": window})
        try:
            return await session._attach_stream_receiver(options, buffer_size, owns_session=True)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await session.close()
            raise

    def transaction(self) -> Transaction:
        """A local transaction (§4) on this connection, declared when it is awaited or entered.

        ``async with conn.transaction() as txn:`` commits on a normal exit and rolls back on an exception or a
        cancellation; ``txn = await conn.transaction()`` leaves ``commit()`` / ``rollback()`` to the caller. See
        :class:`~amqp_async.Transaction`.

        Raises (when declared):
            TransactionError: the peer has no transaction coordinator, or refused the declare; the condition is
                the peer's.
        """
        from ._transaction import Transaction

        self._check()
        return Transaction(self)

    async def close(self, error: Error | None = None) -> None:
        """Close the connection (§2.4.3) and wait until the peer answered or the transport ended.

        Idempotent. Unsettled deliveries of its senders are reported as in doubt. A peer that does not answer the
        close has ``amqp_async.io.driver.CLOSE_TIMEOUT`` seconds (10) before the socket is closed without its
        answer; a cancelled ``close()`` closes the socket at once. Either way nothing of the connection is left
        running once ``close()`` returns (or raises the cancellation).
        """
        check_thread(self)
        if self._finished:
            return
        if not self._closing:
            self._closing = True
            self._set_state(ConnectionState.CLOSED, address=self._address)
            if error is None:
                try:
                    await self._write_backlog()
                except BaseException:
                    await self._abort()  # cancelled: the socket is closed at once, as documented
                    raise
            driver = self._driver
            engine = self._engine
            if driver is not None and driver.engine is engine and engine is not None and not engine.closed:
                driver.closing = True
                for session in self._sessions:  # before the close drops what waits for a session window (§2.4.3)
                    session._ending(self._closed_error(), "connection")
                engine.close(error)
                self._kick()
                driver.start_close_timer()
            else:
                self._run_scope.cancel()  # between two connections (reconnecting): nothing to close on the wire
        try:
            with anyio.move_on_after(_driver.CLOSE_TIMEOUT + _CLOSE_GRACE):
                await self._wait_done()
        finally:
            if not self._finished:  # cancelled, or the driver overran its bounds: end it now
                await self._abort()

    async def _write_backlog(self) -> None:
        """Before a clean close: the transfers the engine still holds for the peer's session window (§2.5.6) are
        written as the peer opens it (at most ``CLOSE_TIMEOUT`` seconds). The close dropped them: at-most-once
        messages that submit() had taken were lost without a word (19,456 of 20,000 reached the broker)."""
        engine = self._engine
        if engine is None or engine.closed or self._reconnecting:
            return
        with anyio.move_on_after(_driver.CLOSE_TIMEOUT):
            while (
                any(session.has_backlog for session in engine.sessions)
                and not engine.closed
                and engine is self._engine
                and not self._reconnecting
                and self._error is None
            ):
                await self._wait_state()
            driver = self._driver
            if driver is not None and not engine.closed and engine is self._engine:
                try:
                    await driver.wait_flushed(driver.flush_epoch, self._raise_failure)
                except AMQPError:
                    pass  # lost meanwhile: the close finds it so

    def _raise_failure(self) -> None:
        """Raise the connection's failure, if it failed (a close under way is none)."""
        if self._error is not None:
            raise self._error

    def run_threadsafe(self, coroutine: Awaitable[_T]) -> Future[_T]:
        """Run an awaitable of this connection (``sender.send(...)``, ``receiver.receive()``...) on the
        connection's event loop, from another thread: asyncio or trio alike.

        Returns at once a :class:`concurrent.futures.Future` of its result: ``.result(timeout)`` waits for it in the
        calling thread (never call that on the loop's own thread: it would wait for itself); ``.cancel()`` cancels
        the awaitable.

        Raises:
            RuntimeError: the connection's event loop has ended (or it was not made on one).
        """
        handle = self._loop_handle
        if handle is None:
            raise RuntimeError("the connection was not made on a running event loop: nothing runs its work")
        return handle.run(coroutine)

    async def __aenter__(self) -> Connection:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"<amqp_async.Connection {self._address} {self._state.value}>"


def _credit_of_sender(event: ev.FlowReceived) -> bool:
    """True when ``event`` is a link's flow for one of our senders (its credit): what waits for credit wakes, and
    receivers waiting for deliveries do not (:meth:`Connection._wait_deliveries`)."""
    link = event.link
    return link is not None and link.role is SENDER and not event.drained


def _outcomes_of_sent(event: ev.DeliveriesUpdated) -> bool:
    """True when ``event`` only brings outcomes of deliveries we sent (one disposition's deliveries are all of one
    role): each goes to its tracker, which wakes its own waiters, and nothing that waits for a change of state
    (:meth:`Connection._wait_state`: credit, attaches, deliveries received, a receiver's settlement...) looks at
    them. Such a batch wakes none of those waiters: a task waiting for a reply on the same connection would wake
    for nothing on the outcome of its request."""
    deliveries = event.deliveries
    return bool(deliveries) and deliveries[0].link.role is SENDER


_EVENT_HANDLERS: dict[type, Callable[[Connection, Any], None]] = {
    ev.ConnectionOpened: Connection._on_opened,
    ev.ConnectionClosed: Connection._on_closed,
    ev.SessionBegun: Connection._on_session_begun,
    ev.SessionEnded: Connection._on_session_event,
    ev.LinkAttached: Connection._on_link_event,
    ev.LinkDetached: Connection._on_link_event,
    ev.FlowReceived: Connection._on_flow,
    ev.DeliveriesReceived: Connection._on_link_event,
    ev.DeliveriesUpdated: Connection._on_updated,
}
