"""The consumer side of a client connection of the embedded broker: the links on which a client receives, attached
to a queue or to a topic's subscription (durable ones recovered by their container id and link name), what the
broker keeps for each (:class:`Outbound`), the credit its queue's dispatch sees, the messages sent on it (large ones
streamed from disk: :mod:`._outbound`), and what becomes of its unsettled messages and of its subscription when it
goes (:func:`settle_by_default`, :func:`unsubscribe`).

Split out of :mod:`._connection`, whose :class:`~._connection.ServerConnection` calls these with itself as
``connection``.
"""

from __future__ import annotations

import functools
import logging
import re
import time
from typing import TYPE_CHECKING, Any

from .. import protocol
from ..codec import conditions
from ..codec.delivery_states import Accepted, Modified, Rejected, Released
from ..codec.performatives import SND_SETTLED, Error
from ..codec.terminus import COPY, NEVER, UNSETTLED_STATE, Source
from ..protocol.endpoint import ACTIVE
from ..types import Described, symbol
from ._flow import NoRoomForNode
from ._nodes import (
    WAITS_FOR_COMMIT,
    Consumer,
    ConsumerFailed,
    Entry,
    FailedAttempt,
    Queue,
    Topic,
    expired_description,
)
from ._outbound import stream_body
from .selector import SelectorError, compile_selector

if TYPE_CHECKING:
    from ._connection import ServerConnection
    from ._store import Store

__all__ = [
    "OUTPUT_LIMIT",
    "TERMINAL",
    "Outbound",
    "attach_outbound",
    "deal_then_answer_drain",
    "not_an_address",
    "settle_by_default",
    "unsubscribe",
]

log = logging.getLogger("amqp_async.broker")

#: The most output a connection queues for its socket before its consumers wait (a slow reader).
OUTPUT_LIMIT = 1 << 20

_SELECTOR_DESCRIPTORS = (symbol("apache.org:selector-filter:string"), 0x0000468C00000004)
#: The filter key under which a recovered durable subscription's selector is named (Qpid JMS's).
_JMS_SELECTOR = symbol("jms-selector")
#: The outcomes of §3.4 (terminal delivery states).
TERMINAL = (Accepted, Rejected, Released, Modified)


def not_an_address(field: str, value: object) -> str:
    """Why a terminus address that is not a string is refused: the broker's nodes are named by strings, the
    address-string of §3.5.3 and §3.5.4 (the fields' own type is ``*``, any type an address may take; here only a
    string names a node). A message's ``to`` is a string already where it decodes (§3.2.4)."""
    return f"the {field} address must be a string naming a node, got {type(value).__name__}"


class Outbound:
    """What the broker keeps for a link on which a client receives: its queue and consumer."""

    def __init__(
        self, link: protocol.SenderLink, queue: Queue, consumer: Consumer, owner: Topic | None, key: str | None
    ) -> None:
        self.link = link
        self.queue = queue
        self.consumer = consumer
        self.topic = owner
        self.key = key
        # §3.5.3 default-outcome: "used for transfers that have not reached a terminal state at the receiver when
        # the transfer is settled, including when the source is destroyed" (None: the broker's own choice)
        outcome = link.remote_source.default_outcome if isinstance(link.remote_source, Source) else None
        self.default_outcome = outcome if isinstance(outcome, TERMINAL) else None
        #: messages dealt to it pre-settled whose transfers wait for the store to commit their removal
        #: (:func:`_send_after_commit`), in order, each with the number of the commit it waits for.
        self.awaiting_commit: list[tuple[int, Entry]] = []
        #: the store's batch the last of those waits for (:attr:`._store.Store.batch`), and its number.
        self.commit_batch: object = None
        self.commit_number = 0


