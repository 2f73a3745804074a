"""An in-memory AMQP 1.0 peer built on python-qpid-proton's engine, for interoperability tests.

`ProtonPeer` wraps a `proton.Transport` (client or server mode) bound to a `proton.Connection` whose events go to a
`proton.Collector`. No sockets and no reactor: bytes go in with `feed()` and come out with `take()`, so a test can
pump them between proton and any other engine that has the same two methods (see `pump()`).

For a test that needs proton over a real socket instead, `proton_server()` runs a `proton.reactor.Container` with the
test's handler in a thread, listening on a free port of 127.0.0.1.

Typical use::

    client = ProtonPeer("client")
    server = ProtonPeer("server", auto_accept=True, auto_credit=10)
    client.open(container_id="c1")
    session = client.begin_session()
    sender = client.open_sender(session, "s1", "queue")
    pump(client, server)
    delivery = client.send(sender, b"payload", b"t1")
    pump(client, server)
    [incoming] = server.received()
    server.settle(incoming.delivery, "accepted")
    pump(client, server)
    assert client.recorder.saw("delivery", name="s1", tag=b"t1", outcome="ACCEPTED", settled=True)

What the peer does on its own, each time it sees input (`feed`, `take`, `process` all drain the collector):

* records every proton event in `events` (as ``(type, summary)`` strings) and in `recorder` (as `Record` tuples);
* reads incoming message data as it arrives and queues complete deliveries for `received()`;
* with ``auto_accept=True``: answers a remote open/begin/attach by opening the local endpoint (links copy the remote
  source and target and settle modes, as proton's own handlers do; a remote *dynamic* source or target is given an
  address ``dynamic-N``), grants ``auto_credit`` to receivers it accepts, and (``auto_close``, by default the same as
  ``auto_accept``) answers a remote close/end/detach with the local one;
* with ``auto_drain=True`` (the default): answers a drain request on a sending link it has nothing queued on by
  calling `proton.Sender.drained()`, which advances the delivery-count and sends the flow that completes the drain;
* with ``auto_outcome`` set (e.g. ``"accepted"``): gives every complete incoming delivery that outcome and settles it
  (in rcv-settle-mode *second*, settles only once the sender has settled);
* with ``auto_settle_outgoing=True``: settles an outgoing delivery once the remote gives it a terminal outcome or
  settles it.

SASL in this wheel (python-qpid-proton 0.40, `proton.SASL.extended()` is ``False``: no Cyrus SASL), found
empirically by ``tests/test_proton_peer.py``:

* **server**: only ``ANONYMOUS`` is ever offered. ``allowed_mechs("ANONYMOUS PLAIN EXTERNAL")`` still sends
  ``sasl-mechanisms [ANONYMOUS]``; ``PLAIN`` needs Cyrus (so there is no user/password checking at all, and
  ``sasl.config_path``/``config_name`` are ignored), and ``EXTERNAL`` is offered only with an external auth id (TLS
  client certificate), which an in-memory transport never has. A client that allows only PLAIN fails with
  ``amqp:unauthorized-access`` "Authentication failed [mech=none]".
* **client**: ``ANONYMOUS`` and ``PLAIN`` work (``EXTERNAL`` too, in principle, but only over TLS). PLAIN requires
  ``allow_insecure_mechs = True`` without TLS (this class sets it) and takes the credentials from
  `proton.Connection.user` / `proton.Connection.password`; the initial response is ``b"\\0user\\0password"``.
  With ``ANONYMOUS``, proton sends the connection's user (or ``"anonymous"``) as the initial response.
* A proton **server** auto-detects the protocol header: with or without `Transport.sasl()` configured, it accepts a
  client that starts with the SASL header (doing ANONYMOUS) *and* one that starts straight with the AMQP header (no
  ``require_auth``). `Transport.authenticated` is ``True`` only after a SASL exchange. A server writes nothing at
  all until it has read the client's protocol header.

Quirks of proton's engine API that matter when writing scenarios (each is exercised by the tests):

* Event type names are ``"PN_LINK_FLOW"`` etc.; this module normalises them to ``"link_flow"``. The peer drains the
  collector right after each piece of input, so a `Record`'s state fields (credit, settled, ...) are those of that
  moment; events are not replayed one frame at a time.
* `proton.Delivery.tag` decodes the tag as UTF-8 (a binary tag raises `UnicodeDecodeError`); use `delivery_tag()`.
  `proton.Link.delivery()` takes bytes although it is annotated ``str``.
* A remote error is `endpoint.remote_condition` (a fresh `proton.Condition` with ``name``, ``description``,
  ``info``; ``info`` keys come back as `proton.symbol`), readable once the ``*_remote_close`` /
  ``link_remote_detach`` event has been seen; ``None`` for a clean close. A local error is set with
  ``endpoint.condition = Condition(...)`` *before* ``close()`` (which copies it into the engine).
  `proton.Link.detach()` does **not** copy it (only ``close()`` does), so the detach goes out without the error;
  `ProtonPeer.detach()` works around that.
* A detach with ``closed=false`` raises ``link_remote_detach`` only; one with ``closed=true`` raises
  ``link_remote_close`` only.
* A disposition from the remote raises a ``delivery`` event on the delivery (on the sender: the receiver's outcome;
  on the receiver: the sender settling). Read ``delivery.remote_state`` (a `proton.DispositionType`: ``ACCEPTED``
  ...; 0 if none), ``delivery.settled`` (the *remote* settled flag; proton's Python API has no local-settled
  query) and ``delivery.remote`` (`proton.Disposition`: ``condition`` for rejected, ``failed`` / ``undeliverable``
  / ``annotations`` for modified, ``section_number`` / ``section_offset`` for received). Proton writes no
  disposition at all for a delivery the remote has already settled (e.g. a receiver's outcome after a pre-settled
  transfer, or after the sender settled first).
* Credit from the remote raises ``link_flow`` on the sender (``sender.credit``; ``sender.drain_mode`` is the remote
  drain flag). A flow arriving at a receiver also raises ``link_flow`` there; drain completion shows up as a
  ``link_flow`` on the receiver after which ``receiver.credit == 0`` and ``receiver.drained()`` returns (and resets)
  the credit the sender gave back. ``receiver.draining()`` is ``True`` while the drain is outstanding. A proton
  *sender* does not finish a drain by itself: the application must call `proton.Sender.drained()` (``auto_drain``).
* ``Transport.push()`` raises `OverflowError` beyond ``capacity()`` (about 16 KiB); `feed()` pushes in pieces.
* Output is generated lazily: transport settings (max-frame-size, idle timeout, channel-max) take effect if set
  before the `take()` that emits the open frame. ``max_frame_size`` limits what the *remote* may send: set it on
  the receiving side to force multi-frame transfers.
* `proton.Session.incoming_capacity` (bytes) fixes the session's incoming-window (capacity // max-frame-size) when
  the session begins; proton widens it again as the application reads data, which this peer does eagerly.
* Idle timeout: proton advertises **half** its configured `proton.Transport.idle_timeout` (seconds) as
  ``idle-time-out`` (ms): configure 4.0 and the remote sees 2000 ms. From `tick()` it sends an empty frame
  (``00 00 00 08 02 00 00 00``) when half the *remote's* advertised timeout passed without output, and closes the
  connection with ``amqp:resource-limit-exceeded`` "local-idle-timeout expired" when nothing arrived for its full
  configured timeout. Ticks do nothing before the first I/O; the first tick fixes the time origin.
* End of stream (``feed(b"")``) on an open connection is ``amqp:connection:framing-error`` "connection aborted"
  (``transport_error``); proton still writes a close frame with that error.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol, cast

from proton import (
    Collector,
    Condition,
    Connection,
    Delivery,
    Disposition,
    Endpoint,
    Event,
    Link,
    Receiver,
    Sender,
    Session,
    Transport,
)
from proton.reactor import Container

try:
    from broker_process import free_port
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.broker_process import free_port

__all__ = [
    "ACCEPTED",
    "MODIFIED",
    "OUTCOMES",
    "RCV_FIRST",
    "RCV_SECOND",
    "RECEIVED",
    "REJECTED",
    "RELEASED",
    "SND_MIXED",
    "SND_SETTLED",
    "SND_UNSETTLED",
    "ByteStream",
    "Incoming",
    "ProtonPeer",
    "Record",
    "Recorder",
    "delivery_tag",
    "outcome_name",
    "proton_server",
    "pump",
]

ACCEPTED = Disposition.ACCEPTED
REJECTED = Disposition.REJECTED
RELEASED = Disposition.RELEASED
MODIFIED = Disposition.MODIFIED
RECEIVED = Disposition.RECEIVED

#: Outcome names accepted wherever an outcome is asked for (case-insensitive), and their proton values.
OUTCOMES: dict[str, int] = {
    "accepted": ACCEPTED,
    "rejected": REJECTED,
    "released": RELEASED,
    "modified": MODIFIED,
    "received": RECEIVED,
}
_OUTCOME_NAMES = {value: name.upper() for name, value in OUTCOMES.items()}
_TERMINAL = frozenset(int(state) for state in (ACCEPTED, REJECTED, RELEASED, MODIFIED))

# Settle modes, re-exported so scenarios need not import proton for them.
SND_UNSETTLED = Link.SND_UNSETTLED
SND_SETTLED = Link.SND_SETTLED
SND_MIXED = Link.SND_MIXED
RCV_FIRST = Link.RCV_FIRST
RCV_SECOND = Link.RCV_SECOND


class ByteStream(Protocol):
    """Anything `pump()` can move bytes between: a `ProtonPeer`, or the engine under test behind an adapter."""

    def take(self) -> bytes:
        """Return (and consume) every byte the peer wants to write now; ``b""`` if none."""
        ...

    def feed(self, data: bytes) -> None:
        """Hand the peer bytes read from the other side."""
        ...


def pump(a: ByteStream, b: ByteStream, rounds: int = 100) -> int:
    """Move bytes between `a` and `b` until neither has anything to write.

    Each round takes everything `a` has and feeds it to `b`, then the other way round. Returns the number of rounds
    that moved bytes. Raises `RuntimeError` if the two are still talking after `rounds` rounds (a livelock, or a
    transfer that needs a larger bound). End of stream is not propagated: call ``feed(b"")`` for that.
    """
    for done in range(rounds):
        moved = False
        out = a.take()
        if out:
            b.feed(out)
            moved = True
        out = b.take()
        if out:
            a.feed(out)
            moved = True
        if not moved:
            return done
    raise RuntimeError(f"pump: peers still exchanging bytes after {rounds} rounds")


def delivery_tag(delivery: Delivery) -> bytes:
    """The delivery's tag as raw bytes (`proton.Delivery.tag` decodes it as UTF-8, which fails for binary tags)."""
    try:
        from cproton import ffi, lib  # type: ignore[import-untyped]
    except ImportError:  # pragma: no cover - only the cffi binding (the wheel) has this module
        tag = delivery.tag
        return tag if isinstance(tag, bytes) else tag.encode("utf-8")
    raw = lib.pn_delivery_tag(delivery._impl)
    return bytes(ffi.unpack(raw.start, raw.size))


