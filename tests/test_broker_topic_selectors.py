"""A topic subscriber with a selector holds no copy of what it does not select (amqp_async/broker/_nodes.py,
``Topic.publish``).

Each subscription to a topic is a private queue; the subscriber's selector was the consumer's alone, so the
subscription took a copy of every message published and kept those the selector refused for ever: never delivered,
never dropped. One subscriber on ``topic://news`` selecting ``color = 'red'`` under ``--max-memory 40MiB`` held
1,017 blue messages of 10 kB, and then its publisher got no more credit and even a new queue elsewhere was refused
with ``amqp:resource-limit-exceeded`` (the auditor's ``/tmp/auditB/t_topic_selector.py``). A subscription now
keeps its subscriber's selector and takes only the messages it matches, as JMS topic subscriptions (and ActiveMQ
Artemis's) do:

- python-qpid-proton: a selector subscriber's subscription stays empty while ten times the memory limit of
  messages it does not select is published, and the one it selects is delivered;
- our client: a durable subscription with a selector, its subscriber detached, keeps only what it selects; back
  with another selector, it takes what that one selects; after a restart (``data_dir``), it filters with its
  subscriber's filter once that one is back (and before: the store keeps it, tests/test_broker_durable_selectors.py);
- ``Topic.publish`` itself: a payload that does not decode matches no selector (as the consumer finds) and raises
  nothing; a subscription without a selector gets everything, and costs no decoding; a subscription shared by
  subscribers with different selectors takes every message.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from proton import Message as ProtonMessage
from proton.reactor import Selector
from proton.utils import BlockingConnection

import amqp_async
from amqp_async import Message
from amqp_async.broker import Broker, BrokerThread
from amqp_async.broker._nodes import Consumer, Entry, Queue, Topic
from amqp_async.broker.selector import compile_selector

try:
    from broker_serving import serving
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.broker_serving import serving

TIMEOUT = 20.0
TOPIC = "topic://news"
LIMIT = 1 << 20  # room for about 100 of the messages below
BODY = b"x" * 10_000
COUNT = 1_000  # ten times what the limit holds
RED = "color = 'red'"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def subscription(broker: Broker, key: str | None = None) -> Queue:
    """The topic's subscription for ``key`` (the only one, without)."""
    subscriptions = broker.topics[TOPIC].subscriptions
    if key is None:
        [queue] = subscriptions.values()
        return queue
    return subscriptions[key]


def coloured(color: str, body: object = BODY) -> Message:
    return Message(body=body, properties={"color": color})


def test_python_qpid_proton_a_selector_subscriber_holds_no_copy_it_does_not_select() -> None:
    with BrokerThread(max_memory=LIMIT) as thread:
        subscriber = BlockingConnection(thread.url, timeout=TIMEOUT)
        publisher = BlockingConnection(thread.url, timeout=TIMEOUT)
        try:
            receiver = subscriber.create_receiver(TOPIC, name="red-sub", options=Selector(RED), credit=10)
            sender = publisher.create_sender(TOPIC, name="pub")
            for _ in range(COUNT):
                # before: credit ran out after about 100 (the limit full of copies for the red subscriber): a timeout
                sender.send(ProtonMessage(body=BODY, properties={"color": "blue"}), timeout=5)
            queue = subscription(thread.broker)
            assert len(queue) == 0 and not queue.consumers[0].unsettled
            sender.send(ProtonMessage(body="red", properties={"color": "red"}), timeout=5)
            message = receiver.receive(timeout=TIMEOUT)
            assert message.body == "red" and message.properties == {"color": "red"}
            receiver.accept()
            # and a new node still fits: the limit is not full of copies
            publisher.create_sender("unrelated-queue").send(ProtonMessage(body="hello"), timeout=5)
        finally:
            subscriber.close()
            publisher.close()


async def publish(url: str, *messages: Message) -> None:
    async with amqp_async.connect(url, reconnect=False) as conn:
        sender = await conn.open_sender(TOPIC)
        for message in messages:
            await sender.send(message)


async def subscribe(conn: amqp_async.Connection, selector: str | None, *, credit: int = 0) -> amqp_async.Receiver:
    """Attach the durable subscription ``sub`` (``subscriber/sub``) with ``selector``."""
    return await conn.open_receiver(
        TOPIC, name="sub", durable=True, expiry_policy="never", selector=selector, credit=credit
    )


async def receive_all(receiver: amqp_async.Receiver) -> list[object]:
    """What the receiver's credit brings now (a drain ends it), each accepted: the bodies."""
    await receiver.drain()
    bodies = []
    while (delivery := receiver.receive_nowait()) is not None:
        bodies.append(delivery.message.body)
        await delivery.accept()
    return bodies


