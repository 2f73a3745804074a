"""proton's events and handlers: :class:`EventType`, :class:`Event`, :class:`Handler` and the dispatch rule.

An event names what happened (``Event.LINK_FLOW``...) and the object it happened to (its *context*: a connection,
session, link, delivery, transport, timer task or the container). Dispatching an event to a handler calls the
handler's ``on_<event>`` method when it has one, else its ``on_unhandled(method, event)``, and then does the same for
each of the handler's child ``handlers``, depth first, as proton does. Which handler receives an event is decided by
the container (:meth:`Event.handler`: the link's, the session's or the connection's handler, else the container's).
"""

from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from ._delivery import Delivery
    from ._endpoints import Connection, Receiver, Sender, Session
    from ._transport import Transport

__all__ = ["ApplicationEvent", "Collector", "Event", "EventBase", "EventType", "Handler", "dispatch"]


class EventType:
    """A kind of event: its ``name``, ``number`` and the handler ``method`` called for it (``on_<event>``).

    As python-qpid-proton 0.40's: the engine's core types are named and numbered as proton's C library names them
    (``Event.DELIVERY`` is ``PN_DELIVERY``, number 28; ``str()`` gives the name, ``repr()``
    ``EventType(name=PN_DELIVERY, number=28)``); the container's own types and those a program makes (an
    :class:`ApplicationEvent`'s) are *extended* types, numbered from 10000 in the order they are made. Types
    compare by identity.
    """

    TYPES: ClassVar[dict[int, EventType]] = {}
    _BY_NAME: ClassVar[dict[str, EventType]] = {}
    _extended = 10000  # the number of the next extended type (proton's TypeExtender starts at 10000)

    def __init__(self, name: str | None = None, number: int | None = None, method: str | None = None) -> None:
        if name is None and number is not None:
            name = _CORE_NAMES.get(number)  # proton asks its C library for the name of a core number
        if name is None and method is not None:
            name = method[3:] if method.startswith("on_") else method
        if name is None:
            raise TypeError("extended events require a name")
        if number is None:
            number = EventType._extended
            EventType._extended += 1
        self.name = name
        self.number = number
        self.method = method or "on_" + name
        EventType.TYPES[number] = self
        EventType._BY_NAME.setdefault(name, self)

    @classmethod
    def get(cls, name: str) -> EventType:
        """The type called ``name``, made on first use."""
        existing = cls._BY_NAME.get(name)
        return existing if existing is not None else cls(name=name)

    def __repr__(self) -> str:
        return f"EventType(name={self.name}, number={self.number})"

    def __str__(self) -> str:
        return self.name


#: proton's C event numbers and names (python-qpid-proton 0.40's ``cproton``), for the engine's core types.
_CORE_NAMES: dict[int, str] = {
    4: "PN_TIMER_TASK",
    5: "PN_CONNECTION_INIT",
    6: "PN_CONNECTION_BOUND",
    7: "PN_CONNECTION_UNBOUND",
    8: "PN_CONNECTION_LOCAL_OPEN",
    9: "PN_CONNECTION_REMOTE_OPEN",
    10: "PN_CONNECTION_LOCAL_CLOSE",
    11: "PN_CONNECTION_REMOTE_CLOSE",
    12: "PN_CONNECTION_FINAL",
    13: "PN_SESSION_INIT",
    14: "PN_SESSION_LOCAL_OPEN",
    15: "PN_SESSION_REMOTE_OPEN",
    16: "PN_SESSION_LOCAL_CLOSE",
    17: "PN_SESSION_REMOTE_CLOSE",
    18: "PN_SESSION_FINAL",
    19: "PN_LINK_INIT",
    20: "PN_LINK_LOCAL_OPEN",
    21: "PN_LINK_REMOTE_OPEN",
    22: "PN_LINK_LOCAL_CLOSE",
    23: "PN_LINK_REMOTE_CLOSE",
    24: "PN_LINK_LOCAL_DETACH",
    25: "PN_LINK_REMOTE_DETACH",
    26: "PN_LINK_FLOW",
    27: "PN_LINK_FINAL",
    28: "PN_DELIVERY",
    29: "PN_TRANSPORT",
    31: "PN_TRANSPORT_ERROR",
    32: "PN_TRANSPORT_HEAD_CLOSED",
    33: "PN_TRANSPORT_TAIL_CLOSED",
    34: "PN_TRANSPORT_CLOSED",
}


