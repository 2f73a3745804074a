"""proton's output processing for a connection a program drives: what the application did to its endpoints since
the last ``pending()``, applied to our engine in the order proton's transport writes it.

proton's transport goes through the endpoints the application changed (and the deliveries it has work for) in
phases, each over all of them: opens, begins and attaches; receivers' flows; deliveries (transfers, then
dispositions), twice; sessions' flows; senders' answers to a drain; detaches, ends, closes. :func:`process` does the
same, so frames go out in proton's order. A close waits while it would cut off deliveries the peer can still take
(proton's "pointful buffering"): a sender's detach while it has deliveries queued and the peer's link is attached, a
session's end likewise, and the connection's close until the peer's open has arrived.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..codec.transactions import TransactionalState
from ..protocol.endpoint import ACTIVE, CLOSED, UNINIT
from ..protocol.link import as_symbols
from ..types import symbol
from ._delivery import local_state_object
from ._engine_lifecycle import map_local, unmap_local
from ._engine_links import bound_held_message, full_settle, incoming_window, need_flow, post_session_window
from ._events import Event

if TYPE_CHECKING:
    from ..protocol import Connection as EngineConnection
    from ..protocol.link import ReceiverLink as EngineReceiver
    from ..protocol.link import SenderLink as EngineSender
    from ._delivery import Delivery
    from ._endpoints import Connection, Link, Sender, Session
    from ._engine import EngineIO

__all__ = ["process"]

_UNINIT, _ACTIVE, _CLOSED = 1, 2, 4
_ENGINE_ACTIVE = ACTIVE
_ENGINE_CLOSED = CLOSED


def process(io: EngineIO) -> None:
    """Apply the application's changes to the engine (see the module's docstring)."""
    connection = io.connection
    engine = io.engine
    assert connection is not None and engine is not None
    endpoints = connection._modified_endpoints
    if connection._setup_pending:
        connection._setup_pending = False
        _setup(io, connection, engine)
    if endpoints:
        for endpoint in list(endpoints):
            if getattr(endpoint, "is_receiver", False):
                _flow_receiver(endpoint)
    tpwork = connection._tpwork
    if tpwork:
        _tpwork(io, connection)
        if tpwork:
            _tpwork(io, connection)  # proton's second pass: settling may have made room (window, credit)
    for session in connection._sessions:
        if session._need_flow and session._engine_begun():
            post_session_window(session)
    if endpoints:
        for endpoint in list(endpoints):
            if getattr(endpoint, "is_sender", False):
                _flow_sender(endpoint)
        _teardown(connection, engine)
    if tpwork:
        connection._modified_endpoints[connection] = None  # deliveries still wait for credit or window


# --- setup -----------------------------------------------------------------------------------------------------


def _setup(io: EngineIO, connection: Connection, engine: EngineConnection) -> None:
    if connection._local != _UNINIT and engine.local_state is UNINIT:
        _open(io, connection, engine)
    if engine.local_state is not _ENGINE_ACTIVE:
        return
    for session in connection._sessions:
        if session._local != _UNINIT:
            _begin(session, engine)
    for session in connection._sessions:
        if not session._engine_begun():
            continue
        for link in session._links:
            if link._local != _UNINIT:
                _attach(link)


def _open(io: EngineIO, connection: Connection, engine: EngineConnection) -> None:
    """Our open, with the connection's settings as they are now (proton reads them when it writes the frame)."""
    transport = io.transport
    engine.container_id = connection._container_id()
    engine.hostname = connection.hostname
    engine.properties = _properties(connection.properties)
    engine.offered_capabilities = as_symbols(_symbols(connection.offered_capabilities))
    engine.desired_capabilities = as_symbols(_symbols(connection.desired_capabilities))
    engine.channel_max = transport.channel_max
    idle = transport.idle_timeout
    engine.advertised_idle_timeout = idle / 2 if idle else None
    engine.open()
    transport._open_sent = True


def _properties(value: Any) -> Any:
    """Connection properties as open carries them: string keys as symbols."""
    if value is None:
        return None
    return {symbol(key) if isinstance(key, str) else key: item for key, item in dict(value).items()}


def _symbols(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, str):
        return [value]
    from ._data import Data

    if isinstance(value, Data):
        from ._terminus import _data_value

        value = _data_value(value)
        if value is None:
            return None
    elements = getattr(value, "elements", None)  # an Array of symbols
    if elements is not None:
        value = elements
    return [str(item) for item in value]


def _begin(session: Session, engine: EngineConnection) -> None:
    impl = session._impl
    if impl is not None and impl.local_state is not UNINIT:
        return
    window = incoming_window(session)
    if impl is None:
        impl = session._impl = engine.begin_session(incoming_window=window, manual_window=True)
        impl.user_data = session
    else:
        impl.set_incoming_window(window)
        impl.begin()
    session._need_flow = False
    session._check_flow = False
    map_local(session)