@pytest.mark.anyio
async def test_a_detached_durable_subscription_keeps_only_what_its_selector_selects() -> None:
    async with serving(max_memory=LIMIT) as broker:
        with anyio.fail_after(TIMEOUT):
            async with amqp_async.connect(broker.url, reconnect=False, container_id="subscriber") as conn:
                await (await subscribe(conn, RED)).detach()  # detached: the subscription stays, and fills
            red = [coloured("red", f"red {number}") for number in range(3)]
            # before: the producer waited for credit for ever after about 100 blue (the limit full of them)
            await publish(broker.url, *[coloured("blue") for _ in range(COUNT // 2)], red[0])
            await publish(broker.url, *[coloured("blue") for _ in range(COUNT // 2)], *red[1:])
            queue = subscription(broker, "subscriber/sub")
            assert queue.durable_subscription and len(queue) == 3
            async with amqp_async.connect(broker.url, reconnect=False, container_id="subscriber") as conn:
                receiver = await subscribe(conn, RED)
                receiver.add_credit(10)
                assert await receive_all(receiver) == ["red 0", "red 1", "red 2"]
                await receiver.detach()  # kept, and empty (a close would delete it)
            assert len(queue) == 0 and broker.flow.held_bytes == 0


@pytest.mark.anyio
async def test_a_durable_subscriber_back_with_another_selector_gets_what_that_one_selects() -> None:
    async with serving() as broker:
        with anyio.fail_after(TIMEOUT):
            async with amqp_async.connect(broker.url, reconnect=False, container_id="subscriber") as conn:
                await (await subscribe(conn, RED)).detach()
            await publish(broker.url, coloured("red", "red 0"), coloured("blue", "blue 0"))
            async with amqp_async.connect(broker.url, reconnect=False, container_id="subscriber") as conn:
                await (await subscribe(conn, "color = 'blue'")).detach()
            await publish(broker.url, coloured("red", "red 1"), coloured("blue", "blue 1"))
            # the red one queued before stays (the code kept a changed subscription's messages, and still does)
            assert [entry.message.body for entry in subscription(broker).entries] == ["red 0", "blue 1"]
            async with amqp_async.connect(broker.url, reconnect=False, container_id="subscriber") as conn:
                receiver = await subscribe(conn, None, credit=10)  # no selector now: everything, from now on
                await publish(broker.url, coloured("red", "red 2"), coloured("blue", "blue 2"))
                assert await receive_all(receiver) == ["red 0", "blue 1", "red 2", "blue 2"]


@pytest.mark.anyio
async def test_after_a_restart_a_durable_subscription_filters_again_once_its_subscriber_is_back(
    tmp_path: Path,
) -> None:
    async with serving(data_dir=tmp_path) as broker:
        with anyio.fail_after(TIMEOUT):
            async with amqp_async.connect(broker.url, reconnect=False, container_id="subscriber") as conn:
                await (await subscribe(conn, RED)).detach()
    async with serving(data_dir=tmp_path, max_memory=LIMIT) as broker:
        with anyio.fail_after(TIMEOUT):
            # its subscriber back with its filter (the store kept it too: tests/test_broker_durable_selectors.py)
            async with amqp_async.connect(broker.url, reconnect=False, container_id="subscriber") as conn:
                await (await subscribe(conn, RED)).detach()
            await publish(broker.url, *[coloured("blue") for _ in range(COUNT)], coloured("red", "red"))
            queue = subscription(broker, "subscriber/sub")
            assert [entry.message.body for entry in queue.entries] == ["red"]


def test_publish_copies_to_each_subscription_what_its_selector_matches() -> None:
    topic = Topic(TOPIC)
    plain = topic.subscription("plain")
    red = topic.subscription("red", selector=compile_selector(RED))
    big = topic.subscription("big", selector=compile_selector("size > 10"))
    for message in (coloured("red", 1), coloured("blue", 2), Message(body=3, properties={"size": 11})):
        topic.publish(Entry(message.encode()))
    topic.publish(Entry(b"\x00Sp not a message"))  # junk: matches no selector, raises nothing
    assert len(plain) == 4
    assert [entry.message.body for entry in red.entries] == [1]
    assert [entry.message.body for entry in big.entries] == [3]
    # subscriptions without a selector cost no decoding
    del topic.subscriptions["red"], topic.subscriptions["big"]
    entry = Entry(coloured("red").encode())
    topic.publish(entry)
    assert entry._message is None and plain.entries[-1]._message is None


def test_a_subscription_shared_by_subscribers_with_different_selectors_takes_every_message() -> None:
    topic = Topic(TOPIC)
    queue = topic.subscription("shared", durable=True, selector=compile_selector(RED))
    queue.subscribe(Consumer(lambda entry: None, lambda: 0, selector=compile_selector(RED)))
    # another link of the same container and name, without a selector: what either wants is kept
    assert topic.subscription("shared", durable=True, selector=None) is queue
    queue.subscribe(Consumer(lambda entry: None, lambda: 0))
    topic.publish(Entry(coloured("blue", "blue").encode()))
    assert [entry.message.body for entry in queue.entries] == ["blue"]
    # the same selector again keeps it: a subscriber coming back alone with its filter
    other = topic.subscription("other", selector=compile_selector(RED))
    other.subscribe(Consumer(lambda entry: None, lambda: 0, selector=compile_selector(RED)))
    assert topic.subscription("other", selector=compile_selector(RED)).selector == compile_selector(RED)
    topic.publish(Entry(coloured("blue", "blue").encode()))
    assert len(other) == 0
