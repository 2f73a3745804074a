"""proton's blocking API (``proton.utils``): :class:`BlockingConnection`, :class:`BlockingSender`,
:class:`BlockingReceiver`, :class:`SyncRequestResponse` and their exceptions.

Our :class:`~amqp_async.proton.reactor.Container` cannot be stepped from the outside (it runs an event loop), so a
blocking connection runs its container on a background daemon thread (one thread per container, shared by the
blocking connections made on it), kept running by an :class:`~amqp_async.proton.reactor.EventInjector` until the
last of those connections is closed. Everything that touches the engine (connecting, opening and closing links,
sending, granting credit, settling) is handed to that thread with :meth:`Container.call_threadsafe`; the calling
thread waits on a :class:`threading.Condition` that the container thread notifies after every event it dispatches.

Consequences worth knowing:

* Handlers given to :meth:`BlockingConnection.create_sender` / :meth:`~BlockingConnection.create_receiver` (and a
  :class:`SyncRequestResponse`'s own callbacks) run on the container's thread, not the caller's. They must not call
  the blocking API themselves (that raises :class:`~amqp_async.proton.ProtonException` instead of deadlocking).
* Methods called on a :class:`BlockingSender` or :class:`BlockingReceiver` that are delegated to the underlying
  link (``receiver.flow(1)``, ``sender.drained()``...) run on the container's thread too; attributes are read
  directly. The raw objects (``blocking_link.link``, ``connection.conn``, the returned :class:`Delivery`) should
  only be read from other threads.
* The condition given to :meth:`BlockingConnection.wait` is evaluated on the caller's thread, after each event.
* An exception raised by a handler stops the container (as an exception escaping ``Container.run`` does); the
  blocking call waiting at that moment raises it, later ones raise :class:`ConnectionException`.

Differences from proton, all in the direction of failing sooner: a link the peer closes (with or without an error)
raises :class:`LinkDetached` from the next (or current) operation on that link only, rather than from whatever
happens to be waiting; a connection closed by the peer raises :class:`ConnectionClosed` from every later blocking
call rather than once; a link the program closed itself (:meth:`BlockingLink.close`) raises, when used again, a
:class:`LinkDetached` that says so and is also :class:`amqp_async.ClosedByApplication` (proton waits out the timeout
and raises :class:`Timeout`); :meth:`BlockingConnection.close` never raises (an unanswered close is given up after
the connection's timeout and the socket dropped).
"""

from __future__ import annotations

import collections
import logging
import threading
import time
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, Literal, TypeVar

from ..errors import CLOSED_BY_APPLICATION, AMQPError, ClosedByApplication
from ..errors import LinkDetached as _AMQPLinkDetached
from ._condition import Condition
from ._delivery import Delivery
from ._endpoints import Connection, Endpoint, Link, Receiver, Sender
from ._events import Event, EventBase, Handler
from ._exceptions import ConnectionException, LinkException, ProtonException, Timeout
from ._handlers import IncomingMessageHandler, MessagingHandler
from ._message import Message
from ._reactor import Container, EventInjector
from ._url import Url

if TYPE_CHECKING:
    from ._transport import SSLDomain

__all__ = [
    "AtomicCount",
    "BlockingConnection",
    "BlockingLink",
    "BlockingReceiver",
    "BlockingSender",
    "ConnectionClosed",
    "Fetcher",
    "LinkDetached",
    "SendException",
    "SyncRequestResponse",
]

log = logging.getLogger("proton")  # proton's own logger name, so its logging configuration applies

T = TypeVar("T")
TimeoutArg = float | Literal[False] | None

_JOIN_TIMEOUT = 10.0  # seconds close() waits for the container thread to end
_WAIT_SLICE = 1.0  # waits wake at least this often (a safety net; notifications normally wake them)


# --- exceptions ----------------------------------------------------------------------------------------------


class SendException(ProtonException):
    """A message sent by :meth:`BlockingSender.send` got an outcome listed in ``error_states`` (by default
    rejected or released, as in proton: the peer did not take it).

    Attributes:
        state: the outcome (``Delivery.REJECTED``...).
    """

    def __init__(self, state: int, condition: Condition | None = None) -> None:
        name = getattr(state, "name", str(state))
        text = f"the peer answered {str(name).lower()}"
        if condition is not None:
            text += f": {condition.name}"
            if condition.description:
                text += f": {condition.description}"
        super().__init__(text, condition=None if condition is None else condition.name)
        self.state = state


