"""proton's engine API on our engine: a :class:`~amqp_async.proton.Transport` a program drives itself, bound to a
:class:`~amqp_async.proton.Connection` (or not yet).

proton's engine is itself Sans-IO: the program pushes the bytes it read into the transport, takes the bytes to write
from it (``pending``/``peek``/``pop``), tells it the time (``tick``) and reads what happened from a
:class:`~amqp_async.proton.Collector`. :class:`EngineIO` is that over :class:`amqp_async.protocol.Connection`:

- the protocol engine is made on the first I/O call, not at ``bind`` (proton programs configure SASL after binding),
  and a transport works before it is bound, as proton's does: a client writes its protocol header at once, bad input
  fails it, and what the peer opened is found on the connection bound later;
- input: :meth:`EngineIO.push` feeds the engine and turns its events into proton's, in proton's order
  (``CONNECTION_REMOTE_OPEN``, ``SESSION_INIT``, ``SESSION_REMOTE_OPEN``...; see :mod:`._engine_input`);
- output: :meth:`EngineIO.process` (run by ``pending``) applies what the application did to its endpoints since the
  last call, in the order proton's transport writes it (:mod:`._engine_output`), and collects the engine's bytes;
- a transport error is proton's: the condition, ``TRANSPORT_ERROR``, then the input ends (``TRANSPORT_TAIL_CLOSED``);
  in the AMQP layer our open (if it was not sent) and a close carrying the condition are still written;
- the two halves of the byte stream end separately: ``TRANSPORT_HEAD_CLOSED`` once our close is written and taken
  (or ``close_head``), ``TRANSPORT_TAIL_CLOSED`` at ``close_tail``, then ``TRANSPORT_CLOSED``;
- time: :meth:`EngineIO.tick` keeps proton's idle-timeout clock (§2.4.5): the peer is declared dead when no byte came
  for our idle timeout counted from the tick that first saw the input quiet, and an empty frame goes out when
  nothing was written for half the peer's.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from .. import protocol
from ..codec import conditions
from ..codec.framing import (
    AMQP_HEADER,
    FRAME_AMQP,
    MAX_FRAME_SIZE,
    encode_frame,
)
from ..codec.performatives import Close, Open
from ..protocol import events as ev
from ..protocol.endpoint import CLOSED, UNINIT
from . import _engine_input, _engine_output
from ._condition import QUOTED_BYTES_MAX, Condition, authentication_failure, header_failure
from ._events import Event

if TYPE_CHECKING:
    from ._endpoints import Connection, Endpoint
    from ._tls import TlsLayer
    from ._transport import Transport

__all__ = ["CAPACITY", "IMPL_CHANNEL_MAX", "EngineIO", "first_bytes", "no_header"]

#: what ``capacity()`` offers: proton's default input buffer (a frame of the default size fits in a few pushes).
CAPACITY = 16384
#: the highest channel proton's engine uses (its ``PN_IMPL_CHANNEL_MAX``): a larger channel_max is lowered to it.
IMPL_CHANNEL_MAX = 32767
_EOS = -1
#: proton's condition for a client refused by policy (not one of §2.8.15's).
_POLICY_ERROR = "amqp:connection:policy-error"


def first_bytes(engine: protocol.Connection | None, header: bytes) -> bytes:
    """The peer's first bytes, for an error about them (proton names all it read with them): ``header``, the
    protocol header the engine took (``b""`` for bytes that began none), and every byte that came with it and after
    it, over all the reads (a peer may send its header a few bytes at a time: ``AM`` then ``QX`` is ``AMQX``), as
    many as proton quotes at most.

    The engine read nothing before: the eight bytes it took as a header, if it took them, are those before the
    position in the decoder's piece (they are made one piece first), else ``header``; the unread bytes follow.
    """
    if engine is None:
        return header
    decoder = engine._decoder
    data, position = decoder.piece()
    taken = bytes(data[:position]) if position else header
    return taken + decoder._peek(min(decoder.buffered, QUOTED_BYTES_MAX))


def no_header(engine: protocol.Connection | None, expected: str | None) -> Condition:
    """The transport's condition when the input ended before a whole protocol header, in proton's words: the bytes
    that came of one named, else "no protocol header found". ``expected`` as for :func:`header_failure`."""
    if engine is not None and engine._decoder.buffered:
        return header_failure(first_bytes(engine, b""), expected=expected, ended=True)
    if expected is None:
        text = "No protocol header found (connection aborted)"
    else:
        text = f"Expected {expected} protocol header: no protocol header found (connection aborted)"
    return Condition(str(conditions.CONNECTION_FRAMING_ERROR), text)  # (a str, as proton's names are)


class EngineIO:
    """The engine of one program-driven transport, and the two halves of its byte stream."""

    def __init__(self, transport: Transport) -> None:
        self.transport = transport
        self.connection: Connection | None = None
        self.engine: protocol.Connection | None = None
        self.out = bytearray()
        self.head_closed = False
        self.tail_closed = False
        #: the transport's clock: the last time given to tick (proton's input and output go by it too).
        self.now = 0.0
        #: what the program's push/pending/peek/pop reach: this object, or the TLS layer over it (made at start).
        self.wire: EngineIO | TlsLayer = self
        #: the SASL outcome when authentication failed here, before any outcome frame (proton: PERM).
        self.sasl_code: int | None = None
        #: the engine's events while no connection is bound (translated when one is).
        self.unbound_events: list[ev.Event] = []
        #: our close went out (written by the engine, or after a transport error): nothing more is written.
        self.close_written = False
        # proton's idle-timeout clock (§2.4.5): bytes counted in and out, and the deadlines derived from them.
        self.bytes_in = 0
        self.bytes_out = 0
        self._dead_deadline = 0.0
        self._last_bytes_in = 0
        self._keepalive_deadline = 0.0
        self._last_bytes_out = 0
        self._idle_posted = False
        #: whether the engine expected a protocol header before the input being handled (judging its end)
        self._awaiting_header = False
        #: the SASL layer ran (the peer's SASL header came): without a successful outcome, no user is known
        self.sasl_used = False
        # proton's output processing (see _engine_output): endpoints the application changed since the last
        # ``process``, and deliveries with work for the transport (its tpwork list).
        self.modified: dict[Endpoint, None] = {}
        self.tpwork: dict[Any, None] = {}

    # --- the engine --------------------------------------------------------------------------------------

    def start(self) -> protocol.Connection:
        """Make the protocol engine from the transport's settings (on the first I/O call)."""
        engine = self.engine
        if engine is not None:
            return engine
        transport = self.transport
        server = transport.mode == transport.SERVER
        ssl_layer = transport._ssl
        tls: TlsLayer | None = None
        if ssl_layer is not None and ssl_layer.domain is not None:
            tls = self.wire = ssl_layer._layer(self)
        sasl_layer = transport._sasl
        sasl: Any = None
        connection = self.connection
        if sasl_layer is not None or server:
            # A proton server takes a client with SASL or without, whatever it configured (its autodetect layer);
            # it requires SASL only when told to (require_auth).
            sasl_layer = transport.sasl()
            sasl = sasl_layer._engine_sasl(server, connection, None if tls is None else tls.peer_subject)
        engine = protocol.Connection(
            role=protocol.SERVER if server else protocol.CLIENT,
            container_id="" if connection is None else connection._container_id(),
            hostname=None if connection is None else connection.hostname,
            max_frame_size=transport.max_frame_size or MAX_FRAME_SIZE,
            channel_max=transport.channel_max,
            advertised_idle_timeout=transport.idle_timeout / 2 or None,  # proton's: half, as §2.4.5 advises
            sasl=sasl,
            require_sasl=sasl is not None and (not server or transport._auth_required()),
            answer_detach=False,
            answer_close=False,
            least_remote_idle_timeout=0.0,  # proton keeps any idle-time-out its peer asks for
        )
        self.engine = engine
        engine.send_header()  # a client's header goes out at once, bound or not (proton's)
        if connection is not None:
            connection._bind(engine)
        return engine

    def bind(self, connection: Connection) -> None:
        """Carry ``connection`` from now on: what the peer already opened is found on it (proton's bind after the
        peer's open)."""
        self.connection = connection
        connection._bound = self
        self.put(Event.CONNECTION_BOUND, connection)
        connection._incref()  # the transport's reference (proton's pn_connection_bound)
        engine = self.engine
        if engine is not None:
            connection._bind(engine)
            events, self.unbound_events = self.unbound_events, []
            self.translate(events)
            self.scan_partial()

    def unbind(self) -> None:
        """Let the connection go: its remote state is forgotten, every endpoint has work again (proton's)."""
        connection = self.connection
        if connection is None:
            return
        from ._engine_lifecycle import unbound

        self.put(Event.CONNECTION_UNBOUND, connection)
        unbound(connection, self)
        self.connection = None

    # --- input -------------------------------------------------------------------------------------------

    def push(self, data: bytes | bytearray | memoryview) -> None:
        """Feed received bytes to the engine and report what they did."""
        engine = self.start()
        self.bytes_in += len(data)
        was_sasl = engine.in_sasl
        self._awaiting_header = engine.awaiting_header
        frames = engine.frames_received
        engine.receive_data(data, self.now)
        if was_sasl and (engine.sasl_outcome is not None or (engine.in_sasl and not engine.awaiting_header)):
            # The SASL layer ran (the peer's SASL header came). A SASL frame that gives it frames to write (a
            # mechanism chosen, an outcome) is reported with a TRANSPORT event, as proton does.
            self.sasl_used = True
            if engine.frames_received > frames and engine.has_output:
                self.put(Event.TRANSPORT, self.transport)
        self.handle(engine.next_events(), was_sasl)

    def close_tail(self) -> None:
        """No more input: the peer's half of the stream ended (proton: ``TRANSPORT_TAIL_CLOSED`` first, then what
        the end of input means, an error unless the peer closed)."""
        if self.tail_closed:
            return
        engine = self.start()
        self._tail_closed()
        if not engine.closed:
            was_sasl = engine.in_sasl
            self._awaiting_header = engine.awaiting_header
            engine.receive_data(b"", self.now)
            self.handle(engine.next_events(), was_sasl)

    def handle(self, events: list[ev.Event], was_sasl: bool = False) -> None:
        """Report the engine's events (on the bound connection, or later, once one is bound; a transport error at
        once)."""
        if self.connection is None:
            for event in events:
                engine = self.engine
                if event.__class__ is ev.ConnectionClosed and (engine is None or engine.remote_state is not CLOSED):
                    self._closed(event, was_sasl)
                else:
                    self.unbound_events.append(event)
            return
        self.translate(events, was_sasl)
        self.scan_partial()

    def translate(self, events: list[ev.Event], was_sasl: bool = False) -> None:
        _engine_input.translate(self, events, was_sasl)

    def scan_partial(self) -> None:
        _engine_input.scan_partial(self)

    def _closed(self, event: ev.ConnectionClosed, was_sasl: bool) -> None:
        """The engine stopped: the peer's close, or a transport error (proton's ``pn_do_error``)."""
        engine = self.engine
        if engine is not None and engine.remote_state is CLOSED:
            if engine.local_state is CLOSED:
                self.close_written = True
            return  # the peer's close: reported as CONNECTION_REMOTE_CLOSE (with the other events)
        error = event.error
        error_name = None if error is None else str(error.condition)
        if event.sasl_code is not None or error_name == conditions.UNAUTHORIZED_ACCESS:
            condition = authentication_failure(None if engine is None else engine.sasl, event.sasl_code, error)
            # No mechanism fitted, or the peer's messages failed its checks: proton's outcome is PERM (3).
            self.sasl_code = 3 if event.sasl_code is None else event.sasl_code
            self.fail(condition, frames=False)
        elif event.protocol_header is not None:
            header = event.protocol_header
            server = self.transport.mode == self.transport.SERVER
            if server and header == AMQP_HEADER:
                # proton's autodetect: a client that skips SASL where authentication is required.
                condition = Condition(_POLICY_ERROR, "Client skipped authentication - forbidden")
                self.fail(condition, frames=True)
                return
            expected = None if server else "SASL" if was_sasl else "AMQP"
            condition = header_failure(first_bytes(engine, header), expected=expected)
            # A client expecting SASL's header fails in its SASL layer, which writes no frames; a server (proton's
            # autodetect) and a client expecting AMQP's answer with AMQP's header, open and close.
            self.fail(condition, frames=server or not was_sasl)
        elif event.transport_ended:
            server = self.transport.mode == self.transport.SERVER
            if server and self._awaiting_header:
                # proton's autodetect: nothing came (no frames), or the header was cut short (header, open, close).
                frames = self.bytes_in > 0
                self.fail(no_header(engine, None), frames)
            else:
                condition = Condition(conditions.CONNECTION_FRAMING_ERROR, "connection aborted")
                if self._awaiting_header:
                    condition = no_header(engine, "SASL" if was_sasl else "AMQP")
                self.fail(condition, frames=not was_sasl)
        elif error is not None:
            # The engine closed the connection itself (a violation, a timeout): its close carries the condition.
            self.close_written = engine is not None and engine.local_state is CLOSED
            self.fail(Condition.from_error(error), frames=False)

    def fail(self, condition: Condition, frames: bool = True) -> None:
        """A transport error (proton's ``pn_do_error``): the transport's condition (the first one; a later one is
        added to its description), ``TRANSPORT_ERROR``, and the end of the input. In the AMQP layer (``frames``)
        our open, if it was not sent, and a close with the condition still go out, as proton writes them."""
        transport = self.transport
        if transport.condition is None:
            transport.condition = condition
        elif condition.description:
            first = transport.condition
            text = condition.description if not first.description else f"{first.description} ({condition.description})"
            transport.condition = Condition(first.name, text, first.info)
        self.put(Event.TRANSPORT_ERROR, transport)
        if frames and not self.close_written:
            self._write_error_frames(transport.condition)
        self._tail_closed()

    def _write_error_frames(self, condition: Condition) -> None:
        engine = self.engine
        self.close_written = True
        if engine is None:
            return
        out = bytearray()
        if not engine.header_sent:
            out += AMQP_HEADER
        if engine.local_state is UNINIT:
            encode_frame(out, FRAME_AMQP, 0, Open(container_id=""))
        if engine.local_state is not CLOSED:
            encode_frame(out, FRAME_AMQP, 0, Close(error=condition.to_error()))
        self.collect(engine)
        self.out += out

    def _tail_closed(self) -> None:
        if not self.tail_closed:
            self.tail_closed = True
            self.put(Event.TRANSPORT_TAIL_CLOSED, self.transport)
            if self.head_closed:
                self.put(Event.TRANSPORT_CLOSED, self.transport)

    # --- output ------------------------------------------------------------------------------------------

    def process(self) -> None:
        """Write what the application asked for since the last call, and collect the engine's bytes."""
        engine = self.start()
        if (
            self.connection is not None
            and not self.close_written
            and (not engine.closed or engine.remote_state is CLOSED)
        ):
            # (after the peer's close, the input is over but the application still answers it)
            _engine_output.process(self)
            if engine.local_state is CLOSED:
                self.close_written = True
        self.collect(engine)
        events = engine.next_events()
        if events:
            self.handle(events)

    def collect(self, engine: protocol.Connection) -> None:
        """Move the engine's output into ours."""
        for buffer in engine.buffers_to_send():
            if not self.out and buffer.__class__ is bytearray:
                self.out = buffer  # ours (the engine made a new one): taken, not copied (most calls take one)
            else:
                self.out += buffer

    def output_done(self) -> bool:
        """True once nothing more will be written: our close went out, or the engine stopped for good (it failed,
        or the transport ended before the peer closed)."""
        engine = self.engine
        if engine is None:
            return False
        if self.close_written or engine.local_state is CLOSED:
            return True
        return engine.closed and engine.remote_state is not CLOSED

    def closed_cleanly(self) -> bool:
        """True when our close went out (the output ended as AMQP says, not because the engine failed)."""
        engine = self.engine
        return engine is not None and engine.local_state is CLOSED

    def remote_closed(self) -> bool:
        """True once the peer's close arrived."""
        engine = self.engine
        return engine is not None and engine.remote_state is CLOSED

    def pending(self) -> int:
        """The bytes ready to write; -1 once the output has ended."""
        if self.head_closed:
            return _EOS
        self.process()
        if self.out:
            return len(self.out)
        if self.output_done():
            self.close_head()
            return _EOS
        return 0

    def popped(self, size: int) -> None:
        """The program took ``size`` bytes of our output."""
        self.bytes_out += size

    def close_head(self) -> None:
        """No more output will be taken."""
        if not self.head_closed:
            self.head_closed = True
            self.put(Event.TRANSPORT_HEAD_CLOSED, self.transport)
            if self.tail_closed:
                self.put(Event.TRANSPORT_CLOSED, self.transport)

    # --- time --------------------------------------------------------------------------------------------

    def tick(self, now: float) -> float:
        """Heartbeats and the idle timeout, by proton's rules (§2.4.5); returns when to tick next (0: nothing to wait
        for)."""
        self.now = now
        engine = self.start()
        deadline = 0.0
        local = self.transport.idle_timeout
        if local:
            if not self._dead_deadline or self._last_bytes_in != self.bytes_in:
                # Input came since the last look (or this is the first): the peer has ``local`` from now.
                self._dead_deadline = now + local
                self._last_bytes_in = self.bytes_in
            elif self._dead_deadline <= now:
                self._dead_deadline = now + local
                if not self._idle_posted:
                    self._idle_posted = True
                    self._expired(engine)
            deadline = self._dead_deadline
        remote = engine.remote_idle_timeout
        if remote and not self.close_written and engine.local_state is not CLOSED:
            if not self._keepalive_deadline or self._last_bytes_out != self.bytes_out:
                self._keepalive_deadline = now + remote / 2
                self._last_bytes_out = self.bytes_out
            elif self._keepalive_deadline <= now:
                self._keepalive_deadline = now + remote / 2
                if not self.out and not engine.has_output:
                    engine.write_empty_frame()
                    self.collect(engine)
                    self._last_bytes_out += len(self.out)  # counted as written: the next keepalive is due anyway
            deadline = min(deadline, self._keepalive_deadline) if deadline else self._keepalive_deadline
        return round(deadline, 6)

    def _expired(self, engine: protocol.Connection) -> None:
        """Our idle timeout expired: proton's error (outside SASL, our close carries it), and the input ends."""
        condition = Condition(conditions.RESOURCE_LIMIT_EXCEEDED, "local-idle-timeout expired")
        in_sasl = engine.in_sasl
        if not engine.closed:
            engine.fail(condition.name, condition.description or "")
            self.collect(engine)
            if engine.local_state is CLOSED:
                self.close_written = True
            self.engine_events()
        self.fail(condition, frames=not in_sasl)

    def engine_events(self) -> None:
        """Report the engine's events that are not connection ends (those are this object's to judge)."""
        engine = self.engine
        if engine is None:
            return
        events = [event for event in engine.next_events() if event.__class__ is not ev.ConnectionClosed]
        if events:
            if self.connection is None:
                self.unbound_events.extend(events)
            else:
                self.translate(events)

    # --- events ------------------------------------------------------------------------------------------

    def put(self, event_type: Any, context: Any) -> None:
        connection = self.connection
        collector = None if connection is None else connection._collector
        if collector is not None:
            collector.put(context, event_type)


def new_container_id() -> str:
    """A container id for a connection that has none (proton leaves it empty; ours names itself)."""
    return str(uuid.uuid4())
