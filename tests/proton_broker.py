"""A small AMQP 1.0 broker built on python-qpid-proton's reactor, for tests that need a real peer over TCP.

`ProtonBroker` runs a `proton.reactor.Container` with a `proton.handlers.MessagingHandler` in a daemon thread,
listening on ``127.0.0.1`` on a free port. Client tests connect to `ProtonBroker.url`, act, and then check what an
independent AMQP implementation saw: every open, attach, message, outcome, drain, detach and close is recorded as a
plain, immutable value (see the dataclasses below), readable from the test thread at any time.

Typical use::

    with ProtonBroker() as broker:
        broker.outcome_for["q-reject"] = ("rejected", "amqp:precondition-failed", "nope")
        broker.put("q-in", Message(body="preloaded"))
        ...  # run the client under test against broker.url
        [received] = broker.wait_messages(1, address="q-out")
        assert received.body == "hello"
        assert broker.attaches[0].target.address == "q-out"

What the broker does:

* **Queues** by address, made on first use. A link on which the *client sends* (a broker receiver) delivers into the
  queue named by its target address; with no target address (the *anonymous relay*, offered as the connection
  capability ``ANONYMOUS-RELAY``) into the queue named by each message's ``to`` (``Message.address``); a message
  with no address at all is rejected with ``amqp:not-found``.
* A link on which the *client receives* (a broker sender) consumes from the queue named by its source address, as
  credit allows, round-robin between consumers of one queue. Distribution-mode ``copy`` (a browser) sees every
  message but leaves it in the queue. A *dynamic* source (or target) gets a fresh address ``dynamic-N`` set on the
  broker's answering terminus.
* **Incoming outcomes**: each complete incoming message gets the outcome configured in `ProtonBroker.outcome_for`
  for its address (default ``accepted``); only accepted messages are queued. The broker honours the client's
  requested ``rcv-settle-mode``: with *first* it settles at once; with *second* it sends the outcome unsettled and
  settles when the client settles. A message the client sent pre-settled is settled without a disposition (proton
  writes none for a delivery the remote already settled).
* **Outgoing outcomes**: the client's outcome on each message the broker sent is recorded (`Outcome`) and the broker
  then settles. ``released`` and ``modified`` (unless ``undeliverable-here``) put the message back at the head of
  its queue (``modified`` with ``delivery-failed`` increments its ``delivery-count`` header first). Unsettled messages
  whose link detaches, whose session ends or whose connection closes or drops go back to the queue too. A client
  receiver that asked for ``snd-settle-mode settled`` gets its messages pre-settled (at most once).
* **Drain**: a flow with the drain flag makes the broker send what it can within the credit, then answer with
  `proton.Sender.drained()` (recorded as `Drain`).
* **Credit** to client senders: `ProtonBroker.credit_window` (default 100), topped up after every message;
  `ProtonBroker.credit_for` overrides the window per target address (0: never any credit) and
  `ProtonBroker.delay_credit` postpones the first grant (seconds).
* **TLS and a fixed port**: ``ProtonBroker(ssl_domain=domain)`` listens with a server `proton.SSLDomain` (TLS only;
  `url` is then ``amqps://``); ``ProtonBroker(port=N)`` listens on port N, so a test can stop a broker and start a
  new one where its clients reconnect.
* **Fault injection** by address: `ProtonBroker.detach_on_attach` answers the attach and detaches at once with the
  given error; `ProtonBroker.close_connection_on` answers the attach and closes the whole connection with the error.
  A link to a transaction coordinator is refused (detached with ``amqp:not-implemented``).

The configuration dicts (``outcome_for``, ``detach_on_attach``, ``close_connection_on``, ``credit_for``,
``delay_credit``) are read by the broker thread as events happen: set them before the client acts.

Threading: all proton objects live in the broker thread. The test thread talks to it only through `put()`,
`queued()`, `grant_credit()` and `call()` (which run a function in the broker thread via a `proton.reactor.
EventInjector` and wait for its result) and through the recorded values (lists guarded by a lock; the properties
return copies). ``wait_*`` helpers block until something was recorded, with a timeout, and fail at once if the
broker thread died. `stop()` (or leaving the ``with`` block) closes the listener and every connection, ends the
thread and joins it with a timeout; it re-raises an exception that killed the broker thread.

Proton quirks this module works around or documents (python-qpid-proton 0.40):

* ``Container.listen("127.0.0.1:0")`` binds an ephemeral port, but proton exposes neither the socket nor the port;
  the port is read from the acceptor's selectable (``Acceptor._selectable.getsockname()``). If that private
  attribute is missing, a free port is found by binding a probe socket to port 0, and the listen is retried on a
  collision.
* ``Container.stop()`` is not thread-safe and ``Container.run()`` blocks in ``select`` for up to ~3.14 s; the only
  cross-thread wake-up is an `EventInjector` (a pipe) whose `ApplicationEvent` is dispatched to the container's
  handler as ``on_<typename>``. `EventInjector.close()` does not close its pipe: `stop()` closes both ends.
* `MessagingHandler` by default closes the connection on a link or session error, and logs transport errors; this
  broker overrides those callbacks to record instead.
* A detach with ``closed=false`` raises ``on_link_remote_detach`` only (no ``on_link_closing``), so the broker
  handles it separately.
* The answering attach cannot be followed by a detach inside ``on_link_opening`` (`EndpointStateHandler` calls
  ``link.open()`` after it, which would re-open a closed link): fault injection happens in ``on_link_opened``.
* proton's Python API has no access to a link's offered/desired capabilities, a source's ``default-outcome``, the
  ``unsettled`` map or ``initial-delivery-count``: none of them can be recorded.
* The listener offers SASL ANONYMOUS only (this wheel has no Cyrus SASL) and also accepts clients that skip SASL.
  ``idle_timeout`` is proton's ``Transport.idle_timeout`` (seconds): proton *advertises half of it* in its open
  frame (``idle_timeout=4.0`` is ``idle-time-out`` 2000 ms on the wire) and closes the connection with
  ``amqp:resource-limit-exceeded`` when nothing arrived for the full value.
* `proton.Delivery.tag` decodes tags as UTF-8; recorded tags are the raw bytes.
* proton decodes an AMQP ``binary`` as a `memoryview` into the message's own C buffer, which shows other bytes
  once that message is encoded or decoded again (re-sending a received message with a binary body sends garbage).
  Every message the broker records, queues or hands out has such values copied out to `bytes`.
* A client's receiver drain flag stays set until the client clears it, so every later flow is a drain too (and is
  recorded as one).
"""

