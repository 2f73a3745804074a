"""proton's engine API on our engine: a :class:`~amqp_async.proton.Transport` bound to a
:class:`~amqp_async.proton.Connection` by a program that does its own I/O.

proton's engine is itself Sans-IO: the program pushes the bytes it read into the transport, takes the bytes to write
from it (``pending``/``peek``/``pop``), tells it the time (``tick``) and reads what happened from a
:class:`~amqp_async.proton.Collector`. :class:`EngineIO` is that over :class:`amqp_async.protocol.Connection`:

- the protocol engine is made on the first I/O call, not at ``bind``, because proton programs configure SASL
  (``transport.sasl()``) after binding; what the application opened before is replayed onto it then;
- input: :meth:`EngineIO.push` feeds the engine and turns its events into proton's, in proton's order
  (``CONNECTION_REMOTE_OPEN``, ``SESSION_INIT``, ``SESSION_REMOTE_OPEN``...);
- output: :meth:`EngineIO.process` (run by ``pending``) writes what the application asked since (unsettled delivery
  states, queued messages), reports ``LINK_FLOW`` for the senders that sent, as proton's transport does when it
  writes transfers, and collects the engine's bytes;
- the two halves of the byte stream end separately, as in proton: ``TRANSPORT_HEAD_CLOSED`` once our close is
  written and taken (or ``close_head``), ``TRANSPORT_TAIL_CLOSED`` at ``close_tail``, then ``TRANSPORT_CLOSED``.
"""

from __future__ import annotations

import uuid
from collections import deque
from typing import TYPE_CHECKING, Any

from .. import protocol
from ..protocol import events as ev
from ..protocol.endpoint import EndpointState
from ._condition import Condition
from ._delivery import Delivery
from ._events import Event

if TYPE_CHECKING:
    from ._endpoints import Connection, Receiver, Sender
    from ._tls import TlsLayer
    from ._transport import Transport

__all__ = ["CAPACITY", "EngineIO"]

#: what ``capacity()`` offers: proton's default input buffer (a frame of the default size fits in a few pushes).
CAPACITY = 16384
_DELIVERY_EVENT = Event.DELIVERY
_EOS = -1


