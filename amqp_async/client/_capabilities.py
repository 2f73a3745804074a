"""What the peer can do, in typed form: :class:`PeerCapabilities`, read from its open frame.

AMQP 1.0 lets a container announce extensions in the open frame's ``offered-capabilities`` (§2.7.1: "The
extension capabilities the sender supports"); a client that relies on one checks it there first. Some features
have no connection capability, and only trying tells: the spec announces transaction support on the coordinator's
target (§4.5.1, txn-capabilities), and a dynamic node is made (or refused) at attach (§3.5.3). For those the
answer here is ``None`` (unknown) unless the peer is one whose behaviour is known from its open frame's
``product`` and ``version`` properties: RabbitMQ before 4.0 (its AMQP 1.0 plugin) refuses dynamic nodes and
transactions and offers no capability (checked against RabbitMQ 3.10.8: "Dynamic sources not supported",
"Transactions not supported").

Everything here is known once the connection is open (:func:`amqp_async.connect` returns an open connection) and
does not change while it stays open; after a reconnect (failover to another peer) it describes the new peer.
"""

from __future__ import annotations

from typing import Any

import attrs

__all__ = ["PeerCapabilities"]

#: The capability of the "Anonymous Terminus for Message Routing" extension (OASIS AMQP, v1.0): a link with a null
#: target routes each message by its ``to`` property.
ANONYMOUS_RELAY = "ANONYMOUS-RELAY"
#: The connection capability of local transactions, as some brokers (and ours) also offer it in the open frame.
LOCAL_TRANSACTIONS = "amqp:local-transactions"
#: Scheduled delivery through the ``x-opt-delivery-time`` annotation (ActiveMQ Artemis, Qpid Broker-J).
DELAYED_DELIVERY = "DELAYED_DELIVERY"
#: Shared topic subscriptions, as Qpid JMS uses them (ActiveMQ Artemis, Qpid Broker-J).
SHARED_SUBSCRIPTIONS = "SHARED-SUBS"
#: The peer allows one connection per container id ("sole-connection-for-container", an OASIS AMQP extension).
SOLE_CONNECTION = "sole-connection-for-container"


def _strings(values: Any) -> frozenset[str]:
    if values is None:
        return frozenset()
    if isinstance(values, (str, bytes)):  # a single symbol: the encoding allows one value for a multiple field
        values = (values,)
    return frozenset(value.decode(errors="replace") if isinstance(value, bytes) else str(value) for value in values)


def _property(properties: Any, name: str) -> str | None:
    if not isinstance(properties, dict):
        return None
    for key, value in properties.items():
        if str(key) == name and value is not None:
            return value.decode(errors="replace") if isinstance(value, bytes) else str(value)
    return None


def _major(version: str | None) -> int | None:
    head = (version or "").split(".", 1)[0]
    return int(head) if head.isdigit() else None


@attrs.frozen(kw_only=True)
class PeerCapabilities:
    """What the peer said it can do in its open frame (§2.7.1), in typed form: ``conn.peer_capabilities``.

    Attributes:
        offered: every capability the peer offered (``offered-capabilities``), as strings.
        desired: the capabilities the peer desires of us (``desired-capabilities``).
        anonymous_relay: ``ANONYMOUS-RELAY`` is offered: a sender opened with no target (``open_sender(None)``)
            may send each message to its own ``address``. Without it, open a sender per address.
        local_transactions: True when the peer offers ``amqp:local-transactions`` in its open frame, False when
            it is known to refuse transactions (RabbitMQ 3.x), None otherwise: the spec announces transactions on
            the coordinator link (§4.5.1), so only :meth:`Connection.transaction` tells (a peer without a
            coordinator makes it raise :class:`~amqp_async.TransactionError` naming its refusal).
        dynamic_nodes: False when the peer is known not to make dynamic nodes (RabbitMQ 3.x), else None: no
            capability announces them (§3.5.3), so only a dynamic attach tells (``open_receiver(None,
            dynamic=True)``: a refusal raises an error naming the peer's reason). Without them, use a named queue.
        delayed_delivery: ``DELAYED_DELIVERY`` is offered (the ``x-opt-delivery-time`` annotation is honoured).
        shared_subscriptions: ``SHARED-SUBS`` is offered (shared topic subscriptions).
        sole_connection_for_container: ``sole-connection-for-container`` is offered.
        product: the peer's ``product`` open property (``RabbitMQ``, ``apache-activemq-artemis``...), if any.
        version: the peer's ``version`` open property, if any.
    """

    offered: frozenset[str] = frozenset()
    desired: frozenset[str] = frozenset()
    anonymous_relay: bool = False
    local_transactions: bool | None = None
    dynamic_nodes: bool | None = None
    delayed_delivery: bool = False
    shared_subscriptions: bool = False
    sole_connection_for_container: bool = False
    product: str | None = None
    version: str | None = None

    @classmethod
    def from_open(cls, open_frame: Any) -> PeerCapabilities:
        """The capabilities an open performative announces (None, before the peer's open: nothing known)."""
        if open_frame is None:
            return cls()
        offered = _strings(getattr(open_frame, "offered_capabilities", None))
        properties = getattr(open_frame, "properties", None)
        product = _property(properties, "product")
        version = _property(properties, "version")
        # RabbitMQ's AMQP 1.0 plugin (3.x) offers no capability and refuses dynamic nodes and coordinators.
        old_rabbitmq = product == "RabbitMQ" and (major := _major(version)) is not None and major < 4
        transactions: bool | None = True if LOCAL_TRANSACTIONS in offered else None
        return cls(
            offered=offered,
            desired=_strings(getattr(open_frame, "desired_capabilities", None)),
            anonymous_relay=ANONYMOUS_RELAY in offered,
            local_transactions=False if old_rabbitmq and transactions is None else transactions,
            dynamic_nodes=False if old_rabbitmq else None,
            delayed_delivery=DELAYED_DELIVERY in offered,
            shared_subscriptions=SHARED_SUBSCRIPTIONS in offered,
            sole_connection_for_container=SOLE_CONNECTION in offered,
            product=product,
            version=version,
        )
