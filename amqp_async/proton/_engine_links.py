"""proton's links and deliveries on a connection a program drives itself (the engine API).

proton keeps the application's view of a link apart from what its transport has written, and our engine API does
the same, over our engine:

- a sender's deliveries are made by ``sender.delivery(tag)``, filled by ``send(bytes)`` and finished by
  ``advance()``; they wait in the link (:attr:`Sender.queued`) until the transport writes them, which it does as
  ``pending()`` runs (:mod:`._engine_output`), while the peer gives credit. Bytes given before ``advance()`` go out
  then too, as a delivery in parts (``more`` set), as proton streams them;
- the credit the application reads is proton's: a sender's drops at ``advance()`` (it may go below zero), a
  receiver's is what it gave with ``flow``/``drain`` less the deliveries it advanced past, whatever has arrived
  (:attr:`Receiver.queued` counts those);
- a receiver's deliveries are readable as their first frames arrive (``partial`` until the last); what arrived and
  was not read is the session's ``incoming_bytes``, which, with ``incoming_capacity`` set, is what the session's
  incoming window is computed from (§2.5.6), as proton computes it;
- everything the application does to a delivery (an outcome, a settlement) is work for the transport (proton's
  tpwork list), done at the next ``pending()``.

The functions here are what the endpoint classes call when their connection belongs to no container.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

from ..protocol.link import Link as EngineLink
from ..protocol.link import ReceiverLink as EngineReceiver
from . import _delivery
from ._events import Event
from ._exceptions import LinkException

if TYPE_CHECKING:
    from ._delivery import Delivery
    from ._endpoints import Connection, Link, Receiver, Sender, Session

__all__ = [
    "HELD_MESSAGE_BOUND",
    "add_tpwork",
    "advance_receiver",
    "advance_sender",
    "bound_held_message",
    "full_settle",
    "incoming_window",
    "modified",
    "new_sender_delivery",
    "receiver_drain",
    "receiver_flow",
    "recv",
    "send_bytes",
    "sender_credit",
    "sender_drained",
    "session_lwm",
    "settle",
]

#: the incoming window of a session without flow control (proton's AMQP_MAX_WINDOW_SIZE).
MAX_WINDOW = 2147483647
_TRANSPORT_EVENT = Event.TRANSPORT


def modified(endpoint: Any, emit: bool = True) -> None:
    """The application changed ``endpoint``: it is work for the transport's next output (proton's pn_modified;
    ``emit``: also a TRANSPORT event, when a transport is bound)."""
    connection: Connection = endpoint if getattr(endpoint, "_is_connection", False) else endpoint.connection
    connection._modified_endpoints[endpoint] = None
    if emit:
        connection._modified()


def add_tpwork(delivery: Delivery) -> None:
    """``delivery`` has work for the transport (a transfer to write, a state or settlement to send)."""
    connection = delivery.link._connection
    connection._tpwork[delivery] = None
    # modified(connection), without the calls: several times per message
    connection._modified_endpoints[connection] = None
    bound = connection._bound
    collector = connection._collector
    if bound is not None and collector is not None:
        transport = bound.transport
        if collector._tail_context is not transport or collector._tail_type is not _TRANSPORT_EVENT:
            collector.put(transport, _TRANSPORT_EVENT)


def full_settle(delivery: Delivery) -> None:
    """The delivery is done with on both counts (settled here and, for a sender, written): forget it."""
    link = delivery.link
    link._deliveries.pop(delivery, None)
    link.session.connection._tpwork.pop(delivery, None)
    impl = delivery._impl
    if impl is not None:
        impl.user_data = None


def settle(delivery: Delivery) -> None:
    """proton's ``pn_delivery_settle``: the link's current delivery is advanced past first."""
    if delivery._settled_here:
        return
    link = delivery.link
    if link.current is delivery:
        link.advance()
    link._unsettled_count -= 1
    delivery._settled_here = True
    add_tpwork(delivery)


def update(delivery: Delivery, state: int) -> None:
    """proton's ``pn_delivery_update``: the local state goes out at the next output."""
    delivery._local_type = state
    local = delivery._local
    if local is not None:
        local.type = state
    add_tpwork(delivery)