def outcome_name(state: int) -> str | None:
    """``"ACCEPTED"`` etc. for a proton delivery state, ``None`` for no state (0), else the number as a string."""
    if not state:
        return None
    return _OUTCOME_NAMES.get(int(state), str(int(state)))


def _outcome_value(outcome: int | str) -> int:
    if isinstance(outcome, str):
        try:
            return OUTCOMES[outcome.lower()]
        except KeyError:
            raise ValueError(f"unknown outcome {outcome!r}; expected one of {sorted(OUTCOMES)}") from None
    return int(outcome)


def _condition(
    condition: Condition | str | None, description: str | None = None, info: Mapping[Any, Any] | None = None
) -> Condition | None:
    if condition is None or isinstance(condition, Condition):
        return condition
    return Condition(condition, description, dict(info) if info is not None else None)


def _event_name(event: Event) -> str:
    name = event.type.name
    return (name[3:] if name.startswith("PN_") else name).lower()


def _state_text(state: int) -> str:
    local = "L" + ("U" if state & Endpoint.LOCAL_UNINIT else "A" if state & Endpoint.LOCAL_ACTIVE else "C")
    remote = "R" + ("U" if state & Endpoint.REMOTE_UNINIT else "A" if state & Endpoint.REMOTE_ACTIVE else "C")
    return f"{local}|{remote}"