def _consumer_credit(connection: ServerConnection, link: protocol.SenderLink) -> int:
    """A consumer's credit as dispatch sees it: none while transfers wait for the client's session window
    (dispatch resumes at its next flow), nor while more than OUTPUT_LIMIT bytes wait for the socket (the rest
    goes once the socket took enough): a slow reader must not make us buffer without bound."""
    credit = link.link_credit
    if (
        credit <= 0
        or link.streaming is not None  # a large message goes out on it (_outbound): nothing else until it ends
        or connection._output_waiting  # too much output waits for the socket (_pause_output)
        or link.local_state is not ACTIVE
        or connection._ending  # released: what one consumer returns is not for its siblings on the dead connection
    ):
        return 0
    if link.session.remote_incoming_window <= 0:  # §2.5.6: the next transfer would wait in the session
        connection._window_shut.add(link.session)  # the flow that opens it unparks the session's consumers
        return 0
    outbound = link.user_data
    if isinstance(outbound, Outbound) and outbound.awaiting_commit:
        # dealt already, their transfers waiting for the store's commit; a large one goes alone (it streams). They
        # count against the session's window as well as the link's credit: a client with a window of 2 and a credit
        # of 1,000 had all 1,000 messages of its queue (10 MB) dealt, then waiting in the session once written,
        # uncounted, for as long as it kept its window shut (the transfers sent at once stop at the window).
        if outbound.awaiting_commit[-1][1].body is not None:
            return 0
        return max(min(credit, link.session.remote_incoming_window) - len(outbound.awaiting_commit), 0)
    return credit


def _exceeds_receiver_limit(connection: ServerConnection, link: protocol.SenderLink, entry: Entry) -> bool:
    """Whether ``entry`` is larger than the receiving peer's max-message-size; if so the link is detached.

    §2.7.3: "Any attempt to deliver a message larger than this results in a message-size-exceeded
    link-error." The error is the link's alone (the connection and the peer's other links go on), the message
    is not counted as a delivery attempt, and the detached link gets no more (its credit reads 0 from now).
    """
    limit = link.remote_max_message_size
    if not limit:
        return False
    body = entry.body
    size = len(entry.payload) + (0 if body is None else body.body_size)
    if size <= limit:
        return False
    description = f"message of {size} bytes exceeds the receiver's max-message-size {limit}"
    log.info("link %r detached (%s): %s", link.name, connection.peer, description)
    link.detach(
        closed=True, error=Error(condition=symbol(conditions.LINK_MESSAGE_SIZE_EXCEEDED), description=description)
    )
    connection.kick()
    return True


def _send_large(
    connection: ServerConnection, link: protocol.SenderLink, entry: Entry, settled: bool, outbound: Outbound
) -> protocol.Delivery | None:
    """Start a large message kept on disk: its leading sections now, its body streamed from its file
    (:mod:`._outbound`). None when its file cannot be read (the message is given up, logged)."""
    body = entry.body
    assert body is not None
    try:
        file = body.open_body()
    except OSError as exc:
        log.error("cannot read the large message %s: %s; it is dropped", body.path, exc)
        return None
    delivery = link.send(entry.outgoing() if entry.ttl_at else entry.payload, settled=settled, more=True)
    assert connection._group is not None
    done = functools.partial(deal_then_answer_drain, connection, outbound)  # its link may take the next message
    connection._group.start_soon(stream_body, connection, link, delivery, file, body.body_size, done)
    return delivery


def _send_after_commit(connection: ServerConnection, outbound: Outbound, store: Store, entry: Entry) -> None:
    """Deal ``entry`` to a consumer that takes it pre-settled, its transfer written once the store has committed
    its removal (the queue releases it as the send returns: the removal joins the store's current batch).

    At-most-once is "never twice": a pre-settled transfer written before its removal was committed came again
    after a ``kill -9`` of the broker within that commit's few milliseconds. The messages of one commit are
    written together when it is done (:func:`_send_committed`), so a consumer still gets them in batches of the
    store's group commit. Once one waits, those dealt after it (stored or not) wait behind it: the link's order is
    kept. A large message (streamed from its file) waits alone: :class:`~._nodes.ConsumerFailed` keeps it in its
    queue until those before it are written. Once the broker is stopping (its store's last commit under way), none
    is dealt: no commit will call back.
    """
    waiting = outbound.awaiting_commit
    if store.closing or (entry.body is not None and waiting):
        raise ConsumerFailed  # not dealt now: dealt again once those waiting are written
    batch = store.batch
    if batch is not outbound.commit_batch:
        outbound.commit_batch = batch
        outbound.commit_number += 1
        store.after_commit(
            functools.partial(_send_committed, connection, outbound, outbound.commit_number),
            dropped=functools.partial(_return_waiting, outbound),
        )
    waiting.append((outbound.commit_number, entry))