# (handler class, method) -> 1: the class has the method; 2: it has an on_unhandled worth calling; 0: neither
# (or the method is a default that does nothing: proton calls it and nothing happens, so skipping it is the same).
# Looking the method up on the class once, instead of on every event, is most of the cost of dispatch saved;
# proton looks at the instance, so a class is only cached when its instances do not shadow its ``on_*`` names.
_ROUTES: dict[tuple[type, str], int] = {}

#: ``on_delivery`` methods that act only on one end's deliveries ("sender" or "receiver"), registered by their
#: modules: a plan for the other end's deliveries leaves them out (calling them would return at once).
DELIVERY_ROLES: dict[Any, str] = {}

#: functions known to do nothing (the defaults of MessagingHandler's callbacks), registered by their modules.
NOOP_CALLBACKS: set[Any] = set()

#: Two ``on_delivery`` methods that a receiver's delivery plan makes one call when they come one after the other
#: (MessagingHandler's flow controller, then its incoming message handler: every message received), registered by
#: their module: ``(first, second) -> make(first_handler, second_handler)``, which returns the one call. It must do
#: what the two calls do, in their order; the methods are the classes' own (a subclass that overrides one is not
#: fused).
FUSED_DELIVERY_CALLS: dict[tuple[Any, Any], Callable[[Any, Any], Callable[[Any], None]]] = {}


def _route(handler: Any, method: str) -> int:
    cls = handler.__class__
    key = (cls, method)
    route = _ROUTES.get(key)
    if route is None:
        if getattr(handler, method, None) is not None:
            route = 0 if getattr(cls, method, None) in NOOP_CALLBACKS else 1
        else:
            unhandled = getattr(cls, "on_unhandled", None)
            route = 0 if unhandled is None or unhandled is _NOOP_UNHANDLED else 2
        if not shadows(handler, method):
            _ROUTES[key] = route
    return route


def shadows(handler: Any, method: str) -> bool:
    """Whether the instance ``handler`` holds ``method`` itself (set on it, not found on its class).

    Instance attributes: found without reading the instance's ``__dict__``, here and wherever a handler is looked
    at. On CPython 3.11, an object whose ``__dict__`` has been read keeps a dict object from then on, and the
    interpreter's specialised attribute reads miss on such a dict (``LOAD_ATTR_WITH_HINT`` finds its values empty)
    and fall back to the generic lookup, for good: every ``self.count`` of a program's handler in every callback
    would be one (about 8% of a callback send's instructions, ``benchmarks/callback.py``'s program). 3.12 and
    later read such a dict at full speed.
    """
    found = getattr(handler, method, None)
    if found is None:
        return False
    on_class = getattr(handler.__class__, method, None)
    # A function of the class comes back bound to the instance (its ``__func__``); anything else comes back as is.
    return found is not on_class and getattr(found, "__func__", None) is not on_class


def dispatch(handler: Any, method: str, event: Any) -> None:
    """Call ``handler.<method>(event)``, or ``handler.on_unhandled(method, event)`` when it has no such method."""
    route = _ROUTES.get((handler.__class__, method))
    if route is None:
        route = _route(handler, method)
    if route == 1:
        getattr(handler, method)(event)
    elif route == 2:
        handler.on_unhandled(method, event)


class _Plan:
    """The calls one event type makes on a tree of handlers, flattened in proton's order (each handler, then its
    children, depth first), with what to check to know the tree has not changed since."""

    __slots__ = ("calls", "defined", "lists", "role")

    def __init__(self, root: Any, method: str, role: str | None = None) -> None:
        self.calls: list[Any] = []
        self.lists: list[tuple[Any, list[Any] | tuple[Any, ...], int]] = []
        self.role = role
        self._add(root, method, 0)
        #: a handler of the tree has the method itself (not only an ``on_unhandled``)
        self.defined = any(type(call) is not _Unhandled for call in self.calls)
        if role == "receiver" and FUSED_DELIVERY_CALLS:
            self.calls = _fused(self.calls)

    def _add(self, handler: Any, method: str, depth: int) -> None:
        if depth > 50:
            raise RecursionError("handlers nest more than 50 deep (a handler is its own child?)")
        route = _route(handler, method)
        if route == 1:
            limited_to = DELIVERY_ROLES.get(getattr(handler.__class__, method, None))
            if limited_to is None or self.role is None or limited_to == self.role:
                self.calls.append(getattr(handler, method))
        elif route == 2:
            self.calls.append(_Unhandled(handler.on_unhandled, method))
        children = getattr(handler, "handlers", None)
        if isinstance(children, (list, tuple)):
            # A list may change between rounds (its owner and length are checked); a tuple is as it was made.
            self.lists.append((handler, children, len(children)))
            for child in children:
                self._add(child, method, depth + 1)
        elif children:
            raise TypeError(f"the handlers of {handler!r} must be a list or a tuple")

    def valid(self) -> bool:
        for owner, children, count in self.lists:
            if len(children) != count or getattr(owner, "handlers", None) is not children:
                return False
        return True


