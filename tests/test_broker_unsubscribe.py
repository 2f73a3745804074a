"""A durable topic subscription is deleted when its subscriber closes its link (a detach with closed=true), and kept
when the link only detaches (closed=false) or its connection goes (amqp_async/broker/_consumers.py,
``unsubscribe``; ``Topic.unsubscribe`` and ``Queue.delete`` in _nodes.py; ``Store.remove_queue``).

AMQP 1.0 §2.6.6: "closing a link" ends the link endpoint and its terminus state, where a detach that does not close
(closed=false) keeps it for a later attach; ActiveMQ Artemis, Qpid Broker-J and the JMS mapping (Qpid JMS's
``Session.unsubscribe``: attach, then detach with closed=true) delete the durable subscription there. Before, the
broker kept a durable subscription for ever, a detach with closed=true too (and across restarts with a data
directory): a forgotten one filled until the memory limit stopped every producer.

- python-qpid-proton and amqp_async.proton as subscribers (``DurableSubscription()``), the callback API:
  ``receiver.detach()`` leaves the subscription and its messages for a later attach, ``receiver.close()`` deletes it
  (a later attach starts empty); the broker answers each with the same ``closed``;
- the awaitable client: ``Receiver.detach()`` keeps it, ``Receiver.close()`` deletes it; a connection closed or
  lost keeps it; its messages' memory is given back;
- a shared subscription (several links attached to it) stays while any link is attached, whatever ``closed`` the
  others' detaches said, and goes with the last one's close;
- the broker's own close of a subscriber's link (message-size-exceeded) is no unsubscribe;
- a receiver with a null source recovers the durable subscription its container id and link name name (the
  answer describes it), so that its close unsubscribes, as Qpid JMS's ``Session.unsubscribe`` does;
- with a data directory: its rows, its selector's and its large messages' files are removed, and across a restart
  the one unsubscribed stays gone while the one detached is kept with its messages.
"""

from __future__ import annotations

import importlib
import sqlite3
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("proton", reason="python-qpid-proton is the reference peer; CI installs it")

from proton import Message as ProtonMessage
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
CONTAINER = "subscriber"
KEY = f"{CONTAINER}/sub"
APIS = ["proton", "amqp_async.proton"]
RED, BLUE = "colour = 'red'", "colour = 'blue'"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def publish(url: str, bodies: list[Any], *, durable: bool = False, address: str = TOPIC) -> None:
    """Publish ``bodies`` with python-qpid-proton (each send waits for the broker's outcome)."""
    connection = BlockingConnection(url, timeout=TIMEOUT)
    try:
        sender = connection.create_sender(address)
        for body in bodies:
            sender.send(ProtonMessage(body=body, durable=durable))
    finally:
        connection.close()


def subscribe(
    api: str, url: str, leave: str, expect: int = 0, *, name: str = "sub", selector: str | None = None
) -> list[Any]:
    """Attach the durable subscription ``name`` of container ``subscriber`` with the callback API of ``api``
    (python-qpid-proton's or amqp_async.proton's), take ``expect`` messages (accepted), then leave: ``"detach"``
    (``receiver.detach()``: closed=false) or ``"close"`` (``receiver.close()``: closed=true), and wait for the broker's
    answering detach, which must say the same ``closed``. Returns the bodies received."""
    handlers = importlib.import_module(f"{api}.handlers")
    reactor = importlib.import_module(f"{api}.reactor")
    answers: list[str] = []
    received: list[Any] = []

    class Subscriber(handlers.MessagingHandler):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            super().__init__(auto_accept=False)

        def on_start(self, event: Any) -> None:
            connection = event.container.connect(url)
            options = [reactor.DurableSubscription()]
            if selector is not None:
                options.append(reactor.Selector(selector))
            event.container.create_receiver(connection, TOPIC, name=name, options=options)

        def leave(self, receiver: Any) -> None:
            if leave == "detach":
                receiver.detach()
            else:
                receiver.close()

        def on_link_opened(self, event: Any) -> None:
            if expect == 0:
                self.leave(event.receiver)

        def on_message(self, event: Any) -> None:
            received.append(event.message.body)
            self.accept(event.delivery)  # its disposition goes out before the detach
            if len(received) == expect:
                self.leave(event.receiver)

        def on_link_remote_detach(self, event: Any) -> None:
            answers.append("detach")
            event.connection.close()

        def on_link_remote_close(self, event: Any) -> None:
            answers.append("close")
            event.connection.close()

    container = reactor.Container(Subscriber())
    container.container_id = CONTAINER
    run_with_timeout(container.run)
    assert answers == [leave], f"the broker answered {answers} to a {leave}"
    assert len(received) == expect
    return received