from __future__ import annotations

import collections
import itertools
import os
import socket
import threading
import time
import traceback
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, TypeVar

from proton import (
    Array,
    Condition,
    Delivery,
    Described,
    Disposition,
    Endpoint,
    Event,
    Link,
    Message,
    Receiver,
    Sender,
    Terminus,
)
from proton.handlers import MessagingHandler
from proton.reactor import ApplicationEvent, Container, EventInjector

__all__ = [
    "AttachInfo",
    "CloseInfo",
    "ConnectionInfo",
    "DetachInfo",
    "Drain",
    "Flow",
    "Outcome",
    "ProtonBroker",
    "ReceivedMessage",
    "TerminusInfo",
]

T = TypeVar("T")

ANONYMOUS_RELAY = "ANONYMOUS-RELAY"

_SND_SETTLE_MODES = {Link.SND_UNSETTLED: "unsettled", Link.SND_SETTLED: "settled", Link.SND_MIXED: "mixed"}
_RCV_SETTLE_MODES = {Link.RCV_FIRST: "first", Link.RCV_SECOND: "second"}
_EXPIRY_POLICIES = {
    Terminus.EXPIRE_WITH_LINK: "link-detach",
    Terminus.EXPIRE_WITH_SESSION: "session-end",
    Terminus.EXPIRE_WITH_CONNECTION: "connection-close",
    Terminus.EXPIRE_NEVER: "never",
}
_DISTRIBUTION_MODES = {Terminus.DIST_MODE_COPY: "copy", Terminus.DIST_MODE_MOVE: "move"}
_TERMINUS_TYPES = {
    Terminus.UNSPECIFIED: "unspecified",
    Terminus.SOURCE: "source",
    Terminus.TARGET: "target",
    Terminus.COORDINATOR: "coordinator",
}
_OUTCOME_NAMES = {
    Disposition.ACCEPTED: "accepted",
    Disposition.REJECTED: "rejected",
    Disposition.RELEASED: "released",
    Disposition.MODIFIED: "modified",
    Disposition.RECEIVED: "received",
}


# ---------------------------------------------------------------------------------------------------------------
# Recorded values


@dataclass(frozen=True)
class TerminusInfo:
    """A source or target as the client sent it in its attach."""

    type: str  #: ``"source"``, ``"target"``, ``"coordinator"`` or ``"unspecified"``
    address: str | None
    durable: int  #: 0 none, 1 configuration, 2 unsettled-state
    expiry_policy: str | None  #: ``"link-detach"``, ``"session-end"``, ``"connection-close"``, ``"never"``
    timeout: int  #: seconds
    dynamic: bool
    dynamic_node_properties: dict[Any, Any] | None
    distribution_mode: str | None  #: ``"move"``, ``"copy"`` or ``None`` (unspecified)
    filter: dict[Any, Any] | None  #: filter-set: symbol keys, `proton.Described` values
    capabilities: list[str] | None
    outcomes: list[str] | None


@dataclass(frozen=True)
class ConnectionInfo:
    """The client's open frame (and its SASL exchange), recorded when it arrives."""

    index: int  #: the broker's number for this connection, from 0
    container_id: str | None
    hostname: str | None
    properties: dict[Any, Any] | None
    offered_capabilities: list[str] | None
    desired_capabilities: list[str] | None
    idle_timeout: float  #: the client's advertised idle-time-out, in seconds (0: none)
    max_frame_size: int
    channel_max: int
    sasl_mechanism: str | None  #: ``"ANONYMOUS"``, or ``None`` when the client skipped SASL
    sasl_user: str | None
    authenticated: bool


@dataclass(frozen=True)
class AttachInfo:
    """The client's attach. ``role`` is the *client's* role: ``"sender"`` means the client sends to the broker."""

    connection: int
    name: str
    role: str
    source: TerminusInfo
    target: TerminusInfo
    snd_settle_mode: str  #: ``"unsettled"``, ``"settled"`` or ``"mixed"``
    rcv_settle_mode: str  #: ``"first"`` or ``"second"``
    max_message_size: int  #: 0: unlimited / not sent
    properties: dict[Any, Any] | None

    @property
    def address(self) -> str | None:
        """The node address this link is about: the target's for a client sender, the source's for a receiver."""
        return self.target.address if self.role == "sender" else self.source.address


@dataclass
class ReceivedMessage:
    """A complete message the client sent to the broker, and what the broker did with it."""

    connection: int
    link: str
    address: str | None  #: the queue it was meant for (link target, or the message's ``to`` on an anonymous link)
    message: Message
    tag: bytes
    settled: bool  #: the client sent it pre-settled
    outcome: str  #: the outcome the broker gave: ``"accepted"``, ``"rejected"``, ``"released"``, ``"modified"``
    client_settled: bool = False  #: the client settled later (rcv-settle-mode second)

    @property
    def body(self) -> Any:
        return self.message.body

    @property
    def properties(self) -> dict[Any, Any] | None:
        """The message's application-properties."""
        return self.message.properties


