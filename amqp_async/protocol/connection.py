"""The connection state machine (§2.4, §2.7.1, §2.7.9, §5.3): bytes in, events and bytes out, no I/O.

Theory of operation (h11's three verbs):

- :meth:`Connection.receive_data` takes received bytes (``b""`` when the transport ended) and the current time;
- :meth:`Connection.next_events` returns what happened, in order;
- :meth:`Connection.data_to_send` returns the bytes to write (queued flows and dispositions are written then).

Commands (:meth:`open`, :meth:`close`, :meth:`begin_session`, and those of sessions and links) queue frames.
:meth:`tick` takes the current time, writes a heartbeat when the peer's idle timeout calls for one, closes the
connection when the peer has been silent past ours, and says when to call it next.

Phases of the byte stream: a protocol header each way (§2.2); if SASL is on, SASL frames, then the AMQP header each
way again (§5.3.1); then AMQP frames. A client pipelines its AMQP header and open frame (§2.4.1 permits it);
with SASL it must wait for the outcome first.

Errors: a peer that breaks the protocol gets the connection closed with the condition that names the breach
(§2.8.15-§2.8.17) and a :class:`ConnectionClosed` event with ``remote=False``; session- and link-scoped breaches end
only the session (§2.5.5) or detach only the link (see :meth:`Connection._session_error` and
:meth:`Connection._link_error` for when that takes a wider scope). Nothing the peer sends raises out of
:meth:`Connection.receive_data`. A caller's misuse raises :class:`LocalProtocolError` at once; but answering what the
peer started (``open``, a session's ``begin``, a link's ``attach``) once the engine has ended that endpoint, because
of a breach in the same input, does nothing: the event that says it ended follows in the same batch.
"""

from __future__ import annotations

import heapq
from struct import error as StructError
from typing import Any

from ..codec import conditions
from ..codec._decoder import decode_value
from ..codec.framing import (
    AMQP_HEADER,
    EMPTY_FRAME,
    FRAME_AMQP,
    FRAME_SASL,
    MIN_MAX_FRAME_SIZE,
    PROTOCOL_AMQP,
    PROTOCOL_SASL,
    PROTOCOL_TLS,
    SASL_HEADER,
    FrameDecoder,
    NotAProtocolHeader,
    UnsupportedProtocolError,
    encode_frame,
)
from ..codec.performatives import Attach, Begin, Close, Detach, Disposition, End, Error, Flow, Open, Transfer
from ..errors import DecodeError, EncodeError
from ..types import symbol
from .delivery import Delivery
from .disposition_frames import parse_disposition
from .endpoint import ACTIVE, CLOSED, UNINIT, Endpoint
from .errors import ConnectionClosedError, LocalProtocolError, RemoteProtocolError
from .events import (
    Authenticated,
    ConnectionClosed,
    ConnectionOpened,
    DeliveriesReceived,
    Event,
    LinkDetached,
    SessionBegun,
    SessionEnded,
)
from .link import Link, as_symbols
from .payload import BY_REFERENCE, Gathered, Payload
from .sasl import SaslClient, SaslServer
from .sasl_mechanisms import SaslMechanismError
from .session import TRANSFER_OVERHEAD, Session
from .transfer_frames import parse_transfer_fields
from .transfer_intake import take_transfers

__all__ = ["CLIENT", "LEAST_IDLE_TIMEOUT", "SERVER", "Connection"]

CLIENT = "client"
SERVER = "server"

#: The shortest idle-time-out (seconds) a peer may ask of us by default: one asking less would have us write a frame
#: more often than every 50 ms, for as long as the connection lasts (a thousand a second at 1 ms): a cost a peer
#: could impose at no cost of its own. Real peers ask for seconds or minutes.
LEAST_IDLE_TIMEOUT = 0.1

# Phases of the input stream.
_AWAIT_SASL_HEADER = "await-sasl-header"
_SASL = "sasl"
_AWAIT_AMQP_HEADER = "await-amqp-header"
_AMQP = "amqp"
_DONE = "done"


def error(condition: str, description: str | None = None, info: dict[Any, Any] | None = None) -> Error:
    """An AMQP ``error`` (§2.8.14) with a symbol condition."""
    return Error(condition=symbol(condition), description=description, info=info)


def describe_header(header: bytes) -> str:
    """The protocol header a peer sent, in words for an error: its bytes, and the protocol they name when it is
    one a misconfigured port often speaks (an AMQP 0-9-1 broker's, HTTP, TLS)."""
    if not header:
        return "none (the peer sent nothing)"
    named = None
    if header[:4] == b"AMQP" and len(header) == 8:
        protocol, major, minor, revision = header[4:8]
        if (major, minor, revision) == (1, 0, 0):
            named = {PROTOCOL_AMQP: "AMQP 1.0", PROTOCOL_SASL: "AMQP 1.0 SASL", PROTOCOL_TLS: "AMQP 1.0 TLS"}.get(
                protocol
            )
        elif protocol == 0 and major == 0:
            named = f"AMQP 0-{minor}-{revision}"  # 0-9-1 (RabbitMQ's own protocol), 0-8
        elif (protocol, major, minor) == (1, 1, 0):
            named = f"AMQP 0-{revision}"  # 0-10 (Qpid C++)
    elif header[:4] in (b"HTTP", b"<htm", b"<!DO"):
        named = "HTTP"
    elif header[:1] == b"\x16":
        named = "a TLS handshake: the port wants amqps"
    return f"{header!r} ({named})" if named else repr(header)