def _attach(link: Link) -> None:
    impl = link._impl
    if impl is not None and impl.local_state is not UNINIT:
        return
    session_impl = link.session._impl
    if session_impl.remote_state is _ENGINE_CLOSED:
        return  # the peer ended the session: there is no attaching on it any more
    options = link._attach_options()
    if impl is None:
        attach = session_impl.attach_sender if link.is_sender else session_impl.attach_receiver
        impl = link._impl = attach(link.name, **options)
        impl.user_data = link
        bound_held_message(impl)
    else:
        impl.attach(**options)
    map_local(link)


# --- flows -----------------------------------------------------------------------------------------------------


def _flow_receiver(link: Any) -> None:
    """A receiver's credit as the application gave it (less what arrived and was not advanced past), with the
    session's window: a flow frame when either changed, or while a drain is asked."""
    impl = link._impl
    if link._local != _ACTIVE or impl is None or impl.local_state is not _ENGINE_ACTIVE:
        return
    session = link.session
    if not session._engine_begun():
        return
    wanted = max(link._credit - len(link._incoming), 0)
    if link._drain or impl.link_credit != wanted or need_flow(session):
        post_session_window(session)
        impl.grant_credit(wanted, drain=link._drain)


def _flow_sender(link: Sender) -> None:
    """The answer to the receiver's drain, once every delivery advanced is written: the credit left is given back
    (proton sends it only then)."""
    impl = link._impl
    if not link._drained_amount or link._local != _ACTIVE or impl is None or impl.local_state is not _ENGINE_ACTIVE:
        return
    if link._queued or link._in_flight:
        return
    link._drained_amount = 0
    if impl.drain:
        impl.drained()


# --- deliveries ------------------------------------------------------------------------------------------------


def _tpwork(io: EngineIO, connection: Connection) -> None:
    tpwork = connection._tpwork
    work = list(tpwork)
    tpwork.clear()  # what is still buffered after its turn goes back (proton clears the others)
    for delivery in work:
        link: Any = delivery.link
        if link.is_sender:
            if _sender_work(io, delivery):
                full_settle(delivery)
            elif not delivery._sent and (delivery._done or delivery._buffer or delivery in link._in_flight):
                tpwork[delivery] = None  # buffered (proton's pn_delivery_buffered)
        elif _receiver_work(delivery):
            full_settle(delivery)


def _sender_work(io: EngineIO, delivery: Delivery) -> bool:
    """Write what a sender's delivery has for the transport; True when it is done with."""
    link: Any = delivery.link
    engine_delivery = delivery._impl
    if delivery._aborted_here and engine_delivery is None:
        # Aborted before any frame went out: dropped, and the credit it would have used is still there.
        delivery._sent = True
        io.put(Event.LINK_FLOW, link)
        return True
    if delivery._sent:
        # Written (the usual second turn, once settled here): only its state or settlement is left to say.
        if engine_delivery is not None and not engine_delivery.remote_settled:
            _sender_disposition(link, delivery)
        return delivery._settled_here
    impl = link._impl
    session_impl = link.session._impl
    posted = False
    if (
        impl is not None
        and session_impl is not None
        and impl.local_state is _ENGINE_ACTIVE
        and session_impl.local_state is _ENGINE_ACTIVE
    ):
        in_flight = link._in_flight
        if delivery._aborted_here and not delivery._sent:
            if session_impl.unwritten(engine_delivery):
                _abort_written(link, delivery)
            elif delivery in in_flight:
                in_flight.remove(delivery)  # written whole before the abort: it stays written
                delivery._sent = True
                if delivery._done:
                    link._queued -= 1
        elif (
            not delivery._ended
            and (delivery._done or delivery._buffer)
            and impl.remote_state is _ENGINE_ACTIVE
            and session_impl.remote_incoming_window > 0
            and impl.link_credit + len(in_flight) > 0  # the transport's credit (see transport_credit)
            and (engine_delivery is not None or not session_impl.has_backlog)
        ):
            _write(link, delivery)
            posted = True
            io.put(Event.LINK_FLOW, link)
        if in_flight and delivery in in_flight and not session_impl.unwritten(delivery._impl):
            in_flight.remove(delivery)
            if delivery._done:
                delivery._sent = True
                link._queued -= 1
    if delivery._sent and not posted and delivery._impl is not None and not delivery._impl.remote_settled:
        _sender_disposition(link, delivery)
    return delivery._settled_here and delivery._sent


def _write(link: Any, delivery: Delivery) -> None:
    """Hand the delivery's bytes to the engine: its first frames (a credit used), or the next part."""
    buffer = delivery._buffer
    payload = buffer if buffer.__class__ is bytes else bytes(buffer)
    delivery._buffer = b""
    link.session._outgoing_held -= len(payload)
    impl = link._impl
    more = not delivery._done
    delivery._ended = not more
    if delivery._impl is None:
        engine_delivery = impl.send(
            payload,
            tag=delivery._tag,
            settled=delivery._settled_here,
            more=more,
            state=_transfer_state(delivery),
        )
        engine_delivery.user_data = delivery
        delivery._impl = engine_delivery
        if not more and not link.session._impl.unwritten(engine_delivery):
            # The usual case, a whole delivery written at once: written, no longer queued.
            delivery._sent = True
            link._queued -= 1
            return
        link._in_flight.append(delivery)
    else:
        impl.send_more(delivery._impl, payload, more=more)
        if delivery not in link._in_flight:
            link._in_flight.append(delivery)


