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
from typing import TYPE_CHECKING, Any, TypeVar

from ..codec.performatives import Error
from ..io.driver import STREAMING_CHUNK
from ..protocol.endpoint import ACTIVE, CLOSED, UNINIT, EndpointState
from . import _engine_lifecycle
from ._condition import Condition
from ._delivery import Delivery
from ._events import Event, Handler
from ._exceptions import LinkException, SessionException
from ._restricted import SymbolList
from ._terminus import Terminus
from ._transport import Transport

if TYPE_CHECKING:
    from ..protocol import Connection as EngineConnection
    from ..protocol.session import Session as EngineSession
    from ._engine import EngineIO

__all__ = ["Connection", "Endpoint", "Link", "Receiver", "Sender", "Session", "Terminus"]

_UNINIT, _ACTIVE, _CLOSED = 1, 2, 4
LinkT = TypeVar("LinkT", bound="Link")
_ENGINE_ACTIVE = ACTIVE
_OVERSHOOT_TOLERANCE = 4096
# proton writes what callbacks send once they return; a callback that sends its whole credit would leave the peer
# idle (and the output growing) until then. Past this much output, it is handed to the socket as it comes (the
# awaitable API's senders likewise, see EngineDriver.kick_streaming).
_WRITE_THROUGH = STREAMING_CHUNK


def remote_bits(state: EndpointState) -> int:
    """proton's REMOTE_UNINIT, REMOTE_ACTIVE or REMOTE_CLOSED bit for an engine endpoint's remote state (compared by
    identity: an Enum member's hash, as a dict key needs, is Python code, slower than the comparisons)."""
    return 16 if state is ACTIVE else 32 if state is CLOSED else 8


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


def _tag_bytes(tag: bytes | str | Any) -> bytes:
    """A delivery tag as the bytes it is (a str is its UTF-8, as proton encodes it)."""
    if tag.__class__ is bytes:
        return tag
    return tag.encode() if isinstance(tag, str) else bytes(tag)


