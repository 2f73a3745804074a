"""proton's input events for a connection a program drives: our engine's events turned into proton's, in its order.

``CONNECTION_REMOTE_OPEN`` (then ``TRANSPORT`` when the peer asked for heartbeats), ``SESSION_INIT`` +
``SESSION_REMOTE_OPEN`` for a session the peer began, ``LINK_INIT`` + ``LINK_REMOTE_OPEN``, ``LINK_FLOW`` for each
link flow frame, ``DELIVERY`` for each delivery whose frames arrived (as they arrive: ``partial`` until the last) or
whose remote state changed, ``*_REMOTE_CLOSE`` / ``LINK_REMOTE_DETACH``, and ``CONNECTION_REMOTE_CLOSE`` followed by
the end of the input (``TRANSPORT_TAIL_CLOSED``): nothing may follow the peer's close. The transport's references to
the endpoints (see :mod:`._engine_lifecycle`) follow the peer's begins, attaches, detaches and ends.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..protocol import events as ev
from ..protocol.endpoint import CLOSED
from ._condition import Condition
from ._engine_lifecycle import map_remote, unmap_remote
from ._engine_links import count_incoming, modified, received, session_lwm
from ._events import Event

if TYPE_CHECKING:
    from ._endpoints import Receiver
    from ._engine import EngineIO

__all__ = ["scan_partial", "translate"]

_DELIVERY_EVENT = Event.DELIVERY
_CLOSED = CLOSED


def translate(io: EngineIO, events: list[ev.Event], was_sasl: bool = False) -> None:
    """Turn the engine's events into proton's (see the module's docstring)."""
    put = io.put
    connection = io.connection
    assert connection is not None
    for event in events:
        kind = type(event)
        if kind is ev.DeliveriesReceived:
            link = event.link  # type: ignore[attr-defined]
            if link.user_data is not None:
                _received(io, link.user_data, link)
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
                if wrapper.is_receiver:
                    drained = link.drained_credit
                    if drained:
                        # The sender gave credit back (a drain): proton counts it off the credit and as drained.
                        link.drained_credit = 0
                        wrapper._credit -= drained
                        wrapper._drained += drained
                put(Event.LINK_FLOW, wrapper)
        elif kind is ev.ConnectionOpened:
            put(Event.CONNECTION_REMOTE_OPEN, connection)
            engine = io.engine
            if engine is not None and engine.remote_idle_timeout:
                put(Event.TRANSPORT, io.transport)
        elif kind is ev.SessionBegun:
            from ._endpoints import session_begun_by_peer

            session, made = session_begun_by_peer(connection, event.session)  # type: ignore[attr-defined]
            if made:
                put(Event.SESSION_INIT, session)
            map_remote(session)
            put(Event.SESSION_REMOTE_OPEN, session)
        elif kind is ev.LinkAttached:
            from ._endpoints import link_attached_by_peer

            wrapper, made = link_attached_by_peer(event.link)  # type: ignore[attr-defined]
            if made:
                put(Event.LINK_INIT, wrapper)
            map_remote(wrapper)
            put(Event.LINK_REMOTE_OPEN, wrapper)
        elif kind is ev.LinkDetached:
            _detached(io, event)  # type: ignore[arg-type]
        elif kind is ev.SessionEnded:
            _ended(io, event)  # type: ignore[arg-type]
        elif kind is ev.ConnectionClosed:
            engine = io.engine
            if engine is not None and engine.remote_state is _CLOSED:
                put(Event.CONNECTION_REMOTE_CLOSE, connection)
                if engine.local_state is _CLOSED:
                    io.close_written = True
                if io.wire is io:
                    io._tail_closed()  # proton reads nothing after the peer's close (over TLS: after close_notify)
            else:
                io._closed(event, was_sasl)  # type: ignore[arg-type]


def _detached(io: EngineIO, event: ev.LinkDetached) -> None:
    link = event.link
    wrapper = link.user_data
    if wrapper is None:
        return
    if link.remote_state is _CLOSED:
        io.put(Event.LINK_REMOTE_CLOSE if event.closed else Event.LINK_REMOTE_DETACH, wrapper)
        if not event.closed:
            wrapper._remote_detached = True  # proton: a detach that does not close leaves the remote state
        unmap_remote(wrapper)
    else:
        # The engine detached the link: the peer broke a link rule.
        wrapper._local = 4
        error = event.error
        wrapper.condition = None if error is None else Condition.from_error(error)
        io.put(Event.LINK_LOCAL_CLOSE, wrapper)
        io.put(Event.TRANSPORT, io.transport)


def _ended(io: EngineIO, event: ev.SessionEnded) -> None:
    session = event.session.user_data
    if session is None:
        return
    if event.session.remote_state is _CLOSED:
        io.put(Event.SESSION_REMOTE_CLOSE, session)
        unmap_remote(session)
    else:
        session._local = 4
        error = event.error
        session.condition = None if error is None else Condition.from_error(error)
        io.put(Event.SESSION_LOCAL_CLOSE, session)
        io.put(Event.TRANSPORT, io.transport)


def _received(io: EngineIO, receiver: Receiver, link: Any) -> None:
    """Incoming deliveries arrived whole (or their last frames did): each is proton's (made now if its first frames
    did not make it already), its bytes counted, and reported by a DELIVERY event."""
    incoming = link.incoming
    deliveries = []
    session = receiver.session
    held = session._incoming_bytes
    while incoming:
        engine_delivery = incoming.popleft()
        delivery = engine_delivery.user_data
        if delivery is None:
            delivery = received(receiver, engine_delivery)
        payload = engine_delivery.payload
        delivery._payload = payload
        delivery._done = True
        # count_incoming, without the call (once per message): the bytes not counted yet are the session's
        size = len(payload)
        held += size - delivery._counted
        delivery._counted = size
        deliveries.append(delivery)
    session._incoming_bytes = held
    _window_check(receiver)
    collector = receiver.connection._collector
    if collector is not None:
        collector.put_each(deliveries, _DELIVERY_EVENT)


def scan_partial(io: EngineIO) -> None:
    """Report the deliveries whose first frames arrived (proton hands them over as they come: ``partial``)."""
    connection = io.connection
    if connection is None:
        return
    for session in connection._sessions:
        for link in session._links:
            impl = link._impl
            if impl is None or link.is_sender:
                continue
            current = impl._current
            if current is None:
                continue
            size = impl._current_size
            delivery = current.user_data
            if delivery is not None and delivery._counted == size:
                continue
            delivery = received(link, current)  # type: ignore[arg-type]
            delivery._payload = b"".join(impl._current_parts)
            count_incoming(session, delivery, size)
            _window_check(link)  # type: ignore[arg-type]
            io.put(Event.DELIVERY, delivery)


def _window_check(receiver: Receiver) -> None:
    """Transfers used the session's incoming window: below its low-water mark, the transport looks at reopening
    it at the next output (proton marks the link, without a TRANSPORT event)."""
    session = receiver.session
    impl = session._impl
    if impl is not None and impl.incoming_window < session_lwm(session) and not session._check_flow:
        session._check_flow = True
        modified(receiver, emit=False)