def abort(delivery: Delivery) -> None:
    """proton's ``pn_delivery_abort``: the bytes not written yet are dropped, the delivery is settled."""
    if delivery._settled_here:
        return
    delivery._aborted_here = True
    settle(delivery)
    buffered = len(delivery._buffer)
    if buffered:
        delivery.link.session._outgoing_held -= buffered
        delivery._buffer = b""


# --- senders ---------------------------------------------------------------------------------------------------


def new_sender_delivery(sender: Sender, tag: bytes) -> Delivery:
    """A new delivery on ``sender``: the current one if there is none (proton's ``pn_delivery``)."""
    delivery = _delivery.Delivery(sender, tag)
    delivery._start_engine_state()
    sender._deliveries[delivery] = None
    sender._unsettled_count += 1
    if sender._current is None:
        sender._current = delivery
    return delivery


def send_bytes(sender: Sender, data: bytes) -> int:
    """Append ``data`` to the current delivery; returns how many bytes were taken."""
    current = sender._current
    if current is None:
        raise LinkException("no current delivery: call sender.delivery(tag) first")
    if not data:
        return 0
    buffer = current._buffer
    if not buffer:
        current._buffer = data  # the usual single send: kept as it is, not copied
    elif buffer.__class__ is bytes:
        current._buffer = bytearray(buffer) + data
    else:
        buffer += data
    sender.session._outgoing_held += len(data)
    add_tpwork(current)
    return len(data)


def advance_sender(sender: Sender) -> bool:
    """The current delivery is complete: it waits for the transport (queued), and uses a credit."""
    current = sender._current
    if current is None:
        return False
    current._done = True
    if not (current._aborted_here and current._impl is None):
        sender._queued += 1
    add_tpwork(current)
    deliveries = sender._deliveries
    if next(reversed(deliveries)) is current:
        sender._current = None  # the usual case: the delivery just made
    else:
        following = iter(deliveries)
        for delivery in following:
            if delivery is current:
                break
        sender._current = next(following, None)
    return True


def transport_credit(sender: Sender) -> int:
    """The credit as the transport counts it (proton's link state): what the peer gave, less the deliveries written
    completely (ours counts a delivery when its first frame goes: one still being written is added back)."""
    impl = sender._impl
    if impl is None:
        return 0
    return int(impl.link_credit) + len(sender._in_flight)


def sender_credit(sender: Sender) -> int:
    """proton's sender credit: the transport's, less the deliveries advanced and not yet written, and zero while
    a drain the application answered waits to be told."""
    return transport_credit(sender) - sender._queued - sender._drained_amount


def sender_drained(sender: Sender) -> int:
    """Answer the receiver's drain: the credit not used is given back once every delivery advanced is written."""
    impl = sender._impl
    credit = sender_credit(sender)
    if impl is None or not impl.drain or credit <= 0:
        return 0
    sender._drained_amount += credit
    modified(sender)
    return credit


# --- receivers -------------------------------------------------------------------------------------------------


def receiver_flow(receiver: Receiver, n: int) -> None:
    """Give ``n`` more credit (a flow ends a drain unless the application set the drain flag itself)."""
    receiver._credit += n
    modified(receiver)
    if not receiver._drain_flag_mode:
        receiver._drain = False
        receiver._drain_flag_mode = False


def receiver_drain(receiver: Receiver, n: int) -> None:
    """Give ``n`` more credit and ask the sender to use it all or give it back."""
    receiver._drain = True
    modified(receiver)
    receiver._drain_flag_mode = True
    receiver_flow(receiver, n)
    receiver._drain_flag_mode = False


def recv(receiver: Receiver, limit: int) -> bytes | None:
    """Read up to ``limit`` bytes of the current delivery: ``b""`` when none are here yet, None at its end."""
    incoming = receiver._incoming
    if not incoming:
        raise LinkException("no current delivery to read")
    current = incoming[0]
    if current._aborted_remote():
        raise LinkException("the delivery was aborted")
    payload = current._payload
    start = current._read
    size = 0 if payload is None else len(payload)
    if start >= size:
        return b"" if current.partial else None
    end = min(size, start + limit)
    current._read = end
    session = receiver.session
    session._incoming_bytes -= end - start
    _check_window(session, current)
    if start == 0 and end == size and payload.__class__ is bytes:
        return payload
    return bytes(payload[start:end])  # type: ignore[index]