def run_with_timeout(function: Callable[[], None]) -> None:
    """Run ``function`` in a thread of its own; fail (not hang) when it has not returned within TIMEOUT."""
    errors: list[BaseException] = []

    def target() -> None:
        try:
            function()
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(TIMEOUT)
    assert not thread.is_alive(), f"the container did not stop within {TIMEOUT} s"
    if errors:
        raise errors[0]


def depth(broker: Broker, key: str = KEY) -> int | None:
    """The messages the subscription ``key`` holds; None when there is no such subscription."""
    topic = broker.topics.get(TOPIC)
    queue = None if topic is None else topic.subscriptions.get(key)
    return None if queue is None else len(queue)


# --- the callback API: python-qpid-proton and amqp_async.proton --------------------------------------------------


@pytest.mark.parametrize("api", APIS)
def test_detach_keeps_a_durable_subscription_and_close_deletes_it(api: str) -> None:
    with BrokerThread() as running:
        url, broker = running.url, running.broker
        subscribe(api, url, "detach")
        assert depth(broker) == 0  # kept for a later attach
        publish(url, ["one", "two", "three"])
        assert depth(broker) == 3
        assert subscribe(api, url, "detach", expect=3) == ["one", "two", "three"]
        assert depth(broker) == 0
        publish(url, ["four", "five"])
        assert subscribe(api, url, "close", expect=2) == ["four", "five"]
        assert depth(broker) is None  # unsubscribed
        publish(url, ["six"])  # no subscriber: dropped
        subscribe(api, url, "detach")  # a new subscription: it starts empty
        assert depth(broker) == 0
        subscribe(api, url, "close")
        assert depth(broker) is None
        assert broker.flow.held_bytes == 0 and broker.flow.held_count == 0


@pytest.mark.parametrize("api", APIS)
def test_a_blocking_receivers_detach_keeps_and_its_close_unsubscribes(api: str) -> None:
    utils = importlib.import_module(f"{api}.utils")
    reactor = importlib.import_module(f"{api}.reactor")
    message: Callable[..., Any] = importlib.import_module(api).Message

    def connect(url: str) -> Any:
        container = reactor.Container()
        container.container_id = CONTAINER
        return utils.BlockingConnection(url, timeout=TIMEOUT, container=container)

    with BrokerThread() as running:
        url, broker = running.url, running.broker
        connection = connect(url)
        try:
            connection.create_receiver(TOPIC, name="sub", options=reactor.DurableSubscription()).detach()
            # a send waits for its outcome: the broker has handled the detach that came before it
            connection.create_sender(TOPIC).send(message(body="kept"))
            assert depth(broker) == 1
        finally:
            connection.close()
        connection = connect(url)
        try:
            receiver = connection.create_receiver(TOPIC, name="sub", options=reactor.DurableSubscription(), credit=1)
            assert receiver.receive(timeout=TIMEOUT).body == "kept"
            receiver.accept()
            receiver.close()  # waits for the broker's detach
            assert depth(broker) is None
            connection.create_sender(TOPIC).send(message(body="no subscriber"))
            receiver = connection.create_receiver(TOPIC, name="sub", options=reactor.DurableSubscription(), credit=1)
            assert depth(broker) == 0  # a new subscription, empty
            receiver.close()
            assert depth(broker) is None
        finally:
            connection.close()


