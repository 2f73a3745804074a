"""proton's ``Container``: connections, listeners, timers and the event loop of the callback API, on anyio.

:meth:`Container.run` runs an event loop (asyncio, with uvloop when it is installed) until there is nothing left to
do: no connection, listener, timer or open :class:`EventInjector`, or until :meth:`Container.stop`. Inside a program
that already runs an asyncio (or trio) loop, ``await container.run_async()`` does the same on that loop.

Events are queued (the collector) and dispatched in order by :meth:`Container._process`; callbacks may open, close
and send, which queues more events, dispatched in the same round. After each round the connections whose engines
have output are flushed by their drivers.

As proton's, a round that gave a connection output raises ``on_transport`` on its transport, and the container
raises ``on_reactor_quiesced`` once it has dispatched everything and waits for the network or a timer; both only
when a handler has the method (proton raises them whatever the handlers: their count follows its I/O).
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from typing import Any

import anyio
import anyio.abc

from ..client._backoff import Backoff as _ClientBackoff
from ..client._config import resolve_options
from ..codec.transactions import TransactionalState
from ..io import runner
from ..protocol.delivery import Delivery as EngineDelivery
from ..types import Described, symbol, ulong
from ._delivery import Delivery
from ._endpoints import Connection, Link, Receiver, Sender, Session, Terminus
from ._events import ApplicationEvent, Event, EventBase, Handler, PlanCache
from ._exceptions import ProtonException
from ._io import Channel, Listener
from ._message import Message
from ._reconnect import ConnectSequence, Urls, delay_iter, make_backoff_wrapper
from ._stepping import Stepper
from ._tracing import ContainerTracing, tracing_for
from ._transport import SSLDomain
from ._url import Url

__all__ = [
    "Acceptor",
    "ApplicationEvent",
    "AtLeastOnce",
    "AtMostOnce",
    "Backoff",
    "Container",
    "Copy",
    "DurableSubscription",
    "DynamicNodeProperties",
    "EventInjector",
    "Filter",
    "LinkOption",
    "Move",
    "Reactor",
    "ReceiverOption",
    "Selectable",
    "Selector",
    "SenderOption",
    "Task",
    "Transaction",
    "Urls",
    "delay_iter",
    "make_backoff_wrapper",
]

log = logging.getLogger("proton")  # proton's own logger name, so its logging configuration applies

_CONNECT_OPTIONS = frozenset(
    {
        "sasl_enabled",
        "allowed_mechs",
        "allow_insecure_mechs",
        "password",
        "user",
        "virtual_host",
        "offered_capabilities",
        "desired_capabilities",
        "properties",
        "sni",
        "max_frame_size",
        "container_id",
        "http_proxy",
        "tracing",
        "channel_max",
    }
)
#: Taken and ignored, as proton's connect() does: the open frame announces proton's channel-max (32767) whatever is
#: given; a program sets another in on_connection_bound (``event.transport.channel_max``).
_IGNORED_CONNECT_OPTIONS = ("channel_max",)


# --- reconnect delays ----------------------------------------------------------------------------------------


class Backoff(_ClientBackoff):
    """Reconnect delays with proton's arguments (``initial``, ``factor``, ``max_delay``, ``max_tries``).

    The delays are exactly proton's (no jitter), so a program sees the same timing under both; and as proton's,
    reconnecting with it has no time limit (``max_time`` None: see the client's :class:`~amqp_async.Backoff`).
    """

    def __init__(
        self, initial: float = 0.1, factor: float = 2.0, max_delay: float = 10.0, max_tries: int | None = None
    ) -> None:
        super().__init__(
            initial=initial, factor=factor, maximum=max_delay, jitter=0.0, max_tries=max_tries, max_time=None
        )


# --- link options --------------------------------------------------------------------------------------------


class LinkOption:
    """Something applied to a link before it opens: override :meth:`apply` (and :meth:`test` to limit where)."""

    def apply(self, link: Link) -> None:
        """Change ``link``."""

    def test(self, link: Link) -> bool:
        """Whether the option applies to ``link`` (all links by default)."""
        return True


class AtMostOnce(LinkOption):
    """Messages are sent settled: never redelivered, lost if the connection fails (snd-settle-mode settled)."""

    def apply(self, link: Link) -> None:
        link.snd_settle_mode = Link.SND_SETTLED


class AtLeastOnce(LinkOption):
    """Messages are sent unsettled and the receiver settles first: redelivered if in doubt."""

    def apply(self, link: Link) -> None:
        link.snd_settle_mode = Link.SND_UNSETTLED
        link.rcv_settle_mode = Link.RCV_FIRST


class SenderOption(LinkOption):
    """An option that applies only to senders."""

    def test(self, link: Link) -> bool:
        return link.is_sender


class ReceiverOption(LinkOption):
    """An option that applies only to receivers."""

    def test(self, link: Link) -> bool:
        return link.is_receiver


class DynamicNodeProperties(LinkOption):
    """Properties of a dynamic node (§3.5.9): set on the source of a receiver or the target of a sender."""

    def __init__(self, props: dict[Any, Any] | None = None) -> None:
        self.properties = {symbol(k) if isinstance(k, str) else k: v for k, v in (props or {}).items()}

    def apply(self, link: Link) -> None:
        terminus = link.source if link.is_receiver else link.target
        terminus.properties.clear()
        terminus.properties.put_dict(self.properties)


class Filter(ReceiverOption):
    """A filter set (§3.5.8) on the receiver's source."""

    def __init__(self, filter_set: dict[Any, Any] | None = None) -> None:
        self.filter_set = dict(filter_set or {})

    def apply(self, receiver: Link) -> None:
        receiver.source.filter.clear()
        receiver.source.filter.put_dict(self.filter_set)


class Selector(Filter):
    """A JMS selector filter (``apache.org:selector-filter:string``)."""

    def __init__(self, value: str, name: str = "selector") -> None:
        super().__init__({symbol(name): Described(symbol("apache.org:selector-filter:string"), value)})


class DurableSubscription(ReceiverOption):
    """A durable subscription: the source keeps its deliveries and never expires."""

    def apply(self, receiver: Link) -> None:
        receiver.source.durability = Terminus.DELIVERIES
        receiver.source.expiry_policy = Terminus.EXPIRE_NEVER


class Move(ReceiverOption):
    """Messages are taken from the source (distribution-mode move)."""

    def apply(self, receiver: Link) -> None:
        receiver.source.distribution_mode = Terminus.DIST_MODE_MOVE


class Copy(ReceiverOption):
    """Messages are copied from the source, which keeps them (distribution-mode copy: browsing)."""

    def apply(self, receiver: Link) -> None:
        receiver.source.distribution_mode = Terminus.DIST_MODE_COPY


def _open_link(link: Link, source: str | None, target: str | None, handler: Any, options: Any) -> None:
    """What create_sender and create_receiver do alike: addresses, scoped handler, link options, then open."""
    if source:
        link.source.address = source
    if target:
        link.target.address = target
    if handler is not None:
        link.handler = handler
    _apply_link_options(options, link)
    link.open()


def _apply_link_options(options: Any, link: Link) -> None:
    if options is None:
        return
    for option in options if isinstance(options, (list, tuple)) else [options]:
        if option.test(link):
            option.apply(link)


# --- timers, injected events, selectables ----------------------------------------------------------------


class Task:
    """A timer made by :meth:`Container.schedule`: fires ``on_timer_task`` at its deadline unless cancelled."""

    def __init__(self, container: Reactor, deadline: float, handler: Any) -> None:
        self._container = container
        self._deadline = deadline
        self.handler = handler
        self._cancelled = False

    def __lt__(self, other: Task) -> bool:
        return self._deadline < other._deadline

    @property
    def container(self) -> Reactor:
        """The container that runs the timer."""
        return self._container

    def cancel(self) -> None:
        """Do not fire."""
        self._cancelled = True
        self._container._wake()


class EventInjector:
    """Hands events to a container from other threads: :meth:`trigger` an :class:`ApplicationEvent` and it is
    dispatched on the container's thread, in order. Register it with :meth:`Container.selectable`; :meth:`close`
    it when done so the container may finish.
    """

    def __init__(self) -> None:
        self.queue: deque[EventBase] = deque()
        self._container: Reactor | None = None
        self._closed = False

    def trigger(self, event: EventBase) -> None:
        """Have ``event`` dispatched on the container's thread (safe from any thread)."""
        self.queue.append(event)
        container = self._container
        if container is not None:
            container._wake_threadsafe()

    def close(self) -> None:
        """Stop: events already triggered are still dispatched."""
        self._closed = True
        container = self._container
        if container is not None:
            container._wake_threadsafe()

    def fileno(self) -> int:
        """proton's injector is a pipe; ours needs none (-1)."""
        return -1


class Selectable:
    """What :meth:`Container.selectable` returns: the registration of an :class:`EventInjector`."""

    def __init__(self, container: Reactor, delegate: Any) -> None:
        self._container = container
        self._delegate = delegate
        self.is_terminal = False

    def terminate(self) -> None:
        """Unregister."""
        self.is_terminal = True
        if isinstance(self._delegate, EventInjector):
            self._delegate.close()

    def update(self) -> None:
        """Nothing to do: the container watches injectors itself."""


class Acceptor:
    """A listening socket made by :meth:`Container.listen`; :meth:`close` stops accepting."""

    def __init__(self, container: Reactor, listener: Listener | None, host: str, port: int) -> None:
        self._container = container
        self._listener = listener
        self.host = host
        self.port = port

    def set_ssl_domain(self, ssl_domain: SSLDomain) -> None:
        """Accept TLS connections with these settings."""
        if self._listener is not None:
            self._listener.ssl_context = ssl_domain.context()

    def close(self) -> None:
        """Stop accepting connections (those accepted go on)."""
        if self._listener is not None:
            self._listener.close()
        self._container._wake()


class SSLConfig:
    """The container's default TLS settings: :attr:`client` for ``amqps`` connections, :attr:`server` for
    ``amqps`` listeners."""

    def __init__(self) -> None:
        self.client = SSLDomain(SSLDomain.MODE_CLIENT)
        self.server = SSLDomain(SSLDomain.MODE_SERVER)

    def set_credentials(self, cert_file: str, key_file: str | None, password: str | None) -> None:
        """The certificate both use."""
        self.client.set_credentials(cert_file, key_file, password)
        self.server.set_credentials(cert_file, key_file, password)

    def set_trusted_ca_db(self, certificate_db: str) -> None:
        """The CA certificates both trust."""
        self.client.set_trusted_ca_db(certificate_db)
        self.server.set_trusted_ca_db(certificate_db)


# The bodies proton's Transaction sends to the coordinator: described lists with symbolic descriptors (§4.5.2,
# §4.5.3), exactly as proton writes them.
_DECLARE = symbol("amqp:declare:list")
_DISCHARGE = symbol("amqp:discharge:list")
_TRANSACTIONAL_STATE = 0x34


class Transaction:
    """A local transaction (§4), as proton's: obtained from the ``event.transaction`` of
    ``on_transaction_declared`` after :meth:`Container.declare_transaction`.

    Send within it with :meth:`send`, accept received messages within it with :meth:`accept`, and end it with
    :meth:`commit` or :meth:`abort`. The outcome of each declare and discharge is reported to ``handler``
    (a :class:`~amqp_async.proton.handlers.TransactionHandler`): ``on_transaction_declared``,
    ``on_transaction_declare_failed``, ``on_transaction_committed``, ``on_transaction_commit_failed``,
    ``on_transaction_aborted``.

    Attributes:
        txn_ctrl: the connection's link to the coordinator.
        handler: the transaction handler.
        id: the transaction id the coordinator gave (None until declared).
        failed: True once :meth:`abort` (a failed discharge) was asked.
        settle_before_discharge: :meth:`accept` settles at once instead of at the discharge.
    """

    def __init__(self, txn_ctrl: Sender, handler: Any, settle_before_discharge: bool = False) -> None:
        self.txn_ctrl = txn_ctrl
        self.handler = handler
        self.id: Any = None
        self._declare: Delivery | None = None
        self._discharge: Delivery | None = None
        self.failed = False
        self._pending: list[Delivery] = []
        self.settle_before_discharge = settle_before_discharge
        self._sending_state: TransactionalState | None = None
        self.declare()

    def commit(self) -> None:
        """Commit the transaction (a discharge with ``fail`` false)."""
        self.discharge(False)

    def abort(self) -> None:
        """Roll the transaction back (a discharge with ``fail`` true)."""
        self.discharge(True)

    def declare(self) -> None:
        """Send the declare (§4.3); the constructor does."""
        self._declare = self._send_ctrl(_DECLARE, [None])

    def discharge(self, failed: bool) -> None:
        """Send the discharge (§4.4): ``failed`` rolls the transaction back."""
        self.failed = failed
        self._discharge = self._send_ctrl(_DISCHARGE, [self.id, failed])

    def _send_ctrl(self, descriptor: symbol, value: list[Any]) -> Delivery:
        container = self.txn_ctrl.connection._reactor
        if container is not None:
            # §4.4: the outcomes given within the transaction go before its discharge, though proton would send
            # them only once the callback returns
            container._send_updated_states()
        delivery: Delivery = self.txn_ctrl.send(Message(body=Described(descriptor, value)))
        delivery.transaction = self  # type: ignore[attr-defined]  # proton's attribute, read by the handler
        return delivery

    def send(self, sender: Sender, msg: Message, tag: Any = None) -> Delivery:
        """Send ``msg`` on ``sender`` within the transaction (§4.4.1): its transfer carries the transactional
        state. Returns the delivery."""
        state = self._sending_state
        if state is None or state.txn_id != self.id:
            state = self._sending_state = TransactionalState(txn_id=self.id)  # one object: encoded once
        tracing = sender._connection._tracing
        delivery: Delivery
        if tracing is not None:
            delivery = tracing.send(sender, msg, tag, state)
        else:
            delivery = sender._send_payload(msg._encode_payload(), tag, None, state)
        delivery.local.data = [self.id]
        delivery.update(_TRANSACTIONAL_STATE)
        return delivery

    def accept(self, delivery: Delivery) -> None:
        """Accept a received message within the transaction (§4.4.2); it is settled now with
        ``settle_before_discharge``, else once the transaction is discharged."""
        self.update(delivery, Delivery.ACCEPTED)
        if self.settle_before_discharge:
            delivery.settle()
        else:
            self._pending.append(delivery)

    def update(self, delivery: Delivery, state: int | None = None) -> None:
        """Give a received delivery the outcome ``state`` (``Delivery.ACCEPTED``...) within the transaction."""
        if state:
            delivery.local.data = [self.id, Described(ulong(state), [])]
            delivery.update(_TRANSACTIONAL_STATE)

    def _release_pending(self) -> None:
        for delivery in self._pending:
            delivery.update(Delivery.RELEASED)
            delivery.settle()
        self._clear_pending()

    def _clear_pending(self) -> None:
        self._pending = []

    def handle_outcome(self, event: Any) -> None:
        """Report the outcome of the declare or discharge that ``event`` is about to the handler."""
        delivery = event.delivery
        if delivery == self._declare:
            if delivery.remote.data:
                self.id = delivery.remote.data[0]
                self.handler.on_transaction_declared(event)
            elif delivery.remote_state == Delivery.REJECTED:
                self.handler.on_transaction_declare_failed(event)
            else:
                log.warning("Unexpected outcome for declare: %s", delivery.remote_state)
                self.handler.on_transaction_declare_failed(event)
        elif delivery == self._discharge:
            if delivery.remote_state == Delivery.REJECTED:
                if not self.failed:
                    self.handler.on_transaction_commit_failed(event)
                    self._release_pending()
            else:
                if self.failed:
                    self.handler.on_transaction_aborted(event)
                    self._release_pending()
                else:
                    self.handler.on_transaction_committed(event)
            self._clear_pending()


# --- the container -------------------------------------------------------------------------------------------

_REACTOR_QUIESCED = Event.REACTOR_QUIESCED

#: How many events' callbacks (the asking event's included) an early write (:meth:`Reactor._write_soon`) waits for
#: when the round of callbacks does not end first. proton writes a round's output once, at its end: a prefetch
#: window of 10 (MessagingHandler's default) arrives in one read, the flow controller tops it up at the first
#: delivery and a drain asked for at the tenth goes in the same flow frame. Sooner, the top-up went out alone and the
#: drain was a second frame (a second answer from a peer that answers each drain, §2.6.7). Later, a sender out of
#: credit waits longer for it while the handlers work through a large read (at 10 µs a message, 16 are 0.2 ms of a
#: read of hundreds).
_EARLY_WRITE_EVENTS = 16


class _EarlyWrites(list["Connection"]):
    """The connections whose output a callback asked to have written before the round of callbacks ends (see
    :meth:`Reactor._write_soon`), and how many more events' callbacks may run first. A list, so the dispatch loop's
    test for it is the list's truth value (once per event)."""

    __slots__ = ("events_left",)

    def __init__(self) -> None:
        super().__init__()
        self.events_left = 0


class Reactor:
    """proton's reactor: connections, listeners and timers, and the loop that dispatches their events to handlers.

    :class:`Container` adds connecting, links, transactions and listening by URL; programs use it. As in proton,
    the event of a connection, session, link or delivery goes to the handler of its nearest endpoint that has one
    (link, then session, then connection), else to the container's :attr:`handler`; every event then goes to the
    :attr:`global_handler`.

    Args:
        handlers: the container's handlers, children of its root :attr:`handler`.
        **kwargs: ``container_id``, this container's id (default: a random UUID); ``global_handler``, a handler
            that receives every event after the scoped one (the first child of the root :attr:`global_handler`);
            ``tracing`` (ours, not proton's), OpenTelemetry tracing of the messages of every connection: True (the
            global tracer provider) or a ``TracerProvider`` (see ``_tracing.py``; default off).

    Raises:
        TypeError: a ``tracing`` that is neither a bool, None nor a tracer provider.

    Attributes:
        container_id: the id sent in every connection's open.
        ssl: default TLS settings (:class:`SSLConfig`).
        sasl_enabled, allowed_mechs, allow_insecure_mechs, user, password: defaults for :meth:`Container.connect`.
        errors: what handlers raised (the first is raised by :meth:`run`).
    """

    _is_container = True

    # The defaults of connect(): read once per connection, so left on the class (a program's setting is the
    # instance's). An instance of 30 attributes or more keeps them in a dict, and CPython 3.11 and 3.12 then
    # specialise no method call on it (the container's own, for every event).
    sasl_enabled = True
    allowed_mechs: str | None = None
    allow_insecure_mechs = True
    user: str | None = None
    password: str | None = None
    timeout = 0.0

    def __init__(self, *handlers: Any, **kwargs: Any) -> None:
        self._handler: Any = Handler()
        for handler in handlers:
            self._handler.add(handler)
        # proton's global handler is a tree whose root does the I/O; ours does none (I/O is the channels'), so the
        # root is a plain Handler that applications add to.
        self._global_handler: Any = Handler()
        given = kwargs.get("global_handler")
        if given is not None:
            self._global_handler.add(given)
        self.container_id: str = kwargs.get("container_id") or str(uuid.uuid4())
        self.ssl = SSLConfig()
        self.errors: list[BaseException] = []
        # The events to dispatch, in order. A DELIVERY event is queued as its Delivery, and made as it is
        # dispatched: a batch of a thousand incoming messages then holds a thousand objects fewer until dispatched
        # (and the garbage collector, which runs on the count of objects made and not yet freed, runs less). A
        # delivery that arrived on a receiver is queued as the engine's, its Delivery made then too
        # (Receiver._take_arrived).
        self._collector: deque[EventBase | Delivery | EngineDelivery] = deque()
        self._dirty: dict[Connection, None] = {}
        self._updated: list[Delivery] = []
        self._closing: deque[Any] = deque()
        self._plans = PlanCache()
        self._sent: dict[Sender, None] = {}
        self._channels: set[Channel] = set()
        self._listeners: list[Listener] = []
        self._timers: list[Task] = []
        self._injectors: list[EventInjector] = []
        self._to_start: list[Callable[[], Any]] = []
        self._group: anyio.abc.TaskGroup | None = None
        self._wake_event: anyio.Event | None = None
        #: While a round of callbacks is under way (None between rounds): the connections whose output a callback
        #: asked to have written before the round ends (see :meth:`_write_soon`).
        self._processing: _EarlyWrites | None = None
        # The type of the last event dispatched (set once per round of dispatch): proton raises REACTOR_QUIESCED
        # again only after another event (this rather than a flag of its own: see above on the count of attributes).
        self._last_type: Any = None
        self._stopping = False
        self._running = False
        self._loop_thread: int | None = None
        self._call_soon: Callable[[Callable[[], None]], None] | None = None
        self._threadsafe_calls: deque[Callable[[], None]] = deque()
        self._stepper: Stepper | None = None  # start()/process() drive the container by hand
        # OpenTelemetry tracing (see _tracing.py): the default of the connections, one per tracer provider
        self._tracings: dict[Any, ContainerTracing] = {}
        self._tracing = tracing_for(self._tracings, kwargs.get("tracing"))
        self._traced = self._tracing is not None  # a connection is traced: delivery events check for spans

    # --- proton's Reactor attributes ---------------------------------------------------------------------

    @property
    def handler(self) -> Any:
        """The root handler: the constructor's handlers are its children (``handler.add(h)`` adds one). Events
        without a scoped handler go to it. Assigning replaces the whole tree."""
        return self._handler

    @handler.setter
    def handler(self, handler: Any) -> None:
        self._handler = handler

    @property
    def global_handler(self) -> Any:
        """The handler that receives every event, after the scoped one: a tree to ``add`` to (proton's command-line
        tools reach it as ``super(Container, container).global_handler``). Assigning replaces the tree."""
        return self._global_handler

    @global_handler.setter
    def global_handler(self, handler: Any) -> None:
        self._global_handler = handler

    @property
    def now(self) -> float:
        """The time, in seconds since the epoch, as proton's (``time.time()``: a program stamps messages with it,
        ``Message(creation_time=container.now)``). Timers run on the monotonic clock, which no clock step moves."""
        return time.time()

    def mark(self) -> float:
        """The time, in seconds since the epoch (proton's: see :attr:`now`)."""
        return time.time()

    def on_error(self, info: Any) -> None:
        """proton's error hook: record ``info`` (an exception, or proton's ``(type, value, traceback)``) and stop."""
        error = info[1] if isinstance(info, tuple) and len(info) == 3 else info
        self._fail(error if isinstance(error, BaseException) else ProtonException(str(error)))

    # --- connections -------------------------------------------------------------------------------------

    def connection(self, handler: Any = None) -> Connection:
        """A new connection managed by this reactor, with ``handler`` for its events (proton's deprecated
        ``Reactor.connection``). Its ``connection_init`` event is queued now; it connects when opened if it has an
        address (:meth:`connection_to_host`, :meth:`set_connection_host`, or ``url`` / ``hostname``)."""
        return self._new_connection(handler)

    def connection_to_host(self, host: str, port: int | str, handler: Any = None) -> Connection:
        """A new connection to ``host``:``port`` (made when it is opened; no reconnect)."""
        connection = self.connection(handler)
        self.set_connection_host(connection, host, port)
        return connection

    def set_connection_host(self, connection: Connection, host: str, port: int | str) -> None:
        """Where ``connection`` connects when it is opened (set it before opening)."""
        connection.url = Url(host=host, port=int(port))

    def get_connection_address(self, connection: Connection) -> str | None:
        """The URL ``connection`` is connected to (proton's deprecated form of ``connection.connected_address``)."""
        return connection.connected_address

    def update(self, selectable: Any) -> None:
        """proton's selectable bookkeeping: nothing to do here."""

    def _new_connection(self, handler: Any) -> Connection:
        connection = Connection()
        connection._reactor = self
        connection.handler = handler
        connection.container = self.container_id
        if self._tracing is not None:
            connection._tracing = self._tracing
        self._push(Event.CONNECTION_INIT, connection)
        return connection

    def _connection_opened_locally(self, connection: Connection) -> None:
        if connection._channel is not None:
            return  # accepted by a listener, or already connecting
        options = getattr(connection, "_options", None)
        if options is None:
            # made by connection(): proton's I/O connects to its url, else its hostname, once it is opened
            address = connection.url or connection.hostname
            if not address:
                return
            options = connection._options = resolve_options(  # type: ignore[attr-defined]
                str(address),
                {
                    "sasl_enabled": self.sasl_enabled,
                    "allow_insecure_mechs": self.allow_insecure_mechs,
                    "container_id": connection.container or self.container_id,
                    "reconnect": False,
                },
            )
            connection._sequence = ConnectSequence(False, list(options.urls))  # type: ignore[attr-defined]
        channel = Channel(self, connection, options)
        self._channels.add(channel)
        self._start(channel.run)

    def _connection_closed_locally(self, connection: Connection) -> None:
        self._wake()

    def _forget_connection(self, connection: Connection) -> None:
        connection._abort_transport()

    def _channel_done(self, channel: Channel) -> None:
        self._channels.discard(channel)
        self._wake()

    # --- listening ---------------------------------------------------------------------------------------

    def acceptor(
        self, host: str, port: int | str, handler: Any = None, ssl_domain: SSLDomain | None = None, tls: bool = False
    ) -> Acceptor:
        """Listen on ``host``:``port`` (proton's lower-level form of :meth:`listen`)."""
        import socket

        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, int(port)))
            sock.listen(128)
        except OSError:
            sock.close()
            raise
        sock.setblocking(False)
        bound_port = sock.getsockname()[1]
        listener = Listener(self, _SocketListener(sock), handler)
        if ssl_domain is not None or tls:
            listener.ssl_context = (ssl_domain or self.ssl.server).context()
        mechs = self.allowed_mechs
        if mechs:
            listener.sasl_mechanisms = mechs
        self._listeners.append(listener)
        self._start(listener.run)
        return Acceptor(self, listener, host, bound_port)

    # --- timers and injected events ----------------------------------------------------------------------

    def schedule(self, delay: float, handler: Any = None) -> Task:
        """Fire ``on_timer_task`` on ``handler`` (default: the container's handlers) after ``delay`` seconds."""
        task = Task(self, time.monotonic() + delay, handler)
        heapq.heappush(self._timers, task)
        self._wake()
        return task

    def selectable(self, handler: Any = None, delegate: Any = None) -> Selectable:
        """Register an :class:`EventInjector` (``handler``) so its events are dispatched by this container."""
        injector = handler if isinstance(handler, EventInjector) else delegate
        if not isinstance(injector, EventInjector):
            raise TypeError(
                "Container.selectable() takes an EventInjector; raw sockets are not supported: use the container's "
                "connections, or run your own I/O on the event loop (see Container.run_async)"
            )
        injector._container = self
        self._injectors.append(injector)
        self._wake_threadsafe()
        return Selectable(self, injector)

    def push_event(self, obj: Any, etype: Any) -> None:
        """Queue an event of type ``etype`` about ``obj`` for dispatch."""
        self._push(etype, obj)
        self._wake_threadsafe()

    # --- running -----------------------------------------------------------------------------------------

    def run(self) -> None:
        """Run the event loop until there is nothing left to do or :meth:`stop` is called.

        Uses asyncio, with uvloop when it is installed. Exceptions raised by a handler stop the container and are
        raised here; Ctrl-C raises :exc:`KeyboardInterrupt`, on Python 3.10 too (see :mod:`amqp_async.io.runner`).
        """
        if self._stepper is not None and not self._stepper.finished:
            raise ProtonException("the container is already running: it is being stepped with process()")
        backend_options: dict[str, Any] = {}
        try:
            import uvloop  # noqa: F401

            backend_options["use_uvloop"] = True
        except ImportError:
            pass
        runner.run(self.run_async, backend_options=backend_options)

    async def run_async(self) -> None:
        """Run the container on the event loop already running (asyncio or trio): ``await container.run_async()``
        from a task of your program. Returns when :meth:`run` would."""
        if self._running:
            raise ProtonException("the container is already running")
        self._running = True
        self._stopping = False
        self._loop_thread = threading.get_ident()
        self._bind_wakeup()
        self._wake_event = anyio.Event()
        try:
            async with anyio.create_task_group() as group:
                self._group = group
                self._push(Event.REACTOR_INIT, self)
                self._process()
                while True:
                    self._start_pending()
                    self._run_threadsafe_calls()
                    self._drain_injectors()
                    self._fire_timers()
                    self._process()
                    if self._stopping or not self._has_work():
                        break
                    await self._sleep()
                group.cancel_scope.cancel()
        finally:
            self._group = None
            self._running = False
            self._call_soon = None
            self._loop_thread = None
        if self.errors:
            # A handler raised: proton raises out of run() at once, without dispatching reactor_final.
            error = self.errors[0]
            self.errors = []
            raise error
        self._push(Event.REACTOR_FINAL, self)
        self._process()
        if self.errors:
            error = self.errors[0]
            self.errors = []
            raise error

    def stop(self) -> None:
        """Stop the container: after the current callback, every connection and listener is dropped and
        :meth:`run` returns."""
        self._stopping = True
        self._wake_threadsafe()

    def stop_events(self) -> None:
        """Drop the events not yet dispatched."""
        self._collector.clear()

    def wakeup(self) -> None:
        """Wake the loop (safe from any thread)."""
        self._wake_threadsafe()

    def yield_(self) -> None:
        """proton's cooperative yield: nothing to do here (callbacks already return to the loop)."""

    @property
    def quiesced(self) -> bool:
        """True when no event is waiting to be dispatched."""
        return not self._collector

    # --- stepping by hand (see _stepping.py) -------------------------------------------------------------

    def start(self) -> None:
        """Begin stepping the container by hand: then :meth:`process` until it returns False (proton's ``run()``
        is ``start()``, ``process()`` in a loop, ``stop()`` and a last ``process()``)."""
        if self._running or (self._stepper is not None and not self._stepper.finished):
            raise ProtonException("the container is already running")
        self._stepper = Stepper(self)

    def process(self) -> bool:
        """Dispatch the events that are ready, waiting for I/O at most :attr:`timeout` seconds; False once the
        container has nothing left to do (or was stopped). Calls :meth:`start` first if it was not called.

        Raises:
            Exception: what a handler raised (the container has stopped).
        """
        stepper = self._stepper
        if stepper is None:
            self.start()
            stepper = self._stepper
            assert stepper is not None
        return stepper.step(max(0.0, self.timeout))

    # --- the loop's internals ----------------------------------------------------------------------------

    def _start(self, function: Callable[[], Any]) -> None:
        if self._group is not None and threading.get_ident() == self._loop_thread:
            self._group.start_soon(function)
        else:
            self._to_start.append(function)
            self._wake_threadsafe()

    def _start_pending(self) -> None:
        while self._to_start and self._group is not None:
            self._group.start_soon(self._to_start.pop(0))

    def _has_work(self) -> bool:
        if self._channels or self._to_start or self._collector or self._threadsafe_calls:
            return True
        if any(not listener.closed for listener in self._listeners):
            return True
        if any(not task._cancelled for task in self._timers):
            return True
        return any(not injector._closed or injector.queue for injector in self._injectors)

    async def _sleep(self) -> None:
        wake = self._wake_event
        assert wake is not None
        timers = self._timers
        while timers and timers[0]._cancelled:
            heapq.heappop(timers)
        delay = None if not timers else max(0.0, timers[0]._deadline - time.monotonic())
        if not wake.is_set():
            if delay is None:
                await wake.wait()
            else:
                with anyio.move_on_after(delay):
                    await wake.wait()
        self._wake_event = anyio.Event()

    def _wake(self) -> None:
        event = self._wake_event
        if event is not None:
            event.set()

    def _bind_wakeup(self) -> None:
        import asyncio

        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None  # not asyncio (trio, through anyio)
        if loop is not None:

            def call_soon_threadsafe(function: Callable[[], None]) -> None:
                loop.call_soon_threadsafe(function)

            self._call_soon = call_soon_threadsafe
        else:
            token = anyio.lowlevel.current_token()

            def call_soon(function: Callable[[], None]) -> None:
                anyio.from_thread.run_sync(function, token=token)

            self._call_soon = call_soon

    def _wake_threadsafe(self) -> None:
        if threading.get_ident() == self._loop_thread or self._loop_thread is None:
            self._wake()
            return
        call_soon = self._call_soon
        if call_soon is not None:
            try:
                call_soon(self._wake)
            except RuntimeError:
                pass  # the loop has ended

    def _check_thread(self) -> None:
        """Refuse a change made from another thread while the container runs (it would race its callbacks)."""
        loop_thread = self._loop_thread
        if loop_thread is not None and threading.get_ident() != loop_thread:
            raise ProtonException(
                "amqp_async.proton objects belong to their container's thread while it runs: from another thread, "
                "use an EventInjector (container.selectable) or container.call_threadsafe(function)"
            )

    def call_threadsafe(self, function: Callable[[], None]) -> None:
        """Run ``function`` on the container's thread, between callbacks (safe from any thread)."""
        self._threadsafe_calls.append(function)
        self._wake_threadsafe()

    def _run_threadsafe_calls(self) -> None:
        calls = self._threadsafe_calls
        while calls:
            function = calls.popleft()
            try:
                function()
            except Exception as exc:
                self._fail(exc)

    def _drain_injectors(self) -> None:
        for injector in list(self._injectors):
            queue = injector.queue
            while queue:
                event = queue.popleft()
                if isinstance(event, ApplicationEvent):
                    event.container = self
                self._collector.append(event)
            if injector._closed:
                self._injectors.remove(injector)

    def _fire_timers(self) -> None:
        timers = self._timers
        now = time.monotonic()
        while timers and (timers[0]._cancelled or timers[0]._deadline <= now):
            task = heapq.heappop(timers)
            if not task._cancelled:
                self._push(Event.TIMER_TASK, task)

    def _push(self, event_type: Any, context: Any) -> None:
        self._collector.append(Event(event_type, context, self))

    def _fail(self, exc: BaseException) -> None:
        self.errors.append(exc)
        self._stopping = True
        self._collector.clear()
        self._wake()

    def _dispatch_all(self) -> None:
        collector = self._collector
        root = self._handler
        transport_closed = Event.TRANSPORT_CLOSED
        plans = self._plans
        plans.new_round()
        plan_calls = plans.calls
        # Consecutive events mostly share a handler and a type (a batch of deliveries): reuse the last plan.
        last_handler: Any = None
        last_key: Any = None
        key: Any
        calls: list[Any] = []
        only_call: Any = None
        # One setting per round: a handler that sets it, sets it for the next. The default root without children
        # receives nothing worth calling: skipped.
        global_handler = self._global_handler
        if type(global_handler) is Handler and not global_handler.handlers:
            global_handler = None
        traced = self._traced
        write_after_event = self._processing
        delivery_event = Event.DELIVERY
        event: Any = None
        while collector:
            item = collector.popleft()
            context: Any
            if type(item) is Delivery:
                context = item
                event = Event(delivery_event, context, self)
                is_delivery = True
            elif type(item) is EngineDelivery:
                # A delivery that arrived on a receiver: its proton Delivery is made now (see Receiver._take_arrived).
                engine_link = item.link
                receiver = engine_link.user_data
                if receiver is None:
                    continue  # its link is gone
                # receiver._take_arrived(item), inline (every message received)
                context = Delivery(receiver, item.tag, item)
                context._payload = item.payload
                item.user_data = context
                if engine_link is receiver._impl:
                    receiver._arrived -= 1
                    receiver._incoming.append(context)
                event = Event(delivery_event, context, self)
                is_delivery = True
            else:
                event = item
                context = event._context if type(event) is Event else None
                is_delivery = type(context) is Delivery
            if is_delivery:
                link = context.link
                session = link.session
                handler = link._handler or session._handler or session.connection._handler or root
                key = "s" if link.is_sender else "r"
            else:
                handler = event.handler or root
                key = event._type
            if handler is not last_handler or key is not last_key:
                last_handler, last_key = handler, key
                if type(key) is str:
                    calls = plan_calls(handler, "on_delivery", "sender" if key == "s" else "receiver")
                else:
                    calls = plan_calls(handler, event._type.method)
                # A plan of one call (a MessagingHandler's deliveries, sent or received) is called without the loop.
                only_call = calls[0] if len(calls) == 1 else None
            try:
                if traced and is_delivery and context._span is not None:
                    context.connection._tracing.dispatch(context, calls, event)
                elif only_call is not None:
                    only_call(event)
                else:
                    for call in calls:
                        call(event)
                if global_handler is not None:
                    event.dispatch(global_handler)
            except Exception as exc:
                log.debug("a handler raised %r; stopping the container", exc)
                self._fail(exc)
                return
            if write_after_event:
                write_after_event.events_left -= 1
                if write_after_event.events_left <= 0:
                    self._write_after_event(write_after_event)
            if is_delivery:
                context._updated = False
            elif event._type is transport_closed:
                # proton unbinds a closed transport from its connection once the closed event is handled.
                self._push(Event.CONNECTION_UNBOUND, getattr(event, "connection", None))
        if event is not None:
            self._last_type = event._type  # (once per round: see _quiesce)

    def _write_soon(self, connection: Connection) -> None:
        """Have ``connection``'s output written to its socket before the round of callbacks ends (at once outside a
        round): credit given in a callback reaches a sender that may be out of it while the handlers still work
        through the rest of a read.

        Not at the call itself, nor as soon as the event's callbacks return: once the callbacks of
        :data:`_EARLY_WRITE_EVENTS` events (this one included) have returned, or with the round's other output if it
        ends first. proton writes a round's output once, at its end, so what the callbacks did to a link meanwhile
        goes in one frame: a flow that tops up a prefetch, followed a few deliveries later by a drain (or
        ``flow(n)`` then ``drain(0)`` in one callback), is one flow frame there. Two frames here had a peer that
        answers each drain flow (§2.6.7) answer twice, and the program saw two ``on_link_flow`` events where
        proton's sees one.
        """
        pending = self._processing
        if pending is None:
            channel = connection._channel
            if channel is not None:
                channel.write_now()
            return
        if not pending:
            pending.events_left = _EARLY_WRITE_EVENTS
        if connection not in pending:
            pending.append(connection)

    @staticmethod
    def _write_after_event(pending: _EarlyWrites) -> None:
        """Enough events' callbacks returned since :meth:`_write_soon` was asked: write the connections' output."""
        connections = pending.copy()
        pending.clear()
        for connection in connections:
            channel = connection._channel
            if channel is not None:
                channel.write_now()

    def _send_updated_states(self) -> None:
        """Hand the states set without settling (during this round of callbacks) to the engine."""
        updated = self._updated
        if updated:
            self._updated = []
            for delivery in updated:
                if not delivery._settled_here:
                    delivery.link._send_state(delivery)

    def _after_callbacks(self) -> None:
        """What proton's transport does once callbacks return: send the states set without settling, then the
        closes asked for, and raise ``on_link_flow`` on each sender that sent, whatever credit it has left (proton
        raises it after writing a batch of transfers: with credit left, ``MessagingHandler`` makes it another
        ``on_sendable``; at none, the program learns its credit is used up or a drain it answered is done)."""
        self._send_updated_states()
        closing = self._closing
        while closing:
            closing.popleft()._close_engine()
        sent = self._sent
        if sent:
            self._sent = {}
            for sender in sent:
                if sender._local == 2 and sender._impl is not None:
                    self._push(Event.LINK_FLOW, sender)

    def _process(self) -> None:
        """Dispatch every queued event (and those the callbacks queue), then flush what they did."""
        if self._processing is not None:
            return
        self._processing = _EarlyWrites()
        try:
            collector = self._collector
            if collector and self._stepper is not None:
                self._stepper.dispatched()  # process() may return once this round is done
            announced: set[Connection] | None = None
            while True:
                self._dispatch_all()
                self._after_callbacks()
                if self._dirty and not self._stopping:
                    announced = self._announce_output(announced)
                if not collector or self._stopping:
                    break
            if (
                self._last_type is not _REACTOR_QUIESCED
                and not self._stopping
                and (self._plans.defines(self._handler, "on_reactor_quiesced") or self._global_handler_set())
            ):
                # (the root's plan inline: once per round of callbacks, it is the whole cost for programs that
                # do not handle the event)
                self._quiesce()
            dirty = self._dirty
            if dirty:
                self._dirty = {}
                for connection in dirty:
                    channel = connection._channel
                    if channel is not None:
                        channel.kick()
        finally:
            self._processing = None

    # --- proton's PN_TRANSPORT and PN_REACTOR_QUIESCED ---------------------------------------------------------

    def _global_handler_set(self) -> bool:
        """Whether the global handler is more than the default, childless root (which receives nothing)."""
        global_handler = self._global_handler
        return type(global_handler) is not Handler or bool(global_handler.handlers)

    def _wants(self, handler: Any, method: str) -> bool:
        """Whether ``handler`` or the global handler (or one of their children) has a method ``method`` of its own.

        Events made for such handlers only (``on_transport``, ``on_reactor_quiesced``: proton raises them over and
        over) are made only then: a handler with an ``on_unhandled`` alone (a blocking connection's notifier, a
        program's catch-all) does not pay for them; once made, they are dispatched as any event, to
        ``on_unhandled`` too."""
        plans = self._plans
        if plans.defines(handler, method):
            return True
        return self._global_handler_set() and plans.defines(self._global_handler, method)

    def _announce_output(self, announced: set[Connection] | None) -> set[Connection] | None:
        """proton's ``PN_TRANSPORT``: its engine raises it on a connection's transport whenever a change the program
        made (an open, a send, a settle, a flow...) gives the transport something to write. Ours: once per round of
        callbacks for each connection they gave output, before it is written (the connections not yet announced
        this round, in ``announced``, which is returned). Only made when a handler has ``on_transport`` (see
        :meth:`_wants`)."""
        root = self._handler
        for connection in self._dirty:
            if announced is not None and connection in announced:
                continue
            channel = connection._channel
            if channel is None or channel._driver is None:
                continue  # no transport yet (proton raises it on a bound transport only): announced once bound
            if self._wants(connection.handler or root, "on_transport"):
                self._push(Event.TRANSPORT, connection._transport)
            if announced is None:
                announced = set()
            announced.add(connection)
        return announced

    def _transport_bound(self, connection: Connection) -> None:
        """A connection was given its transport: proton raises ``PN_TRANSPORT`` then (the open and the rest of what
        the program did before are to be written)."""
        if connection in self._dirty:
            return  # announced with this round's output (_announce_output)
        if self._wants(connection.handler or self._handler, "on_transport"):
            self._push(Event.TRANSPORT, connection._transport)

    def _quiesce(self) -> None:
        """proton's ``PN_REACTOR_QUIESCED``: once the events are all dispatched, when the container has something
        left to wait for (a connection, a listener, a timer, an injector), it raises this event before it waits,
        unless the last event it dispatched was this one. Only made when a handler has ``on_reactor_quiesced``; what
        its handlers queue is dispatched at once (and the next one waits for the next round: no busy loop)."""
        if not self._wants(self._handler, "on_reactor_quiesced") or not self._waits_for_something():
            return
        if any(channel.binding for channel in self._channels):
            return  # a connection opened in this round is bound first (proton binds it at once)
        self._push(Event.REACTOR_QUIESCED, self)
        collector = self._collector
        while True:
            self._dispatch_all()
            self._after_callbacks()
            if not collector or self._stopping:
                break

    def _waits_for_something(self) -> bool:
        """proton's test before it raises ``PN_REACTOR_QUIESCED``: a timer or a selectable (a socket, a listener,
        an injector) is left. A connection whose transport ended counts while it is to reconnect."""
        if any(channel.live for channel in self._channels):
            return True
        if self._to_start or self._threadsafe_calls:
            return True
        if any(not listener.closed for listener in self._listeners):
            return True
        if any(not task._cancelled for task in self._timers):
            return True
        return any(not injector._closed for injector in self._injectors)