def _role(link: Link) -> str:
    return "sender" if link.is_sender else "receiver"


def _cond_name(condition: Condition | None) -> str | None:
    return condition.name if condition is not None else None


class Record(NamedTuple):
    """One proton event, reduced to plain values. Fields that do not apply to the event are ``None``.

    * ``type``: normalised event type, e.g. ``"connection_remote_open"``, ``"link_flow"``, ``"delivery"``.
    * ``endpoint``: ``"connection"``, ``"session"``, ``"sender"``, ``"receiver"`` or ``"transport"`` (a delivery
      event names the role of its link).
    * ``name``: the link name (link and delivery events), or the remote container id (connection events).
    * ``tag``: the delivery tag (delivery events).
    * ``outcome``: the *remote* delivery state, ``"ACCEPTED"``/``"REJECTED"``/``"RELEASED"``/``"MODIFIED"``/
      ``"RECEIVED"`` (delivery events; ``None`` if the remote gave none).
    * ``settled``: whether the *remote* has settled the delivery (delivery events).
    * ``condition``: the remote error condition's name (remote close/detach events, rejected deliveries, transport
      errors).
    * ``credit``: the link credit after the event (link flow and remote-open events).
    * ``drain``: the link's drain flag (link flow events).
    * ``partial``: whether an incoming delivery is still incomplete (delivery events on a receiver).
    """

    type: str
    endpoint: str | None = None
    name: str | None = None
    tag: bytes | None = None
    outcome: str | None = None
    settled: bool | None = None
    condition: str | None = None
    credit: int | None = None
    drain: bool | None = None
    partial: bool | None = None

    @classmethod
    def of(cls, event: Event) -> Record:
        """Reduce a proton event."""
        etype = _event_name(event)
        delivery = event.delivery
        if delivery is not None:
            owner = delivery.link
            return cls(
                etype,
                _role(owner),
                owner.name,
                tag=delivery_tag(delivery),
                outcome=outcome_name(delivery.remote_state),
                settled=delivery.settled,
                condition=_cond_name(delivery.remote.condition) if delivery.remote_state == REJECTED else None,
                partial=delivery.partial if owner.is_receiver else None,
            )
        link = event.link
        if link is not None:
            remote = etype.startswith("link_remote_")
            flow = etype == "link_flow"
            return cls(
                etype,
                _role(link),
                link.name,
                condition=_cond_name(link.remote_condition) if remote else None,
                credit=link.credit if flow or etype == "link_remote_open" else None,
                drain=link.drain_mode if flow else None,
            )
        session = event.session
        if session is not None:
            remote = etype.startswith("session_remote_")
            return cls(etype, "session", condition=_cond_name(session.remote_condition) if remote else None)
        if etype.startswith("connection_"):
            connection = event.connection
            remote = etype.startswith("connection_remote_")
            return cls(
                etype,
                "connection",
                connection.remote_container if connection is not None else None,
                condition=_cond_name(connection.remote_condition) if remote and connection is not None else None,
            )
        transport = event.transport
        return cls(etype, "transport", condition=_cond_name(transport.condition) if transport is not None else None)