class LinkDetached(LinkException, _AMQPLinkDetached):
    """The peer closed a link unexpectedly (it refused it, or detached it later); or, also a
    :class:`amqp_async.ClosedByApplication`, the program used a link it had closed itself.

    Attributes:
        link: the link.
        condition: the name of the peer's error condition (``amqp:not-found``...), or None when it gave none.
    """

    def __init__(self, link: Link) -> None:
        if link.is_sender:
            text = f"sender {link.name} to {link.target.address} closed"
        else:
            text = f"receiver {link.name} from {link.source.address} closed"
        remote = link.remote_condition
        impl = link._impl
        # The engine detached it because the peer broke a link rule (§2.7.3: a message above the size it holds,
        # §2.6.7: transfers beyond the credit): its condition is ours, the peer's answer carries none.
        broken = link.condition if not remote and impl is not None and impl.engine_ended else None
        if remote:
            text += f" due to: {remote!r}"
        elif broken:
            text += f" for the peer's breach: {broken!r}"
        else:
            text += " by peer"
        cause = remote or broken
        super().__init__(text, condition=cause.name if cause else None)
        self.link = link
        self.condition = cause.name if cause else None  # type: ignore[assignment]  # proton's: None if none


class _LinkClosedByProgram(LinkDetached, ClosedByApplication):
    """The program used a :class:`BlockingSender` or :class:`BlockingReceiver` after closing it itself: a mistake in
    the program, not the peer's doing. A :class:`LinkDetached` (what ``except`` clauses around blocking calls
    catch) that is also :class:`amqp_async.ClosedByApplication`, with its condition
    (``amqp-async:closed-by-application``). proton raises :class:`Timeout` there, once the connection's timeout
    has passed."""

    def __init__(self, link: Link) -> None:
        if link.is_sender:
            text = f"sender {link.name} to {link.target.address} was closed by the program"
        else:
            text = f"receiver {link.name} from {link.source.address} was closed by the program"
        ProtonException.__init__(self, text, condition=CLOSED_BY_APPLICATION)
        self.link = link
        self.condition = CLOSED_BY_APPLICATION


class ConnectionClosed(ConnectionException):
    """The peer closed the connection unexpectedly.

    Attributes:
        connection: the connection.
        condition: the name of the peer's error condition, or None when it gave none.
    """

    def __init__(self, connection: Connection) -> None:
        text = f"Connection {connection.hostname} closed"
        remote = connection.remote_condition
        if remote:
            text += f" due to: {remote!r}"
        else:
            text += " by peer"
        super().__init__(text, condition=remote.name if remote else None)
        self.connection = connection
        self.condition = remote.name if remote else None  # type: ignore[assignment]  # proton's: None if none


# also an amqp_async.AMQPError (through ConnectionException): ``except amqp_async.AMQPError`` catches all. Not an
# amqp_async.ConnectionError: that is also the builtin ConnectionError, an OSError, which proton's is not.
assert issubclass(ConnectionClosed, AMQPError) and not issubclass(ConnectionClosed, OSError)


# --- the container's thread ----------------------------------------------------------------------------------


class _Notifier:
    """The container's global handler while a blocking connection uses it: after every event, wake the waiters
    (and first pass the event on to the global handler the container had)."""

    def __init__(self, runner: _Runner, previous: Any) -> None:
        self._runner = runner
        self.previous = previous

    def on_unhandled(self, method: str, event: EventBase) -> None:
        previous = self.previous
        if previous is not None:
            event.dispatch(previous)
        if method == "on_delivery":
            self._runner.settle_if_answered(event)
        self._runner.notify()