class EngineIO:
    """The engine of one bound transport, and the two halves of its byte stream."""

    def __init__(self, transport: Transport, connection: Connection) -> None:
        self.transport = transport
        self.connection = connection
        self.engine: protocol.Connection | None = None
        self.out = bytearray()
        self.head_closed = False
        self.tail_closed = False
        self.now = 0.0
        #: senders that wrote transfers since the last ``process`` (each gets a LINK_FLOW, as in proton).
        self.sent: dict[Sender, None] = {}
        #: incoming deliveries whose local state was updated (written, unsettled, at the next ``process``).
        self.updated: list[Delivery] = []
        self.error_reported = False
        #: the SASL outcome when authentication failed here, before any outcome frame (proton: PERM).
        self.sasl_code: int | None = None
        #: what the program's push/pending/peek/pop reach: this object, or the TLS layer over it (made at start).
        self.wire: EngineIO | TlsLayer = self

    # --- the engine --------------------------------------------------------------------------------------

    def start(self) -> protocol.Connection:
        """Make the protocol engine from the transport's and connection's settings (on the first I/O call)."""
        engine = self.engine
        if engine is not None:
            return engine
        transport = self.transport
        connection = self.connection
        server = transport.mode == transport.SERVER
        ssl_layer = transport._ssl
        tls: TlsLayer | None = None
        if ssl_layer is not None and ssl_layer.domain is not None:
            tls = self.wire = ssl_layer._layer(self)
        sasl_layer = transport._sasl
        sasl: Any = None
        if sasl_layer is not None:
            sasl = sasl_layer._engine_sasl(server, connection, None if tls is None else tls.peer_subject)
        engine = protocol.Connection(
            role=protocol.SERVER if server else protocol.CLIENT,
            container_id=connection.container or str(uuid.uuid4()),
            hostname=connection.hostname,
            max_frame_size=transport.max_frame_size,
            channel_max=transport.channel_max,
            idle_timeout=transport.idle_timeout or None,
            advertised_idle_timeout=transport.idle_timeout / 2 or None,  # proton's: half, as §2.4.5 advises
            properties=connection.properties,
            offered_capabilities=connection.offered_capabilities,
            desired_capabilities=connection.desired_capabilities,
            sasl=sasl,
            require_sasl=sasl is not None and sasl_layer is not None and sasl_layer._required(),
            answer_detach=False,
            answer_close=False,
        )
        self.engine = engine
        connection._bind(engine)
        return engine

    # --- input -------------------------------------------------------------------------------------------

    def push(self, data: bytes | bytearray | memoryview) -> None:
        """Feed received bytes to the engine and report what they did."""
        engine = self.start()
        engine.receive_data(data, self.now)
        self.translate(engine.next_events())
        self.scan_partial()

    def close_tail(self) -> None:
        """No more input: the peer's half of the stream ended."""
        if self.tail_closed:
            return
        engine = self.start()
        if not engine.closed:
            engine.receive_data(b"", self.now)
            self.translate(engine.next_events())
        self._tail_closed()

    def fail(self, condition: Condition) -> None:
        """The layer under the engine failed (TLS): the transport's error, and the end of its input."""
        transport = self.transport
        if transport.condition is None:
            transport.condition = condition
        if not self.error_reported:
            self.error_reported = True
            self.put(Event.TRANSPORT_ERROR, transport)
        self._tail_closed()

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
        updated = self.updated
        if updated:
            self.updated = []
            for delivery in updated:
                if not delivery._settled_here:
                    delivery.link._send_state(delivery)
        sent = self.sent
        if sent:
            self.sent = {}
            put = self.put
            for sender in sent:
                sender._pump()
                put(Event.LINK_FLOW, sender)
        for buffer in engine.buffers_to_send(self.now):
            if not self.out and buffer.__class__ is bytearray:
                self.out = buffer  # ours (the engine made a new one): taken, not copied (most calls take one)
            else:
                self.out += buffer
        events = engine.next_events()
        if events:
            self.translate(events)

    def output_done(self) -> bool:
        """True once nothing more will be written: our close went out, or the engine stopped (it failed, or the
        transport ended before the peer closed)."""
        engine = self.engine
        if engine is None:
            return False
        if engine.local_state is EndpointState.CLOSED:
            return True
        return engine.closed and engine.remote_state is not EndpointState.CLOSED

    def closed_cleanly(self) -> bool:
        """True when our close went out (the output ended as AMQP says, not because the engine failed)."""
        engine = self.engine
        return engine is not None and engine.local_state is EndpointState.CLOSED

    def remote_closed(self) -> bool:
        """True once the peer's close arrived."""
        engine = self.engine
        return engine is not None and engine.remote_state is EndpointState.CLOSED

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

    def close_head(self) -> None:
        """No more output will be taken."""
        if not self.head_closed:
            self.head_closed = True
            self.put(Event.TRANSPORT_HEAD_CLOSED, self.transport)
            if self.tail_closed:
                self.put(Event.TRANSPORT_CLOSED, self.transport)

    def tick(self, now: float) -> float:
        """Heartbeats and the idle timeout (§2.4.5); returns when to tick next (0: nothing to wait for)."""
        self.now = now
        engine = self.start()
        deadline = engine.tick(now)
        events = engine.next_events()
        if events:
            self.translate(events)
        return 0.0 if deadline is None else deadline

    # --- events ------------------------------------------------------------------------------------------

    def put(self, event_type: Any, context: Any) -> None:
        collector = self.connection._collector
        if collector is not None:
            collector.put(context, event_type)

    def translate(self, events: list[ev.Event]) -> None:
        """Turn the engine's events into proton's."""
        put = self.put
        connection = self.connection
        for event in events:
            kind = type(event)
            if kind is ev.DeliveriesReceived:
                link = event.link  # type: ignore[attr-defined]
                self._received(link.user_data, link.incoming)
            elif kind is ev.DeliveriesUpdated:
                updated = []
                for engine_delivery in event.deliveries:  # type: ignore[attr-defined]
                    delivery = engine_delivery.user_data
                    if delivery is not None:
                        delivery._updated = True
                        updated.append(delivery)
                collector = connection._collector
                if collector is not None:
                    collector.put_each(updated, _DELIVERY_EVENT)  # one call for the many deliveries of a disposition
            elif kind is ev.FlowReceived:
                link = event.link  # type: ignore[attr-defined]
                if link is not None and link.user_data is not None:
                    wrapper = link.user_data
                    if wrapper.is_sender and wrapper._pending:
                        self.sent[wrapper] = None
                    put(Event.LINK_FLOW, wrapper)
            elif kind is ev.ConnectionOpened:
                put(Event.CONNECTION_REMOTE_OPEN, connection)
                if self.engine is not None and self.engine.remote_idle_timeout:
                    put(Event.TRANSPORT, self.transport)
            elif kind is ev.SessionBegun:
                from ._endpoints import session_begun_by_peer  # here, not per call: most calls bring deliveries

                session, made = session_begun_by_peer(connection, event.session)  # type: ignore[attr-defined]
                if made:
                    put(Event.SESSION_INIT, session)
                put(Event.SESSION_REMOTE_OPEN, session)
            elif kind is ev.LinkAttached:
                from ._endpoints import Sender, link_attached_by_peer

                wrapper, made = link_attached_by_peer(event.link)  # type: ignore[attr-defined]
                if made:
                    put(Event.LINK_INIT, wrapper)
                put(Event.LINK_REMOTE_OPEN, wrapper)
                if isinstance(wrapper, Sender) and wrapper._pending:
                    self.sent[wrapper] = None
            elif kind is ev.LinkDetached:
                wrapper = event.link.user_data  # type: ignore[attr-defined]
                if wrapper is None:
                    continue
                if event.remote or wrapper._local == 4:  # type: ignore[attr-defined]
                    put(Event.LINK_REMOTE_CLOSE if event.closed else Event.LINK_REMOTE_DETACH, wrapper)  # type: ignore[attr-defined]
                else:
                    # The engine detached the link: the peer broke a link rule.
                    wrapper._local = 4
                    error = event.error  # type: ignore[attr-defined]
                    wrapper.condition = None if error is None else Condition.from_error(error)
                    put(Event.LINK_LOCAL_CLOSE, wrapper)
                    put(Event.TRANSPORT, self.transport)
            elif kind is ev.SessionEnded:
                session = event.session.user_data  # type: ignore[attr-defined]
                if session is None:
                    continue
                if event.remote or session._local == 4:  # type: ignore[attr-defined]
                    put(Event.SESSION_REMOTE_CLOSE, session)
                else:
                    session._local = 4
                    error = event.error  # type: ignore[attr-defined]
                    session.condition = None if error is None else Condition.from_error(error)
                    put(Event.SESSION_LOCAL_CLOSE, session)
                    put(Event.TRANSPORT, self.transport)
            elif kind is ev.ConnectionClosed:
                self._closed(event)  # type: ignore[arg-type]

    def _closed(self, event: ev.ConnectionClosed) -> None:
        engine = self.engine
        if engine is not None and engine.remote_state is EndpointState.CLOSED:
            self.put(Event.CONNECTION_REMOTE_CLOSE, self.connection)
            return
        error_name = None if event.error is None else str(event.error.condition)
        if event.sasl_code is not None or error_name == "amqp:unauthorized-access":
            description = event.error.description if event.error is not None else None
            condition = Condition("amqp:unauthorized-access", description or "Authentication failed")
            # No mechanism fitted, or the peer's messages failed its checks: proton's outcome is PERM (3).
            self.sasl_code = 3 if event.sasl_code is None else event.sasl_code
        elif event.transport_ended:
            condition = Condition("amqp:connection:framing-error", "connection aborted")
        elif event.error is not None:
            condition = Condition.from_error(event.error)
        else:
            return
        self.fail(condition)

    def _received(self, receiver: Receiver, incoming: deque[Any]) -> None:
        """Incoming deliveries arrived whole (or their last frames did): each becomes proton's (if its first frames
        did not already make it so) and is reported by a DELIVERY event. One call for all of them: this runs for
        every message."""
        received = []
        while incoming:
            engine_delivery = incoming.popleft()
            delivery: Delivery | None = engine_delivery.user_data
            if delivery is None:
                delivery = Delivery(receiver, engine_delivery.tag, engine_delivery)
                engine_delivery.user_data = delivery
                receiver._incoming.append(delivery)
                receiver._unsettled_count += 1
            delivery._payload = engine_delivery.payload
            received.append(delivery)
        collector = self.connection._collector
        if collector is not None:
            collector.put_each(received, _DELIVERY_EVENT)

    def scan_partial(self) -> None:
        """Report the deliveries whose first frames arrived (proton hands them over as they come: ``partial``)."""
        for session in self.connection._sessions:
            for link in session._links:
                impl = link._impl
                if impl is None or link.is_sender:
                    continue
                current = impl._current
                if current is None:
                    continue
                size = impl._current_size
                delivery: Delivery | None = current.user_data
                if delivery is None:
                    delivery = Delivery(link, current.tag, current)
                    current.user_data = delivery
                    link._incoming.append(delivery)  # type: ignore[attr-defined]
                    link._unsettled_count += 1  # type: ignore[attr-defined]
                elif delivery._payload is not None and len(delivery._payload) == size:
                    continue
                delivery._payload = b"".join(impl._current_parts)
                self.put(Event.DELIVERY, delivery)
