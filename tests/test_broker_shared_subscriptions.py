"""Shared topic subscriptions as the AMQP JMS mapping names them (amqp_async/broker/_consumers.py,
``_subscription_key``, ``_topic_key``, ``_recovered_source``, ``unsubscribe``).

Qpid JMS attaches each consumer of a shared subscription with the source capability ``shared`` and a link name that
starts with the subscription's name: ``NAME``, ``NAME|2``, ... on a connection with a client id (the container id),
``NAME|global``, ``NAME|global2``, ... with the capability ``global`` on one without (each connection its own random
container id); a shared non-durable subscription's links are ``NAME|volatile1``, ``NAME|global-volatile1``, ...
ActiveMQ Artemis names the subscription's queue by the link name up to its first ``|``, by the container id unless
``global`` (``createQueueName``). Before, the embedded broker keyed a subscription by the container id and the whole
link name: each such consumer had a subscription of its own and got a copy of every message (not shared), and
``Session.unsubscribe`` of a global subscription found nothing to recover.

A subscription shared by several links stays while any of them is attached; a link's close (closed=true, §2.6.6)
deletes it only when no other link is attached (as Artemis: ``ProtonServerSenderContext.close`` deletes the queue
when its consumer count is 0); a shared non-durable subscription goes with the last link attached.

Peers: python-qpid-proton's BlockingConnection (as Qpid JMS puts it on the wire) and our awaitable client.
"""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest

pytest.importorskip("proton", reason="python-qpid-proton is the reference peer; CI installs it")

from proton import Data, Terminus, Timeout
from proton import Message as ProtonMessage
from proton.reactor import Container, DurableSubscription, ReceiverOption
from proton.utils import BlockingConnection

import amqp_async
from amqp_async import Message
from amqp_async.broker import Broker, BrokerThread

try:
    from broker_serving import serving
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.broker_serving import serving

TIMEOUT = 30.0
TOPIC = "topic://news"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Capabilities(ReceiverOption):  # type: ignore[misc]
    """The source capabilities of a receiver (Qpid JMS's ``shared``, ``global``)."""

    def __init__(self, *capabilities: str) -> None:
        self.capabilities = capabilities

    def apply(self, receiver: Any) -> None:
        field = receiver.source.capabilities
        field.put_array(False, Data.SYMBOL)
        field.enter()
        for capability in self.capabilities:
            field.put_symbol(capability)
        field.exit()


class NullSource(ReceiverOption):  # type: ignore[misc]
    """A null source: Qpid JMS's ``Session.unsubscribe(name)`` attaches so, then closes the link."""

    def apply(self, receiver: Any) -> None:
        receiver.source.type = Terminus.UNSPECIFIED


def connect(url: str, container_id: str) -> BlockingConnection:
    """A python-qpid-proton connection as container ``container_id``."""
    container = Container()
    container.container_id = container_id
    return BlockingConnection(url, timeout=TIMEOUT, container=container)


def receive(receiver: Any, count: int) -> list[Any]:
    """The bodies of the next ``count`` messages ``receiver`` receives (each accepted; each within TIMEOUT)."""
    bodies = []
    for _ in range(count):
        bodies.append(receiver.receive(timeout=TIMEOUT).body)
        receiver.accept()
    return bodies


def receive_between(receivers: list[Any], count: int) -> list[Any]:
    """The bodies of ``count`` messages received by ``receivers`` together (each accepted), whichever takes which;
    then none more comes within half a second (a copy would)."""
    bodies: list[Any] = []
    deadline = time.monotonic() + TIMEOUT
    while len(bodies) < count and time.monotonic() < deadline:
        for receiver in receivers:
            try:
                message = receiver.receive(timeout=0.2)
            except Timeout:
                continue
            bodies.append(message.body)
            receiver.accept()
    for receiver in receivers:
        with pytest.raises(Timeout):
            receiver.receive(timeout=0.5)
    return bodies


def subscriptions(broker: Broker) -> dict[str, int]:
    """The topic's subscriptions: each key with the messages it holds."""
    topic = broker.topics.get(TOPIC)
    return {} if topic is None else {key: len(queue) for key, queue in topic.subscriptions.items()}


def consumers(broker: Broker, key: str) -> int:
    """The links attached to the subscription ``key``."""
    return len(broker.topics[TOPIC].subscriptions[key].consumers)


def test_the_connection_offers_shared_subs_as_qpid_jms_checks_before_a_shared_consumer() -> None:
    """Qpid JMS reads SHARED-SUBS in the open frame's offered-capabilities (§2.7.1) before it makes a shared
    consumer (``AmqpConnection.isSharedSubsSupported``): the broker supports them, so it offers it there, beside
    ANONYMOUS-RELAY and amqp:local-transactions. Before, the connection did not offer it."""
    with BrokerThread() as running:
        connection = connect(running.url, "ID:jms")
        try:
            offered = {str(capability) for capability in connection.conn.remote_offered_capabilities}
        finally:
            connection.close()
    assert offered == {"ANONYMOUS-RELAY", "amqp:local-transactions", "SHARED-SUBS"}