def _return_waiting(outbound: Outbound) -> None:
    """The broker stops before the commit the pre-settled transfers of ``outbound`` wait for calls back: their
    messages go back to their queue, stored again by the store's last commit (dropped, the commit removed them and
    no transfer ever carried them: a clean stop lost them)."""
    entries = [entry for _, entry in outbound.awaiting_commit]
    outbound.awaiting_commit.clear()
    outbound.commit_batch = None
    if entries:
        outbound.queue.restore(entries)


def _send_committed(connection: ServerConnection, outbound: Outbound, number: int) -> None:
    """The store committed the removals of commit ``number``: write the pre-settled transfers that waited for it.
    Those the link can no longer take (it detached, its connection ended, its credit was lowered meanwhile, §2.6.7)
    go back to their queue, stored again (:meth:`._nodes.Queue.restore`): not written, they were never delivered.
    Each is counted in the memory limit until written (:meth:`._nodes.Queue.written`)."""
    waiting = outbound.awaiting_commit
    count = 0
    while count < len(waiting) and waiting[count][0] <= number:
        count += 1
    ready = [entry for _, entry in waiting[:count]]
    del waiting[:count]
    if not waiting:
        outbound.commit_batch = None
    link = outbound.link
    usable = (
        link.user_data is outbound
        and link.local_state is ACTIVE
        and not connection.failed
        and not connection._ending  # released: what it would take now is for the queue's other consumers
    )
    sent = 0
    queue = outbound.queue
    now = time.time()
    try:
        while sent < len(ready) and usable and link.link_credit > 0 and link.streaming is None:
            entry = ready[sent]
            if entry.expired(now):
                # §3.2.1: "Messages that live longer than their expiration time will be discarded (or dead
                # lettered)": its ttl ran out while the commit was under way (a slow disk); written anyway, it came
                # with a ttl of 1 ms, half a second after its expiry.
                sent += 1
                queue.give_up(entry, "expired", expired_description(entry))
                continue
            if entry.body is None:
                link.send(entry.outgoing() if entry.ttl_at else entry.payload, settled=True)
            else:
                _send_large(connection, link, entry, True, outbound)  # None: its file cannot be read (logged)
            sent += 1
            queue.written(entry)
    except Exception as exc:
        connection.fail(exc)
    if sent < len(ready):
        outbound.queue.restore(ready[sent:])
    connection.kick()
    if connection.engine.output_buffered > OUTPUT_LIMIT:
        connection._pause_output()
    if usable:
        deal_then_answer_drain(connection, outbound)  # a large message held back may go now


def deal_then_answer_drain(connection: ServerConnection, outbound: Outbound) -> None:
    """The link of ``outbound`` may take more (pre-settled transfers that waited for a commit were written, a large
    message's stream ended): its queue deals to it again; then a drain it asked for is answered, once nothing dealt
    to it is waiting (for a commit, or for the end of a stream).

    §2.6.7: "If the sender's drain flag is set and there are no available messages, the sender MUST advance the
    delivery-count until link-credit is zero": the messages available are sent first. Answered as the transfers
    waiting for a commit were written, a drain of 10 credits with s0, a large L1, s2 and s3 queued got s0 alone
    (L1 waited behind s0, its stream alone on the link), and the nine credits back while three messages waited;
    answered as a large message's stream began, it got s0 and L1 (an at-least-once link too)."""
    outbound.queue.credited(outbound.consumer)
    link = outbound.link
    if (
        link.drain
        and link.user_data is outbound
        and link.local_state is ACTIVE
        and link.streaming is None
        and not outbound.awaiting_commit
    ):
        link.drained()
        connection.kick()


#: The source capabilities of a shared subscription (the AMQP JMS mapping's, as Qpid JMS and ActiveMQ Artemis name
#: them): "shared" lets several links share one subscription, its name the link name up to its first "|" (Qpid JMS
#: names the links of one shared subscription ``NAME``, ``NAME|2``, ...; ``NAME|global``, ``NAME|global2``, ...);
#: "global" scopes that name to the broker instead of to the container id (a JMS connection without a client id).
SHARED = symbol("shared")
GLOBAL = symbol("global")
#: The link capability that says shared subscriptions are supported: Qpid JMS desires it on a shared consumer's
#: attach when the connection did not offer it, and refuses the consumer ("Remote peer does not support shared
#: subscriptions") unless the answering attach offers it (``AmqpConsumerBuilder``), as Qpid Broker-J's does.
SHARED_SUBS = symbol("SHARED-SUBS")
#: What stands for the container id in a global subscription's key (a container id is never that, in practice).
GLOBAL_SCOPE = "|global"