class Connection(Endpoint):
    """One AMQP connection, either role, with no I/O.

    Args:
        role: :data:`CLIENT` (sends the first protocol header) or :data:`SERVER`.
        container_id: our container id (§2.7.1); a client without one gets a random one from the caller.
        hostname: the hostname the client asks for (open's ``hostname``, and sasl-init's).
        max_frame_size: the largest frame we accept (at least 512).
        channel_max: the highest channel we accept.
        idle_timeout: seconds of silence after which we declare the peer dead (None: never); the peer is asked,
            through open's ``idle-time-out``, to send something at least that often.
        advertised_idle_timeout: what open's ``idle-time-out`` asks instead (default: ``idle_timeout``). §2.4.5:
            "To avoid spurious timeouts, the value in idle-time-out SHOULD be half the peer's actual timeout
            threshold", which proton's engine does (``amqp_async.proton``'s Transport passes half).
        properties: open's ``properties`` field.
        offered_capabilities: open's ``offered-capabilities`` field.
        desired_capabilities: open's ``desired-capabilities`` field.
        sasl: a :class:`SaslClient` (client) or :class:`SaslServer` (server) to run SASL first, or None.
        incoming_window: the default incoming window of our sessions, in frames.
        require_sasl: a server with ``sasl`` refuses clients that skip it (default True).
        answer_detach: answer the peer's detach (default): at once, but for a receiver link with deliveries that
            have no outcome from us yet, whose answer waits until the output is next taken (the layer above may
            answer sooner, or hold it: :meth:`hold_detach_answer`), so that the outcomes it gives them go first.
            False leaves it to the layer above, which detaches when its application closes the link (proton's
            model: outcomes the application gives first still go out before the detach), and keeps a detached
            link's unsettled deliveries tracked until they settle or the session ends (the peer may settle them
            after the detach).
        answer_close: answer the peer's close and end at once (default). False leaves both to the layer above
            (proton's engine model: the application closes what the peer closed, and the frames for its links,
            a detach answering the peer's, still go out before our end or close), and still takes the peer's
            detach of a link whose session we ended, so the layer above learns the link was closed. False also
            leaves the settlement of a delivery the receiver gave an unsettled outcome to the layer above.
        least_remote_idle_timeout: the shortest idle-time-out (seconds) the peer's open may ask for (default
            :data:`LEAST_IDLE_TIMEOUT`; 0: any): a shorter one closes the connection with ``amqp:invalid-field``
            and the reason (§2.4.5).
        idle_from_start: run ``idle_timeout`` from the first :meth:`tick` rather than from the peer's open, so that
            a peer silent before its open (no header, a SASL exchange that stops) is given up too, with the same
            ``amqp:resource-limit-exceeded``. proton's transport counts from its first tick; the callback API asks
            for it (a proton program has no other bound on a peer that accepts the connection and says nothing).
    """

    # Slots: a connection is long-lived and there may be thousands of them.
    __slots__ = (
        "_announced",
        "_decoder",
        "_detach_answers",
        "_dirty_sessions",
        "_events",
        "_frames_after_open",
        "_freed_channels",
        "_header_refused_in_amqp",
        "_header_sent",
        "_idle_from_start",
        "_idle_since",
        "_last_received",
        "_last_sent",
        "_max_transfer_payload",
        "_next_channel",
        "_open_pending",
        "_out",
        "_out_parts",
        "_out_parts_size",
        "_phase",
        "_remote_channel_max",
        "_remote_idle_timeout",
        "_remote_max_frame_size",
        "_sessions_by_channel",
        "_sessions_by_remote_channel",
        "_transport_closed",
        "advertised_idle_timeout",
        "answer_close",
        "answer_detach",
        "channel_max",
        "container_id",
        "desired_capabilities",
        "frames_received",
        "frames_sent",
        "hostname",
        "idle_timeout",
        "incoming_window",
        "least_remote_idle_timeout",
        "max_frame_size",
        "offered_capabilities",
        "properties",
        "remote_open",
        "require_sasl",
        "role",
        "sasl",
        "sasl_outcome",
    )

    def __init__(
        self,
        *,
        role: str = CLIENT,
        container_id: str,
        hostname: str | None = None,
        max_frame_size: int = 65536,
        channel_max: int = 65535,
        idle_timeout: float | None = None,
        advertised_idle_timeout: float | None = None,
        properties: dict[Any, Any] | None = None,
        offered_capabilities: Any = None,
        desired_capabilities: Any = None,
        sasl: SaslClient | SaslServer | None = None,
        incoming_window: int = 2048,
        require_sasl: bool = True,
        answer_detach: bool = True,
        answer_close: bool = True,
        idle_from_start: bool = False,
        least_remote_idle_timeout: float = LEAST_IDLE_TIMEOUT,
    ) -> None:
        super().__init__()
        if role not in (CLIENT, SERVER):
            raise ValueError(f"role must be {CLIENT!r} or {SERVER!r}")
        if max_frame_size < MIN_MAX_FRAME_SIZE:
            raise ValueError(f"max_frame_size must be at least {MIN_MAX_FRAME_SIZE}")
        if sasl is not None and isinstance(sasl, SaslServer) != (role == SERVER):
            raise ValueError("a client takes a SaslClient and a server a SaslServer")
        self.role = role
        self.container_id = container_id
        self.hostname = hostname
        self.max_frame_size = max_frame_size
        self.channel_max = channel_max
        self.idle_timeout = idle_timeout
        self.advertised_idle_timeout = idle_timeout if advertised_idle_timeout is None else advertised_idle_timeout
        self.least_remote_idle_timeout = least_remote_idle_timeout
        self.properties = properties
        self.offered_capabilities = as_symbols(offered_capabilities)
        self.desired_capabilities = as_symbols(desired_capabilities)
        self.sasl = sasl
        self.require_sasl = require_sasl
        self.answer_detach = answer_detach
        self.answer_close = answer_close
        self.incoming_window = incoming_window
        #: the peer's open frame, once received.
        self.remote_open: Open | None = None
        #: how the SASL exchange ended (None before, or without SASL).
        self.sasl_outcome: Any = None
        #: frames read from the peer and written to it (SASL, AMQP and empty frames), for those who watch a link.
        self.frames_received = 0
        self.frames_sent = 0

        # Output: frames are encoded into ``_out``; a large payload is not copied there but kept by reference in
        # ``_out_parts``, after the bytes written before it (see _write_payload).
        self._out = bytearray()
        self._out_parts: list[bytes | bytearray | memoryview] = []
        self._out_parts_size = 0
        self._events: list[Event] = []
        self._decoder = FrameDecoder(max_frame_size)
        self._phase = _AWAIT_SASL_HEADER if sasl is not None else _AWAIT_AMQP_HEADER
        self._header_sent = False
        self._header_refused_in_amqp = False
        self._open_pending = False
        self._frames_after_open: list[tuple[int, Any, bytes]] = []
        self._sessions_by_channel: dict[int, Session] = {}
        # Our channels: those below _next_channel are in use but for the ones freed (a heap, lowest first), so that
        # a session takes the lowest free channel in constant time (a scan from 0 made 20,000 sessions cost 35 s).
        self._next_channel = 0
        self._freed_channels: list[int] = []
        self._sessions_by_remote_channel: dict[int, Session] = {}
        self._dirty_sessions: dict[Session, None] = {}
        # Receiver links the peer detached, whose answer waits for the layer above (see Session._on_detach): link,
        # and whether the peer closed it.
        self._detach_answers: dict[Link, bool] = {}
        self._announced: dict[Link, None] = {}
        self._remote_max_frame_size = MIN_MAX_FRAME_SIZE
        self._max_transfer_payload = MIN_MAX_FRAME_SIZE - TRANSFER_OVERHEAD
        self._remote_channel_max = 0
        self._remote_idle_timeout = 0.0
        self._last_received = 0.0
        self._last_sent = 0.0
        self._idle_from_start = idle_from_start
        self._idle_since: float | None = None  # the first tick, with idle_from_start
        self._transport_closed = False
        if role == CLIENT and sasl is not None:
            self._write_header(SASL_HEADER)

    # --- the three verbs ---------------------------------------------------------------------------------

    def receive_data(self, data: bytes | bytearray | memoryview, now: float = 0.0) -> None:
        """Take bytes received from the peer (``b""``: the transport ended). ``now`` is the current time in
        seconds (any monotonic clock; the same one :meth:`tick` gets)."""
        self._last_received = now
        if self._phase == _DONE:
            return
        if not data:
            self._on_transport_end()
            return
        if self._detach_answers:
            self._answer_detaches()
        self._decoder.feed(data)
        self._announced.clear()
        try:
            self._process_input()
        except SaslMechanismError as exc:
            self._fail(exc.condition, exc.description, sasl_code=getattr(exc, "sasl_code", None))
        except RemoteProtocolError as exc:
            self._fail(exc.condition, exc.description)
        except DecodeError as exc:  # FramingError is a DecodeError carrying amqp:connection:framing-error
            self._fail(exc.condition, exc.description)

    def next_events(self) -> list[Event]:
        """Return the events since the last call, oldest first."""
        events = self._events
        self._events = []
        return events

    def data_to_send(self, now: float | None = None) -> bytes:
        """Return the bytes to write to the peer, writing queued flows and dispositions first."""
        buffers = self.buffers_to_send(now)
        if not buffers:
            return b""
        return b"".join(buffers) if len(buffers) > 1 else bytes(buffers[0])

    def buffers_to_send(self, now: float | None = None) -> list[bytes | bytearray | memoryview]:
        """As :meth:`data_to_send`, the bytes to write, as a list of buffers to write in order: large message
        payloads are views of the bytes given to ``send``, not copies. The caller owns the buffers."""
        if self._detach_answers:
            self._answer_detaches()
        if self._dirty_sessions:
            for session in list(self._dirty_sessions):
                session._flush()
            self._dirty_sessions.clear()
        out = self._out
        parts = self._out_parts
        if parts:
            if out:
                parts.append(out)
                self._out = bytearray()
            self._out_parts = []
            self._out_parts_size = 0
        elif out:
            parts = [out]
            self._out = bytearray()
        else:
            return parts
        if now is not None:
            self._last_sent = now
        return parts

    def tick(self, now: float) -> float | None:
        """Do what time calls for (§2.4.5): a heartbeat when the peer's idle timeout is half gone since we last
        wrote, a close when the peer has been silent past our idle timeout. Return when to call again (None:
        there is nothing to wait for)."""
        if self._phase == _DONE or self.local_state is CLOSED:
            return None
        deadlines = []
        idle = self.idle_timeout
        if idle and (self.remote_state is ACTIVE or (self._idle_from_start and self.remote_open is None)):
            if self._idle_since is None and self.remote_open is None:
                self._idle_since = now  # idle_from_start: the first tick starts the clock
            expires = self._input_expiry(idle)
            if now >= expires:
                self._fail(conditions.RESOURCE_LIMIT_EXCEEDED, "local-idle-timeout expired", idle_expired=True)
                return None
            deadlines.append(expires)
        if self._remote_idle_timeout and self.local_state is ACTIVE:
            # Write at half the peer's timeout, so that a delay on the way does not make it give up on us.
            interval = self._remote_idle_timeout / 2
            due = self._last_sent + interval
            if now >= due:
                if not self._out and not self._out_parts:
                    self._out += EMPTY_FRAME
                    self.frames_sent += 1
                self._last_sent = now
                due = now + interval
            deadlines.append(due)
        return min(deadlines) if deadlines else None

    @property
    def input_deadline(self) -> float | None:
        """When :meth:`tick` will declare the peer dead unless bytes arrive before (None: no idle timeout of ours
        runs now). The clock is the one :meth:`receive_data` and :meth:`tick` get."""
        idle = self.idle_timeout
        if not idle or self._phase == _DONE or self.local_state is CLOSED:
            return None
        if self.remote_state is ACTIVE:
            return self._last_received + idle
        if self._idle_from_start and self.remote_open is None and self._idle_since is not None:
            return self._input_expiry(idle)
        return None

    def _input_expiry(self, idle: float) -> float:
        """When the idle timeout expires: ``idle`` after the last input, or after the first tick when nothing came
        since (``idle_from_start``, before the peer's open)."""
        last = self._last_received
        since = self._idle_since
        return (last if since is None or last > since else since) + idle

    # --- commands ----------------------------------------------------------------------------------------

    def open(self) -> None:
        """Send our open (§2.4.1): a client starts with it (pipelined after the header), a server answers.

        Answering the peer's open after the engine closed the connection (the peer broke the protocol in the same
        input; a :class:`ConnectionClosed` event follows the :class:`ConnectionOpened`) does nothing.
        """
        if self.local_state is CLOSED and self.engine_ended:
            return
        if self.local_state is not UNINIT:
            raise LocalProtocolError("the connection is already open on our side")
        self.local_state = ACTIVE
        if self.role == CLIENT and not self._header_sent and self.sasl is None:
            self._write_header(AMQP_HEADER)
        if self._phase in (_AWAIT_SASL_HEADER, _SASL) or not self._header_sent:
            self._open_pending = True  # written once SASL is done and our AMQP header is out
            return
        self._write_open()

    def close(self, error: Error | None = None) -> None:
        """Send our close (§2.4.3), ending every session; answer the peer's close (the engine does so itself)."""
        if self.local_state is CLOSED:
            return
        if self.local_state is UNINIT and not self._header_sent:
            self.local_state = CLOSED
            self._phase = _DONE
            return
        if self.local_state is UNINIT:
            self._write_open()  # §2.4.1: a close must follow an open
        self.flush()
        self._close_endpoints()
        self.local_state = CLOSED
        self.local_error = error
        self._write_frame(0, Close(error=error))

    def _incomplete_deliveries(self) -> tuple[Delivery, ...]:
        """The outgoing deliveries of every session whose last frame is not written yet (what an ending of the
        connection cuts short: :meth:`Session.incomplete_deliveries`)."""
        return tuple(delivery for session in self.sessions for delivery in session.incomplete_deliveries())

    def _close_endpoints(self) -> None:
        """§2.4.3: closing the connection ends its sessions and links; nothing more may be written for them."""
        for session in self.sessions:
            if session.local_state is not CLOSED:
                session.local_state = CLOSED
                session.engine_ended = True
            session._outgoing_queue.clear()
            for link in session._links_by_name.values():
                if link.local_state is not CLOSED:
                    link.local_state = CLOSED
                    link.engine_ended = True
        self._dirty_sessions.clear()

    def begin_session(self, **options: Any) -> Session:
        """Start a session (§2.5.1); ``options`` are those of :class:`Session` (``incoming_window``, ...)."""
        self._require_open_for_sessions()
        options.setdefault("incoming_window", self.incoming_window)
        session = Session(self, **options)
        session.begin()
        return session

    def flush(self) -> None:
        """Write queued flows and dispositions into the output now."""
        for session in list(self._dirty_sessions):
            session._flush()
        self._dirty_sessions.clear()

    # --- state -------------------------------------------------------------------------------------------

    @property
    def sessions(self) -> list[Session]:
        """Our sessions (begun on either side, not yet ended on both)."""
        return list({*self._sessions_by_channel.values(), *self._sessions_by_remote_channel.values()})

    @property
    def has_output(self) -> bool:
        """True when bytes (or queued flows and dispositions) wait to be taken with :meth:`data_to_send`."""
        return bool(self._out) or bool(self._out_parts) or bool(self._dirty_sessions)

    @property
    def output_buffered(self) -> int:
        """How many bytes wait to be taken (for the driver's backpressure)."""
        return len(self._out) + self._out_parts_size

    @property
    def remote_max_frame_size(self) -> int:
        """The largest frame the peer accepts (512 until its open arrives, §2.7.1)."""
        return self._remote_max_frame_size

    @property
    def remote_idle_timeout(self) -> float:
        """The peer's idle timeout in seconds (0: none)."""
        return self._remote_idle_timeout

    @property
    def closed(self) -> bool:
        """True once no more input will be processed (closed both ways, failed, or the transport ended)."""
        return self._phase == _DONE

    @property
    def header_sent(self) -> bool:
        """True once our protocol header is written (the current layer's: after SASL, the AMQP one)."""
        return self._header_sent

    @property
    def awaiting_header(self) -> bool:
        """True while the peer's protocol header (SASL's or AMQP's) is expected."""
        return self._phase in (_AWAIT_SASL_HEADER, _AWAIT_AMQP_HEADER)

    @property
    def in_sasl(self) -> bool:
        """True while the SASL layer is on (§5.3): its header or its frames are expected, the AMQP layer is not
        started yet."""
        return self._phase in (_AWAIT_SASL_HEADER, _SASL)

    def fail(self, condition: str, description: str) -> None:
        """Close the connection because of something this side observed (a layer above that keeps its own idle
        clock, §2.4.5): in the AMQP layer our close carries ``condition``; no more input is taken. A
        :class:`ConnectionClosed` (``remote=False``) reports it."""
        if self._phase != _DONE:
            self._fail(condition, description)

    def close_after_refused_header(self, error: Error) -> None:
        """Write a close carrying ``error`` after a protocol header refused in the AMQP layer (the engine stopped
        with a :class:`ConnectionClosed` that has ``protocol_header``): the engine itself only answers with its own
        header (§2.2), while python-qpid-proton also writes a close with the framing error, behind our open when it
        was held back, or one with an empty container-id when we had none to send (§2.4.1: a close follows an
        open), so a peer that reads on learns why. Where the SASL layer's header was awaited, ours is SASL's, which
        no AMQP frame may follow: nothing is written then (nor when our close is written already)."""
        if not self._header_refused_in_amqp or self.local_state is CLOSED or self._phase != _DONE:
            return
        if self._open_pending:
            self._frames_after_open = []  # what was to follow our open (a begin, an attach) is not sent now
            self._write_open()
        elif self.local_state is UNINIT:
            self._write_frame(0, Open(container_id=""))
        self._close_endpoints()
        self.local_state = CLOSED
        self.local_error = error
        self._write_frame(0, Close(error=error))

    def _require_open_for_sessions(self) -> None:
        if self.local_state is not ACTIVE:
            raise ConnectionClosedError("the connection is not open on our side")
        if self.remote_state is CLOSED:
            raise ConnectionClosedError("the peer closed the connection")

    # --- output helpers ----------------------------------------------------------------------------------

    def _write_header(self, header: bytes) -> None:
        self._out += header
        self._header_sent = True

    def _write_open(self) -> None:
        self._open_pending = False
        self._write_frame(
            0,
            Open(
                container_id=self.container_id,
                hostname=self.hostname,
                max_frame_size=self.max_frame_size,
                channel_max=self.channel_max,
                idle_time_out=int(self.advertised_idle_timeout * 1000) if self.advertised_idle_timeout else None,
                offered_capabilities=self.offered_capabilities,
                desired_capabilities=self.desired_capabilities,
                properties=self.properties,
            ),
        )
        queued = self._frames_after_open
        self._frames_after_open = []
        for channel, performative, payload in queued:
            self._write_frame(channel, performative, payload)

    def _write_frame(self, channel: int, performative: Any, payload: bytes = b"", frame_type: int = FRAME_AMQP) -> None:
        if self._open_pending and frame_type == FRAME_AMQP:
            # Our open waits for SASL (or for our header): frames queued meanwhile (a begin, an attach) follow it.
            self._frames_after_open.append((channel, performative, payload))
            return
        try:
            encode_frame(
                self._out, frame_type, channel, performative, payload, max_frame_size=self._remote_max_frame_size
            )
        except EncodeError as exc:
            raise LocalProtocolError(f"cannot send {type(performative).__name__}: {exc.description}") from exc
        self.frames_sent += 1

    def write_empty_frame(self) -> None:
        """Write an empty frame now (§2.4.5: it keeps the peer's idle timeout from expiring; a layer above that
        keeps its own clock for heartbeats writes them with this)."""
        self._out += EMPTY_FRAME
        self.frames_sent += 1

    def send_header(self) -> None:
        """Write our protocol header now, before our open (a client may send it as soon as it connects, §2.2; the
        open follows when :meth:`open` is called). Does nothing once the header is out, and on a server, which
        answers the client's header."""
        if self.role == CLIENT and not self._header_sent:
            self._write_header(SASL_HEADER if self.sasl is not None else AMQP_HEADER)

    def _write_payload(self, payload: Payload) -> None:
        """Append a transfer's payload to the output: a large immutable one by reference (no copy), anything else
        copied (the caller may reuse a bytearray once ``send`` returns); a gathered one part by part."""
        if isinstance(payload, Gathered):
            for part in payload.parts:
                self._write_payload(part)
            return
        size = len(payload)
        owner = payload.obj if isinstance(payload, memoryview) else payload
        if size < BY_REFERENCE or owner.__class__ is not bytes:
            self._out += payload
            return
        parts = self._out_parts
        if self._out:
            parts.append(self._out)
            self._out_parts_size += len(self._out)
            self._out = bytearray()
        parts.append(payload)
        self._out_parts_size += size

    def _emit(self, event: Event) -> None:
        self._events.append(event)

    def _announce_deliveries(self, link: Link) -> None:
        if link not in self._announced:
            self._announced[link] = None
            self._events.append(DeliveriesReceived(link=link))

    def _answer_detach_later(self, link: Link, closed: bool) -> None:
        """Answer the peer's detach of ``link`` when the output is next taken (or the next input comes), once the
        layer above has handled the events of the input that brought it: the outcomes it gives the deliveries that
        came in that input go out before our detach (answered at once, they came after it, and the peer, which
        forgets the link's deliveries at our detach, held messages we took as in doubt)."""
        self._detach_answers[link] = closed

    def hold_detach_answer(self, link: Link) -> bool:
        """Leave the answer to the peer's detach of ``link`` to the layer above, which sends it with
        ``link.detach()`` when it is ready (say, once the outcomes of messages still being stored are given).
        False when no answer is pending (it was sent at once: no delivery awaited an outcome; or the layer above
        has detached)."""
        return self._detach_answers.pop(link, None) is not None

    def _answer_detaches(self) -> None:
        """Send the detaches :meth:`_answer_detach_later` kept (§2.6.4), but for links the layer above has
        detached meanwhile, or that ended with their session or the connection."""
        answers = self._detach_answers
        self._detach_answers = {}
        for link, closed in answers.items():
            if link.local_state is ACTIVE:
                link.detach(closed=closed)
                link.engine_ended = True

    def _flush_session(self, session: Session) -> None:
        if self._dirty_sessions.pop(session, 0) is None:
            session._flush()

    # --- channels ----------------------------------------------------------------------------------------

    def _no_channel_left(self, limit: int) -> bool:
        """Whether every channel up to ``limit`` is ours, or will be our answer to a session the peer began."""
        sessions = self._sessions_by_channel
        if len(sessions) + len(self._sessions_by_remote_channel) <= limit:
            return False  # the quick bound: counted exactly only near the limit
        unanswered = sum(1 for other in self._sessions_by_remote_channel.values() if other.channel is None)
        return len(sessions) + unanswered > limit

    def _allocate_channel(self, session: Session) -> int:
        limit = self.channel_max if self.remote_open is None else min(self.channel_max, self._remote_channel_max)
        freed = self._freed_channels
        channel = freed[0] if freed else self._next_channel
        if channel > limit:
            raise LocalProtocolError(
                f"no free channel: channel-max is {limit}", condition=conditions.RESOURCE_LIMIT_EXCEEDED
            )
        if freed:
            heapq.heappop(freed)
        else:
            self._next_channel += 1
        self._sessions_by_channel[channel] = session
        return channel

    def _free_channel(self, channel: int) -> None:
        del self._sessions_by_channel[channel]
        heapq.heappush(self._freed_channels, channel)

    def _release_channel(self, session: Session) -> None:
        if session.remote_state is ACTIVE:
            return  # the peer's end will release both maps (_on_end)
        if session.channel is not None and self._sessions_by_channel.get(session.channel) is session:
            self._free_channel(session.channel)
        if (
            session.remote_channel is not None
            and self._sessions_by_remote_channel.get(session.remote_channel) is session
        ):
            del self._sessions_by_remote_channel[session.remote_channel]

    # --- input -------------------------------------------------------------------------------------------

    def _process_input(self) -> None:
        decoder = self._decoder
        while self._phase != _DONE:
            if self._phase in (_AWAIT_SASL_HEADER, _AWAIT_AMQP_HEADER):
                received = None
                try:
                    parsed = decoder.next_protocol_header()
                except UnsupportedProtocolError as exc:
                    header = exc.header.to_bytes()
                except NotAProtocolHeader as exc:
                    header, received = b"", exc.received  # not an AMQP protocol header at all: said as it came
                else:
                    if parsed is None:
                        return
                    header = parsed.to_bytes()
                self._on_protocol_header(header, received)
                continue
            if self._phase == _AMQP and self.remote_open is not None and self.remote_state is not CLOSED:
                # The ordinary transfers first, in one loop (transfer_intake); then the next frame, whatever it is.
                self.frames_received += take_transfers(self)
            raw = decoder.next_raw_frame()
            if raw is None:
                return
            self.frames_received += 1
            self._on_raw_frame(*raw)

    def _on_protocol_header(self, header: bytes, received: bytes | None = None) -> None:
        """§2.2 / §5.3.1: accept the header we expect; otherwise answer with the one we support and stop.

        ``header`` is the AMQP protocol header the peer sent, or ``b""`` when its first bytes (``received``, named in
        the error: an HTTP response, a TLS record...) were none."""
        expected = SASL_HEADER if self._phase == _AWAIT_SASL_HEADER else AMQP_HEADER
        if self.role == SERVER and self._phase == _AWAIT_SASL_HEADER and not self.require_sasl:
            # SASL is offered but optional: a client may go straight to AMQP, and one that sends neither header is
            # answered with AMQP's (§2.2: the protocol supported without conditions).
            if header == AMQP_HEADER:
                self._phase = _AWAIT_AMQP_HEADER
            if header != SASL_HEADER:
                expected = AMQP_HEADER
        if header != expected:
            if not self._header_sent:
                self._write_header(expected)
            self._phase = _DONE
            self._header_refused_in_amqp = expected == AMQP_HEADER
            self._emit(
                ConnectionClosed(
                    error=error(
                        conditions.NOT_ALLOWED,
                        f"unsupported protocol header {describe_header(received or bytes(header))}; "
                        f"{expected!r} expected",
                    ),
                    remote=False,
                    protocol_header=bytes(header),
                )
            )
            return
        if self._phase == _AWAIT_SASL_HEADER:
            self._phase = _SASL
            if self.role == SERVER:
                self._write_header(SASL_HEADER)
                assert isinstance(self.sasl, SaslServer)
                for body in self.sasl.start():
                    self._write_frame(0, body, frame_type=FRAME_SASL)
            return
        self._phase = _AMQP
        if self.role == SERVER:
            self._write_header(AMQP_HEADER)
            self._header_sent = True
        if self._open_pending:
            self._open_pending = False
            self._write_open()

    def _on_raw_frame(self, frame_type: int, channel: int, data: bytes, body: int, end: int) -> None:
        if self._phase == _SASL:
            if frame_type != FRAME_SASL:
                raise RemoteProtocolError("an AMQP frame during SASL", condition=conditions.CONNECTION_FRAMING_ERROR)
            self._on_sasl_frame(self._decode_body(data, body, end))
            return
        if frame_type != FRAME_AMQP:
            raise RemoteProtocolError(
                f"frame type {frame_type} after SASL", condition=conditions.CONNECTION_FRAMING_ERROR
            )
        if body == end:
            return  # an empty frame: the peer is alive (§2.4.5)
        if self.remote_state is CLOSED:
            return  # §2.4.3: nothing may follow close; ignore it
        fields = None
        if (
            end - body > 3  # a body too short for a descriptor and a list is the decoder's to refuse
            and data[body] == 0
            and data[body + 1] == 0x53
            and self.remote_open is not None
        ):
            code = data[body + 2]
            if code == 0x14:
                # The hot path: a transfer, read as a bare field list (no Transfer object). Its parser reads only
                # the common layouts, each field in an encoding of its type; any other goes through the composite
                # decoder below, which checks every field's type (a handle that is a list must not reach the
                # session maps).
                try:
                    fields = parse_transfer_fields(data, body + 3, end)
                except (IndexError, StructError):  # a field cut short by the end of the bytes: the decoder says so
                    fields = None
            elif code == 0x15:
                # A disposition (the outcome of a confirmed send, one per message at low rates) in a common layout:
                # read by hand, then handled as the decoder's would be; any other layout goes the decoder's way.
                try:
                    disposition = parse_disposition(data, body + 3, end)
                except (IndexError, StructError):
                    disposition = None
                if disposition is not None:
                    self._on_session_frame(channel, disposition)
                    return
        if fields is not None:
            after = body + 5 + data[body + 4]  # the payload follows the list8 of fields
            session = self._sessions_by_remote_channel.get(channel)
            if session is None:
                session = self._session_for(channel)  # raises
            # The payload is copied once: a frame with more to come stays a view into the received bytes (the link
            # joins the frames of the delivery), the last (usually the only) frame is sliced out as bytes.
            payload = memoryview(data)[after:end] if len(fields) > 5 and fields[5] is True else data[after:end]
            try:
                session._on_transfer(fields, payload)
            except RemoteProtocolError as exc:
                _transfer_failed(session, fields, exc)
            return
        performative, after = decode_value(data, body)
        if after > end:
            raise DecodeError("the performative overruns its frame", offset=body)
        if isinstance(performative, Transfer):
            # A transfer in an unusual encoding (a symbolic or wide descriptor): the slow path.
            if self.remote_open is None:
                raise RemoteProtocolError(
                    "the first frame must be open, got Transfer", condition=conditions.NOT_ALLOWED
                )
            fields = [getattr(performative, field.name) for field in Transfer.fields]
            session = self._session_for(channel)
            try:
                session._on_transfer(fields, data[after:end])
            except RemoteProtocolError as exc:
                _transfer_failed(session, fields, exc)
            return
        if after != end:
            raise DecodeError("bytes follow the performative in a frame that carries no payload", offset=after)
        if self.remote_open is None:
            if not isinstance(performative, Open):
                raise RemoteProtocolError(
                    f"the first frame must be open, got {type(performative).__name__}",
                    condition=conditions.NOT_ALLOWED,
                )
            self._on_open(performative)
            return
        handler = _HANDLERS.get(type(performative))
        if handler is None:
            raise RemoteProtocolError(
                f"{type(performative).__name__} is not a performative", condition=conditions.CONNECTION_FRAMING_ERROR
            )
        handler(self, channel, performative)

    def _decode_body(self, data: bytes, body: int, end: int) -> Any:
        performative, after = decode_value(data, body)
        if after != end:
            raise DecodeError("bytes follow the performative in a frame that carries no payload", offset=after)
        return performative

    def _on_sasl_frame(self, body: Any) -> None:
        sasl = self.sasl
        assert sasl is not None
        for reply in sasl.on_frame(body):
            self._write_frame(0, reply, frame_type=FRAME_SASL)
        result = sasl.result
        if result is None:
            return
        self.sasl_outcome = result
        if not result.ok:
            self._phase = _DONE
            err = result.error
            self._emit(
                ConnectionClosed(
                    error=error(
                        conditions.UNAUTHORIZED_ACCESS, err.description if err is not None else "authentication failed"
                    ),
                    remote=self.role == CLIENT,
                    sasl_code=result.code,
                )
            )
            return
        self._emit(Authenticated(mechanism=result.mechanism, identity=result.identity))
        self._phase = _AWAIT_AMQP_HEADER
        if self.role == CLIENT:
            self._write_header(AMQP_HEADER)
            if self._open_pending:
                self._open_pending = False
                self._write_open()
        else:
            self._header_sent = False  # the server answers the client's AMQP header with its own

    def _session_for(self, channel: int) -> Session:
        session = self._sessions_by_remote_channel.get(channel)
        if session is None:
            if channel > self.channel_max:
                # §2.7.1: a channel beyond channel-max closes the connection with framing-error.
                raise RemoteProtocolError(
                    f"frame on channel {channel} beyond channel-max {self.channel_max}",
                    condition=conditions.CONNECTION_FRAMING_ERROR,
                )
            raise RemoteProtocolError(f"no session on channel {channel}", condition=conditions.NOT_ALLOWED)
        return session

    def _on_open(self, frame: Open) -> None:
        if frame.max_frame_size < MIN_MAX_FRAME_SIZE:
            raise RemoteProtocolError(
                f"max-frame-size {frame.max_frame_size} is below {MIN_MAX_FRAME_SIZE}",
                condition=conditions.FRAME_SIZE_TOO_SMALL,
            )
        least = self.least_remote_idle_timeout
        asked = frame.idle_time_out
        if asked and least and asked < least * 1000:
            # §2.4.5: "If a peer can not, for any reason support a proposed idle timeout, then it SHOULD close the
            # connection using a close frame with an error explaining why. There is no requirement for peers to
            # support arbitrarily short or long idle timeouts."
            raise RemoteProtocolError(
                f"idle-time-out {asked} ms asked is shorter than the least we support, "
                f"{round(least * 1000)} ms (§2.4.5)",
                condition=conditions.INVALID_FIELD,
            )
        self.remote_open = frame
        self.remote_state = ACTIVE
        self._remote_max_frame_size = frame.max_frame_size
        self._max_transfer_payload = frame.max_frame_size - TRANSFER_OVERHEAD
        self._remote_channel_max = frame.channel_max
        self._remote_idle_timeout = (frame.idle_time_out or 0) / 1000.0
        self._emit(ConnectionOpened(open=frame))

    def _on_close(self, channel: int, frame: Close) -> None:
        self.remote_state = CLOSED
        self.remote_error = frame.error
        peer_initiated = self.local_state is not CLOSED
        dropped: tuple[Delivery, ...] = ()
        if peer_initiated and self.answer_close:
            dropped = self._incomplete_deliveries()  # what the answer drops, for the event to name
            self.close()  # §2.4.3: answer the close
            self.engine_ended = True
        self._phase = _DONE
        # ``remote`` says who started the close: the peer, or we (and this is its answer).
        error = frame.error if peer_initiated else self.local_error
        self._emit(ConnectionClosed(error=error, remote=peer_initiated, dropped=dropped))

    def _on_begin(self, channel: int, frame: Begin) -> None:
        if channel > self.channel_max:
            # §2.7.1: a channel beyond channel-max closes the connection with framing-error.
            raise RemoteProtocolError(
                f"begin on channel {channel} beyond channel-max {self.channel_max}",
                condition=conditions.CONNECTION_FRAMING_ERROR,
            )
        if channel in self._sessions_by_remote_channel:
            raise RemoteProtocolError(f"begin on channel {channel}, which is in use", condition=conditions.NOT_ALLOWED)
        if frame.remote_channel is not None:
            session = self._sessions_by_channel.get(frame.remote_channel)
            if session is None or session.remote_state is not UNINIT:
                raise RemoteProtocolError(
                    f"begin answers channel {frame.remote_channel}, where we began no session",
                    condition=conditions.NOT_ALLOWED,
                )
        else:
            limit = min(self.channel_max, self._remote_channel_max)
            if self._no_channel_left(limit):
                # Our answer needs a channel within the peer's channel-max (§2.7.1), and the peer, which set it,
                # has them all: none is left to answer on, so nothing of this session can be written.
                raise RemoteProtocolError(
                    f"begin on channel {channel}: no channel is left to answer on within channel-max {limit}",
                    condition=conditions.RESOURCE_LIMIT_EXCEEDED,
                )
            session = Session(self, incoming_window=self.incoming_window)
        session.remote_channel = channel
        self._sessions_by_remote_channel[channel] = session
        session._on_begin(frame)
        self._emit(SessionBegun(session=session))

    def _on_end(self, channel: int, frame: End) -> None:
        session = self._session_for(channel)
        session._on_end(frame)
        self._sessions_by_remote_channel.pop(channel, None)
        local_done = session.local_state is not ACTIVE
        if local_done and session.channel is not None and self._sessions_by_channel.get(session.channel) is session:
            self._free_channel(session.channel)

    def _on_session_frame(self, channel: int, frame: Any) -> None:
        session = self._session_for(channel)
        if session.local_state is CLOSED and not self._taken_after_our_end(session, frame):
            # §2.5.1: after our end, frames other than the peer's end are ignored.
            return
        try:
            _SESSION_HANDLERS[type(frame)](session, frame)
        except RemoteProtocolError as exc:
            if exc.scope == "connection":
                raise
            self._session_error(session, exc)

    def _taken_after_our_end(self, session: Session, frame: Any) -> bool:
        """What is still taken from a session we ended: once we closed the connection, the peer's dispositions
        until its close (a program that sends and closes at once learns the outcomes of what it sent, as proton's
        does); and, by a layer that answers ends or detaches itself (proton's engine model, proton's container),
        the peer's detach (it reports the link closed, as proton does: ``on_link_closed`` of a link the program
        closed with its session or connection)."""
        kind = type(frame)
        if kind is Disposition:
            return self.local_state is CLOSED and session.engine_ended
        return kind is Detach and not (self.answer_close and self.answer_detach)

    def _session_error(self, session: Session, exc: RemoteProtocolError) -> None:
        """§2.8.16 session errors: end the session with the condition (a :class:`SessionEnded`, ``remote=False``).

        A session the peer began and we have not answered yet is begun and ended at once (§2.5.1: an end follows
        a begin). Before our open (a server that has not answered the peer's open yet) nothing can be written for
        a session: the error closes the connection instead (raised again with the connection's scope).
        """
        if session.local_state is CLOSED:
            return  # ended already: the peer's frames are dropped until its end (§2.5.1)
        if self.local_state is not ACTIVE:
            raise RemoteProtocolError(exc.description, condition=exc.condition) from exc
        if session.local_state is UNINIT:
            session.begin()
        err = error(exc.condition, exc.description)
        dropped = session.incomplete_deliveries()  # what the end drops, for the event to name
        session.end(err)
        session.engine_ended = True
        session.end_reported = True
        self._emit(SessionEnded(session=session, error=err, remote=False, dropped=dropped))

    def _link_error(self, link: Link, exc: RemoteProtocolError) -> None:
        """§2.8.17 link errors: detach the link, closed, with the condition (a :class:`LinkDetached`,
        ``remote=False``).

        A link the peer attached and we have not answered yet is attached (with null termini) and detached at once,
        the way a link is refused (§2.6.3). Before our begin of its session nothing can be written for the link:
        the error ends the session instead (:meth:`_session_error`).
        """
        session = link.session
        if link.local_state is CLOSED:
            return  # detached already: the peer's frames are dropped until its detach (§2.6.4)
        if session.local_state is not ACTIVE or self.local_state is not ACTIVE:
            self._session_error(session, RemoteProtocolError(exc.description, condition=exc.condition, scope="session"))
            return
        err = error(exc.condition, exc.description)
        dropped = session.incomplete_deliveries(link)  # what the detach drops, for the event to name
        link.detach(closed=True, error=err)
        link.engine_ended = True
        link.detach_reported = True
        self._emit(LinkDetached(link=link, error=err, closed=True, remote=False, dropped=dropped))

    def _on_transport_end(self) -> None:
        self._phase = _DONE
        self._transport_closed = True
        if self.remote_state is not CLOSED:
            self._emit(
                ConnectionClosed(
                    error=error(conditions.CONNECTION_FORCED, "the transport ended before the peer closed"),
                    remote=True,
                    transport_ended=True,
                    # Nothing more can be written: what still waits for a session window is lost with the transport
                    # (after our close, nothing: the close dropped it, and the layer above learned it then).
                    dropped=self._incomplete_deliveries() if self.local_state is ACTIVE else (),
                )
            )

    def _fail(
        self, condition: str, description: str, sasl_code: int | None = None, *, idle_expired: bool = False
    ) -> None:
        """Close the connection because of the peer (or of a timeout: ``idle_expired`` for the peer's silence past
        our idle timeout): our close carries the condition."""
        err = error(condition, description)
        dropped: tuple[Delivery, ...] = ()
        if self._phase in (_AMQP,) and self.local_state is not CLOSED:
            dropped = self._incomplete_deliveries()  # what the close drops, for the event to name
            if self.local_state is UNINIT:
                self._write_open()
            self._close_endpoints()
            self.local_state = CLOSED
            self.local_error = err
            self._write_frame(0, Close(error=err))
        self.engine_ended = True
        self._phase = _DONE
        self._emit(
            ConnectionClosed(error=err, remote=False, sasl_code=sasl_code, idle_expired=idle_expired, dropped=dropped)
        )


def _transfer_failed(session: Session, fields: Any, exc: RemoteProtocolError) -> None:
    """A transfer broke a rule: end the link or the session it concerns, or (re-raised) the connection."""
    connection = session.connection
    if exc.scope == "link":
        # The handle was checked before a link-scoped error could be raised: the link is known.
        connection._link_error(session._links_by_remote_handle[fields[0]], exc)
    elif exc.scope == "session":
        connection._session_error(session, exc)
    else:
        raise exc


_SESSION_HANDLERS: dict[type, Any] = {
    Attach: Session._on_attach,
    Flow: Session._on_flow,
    Disposition: Session._on_disposition,
    Detach: Session._on_detach,
}

_HANDLERS: dict[type, Any] = {
    Begin: Connection._on_begin,
    End: Connection._on_end,
    Close: Connection._on_close,
    Attach: Connection._on_session_frame,
    Flow: Connection._on_session_frame,
    Disposition: Connection._on_session_frame,
    Detach: Connection._on_session_frame,
}