def advance_receiver(receiver: Receiver) -> bool:
    """Move past the current delivery: it uses a credit, and what was not read of it is dropped."""
    incoming = receiver._incoming
    if not incoming:
        return False
    current = incoming.popleft()
    receiver._credit -= 1
    payload = current._payload
    dropped = (0 if payload is None else len(payload)) - current._read
    if dropped:
        current._read += dropped
        session = receiver.session
        session._incoming_bytes -= dropped
        _check_window(session, current)
    return True


def _check_window(session: Session, delivery: Delivery) -> None:
    """Bytes were consumed: if the incoming window is low, the transport looks at reopening it."""
    impl = session._impl
    if impl is not None and not session._check_flow and impl.incoming_window < session_lwm(session):
        session._check_flow = True
        add_tpwork(delivery)


def received(receiver: Receiver, engine_delivery: Any) -> Delivery:
    """The delivery of ``engine_delivery`` (made on its first frames) with the bytes that arrived so far counted as
    the session's ``incoming_bytes``."""
    delivery: Delivery | None = engine_delivery.user_data
    if delivery is None:
        delivery = _delivery.Delivery(receiver, engine_delivery.tag, engine_delivery)
        delivery._start_engine_state()
        engine_delivery.user_data = delivery
        receiver._incoming.append(delivery)
        receiver._deliveries[delivery] = None
        receiver._unsettled_count += 1
    return delivery


def count_incoming(session: Session, delivery: Delivery, size: int) -> None:
    """``delivery`` has ``size`` bytes now: the new ones are the session's."""
    new = size - delivery._counted
    if new > 0:
        delivery._counted = size
        session._incoming_bytes += new


# --- session flow control (§2.5.6), as proton computes it ------------------------------------------------------


def _frame_size(session: Session) -> int:
    """Our max-frame-size (0: no limit), which the session's window counts in."""
    transport = session.connection.transport
    return 0 if transport is None else transport.max_frame_size


def session_lwm(session: Session) -> int:
    """The incoming window below which the transport reopens it: half the capacity's frames (at least 1)."""
    capacity = session._incoming_capacity
    if not capacity:
        return 1
    frame = _frame_size(session)
    if capacity and frame:
        return max((capacity // frame) // 2, 1)
    return 1


def incoming_window(session: Session) -> int:
    """The incoming window to offer (in frames): all of it without a capacity, else what the capacity leaves
    free of the bytes received and not consumed, in frames of our max-frame-size."""
    capacity = session.incoming_capacity
    frame = _frame_size(session)
    if not frame or not capacity:
        return MAX_WINDOW
    if capacity < frame:
        return 0
    held = session._incoming_bytes
    return (capacity - held) // frame if capacity > held else 0


def need_flow(session: Session) -> bool:
    """proton's test for a session flow frame: asked for (a capacity set), or the window is low and would grow."""
    if session._need_flow:
        return True
    impl = session._impl
    if (
        session._check_flow
        and impl is not None
        and impl.incoming_window < session_lwm(session)
        and incoming_window(session) > impl.incoming_window
    ):
        return True
    session._check_flow = False
    return False


def post_session_window(session: Session) -> None:
    """Offer the window :func:`incoming_window` computes now (the flow frame the engine writes carries it)."""
    session._check_flow = False
    session._need_flow = False
    impl = session._impl
    if impl is not None:
        impl.set_incoming_window(incoming_window(session))


def new_receiver_state(receiver: Receiver) -> None:
    """A receiver's engine-API state (credit given, deliveries not advanced past, the drain flag)."""
    receiver._incoming = deque()
    receiver._credit = 0


def unsettled(link: Link) -> int:
    """The link's deliveries not settled here."""
    return link._unsettled_count


#: The most bytes of one message a receiver without a ``max_message_size`` holds (not announced: proton's
#: receivers announce none, and hand over a message of any size). A peer sending a message that never ends (its
#: transfers ``more`` for ever) made the process grow without bound (2.7 GB in 5 s); past this, the link is
#: detached with ``amqp:link:message-size-exceeded``, as for a ``max_message_size`` the program set.
HELD_MESSAGE_BOUND = 1 << 30


def bound_held_message(impl: EngineLink) -> None:
    """Bound what ``impl`` (an engine link just made) holds of one message, when it receives (see
    :data:`HELD_MESSAGE_BOUND`)."""
    if isinstance(impl, EngineReceiver):
        impl.held_message_bound = HELD_MESSAGE_BOUND