def _fused(calls: list[Any]) -> list[Any]:
    """``calls`` with each pair :data:`FUSED_DELIVERY_CALLS` knows made one call."""
    fused: list[Any] = []
    index = 0
    while index < len(calls):
        call = calls[index]
        if index + 1 < len(calls):
            following = calls[index + 1]
            make = FUSED_DELIVERY_CALLS.get((getattr(call, "__func__", None), getattr(following, "__func__", None)))
            if make is not None:
                fused.append(make(call.__self__, following.__self__))
                index += 2
                continue
        fused.append(call)
        index += 1
    return fused


class _Unhandled:
    __slots__ = ("callback", "method")

    def __init__(self, callback: Any, method: str) -> None:
        self.callback = callback
        self.method = method

    def __call__(self, event: Any) -> None:
        self.callback(self.method, event)


class PlanCache:
    """The dispatch plans of one container, checked against their handler trees once per round of callbacks
    (handlers that add children do it in a callback; the next round sees them)."""

    __slots__ = ("_checked", "_plans", "_trees")

    def __init__(self) -> None:
        self._plans: dict[tuple[int, str, str | None], _Plan] = {}
        self._checked: set[tuple[int, str, str | None]] = set()
        # The handler lists of each tree checked this round, by its root's id: a plan of the same tree made from
        # the same lists is valid too, without looking at the handlers again (the container asks for a few plans
        # of its root every round: the event types dispatched, PN_TRANSPORT's, PN_REACTOR_QUIESCED's).
        self._trees: dict[int, list[tuple[Any, list[Any] | tuple[Any, ...], int]]] = {}

    def new_round(self) -> None:
        """Check every plan again before its next use."""
        self._checked.clear()
        self._trees.clear()

    def defines(self, root: Any, method: str) -> bool:
        """Whether a handler of the tree under ``root`` has a method ``method`` of its own (an ``on_unhandled``
        does not count): the container makes the events only such a handler asks for (``on_transport``,
        ``on_reactor_quiesced``) only then."""
        self.calls(root, method)
        return self._plans[(id(root), method, None)].defined

    def calls(self, root: Any, method: str, role: str | None = None) -> list[Any]:
        """The calls that deliver an event of ``method`` to ``root`` and its children (as
        :meth:`EventBase.dispatch` does); ``role`` narrows a delivery event's plan to that end's handlers."""
        key = (id(root), method, role)
        if key in self._checked:
            return self._plans[key].calls
        plan = self._plans.get(key)
        if plan is None or (plan.lists != self._trees.get(key[0]) and not plan.valid()):
            if len(self._plans) > 4096:
                self._plans.clear()  # handlers made and dropped by the thousand: start again, not grow
            plan = self._plans[key] = _Plan(root, method, role)
        self._trees[key[0]] = plan.lists
        self._checked.add(key)
        return plan.calls


class EventBase:
    """What every event has: a type, and dispatch to a handler and its children."""

    __slots__ = ("_type",)

    _type: EventType

    def __init__(self, type: EventType) -> None:  # noqa: A002 - proton's name
        self._type = type

    # Read-only as proton's, read once or twice per event: a C getter, no Python call.
    type = property(attrgetter("_type"), doc="The type of this event.")

    @property
    def handler(self) -> Any:
        """The handler scoped to this event's context, if any (None: the container's)."""
        return None

    def dispatch(self, handler: Any, type: EventType | None = None) -> None:  # noqa: A002 - proton's name
        """Deliver this event to ``handler`` and then, depth first, to each of its child ``handlers``."""
        method = (type or self._type).method
        dispatch(handler, method, self)
        children = getattr(handler, "handlers", None)
        if children:
            for child in children:
                self.dispatch(child, type)


