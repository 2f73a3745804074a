"""The producer side of a client connection of the embedded broker: the links on which a client sends, attached
to a queue, a topic or the anonymous relay, what the broker keeps for each (:class:`Inbound`), the messages taken on
them (in parts as their frames come: :mod:`._assembly`) and routed, and their outcomes (a durable message's once it
is stored), with the credit held back from a session whose producer leaves too many of them unsettled.

Split out of :mod:`._connection`, whose :class:`~._connection.ServerConnection` calls these with itself as
``connection``.
"""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING, Any

from .. import protocol
from ..codec import conditions
from ..codec.delivery_states import Accepted, Rejected
from ..codec.performatives import RCV_SECOND, Error
from ..codec.terminus import Target
from ..codec.transactions import Coordinator, TransactionalState
from ..errors import DecodeError
from ..protocol.endpoint import ACTIVE
from ..protocol.errors import LocalProtocolError
from ..protocol.streaming import StreamingDelivery
from ..types import symbol
from ._assembly import Assembly, memory_refusal
from ._bodies import BodyFile
from ._consumers import not_an_address
from ._flow import NoRoomForNode, Producer
from ._nodes import ENTRY_OVERHEAD, Entry, Queue, Topic
from ._store import is_durable

if TYPE_CHECKING:
    from ._connection import ServerConnection

__all__ = [
    "AWAITING_SETTLEMENT_LIMIT",
    "Inbound",
    "attach_inbound",
    "on_deliveries",
    "settle_stored",
    "settled_incoming",
]

log = logging.getLogger("amqp_async.broker")

#: The most of a session's messages that may wait for their producer's settlement (receiver settle mode second,
#: §2.6.12: the broker's outcome is sent unsettled, and the producer settles it): beyond it, the session's producers
#: get no credit until they settle (a producer that never does would otherwise make the broker keep a delivery for
#: every message it ever sent).
AWAITING_SETTLEMENT_LIMIT = 4096
_ACCEPTED = Accepted()


def _error(condition: str, description: str) -> Error:
    return Error(condition=symbol(condition), description=description)


class Inbound:
    """What the broker keeps for a link on which a client sends: its target address (None: anonymous relay), and
    the link as the flow control sees it."""

    def __init__(self, link: protocol.ReceiverLink, address: str | None, producer: Producer, topic: bool) -> None:
        self.link = link
        self.address = address
        #: the target is a topic (its address's prefix, or its capability ``topic``, says so).
        self.topic = topic
        self.producer = producer
        #: the message arriving in parts on the link, if any (:mod:`._assembly`).
        self.assembly: Assembly | None = None
        #: durable messages whose outcome waits for the store's commit.
        self.storing = 0
        #: the peer detached the link (closing it: True) while messages were being stored: our detach waits for
        #: their outcomes (None: no detach waits).
        self.detach_answer: bool | None = None

    def drop(self) -> None:
        """The link is gone: a message it was bringing in parts is dropped."""
        assembly = self.assembly
        if assembly is not None:
            self.assembly = None
            assembly.drop()


def attach_inbound(connection: ServerConnection, link: protocol.ReceiverLink) -> None:
    target = link.remote_target
    if isinstance(target, Coordinator):
        connection._attach_coordinator(link)
        return
    broker = connection.broker
    node: Queue | Topic | None = None
    try:
        if isinstance(target, Target) and target.dynamic:
            address: str | None = broker._temporary_address()
            broker.queue(address, dynamic=True)  # type: ignore[arg-type]
        elif isinstance(target, Target) or target is None:
            address = None if target is None else target.address
            if address is not None and not isinstance(address, str):
                connection._refuse(link, conditions.INVALID_FIELD, not_an_address("target", address))
                return
        else:
            description = f"targets of type {type(target).__name__} are not supported"
            connection._refuse(link, conditions.NOT_IMPLEMENTED, description)
            return
        dynamic = isinstance(target, Target) and bool(target.dynamic)  # a temporary queue, whatever it says
        topic = not dynamic and address is not None and broker._is_topic(address, getattr(target, "capabilities", None))
        if address is not None:
            # A target with the capability topic names a topic, as a source with it does (the receivers that
            # subscribe to it); its messages used to go to a queue of that name, which no subscriber read.
            node = broker.topic(address) if topic else broker.queue(address)  # made on first attach
    except NoRoomForNode as exc:
        connection._refuse(link, conditions.RESOURCE_LIMIT_EXCEEDED, str(exc))
        return

    def grant(room: int) -> None:
        if link.local_state is not ACTIVE:
            return
        if link.session.unsettled_incoming >= AWAITING_SETTLEMENT_LIMIT:
            # Receiver settle mode second (§2.6.12): each message waits, with its delivery, for the producer's
            # settlement; one that does not settle gets no more credit until it does (ServerConnection._on_outcomes).
            # A durable message waits for the store's commit too, before we settle it (settle_stored).
            connection._awaiting_settlement = True
            return
        link.grant_credit(max(0, room - len(link.incoming)))  # those received take their room too
        connection.kick()

    # Its credit counts the messages received and not routed yet: they take room that is not taken yet.
    inbound = Inbound(link, address, Producer(lambda: link.credit + len(link.incoming), grant, node), topic)
    link.user_data = inbound
    # A message of several frames is taken frame by frame (in memory within the memory limit, or to disk), never
    # joined by the engine: see _assembly.
    link.streaming = True
    answer = Target(address=address, dynamic=bool(getattr(target, "dynamic", False)))
    link.attach(
        source=link.remote_source,
        target=answer,
        snd_settle_mode=link.remote_snd_settle_mode,
        rcv_settle_mode=link.remote_rcv_settle_mode,
        max_message_size=connection.broker.max_message_size,
    )
    link.max_message_size = connection.broker.max_message_size
    connection._inbound[inbound] = None
    broker.flow.hold_endpoint()  # until _on_detach or release
    broker.flow.add(inbound.producer)  # its first credit: a window, or the room the limits leave
    log.info("link %r attached: %s sends to %s", link.name, connection.peer, address or "(anonymous relay)")