def _symbols(value: Any) -> frozenset[Any]:
    """A capabilities field as a set: a multiple symbol (§1.4) is one symbol or an array of them."""
    if value is None:
        return frozenset()
    if isinstance(value, str):
        return frozenset([value])
    return frozenset(value)


def _subscription_key(connection: ServerConnection, link: protocol.Link, capabilities: Any = None) -> str:
    """The key of the topic subscription a receiving link names: its container id and its link name; with the
    source capability "shared" the link name up to its first "|", and with "global" the broker instead of the
    container id (:data:`SHARED`, :data:`GLOBAL`)."""
    wanted = _symbols(capabilities)
    name = link.name.split("|", 1)[0] if SHARED in wanted else link.name
    if GLOBAL in wanted:
        return f"{GLOBAL_SCOPE}/{name}"
    remote_open = connection.engine.remote_open
    container = remote_open.container_id if remote_open is not None else connection.peer
    return f"{container}/{name}"


#: The link name of one more link of a shared subscription, as Qpid JMS names them (``NAME|2``, ``NAME|global``,
#: ``NAME|global2``, ...: ``AmqpSubscriptionTracker``), at the end of a subscription key.
_SHARED_LINK_NAME = re.compile(r"(?P<name>[^/|]*)\|(?P<scope>global)?(?P<number>\d*)")


def earlier_subscription_key(key: str) -> str | None:
    """The key the broker gives now to the links that named the durable subscription an earlier version kept under
    ``key`` (None: the same). That version keyed each link apart, its container id and its whole link name; a
    shared subscription's are now one, keyed by the name before the first "|" (:func:`_subscription_key`), and a
    global one's by :data:`GLOBAL_SCOPE` instead of the container id. For :meth:`._store.Store.upgrade`."""
    if key.startswith(f"{GLOBAL_SCOPE}/"):
        return None
    container, _, link_name = key.rpartition("/")
    shared = _SHARED_LINK_NAME.fullmatch(link_name)
    if not container or shared is None:
        return None
    if shared["scope"]:
        return f"{GLOBAL_SCOPE}/{shared['name']}"
    if shared["number"] and int(shared["number"]) >= 2:  # Qpid JMS's second link and after: NAME|2, NAME|3, ...
        return f"{container}/{shared['name']}"
    return None


def _recovery_keys(connection: ServerConnection, link: protocol.Link) -> list[tuple[str, list[Any]]]:
    """The subscription keys a receiver with a null source may name, each with the capabilities that give it: its
    own (an exclusive subscription), then a shared one of its container, then a global one (Qpid JMS's
    ``Session.unsubscribe`` of a shared subscription attaches with the first link name, ``NAME`` or
    ``NAME|global``)."""
    return [
        (_subscription_key(connection, link), []),
        (_subscription_key(connection, link, [SHARED]), [SHARED]),
        (_subscription_key(connection, link, [SHARED, GLOBAL]), [SHARED, GLOBAL]),
    ]


def _recovered_source(connection: ServerConnection, link: protocol.SenderLink) -> Source | None:
    """The source of the durable subscription that a receiver attaching with a null source names (None: it has
    none). The JMS mapping attaches so to find a subscription by its name alone (Qpid JMS's
    ``Session.unsubscribe``: a null source, then a detach with closed=true); the answer describes it, its
    capabilities saying whether it is shared or global (as ActiveMQ Artemis answers)."""
    for key, sharing in _recovery_keys(connection, link):
        for topic in connection.broker.topics.values():
            queue = topic.subscriptions.get(key)
            if queue is None or not queue.durable_subscription:
                continue
            selector = queue.selector
            applied = None if selector is None else {_JMS_SELECTOR: Described(_SELECTOR_DESCRIPTORS[0], selector.text)}
            # a topic named without the prefix was made by a subscriber that said "topic" (_is_topic)
            kind = [] if connection.broker._is_topic(topic.name) else [symbol("topic")]
            return Source(
                address=topic.name,
                durable=UNSETTLED_STATE,
                expiry_policy=NEVER,
                filter=applied,
                capabilities=(kind + sharing) or None,
            )
    return None