class Container(Reactor):
    """A container in the AMQP sense, as proton's: a :class:`Reactor` that connects to URLs (:meth:`connect`),
    opens links on its connections (:meth:`create_sender`, :meth:`create_receiver`), declares transactions and
    listens (:meth:`listen`).

    Args:
        handlers: the container's handlers: they receive every event not scoped to a connection, session or link
            with a handler of its own.
        **kwargs: ``container_id``, this container's id (default: a random UUID); ``global_handler``, a handler
            that receives every event after the scoped one; ``tracing``, OpenTelemetry tracing of the messages
            (True or a ``TracerProvider``; see :class:`Reactor`).
    """

    def connect(
        self,
        url: str | Url | None = None,
        urls: list[str] | None = None,
        address: str | None = None,
        handler: Any = None,
        reconnect: Any = None,
        heartbeat: float | None = None,
        ssl_domain: SSLDomain | None = None,
        **kwargs: Any,
    ) -> Connection:
        """Open a connection to ``url`` (or the first of ``urls`` that answers; or as connect.json says when
        neither is given), and return it at once: it is established when the container runs.

        Args:
            url: where to connect. ``address`` is proton's older name for it. ``ws://`` and ``wss://`` URLs name a
                WebSocket endpoint (AMQP WebSocket Binding).
            urls: a failover list, tried in turn (instead of ``url``).
            handler: the handler for this connection's events (instead of the container's).
            reconnect: None (reconnect with proton's default delays), False (one attempt, no reconnect), a
                :class:`Backoff`, a list (any iterable) of delays in seconds, or an object with ``reset()`` and
                ``next()``; each delay is used for one pass over ``urls`` (see ``_reconnect.py``).
            heartbeat: the idle timeout to ask the peer to honour, in seconds.
            ssl_domain: TLS settings for ``amqps`` and ``wss`` URLs (default: :attr:`ssl` ``.client``, or
                connect.json's).
            kwargs: ``sasl_enabled``, ``allowed_mechs``, ``allow_insecure_mechs``, ``user``, ``password``,
                ``virtual_host``, ``offered_capabilities``, ``desired_capabilities``, ``properties``, ``sni``,
                ``max_frame_size``, ``container_id``, ``channel_max`` (ignored, as by proton), ``http_proxy``
                (for ``ws``/``wss`` URLs: a proxy URL, or False for none; default: the
                https_proxy/http_proxy/no_proxy environment variables), ``tracing``
                (ours: OpenTelemetry tracing of this connection's messages, True or a ``TracerProvider``, False
                for none; default: the container's).

        Raises:
            TypeError: an unknown keyword argument.
            ValueError: a bad URL or a bad connect.json.
        """
        unknown = sorted(set(kwargs) - _CONNECT_OPTIONS)
        if unknown:
            raise TypeError(f"connect() got unexpected keyword argument(s): {', '.join(unknown)}")
        for name in _IGNORED_CONNECT_OPTIONS:
            kwargs.pop(name, None)
        if url is None and address is not None:
            url = address
        options: dict[str, Any] = {
            "sasl_enabled": self.sasl_enabled,
            "allow_insecure_mechs": self.allow_insecure_mechs,
        }
        for name in ("allowed_mechs", "user", "password"):
            if getattr(self, name) is not None:
                options[name] = getattr(self, name)
        options.update({k: v for k, v in kwargs.items() if v is not None})
        if urls:
            options["urls"] = [str(u) for u in urls]
        # proton's rule: no idle timeout unless asked for (the awaitable client's default is not proton's)
        options["heartbeat"] = heartbeat or None
        # The client options validate the rest; the reconnect policy is proton's (see _reconnect.py).
        options["reconnect"] = False if reconnect is False else None
        if ssl_domain is not None:
            options["ssl_context"] = ssl_domain.context()
        elif (url or urls) and any(str(u).startswith(("amqps:", "wss:")) for u in ([url] if url else list(urls or []))):
            options["ssl_context"] = self.ssl.client.context()
        options.setdefault("container_id", self.container_id)
        resolved = resolve_options(None if url is None else str(url), options)
        connection = self._new_connection(handler)
        if "tracing" in kwargs:
            connection._tracing = tracing_for(self._tracings, kwargs["tracing"])
            self._traced = self._traced or connection._tracing is not None
        connection.container = resolved.container_id
        connection.offered_capabilities = kwargs.get("offered_capabilities")
        connection.desired_capabilities = kwargs.get("desired_capabilities")
        connection.properties = kwargs.get("properties")
        if kwargs.get("virtual_host"):
            connection.hostname = kwargs["virtual_host"]
        connection._options = resolved  # type: ignore[attr-defined]
        connection._sequence = ConnectSequence(reconnect, list(resolved.urls))  # type: ignore[attr-defined]
        connection.open()
        return connection

    def _get_session(self, context: Any) -> Session:
        if isinstance(context, Session):
            return context
        if isinstance(context, Connection):
            session = context._default_session
            if session is None or session._local == 4:
                session = context._default_session = context.session()
                session.open()
            return session
        if isinstance(context, (str, Url)):
            return self._get_session(self.connect(url=context))
        return context.session()  # type: ignore[no-any-return]

    def _link_id(self, connection: Connection, remote: str | None, local: str | None) -> str:
        container = connection.container or self.container_id
        if remote and local:
            return f"{container}-{remote}-{local}"
        if remote or local:
            return f"{container}-{remote or local}"
        return f"{container}-{uuid.uuid4()}"

    def create_sender(
        self,
        context: Any,
        target: str | None = None,
        source: str | None = None,
        name: str | None = None,
        handler: Any = None,
        tags: Any = None,
        options: Any = None,
    ) -> Sender:
        """Open a sending link on ``context``: a connection (or session), or a URL (a new connection; its path is
        the target when ``target`` is not given)."""
        if isinstance(context, str):
            context = Url(context)
        if isinstance(context, Url) and not target:
            target = context.path
        session = self._get_session(context)
        sender = session.sender(name or self._link_id(session.connection, target, source))
        if tags:
            sender.tag_generator = tags
        _open_link(sender, source, target, handler, options)
        return sender

    def create_receiver(
        self,
        context: Any,
        source: str | None = None,
        target: str | None = None,
        name: str | None = None,
        dynamic: bool = False,
        handler: Any = None,
        options: Any = None,
    ) -> Receiver:
        """Open a receiving link on ``context``: a connection (or session), or a URL (a new connection; its path
        is the source when ``source`` is not given). ``dynamic=True`` asks the peer to make the source node."""
        if isinstance(context, str):
            context = Url(context)
        if isinstance(context, Url) and not source:
            source = context.path
        session = self._get_session(context)
        receiver = session.receiver(name or self._link_id(session.connection, source, target))
        if dynamic:
            receiver.source.dynamic = True
        _open_link(receiver, source, target, handler, options)
        return receiver

    def declare_transaction(
        self, context: Any, handler: Any = None, settle_before_discharge: bool = False
    ) -> Transaction:
        """Declare a local transaction on ``context`` (a connection) and return its :class:`Transaction`.

        The first call on a connection opens its link to the coordinator (named ``txn-ctrl``, target a
        coordinator asking for ``amqp:local-transactions``). ``handler`` (a
        :class:`~amqp_async.proton.handlers.TransactionHandler`) hears ``on_transaction_declared`` and the rest;
        ``settle_before_discharge``: :meth:`Transaction.accept` settles at once.
        """
        txn_ctrl = getattr(context, "_txn_ctrl", None)
        if txn_ctrl is None:
            from ._handlers import TransactionControlHandler

            session = self._get_session(context)
            txn_ctrl = session.sender("txn-ctrl")
            txn_ctrl.target.type = Terminus.COORDINATOR
            txn_ctrl.target.capabilities.put_object(symbol("amqp:local-transactions"))
            # as proton's, the control link's other events go to the handler of the first declare
            _open_link(txn_ctrl, None, None, TransactionControlHandler(handler), None)
            context._txn_ctrl = txn_ctrl
        return Transaction(txn_ctrl, handler, settle_before_discharge)

    def listen(self, url: str | Url, ssl_domain: SSLDomain | None = None) -> Acceptor:
        """Accept AMQP connections on the host and port of ``url`` (``amqps``: with TLS, using ``ssl_domain`` or
        :attr:`ssl` ``.server``). Returns the :class:`Acceptor`; the socket is bound before this returns."""
        parsed = Url(url)
        host = parsed.host or "0.0.0.0"
        port = int(parsed.port) if parsed.port is not None else (5671 if parsed.scheme == "amqps" else 5672)
        return self.acceptor(host, port, ssl_domain=ssl_domain, tls=parsed.scheme == "amqps")

    def do_work(self, timeout: float | None = None) -> bool:
        """:meth:`process`, after setting :attr:`timeout` to ``timeout`` when one is given (proton's Reactor)."""
        if timeout:
            self.timeout = timeout
        return self.process()


class _SocketListener(anyio.abc.Listener[anyio.abc.SocketStream]):
    """An anyio listener over a socket :meth:`Container.acceptor` bound at once (proton binds in ``listen``)."""

    def __init__(self, sock: Any) -> None:
        self._sock = sock
        self._listener: anyio.abc.SocketListener | None = None

    async def serve(self, handler: Any, task_group: Any = None) -> None:
        self._listener = await anyio.abc.SocketListener.from_socket(self._sock)
        await self._listener.serve(handler, task_group)

    async def aclose(self) -> None:
        if self._listener is not None:
            await self._listener.aclose()
        else:
            self._sock.close()