def _core(number: int, method: str) -> EventType:
    return EventType(number=number, method=method)


def _internal(name: str) -> EventType:
    return EventType(name=name)


class Event(EventBase):
    """Notification of a state change: a connection opened, a message arrived, a timer fired...

    The typed accessors (:attr:`connection`, :attr:`session`, :attr:`link`, :attr:`sender`, :attr:`receiver`,
    :attr:`delivery`, :attr:`transport`) follow the context upwards: a delivery event also has its link, session
    and connection. :attr:`container` (and its old name :attr:`reactor`) is the container that dispatched it.
    Handlers may attach attributes (``MessagingHandler`` sets ``event.message``).
    """

    # proton's numbers (its C library's); the container's own types are extended ones, made in proton's order.
    TIMER_TASK = _core(4, "on_timer_task")
    CONNECTION_INIT = _core(5, "on_connection_init")
    CONNECTION_BOUND = _core(6, "on_connection_bound")
    CONNECTION_UNBOUND = _core(7, "on_connection_unbound")
    CONNECTION_LOCAL_OPEN = _core(8, "on_connection_local_open")
    CONNECTION_REMOTE_OPEN = _core(9, "on_connection_remote_open")
    CONNECTION_LOCAL_CLOSE = _core(10, "on_connection_local_close")
    CONNECTION_REMOTE_CLOSE = _core(11, "on_connection_remote_close")
    CONNECTION_FINAL = _core(12, "on_connection_final")
    SESSION_INIT = _core(13, "on_session_init")
    SESSION_LOCAL_OPEN = _core(14, "on_session_local_open")
    SESSION_REMOTE_OPEN = _core(15, "on_session_remote_open")
    SESSION_LOCAL_CLOSE = _core(16, "on_session_local_close")
    SESSION_REMOTE_CLOSE = _core(17, "on_session_remote_close")
    SESSION_FINAL = _core(18, "on_session_final")
    LINK_INIT = _core(19, "on_link_init")
    LINK_LOCAL_OPEN = _core(20, "on_link_local_open")
    LINK_REMOTE_OPEN = _core(21, "on_link_remote_open")
    LINK_LOCAL_CLOSE = _core(22, "on_link_local_close")
    LINK_REMOTE_CLOSE = _core(23, "on_link_remote_close")
    LINK_LOCAL_DETACH = _core(24, "on_link_local_detach")
    LINK_REMOTE_DETACH = _core(25, "on_link_remote_detach")
    LINK_FLOW = _core(26, "on_link_flow")
    LINK_FINAL = _core(27, "on_link_final")
    DELIVERY = _core(28, "on_delivery")
    TRANSPORT = _core(29, "on_transport")
    TRANSPORT_ERROR = _core(31, "on_transport_error")
    TRANSPORT_HEAD_CLOSED = _core(32, "on_transport_head_closed")
    TRANSPORT_TAIL_CLOSED = _core(33, "on_transport_tail_closed")
    TRANSPORT_CLOSED = _core(34, "on_transport_closed")
    REACTOR_INIT = _internal("reactor_init")
    REACTOR_QUIESCED = _internal("reactor_quiesced")
    REACTOR_FINAL = _internal("reactor_final")
    SELECTABLE_INIT = _internal("selectable_init")
    SELECTABLE_UPDATED = _internal("selectable_updated")
    SELECTABLE_READABLE = _internal("selectable_readable")
    SELECTABLE_WRITABLE = _internal("selectable_writable")
    SELECTABLE_EXPIRED = _internal("selectable_expired")
    SELECTABLE_ERROR = _internal("selectable_error")
    SELECTABLE_FINAL = _internal("selectable_final")

    # Slots make the one event per delivery cheaper to build and read; __dict__ stays for what handlers attach.
    __slots__ = ("__dict__", "_container", "_context")

    message: Any  # set by MessagingHandler for on_message

    def __init__(self, type: EventType, context: Any, container: Any = None) -> None:  # noqa: A002
        self._type = type
        self._context = context
        self._container = container

    @property
    def context(self) -> Any:
        """The object the event happened to."""
        return self._context

    @property
    def clazz(self) -> str:
        """proton's class name of the context (``pn_connection``, ``pn_link``...)."""
        name = type(self._context).__name__.lower()
        if name in ("sender", "receiver"):
            name = "link"
        return "pn_" + name

    @property
    def container(self) -> Any:
        """The container that dispatched the event."""
        return self._container

    @property
    def reactor(self) -> Any:
        """Deprecated name of :attr:`container`."""
        return self._container

    @property
    def delivery(self) -> Delivery | None:
        """The delivery of the event, if any."""
        context = self._context
        return context if getattr(context, "_is_delivery", False) else None

    @property
    def link(self) -> Sender | Receiver | None:
        """The link of the event (a delivery event's link too), if any."""
        context = self._context
        if getattr(context, "_is_delivery", False):
            return context.link  # type: ignore[no-any-return]
        if getattr(context, "_is_link", False):
            return context  # type: ignore[no-any-return]
        return getattr(context, "_event_link", None)

    @property
    def sender(self) -> Sender | None:
        """The link of the event when it is a sender, else None."""
        context = self._context
        # A delivery's link (an outcome's event, read by on_accepted for every message sent) without link's call.
        link = context.link if getattr(context, "_is_delivery", False) else self.link
        return link if link is not None and link.is_sender else None  # type: ignore[return-value]

    @property
    def receiver(self) -> Receiver | None:
        """The link of the event when it is a receiver, else None."""
        link = self.link
        return link if link is not None and link.is_receiver else None  # type: ignore[return-value]

    @property
    def session(self) -> Session | None:
        """The session of the event (that of its link or delivery too), if any."""
        context = self._context
        if getattr(context, "_is_session", False):
            return context  # type: ignore[no-any-return]
        link = self.link
        return None if link is None else link.session

    @property
    def connection(self) -> Connection | None:
        """The connection of the event (that of its session, link, delivery or transport too), if any."""
        context = self._context
        if getattr(context, "_is_connection", False):
            return context  # type: ignore[no-any-return]
        connection = getattr(context, "connection", None)
        # (the container's ``connection`` is a method that makes one: its events have no connection)
        return connection if getattr(connection, "_is_connection", False) else None

    @property
    def transport(self) -> Transport | None:
        """The transport of the event's connection, if any."""
        context = self._context
        if getattr(context, "_is_transport", False):
            return context  # type: ignore[no-any-return]
        connection = self.connection
        return None if connection is None else connection.transport

    @property
    def handler(self) -> Any:
        """The handler scoped to the event: the link's, else the session's, else the connection's, else the
        context's own ``handler`` (a timer task's; the container's root handler for the container's events); None
        means the container's handlers."""
        context = self._context
        if getattr(context, "_is_delivery", False):
            link = context.link
            handler = link.handler
            if handler is None:
                session = link.session
                handler = session.handler
                if handler is None:
                    handler = session.connection.handler
            return handler
        link = self.link
        if link is not None and link.handler is not None:
            return link.handler
        session = self.session
        if session is not None and session.handler is not None:
            return session.handler
        connection = self.connection
        if connection is not None and connection.handler is not None:
            return connection.handler
        return getattr(context, "handler", None)

    def __getattr__(self, name: str) -> Any:
        # proton: an unknown attribute is looked up on the context (``event.selectable``, ``event.task``...).
        if name.startswith("__"):
            raise AttributeError(name)
        try:
            context = object.__getattribute__(self, "_context")  # a slot (not in __dict__)
        except AttributeError:
            raise AttributeError(name) from None
        if type(context).__name__.lower() == name:
            return context
        return getattr(context, name, None)

    def __repr__(self) -> str:
        return f"{self._type}({self._context!r})"