class Recorder:
    """The sequence of proton events a `ProtonPeer` has seen, as `Record` tuples, with small query helpers."""

    def __init__(self) -> None:
        self.records: list[Record] = []

    def add(self, event: Event) -> Record:
        """Record one event (called by `ProtonPeer` for every event it drains)."""
        record = Record.of(event)
        self.records.append(record)
        return record

    def clear(self) -> None:
        """Forget everything recorded so far."""
        self.records.clear()

    def __iter__(self) -> Iterator[Record]:
        return iter(self.records)

    def __len__(self) -> int:
        return len(self.records)

    def types(self) -> list[str]:
        """Event types in order, e.g. ``["connection_init", ..., "connection_remote_open"]``."""
        return [record.type for record in self.records]

    def find(self, type: str | None = None, **fields: Any) -> list[Record]:  # noqa: A002 - mirrors Record.type
        """Every record of `type` (any type if ``None``) whose named fields equal the given values."""
        return [
            record
            for record in self.records
            if (type is None or record.type == type) and all(getattr(record, k) == v for k, v in fields.items())
        ]

    def saw(self, type: str | None = None, **fields: Any) -> bool:  # noqa: A002 - mirrors Record.type
        """Whether any record matches (see `find`)."""
        return bool(self.find(type, **fields))

    def last(self, type: str | None = None, **fields: Any) -> Record:  # noqa: A002 - mirrors Record.type
        """The latest matching record; `LookupError` if none."""
        found = self.find(type, **fields)
        if not found:
            raise LookupError(f"no {type or 'event'} record matching {fields}; saw {self.types()}")
        return found[-1]


@dataclass
class Incoming:
    """A complete (or aborted) incoming delivery, as returned by `ProtonPeer.received()`."""

    link: Receiver
    delivery: Delivery
    tag: bytes
    data: bytes
    #: The sender settled it on the transfer (pre-settled / snd-settle-mode settled).
    settled: bool
    aborted: bool = False

    @property
    def link_name(self) -> str:
        """The name of the receiving link."""
        return self.link.name