@dataclass(frozen=True)
class Outcome:
    """The client's disposition on a message the broker sent to it."""

    connection: int
    link: str
    address: str | None
    tag: bytes
    outcome: str | None  #: ``"accepted"``, ``"rejected"``, ``"released"``, ``"modified"``; ``None`` if settled bare
    settled: bool  #: the client settled (rcv-settle-mode first) rather than leaving it to the broker
    condition: tuple[str, str | None, dict[Any, Any] | None] | None  #: rejected's error: (name, description, info)
    delivery_failed: bool
    undeliverable_here: bool
    message_annotations: dict[Any, Any] | None
    message: Message


@dataclass(frozen=True)
class Flow:
    """A flow the client sent on a link where it receives (as the broker's sender saw it)."""

    connection: int
    link: str
    credit: int
    drain: bool


@dataclass(frozen=True)
class Drain:
    """A drain request and the broker's answer."""

    connection: int
    link: str
    address: str | None
    credit: int  #: the credit the client had granted when it asked to drain
    sent: int  #: messages the broker sent in response
    returned: int  #: credit given back by `proton.Sender.drained()`


@dataclass(frozen=True)
class DetachInfo:
    """A detach the client sent."""

    connection: int
    link: str
    role: str  #: the client's role, as in `AttachInfo`
    closed: bool
    condition: tuple[str, str | None, dict[Any, Any] | None] | None


@dataclass(frozen=True)
class CloseInfo:
    """The end of a connection: the client's close frame (``by="client"``), the broker's own close (``"broker"``),
    or a transport that ended without a close frame (``"disconnect"``, with the transport's condition)."""

    connection: int
    by: str
    condition: tuple[str, str | None, dict[Any, Any] | None] | None


# ---------------------------------------------------------------------------------------------------------------
# Helpers


def delivery_tag(delivery: Delivery) -> bytes:
    """The delivery's tag as raw bytes (`proton.Delivery.tag` decodes it as UTF-8, which fails for binary tags)."""
    try:
        from cproton import ffi, lib  # type: ignore[import-untyped]
    except ImportError:  # pragma: no cover - only the cffi binding (the wheel) has this module
        tag = delivery.tag
        return tag if isinstance(tag, bytes) else tag.encode("utf-8")
    raw = lib.pn_delivery_tag(delivery._impl)
    return bytes(ffi.unpack(raw.start, raw.size))


def _data_value(data: Any) -> Any:
    """The first value of a `proton.Data`, or ``None`` if it is empty."""
    data.rewind()
    if data.next() is None:
        return None
    return data.get_object()


def _symbols(value: Any) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, (str, bytes)):
        return [str(value)]
    return [str(item) for item in value]


def _terminus_info(terminus: Terminus) -> TerminusInfo:
    properties = _data_value(terminus.properties)
    filter_set = _data_value(terminus.filter)
    return TerminusInfo(
        type=_TERMINUS_TYPES.get(terminus.type, str(terminus.type)),
        address=terminus.address,
        durable=int(terminus.durability),
        expiry_policy=_EXPIRY_POLICIES.get(terminus.expiry_policy),
        timeout=int(terminus.timeout),
        dynamic=bool(terminus.dynamic),
        dynamic_node_properties=dict(properties) if properties is not None else None,
        distribution_mode=_DISTRIBUTION_MODES.get(terminus.distribution_mode),
        filter=dict(filter_set) if filter_set is not None else None,
        capabilities=_symbols(_data_value(terminus.capabilities)),
        outcomes=_symbols(_data_value(terminus.outcomes)),
    )


def _condition_tuple(condition: Condition | None) -> tuple[str, str | None, dict[Any, Any] | None] | None:
    if condition is None:
        return None
    info = condition.info
    return (str(condition.name), condition.description, dict(info) if info is not None else None)


def _make_condition(spec: tuple[Any, ...] | str) -> Condition:
    if isinstance(spec, str):
        return Condition(spec)
    name, *rest = spec
    description = rest[0] if rest else None
    info = rest[1] if len(rest) > 1 else None
    return Condition(name, description, info)


def _own(value: Any) -> Any:
    """``value`` with every `memoryview` inside replaced by `bytes` (see `_own_sections`)."""
    if isinstance(value, memoryview):
        return value.tobytes()
    if isinstance(value, Described):
        return Described(value.descriptor, _own(value.value))
    if isinstance(value, Array):
        return Array(value.descriptor, value.type, *(_own(item) for item in value.elements))
    if isinstance(value, dict):
        return type(value)((_own(k), _own(v)) for k, v in value.items())
    if isinstance(value, list):
        return [_own(item) for item in value]
    if isinstance(value, tuple):
        return tuple(_own(item) for item in value)
    return value


def _own_sections(message: Message) -> Message:
    """Proton decodes AMQP binary as a `memoryview` into the message's own C buffer, which dangles (shows other
    bytes) once the message is encoded or decoded again; copy such values out, in place."""
    message.instructions = _own(message.instructions)
    message.annotations = _own(message.annotations)
    message.properties = _own(message.properties)
    message.body = _own(message.body)
    return message


def _copy_message(message: Message) -> Message:
    copy = Message()
    copy.decode(message.encode())
    return _own_sections(copy)


def _client_role(link: Link) -> str:
    """The client's role on a link, given the broker's end of it."""
    return "receiver" if link.is_sender else "sender"


def _conn_index(link_or_conn: Any) -> int:
    conn = link_or_conn if not isinstance(link_or_conn, Link) else link_or_conn.connection
    return int(getattr(conn, "_broker_index", -1))


class _Entry:
    """A queued message, with a sequence number browsers use to know what they have seen."""

    __slots__ = ("message", "seq")

    _counter = itertools.count(1)

    def __init__(self, message: Message) -> None:
        self.message = message
        self.seq = next(self._counter)


@dataclass
class _Outstanding:
    link: Sender
    address: str | None
    entry: _Entry
    browse: bool


@dataclass
class _Queue:
    name: str
    entries: collections.deque[_Entry] = field(default_factory=collections.deque)
    consumers: list[Sender] = field(default_factory=list)


