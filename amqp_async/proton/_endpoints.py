"""proton's endpoints: ``Connection``, ``Session``, ``Link`` (``Sender``, ``Receiver``) and ``Terminus``.

Each object here is the application's view of one endpoint of our engine (:mod:`amqp_async.protocol`): it holds
what the application set (addresses, settle modes, credit asked for...) and, once its connection has a transport,
the engine endpoint (``_impl``) that does the protocol work. The local half of the state is kept here, because a
proton program opens endpoints before there is a transport; the remote half is read from the engine. When the
transport comes (or comes back, after a reconnect) :meth:`Connection._bind` gives every open endpoint a new engine
endpoint, in order, so the engine sends open, begin and attach as the application asked.

Every change the application makes to an endpoint also queues the matching local event (``on_link_local_open``...)
for the container, as proton's collector does.
"""

from __future__ import annotations

import abc
from collections import deque
from threading import get_ident
from typing import TYPE_CHECKING, Any, TypeVar

from ..codec.performatives import RCV_FIRST, SENDER, SND_MIXED, SND_SETTLED, Error
from ..codec.terminus import Source, Target
from ..codec.transactions import Coordinator
from ..message import Message
from ..protocol.endpoint import EndpointState
from ..protocol.payload import Gathered
from ..types import symbol, ulong
from ._condition import Condition
from ._data import Data
from ._delivery import _ACCEPTED, Delivery, local_state_object
from ._events import Event, Handler
from ._exceptions import LinkException, SessionException
from ._transport import Transport

if TYPE_CHECKING:
    from ..protocol import Connection as EngineConnection
    from ..protocol.link import ReceiverLink as EngineReceiver
    from ..protocol.link import SenderLink as EngineSender
    from ..protocol.session import Session as EngineSession
    from ._engine import EngineIO

__all__ = ["Connection", "Endpoint", "Link", "Receiver", "Sender", "Session", "Terminus"]

_UNINIT, _ACTIVE, _CLOSED = 1, 2, 4
LinkT = TypeVar("LinkT", bound="Link")
_ENGINE_ACTIVE = EndpointState.ACTIVE
_OVERSHOOT_TOLERANCE = 4096
# proton writes what callbacks send once they return; a callback that sends its whole credit would leave the peer
# idle (and the output growing) until then. Past this much output, it is handed to the socket as it comes.
_WRITE_THROUGH = 16384
_REMOTE_BITS = {EndpointState.UNINIT: 8, EndpointState.ACTIVE: 16, EndpointState.CLOSED: 32}
_TRANSPORT_EVENT = Event.TRANSPORT
# The local changes after which proton's engine says the transport has work (a TRANSPORT event).
_LOCAL_EVENTS = frozenset(
    {
        Event.CONNECTION_LOCAL_OPEN,
        Event.CONNECTION_LOCAL_CLOSE,
        Event.SESSION_LOCAL_OPEN,
        Event.SESSION_LOCAL_CLOSE,
        Event.LINK_LOCAL_OPEN,
        Event.LINK_LOCAL_CLOSE,
        Event.LINK_LOCAL_DETACH,
    }
)


def _condition_of(error: Error | None) -> Condition | None:
    return None if error is None else Condition.from_error(error)


def _error_of(condition: Condition | None) -> Error | None:
    return None if condition is None else condition.to_error()


def _close_later(endpoint: Connection | Session | Link) -> None:
    """Close the engine endpoint after the callbacks of this round, as proton's transport does: whatever the
    callbacks did before (an outcome, a send) goes out before the close, detach or end."""
    container = endpoint._container()
    if container is None:
        endpoint._close_engine()
    else:
        container._closing.append(endpoint)
        container._wake()


class Endpoint(abc.ABC):
    """What connections, sessions and links share: the state bits and the conditions.

    ``state`` is a bit field: one of :attr:`LOCAL_UNINIT`, :attr:`LOCAL_ACTIVE`, :attr:`LOCAL_CLOSED` or-ed with one
    of :attr:`REMOTE_UNINIT`, :attr:`REMOTE_ACTIVE`, :attr:`REMOTE_CLOSED`.
    """

    LOCAL_UNINIT = 1
    LOCAL_ACTIVE = 2
    LOCAL_CLOSED = 4
    REMOTE_UNINIT = 8
    REMOTE_ACTIVE = 16
    REMOTE_CLOSED = 32

    _impl: Any
    _local: int
    _handler: Any
    condition: Condition | None

    @property
    def handler(self) -> Any:
        """The handler for this endpoint's events (None: its parent's, or the container's)."""
        return self._handler

    @handler.setter
    def handler(self, handler: Any) -> None:
        # As proton: an object that is not a Handler is wrapped in one, so ``endpoint.handler.add(...)`` works.
        if handler is None or isinstance(handler, Handler):
            self._handler = handler
        else:
            self._handler = Handler()
            self._handler.add(handler)

    @property
    def state(self) -> int:
        """The local and remote state bits."""
        impl = self._impl
        return self._local | (8 if impl is None else _REMOTE_BITS[impl.remote_state])

    @property
    def remote_condition(self) -> Condition | None:
        """The condition the peer closed this endpoint with, if any."""
        impl = self._impl
        return None if impl is None else _condition_of(impl.remote_error)

    @abc.abstractmethod
    def _container(self) -> Any:
        """The container that dispatches this endpoint's events (None for an endpoint made without one)."""

    @abc.abstractmethod
    def _close_engine(self) -> None:
        """Send this endpoint's close, end or detach on the engine."""

    @abc.abstractmethod
    def _owner(self) -> Connection:
        """The connection this endpoint belongs to (itself for a connection)."""

    def _push(self, event_type: Any) -> None:
        container = self._container()
        if container is not None:
            container._check_thread()
            container._push(event_type, self)
            return
        # No container: proton's engine API, where events go to the connection's collector.
        connection = self._owner()
        collector = connection._collector
        if collector is not None:
            collector.put(self, event_type)
            if event_type in _LOCAL_EVENTS:
                connection._modified()