def test_a_global_shared_durable_subscription_is_one_across_containers_and_unsubscribes_by_its_name() -> None:
    with BrokerThread() as running:
        url, broker = running.url, running.broker
        first, second = connect(url, "ID:first"), connect(url, "ID:second")
        shared = [DurableSubscription(), Capabilities("topic", "shared", "global")]
        one = first.create_receiver(TOPIC, name="orders|global", options=shared, credit=10)
        other = second.create_receiver(TOPIC, name="orders|global", options=shared, credit=10)
        sender = first.create_sender(TOPIC)
        for number in range(6):
            sender.send(ProtonMessage(body=number, durable=True))
        received = receive_between([one, other], 6)
        assert sorted(received) == list(range(6))  # each message once, between them (before: twice, one each)
        assert subscriptions(broker) == {"|global/orders": 0}
        first.close()
        second.close()  # both gone (closed=false): the subscription stays, and fills
        publisher = connect(url, "ID:publisher")
        publisher.create_sender(TOPIC).send(ProtonMessage(body="meanwhile", durable=True))
        publisher.close()
        assert subscriptions(broker) == {"|global/orders": 1}
        # Session.unsubscribe("orders") on a connection without a client id: a null source named NAME|global
        third = connect(url, "ID:third")
        try:
            receiver = third.create_receiver(None, name="orders|global", options=NullSource())
            source = receiver.link.remote_source
            assert (source.address, source.durability, source.expiry_policy) == (TOPIC, 2, Terminus.EXPIRE_NEVER)
            source.capabilities.rewind()
            source.capabilities.next()
            assert list(source.capabilities.get_object().elements) == ["shared", "global"]
            receiver.close()
        finally:
            third.close()
        assert subscriptions(broker) == {}


def test_a_shared_subscriptions_links_of_one_container_share_it_and_the_last_close_deletes_it() -> None:
    with BrokerThread() as running:
        url, broker = running.url, running.broker
        connection = connect(url, "client-id")
        try:
            shared = [DurableSubscription(), Capabilities("shared")]
            one = connection.create_receiver(TOPIC, name="orders", options=shared, credit=0)
            other = connection.create_receiver(TOPIC, name="orders|2", options=shared, credit=0)
            sender = connection.create_sender(TOPIC)
            sender.send(ProtonMessage(body="first"))
            assert subscriptions(broker) == {"client-id/orders": 1}  # one subscription (before: one per link)
            assert consumers(broker, "client-id/orders") == 2
            one.close()  # closed=true while "orders|2" is attached: only that link goes
            sender.send(ProtonMessage(body="second"))  # its outcome comes after the close was handled
            assert subscriptions(broker) == {"client-id/orders": 2}
            assert consumers(broker, "client-id/orders") == 1
            other.flow(10)
            assert receive(other, 2) == ["first", "second"]
            other.close()  # the last link attached closes: unsubscribed
            sender.send(ProtonMessage(body="third"))
            assert subscriptions(broker) == {}
        finally:
            connection.close()


def test_a_shared_non_durable_subscription_goes_with_the_last_link() -> None:
    with BrokerThread() as running:
        url, broker = running.url, running.broker
        first, second = connect(url, "ID:first"), connect(url, "ID:second")
        try:
            shared = [Capabilities("topic", "shared", "global")]
            one = first.create_receiver(TOPIC, name="ticks|global-volatile1", options=shared, credit=0)
            second.create_receiver(TOPIC, name="ticks|global-volatile1", options=shared, credit=0)
            sender = first.create_sender(TOPIC)
            sender.send(ProtonMessage(body="tick"))
            key = "|global/ticks:shared-volatile"
            assert subscriptions(broker) == {key: 1}  # one copy for the two links (before: two subscriptions)
            one.close()
            sender.send(ProtonMessage(body="tock"))
            assert subscriptions(broker) == {key: 2}  # the other link still takes them
        finally:
            second.close()
            first.close()
        publisher = connect(url, "ID:publisher")
        publisher.create_sender(TOPIC).send(ProtonMessage(body="unheard"))  # after the broker handled the closes
        publisher.close()
        assert subscriptions(broker) == {}  # the last link went: deleted with its messages
        assert (broker.flow.held_count, broker.flow.held_bytes) == (0, 0)


@pytest.mark.anyio
async def test_our_clients_shared_receivers_share_one_subscription() -> None:
    options: dict[str, Any] = {"durable": True, "expiry_policy": "never", "capabilities": ["shared", "global"]}
    with anyio.fail_after(TIMEOUT):
        async with (
            serving() as broker,
            amqp_async.connect(broker.url, reconnect=False, container_id="a") as first,
            amqp_async.connect(broker.url, reconnect=False, container_id="b") as second,
        ):
            one = await first.open_receiver(TOPIC, name="jobs|global", credit=0, **options)
            other = await second.open_receiver(TOPIC, name="jobs|global2", credit=0, **options)
            sender = await first.open_sender(TOPIC)
            await sender.send(Message(body="job"))
            assert subscriptions(broker) == {"|global/jobs": 1}
            await one.close()  # another link is attached: kept, with its message
            assert subscriptions(broker) == {"|global/jobs": 1}
            other.add_credit(1)
            delivery = await other.receive()
            assert delivery.message.body == "job"
            await delivery.accept()
            await other.close()  # the last one's close: unsubscribed
            assert subscriptions(broker) == {}


@pytest.mark.anyio
async def test_a_receiver_that_desires_shared_subs_is_offered_it_as_qpid_jms_checks() -> None:
    """Qpid JMS, on a connection that does not offer SHARED-SUBS, desires it on the shared consumer's attach and
    detaches the consumer ("Remote peer does not support shared subscriptions") unless the answer offers it."""
    options: dict[str, Any] = {"durable": True, "expiry_policy": "never", "capabilities": ["shared"]}
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker, amqp_async.connect(broker.url, reconnect=False) as conn:
            shared = await conn.open_receiver(TOPIC, name="jobs", desired_capabilities="SHARED-SUBS", **options)
            plain = await conn.open_receiver(TOPIC, name="other", **options)
            # the attach the broker answered with, as the engine received it
            assert shared._engine_link.remote_attach.offered_capabilities == ("SHARED-SUBS",)
            assert plain._engine_link.remote_attach.offered_capabilities is None