class _Timer:
    """A `Container.schedule` handler that runs a function."""

    def __init__(self, function: Callable[[], None]) -> None:
        self._function = function

    def on_timer_task(self, event: Event) -> None:
        self._function()


# ---------------------------------------------------------------------------------------------------------------
# The reactor handler (runs in the broker thread only)


class _BrokerHandler(MessagingHandler):
    def __init__(self, broker: ProtonBroker) -> None:
        super().__init__(prefetch=0, auto_accept=False, auto_settle=False)
        self.broker = broker
        self.queues: dict[str, _Queue] = {}
        self.outstanding: dict[Delivery, _Outstanding] = {}
        self.connections: list[Any] = []
        self._dynamic = itertools.count(1)
        self._conn_counter = itertools.count(0)
        self._rr = itertools.count(0)
        self.stopping = False

    # -- queues -----------------------------------------------------------------------------------------------

    def queue(self, address: str) -> _Queue:
        queue = self.queues.get(address)
        if queue is None:
            queue = self.queues[address] = _Queue(address)
        return queue

    def publish(self, address: str, message: Message) -> None:
        queue = self.queue(address)
        queue.entries.append(_Entry(message))
        self.dispatch(queue)

    def dispatch(self, queue: _Queue) -> None:
        consumers = list(queue.consumers)
        if not consumers:
            return
        start = next(self._rr) % len(consumers)
        consumers = consumers[start:] + consumers[:start]
        progress = True
        while progress:
            progress = False
            for link in consumers:
                if self._send_one(link, queue):
                    progress = True

    def _send_one(self, link: Sender, queue: _Queue) -> bool:
        if link.credit <= 0 or not (link.state & Endpoint.LOCAL_ACTIVE and link.state & Endpoint.REMOTE_ACTIVE):
            return False
        browse = link.source.distribution_mode == Terminus.DIST_MODE_COPY
        if browse:
            seen: set[int] = link._broker_seen
            entry = next((e for e in queue.entries if e.seq not in seen), None)
            if entry is None:
                return False
            seen.add(entry.seq)
        else:
            if not queue.entries:
                return False
            entry = queue.entries.popleft()
        delivery = link.send(entry.message)
        if link.snd_settle_mode == Link.SND_SETTLED:
            delivery.settle()
        else:
            self.outstanding[delivery] = _Outstanding(link, queue.name, entry, browse)
        return True

    def requeue(self, predicate: Callable[[_Outstanding], bool]) -> None:
        """Put unsettled outgoing messages matching ``predicate`` back at the head of their queues."""
        matching = [(d, o) for d, o in self.outstanding.items() if predicate(o)]
        for delivery, _ in matching:
            del self.outstanding[delivery]
        touched: dict[str, _Queue] = {}
        for _, out in reversed(matching):
            if not out.browse and out.address is not None:
                queue = self.queue(out.address)
                queue.entries.appendleft(out.entry)
                touched[queue.name] = queue
        for queue in touched.values():
            self.dispatch(queue)

    def forget_link(self, link: Link) -> None:
        if link.is_sender:
            address = getattr(link, "_broker_address", None)
            if address is not None and address in self.queues:
                queue = self.queues[address]
                queue.consumers = [c for c in queue.consumers if c != link]
            self.requeue(lambda out: out.link == link)

    def forget_links(self, predicate: Callable[[Link], bool]) -> None:
        for queue in self.queues.values():
            queue.consumers = [c for c in queue.consumers if not predicate(c)]
        self.requeue(lambda out: predicate(out.link))

    # -- connections -------------------------------------------------------------------------------------------

    def on_start(self, event: Event) -> None:
        # Wake from select at least this often, so a stop request can never wait long (see ProtonBroker.stop).
        event.container.timeout = 0.25

    def on_connection_bound(self, event: Event) -> None:
        transport = event.transport
        sasl = transport.sasl()
        sasl.allowed_mechs("ANONYMOUS")
        if self.broker.idle_timeout is not None:
            transport.idle_timeout = self.broker.idle_timeout
        if self.broker.max_frame_size is not None:
            transport.max_frame_size = self.broker.max_frame_size
        self.connections.append(event.connection)

    def on_connection_opening(self, event: Event) -> None:
        conn = event.connection
        conn._broker_index = index = next(self._conn_counter)
        conn.container = self.broker.container_id
        if self.broker.offered_capabilities:
            conn.offered_capabilities = list(self.broker.offered_capabilities)
        if self.broker.properties:
            conn.properties = dict(self.broker.properties)
        transport = conn.transport
        sasl = transport.sasl()
        properties = conn.remote_properties
        self.broker._record(
            "connections",
            ConnectionInfo(
                index=index,
                container_id=conn.remote_container,
                hostname=conn.remote_hostname,
                properties=dict(properties) if properties is not None else None,
                offered_capabilities=_symbols(conn.remote_offered_capabilities),
                desired_capabilities=_symbols(conn.remote_desired_capabilities),
                idle_timeout=float(transport.remote_idle_timeout),
                max_frame_size=int(transport.remote_max_frame_size),
                channel_max=int(transport.remote_channel_max),
                sasl_mechanism=sasl.mech or None,
                sasl_user=sasl.user or None,
                authenticated=bool(transport.authenticated),
            ),
        )

    def _connection_gone(self, conn: Any, by: str, condition: Condition | None) -> None:
        if getattr(conn, "_broker_gone", False):
            return
        conn._broker_gone = True
        self.forget_links(lambda link: link.connection == conn)
        self.broker._record("closes", CloseInfo(_conn_index(conn), by, _condition_tuple(condition)))

    def on_connection_closing(self, event: Event) -> None:
        self._connection_gone(event.connection, "client", None)

    def on_connection_error(self, event: Event) -> None:
        self._connection_gone(event.connection, "client", event.connection.remote_condition)

    def on_connection_closed(self, event: Event) -> None:
        self._connection_gone(event.connection, "broker", event.connection.condition)

    def on_disconnected(self, event: Event) -> None:
        conn = event.connection
        if conn is not None:
            self._connection_gone(conn, "disconnect", event.transport.condition if event.transport else None)

    def on_transport_error(self, event: Event) -> None:
        if self.stopping:
            return  # shutdown() ends every connection's input, which proton calls "connection aborted"
        condition = event.transport.condition
        self.broker._record("transport_errors", _condition_tuple(condition))

    def on_transport_closed(self, event: Event) -> None:
        conn = event.connection
        if conn is not None and conn in self.connections:
            self.connections.remove(conn)

    # -- sessions ----------------------------------------------------------------------------------------------

    def _session_gone(self, event: Event) -> None:
        session = event.session
        self.forget_links(lambda link: link.session == session)

    def on_session_closing(self, event: Event) -> None:
        self._session_gone(event)

    def on_session_error(self, event: Event) -> None:  # default: close the connection
        self._session_gone(event)

    # -- links -------------------------------------------------------------------------------------------------

    def on_link_opening(self, event: Event) -> None:
        link = event.link
        remote_source, remote_target = link.remote_source, link.remote_target
        self.broker._record(
            "attaches",
            AttachInfo(
                connection=_conn_index(link),
                name=link.name,
                role=_client_role(link),
                source=_terminus_info(remote_source),
                target=_terminus_info(remote_target),
                snd_settle_mode=_SND_SETTLE_MODES.get(link.remote_snd_settle_mode, str(link.remote_snd_settle_mode)),
                rcv_settle_mode=_RCV_SETTLE_MODES.get(link.remote_rcv_settle_mode, str(link.remote_rcv_settle_mode)),
                max_message_size=int(link.remote_max_message_size),
                properties=dict(link.remote_properties) if link.remote_properties is not None else None,
            ),
        )
        link.source.copy(remote_source)
        link.target.copy(remote_target)
        link.snd_settle_mode = link.remote_snd_settle_mode
        link.rcv_settle_mode = link.remote_rcv_settle_mode
        if link.is_sender:
            address = remote_source.address
            if remote_source.dynamic:
                address = f"dynamic-{next(self._dynamic)}"
                link.source.address = address
        else:
            address = remote_target.address
            if remote_target.dynamic:
                address = f"dynamic-{next(self._dynamic)}"
                link.target.address = address
        link._broker_address = address
        link._broker_seen = set()

    def on_link_opened(self, event: Event) -> None:
        link = event.link
        address = link._broker_address
        fault = self.broker.detach_on_attach.get(address) if address is not None else None
        if not link.is_sender and link.remote_target.type == Terminus.COORDINATOR:
            fault = ("amqp:not-implemented", "transactions are not supported")
        if fault is not None:
            link.condition = _make_condition(fault)
            link.close()
            return
        fatal = self.broker.close_connection_on.get(address) if address is not None else None
        if fatal is not None:
            conn = link.connection
            conn.condition = _make_condition(fatal)
            conn.close()
            self._connection_gone(conn, "broker", conn.condition)
            return
        if link.is_sender:
            if address is None:
                return  # a receiver with no source address: never gets anything
            queue = self.queue(address)
            queue.consumers.append(link)
            self.dispatch(queue)
        else:
            window = self.broker.credit_for.get(address, self.broker.credit_window)
            delay = self.broker.delay_credit.get(address)
            if delay:
                event.container.schedule(delay, _Timer(lambda: self.grant(link, window)))
            else:
                self.grant(link, window)

    def grant(self, link: Receiver, window: int) -> None:
        if link.state & Endpoint.LOCAL_ACTIVE:
            link._broker_window = window
            if window > link.credit:
                link.flow(window - link.credit)

    def _top_up(self, link: Receiver) -> None:
        window = getattr(link, "_broker_window", None)
        if window is not None and link.state & Endpoint.LOCAL_ACTIVE and window > link.credit:
            link.flow(window - link.credit)

    def _link_gone(self, event: Event, closed: bool) -> None:
        link = event.link
        if getattr(link, "_broker_gone", False):
            return
        link._broker_gone = True
        self.broker._record(
            "detaches",
            DetachInfo(
                _conn_index(link), link.name, _client_role(link), closed, _condition_tuple(link.remote_condition)
            ),
        )
        self.forget_link(link)

    def on_link_closing(self, event: Event) -> None:
        self._link_gone(event, closed=True)

    def on_link_error(self, event: Event) -> None:  # default: close the connection
        self._link_gone(event, closed=True)

    def on_link_remote_detach(self, event: Event) -> None:
        self._link_gone(event, closed=False)
        if event.link.state & Endpoint.LOCAL_ACTIVE:
            event.link.detach()

    def on_link_closed(self, event: Event) -> None:
        # Both ends closed. If the broker closed first (fault injection), the client's detach is still recorded.
        self._link_gone(event, closed=True)

    def on_link_flow(self, event: Event) -> None:
        link = event.link
        if not link.is_sender:
            return
        credit, drain = link.credit, bool(link.drain_mode)
        self.broker._record("flows", Flow(_conn_index(link), link.name, credit, drain))
        address = getattr(link, "_broker_address", None)
        sent = 0
        if address is not None and link.state & Endpoint.LOCAL_ACTIVE:
            queue = self.queue(address)
            while self._send_one(link, queue):
                sent += 1
        if drain:
            returned = link.drained()
            self.broker._record("drains", Drain(_conn_index(link), link.name, address, credit, sent, returned))

    # -- deliveries --------------------------------------------------------------------------------------------

    def on_message(self, event: Event) -> None:
        link: Receiver = event.link
        delivery: Delivery = event.delivery
        message: Message = _own_sections(event.message)
        address = link._broker_address
        if address is None:
            address = message.address
        if address is None:
            spec: Any = ("rejected", "amqp:not-found", "message has no address")
        else:
            spec = self.broker.outcome_for.get(address, "accepted")
        outcome = self._apply_outcome(delivery, spec)
        settled = bool(delivery.settled)
        record = ReceivedMessage(
            connection=_conn_index(link),
            link=link.name,
            address=address,
            message=message,
            tag=delivery_tag(delivery),
            settled=settled,
            outcome=outcome,
        )
        delivery._broker_record = record
        self.broker._record("messages", record)
        if settled or link.rcv_settle_mode != Link.RCV_SECOND:
            delivery.settle()
        if outcome == "accepted" and address is not None:
            self.publish(address, _copy_message(message))
        self._top_up(link)

    def _apply_outcome(self, delivery: Delivery, spec: Any) -> str:
        if isinstance(spec, str):
            spec = (spec,)
        name, *args = spec
        name = str(name).lower()
        if name == "accepted":
            delivery.update(Disposition.ACCEPTED)
        elif name == "released":
            delivery.update(Disposition.RELEASED)
        elif name == "rejected":
            if args:
                delivery.local.condition = _make_condition(tuple(args))
            delivery.update(Disposition.REJECTED)
        elif name == "modified":
            local = delivery.local
            local.failed = bool(args[0]) if args else False
            local.undeliverable = bool(args[1]) if len(args) > 1 else False
            if len(args) > 2 and args[2] is not None:
                local.annotations = dict(args[2])
            delivery.update(Disposition.MODIFIED)
        else:
            raise ValueError(f"unknown outcome {spec!r} in outcome_for")
        return name

    def on_settled(self, event: Event) -> None:
        delivery = event.delivery
        if delivery.link.is_sender:
            self._outgoing_update(delivery)
        else:
            record = getattr(delivery, "_broker_record", None)
            if record is not None:
                with self.broker._lock:
                    record.client_settled = True
                    self.broker._version += 1
                    self.broker._changed.notify_all()
            delivery.settle()

    def on_accepted(self, event: Event) -> None:
        self._outgoing_update(event.delivery)

    def on_rejected(self, event: Event) -> None:
        self._outgoing_update(event.delivery)

    def on_released(self, event: Event) -> None:  # released and modified
        self._outgoing_update(event.delivery)

    def _outgoing_update(self, delivery: Delivery) -> None:
        out = self.outstanding.pop(delivery, None)
        if out is None:
            return
        state = delivery.remote_state
        remote = delivery.remote
        outcome = _OUTCOME_NAMES.get(state) if state else None
        failed = bool(remote.failed) if state == Disposition.MODIFIED else False
        undeliverable = bool(remote.undeliverable) if state == Disposition.MODIFIED else False
        annotations = remote.annotations if state == Disposition.MODIFIED else None
        self.broker._record(
            "outcomes",
            Outcome(
                connection=_conn_index(out.link),
                link=out.link.name,
                address=out.address,
                tag=delivery_tag(delivery),
                outcome=outcome,
                settled=bool(delivery.settled),
                condition=_condition_tuple(remote.condition) if state == Disposition.REJECTED else None,
                delivery_failed=failed,
                undeliverable_here=undeliverable,
                message_annotations=dict(annotations) if annotations else None,
                message=_copy_message(out.entry.message),
            ),
        )
        delivery.settle()
        requeue = state == Disposition.RELEASED or (state == Disposition.MODIFIED and not undeliverable)
        if requeue and not out.browse and out.address is not None:
            if failed:
                message = out.entry.message
                message.delivery_count = (message.delivery_count or 0) + 1
            queue = self.queue(out.address)
            queue.entries.appendleft(out.entry)
            self.dispatch(queue)

    # -- cross-thread calls ------------------------------------------------------------------------------------

    def on_broker_call(self, event: Event) -> None:
        self.broker._run_calls()

    def shutdown(self) -> None:
        self.stopping = True
        broker = self.broker
        if broker._acceptor is not None:
            broker._acceptor.close()
        for conn in list(self.connections):
            if conn.state & Endpoint.LOCAL_ACTIVE:
                conn.condition = Condition("amqp:connection:forced", "proton broker stopping")
                conn.close()
            transport = conn.transport
            if transport is not None:
                transport.pending()  # renders the close frame now, before the end of input below turns it into
                transport.close_tail()  # a framing error; and no waiting for the client's close
        if broker._injector is not None:
            broker._injector.close()