def _symbol_list(values: Any) -> SymbolList | None:
    """Capabilities as proton gives them: a :class:`SymbolList` (None when there are none)."""
    if values is None:
        return None
    if isinstance(values, (str, bytes)):
        values = [values]
    return SymbolList([str(value) for value in values], raise_on_error=False) or None


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

    # proton's engine API (a connection without a container): the references that keep the endpoint alive (see
    # _engine_lifecycle), and whether the transport maps it to a channel or handle, ours or the peer's.
    _refs = 1
    _freed = False
    _local_mapped = False
    _remote_mapped = False

    def _incref(self) -> None:
        self._refs += 1

    def _decref(self) -> None:
        _engine_lifecycle.decref(self)

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
        return self._local | (8 if impl is None else remote_bits(impl.remote_state))

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

    # What open sends, and the condition to close with: read when the connection opens or closes, so defaults left
    # on the class (set on the instance when changed). An instance of 30 attributes or more keeps them in a dict,
    # and CPython 3.11 and 3.12 then specialise no method call on it.
    _password: str | None = None
    authorization: str | None = None
    _offered_capabilities: SymbolList | None = None
    _desired_capabilities: SymbolList | None = None
    properties: Any = None
    condition: Condition | None = None

    def __init__(self, impl: Any = None) -> None:
        # The container's OpenTelemetry tracing of this connection (see _tracing.py); read for every message sent:
        # on the instance (a class default costs CPython 3.11 a generic lookup).
        self._tracing: Any = None
        self._impl: EngineConnection | None = impl
        self._local = _UNINIT
        self._reactor: Any = None
        self._handler: Any = None
        self.container: str | None = None
        self.hostname: str | None = None
        self.user: str | None = None
        self.url: Any = None
        self._sessions: list[Session] = []
        self._transport = Transport(_connection=self)
        self._tls: Any = None
        self._default_session: Session | None = None
        self._channel: Any = None  # the container's driver of this connection
        self._collector: Any = None  # proton's engine API: where events go (see collect)
        self._bound: EngineIO | None = None  # proton's engine API: the transport bound with Transport.bind
        # proton's engine API: the endpoints in the order they were made (collect reports their INIT events in it),
        # the sessions the transport may still map, and the work for the transport's next output (_engine_output).
        self._endpoint_order: list[Any] = [self]
        self._sessions_ever: dict[Session, None] = {}
        self._modified_endpoints: dict[Any, None] = {}
        self._tpwork: dict[Delivery, None] = {}
        #: an endpoint was opened or closed since the last output: it may have to be opened, begun or attached
        self._setup_pending = False

    @property
    def offered_capabilities(self) -> SymbolList | None:
        """The capabilities our open offers (a :class:`SymbolList`, as proton keeps them; set a list of symbols or
        strings, or an array of symbols)."""
        return self._offered_capabilities

    @offered_capabilities.setter
    def offered_capabilities(self, capabilities: Any) -> None:
        self._offered_capabilities = None if capabilities is None else SymbolList(capabilities)

    @property
    def desired_capabilities(self) -> SymbolList | None:
        """The capabilities our open desires (a :class:`SymbolList`)."""
        return self._desired_capabilities

    @desired_capabilities.setter
    def desired_capabilities(self, capabilities: Any) -> None:
        self._desired_capabilities = None if capabilities is None else SymbolList(capabilities)

    @property
    def password(self) -> None:
        """The password for SASL (write only: it reads None, as proton's)."""
        return None

    @password.setter
    def password(self, password: str | None) -> None:
        self._password = password

    def _container_id(self) -> str:
        """The container id our open carries: the one set, or proton's empty one."""
        return self.container or ""

    def _container(self) -> Any:
        return self._reactor

    def _owner(self) -> Connection:
        return self

    # --- proton's engine API -----------------------------------------------------------------------------

    def collect(self, collector: Any) -> None:
        """Send this connection's events (and those of its sessions, links and deliveries) to ``collector``."""
        self._collector = collector
        if collector is not None:
            if self._reactor is None:
                _engine_lifecycle.collect_init(self)  # proton: INIT for every endpoint made so far
            else:
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
        if self._reactor is not None:
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
    def remote_offered_capabilities(self) -> SymbolList | None:
        """The capabilities the peer offers (a :class:`SymbolList`), or None."""
        remote = self._remote_open()
        return None if remote is None else _symbol_list(remote.offered_capabilities)

    @property
    def remote_desired_capabilities(self) -> SymbolList | None:
        """The capabilities the peer desires (a :class:`SymbolList`), or None."""
        remote = self._remote_open()
        return None if remote is None else _symbol_list(remote.desired_capabilities)

    @property
    def transport(self) -> Transport | None:
        """The transport of this connection (made by the container; a connection the program drives has the one it
        bound, else None)."""
        if self._reactor is None:
            bound = self._bound
            return None if bound is None else bound.transport
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
        if self._reactor is None:
            self._modified_endpoints[self] = None  # written at the transport's next output
            self._setup_pending = True
            return
        impl = self._impl
        if impl is not None and impl.local_state is UNINIT:
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
        if self._reactor is None:
            self._modified_endpoints[self] = None  # written at the transport's next output
            self._setup_pending = True
            return
        _close_later(self)

    def _close_engine(self) -> None:
        """Send our close (the container does it once the callbacks of the round have returned)."""
        impl = self._impl
        if impl is not None and impl.local_state is not CLOSED and (not impl.closed or self._bound):
            if impl.local_state is UNINIT:
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
        if self._local == _CLOSED and self._reactor is not None:
            raise SessionException("the connection is closed")
        session = Session(self)
        self._sessions.append(session)
        if self._reactor is None:
            self._endpoint_order.append(session)
            self._sessions_ever[session] = None
            self._incref()  # a session holds its connection (proton's)
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
            return
        _engine_lifecycle.free_connection(self)

    def release(self) -> None:
        """proton's ``release``: :meth:`free`."""
        self.free()

    # --- for the container -------------------------------------------------------------------------------

    def _touch(self) -> None:
        container = self._reactor
        if container is not None:
            container._dirty[self] = None

    def _engine_usable(self) -> bool:
        """True while the engine takes frames for this connection (bound, opened by us, not closed)."""
        impl = self._impl
        if impl is None or impl.local_state is not ACTIVE:
            return False
        # proton's engine API: after the peer's close, the application's detach, end and close still go out.
        return self._bound is not None or not impl.closed

    def _abort_transport(self) -> None:
        channel = self._channel
        if channel is not None:
            channel.abort()

    def _bind(self, engine: EngineConnection) -> None:
        """Give this connection (and its open sessions and links) a new engine, replaying what is open (without a
        container, proton's engine API: the transport's output writes it, see _engine_output)."""
        self._impl = engine
        if self._reactor is None:
            self._setup_pending = True
            if self._local != _UNINIT:
                self._modified_endpoints[self] = None
            for session in self._sessions:
                if session._local != _UNINIT:
                    self._modified_endpoints[session] = None
                for link in session._links:
                    if link._local != _UNINIT:
                        self._modified_endpoints[link] = None
            return
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
        self._incoming_capacity = 0
        self.outgoing_window = 2147483647
        self._links: list[Link] = []
        # proton's engine API: bytes received and not consumed, bytes sent by the application and not yet written,
        # the transport's notes on the incoming window (see _engine_links), and the links it may still map.
        self._incoming_bytes = 0
        self._outgoing_held = 0
        self._check_flow = False
        self._need_flow = False
        self._links_ever: dict[Link, None] = {}
        # Links opened while a link of the same name was still detaching, by name: attached when the peer's detach
        # of that name comes (see Link._attach_if_ready).
        self._name_waiters: dict[str, list[Link]] = {}

    def _name_freed(self, name: str) -> None:
        """The peer's detach of a link called ``name`` came: the links that waited for the name attach now."""
        for link in self._name_waiters.pop(name, ()):
            link._attach_if_ready()

    def _container(self) -> Any:
        return self.connection._reactor

    def _owner(self) -> Connection:
        return self.connection

    @property
    def transport(self) -> Transport | None:
        """The transport of the session's connection."""
        return self.connection.transport

    @property
    def incoming_capacity(self) -> int:
        """The bytes of incoming transfers this session buffers: its incoming window is what of it is free, in
        frames of the transport's max-frame-size (§2.5.6; 0: no limit)."""
        return self._incoming_capacity

    @incoming_capacity.setter
    def incoming_capacity(self, capacity: int) -> None:
        self._incoming_capacity = capacity
        if self.connection._reactor is None and self.connection._bound is not None:
            from ._engine_links import modified

            self._check_flow = self._need_flow = True
            modified(self, emit=False)

    @property
    def incoming_bytes(self) -> int:
        """Bytes of incoming transfers held: received and not read yet (with a container, deliveries are handed over
        whole, so 0 between callbacks)."""
        return self._incoming_bytes

    @property
    def outgoing_bytes(self) -> int:
        """Bytes the application sent that are not written yet (no credit, or waiting for the peer's window)."""
        impl = self._impl
        return self._outgoing_held + (0 if impl is None else impl.outgoing_backlog)

    def open(self) -> None:
        """Begin the session."""
        if self._local != _UNINIT:
            return
        self._local = _ACTIVE
        self._push(Event.SESSION_LOCAL_OPEN)
        if self.connection._reactor is None:
            self.connection._modified_endpoints[self] = None  # begun at the transport's next output
            self.connection._setup_pending = True
            return
        self._begin_if_ready()

    def close(self) -> None:
        """End the session (with :attr:`condition`, if set)."""
        if self._local == _CLOSED:
            return
        self._local = _CLOSED
        self._push(Event.SESSION_LOCAL_CLOSE)
        if self.connection._reactor is None:
            self.connection._modified_endpoints[self] = None  # ended at the transport's next output
            self.connection._setup_pending = True
            return
        _close_later(self)

    def _close_engine(self) -> None:
        """Send our end (the container does it once the callbacks of the round have returned)."""
        impl = self._impl
        if impl is not None and impl.local_state is ACTIVE and self.connection._engine_usable():
            impl.end(_error_of(self.condition))
            self.connection._touch()

    def sender(self, name: str) -> Sender:
        """A new sending link called ``name`` (set its termini and options, then :meth:`Link.open`)."""
        return self._new_link(Sender, name)

    def receiver(self, name: str) -> Receiver:
        """A new receiving link called ``name`` (set its termini and options, then :meth:`Link.open`)."""
        return self._new_link(Receiver, name)

    def _new_link(self, kind: type[LinkT], name: str) -> LinkT:
        connection = self.connection
        if self._local == _CLOSED and connection._reactor is not None:
            raise LinkException("the session is closed")
        link = kind(self, name)
        self._links.append(link)
        if connection._reactor is None:
            connection._endpoint_order.append(link)
            self._links_ever[link] = None
            self._incref()  # a link holds its session (proton's)
        link._push(Event.LINK_INIT)
        return link

    def next(self, mask: int) -> Session | None:
        """The next session of the connection whose state matches ``mask``."""
        sessions = self.connection._sessions
        index = sessions.index(self) if self in sessions else len(sessions)
        return next((s for s in sessions[index + 1 :] if s.state & mask == mask), None)

    def free(self) -> None:
        """Forget the session (end it first)."""
        if self.connection._reactor is None:
            _engine_lifecycle.free_session(self)
            return
        if self in self.connection._sessions:
            self.connection._sessions.remove(self)

    def _engine_begun(self) -> bool:
        """True once our begin went out and until the transport is unbound (proton: our channel is mapped)."""
        impl = self._impl
        return impl is not None and impl.local_state is ACTIVE

    def _engine_active(self) -> bool:
        """True while the engine session takes frames (begun by us, not ended by the peer, connection usable)."""
        impl = self._impl
        return (
            impl is not None
            and impl.local_state is ACTIVE
            and (impl.remote_state is not CLOSED or self.connection._bound is not None)
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
        elif impl.local_state is UNINIT:
            impl.begin()
        else:
            return
        self.connection._touch()
        for link in self._links:
            link._attach_if_ready()

    def __repr__(self) -> str:
        return f"Session(state={self.state})"


def session_begun_by_peer(connection: Connection, engine_session: Any) -> tuple[Session, bool]:
    """The proton session of an engine session the peer began (a ``SessionBegun`` event), and whether it was made
    just now: the caller then reports ``SESSION_INIT`` before ``SESSION_REMOTE_OPEN``, as proton does. One place
    for the reactor's I/O and the engine API's transport."""
    session: Session | None = engine_session.user_data
    if session is not None:
        return session, False
    if connection._reactor is None:
        session = connection.session()  # the order, references and INIT event (queued here) of proton's engine
        session._impl = engine_session
        engine_session.user_data = session
        return session, False
    session = Session(connection, engine_session)
    engine_session.user_data = session
    connection._sessions.append(session)
    return session, True


# Links live in _links.py (they use what is above); imported here so that ``_endpoints`` names every endpoint.
from ._links import Link, Receiver, Sender, link_attached_by_peer  # noqa: E402

__all__ += ["link_attached_by_peer", "session_begun_by_peer"]