class ApplicationEvent(EventBase):
    """An event an application makes (``ApplicationEvent("my_event")`` is handled by ``on_my_event``), usually to
    hand work to the container's thread through an :class:`~amqp_async.proton.reactor.EventInjector`.

    Args:
        typename: the event's name (handlers receive it in ``on_<typename>``), or an :class:`EventType`.
        connection: the connection the event concerns, if any.
        session: the session the event concerns, if any.
        link: the link the event concerns, if any.
        delivery: the delivery the event concerns, if any.
        subject: anything the application wants to carry along.
    """

    #: the types made for application events, by name (proton's: one extended type per name, never a core one)
    TYPES: ClassVar[dict[str, EventType]] = {}

    def __init__(
        self,
        typename: str | EventType,
        connection: Any = None,
        session: Any = None,
        link: Any = None,
        delivery: Any = None,
        subject: Any = None,
    ) -> None:
        if isinstance(typename, EventType):
            event_type = typename
        else:
            event_type = ApplicationEvent.TYPES.get(typename)  # type: ignore[assignment]
            if event_type is None:
                event_type = ApplicationEvent.TYPES[typename] = EventType(name=typename)
        super().__init__(event_type)
        self.delivery = delivery
        self.link = link if link is not None else (delivery.link if delivery is not None else None)
        self.session = session if session is not None else (self.link.session if self.link is not None else None)
        self.connection = (
            connection if connection is not None else (self.session.connection if self.session is not None else None)
        )
        self.subject = subject
        self.container: Any = None

    @property
    def context(self) -> Any:
        """The event itself (proton's convention for application events)."""
        return self

    @property
    def reactor(self) -> Any:
        """Deprecated name of :attr:`container`."""
        return self.container

    @property
    def transport(self) -> Any:
        """The transport of the event's connection, if any."""
        return None if self.connection is None else self.connection.transport

    def __repr__(self) -> str:
        objects = [self.connection, self.session, self.link, self.delivery, self.subject]
        return f"{self.type}({', '.join(str(o) for o in objects if o is not None)})"