# ---------------------------------------------------------------------------------------------------------------
# The broker


class ProtonBroker:
    """A proton reactor broker in a background thread; see the module docstring.

    :param idle_timeout: proton's ``Transport.idle_timeout`` for accepted connections, in seconds (advertised halved).
    :param max_frame_size: the broker's max-frame-size for accepted connections (proton's default if ``None``).
    :param container_id: the broker's container-id in its open frame.
    :param offered_capabilities: connection capabilities offered (default: ``ANONYMOUS-RELAY``).
    :param properties: connection properties the broker sends in its open frame.
    :param credit_window: credit granted to, and kept topped up on, links where the client sends.
    :param host: the interface to listen on.
    :param timeout: default timeout in seconds for starting, stopping, ``call()`` and the ``wait_*`` helpers.
    :param port: the port to listen on (0, the default: a free one). A fixed port lets a test stop a broker and start
        a new one where clients reconnect (the listener sets ``SO_REUSEADDR``).
    :param ssl_domain: a server `proton.SSLDomain` (``SSLDomain(SSLDomain.MODE_SERVER)`` with ``set_credentials``;
        ``set_peer_authentication(SSLDomain.VERIFY_PEER, ca)`` to require client certificates): the listener then
        speaks TLS only, and `url` is ``amqps://``.
    """

    def __init__(
        self,
        *,
        idle_timeout: float | None = None,
        max_frame_size: int | None = None,
        container_id: str = "proton-broker",
        offered_capabilities: list[str] | tuple[str, ...] = (ANONYMOUS_RELAY,),
        properties: dict[str, Any] | None = None,
        credit_window: int = 100,
        host: str = "127.0.0.1",
        timeout: float = 5.0,
        port: int = 0,
        ssl_domain: Any = None,
    ) -> None:
        self.idle_timeout = idle_timeout
        self.max_frame_size = max_frame_size
        self.container_id = container_id
        self.offered_capabilities = list(offered_capabilities)
        self.properties = properties
        self.credit_window = credit_window
        self.host = host
        self.timeout = timeout
        self.ssl_domain = ssl_domain
        #: address -> outcome for incoming messages: ``"accepted"`` (default), ``"released"``,
        #: ``("rejected", condition, description[, info])``, ``("modified", delivery_failed, undeliverable_here
        #: [, message_annotations])``.
        self.outcome_for: dict[str, Any] = {}
        #: address -> ``(condition, description)``: answer the attach, then detach with that error.
        self.detach_on_attach: dict[str, tuple[str, str | None]] = {}
        #: address -> ``(condition, description)``: answer the attach, then close the connection with that error.
        self.close_connection_on: dict[str, tuple[str, str | None]] = {}
        #: target address -> credit window for links where the client sends (0: no credit at all).
        self.credit_for: dict[str | None, int] = {}
        #: target address -> seconds to wait before granting the first credit.
        self.delay_credit: dict[str | None, float] = {}

        self.port = port
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._records: dict[str, list[Any]] = collections.defaultdict(list)
        self._version = 0  # bumped on every change, so wait_for() never misses one
        self._calls: collections.deque[tuple[Callable[[], Any], Future[Any]]] = collections.deque()
        self._handler = _BrokerHandler(self)
        self._container: Container | None = None
        self._acceptor: Any = None
        self._injector: EventInjector | None = None
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._error_text: str | None = None
        self._stopped = False

    # -- lifecycle ---------------------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        scheme = "amqp" if self.ssl_domain is None else "amqps"
        return f"{scheme}://{self.host}:{self.port}"

    def __enter__(self) -> ProtonBroker:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start(self) -> ProtonBroker:
        if self._thread is not None:
            raise RuntimeError("ProtonBroker already started")
        container = Container(self._handler)
        container.container_id = self.container_id
        self._acceptor, self.port = self._listen(container)
        self._injector = EventInjector()
        container.selectable(self._injector)
        self._container = container
        self._thread = threading.Thread(target=self._run, name=f"proton-broker-{self.port}", daemon=True)
        self._thread.start()
        # Prove the reactor is up and serving events before handing the broker to the test.
        self.call(lambda: None)
        return self

    def _listen(self, container: Container) -> tuple[Any, int]:
        if self.port:
            return container.listen(f"{self.host}:{self.port}", ssl_domain=self.ssl_domain), self.port
        acceptor = container.listen(f"{self.host}:0", ssl_domain=self.ssl_domain)
        try:
            port = int(acceptor._selectable.getsockname()[1])
        except AttributeError:  # pragma: no cover - proton internals changed: probe for a free port instead
            acceptor.close()
        else:
            return acceptor, port
        last: OSError | None = None  # pragma: no cover
        for _ in range(20):  # pragma: no cover
            with socket.socket() as probe:
                probe.bind((self.host, 0))
                port = probe.getsockname()[1]
            try:
                return container.listen(f"{self.host}:{port}", ssl_domain=self.ssl_domain), port
            except OSError as exc:
                last = exc
        raise RuntimeError(f"no free port for the proton broker: {last}")  # pragma: no cover

    def _run(self) -> None:
        assert self._container is not None
        try:
            self._container.run()
        except BaseException as exc:  # recorded, re-raised by stop() and the wait helpers
            with self._lock:
                self._error = exc
                self._error_text = traceback.format_exc()
                self._version += 1
                self._changed.notify_all()
            self._close_sockets()
        finally:
            self._fail_pending_calls()

    def _close_sockets(self) -> None:
        """After a crash, close the sockets the dead reactor still holds, so clients see the end of the stream."""
        try:
            io_handler = self._container.global_handler  # type: ignore[union-attr]
            io_handler = getattr(io_handler, "base", io_handler)  # Container wraps its IOHandler in GlobalOverrides
            selectables = list(io_handler._selector._selectables)
        except Exception:  # pragma: no cover - proton internals changed
            return
        for selectable in selectables:
            try:
                selectable.close()
            except Exception:  # pragma: no cover - best effort
                pass

    def stop(self, timeout: float | None = None) -> None:
        """Close the listener and every connection, end the broker thread and join it; idempotent.

        Re-raises (as `RuntimeError`) an exception that killed the broker thread.
        """
        if self._thread is None or self._stopped:
            self._raise_if_failed()
            return
        self._stopped = True
        timeout = self.timeout if timeout is None else timeout
        thread = self._thread
        if thread.is_alive():
            try:
                self.call(self._handler.shutdown, wait=False)
            except RuntimeError:
                pass
            thread.join(timeout)
            if thread.is_alive() and self._container is not None:
                # The reactor did not wind down by itself (a transport that never finished): make it stop at its
                # next wake-up (at most 0.25 s, see on_start). A plain attribute write, safe from any thread.
                self._container._stop = True
                thread.join(timeout)
        if self._injector is not None:
            for fd in self._injector.pipe:
                try:
                    os.close(fd)
                except OSError:
                    pass
        if thread.is_alive():
            raise RuntimeError("proton broker thread did not stop")
        self._raise_if_failed()

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise RuntimeError(f"proton broker thread failed:\n{self._error_text}") from self._error

    # -- running code in the broker thread ---------------------------------------------------------------------

    def call(self, function: Callable[[], T], *, wait: bool = True, timeout: float | None = None) -> T | None:
        """Run ``function()`` in the broker thread; with ``wait``, return its result (or raise its exception)."""
        if self._injector is None or self._thread is None or not self._thread.is_alive():
            self._raise_if_failed()
            raise RuntimeError("proton broker is not running")
        future: Future[T] = Future()
        with self._lock:
            self._calls.append((function, future))
        self._injector.trigger(ApplicationEvent("broker_call"))
        if not wait:
            return None
        return future.result(self.timeout if timeout is None else timeout)

    def _run_calls(self) -> None:
        while True:
            with self._lock:
                if not self._calls:
                    return
                function, future = self._calls.popleft()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(function())
            except BaseException as exc:
                future.set_exception(exc)

    def _fail_pending_calls(self) -> None:
        with self._lock:
            calls, self._calls = list(self._calls), collections.deque()
        for _, future in calls:
            if future.set_running_or_notify_cancel():
                future.set_exception(RuntimeError("proton broker stopped"))

    def put(self, address: str, message: Message | Any) -> None:
        """Queue a message (a `proton.Message`, copied; anything else becomes its body) at ``address``."""
        message = _copy_message(message) if isinstance(message, Message) else Message(body=message)
        self.call(lambda: self._handler.publish(address, message))

    def queued(self, address: str) -> list[Message]:
        """Copies of the messages waiting in the queue at ``address`` (empty if there is no such queue)."""

        def snapshot() -> list[Message]:
            queue = self._handler.queues.get(address)
            return [_copy_message(entry.message) for entry in queue.entries] if queue else []

        result = self.call(snapshot)
        assert result is not None
        return result

    def queue_names(self) -> list[str]:
        result = self.call(lambda: sorted(self._handler.queues))
        assert result is not None
        return result

    def grant_credit(self, link_name: str, window: int) -> None:
        """Set the credit window of every open link named ``link_name`` on which a client sends, and grant it."""

        def grant() -> None:
            for conn in self._handler.connections:
                link = conn.link_head(Endpoint.LOCAL_ACTIVE)
                while link is not None:
                    if link.is_receiver and link.name == link_name:
                        self._handler.grant(link, window)
                    link = link.next(Endpoint.LOCAL_ACTIVE)

        self.call(grant)

    # -- recording ---------------------------------------------------------------------------------------------

    def _record(self, kind: str, value: Any) -> None:
        with self._lock:
            self._records[kind].append(value)
            self._version += 1
            self._changed.notify_all()

    def _get(self, kind: str) -> list[Any]:
        with self._lock:
            return list(self._records[kind])

    @property
    def connections(self) -> list[ConnectionInfo]:
        return self._get("connections")

    @property
    def attaches(self) -> list[AttachInfo]:
        return self._get("attaches")

    @property
    def messages(self) -> list[ReceivedMessage]:
        return self._get("messages")

    @property
    def outcomes(self) -> list[Outcome]:
        return self._get("outcomes")

    @property
    def flows(self) -> list[Flow]:
        return self._get("flows")

    @property
    def drains(self) -> list[Drain]:
        return self._get("drains")

    @property
    def detaches(self) -> list[DetachInfo]:
        return self._get("detaches")

    @property
    def closes(self) -> list[CloseInfo]:
        return self._get("closes")

    @property
    def transport_errors(self) -> list[tuple[str, str | None, dict[Any, Any] | None] | None]:
        return self._get("transport_errors")

    def clear(self) -> None:
        """Forget everything recorded so far (queues and configuration stay)."""
        with self._lock:
            self._records.clear()

    def wait_for(self, predicate: Callable[[], T | None], timeout: float | None = None, what: str = "condition") -> T:
        """Block until ``predicate()`` returns something truthy (re-checked whenever something is recorded, and at
        least every 0.1 s) and return it. Raises `TimeoutError` after ``timeout`` seconds (default `timeout`),
        `RuntimeError` if the broker thread died. The predicate runs in the test thread without the lock held, so it
        may call `queued()` and the other thread-safe methods."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while True:
            with self._lock:
                version = self._version
            result = predicate()
            if result:
                return result
            self._raise_if_failed()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"proton broker: timed out waiting for {what}")
            with self._changed:
                if self._version == version:
                    self._changed.wait(min(remaining, 0.1))

    def _wait_list(self, kind: str, count: int, timeout: float | None, filters: dict[str, Any]) -> list[Any]:
        def matching() -> list[Any]:
            return [r for r in self._get(kind) if all(getattr(r, k) == v for k, v in filters.items() if v is not None)]

        def ready() -> list[Any] | None:
            found = matching()
            return found if len(found) >= count else None

        shown = ", ".join(f"{k}={v!r}" for k, v in filters.items() if v is not None)
        return self.wait_for(ready, timeout, f"{count} {kind}" + (f" with {shown}" if shown else ""))

    def wait_connections(self, count: int = 1, timeout: float | None = None) -> list[ConnectionInfo]:
        return self._wait_list("connections", count, timeout, {})

    def wait_attaches(
        self, count: int = 1, *, name: str | None = None, role: str | None = None, timeout: float | None = None
    ) -> list[AttachInfo]:
        return self._wait_list("attaches", count, timeout, {"name": name, "role": role})

    def wait_messages(
        self, count: int = 1, *, address: str | None = None, link: str | None = None, timeout: float | None = None
    ) -> list[ReceivedMessage]:
        return self._wait_list("messages", count, timeout, {"address": address, "link": link})

    def wait_outcomes(
        self, count: int = 1, *, link: str | None = None, outcome: str | None = None, timeout: float | None = None
    ) -> list[Outcome]:
        return self._wait_list("outcomes", count, timeout, {"link": link, "outcome": outcome})

    def wait_drains(self, count: int = 1, *, link: str | None = None, timeout: float | None = None) -> list[Drain]:
        return self._wait_list("drains", count, timeout, {"link": link})

    def wait_detaches(
        self, count: int = 1, *, link: str | None = None, timeout: float | None = None
    ) -> list[DetachInfo]:
        return self._wait_list("detaches", count, timeout, {"link": link})

    def wait_closes(self, count: int = 1, *, by: str | None = None, timeout: float | None = None) -> list[CloseInfo]:
        return self._wait_list("closes", count, timeout, {"by": by})