class Connection(Endpoint):
    """An AMQP connection: made by :meth:`Container.connect` (or for each peer an acceptor lets in).

    Attributes:
        container: the container id sent in open (this end's).
        hostname: the hostname sent in open (and used for SASL and TLS).
        user, password: the SASL credentials (the URL's win).
        handler: the handler for this connection's events (None: the container's).
        offered_capabilities, desired_capabilities, properties: open's fields.
        condition: the condition to close with.
        url: the URL of the peer, once connected.
    """

    _is_connection = True
    _tracing: Any = None  # the container's OpenTelemetry tracing of this connection (see _tracing.py)

    def __init__(self, impl: Any = None) -> None:
        self._impl: EngineConnection | None = impl
        self._local = _UNINIT
        self._reactor: Any = None
        self._handler: Any = None
        self.container: str | None = None
        self.hostname: str | None = None
        self.user: str | None = None
        self.password: str | None = None
        self.url: Any = None
        self.offered_capabilities: Any = None
        self.desired_capabilities: Any = None
        self.properties: Any = None
        self.condition: Condition | None = None
        self._sessions: list[Session] = []
        self._transport = Transport(_connection=self)
        self._tls: Any = None
        self._default_session: Session | None = None
        self._channel: Any = None  # the container's driver of this connection
        self._collector: Any = None  # proton's engine API: where events go (see collect)
        self._bound: EngineIO | None = None  # proton's engine API: the transport bound with Transport.bind

    def _container(self) -> Any:
        return self._reactor

    def _owner(self) -> Connection:
        return self

    # --- proton's engine API -----------------------------------------------------------------------------

    def collect(self, collector: Any) -> None:
        """Send this connection's events (and those of its sessions, links and deliveries) to ``collector``."""
        self._collector = collector
        if collector is not None:
            collector.put(self, Event.CONNECTION_INIT)

    def _modified(self) -> None:
        """The application asked for something the transport has to write: proton's TRANSPORT event."""
        bound = self._bound
        if bound is None:
            return
        collector = self._collector
        if collector is None:
            return
        # Called several times per message: the collector's own check for a repeated event, without the call.
        transport = bound.transport
        if collector._tail_context is not transport or collector._tail_type is not _TRANSPORT_EVENT:
            collector.put(transport, _TRANSPORT_EVENT)

    def _unbind_engine(self) -> None:
        """The transport was unbound: forget the engine and what the peer said (a new transport starts afresh)."""
        self._bound = None
        self._impl = None
        for session in self._sessions:
            session._impl = None
            for link in session._links:
                link._unbind()
        self._transport = Transport(_connection=self)

    def _work_list(self) -> list[Delivery]:
        """proton's work list: deliveries the application has something to do with (read, write, or see updated)."""
        work: list[Delivery] = []
        for session in self._sessions:
            for link in session._links:
                work.extend(link._work())
        return work

    # --- what the peer said ------------------------------------------------------------------------------

    def _remote_open(self) -> Any:
        impl = self._impl
        return None if impl is None else impl.remote_open

    @property
    def remote_container(self) -> str | None:
        """The peer's container id (None until its open arrived)."""
        remote = self._remote_open()
        return None if remote is None else remote.container_id

    @property
    def remote_hostname(self) -> str | None:
        """The hostname the peer sent in its open."""
        remote = self._remote_open()
        return None if remote is None else remote.hostname

    @property
    def remote_properties(self) -> Any:
        """The peer's connection properties (a dict), or None."""
        remote = self._remote_open()
        return None if remote is None else remote.properties

    @property
    def remote_offered_capabilities(self) -> Any:
        """The capabilities the peer offers (a tuple of symbols), or None."""
        remote = self._remote_open()
        return None if remote is None else remote.offered_capabilities

    @property
    def remote_desired_capabilities(self) -> Any:
        """The capabilities the peer desires (a tuple of symbols), or None."""
        remote = self._remote_open()
        return None if remote is None else remote.desired_capabilities

    @property
    def transport(self) -> Transport:
        """The transport of this connection."""
        return self._transport

    @property
    def connected_address(self) -> str | None:
        """The URL of the peer this connection is connected to, or None."""
        return None if self.url is None else str(self.url)

    @property
    def error(self) -> int:
        """proton's error code: always 0 (errors are raised, or reported as conditions)."""
        return 0

    @property
    def work_head(self) -> Delivery | None:
        """The first delivery of proton's work list: an incoming one to read, the current outgoing one while its
        link has credit, or one whose remote state or settlement changed (and that is not settled here)."""
        work = self._work_list()
        return work[0] if work else None

    # --- commands ----------------------------------------------------------------------------------------

    def open(self) -> None:
        """Open the connection: the open frame goes out once the transport is up."""
        if self._local != _UNINIT:
            return
        self._local = _ACTIVE
        self._push(Event.CONNECTION_LOCAL_OPEN)
        impl = self._impl
        if impl is not None and impl.local_state is EndpointState.UNINIT:
            impl.open()
            self._touch()
        container = self._reactor
        if container is not None:
            container._connection_opened_locally(self)

    def close(self) -> None:
        """Close the connection (with :attr:`condition`, if set); the peer's close completes it."""
        if self._local == _CLOSED:
            return
        self._local = _CLOSED
        self._push(Event.CONNECTION_LOCAL_CLOSE)
        _close_later(self)

    def _close_engine(self) -> None:
        """Send our close (the container does it once the callbacks of the round have returned)."""
        impl = self._impl
        if impl is not None and impl.local_state is not EndpointState.CLOSED and (not impl.closed or self._bound):
            if impl.local_state is EndpointState.UNINIT:
                impl.open()
            impl.close(_error_of(self.condition))
            self._touch()
            channel = self._channel
            if channel is not None:
                channel.head_closed()
        container = self._reactor
        if container is not None:
            container._connection_closed_locally(self)

    def session(self) -> Session:
        """A new session on this connection (open it with :meth:`Session.open`)."""
        if self._local == _CLOSED:
            raise SessionException("the connection is closed")
        session = Session(self)
        self._sessions.append(session)
        session._push(Event.SESSION_INIT)
        return session

    def session_head(self, mask: int) -> Session | None:
        """The first session whose state matches ``mask``."""
        return next((s for s in self._sessions if s.state & mask == mask), None)

    def link_head(self, mask: int) -> Link | None:
        """The first link of this connection whose state matches ``mask``."""
        return next((link for s in self._sessions for link in s._links if link.state & mask == mask), None)

    def free(self) -> None:
        """Forget the connection (close it first)."""
        container = self._reactor
        if container is not None:
            container._forget_connection(self)

    # --- for the container -------------------------------------------------------------------------------

    def _touch(self) -> None:
        container = self._reactor
        if container is not None:
            container._dirty[self] = None

    def _engine_usable(self) -> bool:
        """True while the engine takes frames for this connection (bound, opened by us, not closed)."""
        impl = self._impl
        if impl is None or impl.local_state is not EndpointState.ACTIVE:
            return False
        # proton's engine API: after the peer's close, the application's detach, end and close still go out.
        return self._bound is not None or not impl.closed

    def _abort_transport(self) -> None:
        channel = self._channel
        if channel is not None:
            channel.abort()

    def _bind(self, engine: EngineConnection) -> None:
        """Give this connection (and its open sessions and links) a new engine, replaying what is open."""
        self._impl = engine
        self._sessions = [s for s in self._sessions if s._local != _CLOSED]
        for session in self._sessions:
            session._impl = None
            for link in session._links:
                link._unbind()
            session._links = [link for link in session._links if link._local != _CLOSED]
        if self._local == _ACTIVE:
            engine.open()
            for session in self._sessions:
                session._begin_if_ready()
        elif self._local == _CLOSED:
            engine.open()
            engine.close(_error_of(self.condition))

    def __repr__(self) -> str:
        return f"Connection(container={self.container!r}, url={self.connected_address!r}, state={self.state})"