def _transfer_state(delivery: Delivery) -> Any:
    state = delivery._transfer_state
    if state is not None:
        return state
    local = local_state_object(delivery) if delivery._local_type == 0x34 else None
    return local if isinstance(local, TransactionalState) else None


def _abort_written(link: Any, delivery: Delivery) -> None:
    """A delivery aborted after some of its frames went out: one aborted transfer tells the peer (§2.6.14)."""
    session_impl = link.session._impl
    session_impl.abort(delivery._impl)
    if delivery in link._in_flight:
        link._in_flight.remove(delivery)
    delivery._sent = True
    if delivery._done:
        link._queued -= 1


def _sender_disposition(link: Any, delivery: Delivery) -> None:
    """A sender's state or settlement for a delivery it wrote (proton sends both in a disposition)."""
    impl: EngineSender | None = link._impl
    engine_delivery = delivery._impl
    if impl is None or engine_delivery is None or impl.local_state is not _ENGINE_ACTIVE:
        return
    if engine_delivery.link is not impl:
        return  # a delivery of a transport that was unbound since
    state = local_state_object(delivery) if delivery._local_type else None
    if delivery._settled_here:
        impl.settle(engine_delivery, state)
    elif state is not None:
        impl.set_state(engine_delivery, state)


def _receiver_work(delivery: Delivery) -> bool:
    """Send a receiver's state or settlement; reopen the session's window if consuming made room."""
    link: Any = delivery.link
    session = link.session
    impl: EngineReceiver | None = link._impl
    engine_delivery = delivery._impl
    if (
        session._engine_begun()
        and engine_delivery is not None
        and not engine_delivery.remote_settled
        and impl is not None
        and impl.local_state is _ENGINE_ACTIVE
        and engine_delivery.link is impl
        and (delivery._local_type or delivery._settled_here)
    ):
        state = local_state_object(delivery) if delivery._local_type else None
        impl.settle(engine_delivery, state, settled=delivery._settled_here)
    if need_flow(session):
        post_session_window(session)
    return delivery._settled_here


# --- teardown --------------------------------------------------------------------------------------------------


def _teardown(connection: Connection, engine: EngineConnection) -> None:
    endpoints = connection._modified_endpoints
    for endpoint in list(endpoints):
        if getattr(endpoint, "_is_link", False) and _detach(endpoint, engine):
            endpoints.pop(endpoint, None)
    for endpoint in list(endpoints):
        if getattr(endpoint, "_is_session", False) and _end(endpoint, engine):
            endpoints.pop(endpoint, None)
    if connection in endpoints and _close(connection, engine):
        endpoints.pop(connection, None)


def _holds_back(engine: EngineConnection, session: Session | None) -> bool:
    """proton's "pointful buffering": a close that would strand queued deliveries waits (always until the peer's
    open came; for a session, while one of its senders has deliveries queued and its peer link is attached)."""
    if engine.remote_state is _ENGINE_CLOSED:
        return False
    if engine.remote_open is None:
        return True
    if session is None:
        return False
    session_impl = session._impl
    if session_impl is None or session_impl.remote_state is _ENGINE_CLOSED:
        return False
    for link in session._links:
        if link.is_sender and link.queued:
            link_impl = link._impl
            if link_impl is None or link_impl.remote_state is not _ENGINE_CLOSED:
                return True
    return False


def _detach(link: Any, engine: EngineConnection) -> bool:
    """Our detach, once the link is closed or detached here; False while it waits for queued deliveries."""
    if link._local != _CLOSED and not link._detached:
        return True
    impl = link._impl
    session = link.session
    if impl is None or impl.local_state is not _ENGINE_ACTIVE or not session._engine_begun():
        return True
    if engine.local_state is _ENGINE_CLOSED:
        return True
    if (
        link.is_sender
        and link._queued
        and impl.remote_state is not _ENGINE_CLOSED
        and (session._impl.remote_state is not _ENGINE_CLOSED)
        and engine.remote_state is not _ENGINE_CLOSED
    ):
        return False
    condition = link.condition
    impl.detach(closed=link._closes, error=None if condition is None else condition.to_error())
    unmap_local(link)
    return True


def _end(session: Session, engine: EngineConnection) -> bool:
    if session._local != _CLOSED:
        return True
    impl = session._impl
    if impl is None or impl.local_state is not _ENGINE_ACTIVE or engine.local_state is _ENGINE_CLOSED:
        return True
    if _holds_back(engine, session):
        return False
    condition = session.condition
    impl.end(None if condition is None else condition.to_error())
    unmap_local(session)
    return True


def _close(connection: Connection, engine: EngineConnection) -> bool:
    if connection._local != _CLOSED:
        return True
    if engine.local_state is _ENGINE_CLOSED:
        return True
    if _holds_back(engine, None):
        return False
    condition = connection.condition
    engine.close(None if condition is None else condition.to_error())
    return True