def on_deliveries(connection: ServerConnection, link: protocol.ReceiverLink, inbound: Inbound) -> None:
    broker = connection.broker
    second = link.rcv_settle_mode == RCV_SECOND
    delivery: Any  # a whole one, or a StreamingDelivery once all its parts came
    while True:
        assembly = inbound.assembly
        if assembly is not None:
            # A message in parts (a streamed delivery, §2.6.14): its frames are taken as they come.
            complete = assembly.take()
            delivery = assembly.delivery
            if assembly.refusal is not None and not (delivery.settled or delivery.remote_settled):
                # refused before its end: said at once, so that the sender can stop (the rest is dropped)
                link.settle(delivery, Rejected(error=assembly.refusal), settled=not second)
            if not complete:
                break
            inbound.assembly = None
            if delivery.aborted or delivery.interrupted or assembly.refusal is not None:
                assembly.drop()
                continue
            try:
                payload, body = assembly.finish()
            except (DecodeError, OSError) as exc:
                assembly.drop()
                if not delivery.remote_settled:
                    refused = _error(conditions.DECODE_ERROR, f"the message does not decode: {exc}")
                    link.settle(delivery, Rejected(error=refused), settled=not second)
                continue
        elif link.incoming:
            delivery = link.incoming.popleft()
            if delivery.__class__ is StreamingDelivery:
                inbound.assembly = Assembly(delivery, broker.flow, broker.spool, broker.large_message_size)
                continue
            if delivery.aborted:
                continue
            payload = bytes(delivery.payload)
            if second:
                delivery.payload = b""  # the entry holds it; the delivery waits for the producer's settlement
            body = None
        else:
            break
        _take_message(connection, link, inbound, delivery, payload, body, second)
    if link.local_state is ACTIVE:
        broker.flow.top_up(inbound.producer)


def _fan_out_refusal(connection: ServerConnection, address: str, entry: Entry, topic: bool) -> tuple[int, Error | None]:
    """The bytes a message to a topic takes in all (its payload once, and each copy's bookkeeping: Entry.copy), and
    the error refusing it when they do not fit the memory limit (None: they fit, the address is a queue's, or there
    is no limit).

    The check as a message arrives (:func:`._assembly.memory_refusal`) counts one copy: each message sent on credit
    granted before the topic's subscriptions grew in number (or before its producer's credit was lowered for them,
    §2.6.7) passed it and took its ``ENTRY_OVERHEAD`` (256 bytes) once more per subscription: under a 4 MiB limit,
    a message to 200 subscriptions held the broker 28 kB past it. Counted here for every subscription that is not
    full (those whose selector would not take it too: the selectors run once, when it is published).
    """
    broker = connection.broker
    flow = broker.flow
    if flow.max_memory is None or not (topic or broker._is_topic(address)):
        return 0, None
    node = broker.topics.get(address)
    copies = 0 if node is None else sum(1 for queue in node.subscriptions.values() if not queue.full)
    if copies <= 1:
        return 0, None  # one copy at most: counted whole as it arrived (its bookkeeping aside, as for a queue)
    bookkeeping = entry.size - len(entry.payload)
    needed = entry.size + (copies - 1) * bookkeeping
    description = f"message of {len(entry.payload)} bytes to {copies} subscriptions ({needed} bytes in all)"
    return needed, memory_refusal(flow, needed, description)