@pytest.mark.parametrize("api", APIS)
def test_a_null_source_recovers_a_durable_subscription_by_name_to_unsubscribe_it_as_jms_does(api: str) -> None:
    """Qpid JMS's ``Session.unsubscribe(name)``: a receiver named as the subscription, with a null source (the
    broker's answer describes the subscription: its topic, durability, expiry and selector), then its close."""
    utils = importlib.import_module(f"{api}.utils")
    reactor = importlib.import_module(f"{api}.reactor")
    proton_api = importlib.import_module(api)

    class NullSource(reactor.ReceiverOption):  # type: ignore[misc, name-defined]
        def apply(self, receiver: Any) -> None:
            receiver.source.type = proton_api.Terminus.UNSPECIFIED  # encoded as a null source

    def connect(url: str) -> Any:
        container = reactor.Container()
        container.container_id = CONTAINER
        return utils.BlockingConnection(url, timeout=TIMEOUT, container=container)

    with BrokerThread() as running:
        url, broker = running.url, running.broker
        connection = connect(url)
        try:
            options = [reactor.DurableSubscription(), reactor.Selector(RED)]
            connection.create_receiver(TOPIC, name="sub", options=options).detach()
            connection.create_sender(TOPIC).send(proton_api.Message(body="red", properties={"colour": "red"}))
            assert depth(broker) == 1
        finally:
            connection.close()
        connection = connect(url)
        try:
            receiver = connection.create_receiver(None, name="sub", options=NullSource())
            source = receiver.link.remote_source
            assert (source.address, source.durability, source.expiry_policy) == (
                TOPIC,
                2,
                proton_api.Terminus.EXPIRE_NEVER,
            )
            source.filter.rewind()
            source.filter.next()
            [(key, selector)] = source.filter.get_object().items()
            assert (key, selector.descriptor, selector.value) == (
                "jms-selector",
                "apache.org:selector-filter:string",
                RED,
            )
            receiver.close()
            assert depth(broker) is None  # unsubscribed, its message with it
            with pytest.raises(utils.LinkDetached, match="amqp:not-found"):
                connection.create_receiver(None, name="sub", options=NullSource())  # nothing left to recover
        finally:
            connection.close()


# --- with a data directory --------------------------------------------------------------------------------------

LARGE_SIZE = 16 * 1024
LARGE = "x" * (8 * LARGE_SIZE)  # past large_message_size (and a frame): kept in a file of its own


def rows(data: Path) -> dict[str, list[Any]]:
    """What the store holds (read once the broker has stopped): queues, selectors, messages per queue."""
    db = sqlite3.connect(data / "broker.sqlite3")
    try:
        return {
            "queues": sorted(name for (name,) in db.execute("SELECT name FROM queues")),
            "selectors": sorted(db.execute("SELECT queue, selector FROM selectors")),
            "messages": sorted(db.execute("SELECT queue, count(*) FROM messages GROUP BY queue")),
        }
    finally:
        db.close()


def publish_colours(url: str, colours: list[str]) -> None:
    """Publish one durable large message per colour, its colour in its application properties."""
    connection = BlockingConnection(url, timeout=TIMEOUT)
    try:
        sender = connection.create_sender(TOPIC)
        for colour in colours:
            sender.send(ProtonMessage(body=LARGE, durable=True, properties={"colour": colour}))
    finally:
        connection.close()


async def until(condition: Callable[[], bool]) -> None:
    """Wait for ``condition`` (the store's writer commits in its own time)."""
    with anyio.fail_after(TIMEOUT):
        while not condition():
            await anyio.sleep(0.01)