class Session(Endpoint):
    """A session: made by :meth:`Connection.session` (or by the peer).

    Attributes:
        connection: the session's connection.
        handler: the handler for this session's events (None: the connection's).
        incoming_capacity: the bytes of incoming transfers this session buffers (sets its incoming window).
        condition: the condition to end with.
    """

    _is_session = True

    def __init__(self, connection: Connection, impl: EngineSession | None = None) -> None:
        self.connection = connection
        self._impl = impl
        self._local = _UNINIT
        self._handler: Any = None
        self.condition: Condition | None = None
        self.incoming_capacity = 0
        self.outgoing_window = 2048
        self._links: list[Link] = []

    def _container(self) -> Any:
        return self.connection._reactor

    def _owner(self) -> Connection:
        return self.connection

    @property
    def transport(self) -> Transport:
        """The transport of the session's connection."""
        return self.connection.transport

    @property
    def incoming_bytes(self) -> int:
        """Bytes of incoming transfers held (deliveries are handed over whole, so 0 between callbacks)."""
        return 0

    @property
    def outgoing_bytes(self) -> int:
        """Bytes of outgoing transfers waiting for the peer's window."""
        impl = self._impl
        return 0 if impl is None else impl.outgoing_backlog

    def open(self) -> None:
        """Begin the session."""
        if self._local != _UNINIT:
            return
        self._local = _ACTIVE
        self._push(Event.SESSION_LOCAL_OPEN)
        self._begin_if_ready()

    def close(self) -> None:
        """End the session (with :attr:`condition`, if set)."""
        if self._local == _CLOSED:
            return
        self._local = _CLOSED
        self._push(Event.SESSION_LOCAL_CLOSE)
        _close_later(self)

    def _close_engine(self) -> None:
        """Send our end (the container does it once the callbacks of the round have returned)."""
        impl = self._impl
        if impl is not None and impl.local_state is EndpointState.ACTIVE and self.connection._engine_usable():
            impl.end(_error_of(self.condition))
            self.connection._touch()

    def sender(self, name: str) -> Sender:
        """A new sending link called ``name`` (set its termini and options, then :meth:`Link.open`)."""
        return self._new_link(Sender, name)

    def receiver(self, name: str) -> Receiver:
        """A new receiving link called ``name`` (set its termini and options, then :meth:`Link.open`)."""
        return self._new_link(Receiver, name)

    def _new_link(self, kind: type[LinkT], name: str) -> LinkT:
        if self._local == _CLOSED:
            raise LinkException("the session is closed")
        link = kind(self, name)
        self._links.append(link)
        link._push(Event.LINK_INIT)
        return link

    def next(self, mask: int) -> Session | None:
        """The next session of the connection whose state matches ``mask``."""
        sessions = self.connection._sessions
        index = sessions.index(self) if self in sessions else len(sessions)
        return next((s for s in sessions[index + 1 :] if s.state & mask == mask), None)

    def free(self) -> None:
        """Forget the session (end it first)."""
        if self in self.connection._sessions:
            self.connection._sessions.remove(self)

    def _engine_active(self) -> bool:
        """True while the engine session takes frames (begun by us, not ended by the peer, connection usable)."""
        impl = self._impl
        return (
            impl is not None
            and impl.local_state is EndpointState.ACTIVE
            and (impl.remote_state is not EndpointState.CLOSED or self.connection._bound is not None)
            and self.connection._engine_usable()
        )

    def _begin_if_ready(self) -> None:
        """Begin on the engine once this session is open and the connection's engine can take it."""
        if self._local != _ACTIVE or not self.connection._engine_usable():
            return
        engine = self.connection._impl
        assert engine is not None
        impl = self._impl
        if impl is None:
            options: dict[str, Any] = {}
            if self.incoming_capacity:
                frame = max(engine.max_frame_size, 512)
                options["incoming_window"] = max(1, self.incoming_capacity // frame)
            impl = self._impl = engine.begin_session(**options)
            impl.user_data = self
        elif impl.local_state is EndpointState.UNINIT:
            impl.begin()
        else:
            return
        self.connection._touch()
        for link in self._links:
            link._attach_if_ready()

    def __repr__(self) -> str:
        return f"Session(state={self.state})"


class Terminus:
    """A source or target: the node a link takes messages from or gives them to, and how.

    On a link's local termini every attribute may be set before the link is opened; the remote termini
    (:attr:`Link.remote_source`, :attr:`Link.remote_target`) hold what the peer's attach said.
    :attr:`properties`, :attr:`capabilities`, :attr:`outcomes` and :attr:`filter` are :class:`Data` objects, as
    in proton (``link.source.filter.put_dict(...)``).
    """

    UNSPECIFIED = 0
    SOURCE = 1
    TARGET = 2
    COORDINATOR = 3
    NONDURABLE = 0
    CONFIGURATION = 1
    DELIVERIES = 2
    EXPIRE_WITH_LINK = 0
    EXPIRE_WITH_SESSION = 1
    EXPIRE_WITH_CONNECTION = 2
    EXPIRE_NEVER = 3
    DIST_MODE_UNSPECIFIED = 0
    DIST_MODE_COPY = 1
    DIST_MODE_MOVE = 2

    def __init__(self, kind: int = 0) -> None:
        self.type = kind
        self.address: str | None = None
        self.durability = self.NONDURABLE
        self.expiry_policy = self.EXPIRE_WITH_SESSION
        self.timeout = 0
        self.dynamic = False
        self.distribution_mode = self.DIST_MODE_UNSPECIFIED
        self.properties = Data()
        self.capabilities = Data()
        self.outcomes = Data()
        self.filter = Data()
        self.default_outcome: Any = None

    def copy(self, src: Terminus) -> None:
        """Copy every attribute of ``src`` into this terminus."""
        for name in ("type", "address", "durability", "expiry_policy", "timeout", "dynamic", "distribution_mode"):
            setattr(self, name, getattr(src, name))
        self.default_outcome = src.default_outcome
        for name in ("properties", "capabilities", "outcomes", "filter"):
            data = Data()
            value = _data_value(getattr(src, name))
            if value is not None:
                data.put_object(value)
            setattr(self, name, data)

    # --- to and from the codec's composites --------------------------------------------------------------

    @classmethod
    def _from_composite(cls, composite: Any, kind: int) -> Terminus:
        terminus = cls(kind)
        if not isinstance(composite, (Source, Target, Coordinator)):
            # None, or a value of another type: attach's source and target are "*" fields (§2.7.3), and what is no
            # terminus we know is an unspecified one, as proton reads it.
            terminus.type = cls.UNSPECIFIED
            return terminus
        if isinstance(composite, Coordinator):
            terminus.type = cls.COORDINATOR
            if composite.capabilities is not None:
                terminus.capabilities.put_object(list(composite.capabilities))
            return terminus
        terminus.address = None if composite.address is None else str(composite.address)
        terminus.durability = int(composite.durable)
        terminus.expiry_policy = _EXPIRY_CODES.get(str(composite.expiry_policy), cls.EXPIRE_WITH_SESSION)
        terminus.timeout = int(composite.timeout)
        terminus.dynamic = bool(composite.dynamic)
        if composite.dynamic_node_properties is not None:
            terminus.properties.put_object(composite.dynamic_node_properties)
        if composite.capabilities is not None:
            terminus.capabilities.put_object(list(composite.capabilities))
        if isinstance(composite, Source):
            mode = None if composite.distribution_mode is None else str(composite.distribution_mode)
            terminus.distribution_mode = {"copy": cls.DIST_MODE_COPY, "move": cls.DIST_MODE_MOVE}.get(mode or "", 0)
            if composite.filter is not None:
                terminus.filter.put_object(composite.filter)
            if composite.outcomes is not None:
                terminus.outcomes.put_object(list(composite.outcomes))
            terminus.default_outcome = composite.default_outcome
        return terminus

    def _composite(self) -> Source | Target | Coordinator | None:
        """The source or target to send in attach (None for an unspecified terminus)."""
        if self.type == self.UNSPECIFIED:
            return None
        if self.type == self.COORDINATOR:
            # §4.5.1: a coordinator target has only capabilities (the txn-capabilities desired)
            return Coordinator(capabilities=_symbols(_data_value(self.capabilities)))
        common: dict[str, Any] = {
            "address": self.address,
            "durable": self.durability,
            "expiry_policy": symbol(_EXPIRY_NAMES[self.expiry_policy]),
            "timeout": self.timeout,
            "dynamic": bool(self.dynamic),
            "dynamic_node_properties": _data_value(self.properties),
            "capabilities": _symbols(_data_value(self.capabilities)),
        }
        if self.type == self.SOURCE:
            mode = {self.DIST_MODE_COPY: "copy", self.DIST_MODE_MOVE: "move"}.get(self.distribution_mode)
            return Source(
                **common,
                distribution_mode=None if mode is None else symbol(mode),
                filter=_data_value(self.filter),
                outcomes=_symbols(_data_value(self.outcomes)),
                default_outcome=self.default_outcome,
            )
        return Target(**common)

    def __repr__(self) -> str:
        return f"Terminus(address={self.address!r}, dynamic={self.dynamic})"


_EXPIRY_NAMES = {0: "link-detach", 1: "session-end", 2: "connection-close", 3: "never"}
_EXPIRY_CODES = {name: code for code, name in _EXPIRY_NAMES.items()}


def _data_value(data: Data) -> Any:
    """The first value a terminus's :class:`Data` holds, or None when it is empty."""
    data.rewind()
    if data.next() is None:
        return None
    value = data.get_object()
    data.rewind()
    return value


def _symbols(value: Any) -> tuple[symbol, ...] | None:
    if value is None:
        return None
    if isinstance(value, (str, bytes)):
        return (symbol(value if isinstance(value, str) else value.decode()),)
    return tuple(symbol(str(item)) for item in value)


class Link(Endpoint):
    """One end of a link (a :class:`Sender` or a :class:`Receiver`).

    Attributes:
        name: the link name.
        session: the link's session.
        handler: the handler for this link's events (None: the session's or connection's).
        source, target: this end's termini (set them before :meth:`open`).
        snd_settle_mode, rcv_settle_mode: the settle modes to ask for (``Link.SND_*``, ``Link.RCV_*``).
        max_message_size: the largest message this end accepts (0: no limit).
        properties: the link properties to send (a dict with symbol keys), or None.
        offered_capabilities, desired_capabilities: the link capabilities to send, or None.
        condition: the condition to close with.
    """

    SND_UNSETTLED = 0
    SND_SETTLED = 1
    SND_MIXED = 2
    RCV_FIRST = 0
    RCV_SECOND = 1

    _is_link = True
    is_sender = False
    is_receiver = False

    def __init__(self, session: Session, name: str) -> None:
        self.session = session
        self._connection = session.connection
        self.name = name
        self._impl: Any = None
        self._local = _UNINIT
        self._handler: Any = None
        self.condition: Condition | None = None
        self.source = Terminus(Terminus.SOURCE)
        self.target = Terminus(Terminus.TARGET)
        self.snd_settle_mode = SND_MIXED
        self.rcv_settle_mode = RCV_FIRST
        self.max_message_size = 0
        self.properties: Any = None
        self.offered_capabilities: Any = None
        self.desired_capabilities: Any = None
        self._drain_mode = False
        self._closes = True

    def _container(self) -> Any:
        return self.session.connection._reactor

    def _owner(self) -> Connection:
        return self.session.connection

    def _work(self) -> list[Delivery]:
        """This link's deliveries on proton's work list (see :attr:`Connection.work_head`)."""
        return []

    @property
    def connection(self) -> Connection:
        """The link's connection."""
        return self.session.connection

    @property
    def transport(self) -> Transport:
        """The transport of the link's connection."""
        return self.session.connection.transport

    # --- what the peer said ------------------------------------------------------------------------------

    @property
    def remote_source(self) -> Terminus:
        """The source the peer's attach carried."""
        impl = self._impl
        return Terminus._from_composite(None if impl is None else impl.remote_source, Terminus.SOURCE)

    @property
    def remote_target(self) -> Terminus:
        """The target the peer's attach carried."""
        impl = self._impl
        return Terminus._from_composite(None if impl is None else impl.remote_target, Terminus.TARGET)

    @property
    def remote_snd_settle_mode(self) -> int:
        """The sender settle mode the peer's attach carried."""
        impl = self._impl
        return SND_MIXED if impl is None else int(impl.remote_snd_settle_mode)

    @property
    def remote_rcv_settle_mode(self) -> int:
        """The receiver settle mode the peer's attach carried."""
        impl = self._impl
        return RCV_FIRST if impl is None else int(impl.remote_rcv_settle_mode)

    @property
    def remote_max_message_size(self) -> int:
        """The largest message the peer accepts (0: no limit)."""
        impl = self._impl
        return 0 if impl is None else int(impl.remote_max_message_size or 0)

    @property
    def remote_properties(self) -> Any:
        """The link properties the peer sent, or None."""
        impl = self._impl
        return None if impl is None or impl.remote_attach is None else impl.remote_attach.properties

    @property
    def remote_offered_capabilities(self) -> Any:
        """The capabilities the peer offered on this link, or None."""
        impl = self._impl
        return None if impl is None or impl.remote_attach is None else impl.remote_attach.offered_capabilities

    @property
    def remote_desired_capabilities(self) -> Any:
        """The capabilities the peer desired on this link, or None."""
        impl = self._impl
        return None if impl is None or impl.remote_attach is None else impl.remote_attach.desired_capabilities

    # --- credit ------------------------------------------------------------------------------------------

    @property
    def credit(self) -> int:
        """The link credit: how many more messages may be sent now."""
        impl = self._impl
        return 0 if impl is None else impl.link_credit

    @property
    def available(self) -> int:
        """The sender's count of messages it could send now (§2.6.7)."""
        impl = self._impl
        return 0 if impl is None else int(impl.available)

    @property
    def queued(self) -> int:
        """Deliveries waiting on this end: not yet sent (sender) or not yet read (receiver)."""
        return 0

    @property
    def unsettled(self) -> int:
        """Deliveries of this link not yet settled on this end."""
        return 0

    @property
    def drain_mode(self) -> bool:
        """The drain flag: a receiver asks the sender to use up or give back its credit."""
        impl = self._impl
        return self._drain_mode if impl is None else bool(impl.drain)

    @drain_mode.setter
    def drain_mode(self, value: bool) -> None:
        self._drain_mode = bool(value)

    @property
    def current(self) -> Delivery | None:
        """The current delivery: the one being written (sender) or read (receiver)."""
        return None

    def advance(self) -> bool:
        """Move past the current delivery; True when there was one."""
        return False

    def drained(self) -> int:
        """Answer (sender) or account for (receiver) a drain; returns the credit it gave back."""
        return 0

    # --- life --------------------------------------------------------------------------------------------

    def open(self) -> None:
        """Attach the link (answering the peer's attach, for a link it started)."""
        if self._local != _UNINIT:
            return
        self._local = _ACTIVE
        self._push(Event.LINK_LOCAL_OPEN)
        self._attach_if_ready()

    def close(self) -> None:
        """Detach and close the link (with :attr:`condition`, if set)."""
        self._detach(closed=True)

    def detach(self) -> None:
        """Detach the link without closing it (it may be resumed)."""
        self._detach(closed=False)

    def _detach(self, closed: bool) -> None:
        if self._local == _CLOSED:
            return
        self._local = _CLOSED
        self._closes = closed
        self._push(Event.LINK_LOCAL_CLOSE if closed else Event.LINK_LOCAL_DETACH)
        _close_later(self)

    def _close_engine(self) -> None:
        """Send our detach (the container does it once the callbacks of the round have returned)."""
        impl = self._impl
        if impl is not None and impl.local_state is not EndpointState.CLOSED and self.session._engine_active():
            impl.detach(closed=self._closes, error=_error_of(self.condition))
            self.connection._touch()

    def free(self) -> None:
        """Forget the link (close it first)."""
        links = self.session._links
        if self in links:
            links.remove(self)

    def next(self, mask: int) -> Link | None:
        """The next link of the connection whose state matches ``mask``."""
        links = [link for s in self.connection._sessions for link in s._links]
        index = links.index(self) if self in links else len(links)
        return next((link for link in links[index + 1 :] if link.state & mask == mask), None)

    def delivery(self, tag: bytes | str) -> Delivery:
        """Start a new delivery with ``tag`` (a sender's low-level API: :meth:`Sender.stream`, :meth:`advance`)."""
        raise LinkException("only a sender makes deliveries")

    # --- binding to the engine ---------------------------------------------------------------------------

    def _attach_options(self) -> dict[str, Any]:
        options: dict[str, Any] = {
            "source": self.source._composite(),
            "target": self.target._composite(),
            "snd_settle_mode": self.snd_settle_mode,
            "rcv_settle_mode": self.rcv_settle_mode,
        }
        if self.max_message_size:
            options["max_message_size"] = ulong(self.max_message_size)
        if self.properties:
            options["properties"] = {symbol(str(k)): v for k, v in dict(self.properties).items()}
        if self.offered_capabilities:
            options["offered_capabilities"] = self.offered_capabilities
        if self.desired_capabilities:
            options["desired_capabilities"] = self.desired_capabilities
        return options

    def _attach_if_ready(self) -> None:
        session = self.session
        if self._local != _ACTIVE or not session._engine_active():
            return
        impl = self._impl
        if impl is None:
            attach = session._impl.attach_sender if self.is_sender else session._impl.attach_receiver
            impl = self._impl = attach(self.name, **self._attach_options())
            impl.user_data = self
        elif impl.local_state is EndpointState.UNINIT:
            impl.attach(**self._attach_options())
        else:
            return
        self.connection._touch()
        self._after_attach()

    def _after_attach(self) -> None:
        """Subclass hook: the engine link was attached on our side."""

    def _unbind(self) -> None:
        """The transport is gone: forget the engine link (a new one is made on the next transport)."""
        self._impl = None

    def _delivery_updated(self, delivery: Delivery) -> None:
        """A delivery's local state was set."""

    def _settle(self, delivery: Delivery) -> None:
        """Settle ``delivery`` on the engine."""

    def _send_state(self, delivery: Delivery) -> None:
        """Send the local state of ``delivery``, unsettled (it was updated and not settled in the callback)."""

    def _abort(self, delivery: Delivery) -> None:
        raise LinkException("only a sender aborts deliveries")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, state={self.state})"