class ProtonPeer:
    """One side of an in-memory AMQP connection driven by proton's engine. See the module docstring.

    :param mode: ``"client"``/``"server"`` or `proton.Transport.CLIENT`/`proton.Transport.SERVER`.
    :param sasl: configure a SASL layer (`proton.Transport.sasl()`). Implied by `user`/`sasl_mechs`.
    :param sasl_mechs: mechanisms to allow; default ``"ANONYMOUS"``, or ``"PLAIN"`` for a client given a `user`.
    :param user: client only: the SASL user (PLAIN authcid, or ANONYMOUS trace string).
    :param password: client only: the PLAIN password.
    :param auto_accept: answer remote opens/begins/attaches by opening the local endpoint.
    :param auto_close: answer remote closes/ends/detaches; defaults to `auto_accept`.
    :param auto_credit: credit granted to each receiving link `auto_accept` opens.
    :param auto_drain: answer drain requests on idle sending links with `proton.Sender.drained()`.
    :param auto_outcome: outcome (``"accepted"`` ...) to give and settle every complete incoming delivery with.
    :param auto_settle_outgoing: settle outgoing deliveries once the remote outcome is terminal or remote-settled.
    :param container_id: the container id to open with (default ``proton-<label>``), also when `auto_accept` opens.
    :param session_capacity: `proton.Session.incoming_capacity` (bytes) for sessions `auto_accept` begins; proton
        derives the incoming-window from it (capacity // max-frame-size), fixed when the session begins.
    :param max_frame_size: transport max-frame-size (bytes) to advertise, also when `auto_accept` opens.
    :param idle_timeout: transport idle timeout (seconds) to advertise, also when `auto_accept` opens.
    :param channel_max: transport channel-max to advertise, also when `auto_accept` opens.
    :param trace: print proton's frame trace, prefixed with `label`.
    :param label: a name for this peer in traces and reprs; defaults to the mode.
    """

    def __init__(
        self,
        mode: int | str = Transport.SERVER,
        *,
        sasl: bool | None = None,
        sasl_mechs: str | None = None,
        user: str | None = None,
        password: str | None = None,
        auto_accept: bool = False,
        auto_close: bool | None = None,
        auto_credit: int = 0,
        auto_drain: bool = True,
        auto_outcome: int | str | None = None,
        auto_settle_outgoing: bool = False,
        container_id: str | None = None,
        session_capacity: int | None = None,
        max_frame_size: int | None = None,
        idle_timeout: float | None = None,
        channel_max: int | None = None,
        trace: bool = False,
        label: str | None = None,
    ) -> None:
        if isinstance(mode, str):
            modes = {"client": Transport.CLIENT, "server": Transport.SERVER}
            if mode.lower() not in modes:
                raise ValueError(f"mode must be 'client' or 'server', not {mode!r}")
            mode = modes[mode.lower()]
        self.mode = mode
        self.is_server = mode == Transport.SERVER
        self.label = label or ("server" if self.is_server else "client")
        self.auto_accept = auto_accept
        self.auto_close = auto_accept if auto_close is None else auto_close
        self.auto_credit = auto_credit
        self.auto_drain = auto_drain
        self.auto_outcome = None if auto_outcome is None else _outcome_value(auto_outcome)
        self.auto_settle_outgoing = auto_settle_outgoing
        self.session_capacity = session_capacity

        self.collector = Collector()
        self.connection = Connection()
        self.connection.collect(self.collector)
        self.connection.container = container_id if container_id is not None else f"proton-{self.label}"
        self.transport = Transport(mode)
        if max_frame_size is not None:
            self.transport.max_frame_size = max_frame_size
        if idle_timeout is not None:
            self.transport.idle_timeout = idle_timeout
        if channel_max is not None:
            self.transport.channel_max = channel_max
        if trace:
            self.transport.trace(Transport.TRACE_FRM)
            self.transport.tracer = lambda _transport, message: print(f"[{self.label}] {message}")

        self.sasl = None
        if sasl is None:
            sasl = user is not None or sasl_mechs is not None
        if sasl:
            self.sasl = self.transport.sasl()
            if sasl_mechs is None:
                sasl_mechs = "PLAIN" if (user is not None and not self.is_server) else "ANONYMOUS"
            self.sasl.allowed_mechs(sasl_mechs)
            self.sasl.allow_insecure_mechs = True  # PLAIN is refused without TLS otherwise
            if user is not None:
                self.connection.user = user
            if password is not None:
                self.connection.password = password
        self.transport.bind(self.connection)

        #: ``(event type, endpoint summary)`` for every event drained,
        #: e.g. ``("link_flow", "sender 's1' LA|RA credit=5")``.
        self.events: list[tuple[str, str]] = []
        self.recorder = Recorder()
        #: Links by name, both those opened here and those the remote attached.
        self.links: dict[str, Link] = {}
        #: Sessions in the order they appeared (locally begun or remotely begun).
        self.sessions: list[Session] = []
        #: Every complete incoming delivery ever seen, in order (`received()` hands each out once).
        self.all_received: list[Incoming] = []
        #: Bytes fed after the transport's input side had closed (dropped).
        self.dropped = 0
        self._inbox = bytearray()
        self._unreturned: list[Event] = []
        self._pending_received: list[Incoming] = []
        self._partial: dict[Delivery, bytearray] = {}
        self._dynamic = itertools.count(1)

    def __repr__(self) -> str:
        return f"<ProtonPeer {self.label} {_state_text(self.connection.state)}>"

    # ------------------------------------------------------------------------------------------------------------
    # bytes in, bytes out

    def feed(self, data: bytes) -> None:
        """Push bytes from the other side into the transport; ``b""`` signals end of stream (closes the tail).

        Careful: ``peer.feed(other.take())`` with nothing to take is therefore an EOF; `pump()` never feeds ``b""``.

        Pushes in pieces no larger than `proton.Transport.capacity()`, draining the collector after each. Bytes
        that do not fit yet stay queued and are retried on the next `feed()`/`take()`; bytes arriving after the tail
        closed are counted in `dropped`.
        """
        if not data:
            self._flush_inbox()
            if self.transport.capacity() >= 0:
                self.transport.close_tail()
        else:
            self._inbox += data
            self._flush_inbox()
        self._drain()

    def _flush_inbox(self) -> None:
        while self._inbox:
            capacity = self.transport.capacity()
            if capacity < 0:
                self.dropped += len(self._inbox)
                self._inbox.clear()
                return
            if capacity == 0:
                return
            chunk = bytes(self._inbox[:capacity])
            del self._inbox[:capacity]
            self.transport.push(chunk)
            self._drain()  # react (and record state) per piece, as a socket reader would

    def take(self) -> bytes:
        """Return every pending output byte (``b""`` if none, or once the transport's output has closed)."""
        self._flush_inbox()
        self._drain()
        out = bytearray()
        while True:
            pending = self.transport.pending()
            if pending <= 0:
                break
            chunk = self.transport.peek(pending)
            if not chunk:
                break
            out += chunk
            self.transport.pop(len(chunk))
        self._drain()
        return bytes(out)

    def tick(self, now: float) -> float:
        """Run proton's timers (idle timeout) at time `now` (seconds, any monotonic origin); returns the next
        deadline or 0.0. Proton ignores ticks until some I/O has happened."""
        deadline = self.transport.tick(now)
        self._drain()
        return deadline

    @property
    def head_closed(self) -> bool:
        """The transport will write no more (it sent close, or failed)."""
        return self.transport.pending() < 0

    @property
    def tail_closed(self) -> bool:
        """The transport will read no more."""
        return self.transport.capacity() < 0

    # ------------------------------------------------------------------------------------------------------------
    # events

    def process(self) -> list[Event]:
        """Drain the collector; return the events seen since the last `process()` call.

        `feed()` and `take()` drain the collector too (so automatic answers happen during a `pump()`); the events
        they drained are kept and returned here.
        """
        self._drain()
        events, self._unreturned = self._unreturned, []
        return events

    def _drain(self) -> None:
        while True:
            event = self.collector.peek()
            if event is None:
                return
            self._unreturned.append(event)
            self.recorder.add(event)
            self.events.append((_event_name(event), self._summary(event)))
            self._react(event)
            self.collector.pop()

    @staticmethod
    def _summary(event: Event) -> str:
        delivery = event.delivery
        if delivery is not None:
            owner = delivery.link
            parts = [f"delivery {_role(owner)} {owner.name!r} tag={delivery_tag(delivery)!r}"]
            state = outcome_name(delivery.remote_state)
            if state:
                parts.append(f"remote={state}")
            if delivery.settled:
                parts.append("settled")
            if owner.is_receiver and delivery.partial:
                parts.append("partial")
            return " ".join(parts)
        link = event.link
        if link is not None:
            text = f"{_role(link)} {link.name!r} {_state_text(link.state)} credit={link.credit}"
            return text + (" drain" if link.drain_mode else "")
        session = event.session
        if session is not None:
            return f"session {_state_text(session.state)}"
        connection = event.connection
        if connection is not None and _event_name(event).startswith("connection_"):
            return f"connection {_state_text(connection.state)} remote={connection.remote_container!r}"
        transport = event.transport
        condition = transport.condition if transport is not None else None
        return f"transport{f' {condition}' if condition is not None else ''}"

    def _react(self, event: Event) -> None:
        etype = event.type
        delivery = event.delivery
        link = event.link
        session = event.session
        if delivery is not None:
            if etype == Event.DELIVERY:
                self._on_delivery(delivery)
        elif link is not None:
            self._on_link(etype, link)
        elif session is not None:
            if etype == Event.SESSION_REMOTE_OPEN:
                if session not in self.sessions:
                    self.sessions.append(session)
                if self.auto_accept and session.state & Endpoint.LOCAL_UNINIT:
                    if self.session_capacity is not None:
                        session.incoming_capacity = self.session_capacity
                    session.open()
            elif etype == Event.SESSION_REMOTE_CLOSE and self.auto_close and not session.state & Endpoint.LOCAL_CLOSED:
                session.close()
        elif etype == Event.CONNECTION_REMOTE_OPEN:
            if self.auto_accept and self.connection.state & Endpoint.LOCAL_UNINIT:
                self.connection.open()
        elif (
            etype == Event.CONNECTION_REMOTE_CLOSE
            and self.auto_close
            and not self.connection.state & Endpoint.LOCAL_CLOSED
        ):
            self.connection.close()

    def _on_link(self, etype: Any, link: Link) -> None:
        if etype == Event.LINK_REMOTE_OPEN:
            self.links.setdefault(link.name, link)
            if self.auto_accept and link.state & Endpoint.LOCAL_UNINIT:
                self._accept_link(link)
        elif etype == Event.LINK_REMOTE_CLOSE and self.auto_close:
            if not link.state & Endpoint.LOCAL_CLOSED:
                link.close()
        elif etype == Event.LINK_REMOTE_DETACH and self.auto_close:
            if not link.state & Endpoint.LOCAL_CLOSED:
                link.detach()
        elif (
            etype == Event.LINK_FLOW
            and self.auto_drain
            and isinstance(link, Sender)
            and link.drain_mode
            and link.credit > 0
            and not link.queued
        ):
            link.drained()

    def _on_delivery(self, delivery: Delivery) -> None:
        link = delivery.link
        if isinstance(link, Receiver):
            self._read(link, delivery)
        elif (
            self.auto_settle_outgoing
            and not _settled_locally(delivery)
            and (delivery.settled or int(delivery.remote_state) in _TERMINAL)
        ):
            _settle(delivery)

    def _accept_link(self, link: Link) -> None:
        link.source.copy(link.remote_source)
        link.target.copy(link.remote_target)
        for terminus in (link.source, link.target):
            if terminus.dynamic and not terminus.address:
                terminus.address = f"dynamic-{next(self._dynamic)}"
        link.snd_settle_mode = link.remote_snd_settle_mode
        link.rcv_settle_mode = link.remote_rcv_settle_mode
        link.open()
        if link.is_receiver and self.auto_credit:
            link.flow(self.auto_credit)

    def _read(self, link: Receiver, delivery: Delivery) -> None:
        key = delivery
        auto = self.auto_outcome
        if delivery.aborted:
            self._partial.pop(key, None)
            incoming = Incoming(link, delivery, delivery_tag(delivery), b"", delivery.settled, aborted=True)
            self._deliver(incoming)
            _settle(delivery)
            return
        if key not in self._partial and not delivery.readable and not delivery.pending:
            # A disposition update on a delivery already read.
            if auto is not None and delivery.settled and not _settled_locally(delivery):
                _settle(delivery)
            return
        buffer = self._partial.setdefault(key, bytearray())
        while delivery.pending > 0 and link.current == delivery:
            chunk = link.recv(delivery.pending)
            if not chunk:
                break
            buffer += chunk
        if delivery.partial:
            return
        del self._partial[key]
        link.advance()
        self._deliver(Incoming(link, delivery, delivery_tag(delivery), bytes(buffer), delivery.settled))
        if auto is not None and not delivery.settled:
            self.disposition(delivery, auto, settle=link.rcv_settle_mode != RCV_SECOND)
        elif auto is not None:
            _settle(delivery)

    def _deliver(self, incoming: Incoming) -> None:
        self.all_received.append(incoming)
        self._pending_received.append(incoming)

    def received(self, link: Link | str | None = None) -> list[Incoming]:
        """Complete incoming deliveries (with their bytes) not yet returned by an earlier call, oldest first.

        With `link` (a link or its name), only those on that link are returned (and consumed).
        """
        self._drain()
        if link is None:
            out, self._pending_received = self._pending_received, []
            return out
        name = link if isinstance(link, str) else link.name
        out = [item for item in self._pending_received if item.link.name == name]
        self._pending_received = [item for item in self._pending_received if item.link.name != name]
        return out

    # ------------------------------------------------------------------------------------------------------------
    # actions

    def open(
        self,
        container_id: str | None = None,
        hostname: str | None = None,
        idle_timeout: float | None = None,
        max_frame_size: int | None = None,
        channel_max: int | None = None,
        properties: Mapping[str, Any] | None = None,
        offered_capabilities: Iterable[str] | None = None,
        desired_capabilities: Iterable[str] | None = None,
    ) -> Connection:
        """Open the connection. `idle_timeout` is in seconds (sent as milliseconds); `max_frame_size`,
        `channel_max` and `idle_timeout` are transport settings and must be set before the open frame goes out."""
        connection = self.connection
        if container_id is not None:
            connection.container = container_id
        if hostname is not None:
            connection.hostname = hostname
        if idle_timeout is not None:
            self.transport.idle_timeout = idle_timeout
        if max_frame_size is not None:
            self.transport.max_frame_size = max_frame_size
        if channel_max is not None:
            self.transport.channel_max = channel_max
        if properties is not None:
            connection.properties = dict(properties)
        if offered_capabilities is not None:
            connection.offered_capabilities = list(offered_capabilities)
        if desired_capabilities is not None:
            connection.desired_capabilities = list(desired_capabilities)
        connection.open()
        return connection

    def close(
        self,
        condition: Condition | str | None = None,
        description: str | None = None,
        info: Mapping[str, Any] | None = None,
    ) -> None:
        """Close the connection, optionally with an error (a `proton.Condition` or its symbolic name)."""
        self.connection.condition = _condition(condition, description, info)
        self.connection.close()

    def begin_session(self, incoming_capacity: int | None = None, outgoing_window: int | None = None) -> Session:
        """Begin a new session. `incoming_capacity` (bytes) bounds proton's incoming window (window = capacity //
        max-frame-size); proton reopens the window as the application reads the data (`received()` reads eagerly)."""
        session = self.connection.session()
        if incoming_capacity is not None:
            session.incoming_capacity = incoming_capacity
        if outgoing_window is not None:
            session.outgoing_window = outgoing_window
        session.open()
        self.sessions.append(session)
        return session

    def end(
        self,
        session: Session,
        condition: Condition | str | None = None,
        description: str | None = None,
        info: Mapping[str, Any] | None = None,
    ) -> None:
        """End a session, optionally with an error."""
        session.condition = _condition(condition, description, info)
        session.close()

    def session(self, index: int = -1) -> Session:
        """A known session (by default the latest), e.g. one the remote began and `auto_accept` answered."""
        self._drain()
        return self.sessions[index]

    def link(self, name: str) -> Link:
        """A known link by name (local, or remote-attached); `KeyError` if none."""
        self._drain()
        return self.links[name]

    def sender(self, name: str) -> Sender:
        """This side's sending link called `name` (e.g. the answer to a remote receiver's attach)."""
        link = self.link(name)
        if not isinstance(link, Sender):
            raise TypeError(f"link {name!r} is a receiver here")
        return link

    def receiver(self, name: str) -> Receiver:
        """This side's receiving link called `name` (e.g. the answer to a remote sender's attach)."""
        link = self.link(name)
        if not isinstance(link, Receiver):
            raise TypeError(f"link {name!r} is a sender here")
        return link

    def open_sender(
        self,
        session: Session,
        name: str,
        target_address: str | None,
        source_address: str | None = None,
        snd_settle_mode: int | None = None,
        rcv_settle_mode: int | None = None,
        *,
        dynamic_target: bool = False,
        properties: Mapping[str, Any] | None = None,
        max_message_size: int | None = None,
    ) -> Sender:
        """Attach a sending link (`snd_settle_mode`/`rcv_settle_mode`: the ``SND_*``/``RCV_*`` constants)."""
        sender = session.sender(name)
        self._configure(
            sender, source_address, target_address, snd_settle_mode, rcv_settle_mode, properties, max_message_size
        )
        if dynamic_target:
            sender.target.dynamic = True
        sender.open()
        self.links[name] = sender
        return sender

    def open_receiver(
        self,
        session: Session,
        name: str,
        source_address: str | None,
        target_address: str | None = None,
        snd_settle_mode: int | None = None,
        rcv_settle_mode: int | None = None,
        *,
        dynamic_source: bool = False,
        credit: int = 0,
        properties: Mapping[str, Any] | None = None,
        max_message_size: int | None = None,
    ) -> Receiver:
        """Attach a receiving link, optionally granting `credit` straight away."""
        receiver = session.receiver(name)
        self._configure(
            receiver, source_address, target_address, snd_settle_mode, rcv_settle_mode, properties, max_message_size
        )
        if dynamic_source:
            receiver.source.dynamic = True
        receiver.open()
        self.links[name] = receiver
        if credit:
            receiver.flow(credit)
        return receiver

    @staticmethod
    def _configure(
        link: Link,
        source_address: str | None,
        target_address: str | None,
        snd_settle_mode: int | None,
        rcv_settle_mode: int | None,
        properties: Mapping[str, Any] | None,
        max_message_size: int | None,
    ) -> None:
        if source_address is not None:
            link.source.address = source_address
        if target_address is not None:
            link.target.address = target_address
        if snd_settle_mode is not None:
            link.snd_settle_mode = snd_settle_mode
        if rcv_settle_mode is not None:
            link.rcv_settle_mode = rcv_settle_mode
        if properties is not None:
            link.properties = cast(Any, dict(properties))  # proton turns str keys into symbols
        if max_message_size is not None:
            link.max_message_size = max_message_size

    def flow(self, receiver: Receiver, credit: int) -> None:
        """Grant `credit` more credit on a receiving link."""
        receiver.flow(credit)

    def drain(self, receiver: Receiver, credit: int = 0) -> None:
        """Grant `credit` more credit and ask the sender to use it or give it back (drain=true)."""
        receiver.drain(credit)

    def drained(self, sender: Sender) -> int:
        """Sender side: give back unused credit when in drain mode; returns how much."""
        return sender.drained()

    def send(
        self, sender: Sender, payload: bytes, tag: bytes | str, settled: bool = False, *, more: bool = False
    ) -> Delivery:
        """Send one delivery with `payload` as its raw transfer bytes (any size; proton splits it into frames).

        With `settled`, the delivery is settled locally at once, so the transfer carries ``settled=true``.
        With `more`, the delivery stays open (its last transfer so far has ``more=true``): continue it with
        `send_more()`, or `abort()` it.
        """
        delivery = sender.delivery(cast(str, tag))  # proton takes bytes too, despite its annotation
        self.send_more(sender, payload, more=more)
        if settled:
            _settle(delivery)
        return delivery

    def send_more(self, sender: Sender, payload: bytes, *, more: bool = False) -> None:
        """Append `payload` to the sender's current (open) delivery; complete it unless `more`."""
        written = sender.stream(bytes(payload))
        if written != len(payload):
            raise RuntimeError(f"proton accepted {written} of {len(payload)} payload bytes")
        if not more:
            sender.advance()

    def abort(self, delivery: Delivery) -> None:
        """Abort a (partly sent) outgoing delivery."""
        delivery.abort()

    def disposition(
        self,
        delivery: Delivery,
        outcome: int | str | None,
        *,
        settle: bool = False,
        condition: Condition | str | None = None,
        description: str | None = None,
        info: Mapping[str, Any] | None = None,
        delivery_failed: bool | None = None,
        undeliverable_here: bool | None = None,
        annotations: Mapping[str, Any] | None = None,
        section_number: int | None = None,
        section_offset: int | None = None,
    ) -> None:
        """Set a delivery's local state and optionally settle it.

        `outcome` is ``"accepted"``/``"rejected"``/``"released"``/``"modified"``/``"received"`` (or the proton
        constant, or ``None`` to settle without a state). ``rejected`` takes `condition` (+ `description`, `info`);
        ``modified`` takes `delivery_failed`, `undeliverable_here`, `annotations` (symbol keys); ``received`` takes
        `section_number` and `section_offset`.
        """
        if outcome is not None:
            state = _outcome_value(outcome)
            local = delivery.local
            error = _condition(condition, description, info)
            if error is not None:
                local.condition = error
            if delivery_failed is not None:
                local.failed = delivery_failed
            if undeliverable_here is not None:
                local.undeliverable = undeliverable_here
            if annotations is not None:
                local.annotations = dict(annotations)
            if section_number is not None:
                local.section_number = section_number
            if section_offset is not None:
                local.section_offset = section_offset
            delivery.update(state)
        if settle:
            _settle(delivery)

    def settle(self, delivery: Delivery, outcome: int | str | None = None, **fields: Any) -> None:
        """Settle a delivery, first giving it `outcome` if one is named (fields as for `disposition`)."""
        self.disposition(delivery, outcome, settle=True, **fields)

    def detach(
        self,
        link: Link,
        condition: Condition | str | None = None,
        description: str | None = None,
        info: Mapping[str, Any] | None = None,
    ) -> None:
        """Detach a link without closing it (``closed=false``), optionally with an error."""
        link.condition = _condition(condition, description, info)
        link._update_cond()  # proton's Link.detach() does not copy the condition into the engine; close() does
        link.detach()

    def close_link(
        self,
        link: Link,
        condition: Condition | str | None = None,
        description: str | None = None,
        info: Mapping[str, Any] | None = None,
    ) -> None:
        """Close a link (detach with ``closed=true``), optionally with an error."""
        link.condition = _condition(condition, description, info)
        link.close()