def _topic_key(connection: ServerConnection, link: protocol.SenderLink, source: Source, durable: bool) -> str:
    """The key of the subscription a topic receiver attaches to: a durable or shared one by its name
    (:func:`_subscription_key`); any other is the link's own. A shared subscription that is not durable (JMS's
    shared non-durable subscription) has a key apart from a durable one of the same name, as in ActiveMQ Artemis."""
    if durable:
        return _subscription_key(connection, link, source.capabilities)
    if SHARED in _symbols(source.capabilities):
        return _subscription_key(connection, link, source.capabilities) + ":shared-volatile"
    return f"{id(link)}"


def attach_outbound(connection: ServerConnection, link: protocol.SenderLink) -> None:
    broker = connection.broker
    source = link.remote_source
    if source is None:
        source = _recovered_source(connection, link)
        if source is None:
            description = (
                f"no durable subscription {_subscription_key(connection, link)!r} to recover (a receiver with a null "
                "source names one by its container id and link name)"
            )
            connection._refuse(link, conditions.NOT_FOUND, description)
            return
    if not isinstance(source, Source):
        connection._refuse(link, conditions.NOT_FOUND, "a receiver needs a source address (or dynamic)")
        return
    selector = None
    applied: dict[Any, Any] | None = None  # the filters in place, for the answer (§3.5.3)
    for name, value in (source.filter or {}).items():
        descriptor = getattr(value, "descriptor", None)
        if descriptor in _SELECTOR_DESCRIPTORS:
            try:
                selector = compile_selector(str(value.value))
            except SelectorError as exc:
                connection._refuse(link, conditions.INVALID_FIELD, f"invalid selector: {exc.description}")
                return
            applied = {name: value}  # the last selector given is the one applied
    owner: Topic | None = None
    key: str | None = None
    if source.address is None and not source.dynamic:
        connection._refuse(link, conditions.NOT_FOUND, "a receiver needs a source address (or dynamic)")
        return
    named = source.address
    if not source.dynamic and not isinstance(named, str):
        connection._refuse(link, conditions.INVALID_FIELD, not_an_address("source", named))
        return
    try:
        if source.dynamic:
            address = broker._temporary_address()
            queue = broker.queue(address, dynamic=True)
        else:
            assert isinstance(named, str)  # checked above
            address = named
            if broker._is_topic(address, source.capabilities):
                owner = broker.topic(address)
                durable = bool(source.durable) and source.expiry_policy == NEVER
                key = _topic_key(connection, link, source, durable)
                # the subscription keeps only what the selector matches: the rest would never leave it
                queue = owner.subscription(
                    key,
                    max_depth=broker.max_queue_depth,
                    durable=durable,
                    store=broker.storage,
                    flow=broker.flow,
                    selector=selector,
                )
            else:
                queue = broker.queue(address)
    except NoRoomForNode as exc:
        connection._refuse(link, conditions.RESOURCE_LIMIT_EXCEEDED, str(exc))
        return
    browse = source.distribution_mode == COPY
    settled = link.remote_snd_settle_mode == SND_SETTLED
    # pre-settled transfers of stored messages wait for the commit of their removal (_send_after_commit)
    store = broker.storage if settled and not browse else None

    engine = connection.engine

    def send(entry: Entry) -> Any:
        # Called by whichever connection routed the message: a failure here is this connection's, not theirs.
        if _exceeds_receiver_limit(connection, link, entry):
            raise ConsumerFailed  # not sent: the message keeps its place for a receiver that takes it
        if store is not None and (entry.stored or outbound.awaiting_commit):
            _send_after_commit(connection, outbound, store, entry)
            return WAITS_FOR_COMMIT
        try:
            if entry.body is None:
                delivery = link.send(entry.outgoing() if entry.ttl_at else entry.payload, settled=settled)
            else:
                sent = _send_large(connection, link, entry, settled, outbound)
                if sent is None:
                    return None  # its file cannot be read: given up (logged)
                delivery = sent
        except Exception as exc:
            connection.fail(exc)
            raise ConsumerFailed from exc
        connection.kick()
        if engine.output_buffered > OUTPUT_LIMIT:
            connection._pause_output()
        return None if settled or browse else delivery

    consumer = Consumer(send, functools.partial(_consumer_credit, connection, link), selector=selector, browse=browse)
    outbound = Outbound(link, queue, consumer, owner, key)
    link.user_data = outbound
    connection._outbound[outbound] = None
    broker.flow.hold_endpoint()  # until _on_detach or release
    answer = Source(
        address=address,
        durable=source.durable,
        expiry_policy=source.expiry_policy,
        timeout=source.timeout,
        dynamic=source.dynamic,
        distribution_mode=source.distribution_mode,
        # §3.5.3: the source's filter, in the attach that answers, names the filters actually in place: a
        # filter this broker does not apply is left out, so that the receiver can tell it was not.
        filter=applied,
        default_outcome=source.default_outcome,
        outcomes=source.outcomes,
        capabilities=source.capabilities,
    )
    remote_attach = link.remote_attach
    desired = _symbols(None if remote_attach is None else remote_attach.desired_capabilities)
    link.attach(
        source=answer,
        target=link.remote_target,
        snd_settle_mode=link.remote_snd_settle_mode,
        rcv_settle_mode=link.remote_rcv_settle_mode,
        offered_capabilities=[SHARED_SUBS] if SHARED_SUBS in desired else None,
    )
    log.info(
        "link %r attached: %s receives from %s%s", link.name, connection.peer, address, " (browsing)" if browse else ""
    )
    queue.subscribe(consumer)