class Sender(Link):
    """A link on which this end sends messages.

    Messages sent without credit (or before the link is attached) wait here, in order, and go as credit comes, as
    in proton; :attr:`queued` counts them.

    Attributes:
        tag_generator: an iterator (or a function) giving delivery tags; by default "1", "2", ... as proton's.
    """

    is_sender = True

    def __init__(self, session: Session, name: str) -> None:
        super().__init__(session, name)
        self._pending: deque[tuple[Delivery, bytes | Gathered]] = deque()
        self._unsettled: dict[Delivery, None] = {}
        self._tag_count = 0
        self.tag_generator: Any = None
        self._current: Delivery | None = None
        #: the bytes written to the current delivery so far: the one chunk of the usual single ``send`` (no list
        #: made per message), or a list of chunks joined at advance; None without a current delivery.
        self._stream: bytes | list[bytes] | None = None

    @property
    def queued(self) -> int:
        """Messages waiting to be sent (no credit yet)."""
        return len(self._pending)

    @property
    def unsettled(self) -> int:
        """Messages sent (or waiting, or being written) not yet settled on this end."""
        return len(self._unsettled) + (self._current is not None)

    @property
    def current(self) -> Delivery | None:
        """The delivery being written with :meth:`stream`, if any."""
        return self._current

    @property
    def credit(self) -> int:
        """The link credit: how many more messages may be sent now (less those advanced and waiting to go)."""
        impl = self._impl
        credit = 0 if impl is None else int(impl.link_credit)
        if self._connection._bound is not None:
            credit -= len(self._pending)
        return credit

    def _work(self) -> list[Delivery]:
        work = [d for d in self._unsettled if d._updated and not d._settled_here]
        current = self._current
        if current is not None and self.credit > 0:
            work.insert(0, current)
        return work

    def delivery_tag(self) -> bytes:
        """The tag for the next delivery."""
        generator = self.tag_generator
        if generator is None:
            self._tag_count += 1
            return b"%d" % self._tag_count
        tag = next(generator) if hasattr(generator, "__next__") else generator()
        return tag.encode() if isinstance(tag, str) else bytes(tag)

    def offered(self, n: int) -> None:
        """Tell the receiver how many messages are available to send (§2.6.7 ``available``)."""
        impl = self._impl
        if impl is not None and impl.local_state is EndpointState.ACTIVE:
            impl.set_available(n)
            self.connection._touch()

    def send(self, obj: Any, tag: bytes | str | None = None) -> Any:
        """Send a message (a :class:`Message`, or anything with a ``send(sender, tag)`` method) as a new
        delivery, or write raw bytes to the current delivery (see :meth:`stream`).

        Returns:
            The :class:`Delivery` (for bytes: the number of bytes written).
        """
        if obj.__class__ is bytes:
            return self.stream(obj)  # the engine API's usual call: raw bytes of the current delivery
        if isinstance(obj, Message):
            tracing = self._connection._tracing
            if tracing is not None:
                return tracing.send(self, obj, tag)
            return self._send_payload(obj._encode_payload(), tag)
        if hasattr(obj, "send"):
            return obj.send(self, tag=tag)
        return self.stream(obj)

    def _send_payload(
        self,
        payload: bytes | Gathered,
        tag: bytes | str | None,
        delivery: Delivery | None = None,
        state: Any = None,
    ) -> Delivery:
        container = self._connection._reactor
        if container is not None and container._loop_thread is not None and container._loop_thread != get_ident():
            container._check_thread()  # raises: another thread
        if delivery is None:
            if tag is None:
                if self.tag_generator is None:
                    self._tag_count = count = self._tag_count + 1
                    tag = b"%d" % count
                else:
                    tag = self.delivery_tag()
            elif isinstance(tag, str):
                tag = tag.encode()
            delivery = Delivery(self, tag)
        else:
            tag = delivery._tag
        if state is not None:
            delivery._transfer_state = state
        settled = self.snd_settle_mode == SND_SETTLED
        if settled:
            delivery._settled_here = True
        else:
            self._unsettled[delivery] = None
        impl = self._impl
        if (
            impl is not None
            and impl.link_credit > 0
            and not self._pending
            and impl.remote_state is _ENGINE_ACTIVE
            and impl.local_state is _ENGINE_ACTIVE
        ):
            engine_delivery = impl.send(payload, tag=tag, settled=settled, state=delivery._transfer_state)
            delivery._impl = engine_delivery
            engine_delivery.user_data = delivery
            if container is not None:
                connection = self._connection
                container._dirty[connection] = None
                container._sent[self] = None
                if connection._channel is not None and impl.session.connection.output_buffered > _WRITE_THROUGH:
                    connection._channel.write_now()
        else:
            self._pending.append((delivery, payload))
        bound = self._connection._bound
        if bound is not None:
            # proton's engine API: the transport reports the transfer (LINK_FLOW) when it writes it.
            bound.sent[self] = None
            connection = self._connection
            collector = connection._collector
            if collector is not None and not (
                collector._tail_context is connection._transport and collector._tail_type is _TRANSPORT_EVENT
            ):
                connection._modified()  # proton's TRANSPORT event, unless it is the last one queued already
        return delivery

    def _sendable(self) -> bool:
        impl = self._impl
        return (
            impl.local_state is EndpointState.ACTIVE
            and impl.remote_state is EndpointState.ACTIVE
            and self.session._engine_active()
        )

    def _pump(self) -> None:
        """Send the waiting messages the credit allows."""
        impl = self._impl
        pending = self._pending
        if not pending or impl is None or not self._sendable():
            return
        settled = self.snd_settle_mode == SND_SETTLED
        while pending and impl.link_credit > 0:
            delivery, payload = pending.popleft()
            engine_delivery = impl.send(payload, tag=delivery._tag, settled=settled, state=delivery._transfer_state)
            delivery._impl = engine_delivery
            engine_delivery.user_data = delivery
        self.connection._touch()

    # --- proton's low-level delivery API -----------------------------------------------------------------

    def delivery(self, tag: bytes | str) -> Delivery:
        """Start a delivery with ``tag``: :meth:`stream` its bytes, then :meth:`advance` to send it."""
        self._current = Delivery(
            self, tag if tag.__class__ is bytes else tag.encode() if isinstance(tag, str) else bytes(tag)
        )
        self._stream = b""
        return self._current

    def stream(self, data: bytes) -> int:
        """Append bytes to the current delivery (made by :meth:`delivery`); returns how many were taken."""
        chunks = self._stream
        if self._current is None or chunks is None:
            raise LinkException("no current delivery: call sender.delivery(tag) first")
        # The chunks are joined at advance (a delivery written in one send is not copied twice).
        chunk = data if data.__class__ is bytes else bytes(data)
        if not chunks:
            self._stream = chunk  # the first (usually the only) chunk
        elif isinstance(chunks, list):
            chunks.append(chunk)
        else:
            self._stream = [chunks, chunk]
        connection = self._connection
        collector = connection._collector
        if collector is not None and not (
            collector._tail_context is connection._transport and collector._tail_type is _TRANSPORT_EVENT
        ):
            connection._modified()  # proton's TRANSPORT event, unless it is the last one queued already
        return len(data)

    def advance(self) -> bool:
        """Finish the current delivery and send it."""
        current, chunks = self._current, self._stream
        if current is None or chunks is None:
            return False
        self._current = self._stream = None
        self._send_payload(chunks if isinstance(chunks, bytes) else b"".join(chunks), None, current)
        return True

    def drained(self) -> int:
        """Answer the receiver's drain: give back the credit not used; returns how much."""
        impl = self._impl
        if impl is None or not impl.drain:
            return 0
        credit = int(impl.link_credit)
        impl.drained()
        self.connection._touch()
        if credit:
            self._connection._modified()
        return credit

    # --- engine hooks ------------------------------------------------------------------------------------

    def _after_attach(self) -> None:
        self._pump()

    def _unbind(self) -> None:
        # Messages sent on the lost transport are in doubt: as in proton, nothing resends them.
        self._impl = None
        for delivery in list(self._unsettled):
            if delivery._impl is not None:
                del self._unsettled[delivery]

    def _delivery_updated(self, delivery: Delivery) -> None:
        pass  # a sender's own state is not sent; settle() sends the settlement

    def _settle(self, delivery: Delivery) -> None:
        self._unsettled.pop(delivery, None)
        if delivery._span is not None:
            self._connection._tracing.settled(delivery)
        impl = delivery._impl
        if impl is None:
            # Not sent yet: settling it first is giving it up.
            self._pending = deque(item for item in self._pending if item[0] is not delivery)
            return
        link: EngineSender | None = self._impl
        if not impl.settled and link is not None and impl.link is link:
            # Once per message: a sender that set no state of its own (the usual case) sends none, without the call.
            link.settle(impl, None if not delivery._local_type else local_state_object(delivery))
            self.connection._touch()

    def _abort(self, delivery: Delivery) -> None:
        impl = delivery._impl
        if impl is None:
            self._pending = deque(item for item in self._pending if item[0] is not delivery)
        elif self._impl is not None and self._impl is impl.link:
            self.session._impl.abort(impl)
            self.connection._touch()
        delivery._settled_here = True
        self._unsettled.pop(delivery, None)