@pytest.mark.anyio
async def test_an_unsubscribed_durable_subscription_leaves_the_store_and_stays_gone_after_a_restart(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    kept, gone = f"{CONTAINER}/kept", f"{CONTAINER}/gone"
    async with serving(data_dir=data, large_message_size=LARGE_SIZE) as broker:
        url = broker.url
        await anyio.to_thread.run_sync(lambda: subscribe("proton", url, "detach", name="kept", selector=BLUE))
        await anyio.to_thread.run_sync(lambda: subscribe("proton", url, "detach", name="gone", selector=RED))
        await anyio.to_thread.run_sync(publish_colours, url, ["red", "blue", "red", "red", "blue"])
        assert (depth(broker, kept), depth(broker, gone)) == (2, 3)
        bodies = data / "bodies"
        await until(lambda: len(list(bodies.iterdir())) == 5)
        # closed at once, its three messages in it (sent, not accepted): deleted with them
        await anyio.to_thread.run_sync(lambda: subscribe("proton", url, "close", name="gone", selector=RED))
        assert (depth(broker, kept), depth(broker, gone)) == (2, None)
        await until(lambda: len(list(bodies.iterdir())) == 2)  # the red ones' files are removed
        assert broker.flow.held_count == 2
    kept_queue, gone_queue = f"{TOPIC}#{kept}", f"{TOPIC}#{gone}"
    assert rows(data) == {"queues": [kept_queue], "selectors": [(kept_queue, BLUE)], "messages": [(kept_queue, 2)]}
    async with serving(data_dir=data, large_message_size=LARGE_SIZE) as broker:
        url = broker.url
        assert set(broker.topics[TOPIC].subscriptions) == {kept}
        assert depth(broker, kept) == 2
        # the one unsubscribed comes back as a new subscription: empty, its selector the new one
        await anyio.to_thread.run_sync(lambda: subscribe("proton", url, "detach", name="gone"))
        assert depth(broker, gone) == 0
        received = await anyio.to_thread.run_sync(lambda: subscribe("proton", url, "close", 2, name="kept"))
        assert received == [LARGE, LARGE]
        assert depth(broker, kept) is None
        await until(lambda: not list((data / "bodies").iterdir()))
    assert rows(data) == {"queues": [gone_queue], "selectors": [], "messages": []}
    async with serving(data_dir=data) as broker:
        assert set(broker.topics[TOPIC].subscriptions) == {gone}
        assert depth(broker, gone) == 0


# --- the awaitable client; shared subscriptions; connections that end -------------------------------------------

OPTIONS: dict[str, Any] = {"name": "sub", "durable": True, "expiry_policy": "never"}


def connect(url: str) -> Any:
    """Our client, as container ``subscriber`` (its durable subscriptions are keyed by it)."""
    return amqp_async.connect(url, reconnect=False, container_id=CONTAINER)


@pytest.mark.anyio
async def test_the_clients_close_unsubscribes_and_gives_the_memory_back() -> None:
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker, connect(broker.url) as conn:
            receiver = await conn.open_receiver(TOPIC, credit=0, **OPTIONS)
            sender = await conn.open_sender(TOPIC)
            for number in range(10):
                await sender.send(Message(body=number))
            assert depth(broker) == 10 and broker.flow.held_count == 10
            await receiver.close()  # closed=true: unsubscribed, its ten messages dropped
            assert depth(broker) is None
            assert (broker.flow.held_count, broker.flow.held_bytes) == (0, 0)
            without = broker.flow.node_bytes  # the topic's node stays
            receiver = await conn.open_receiver(TOPIC, credit=10, **OPTIONS)  # a new one, empty
            assert depth(broker) == 0 and broker.flow.node_bytes > without
            await receiver.close()
            assert broker.flow.node_bytes == without


@pytest.mark.anyio
async def test_a_shared_durable_subscription_stays_while_a_link_is_attached() -> None:
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker, connect(broker.url) as first, connect(broker.url) as second:
            one = await first.open_receiver(TOPIC, credit=0, **OPTIONS)
            other = await second.open_receiver(TOPIC, credit=0, **OPTIONS)
            sender = await first.open_sender(TOPIC)
            await sender.send(Message(body="shared"))
            assert depth(broker) == 1
            await one.close()  # another link is attached: the subscription stays, its message too
            assert depth(broker) == 1
            other.add_credit(1)
            delivery = await other.receive()
            assert delivery.message.body == "shared"
            await delivery.accept()
            await other.close()  # the last link attached closes: unsubscribed
            assert depth(broker) is None


@pytest.mark.anyio
async def test_a_connection_closed_with_its_link_attached_keeps_the_durable_subscription() -> None:
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker:
            async with connect(broker.url) as conn:
                await conn.open_receiver(TOPIC, credit=0, **OPTIONS)
                sender = await conn.open_sender(TOPIC)
                await sender.send(Message(body="kept"))
            # the connection's close ends its sessions, which detaches its links without closing them
            await until(lambda: not broker.opened_connections)
            assert depth(broker) == 1


LOST = """
import os, sys
from proton.reactor import Container, DurableSubscription
from proton.utils import BlockingConnection

container = Container()
container.container_id = sys.argv[2]
connection = BlockingConnection(sys.argv[1], timeout=30, container=container)
connection.create_receiver(sys.argv[3], name="sub", options=DurableSubscription())
print("attached", flush=True)
os._exit(0)  # the socket goes without a close, a detach or an end: the connection is lost
"""


@pytest.mark.anyio
async def test_a_lost_connection_keeps_the_durable_subscription() -> None:
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker:
            result = await anyio.run_process([sys.executable, "-c", LOST, broker.url, CONTAINER, TOPIC])
            assert result.stdout.strip() == b"attached"
            await until(lambda: not broker.opened_connections)
            assert depth(broker) == 0
            async with connect(broker.url) as conn:
                receiver = await conn.open_receiver(TOPIC, credit=0, **OPTIONS)
                assert depth(broker) == 0
                await receiver.close()
                assert depth(broker) is None


@pytest.mark.anyio
async def test_the_brokers_own_close_of_a_subscribers_link_keeps_the_durable_subscription() -> None:
    """The broker closes a link that cannot take a message (§2.7.3 message-size-exceeded): the subscriber's answering
    detach says closed=true too, and is no unsubscribe (it was not the subscriber's close)."""
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker, connect(broker.url) as conn:
            receiver = await conn.open_receiver(TOPIC, credit=1, max_message_size=1000, **OPTIONS)
            sender = await conn.open_sender(TOPIC)
            await sender.send(Message(body="x" * 5000))
            with pytest.raises(amqp_async.LinkError, match="message-size-exceeded"):
                await receiver.receive()
            await until(lambda: not broker.topics[TOPIC].subscriptions[KEY].consumers)
            assert depth(broker) == 1


@pytest.mark.anyio
async def test_the_clients_detach_keeps_the_subscription_and_its_close_then_unsubscribes() -> None:
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker, connect(broker.url) as conn:
            receiver = await conn.open_receiver(TOPIC, credit=0, **OPTIONS)
            await receiver.detach()  # closed=false, and the broker's answer waited for
            assert receiver.is_closed and depth(broker) == 0
            assert not broker.topics[TOPIC].subscriptions[KEY].consumers
            with pytest.raises(amqp_async.ClosedByApplication):
                await receiver.receive()
            await receiver.detach()  # idempotent
            await receiver.close()  # the link is detached already: nothing more is sent, the subscription stays
            assert depth(broker) == 0
            sender = await conn.open_sender(TOPIC)
            await sender.send(Message(body="while away"))
            receiver = await conn.open_receiver(TOPIC, credit=1, **OPTIONS)
            delivery = await receiver.receive()
            assert delivery.message.body == "while away"
            await delivery.accept()
            await receiver.close()  # closed=true: unsubscribed
            assert depth(broker) is None


@pytest.mark.anyio
async def test_the_clients_stream_receiver_detaches_and_closes_likewise() -> None:
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker, connect(broker.url) as conn:
            receiver = await conn.open_stream_receiver(TOPIC, credit=0, **OPTIONS)  # on a session of its own
            await receiver.detach()
            assert receiver.is_closed and depth(broker) == 0
            sender = await conn.open_sender(TOPIC)
            await sender.send(Message(body=b"while away"))
            session = await conn.open_session()
            receiver = await session.open_stream_receiver(TOPIC, credit=1, **OPTIONS)  # on a session it shares
            delivery = await receiver.receive()
            assert (await delivery.read_message()).body == b"while away"
            await delivery.accept()
            await receiver.detach()
            assert depth(broker) == 0 and not session.is_closed
            receiver = await conn.open_stream_receiver(TOPIC, credit=0, **OPTIONS)
            await receiver.close()
            assert depth(broker) is None


@pytest.mark.anyio
async def test_a_message_rolled_back_into_an_unsubscribed_subscription_is_dropped() -> None:
    """A message accepted in a transaction, its subscription unsubscribed before the rollback: it goes with the
    subscription (before the fix it would have gone back into the deleted queue, its memory held for good)."""
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker, connect(broker.url) as conn:
            receiver = await conn.open_receiver(TOPIC, credit=1, **OPTIONS)
            sender = await conn.open_sender(TOPIC)
            await sender.send(Message(body="in a transaction"))
            txn = await conn.transaction()
            delivery = await receiver.receive()
            await delivery.accept(transaction=txn)
            queue = broker.topics[TOPIC].subscriptions[KEY]
            await until(lambda: not queue.consumers[0].unsettled)  # the transactional accept has arrived
            await receiver.close()  # unsubscribed while the transaction holds the message
            assert depth(broker) is None and broker.flow.held_count == 1
            await txn.rollback()
            assert len(queue) == 0
            assert (broker.flow.held_count, broker.flow.held_bytes) == (0, 0)