def _settled_locally(delivery: Delivery) -> bool:
    """Whether this side settled the delivery through `ProtonPeer` (proton's API only exposes the remote flag)."""
    return bool(getattr(delivery, "_proton_peer_settled", False))


def _settle(delivery: Delivery) -> None:
    # Wrapper attributes live in the C object's record, so every wrapper of this delivery sees the mark.
    delivery._proton_peer_settled = True
    delivery.settle()


@contextmanager
def proton_server(handler: Any, timeout: float = 10.0) -> Iterator[str]:
    """python-qpid-proton serving `handler` over TCP: yields the ``amqp://127.0.0.1:PORT`` URL to connect to.

    A `proton.reactor.Container` with `handler` (a `proton.handlers.MessagingHandler`, say) listens on a free port of
    127.0.0.1 before its thread starts, so a client may connect at once; it runs in a daemon thread. Leaving the
    block stops the container and waits up to `timeout` seconds for the thread to end.
    """
    port = free_port()
    container = Container(handler)
    container.listen(f"127.0.0.1:{port}")
    thread = threading.Thread(target=container.run, name=f"proton-server-{port}", daemon=True)
    thread.start()
    try:
        yield f"amqp://127.0.0.1:{port}"
    finally:
        container.stop()
        thread.join(timeout)