class Receiver(Link):
    """A link on which this end receives messages.

    Complete deliveries queue here in order; the current one is read with :meth:`recv` and left with
    :meth:`advance` (``MessagingHandler`` does both and hands over the message).
    """

    is_receiver = True

    def __init__(self, session: Session, name: str) -> None:
        super().__init__(session, name)
        self._incoming: deque[Delivery] = deque()
        self._unsettled_count = 0
        self._credit_wanted = 0

    @property
    def credit(self) -> int:
        """The credit the sender has on this link (credit asked for before the attach included)."""
        impl = self._impl
        if impl is None or impl.local_state is not EndpointState.ACTIVE:
            return self._credit_wanted
        credit: int = impl.link_credit
        return credit

    @property
    def queued(self) -> int:
        """Complete deliveries not yet read (advanced past)."""
        return len(self._incoming)

    @property
    def unsettled(self) -> int:
        """Deliveries received and not yet settled on this end."""
        if self._connection._bound is not None:
            return self._unsettled_count
        impl = self._impl
        return 0 if impl is None or self.session._impl is None else self.session._impl.unsettled_incoming

    def _work(self) -> list[Delivery]:
        incoming = self._incoming
        if not incoming:
            return []
        return [incoming[0], *(d for d in list(incoming)[1:] if d._updated and not d._settled_here)]

    @property
    def current(self) -> Delivery | None:
        """The delivery to read now, if any."""
        incoming = self._incoming
        return incoming[0] if incoming else None

    def flow(self, n: int) -> None:
        """Give the sender ``n`` more credit."""
        if n <= 0:
            return
        connection = self._connection
        container = connection._reactor
        if container is not None:
            container._check_thread()
        impl = self._impl
        if (
            impl is not None
            and impl.local_state is _ENGINE_ACTIVE
            and (
                # Bound to a transport, the engine session is active when it and the connection are begun and
                # opened by us: _engine_active's answer, without its two calls (once per message when topping up).
                (
                    connection._bound is not None
                    and (session_impl := self.session._impl) is not None
                    and session_impl.local_state is _ENGINE_ACTIVE
                    and (connection_impl := connection._impl) is not None
                    and connection_impl.local_state is _ENGINE_ACTIVE
                )
                or self.session._engine_active()
            )
        ):
            impl.add_credit(n)
            if container is not None:
                container._dirty[connection] = None
        else:
            self._credit_wanted += n
        collector = connection._collector
        if collector is not None and not (
            collector._tail_context is connection._transport and collector._tail_type is _TRANSPORT_EVENT
        ):
            connection._modified()  # proton's TRANSPORT event, unless it is the last one queued already

    def drain(self, n: int) -> None:
        """Give ``n`` more credit and ask the sender to use it all up or give it back (§2.6.7)."""
        impl = self._impl
        if impl is not None and impl.local_state is EndpointState.ACTIVE and self.session._engine_active():
            impl.grant_credit(int(impl.link_credit) + max(n, 0), drain=True)
            self.connection._touch()
        else:
            self._drain_mode = True
            self._credit_wanted += max(n, 0)
        self._connection._modified()

    def draining(self) -> bool:
        """True while a drain asked for is not complete (the sender still has credit)."""
        impl = self._impl
        return impl is not None and bool(impl.drain) and impl.link_credit > 0

    def drained(self) -> int:
        """The credit the sender gave back by draining, since the last call."""
        impl = self._impl
        if impl is None:
            return 0
        drained, impl.drained_credit = impl.drained_credit, 0
        return int(drained)

    def recv(self, limit: int) -> bytes | None:
        """Read up to ``limit`` bytes of the current delivery; None once it is all read."""
        incoming = self._incoming
        if not incoming:
            raise LinkException("no current delivery to read")
        current = incoming[0]
        payload = current._payload
        if payload is None:
            return None
        start = current._read
        size = len(payload)
        if start >= size:
            # proton: nothing more yet of a partial delivery (b""), or the end of a complete one (None).
            return b"" if current.partial else None
        if start == 0 and limit >= size:
            # The usual read, ``recv(delivery.pending)``: the whole payload at once (no copy if it is bytes).
            current._read = size
            return bytes(payload)
        end = min(size, start + limit)
        current._read = end
        return bytes(payload[start:end])

    def advance(self) -> bool:
        """Move past the current delivery."""
        if self._incoming:
            self._incoming.popleft()
            return True
        return False

    # --- engine hooks ------------------------------------------------------------------------------------

    def _after_attach(self) -> None:
        # proton accepts transfers beyond the credit it gave (RabbitMQ before 4.0 sends a few too many after a
        # credit top-up); a peer that overshoots by more than this bound is still stopped (§2.6.7).
        self._impl.overshoot_tolerance = _OVERSHOOT_TOLERANCE
        wanted, self._credit_wanted = self._credit_wanted, 0
        if wanted:
            impl: EngineReceiver = self._impl
            impl.grant_credit(wanted, drain=self._drain_mode)

    def _unbind(self) -> None:
        self._impl = None
        self._incoming.clear()

    def _delivery_updated(self, delivery: Delivery) -> None:
        connection = self._connection
        container = connection._reactor
        if container is not None:
            container._updated.append(delivery)
            return
        bound = connection._bound
        if bound is not None:
            bound.updated.append(delivery)  # Delivery.update reports the TRANSPORT event

    def _settle(self, delivery: Delivery) -> None:
        if delivery._span is not None:
            self._connection._tracing.settled(delivery)
        impl = delivery._impl
        link: EngineReceiver | None = self._impl
        if (
            impl is not None
            and link is not None
            and impl.link is link
            and not impl.settled
            and link.local_state is _ENGINE_ACTIVE
        ):
            # Once per message: the usual outcome, accepted, without local_state_object's call.
            link.settle(impl, _ACCEPTED if delivery._local_type == 0x24 else local_state_object(delivery))
            container = self.session.connection._reactor
            if container is not None:
                container._dirty[self.session.connection] = None
        incoming = self._incoming
        if incoming and incoming[0] is delivery:
            incoming.popleft()

    def _send_state(self, delivery: Delivery) -> None:
        impl = delivery._impl
        link: EngineReceiver | None = self._impl
        if impl is None or link is None or impl.link is not link or impl.settled:
            return
        if link.local_state is EndpointState.ACTIVE:
            link.settle(impl, local_state_object(delivery), settled=False)
            self.connection._touch()


# --- the endpoints the peer started -------------------------------------------------------------------------


def session_begun_by_peer(connection: Connection, engine_session: Any) -> tuple[Session, bool]:
    """The proton session of an engine session the peer began (a ``SessionBegun`` event), and whether it was made
    just now: the caller then reports ``SESSION_INIT`` before ``SESSION_REMOTE_OPEN``, as proton does. One place
    for the reactor's I/O and the engine API's transport."""
    session: Session | None = engine_session.user_data
    if session is not None:
        return session, False
    session = Session(connection, engine_session)
    engine_session.user_data = session
    connection._sessions.append(session)
    return session, True


def link_attached_by_peer(engine_link: Any) -> tuple[Link, bool]:
    """The proton link of an engine link the peer attached (a ``LinkAttached`` event), and whether it was made just
    now (the caller then reports ``LINK_INIT`` first): a ``Sender`` for a link on which we send, else a
    ``Receiver``."""
    link: Link | None = engine_link.user_data
    if link is not None:
        return link, False
    session = engine_link.session.user_data
    kind = Sender if engine_link.role is SENDER else Receiver
    link = kind(session, engine_link.name)
    link._impl = engine_link
    engine_link.user_data = link
    session._links.append(link)
    return link, True