class _Runner:
    """Runs one container on a daemon thread for the blocking connections that use it (reference counted)."""

    _registry: ClassVar[dict[int, _Runner]] = {}
    _registry_lock = threading.Lock()

    def __init__(self, container: Container) -> None:
        self.container = container
        self.cond = threading.Condition()
        self.users = 0
        self.thread: threading.Thread | None = None
        self.thread_ident: int | None = None
        self.done = False
        self.error: BaseException | None = None
        self._error_reported = False
        self._injector = EventInjector()
        self._posted: collections.deque[Callable[[], None]] = collections.deque()
        self._post_lock = threading.Lock()
        self._post_scheduled = False
        # Deliveries of BlockingSender.send() to settle here once the peer has settled them (container thread).
        self._settle_on_answer: weakref.WeakSet[Delivery] = weakref.WeakSet()
        previous = container.global_handler
        if isinstance(previous, _Notifier):  # left by a runner whose container thread died
            previous = previous.previous
        self._notifier = _Notifier(self, previous)

    @classmethod
    def acquire(cls, container: Container) -> _Runner:
        """The runner of ``container`` (made if needed), with one more user."""
        with cls._registry_lock:
            runner = cls._registry.get(id(container))
            if runner is None or runner.done:
                if container._running:
                    raise ProtonException(
                        "BlockingConnection needs a container it can run on its own thread; this one is already "
                        "running (use a new Container, or the callback API on the running one)"
                    )
                runner = cls._registry[id(container)] = _Runner(container)
            runner.users += 1
            return runner

    def release(self) -> None:
        """One user fewer: the last one stops the container and joins its thread."""
        with self._registry_lock:
            self.users -= 1
            if self.users > 0:
                return
            if _Runner._registry.get(id(self.container)) is self:
                del _Runner._registry[id(self.container)]
        self.shutdown()

    def start(self) -> None:
        """Start the container's thread (once)."""
        if self.thread is not None:
            return
        container = self.container
        container.global_handler = self._notifier
        container.selectable(self._injector)
        self.thread = threading.Thread(target=self._run, name="amqp_async-blocking-container", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        self.thread_ident = threading.get_ident()
        try:
            self.container.run()
        except BaseException as exc:  # a handler raised: the waiters raise it
            log.debug("the blocking container stopped on %r", exc)
            self.error = exc
        finally:
            with self.cond:
                self.done = True
                self.cond.notify_all()

    def shutdown(self) -> None:
        """Stop the container, end the thread and put the container back as it was."""
        container = self.container
        self._injector.close()
        thread = self.thread
        if thread is None:
            self.done = True
            return
        container.call_threadsafe(container.stop)
        if thread is not threading.current_thread():
            thread.join(_JOIN_TIMEOUT)
            if thread.is_alive():  # pragma: no cover - a handler that never returns
                log.warning("the blocking connection's container thread did not end within %s s", _JOIN_TIMEOUT)
                return
        if container.global_handler is self._notifier:
            container.global_handler = self._notifier.previous
        self.done = True

    def send_settling(self, send: Callable[[], Delivery]) -> Delivery:
        """Container thread: ``send()``, and settle the delivery on our side as soon as the peer has settled it.

        proton's ``BlockingSender.send()`` settles the delivery before it returns: settling it on the container
        thread when the peer's settlement is dispatched, before the waiting thread is woken, gives the same view
        (``sender.unsettled`` no longer counts it) without one more hop between the threads per message.
        """
        delivery = send()
        self._settle_on_answer.add(delivery)
        return delivery

    def settle_if_answered(self, event: EventBase) -> None:
        """Container thread, after each delivery event: settle a sent delivery the peer has just settled."""
        if not self._settle_on_answer:  # nothing sent is waiting (a receiving connection): no look-up per message
            return
        delivery = getattr(event, "delivery", None)
        if delivery is not None and delivery.settled and delivery in self._settle_on_answer:
            self._settle_on_answer.discard(delivery)
            delivery.settle()

    def notify(self) -> None:
        with self.cond:
            self.cond.notify_all()

    @property
    def on_own_thread(self) -> bool:
        return self.thread_ident is not None and threading.get_ident() == self.thread_ident

    def take_error(self) -> BaseException:
        """The exception that stopped the container: the handler's once, then a ConnectionException."""
        error = self.error
        if error is not None and not self._error_reported:
            self._error_reported = True
            return error
        text = "the blocking connection's container has stopped"
        return ConnectionException(text if error is None else f"{text} ({error!r})")

    def call(self, function: Callable[[], T]) -> T:
        """Run ``function`` on the container's thread and return its result (or raise its exception)."""
        if self.thread is None or self.on_own_thread:
            return function()
        box: list[Any] = []

        def run() -> None:
            try:
                result: tuple[bool, Any] = (True, function())
            except BaseException as exc:
                result = (False, exc)
            with self.cond:
                box.append(result)
                self.cond.notify_all()

        self.container.call_threadsafe(run)
        with self.cond:
            while not box and not self.done:
                self.cond.wait(_WAIT_SLICE)
        if not box:
            raise self.take_error()
        ok, value = box[0]
        if not ok:
            raise value
        return value  # type: ignore[no-any-return]

    def post(self, function: Callable[[], None]) -> None:
        """Run ``function`` on the container's thread, without waiting (errors are logged).

        Functions posted in a row run in one hop to the container's thread, in order.
        """
        if self.thread is None or self.on_own_thread:
            function()
            return
        with self._post_lock:
            self._posted.append(function)
            if self._post_scheduled:
                return
            self._post_scheduled = True
        self.container.call_threadsafe(self._run_posted)

    def _run_posted(self) -> None:
        posted = self._posted
        while True:
            with self._post_lock:
                if not posted:
                    self._post_scheduled = False
                    return
                function = posted.popleft()
            try:
                function()
            except Exception:
                log.exception("a blocking connection's deferred action failed")


# --- per-connection state and its handler ----------------------------------------------------------------------


class _ConnectionState:
    """What the container thread learnt about one blocking connection (read by the waiting threads)."""

    def __init__(self) -> None:
        self.closing = False
        self.closed_by_peer = False
        self.disconnected: Any = None  # the transport's condition (or "unknown") once it ended unexpectedly
        # Links the program closed before the peer closed them (BlockingLink.close, or link.close() run on the
        # container's thread: call_threadsafe, an injected event): using them again is the program's mistake, not
        # a detach by the peer (see _LinkClosedByProgram).
        self.closed_by_program: weakref.WeakSet[Link] = weakref.WeakSet()

    def link_closed_here(self, link: Link | None) -> None:
        """Container thread, on a link's LINK_LOCAL_CLOSE: a link closed before the peer closed it was closed by
        the program (the blocking code closes a link itself only once the peer has), unless the engine closed it
        because the peer broke a link rule (§2.8.17: a message above the link's max-message-size...)."""
        if link is None or link.state & Endpoint.REMOTE_CLOSED:
            return
        impl = link._impl
        if impl is None or not impl.engine_ended:
            self.closed_by_program.add(link)


class _ConnectionHandler(Handler):
    """The connection's handler on the container thread: answers the peer's closes, records what went wrong.

    It must not raise (that would stop the container): errors are recorded and raised by the waiting thread.
    """

    def __init__(self, state: _ConnectionState) -> None:
        self.state = state

    def on_link_remote_close(self, event: Event) -> None:
        link = event.link
        if link is not None and link.state & Endpoint.LOCAL_ACTIVE:
            link.close()

    def on_link_local_close(self, event: Event) -> None:
        self.state.link_closed_here(event.link)

    def on_connection_remote_close(self, event: Event) -> None:
        connection = event.connection
        if connection is not None and connection.state & Endpoint.LOCAL_ACTIVE:
            connection.close()
            if not self.state.closing:
                self.state.closed_by_peer = True

    def on_transport_tail_closed(self, event: Event) -> None:
        self.on_transport_closed(event)

    def on_transport_head_closed(self, event: Event) -> None:
        self.on_transport_closed(event)

    def on_transport_closed(self, event: Event) -> None:
        transport = event.transport
        if not self.state.closing and self.state.disconnected is None:
            condition = None if transport is None else transport.condition
            self.state.disconnected = condition or "unknown"


def _finalize(runner: _Runner, connection: Connection | None, state: _ConnectionState) -> None:
    """Drop the connection and give back the container (close()'s last step, or the object was collected)."""
    state.closing = True
    try:
        if connection is not None and not runner.done:
            runner.call(connection.free)
    except Exception:  # the container thread is gone: nothing to free
        log.debug("freeing a blocking connection failed", exc_info=True)
    finally:
        runner.release()


# --- links ---------------------------------------------------------------------------------------------------


class BlockingLink:
    """What :class:`BlockingSender` and :class:`BlockingReceiver` share: waits for the attach, ``close()``, and
    access to the link's attributes (methods run on the container's thread)."""

    def __init__(self, connection: BlockingConnection, link: Sender | Receiver) -> None:
        self.connection = connection
        self.link = link
        self.connection.wait(
            lambda: not (self.link.state & Endpoint.REMOTE_UNINIT), msg=f"Opening link {link.name}", link=None
        )
        self._checkClosed()

    def _waitForClose(self, timeout: float = 1) -> None:
        try:
            self.connection.wait(
                lambda: bool(self.link.state & Endpoint.REMOTE_CLOSED),
                timeout=timeout,
                msg=f"Opening link {self.link.name}",
            )
        except Timeout:
            pass
        self._checkClosed()

    def _checkClosed(self) -> None:
        if self.link.state & Endpoint.REMOTE_CLOSED:
            self.connection._post(self.link.close)
            if not self.connection.closing:
                raise LinkDetached(self.link)

    def close(self) -> None:
        """Close the link and wait for the peer to close its end (not when the connection is gone)."""
        connection = self.connection
        link = self.link
        closed_by_program = connection._state.closed_by_program

        def close() -> None:  # on the container's thread, so that the peer's close cannot come in between
            if not link.state & Endpoint.REMOTE_CLOSED:
                closed_by_program.add(link)
            link.close()

        if connection._usable():
            connection._call(close)
            connection.wait(
                lambda: not (link.state & Endpoint.REMOTE_ACTIVE) or not connection._usable(),
                msg=f"Closing link {link.name}",
                raise_errors=False,
            )

    def __getattr__(self, name: str) -> Any:
        if name in ("link", "connection"):
            raise AttributeError(name)
        value = getattr(self.link, name)
        if callable(value) and not isinstance(value, type):
            connection = self.connection

            def on_container_thread(*args: Any, **kwargs: Any) -> Any:
                return connection._call(lambda: value(*args, **kwargs))

            return on_container_thread
        return value


class BlockingSender(BlockingLink):
    """A sender whose :meth:`send` waits for the outcome; made by :meth:`BlockingConnection.create_sender`."""

    link: Sender

    def __init__(self, connection: BlockingConnection, sender: Sender) -> None:
        super().__init__(connection, sender)
        address = sender.target.address if sender.target else None
        if address and address != sender.remote_target.address:
            # A refusal is an attach with no target followed by a detach with the error: wait a little for it...
            self._waitForClose()
            # ...and close the link ourselves if the peer does not.
            connection._call(sender.close)
            raise LinkException(f"Failed to open sender {sender.name}, target does not match")

    def send(self, msg: Message, timeout: TimeoutArg = False, error_states: list[int] | None = None) -> Delivery:
        """Send ``msg`` and wait until the peer has settled it (at once on an at-most-once link).

        Args:
            timeout: seconds to wait; ``False``: the connection's timeout; ``None``: no limit.
            error_states: outcomes that raise :class:`SendException` (default: rejected and released; proton's
                list, so modified is not in it).

        Returns:
            the delivery (settled here too).

        Raises:
            SendException: the outcome was one of ``error_states``.
            Timeout: not settled within ``timeout`` (the message may still arrive).
            LinkDetached, ConnectionClosed, ConnectionException: the link or the connection went away.
        """
        connection = self.connection
        link = self.link
        connection._check(link)
        send = link.send
        tracing = link._connection._tracing
        if tracing is not None:  # the send span is a child of the span current on this thread
            send = tracing.in_current_context(send)
        at_most_once = link.snd_settle_mode == Link.SND_SETTLED
        runner = connection._runner
        if at_most_once:  # as proton, which leaves settling such a delivery to the link
            delivery: Delivery = connection._call(lambda: send(msg))
        else:
            delivery = connection._call(lambda: runner.send_settling(lambda: send(msg)))
        connection.wait(
            lambda: at_most_once or delivery.settled, msg=f"Sending on sender {link.name}", timeout=timeout, link=link
        )
        if not (at_most_once or delivery.local_settled or runner.done):
            # This thread saw the peer's settlement before the container's thread dispatched it: settle it there
            # now, so that it is settled here too when send() returns (as proton's is).
            connection._call(delivery.settle)
        bad = error_states
        if bad is None:
            bad = [Delivery.REJECTED, Delivery.RELEASED]
        state = delivery.remote_state
        if state in bad:
            condition = delivery.remote.condition if state == Delivery.REJECTED else None
            raise SendException(state, condition)
        return delivery


class Fetcher(MessagingHandler):
    """The handler of a :class:`BlockingReceiver`'s link (on the container thread): queues the messages for
    :meth:`BlockingReceiver.receive` and keeps the credit.

    With ``prefetch`` None, one credit is given when :meth:`BlockingReceiver.receive` finds nothing queued; with a
    number N, credit is kept so that the credit plus the messages queued here is N (memory stays bounded when the
    application does not keep up).
    """

    def __init__(self, connection: BlockingConnection | None, prefetch: int | None) -> None:
        super().__init__(prefetch=0, auto_accept=False)
        self.window = prefetch
        self.incoming: collections.deque[tuple[Message, Delivery]] = collections.deque()
        self.unsettled: collections.deque[Delivery] = collections.deque()
        self.link: Receiver | None = None
        self._top_up_pending = False
        # The link's events come here, not to the connection's handler: what it must learn of them (see there).
        self._state = None if connection is None else connection._state

    def on_link_local_close(self, event: Event) -> None:
        if self._state is not None:
            self._state.link_closed_here(event.link)

    def on_message(self, event: Event) -> None:
        delivery = event.delivery
        assert delivery is not None
        self.incoming.append((event.message, delivery))

    def on_link_error(self, event: Event) -> None:
        pass  # raised as LinkDetached by the waiting thread; the link is closed by EndpointStateHandler

    def wants_top_up(self) -> bool:
        """Caller's thread: whether the window is half used up (and no top-up is on its way)."""
        link, window = self.link, self.window
        if link is None or window is None or self._top_up_pending:
            return False
        if link.credit + len(self.incoming) > window // 2:
            return False
        self._top_up_pending = True
        return True

    def top_up(self) -> None:
        """Container thread: restore the prefetch window."""
        self._top_up_pending = False
        link = self.link
        if link is None or self.window is None or not link.state & Endpoint.LOCAL_ACTIVE:
            return
        want = self.window - link.credit - len(self.incoming)
        if want > 0:
            link.flow(want)

    def ensure_credit(self) -> None:
        """Container thread: one credit when there is none and nothing is queued (no prefetch)."""
        link = self.link
        if link is None or not link.state & Endpoint.LOCAL_ACTIVE:
            return
        if not link.credit and not self.incoming:
            link.flow(1)

    @property
    def has_message(self) -> int:
        """The number of messages waiting for :meth:`pop`."""
        return len(self.incoming)

    def pop(self) -> Message:
        """The next message; its delivery, unless the sender settled it, waits for :meth:`settle`."""
        message, delivery = self.incoming.popleft()
        if not delivery.settled:
            self.unsettled.append(delivery)
        return message

    def next_unsettled(self) -> Delivery:
        """Take the oldest delivery waiting for settlement (the caller settles it on the container thread)."""
        try:
            delivery = self.unsettled.popleft()
        except IndexError:
            raise IndexError("no received message is waiting to be settled") from None
        return delivery


class BlockingReceiver(BlockingLink):
    """A receiver whose :meth:`receive` waits for a message; made by :meth:`BlockingConnection.create_receiver`."""

    link: Receiver

    def __init__(
        self, connection: BlockingConnection, receiver: Receiver, fetcher: Fetcher | None, credit: int | None = 1
    ) -> None:
        self.fetcher = fetcher
        self.container = connection.container
        super().__init__(connection, receiver)
        address = receiver.source.address if receiver.source else None
        if address and address != receiver.remote_source.address:
            self._waitForClose()
            connection._call(receiver.close)
            raise LinkException(f"Failed to open receiver {receiver.name}, source does not match")

    def receive(self, timeout: TimeoutArg = False) -> Message:
        """Wait for the next message and return it (settle it with :meth:`accept`, :meth:`reject`, :meth:`release`
        or :meth:`settle`).

        Args:
            timeout: seconds to wait; ``False``: the connection's timeout; ``None``: no limit.

        Raises:
            Timeout: no message within ``timeout``.
            LinkDetached, ConnectionClosed, ConnectionException: the link or the connection went away (messages
                received before that are still returned first).
        """
        fetcher = self.fetcher
        if fetcher is None:
            raise Exception("Can't call receive on this receiver as a handler was not provided")
        connection = self.connection
        if not fetcher.has_message:
            if fetcher.window is None:
                connection._post(fetcher.ensure_credit)
            connection.wait(
                lambda: bool(fetcher.has_message),
                msg=f"Receiving on receiver {self.link.name}",
                timeout=timeout,
                link=self.link,
            )
        message = fetcher.pop()
        if fetcher.wants_top_up():
            connection._post(fetcher.top_up)
        return message

    @property
    def span(self) -> Any:
        """With tracing on: the receive span of the oldest message received and not yet settled (the one
        :meth:`accept` settles), to make current around the work done for it (``trace.use_span(receiver.span,
        end_on_exit=False)``); None when there is none."""
        fetcher = self.fetcher
        unsettled = None if fetcher is None else fetcher.unsettled
        return unsettled[0].span if unsettled else None

    def accept(self) -> None:
        """Accept and settle the oldest message received and not yet settled."""
        self.settle(Delivery.ACCEPTED)

    def reject(self) -> None:
        """Reject and settle the oldest message received and not yet settled."""
        self.settle(Delivery.REJECTED)

    def release(self, delivered: bool = True) -> None:
        """Give the oldest unsettled message back: ``delivered=True`` with the modified outcome, ``False`` with the
        released one (as proton's blocking receiver does)."""
        self.settle(Delivery.MODIFIED if delivered else Delivery.RELEASED)

    def settle(self, state: int | None = None) -> None:
        """Settle the oldest message received and not yet settled, first setting ``state`` when given."""
        fetcher = self.fetcher
        if fetcher is None:
            raise Exception("Can't call accept/reject etc on this receiver as a handler was not provided")
        delivery = fetcher.next_unsettled()

        def settle() -> None:
            if state:
                delivery.update(state)
            delivery.settle()

        self.connection._post(settle)


# --- the connection ------------------------------------------------------------------------------------------


class BlockingConnection(Handler):
    """A connection whose operations block until done: the blocking face of proton's API.

    Close it when done (``close()``, or use it as a context manager): that ends the container's thread.

    Args:
        url: where to connect (no reconnect unless ``urls`` or ``reconnect`` is given, as in proton).
        timeout: the default timeout of every blocking operation, in seconds (None: 60).
        container: the :class:`Container` to use (a new one when None); it must not be running already. It runs on
            a background thread while blocking connections use it.
        ssl_domain: TLS settings for ``amqps``.
        heartbeat: the idle timeout to ask the peer to honour, in seconds.
        urls: URLs to try in turn.
        reconnect: proton's reconnect policy (False, or a Backoff).
        kwargs: the other keyword arguments of :meth:`Container.connect` (``user``, ``password``,
            ``sasl_enabled``, ``allowed_mechs``, ``tracing``...).

    Raises:
        ConnectionException: the connection could not be made (refused, authentication failed, TLS...).
        Timeout: the peer did not open the connection within ``timeout``.
    """

    def __init__(
        self,
        url: str | Url | None = None,
        timeout: float | None = None,
        container: Container | None = None,
        ssl_domain: SSLDomain | None = None,
        heartbeat: float | None = None,
        urls: list[str] | None = None,
        reconnect: Any = None,
        **kwargs: Any,
    ) -> None:
        self.timeout: float = timeout or 60
        self.container = container or Container()
        self.container.timeout = self.timeout
        self.conn: Connection | None = None
        self._state = _ConnectionState()
        self._target = str(url) if url is not None else ", ".join(str(u) for u in urls or []) or None
        if url is not None and urls is None and reconnect is None:
            reconnect = False
            url = Url(str(url)).defaults()
        runner = self._runner = _Runner.acquire(self.container)
        self._finalizer: weakref.finalize[Any, Any] | None = None
        handler = _ConnectionHandler(self._state)
        try:

            def connect() -> Connection:
                return self.container.connect(
                    url=url,
                    handler=handler,
                    ssl_domain=ssl_domain,
                    reconnect=reconnect,
                    heartbeat=heartbeat,
                    urls=urls,
                    **kwargs,
                )

            self.conn = runner.call(connect)
        except BaseException:
            runner.release()
            raise
        self._finalizer = weakref.finalize(self, _finalize, runner, self.conn, self._state)
        try:
            runner.start()
            conn = self.conn
            self.wait(lambda: not (conn.state & Endpoint.REMOTE_UNINIT), msg="Opening connection")
        except BaseException:
            self.close()
            raise

    # --- proton's attributes -------------------------------------------------------------------------------

    @property
    def closing(self) -> bool:
        """True once :meth:`close` was called."""
        return self._state.closing

    @property
    def disconnected(self) -> Any:
        """False, or the condition of the transport when it ended unexpectedly."""
        return self._state.disconnected or False

    @property
    def url(self) -> str | None:
        """The URL of the peer this connection is connected to (None before it connected)."""
        conn = self.conn
        return None if conn is None else conn.connected_address

    # --- links ---------------------------------------------------------------------------------------------

    def create_sender(
        self, address: str | None, handler: Any = None, name: str | None = None, options: Any = None
    ) -> BlockingSender:
        """Open a sender to ``address`` (None: the anonymous relay, each message's ``address`` says where) and wait
        until the peer attached it.

        ``handler``, when given, receives the link's events on the container's thread.

        Raises:
            LinkDetached: the peer refused the link (``condition`` says why).
        """
        conn = self._connection()
        self._check(None)
        sender = self._call(
            lambda: self.container.create_sender(conn, address, name=name, handler=handler, options=options)
        )
        return BlockingSender(self, sender)

    def create_receiver(
        self,
        address: str | None = None,
        credit: int | None = None,
        dynamic: bool = False,
        handler: Any = None,
        name: str | None = None,
        options: Any = None,
    ) -> BlockingReceiver:
        """Open a receiver from ``address`` (or from a node the peer makes, ``dynamic=True``: see
        ``remote_source.address``) and wait until the peer attached it.

        Args:
            credit: the prefetch window (None: one message is asked for at each :meth:`BlockingReceiver.receive`).
            handler: a handler for the link's events (on the container's thread) instead of ``receive()``.

        Raises:
            LinkDetached: the peer refused the link (``condition`` says why).
        """
        conn = self._connection()
        self._check(None)
        prefetch = credit
        fetcher: Fetcher | None
        if handler is not None:
            fetcher = None
            if prefetch is None:
                prefetch = 1
        else:
            if credit is not None and (isinstance(credit, bool) or not isinstance(credit, int)):
                raise TypeError("an integer is required")  # proton's words (its flow() takes a C int)
            # credit=0 (or below) asks for one message at each receive(), as proton's receive() flows one whenever
            # the link has no credit: a window of 0 never asked for any.
            fetcher = Fetcher(self, credit if credit is None or credit > 0 else None)

        def create() -> Receiver:
            receiver = self.container.create_receiver(
                conn, address, name=name, dynamic=dynamic, handler=handler or fetcher, options=options
            )
            if fetcher is not None:
                fetcher.link = receiver
                fetcher.top_up()
            elif prefetch:
                receiver.flow(prefetch)
            return receiver

        return BlockingReceiver(self, self._call(create), fetcher, credit=prefetch)

    # --- life ----------------------------------------------------------------------------------------------

    def close(self) -> None:
        """Close the connection, wait (up to the timeout) for the peer's close, and end the container's thread.

        Idempotent; never raises.
        """
        state = self._state
        if state.closing:
            return
        state.closing = True
        conn = self.conn
        try:
            if conn is not None and not self._runner.done:
                self._call(conn.close)
                self.wait(
                    lambda: not (conn.state & Endpoint.REMOTE_ACTIVE) or not self._usable(),
                    msg="Closing connection",
                    raise_errors=False,
                )
        except Exception as exc:
            log.debug("closing a blocking connection: %r", exc)
        finally:
            finalizer = self._finalizer
            if finalizer is not None:
                finalizer()
            else:
                _finalize(self._runner, None, state)

    def __enter__(self) -> BlockingConnection:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def run(self) -> None:
        """Let the container's thread handle events (for handlers given to the links) until the connection ends:
        closed by either side, the transport lost, or the container stopped by a handler."""
        conn = self._connection()
        self.wait(
            lambda: bool(conn.state & Endpoint.LOCAL_CLOSED) or not self._usable(),
            timeout=None,
            msg="Running",
        )

    def wait(
        self,
        condition: Callable[[], Any],
        timeout: TimeoutArg = False,
        msg: str | None = None,
        *,
        link: Link | None = None,
        raise_errors: bool = True,
    ) -> None:
        """Wait until ``condition()`` is true (it is checked on this thread after every event).

        Args:
            condition: the predicate.
            timeout: seconds; ``False``: the connection's timeout; ``None``: no limit.
            msg: context for the :class:`Timeout` message.

        Raises:
            Timeout: ``condition()`` still false after ``timeout``.
            ConnectionClosed: the peer closed the connection.
            ConnectionException: the transport ended (refused, lost, authentication failed), or the container
                stopped.
        """
        runner = self._runner
        if runner.on_own_thread:
            raise ProtonException(
                "the blocking API cannot be used on the container's thread (from a handler callback): it would wait "
                "for itself"
            )
        if timeout is False:
            timeout = self.timeout
        deadline = None if timeout is None else time.monotonic() + timeout
        cond = runner.cond
        with cond:
            while True:
                if condition():
                    return
                if raise_errors:
                    self._check(link)
                elif runner.done:
                    return
                remaining = _WAIT_SLICE
                if deadline is not None:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        text = f"Connection {self.url or self._target} timed out"
                        if msg:
                            text += ": " + msg
                        raise Timeout(text)
                cond.wait(min(remaining, _WAIT_SLICE))

    # --- internals -----------------------------------------------------------------------------------------

    def _connection(self) -> Connection:
        conn = self.conn
        if conn is None or self._state.closing:
            raise ConnectionException("the blocking connection is closed")
        return conn

    def _call(self, function: Callable[[], T]) -> T:
        return self._runner.call(function)

    def _post(self, function: Callable[[], None]) -> None:
        if not self._runner.done:
            self._runner.post(function)

    def _usable(self) -> bool:
        """True while the connection has a transport and the container runs."""
        state = self._state
        conn = self.conn
        return not (
            self._runner.done
            or conn is None
            or state.disconnected is not None
            or state.closed_by_peer
            or conn._transport.closed
        )

    def _check(self, link: Link | None) -> None:
        """Raise what went wrong with the connection (or ``link``), if anything."""
        state = self._state
        if state.closing:
            raise ConnectionException("the blocking connection is closed")
        if self._runner.done:
            raise self._runner.take_error()
        conn = self.conn
        if state.closed_by_peer and conn is not None:
            raise ConnectionClosed(conn)
        if state.disconnected is not None and conn is not None and not conn.state & Endpoint.LOCAL_CLOSED:
            # proton's words: the condition's repr
            raise ConnectionException(
                f"Connection {self.url or self._target} disconnected: {state.disconnected}",
                condition=getattr(state.disconnected, "name", None),
            )
        if link is not None and link in state.closed_by_program:
            raise _LinkClosedByProgram(link)
        if link is not None and link.state & Endpoint.REMOTE_CLOSED:
            if link.state & Endpoint.LOCAL_ACTIVE:
                self._post(link.close)
            raise LinkDetached(link)

    def __repr__(self) -> str:
        return f"BlockingConnection(url={self.url or self._target!r}, closing={self.closing})"


# --- request-response ----------------------------------------------------------------------------------------


class AtomicCount:
    """A thread-safe counter: :meth:`next` gives ``start + step``, then ``start + 2 * step``..."""

    def __init__(self, start: int = 0, step: int = 1) -> None:
        self.count, self.step = start, step
        self.lock = threading.Lock()

    def next(self) -> int:
        """The next value."""
        with self.lock:
            self.count += self.step
            return self.count


class SyncRequestResponse(IncomingMessageHandler):
    """Request-response (RPC) over a blocking connection: :meth:`call` sends a request with ``reply_to`` set to a
    dynamic receiver of its own and waits for the response with the same ``correlation_id``.

    Args:
        connection: the connection for requests and responses.
        address: where requests go; None: each request's ``address`` says where (the anonymous relay).

    Its ``on_message`` runs on the container's thread.
    """

    correlation_id = AtomicCount()

    def __init__(self, connection: BlockingConnection, address: str | None = None) -> None:
        super().__init__()
        self.connection = connection
        self.address = address
        self.sender = self.connection.create_sender(self.address)
        # A dynamic receiver: the peer makes a node for the responses; one credit per call.
        self.receiver = self.connection.create_receiver(None, dynamic=True, credit=1, handler=self)
        self.response: Message | None = None

    def call(self, request: Message) -> Message:
        """Send ``request`` and wait for its response (up to the connection's timeout).

        Raises:
            ValueError: no address for the request (neither here nor on the message).
            Timeout: no response in time.
        """
        if not self.address and not request.address:
            raise ValueError(f"Request message has no address: {request}")
        request.reply_to = self.reply_to
        request.correlation_id = correlation_id = str(self.correlation_id.next())
        self.sender.send(request)

        def wakeup() -> bool:
            response = self.response
            return response is not None and response.correlation_id == correlation_id

        self.connection.wait(wakeup, msg="Waiting for response", link=self.receiver.link)
        response = self.response
        assert response is not None
        self.response = None  # ready for the next one
        receiver = self.receiver.link
        self.connection._post(lambda: receiver.flow(1))
        return response

    @property
    def reply_to(self) -> str | None:
        """The address of the dynamic node responses come to."""
        return self.receiver.link.remote_source.address

    def on_message(self, event: Event) -> None:
        """Container thread: keep the response for :meth:`call`."""
        self.response = event.message