def _take_message(
    connection: ServerConnection,
    link: protocol.ReceiverLink,
    inbound: Inbound,
    delivery: Any,
    payload: bytes,
    body: BodyFile | None,
    second: bool,
) -> None:
    """Route one message a producer sent (``payload``: its bytes, or, with ``body``, its leading sections and
    the file that holds it) and give its outcome (a durable one's once it is stored)."""
    broker = connection.broker
    storage = broker.storage
    refusal = None
    transaction = None
    txn_state = delivery.remote_state
    if isinstance(txn_state, TransactionalState):
        transaction = connection.transactions.get(txn_state.txn_id)
    if isinstance(txn_state, TransactionalState) and transaction is None:
        refusal = connection.transactions.refusal(txn_state.txn_id)  # unknown-id, or timeout (§4.5.8)
    elif broker.max_message_size and len(payload) > broker.max_message_size:
        refusal = _error(
            conditions.LINK_MESSAGE_SIZE_EXCEEDED, f"message larger than max-message-size {broker.max_message_size}"
        )
    elif body is None and (unfit := memory_refusal(broker.flow, len(payload), f"message of {len(payload)} bytes")):
        refusal = unfit  # in memory, it would pass the limit (one in parts was checked as it came: _assembly)
        broker.flow.took(inbound.producer, len(payload) + ENTRY_OVERHEAD)  # its credit counted at its size
    else:
        entry = Entry(payload, body=body)
        broker.flow.took(inbound.producer, entry.size)  # its credit is counted in messages of its size
        address = inbound.address
        if address is None:
            try:
                address = entry.message.address
            except DecodeError as exc:
                refusal = _error(conditions.DECODE_ERROR, f"the message does not decode: {exc.description}")
            else:
                if address is None:
                    refusal = _error(conditions.NOT_FOUND, "anonymous relay needs the message's to address")
        if refusal is None and address is not None:
            topic = inbound.topic and address == inbound.address  # not a relayed message's own address
            if transaction is not None:
                transaction.publish(address, entry, topic=topic)  # §4.4.1: visible at commit, gone at rollback
            else:
                held = broker.flow.held_bytes
                needed, refusal = _fan_out_refusal(connection, address, entry, topic)
                if refusal is None:
                    refusal = broker.route(address, entry, topic)
                    needed = broker.flow.held_bytes - held
                # A topic's copies share the payload, each counted with its bookkeeping (Entry.copy): its credit is
                # counted at what the message took in all. Counted at one copy's size, a producer of 100-byte
                # messages to 50 subscribers (2.7 kB each in all) held credit for seven times the room: 1,675 of
                # 3,000 were rejected under a 4 MiB limit rather than waited for credit.
                broker.flow.took(inbound.producer, needed)
    if delivery.remote_settled:
        return
    state: Any = _ACCEPTED if refusal is None else Rejected(error=refusal)
    if transaction is not None:
        # §4.4.1: the outcome of a transactional transfer is given within the transaction
        if refusal is None:
            state = transaction.accepted
        else:
            state = TransactionalState(txn_id=transaction.txn_id, outcome=state)
    elif refusal is None and storage is not None and is_durable(payload):
        # a durable message is accepted once it is stored: after the commit of the batch now open
        inbound.storing += 1
        storage.after_commit(functools.partial(settle_stored, connection, link, delivery, state, not second, inbound))
        return
    link.settle(delivery, state, settled=not second)


def settled_incoming(connection: ServerConnection, deliveries: list[Any]) -> None:
    """Messages producers sent are settled: by the producer (receiver settle mode second), or by us once the
    store committed a durable one. Once a session waits on few enough, its producers that were refused credit
    for it get credit again."""
    sessions = {delivery.link.session for delivery in deliveries if delivery.link.user_data.__class__ is Inbound}
    resumed = [session for session in sessions if session.unsettled_incoming < AWAITING_SETTLEMENT_LIMIT // 2]
    if not resumed:
        return
    connection._awaiting_settlement = any(
        inbound.link.session.unsettled_incoming >= AWAITING_SETTLEMENT_LIMIT // 2 for inbound in connection._inbound
    )
    for inbound in connection._inbound:
        if inbound.link.session in resumed:
            connection.broker.flow.top_up(inbound.producer)
    connection.kick()


def settle_stored(
    connection: ServerConnection,
    link: protocol.ReceiverLink,
    delivery: Any,
    state: Any,
    settled: bool,
    inbound: Inbound | None = None,
) -> None:
    """Send the outcome that waited for the store's commit (unless the link has gone meanwhile: the client
    then holds the message in doubt), and, on a producer's link (``inbound``), our answer to the producer's
    detach once no outcome waits."""
    if inbound is not None:
        inbound.storing -= 1
    if link.local_state is not ACTIVE or connection.engine.closed:
        return
    try:
        link.settle(delivery, state, settled=settled)
        if inbound is not None and not inbound.storing and inbound.detach_answer is not None:
            link.detach(closed=inbound.detach_answer)  # §2.6.4, after the outcomes the producer waits for
    except LocalProtocolError:
        return  # its session ended meanwhile
    if settled and connection._awaiting_settlement:
        # Settled by us (mode first): the messages waiting for the store held the session's credit back
        # (grant()), and no settlement of the producer's will come to give it again. Before, a producer of
        # durable messages pipelined to --data-dir stalled for good once 4,096 waited for a commit.
        settled_incoming(connection, [delivery])
    connection.kick()