class _LazyHandlers:
    """proton's ``handlers`` attribute: a list made on first access, per instance."""

    def __get__(self, obj: Any, owner: Any) -> Any:
        if obj is None:
            return self
        handlers: list[Any] = []
        object.__setattr__(obj, "handlers", handlers)  # not through __dict__: see shadows()
        return handlers


class Handler:
    """Base of event handlers: :meth:`add` child handlers, and :meth:`on_unhandled` for events without a method."""

    handlers: Any = _LazyHandlers()

    def add(self, handler: Any, on_error: Any = None) -> None:
        """Add a child handler: it receives every event this handler receives, after this handler."""
        self.handlers.append(handler)

    def on_unhandled(self, method: str, *args: Any) -> None:
        """Called for an event this handler has no ``on_<event>`` method for; does nothing by default."""


_NOOP_UNHANDLED = Handler.on_unhandled


class Collector:
    """A queue of events (proton's ``Collector``): :meth:`put` appends, :meth:`peek` and :meth:`pop` take in order.

    The container keeps its own; this one is for programs that drive endpoints by hand
    (``connection.collect(collector)``).
    """

    def __init__(self) -> None:
        from collections import deque

        self._events: deque[EventBase] = deque()
        self._released = False
        # The type and context of the last event queued while the queue is not empty (None: none), see put. Two
        # attributes rather than a pair: no tuple made per event.
        self._tail_type: Any = None
        self._tail_context: Any = None

    def put(self, obj: Any, etype: EventType) -> None:
        """Queue an event of type ``etype`` about ``obj`` (nothing once released).

        As proton's collector, an event that repeats the last one queued (same type, same context) is dropped: a
        program reading events learns that something happened, not how often.
        """
        if self._tail_type is etype and self._tail_context is obj:
            return
        if self._released:
            return
        if isinstance(obj, EventBase):
            self._events.append(obj)
            self._tail_type = self._tail_context = None
        else:
            self._events.append(Event(etype, obj))
            self._tail_type = etype
            self._tail_context = obj

    def put_each(self, objs: list[Any], etype: EventType) -> None:
        """:meth:`put` an event of type ``etype`` about each of ``objs`` (none an :class:`EventBase`), in order.

        One call for a batch (the DELIVERY event of each message that arrived or was updated), not one per message.
        """
        if self._released or not objs:
            return
        events = self._events
        tail_type = self._tail_type
        tail_context = self._tail_context
        for obj in objs:
            if tail_type is etype and tail_context is obj:
                continue
            events.append(Event(etype, obj))
            tail_type = etype
            tail_context = obj
        self._tail_type = tail_type
        self._tail_context = tail_context

    def peek(self) -> EventBase | None:
        """The next event, or None."""
        events = self._events
        return events[0] if events else None

    def more(self) -> bool:
        """True when more than one event is queued."""
        return len(self._events) > 1

    def pop(self) -> None:
        """Drop the next event."""
        events = self._events
        if events:
            events.popleft()
            if not events:
                self._tail_type = self._tail_context = None

    def release(self) -> None:
        """Drop every event and take no more."""
        self._released = True
        self._events.clear()
        self._tail_type = self._tail_context = None