def settle_by_default(connection: ServerConnection, outbound: Outbound) -> None:
    """A detached link's unsettled messages take its default-outcome, when it named one (§3.5.3: "including
    when the source is destroyed"); without one they go back to the queue (unsubscribe). So do a connection's
    consumers when the peer closes it; a connection lost does not come here: its consumers' messages count as
    failed deliveries whatever they named (:meth:`_on_closed`)."""
    outcome = outbound.default_outcome
    consumer = outbound.consumer
    if outcome is None or isinstance(outcome, Released) or consumer.browse or not consumer.unsettled:
        return
    pending = sorted(consumer.unsettled.values(), key=lambda entry: entry.sequence)
    consumer.unsettled.clear()
    for entry in pending:
        connection.broker._settle_entry(outbound.queue, consumer, entry, outcome)


def unsubscribe(
    connection: ServerConnection, outbound: Outbound, failed: FailedAttempt | None = None, *, closed: bool = False
) -> None:
    """The consumer leaves its queue, its unsettled messages returned (as failed attempts with ``failed``); a
    node made for it alone (a dynamic queue, a subscription that is not durable) is deleted with what it holds
    (nothing to count there: its messages are dropped). A shared subscription that is not durable goes with the
    last link attached to it.

    A durable subscription stays when its link detaches (closed=false, §2.6.4: the terminus is kept for a later
    attach), when its session ends, or when its connection ends, and is deleted when the peer closes the last
    link attached to it (``closed``: its detach said closed=true): AMQP 1.0 §2.6.6, "closing a link"
    destroys the terminus, as in ActiveMQ Artemis (which deletes it only while no other consumer is attached) and
    the JMS mapping (Qpid JMS's ``Session.unsubscribe``). While other links are still attached to it (a shared
    subscription), it stays: the JMS API refuses to unsubscribe a durable subscription that has active
    consumers, and the others' messages must not go with it; it is deleted by the close of the link that
    leaves it last (or by a later attach and close, as ``Session.unsubscribe`` does)."""
    queue = outbound.queue
    topic, key = outbound.topic, outbound.key
    consumer = outbound.consumer
    alone = queue.consumers in ([], [consumer])
    private = topic is not None and key is not None and not queue.durable_subscription
    unsubscribed = closed and topic is not None and key is not None and queue.durable_subscription
    if (private and alone) or (queue.dynamic and alone):
        failed = None  # its messages go with the node: no attempt to count
    queue.unsubscribe(consumer, failed)
    if queue.consumers and (unsubscribed or private):
        log.info(
            "link %r %s: subscription %r kept while %d other links are attached to it",
            outbound.link.name,
            "closed" if closed else "detached",
            queue.name,
            len(queue.consumers),
        )
        unsubscribed = private = False
    elif unsubscribed:
        log.info("link %r closed: durable subscription %r deleted (unsubscribed)", outbound.link.name, queue.name)
    if private or unsubscribed:
        assert topic is not None and key is not None
        gone = topic.unsubscribe(key) is not None
    else:
        gone = queue.dynamic and not queue.consumers and connection.broker.queues.pop(queue.name, None) is not None
        if gone:
            queue.delete()
    if gone:
        connection.broker.flow.drop_node()
