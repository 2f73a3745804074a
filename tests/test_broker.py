"""The embedded broker (`amqp_async.broker`), proven with our awaitable client and with python-qpid-proton's
`BlockingConnection` (a client we did not write).

Most tests run the broker in-process (``async with Broker(port=0)``) and look at its nodes (``broker.queues``,
``broker.topics``) as well as at what the clients see. The proton tests run it in a background thread
(`BrokerThread`), as proton's blocking client owns the test thread. Every test is bounded: ``anyio.fail_after``
for the async ones, proton's own timeouts for the blocking ones.

What is checked: queues made on first attach; order; round-robin between competing receivers; topics (a copy per
subscriber, only what is published while subscribed); dynamic sources (a unique temporary queue, deleted on
detach); ANONYMOUS-RELAY (offered, and a null-target sender routed by the message's ``to``); at-most-once,
at-least-once and rcv-settle-mode second on both sides; released, modified (delivery-count,
undeliverable-here), rejected (dropped or dead-lettered); unsettled deliveries back to their queue in order when
a link detaches or a connection drops; drain; browsing (distribution-mode copy, proton's ``Copy()``); JMS
selectors (ours and proton's ``Selector``), an invalid one refused with ``amqp:invalid-field``; durable topic
subscriptions; SASL ANONYMOUS, PLAIN and SCRAM; TLS; the limits (connections, queue depth, message size); the
``amqp_broker`` pytest fixture; 1,000 messages with no loss and no duplicates.
"""

from __future__ import annotations

import socket
import ssl
import struct
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import anyio.from_thread
import pytest

import amqp_async
from amqp_async import AuthenticationError, ConnectionError, LinkError, Message, MessageRejected
from amqp_async.broker import TOPIC_PREFIX, Broker, BrokerThread
from amqp_async.broker.pytest_plugin import amqp_broker  # noqa: F401 - the fixture, used by a test below
from amqp_async.codec.delivery_states import Accepted
from amqp_async.types import symbol

proton = pytest.importorskip("proton", reason="python-qpid-proton is the independent client; CI installs it")

from proton import Message as ProtonMessage  # noqa: E402
from proton.reactor import Copy, DurableSubscription, Selector  # noqa: E402
from proton.utils import BlockingConnection  # noqa: E402

try:
    from tls_certs import make_ca, make_cert, openssl_available
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.tls_certs import make_ca, make_cert, openssl_available

pytestmark = pytest.mark.anyio

TIMEOUT = 10.0
#: How long "nothing more arrives" is watched for.
QUIET = 0.2


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# ---------------------------------------------------------------------------------------------------------------
# Helpers


@asynccontextmanager
async def serving(**options: Any) -> AsyncIterator[Broker]:
    """A broker on a free port, serving for the duration of the block."""
    options.setdefault("port", 0)
    async with Broker(**options) as broker:
        yield broker


def connect(broker: Broker, **options: Any) -> Any:
    """Our client, without reconnect (a refused or dropped connection must surface, not be retried)."""
    options.setdefault("reconnect", False)
    return amqp_async.connect(broker.url, **options)


async def eventually(predicate: Callable[[], Any], timeout: float = 5.0) -> None:
    """Wait until ``predicate()`` holds (broker-side effects that the client is not told about)."""
    with anyio.fail_after(timeout):
        while not predicate():
            await anyio.sleep(0.01)


async def receive_bodies(receiver: amqp_async.Receiver, count: int, *, settle: str | None = "accept") -> list[Any]:
    """Receive ``count`` messages and settle each as ``settle`` says (None: leave unsettled)."""
    bodies = []
    for _ in range(count):
        delivery = await receiver.receive()
        bodies.append(delivery.message.body)
        if settle is not None:
            await getattr(delivery, settle)()
    return bodies


async def nothing_arrives(receiver: amqp_async.Receiver, wait: float = QUIET) -> bool:
    """True when no delivery arrives on ``receiver`` within ``wait`` seconds."""
    with anyio.move_on_after(wait):
        await receiver.receive()
        return False
    return True


async def send_all(sender: amqp_async.Sender, bodies: Any, **properties: Any) -> None:
    for body in bodies:
        await sender.send(Message(body=body, **properties))


async def consumers_have_credit(broker: Broker, address: str, count: int) -> None:
    """Wait until ``address`` has ``count`` consumers that all hold credit at the broker."""
    await eventually(
        lambda: (
            address in broker.queues
            and len(broker.queues[address].consumers) == count
            and all(consumer.credit() > 0 for consumer in broker.queues[address].consumers)
        )
    )


def pump(conn: BlockingConnection, predicate: Callable[[], Any], timeout: float = TIMEOUT) -> None:
    """Run proton's event loop until ``predicate()`` holds (BlockingConnection does I/O only inside its calls)."""
    deadline = time.monotonic() + timeout
    saved = conn.container.timeout
    conn.container.timeout = 0.02
    try:
        while not predicate():
            if time.monotonic() > deadline:
                raise TimeoutError("proton client pump timed out")
            conn.container.process()
    finally:
        conn.container.timeout = saved


@contextmanager
def broker_in_thread(**options: Any) -> Iterator[Broker]:
    """A broker on its own event loop in a background thread, for proton's blocking client.

    Not `BrokerThread`: that one is tested on its own below; these tests prove the broker with proton even while
    the thread runner has a bug of its own.
    """
    options.setdefault("port", 0)
    broker = Broker(**options)
    with anyio.from_thread.start_blocking_portal() as portal, portal.wrap_async_context_manager(broker):
        yield broker


def drop_abruptly(conn: amqp_async.Connection) -> None:
    """Reset the client's TCP connection (SO_LINGER 0: an RST), with no AMQP close."""
    stream = conn._stream
    assert stream is not None
    sock: socket.socket = stream.extra(anyio.abc.SocketAttribute.raw_socket)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.shutdown(socket.SHUT_RDWR)


# ---------------------------------------------------------------------------------------------------------------
# Nodes


async def test_broker_serves_on_a_free_port_and_gives_its_url() -> None:
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker, serving() as other:
            assert broker.port > 0
            assert broker.url == f"amqp://127.0.0.1:{broker.port}"
            assert other.port != broker.port


async def test_a_queue_is_made_on_first_attach_of_a_receiver() -> None:
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker, connect(broker) as conn:
            assert "orders" not in broker.queues
            await conn.open_receiver("orders")
            assert "orders" in broker.queues


async def test_a_queue_is_made_on_first_attach_of_a_sender() -> None:
    """The docstring of _server.py: "Addresses name queues, made on first attach (or first message, for an
    anonymous sender)": a sender attaching to a new address makes its queue."""
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker, connect(broker) as conn:
            await conn.open_sender("invoices")
            assert "invoices" in broker.queues


async def test_messages_sent_before_any_receiver_wait_in_the_queue_in_order() -> None:
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker, connect(broker) as conn:
            sender = await conn.open_sender("q")
            await send_all(sender, range(20))
            assert len(broker.queues["q"]) == 20
            receiver = await conn.open_receiver("q")
            assert await receive_bodies(receiver, 20) == list(range(20))
            assert len(broker.queues["q"]) == 0


async def test_messages_arrive_in_order_across_connections() -> None:
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker, connect(broker) as producer, connect(broker) as consumer:
            receiver = await consumer.open_receiver("q", credit=7)
            sender = await producer.open_sender("q")
            await send_all(sender, (f"m{i}" for i in range(50)))
            assert await receive_bodies(receiver, 50) == [f"m{i}" for i in range(50)]


async def test_competing_receivers_are_served_round_robin() -> None:
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker, connect(broker) as conn:
            first = await conn.open_receiver("work", credit=10)
            second = await conn.open_receiver("work", credit=10)
            await consumers_have_credit(broker, "work", 2)
            sender = await conn.open_sender("work")
            await send_all(sender, range(8))
            got_first = await receive_bodies(first, 4)
            got_second = await receive_bodies(second, 4)
            assert sorted([got_first, got_second]) == [[0, 2, 4, 6], [1, 3, 5, 7]]
            assert await nothing_arrives(first)
            assert await nothing_arrives(second)


async def test_a_receiver_without_credit_is_skipped_by_round_robin() -> None:
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker, connect(broker) as conn:
            busy = await conn.open_receiver("work", credit=0)
            idle = await conn.open_receiver("work", credit=10)
            await eventually(lambda: len(broker.queues["work"].consumers) == 2)
            sender = await conn.open_sender("work")
            await send_all(sender, range(3))
            assert await receive_bodies(idle, 3) == [0, 1, 2]
            assert busy.queued == 0


async def test_every_topic_subscriber_gets_a_copy_and_a_late_one_only_later_messages() -> None:
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker, connect(broker) as conn:
            address = TOPIC_PREFIX + "news"
            early = await conn.open_receiver(address)
            also_early = await conn.open_receiver(address)
            sender = await conn.open_sender(address)
            await send_all(sender, ["a", "b"])
            late = await conn.open_receiver(address)
            await send_all(sender, ["c"])
            assert await receive_bodies(early, 3) == ["a", "b", "c"]
            assert await receive_bodies(also_early, 3) == ["a", "b", "c"]
            assert await receive_bodies(late, 1) == ["c"]
            assert await nothing_arrives(late)
            assert address in broker.topics
            assert address not in broker.queues


async def test_a_topic_without_subscribers_drops_what_is_published() -> None:
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker, connect(broker) as conn:
            address = TOPIC_PREFIX + "void"
            sender = await conn.open_sender(address)
            assert isinstance(await sender.send(Message(body="nobody listens")), Accepted)
            receiver = await conn.open_receiver(address)
            assert await nothing_arrives(receiver)


async def test_a_non_durable_topic_subscription_goes_away_with_its_link() -> None:
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker, connect(broker) as conn:
            address = TOPIC_PREFIX + "t"
            receiver = await conn.open_receiver(address)
            assert len(broker.topics[address].subscriptions) == 1
            await receiver.close()
            await eventually(lambda: not broker.topics[address].subscriptions)


async def test_a_dynamic_source_gets_a_unique_temporary_queue_deleted_when_its_link_detaches() -> None:
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker, connect(broker) as conn:
            first = await conn.open_receiver(None, dynamic=True)
            second = await conn.open_receiver(None, dynamic=True)
            assert first.address and second.address
            assert first.address != second.address
            assert first.address in broker.queues and second.address in broker.queues
            sender = await conn.open_sender(first.address)
            await sender.send(Message(body="reply"))
            assert await receive_bodies(first, 1) == ["reply"]
            assert await nothing_arrives(second)
            await first.close()
            await eventually(lambda: first.address not in broker.queues)
            assert second.address in broker.queues


async def test_a_dynamic_node_is_made_for_its_link_and_no_other_client_can_take_it_first() -> None:
    """§3.5.3: a dynamic node is made for the link that asked. Its name cannot be guessed: another client that
    attached first to every name a counter would give gets none of the replies meant for it."""
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker, connect(broker) as intruder, connect(broker) as owner:
            probe = await owner.open_receiver(None, dynamic=True)
            assert probe.address is not None
            prefix = probe.address.rsplit("/", 1)[0]
            await probe.close()
            squatted = [await intruder.open_receiver(f"{prefix}/{number}") for number in range(1, 21)]
            replies = await owner.open_receiver(None, dynamic=True)
            assert replies.address not in {receiver.address for receiver in squatted}
            assert broker.queues[replies.address].dynamic
            sender = await owner.open_sender(replies.address)
            await sender.send(Message(body="secret reply"))
            assert await receive_bodies(replies, 1) == ["secret reply"]
            for receiver in squatted:
                assert receiver.receive_nowait() is None


async def test_a_dynamic_queue_is_deleted_when_its_connection_closes() -> None:
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker:
            async with connect(broker) as conn:
                receiver = await conn.open_receiver(None, dynamic=True)
                address = receiver.address
                assert address in broker.queues
            await eventually(lambda: address not in broker.queues)


async def test_a_receiver_without_a_source_address_is_refused_with_not_found() -> None:
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker, connect(broker) as conn:
            with pytest.raises(LinkError) as info:
                await conn.open_receiver(None)
            assert info.value.condition == "amqp:not-found"
            sender = await conn.open_sender("q")  # the session and connection live on
            await sender.send(Message(body=1))
            assert len(broker.queues["q"]) == 1


async def test_anonymous_relay_is_offered_and_routes_by_the_message_address() -> None:
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker, connect(broker) as conn:
            assert symbol("ANONYMOUS-RELAY") in conn.remote_offered_capabilities
            one = await conn.open_receiver("one")
            two = await conn.open_receiver("two")
            news = await conn.open_receiver(TOPIC_PREFIX + "news")
            relay = await conn.open_sender(None)
            assert isinstance(await relay.send(Message(body=1, address="one")), Accepted)
            assert isinstance(await relay.send(Message(body=2, address="two")), Accepted)
            assert isinstance(await relay.send(Message(body=3, address=TOPIC_PREFIX + "news")), Accepted)
            assert await receive_bodies(one, 1) == [1]
            assert await receive_bodies(two, 1) == [2]
            assert await receive_bodies(news, 1) == [3]
            assert "new-by-relay" not in broker.queues
            await relay.send(Message(body=4, address="new-by-relay"))
            assert len(broker.queues["new-by-relay"]) == 1


async def test_anonymous_relay_rejects_a_message_without_an_address() -> None:
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker, connect(broker) as conn:
            relay = await conn.open_sender(None)
            with pytest.raises(MessageRejected) as info:
                await relay.send(Message(body="to nowhere"))
            assert info.value.condition == "amqp:not-found"
            assert await relay.send(Message(body="fine", address="q")) == Accepted()  # the link lives on
            assert len(broker.queues["q"]) == 1


# ---------------------------------------------------------------------------------------------------------------
# Delivery guarantees


async def test_at_most_once_sender_and_receiver() -> None:
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker, connect(broker) as conn:
            sender = await conn.open_sender("q", delivery="at-most-once")
            assert await sender.send(Message(body="fire")) is None
            await eventually(lambda: "q" in broker.queues and len(broker.queues["q"]) == 1)
            receiver = await conn.open_receiver("q", delivery="at-most-once")
            delivery = await receiver.receive()
            assert delivery.message.body == "fire"
            assert delivery.settled  # arrived settled: nothing to acknowledge
            consumer = broker.queues["q"].consumers[0]
            assert consumer.unsettled == {}
            assert len(broker.queues["q"]) == 0
            await receiver.close()
            assert len(broker.queues["q"]) == 0  # nothing comes back: it was settled when sent


async def test_at_least_once_keeps_the_message_until_it_is_accepted() -> None:
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker, connect(broker) as conn:
            sender = await conn.open_sender("q")
            assert isinstance(await sender.send(Message(body="important")), Accepted)
            receiver = await conn.open_receiver("q")
            delivery = await receiver.receive()
            assert not delivery.settled
            consumer = broker.queues["q"].consumers[0]
            assert len(consumer.unsettled) == 1
            await delivery.accept()
            await eventually(lambda: not consumer.unsettled)
            await receiver.close()
            assert len(broker.queues["q"]) == 0


async def test_exactly_once_sender_rcv_settle_mode_second() -> None:
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker, connect(broker) as conn:
            sender = await conn.open_sender("q", delivery="exactly-once")
            assert sender._engine_link.remote_rcv_settle_mode == 1  # the broker agreed to settle second
            for body in range(3):
                assert isinstance(await sender.send(Message(body=body)), Accepted)
            assert len(broker.queues["q"]) == 3
            receiver = await conn.open_receiver("q")
            assert await receive_bodies(receiver, 3) == [0, 1, 2]


async def test_exactly_once_receiver_rcv_settle_mode_second() -> None:
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker, connect(broker) as conn:
            sender = await conn.open_sender("q")
            await send_all(sender, ["x", "y"])
            receiver = await conn.open_receiver("q", delivery="exactly-once")
            assert receiver._engine_link.remote_rcv_settle_mode == 1
            first = await receiver.receive()
            await first.accept()  # returns once the broker has settled
            assert first.settled
            second = await receiver.receive()
            assert second.message.body == "y"
            await second.release()
            again = await receiver.receive()
            assert again.message.body == "y"
            await again.accept()
            consumer = broker.queues["q"].consumers[0]
            assert consumer.unsettled == {}
            assert len(broker.queues["q"]) == 0


# ---------------------------------------------------------------------------------------------------------------
# Outcomes


async def test_a_released_message_goes_back_to_the_head_of_the_queue() -> None:
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker, connect(broker) as conn:
            sender = await conn.open_sender("q")
            await send_all(sender, ["a", "b", "c"])
            receiver = await conn.open_receiver("q", credit=0)
            receiver.add_credit(1)
            first = await receiver.receive()
            assert first.message.body == "a"
            await first.release()
            await eventually(lambda: len(broker.queues["q"]) == 3)
            assert broker.queues["q"].entries[0].message.body == "a"
            receiver.add_credit(3)
            deliveries = [await receiver.receive() for _ in range(3)]
            assert [d.message.body for d in deliveries] == ["a", "b", "c"]
            assert deliveries[0].message.delivery_count == 0  # released: not a failed attempt


async def test_modified_delivery_failed_counts_the_attempt_in_the_header() -> None:
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker, connect(broker) as conn:
            sender = await conn.open_sender("q")
            await sender.send(Message(body="flaky"))
            receiver = await conn.open_receiver("q", credit=1)
            counts = []
            for _ in range(3):
                delivery = await receiver.receive()
                counts.append(delivery.message.delivery_count)
                await delivery.modify(delivery_failed=True)
            final = await receiver.receive()
            counts.append(final.message.delivery_count)
            assert counts == [0, 1, 2, 3]
            assert final.message.body == "flaky"
            assert final.message.first_acquirer is False
            await final.accept()


async def test_modified_without_delivery_failed_leaves_the_count() -> None:
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker, connect(broker) as conn:
            sender = await conn.open_sender("q")
            await sender.send(Message(body="m"))
            receiver = await conn.open_receiver("q", credit=1)
            delivery = await receiver.receive()
            await delivery.modify(delivery_failed=False)
            again = await receiver.receive()
            assert again.message.body == "m"
            assert again.message.delivery_count == 0


async def test_modified_message_annotations_are_merged_into_the_redelivered_message() -> None:
    """§3.4.5: the modified outcome's message-annotations are combined with the message's own."""
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker, connect(broker) as conn:
            sender = await conn.open_sender("q")
            await sender.send(Message(body="m", annotations={symbol("x-opt-origin"): "app"}))
            receiver = await conn.open_receiver("q", credit=1)
            delivery = await receiver.receive()
            await delivery.modify(delivery_failed=True, annotations={"x-opt-retry-reason": "busy"})
            again = await receiver.receive()
            assert again.message.delivery_count == 1
            assert again.message.annotations == {
                symbol("x-opt-origin"): "app",
                symbol("x-opt-retry-reason"): "busy",
            }
            assert len(broker.queues["q"]) == 0


async def test_undeliverable_here_is_not_redelivered_to_that_consumer_but_to_another() -> None:
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker, connect(broker) as conn:
            sender = await conn.open_sender("q")
            await sender.send(Message(body="not for me"))
            picky = await conn.open_receiver("q", credit=0)
            picky.add_credit(1)
            delivery = await picky.receive()
            assert delivery.message.body == "not for me"
            await delivery.modify(delivery_failed=False, undeliverable_here=True)
            await eventually(lambda: len(broker.queues["q"]) == 1)
            picky.add_credit(1)
            await picky.drain()  # honoured at once: nothing may be sent to this consumer
            assert picky.queued == 0
            assert picky.credit == 0
            other = await conn.open_receiver("q", credit=1)
            assert await receive_bodies(other, 1) == ["not for me"]
            assert len(broker.queues["q"]) == 0


async def test_a_rejected_message_is_dropped_without_a_dead_letter_queue() -> None:
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker, connect(broker) as conn:
            sender = await conn.open_sender("q")
            await send_all(sender, ["poison", "good"])
            receiver = await conn.open_receiver("q", credit=1)
            delivery = await receiver.receive()
            await delivery.reject("amqp:decode-error", "cannot parse")
            assert await receive_bodies(receiver, 1) == ["good"]
            assert await nothing_arrives(receiver)
            assert len(broker.queues["q"]) == 0
            assert set(broker.queues) == {"q"}


async def test_a_rejected_message_moves_to_the_dead_letter_queue() -> None:
    with anyio.fail_after(TIMEOUT):
        async with serving(dead_letter_queue="dlq") as broker, connect(broker) as conn:
            sender = await conn.open_sender("q")
            await sender.send(Message(body="poison", properties={"k": "v"}))
            receiver = await conn.open_receiver("q")
            delivery = await receiver.receive()
            await delivery.reject()
            await eventually(lambda: "dlq" in broker.queues and len(broker.queues["dlq"]) == 1)
            assert len(broker.queues["q"]) == 0
            dead = await conn.open_receiver("dlq")
            got = await dead.receive()
            assert got.message.body == "poison"
            assert got.message.properties == {"k": "v"}
            await got.accept()
            assert await nothing_arrives(receiver)


async def test_unsettled_deliveries_of_a_detached_receiver_return_to_the_queue_in_order() -> None:
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker, connect(broker) as conn:
            sender = await conn.open_sender("q")
            await send_all(sender, range(6))
            receiver = await conn.open_receiver("q", credit=10)
            deliveries = [await receiver.receive() for _ in range(6)]
            assert [d.message.body for d in deliveries] == list(range(6))
            await deliveries[0].accept()
            await deliveries[3].accept()
            consumer = broker.queues["q"].consumers[0]
            await eventually(lambda: len(consumer.unsettled) == 4)  # the broker has the two outcomes
            await receiver.close()
            await eventually(lambda: len(broker.queues["q"]) == 4)
            assert [entry.message.body for entry in broker.queues["q"].entries] == [1, 2, 4, 5]
            await sender.send(Message(body=6))
            successor = await conn.open_receiver("q")
            assert await receive_bodies(successor, 5) == [1, 2, 4, 5, 6]


async def test_outcomes_given_just_before_a_detach_reach_the_broker_first() -> None:
    """A receiver that accepts and at once closes: its dispositions must go out before its detach, or the broker
    puts the accepted messages back (they are redelivered: duplicates)."""
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker, connect(broker) as conn:
            sender = await conn.open_sender("q")
            await send_all(sender, range(3))
            receiver = await conn.open_receiver("q", credit=10)
            deliveries = [await receiver.receive() for _ in range(3)]
            await deliveries[0].accept()
            await deliveries[2].accept()
            await receiver.close()
            await eventually(lambda: not broker.queues["q"].consumers)
            assert [entry.message.body for entry in broker.queues["q"].entries] == [1]


async def test_unsettled_deliveries_return_in_order_when_the_connection_drops() -> None:
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker, connect(broker) as producer:
            sender = await producer.open_sender("q")
            await send_all(sender, range(5))
            doomed = await connect(broker)
            receiver = await doomed.open_receiver("q", credit=10)
            deliveries = [await receiver.receive() for _ in range(5)]
            await deliveries[1].accept()
            consumer = broker.queues["q"].consumers[0]
            await eventually(lambda: len(consumer.unsettled) == 4)
            drop_abruptly(doomed)
            await eventually(lambda: len(broker.queues["q"]) == 4 and not broker.queues["q"].consumers)
            assert [entry.message.body for entry in broker.queues["q"].entries] == [0, 2, 3, 4]
            with anyio.move_on_after(2):
                await doomed.close()
            successor = await producer.open_receiver("q")
            assert await receive_bodies(successor, 4) == [0, 2, 3, 4]
            await eventually(lambda: len(broker.connections) == 1)


async def test_unsettled_deliveries_return_when_their_session_ends() -> None:
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker, connect(broker) as conn:
            sender = await conn.open_sender("q")
            await send_all(sender, ["a", "b"])
            session = await conn.open_session()
            receiver = await session.open_receiver("q")
            assert await receive_bodies(receiver, 2, settle=None) == ["a", "b"]
            await session.close()
            await eventually(lambda: len(broker.queues["q"]) == 2 and not broker.queues["q"].consumers)
            successor = await conn.open_receiver("q")
            assert await receive_bodies(successor, 2) == ["a", "b"]


async def test_drain_returns_at_once_with_no_messages() -> None:
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker, connect(broker) as conn:
            receiver = await conn.open_receiver("empty", credit=0)
            receiver.add_credit(5)
            with anyio.fail_after(2):
                await receiver.drain()
            assert receiver.credit == 0
            assert receiver.queued == 0


async def test_drain_delivers_what_there_is_then_gives_back_the_rest() -> None:
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker, connect(broker) as conn:
            sender = await conn.open_sender("q")
            await send_all(sender, ["a", "b"])
            receiver = await conn.open_receiver("q", credit=0)
            receiver.add_credit(5)
            with anyio.fail_after(2):
                await receiver.drain()
            assert receiver.credit == 0
            assert receiver.queued == 2
            assert await receive_bodies(receiver, 2) == ["a", "b"]
            await sender.send(Message(body="c"))
            assert await nothing_arrives(receiver)  # no credit left after the drain
            assert len(broker.queues["q"]) == 1


# ---------------------------------------------------------------------------------------------------------------
# Browsing and selectors


async def test_browsing_with_distribution_mode_copy_leaves_the_messages() -> None:
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker, connect(broker) as conn:
            sender = await conn.open_sender("q")
            await send_all(sender, ["a", "b", "c"])
            browser = await conn.open_receiver("q", distribution_mode="copy")
            assert await receive_bodies(browser, 3) == ["a", "b", "c"]
            assert await nothing_arrives(browser)  # each message is shown once
            assert len(broker.queues["q"]) == 3
            await sender.send(Message(body="d"))
            assert await receive_bodies(browser, 1) == ["d"]
            consumer = await conn.open_receiver("q")
            assert await receive_bodies(consumer, 4) == ["a", "b", "c", "d"]
            assert len(broker.queues["q"]) == 0


async def test_a_selector_delivers_only_matching_messages() -> None:
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker, connect(broker) as conn:
            sender = await conn.open_sender("paint")
            for index, color in enumerate(["red", "blue", "red", "green", "red"]):
                await sender.send(Message(body=index, properties={"color": color}))
            reds = await conn.open_receiver("paint", selector="color = 'red'")
            assert await receive_bodies(reds, 3) == [0, 2, 4]
            assert await nothing_arrives(reds)
            assert [entry.message.body for entry in broker.queues["paint"].entries] == [1, 3]
            await sender.send(Message(body=5, properties={"color": "red"}))
            assert await receive_bodies(reds, 1) == [5]
            others = await conn.open_receiver("paint", selector="color IN ('blue', 'green') AND JMSPriority = 4")
            assert await receive_bodies(others, 2) == [1, 3]


async def test_a_selector_on_a_topic_subscription() -> None:
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker, connect(broker) as conn:
            address = TOPIC_PREFIX + "prices"
            big = await conn.open_receiver(address, selector="amount > 100")
            every = await conn.open_receiver(address)
            sender = await conn.open_sender(address)
            for amount in (5, 500, 50, 1000):
                await sender.send(Message(body=amount, properties={"amount": amount}))
            assert await receive_bodies(big, 2) == [500, 1000]
            assert await receive_bodies(every, 4) == [5, 500, 50, 1000]
            assert broker.topics[address]


async def test_an_invalid_selector_is_refused_at_attach_with_invalid_field() -> None:
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker, connect(broker) as conn:
            with pytest.raises(LinkError) as info:
                await conn.open_receiver("q", selector="color = = 'red'")
            assert info.value.condition == "amqp:invalid-field"
            assert "selector" in info.value.description
            assert not broker.queues.get("q") or not broker.queues["q"].consumers
            receiver = await conn.open_receiver("q", selector="color = 'red'")  # the connection is fine
            assert not receiver.is_closed


# ---------------------------------------------------------------------------------------------------------------
# Durable subscriptions


@pytest.mark.parametrize("durable", [2, 1])
async def test_a_durable_subscription_keeps_the_messages_published_while_detached(durable: int) -> None:
    address = TOPIC_PREFIX + "events"
    options = {"name": "my-subscription", "durable": durable, "expiry_policy": "never"}
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker, connect(broker) as publisher_conn:
            publisher = await publisher_conn.open_sender(address)
            async with connect(broker, container_id="subscriber-app") as conn:
                subscription = await conn.open_receiver(address, **options)
                await publisher.send(Message(body="before"))
                assert await receive_bodies(subscription, 1) == ["before"]
                queue = broker.topics[address].subscriptions["subscriber-app/my-subscription"]
                await eventually(lambda: not queue.consumers[0].unsettled)  # the accept arrived before the detach
                await subscription.detach()  # closed=false: the subscription stays (a close would unsubscribe)
                await send_all(publisher, ["while detached 1", "while detached 2"])
                subscription = await conn.open_receiver(address, **options)
                assert await receive_bodies(subscription, 2) == ["while detached 1", "while detached 2"]
            # the connection is gone too: the subscription stays while the broker runs
            await send_all(publisher, ["while disconnected"])
            async with connect(broker, container_id="subscriber-app") as conn:
                subscription = await conn.open_receiver(address, **options)
                assert await receive_bodies(subscription, 1) == ["while disconnected"]
                assert await nothing_arrives(subscription)
            # another container with the same link name is another subscription
            async with connect(broker, container_id="someone-else") as conn:
                stranger = await conn.open_receiver(address, **options)
                await publisher.send(Message(body="new"))
                assert await receive_bodies(stranger, 1) == ["new"]


async def test_a_subscription_without_expiry_policy_never_is_not_durable() -> None:
    address = TOPIC_PREFIX + "events"
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker, connect(broker) as conn:
            publisher = await conn.open_sender(address)
            subscription = await conn.open_receiver(address, name="sub", durable=2)  # expiry: session-end
            await subscription.close()
            await publisher.send(Message(body="lost"))
            subscription = await conn.open_receiver(address, name="sub", durable=2)
            assert await nothing_arrives(subscription)


# ---------------------------------------------------------------------------------------------------------------
# SASL and TLS


async def test_anonymous_is_the_default() -> None:
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker, connect(broker, allowed_mechs="ANONYMOUS") as conn:
            sender = await conn.open_sender("q")
            assert isinstance(await sender.send(Message(body=1)), Accepted)


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-1"])
async def test_users_authenticate_with_the_right_password(mechanism: str) -> None:
    with anyio.fail_after(TIMEOUT):
        async with serving(users={"alice": "secret", "bob": "hunter2"}) as broker:
            async with connect(broker, user="alice", password="secret", allowed_mechs=mechanism) as conn:
                sender = await conn.open_sender("q")
                assert isinstance(await sender.send(Message(body=mechanism)), Accepted)
            assert len(broker.queues["q"]) == 1


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
async def test_a_wrong_password_is_an_authentication_error(mechanism: str) -> None:
    with anyio.fail_after(TIMEOUT):
        async with serving(users={"alice": "secret"}) as broker:
            with pytest.raises(AuthenticationError):
                async with connect(broker, user="alice", password="wrong", allowed_mechs=mechanism) as conn:
                    await conn.open_sender("q")
            with pytest.raises(AuthenticationError):
                async with connect(broker, user="mallory", password="secret", allowed_mechs=mechanism) as conn:
                    await conn.open_sender("q")


async def test_with_users_anonymous_is_not_offered() -> None:
    with anyio.fail_after(TIMEOUT):
        async with serving(users={"alice": "secret"}) as broker:
            with pytest.raises(AuthenticationError) as info:  # "no mechanism both sides accept"
                async with connect(broker, allowed_mechs="ANONYMOUS") as conn:
                    await conn.open_sender("q")
            assert "ANONYMOUS" not in str(info.value).split("offered")[1].split("]")[0]


async def test_with_users_and_allow_anonymous_both_are_accepted() -> None:
    with anyio.fail_after(TIMEOUT):
        async with serving(users={"alice": "secret"}, allow_anonymous=True) as broker:
            async with connect(broker, allowed_mechs="ANONYMOUS") as conn:
                await conn.open_sender("q")
            async with connect(broker, user="alice", password="secret", allowed_mechs="SCRAM-SHA-256") as conn:
                await conn.open_sender("q")


def test_proton_authenticates_with_plain_and_is_refused_with_a_wrong_password() -> None:
    with broker_in_thread(users={"alice": "secret"}) as broker:
        url = f"amqp://alice:secret@127.0.0.1:{broker.port}"
        conn = BlockingConnection(url, timeout=TIMEOUT, allowed_mechs="PLAIN", allow_insecure_mechs=True)
        try:
            conn.create_sender("q").send(ProtonMessage(body="authenticated"))
        finally:
            conn.close()
        assert len(broker.queues["q"]) == 1
        with pytest.raises(proton.ConnectionException):
            BlockingConnection(
                f"amqp://alice:wrong@127.0.0.1:{broker.port}",
                timeout=TIMEOUT,
                allowed_mechs="PLAIN",
                allow_insecure_mechs=True,
            ).create_sender("q")


@pytest.mark.skipif(not openssl_available(), reason="the openssl command makes the test certificates")
async def test_tls_with_a_certificate_and_key(tmp_path: Path) -> None:
    ca = make_ca(tmp_path, "ca")
    server = make_cert(tmp_path, "server", ca, "localhost", san=["DNS:localhost", "IP:127.0.0.1"])
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.load_cert_chain(server.cert, server.key)
    client_context = ssl.create_default_context(cafile=ca.cert)
    with anyio.fail_after(TIMEOUT):
        async with serving(ssl_context=server_context) as broker:
            assert broker.url == f"amqps://127.0.0.1:{broker.port}"
            async with connect(broker, ssl_context=client_context) as conn:
                sender = await conn.open_sender("secure")
                await sender.send(Message(body="over tls"))
                receiver = await conn.open_receiver("secure")
                assert await receive_bodies(receiver, 1) == ["over tls"]
            with pytest.raises(ConnectionError):  # a client that does not trust the CA
                async with connect(broker, ssl_context=ssl.create_default_context()) as conn:
                    await conn.open_sender("secure")
            with pytest.raises(ConnectionError):  # plain AMQP to a TLS port
                async with amqp_async.connect(f"amqp://127.0.0.1:{broker.port}", reconnect=False) as conn:
                    await conn.open_sender("secure")
            assert len(broker.queues["secure"]) == 0


@pytest.mark.skipif(not openssl_available(), reason="the openssl command makes the test certificates")
async def test_a_tls_handshake_never_begun_is_closed_at_the_handshake_timeout(tmp_path: Path) -> None:
    """The TLS handshake is bounded by ``handshake_timeout`` (it was anyio's 30 s, whatever the broker's option); a
    real client is served as before."""
    ca = make_ca(tmp_path, "ca")
    server = make_cert(tmp_path, "server", ca, "localhost", san=["IP:127.0.0.1"])
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.load_cert_chain(server.cert, server.key)
    client_context = ssl.create_default_context(cafile=ca.cert)
    with anyio.fail_after(TIMEOUT):
        async with serving(ssl_context=server_context, handshake_timeout=0.5) as broker:
            silent = await anyio.connect_tcp("127.0.0.1", broker.port)  # connects; no ClientHello ever
            async with silent:
                started = anyio.current_time()
                with pytest.raises((anyio.EndOfStream, anyio.BrokenResourceError, OSError)):
                    await silent.receive()  # the broker closes it
                assert 0.4 <= anyio.current_time() - started < 5  # at the broker's deadline, not anyio's 30 s
            async with connect(broker, ssl_context=client_context) as conn:
                sender = await conn.open_sender("secure")
                await sender.send(Message(body="after the silent one"))


# ---------------------------------------------------------------------------------------------------------------
# Limits


async def test_max_connections_refuses_the_extra_connection_with_resource_limit_exceeded() -> None:
    with anyio.fail_after(TIMEOUT):
        async with serving(max_connections=2) as broker, connect(broker) as first, connect(broker) as second:
            with pytest.raises(ConnectionError) as info:
                async with connect(broker) as third:
                    await third.open_sender("q")
            assert info.value.condition == "amqp:resource-limit-exceeded"
            for conn in (first, second):
                sender = await conn.open_sender("q")
                assert isinstance(await sender.send(Message(body="still served")), Accepted)
            await second.close()
            await eventually(lambda: len(broker.connections) == 1)
            async with connect(broker) as again:
                await again.open_sender("q")


async def test_max_queue_depth_with_when_full_reject_rejects_messages_beyond_it() -> None:
    with anyio.fail_after(TIMEOUT):
        async with serving(max_queue_depth=3, when_full="reject") as broker, connect(broker) as conn:
            sender = await conn.open_sender("q")
            await send_all(sender, range(3))
            with pytest.raises(MessageRejected) as info:
                await sender.send(Message(body="one too many"))
            assert info.value.condition == "amqp:resource-limit-exceeded"
            assert len(broker.queues["q"]) == 3
            receiver = await conn.open_receiver("q", credit=1)
            assert await receive_bodies(receiver, 1) == [0]
            await eventually(lambda: len(broker.queues["q"]) < 3)
            assert isinstance(await sender.send(Message(body="room again")), Accepted)
            other = await conn.open_sender("other")  # the limit is per queue
            await send_all(other, range(3))


async def test_max_queue_depth_applies_to_anonymous_relay_and_topic_subscriptions() -> None:
    with anyio.fail_after(TIMEOUT):
        async with serving(max_queue_depth=1) as broker, connect(broker) as conn:
            relay = await conn.open_sender(None)
            await relay.send(Message(body=1, address="q"))
            with pytest.raises(MessageRejected) as info:
                await relay.send(Message(body=2, address="q"))
            assert info.value.condition == "amqp:resource-limit-exceeded"
            assert len(broker.queues["q"]) == 1


async def test_max_message_size_is_announced_and_a_larger_message_is_refused() -> None:
    with anyio.fail_after(TIMEOUT):
        async with serving(max_message_size=1000) as broker, connect(broker) as conn:
            sender = await conn.open_sender("q")
            assert sender._engine_link.remote_max_message_size == 1000
            assert isinstance(await sender.send(Message(body=b"x" * 500)), Accepted)
            with pytest.raises(amqp_async.AMQPError) as info:
                await sender.send(Message(body=b"x" * 2000))
            assert info.value.condition == "amqp:link:message-size-exceeded"
            assert len(broker.queues["q"]) == 1


def test_max_message_size_rejects_a_larger_message_from_a_client_that_ignores_it() -> None:
    """proton's sender does not check the announced max-message-size, so the broker's own refusal is seen."""
    with broker_in_thread(max_message_size=1000) as broker:
        conn = BlockingConnection(broker.url, timeout=TIMEOUT)
        try:
            sender = conn.create_sender("q")
            sender.send(ProtonMessage(body="small"))
            big = sender.link.delivery(b"big")
            sender.link.send(ProtonMessage(body="x" * 5000).encode())
            sender.link.advance()
            pump(conn, lambda: big.remote_state != 0 or sender.link.state & proton.Endpoint.REMOTE_CLOSED)
            assert big.remote_state == proton.Delivery.REJECTED
            assert big.remote.condition.name == "amqp:link:message-size-exceeded"
            assert len(broker.queues["q"]) == 1
        finally:
            conn.close()


# ---------------------------------------------------------------------------------------------------------------
# python-qpid-proton's BlockingConnection as the client


@pytest.fixture
def threaded() -> Iterator[Broker]:
    with broker_in_thread() as broker:
        yield broker


def test_proton_sends_and_receives_in_order(threaded: Broker) -> None:
    conn = BlockingConnection(threaded.url, timeout=TIMEOUT)
    try:
        sender = conn.create_sender("proton-q")
        for index in range(10):
            sender.send(ProtonMessage(body=index, subject="s"))
        receiver = conn.create_receiver("proton-q", credit=10)
        bodies = []
        for _ in range(10):
            message = receiver.receive(timeout=TIMEOUT)
            bodies.append(message.body)
            receiver.accept()
        assert bodies == list(range(10))
    finally:
        conn.close()


def test_proton_anonymous_relay_and_dynamic_receiver(threaded: Broker) -> None:
    conn = BlockingConnection(threaded.url, timeout=TIMEOUT)
    try:
        replies = conn.create_receiver(None, dynamic=True)
        address = replies.link.remote_source.address
        assert address and address in threaded.queues
        relay = conn.create_sender(None)
        relay.send(ProtonMessage(body="reply", address=address))
        assert replies.receive(timeout=TIMEOUT).body == "reply"
        replies.accept()
        replies.close()
        deadline = time.monotonic() + TIMEOUT
        while address in threaded.queues:
            assert time.monotonic() < deadline
            time.sleep(0.01)
    finally:
        conn.close()


def test_proton_copy_browses_without_consuming(threaded: Broker) -> None:
    conn = BlockingConnection(threaded.url, timeout=TIMEOUT)
    try:
        sender = conn.create_sender("browsed")
        for body in ("a", "b"):
            sender.send(ProtonMessage(body=body))
        browser = conn.create_receiver("browsed", options=Copy(), credit=10)
        assert [browser.receive(timeout=TIMEOUT).body for _ in range(2)] == ["a", "b"]
        browser.accept()
        browser.close()
        assert len(threaded.queues["browsed"]) == 2
        consumer = conn.create_receiver("browsed", credit=10)
        got = []
        for _ in range(2):
            got.append(consumer.receive(timeout=TIMEOUT).body)
            consumer.accept()
        assert got == ["a", "b"]
    finally:
        conn.close()


def test_proton_selector_delivers_only_matching_messages(threaded: Broker) -> None:
    conn = BlockingConnection(threaded.url, timeout=TIMEOUT)
    try:
        sender = conn.create_sender("colours")
        for index, colour in enumerate(["red", "green", "red", "blue"]):
            sender.send(ProtonMessage(body=index, properties={"colour": colour}))
        reds = conn.create_receiver("colours", options=Selector("colour = 'red'"), credit=10)
        got = []
        for _ in range(2):
            got.append(reds.receive(timeout=TIMEOUT).body)
            reds.accept()
        assert got == [0, 2]
        with pytest.raises(proton.Timeout):
            reds.receive(timeout=QUIET)
        assert [entry.message.body for entry in threaded.queues["colours"].entries] == [1, 3]
    finally:
        conn.close()


def test_proton_durable_subscription(threaded: Broker) -> None:
    address = TOPIC_PREFIX + "proton-events"
    publisher_conn = BlockingConnection(threaded.url, timeout=TIMEOUT)
    try:
        publisher = publisher_conn.create_sender(address)
        conn = BlockingConnection(threaded.url, timeout=TIMEOUT)
        subscription = conn.create_receiver(address, name="durable-sub", options=DurableSubscription())
        publisher.send(ProtonMessage(body="first"))
        assert subscription.receive(timeout=TIMEOUT).body == "first"
        subscription.accept()
        subscription.detach()  # DurableSubscription: detach without closing keeps the subscription
        publisher.send(ProtonMessage(body="while away"))
        subscription = conn.create_receiver(address, name="durable-sub", options=DurableSubscription())
        assert subscription.receive(timeout=TIMEOUT).body == "while away"
        subscription.accept()
        conn.close()
    finally:
        publisher_conn.close()


def test_broker_thread_starts_serves_and_stops() -> None:
    thread = BrokerThread()
    thread.start()
    try:
        assert thread.url.startswith("amqp://127.0.0.1:") and thread.broker.port > 0
        conn = BlockingConnection(thread.url, timeout=TIMEOUT)
        try:
            conn.create_sender("q").send(ProtonMessage(body=1))
        finally:
            conn.close()
        assert len(thread.broker.queues["q"]) == 1
    finally:
        thread.stop()
    thread.stop()  # idempotent
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", thread.broker.port), timeout=1).close()


def test_the_amqp_broker_fixture_serves_a_client(amqp_broker: BrokerThread) -> None:  # noqa: F811
    assert amqp_broker.url.startswith("amqp://127.0.0.1:")
    conn = BlockingConnection(amqp_broker.url, timeout=TIMEOUT)
    try:
        sender = conn.create_sender("fixture-q")
        sender.send(ProtonMessage(body="hello fixture"))
        receiver = conn.create_receiver("fixture-q")
        assert receiver.receive(timeout=TIMEOUT).body == "hello fixture"
        receiver.accept()
    finally:
        conn.close()


async def test_the_amqp_broker_fixture_serves_our_client_too(amqp_broker: BrokerThread) -> None:  # noqa: F811
    with anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(amqp_broker.url, reconnect=False) as conn:
            sender = await conn.open_sender("q")
            await sender.send(Message(body="from another loop"))
            receiver = await conn.open_receiver("q")
            assert await receive_bodies(receiver, 1) == ["from another loop"]


# ---------------------------------------------------------------------------------------------------------------
# Volume, size, idle connections


async def test_a_large_message_spans_many_frames_both_ways() -> None:
    body = bytes(range(256)) * (2 * 4096)  # 2 MiB
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker, connect(broker) as conn:
            sender = await conn.open_sender("big")
            assert isinstance(await sender.send(Message(body=body)), Accepted)
            receiver = await conn.open_receiver("big")
            assert await receive_bodies(receiver, 1) == [body]


async def test_the_broker_keeps_an_idle_client_with_a_heartbeat_alive() -> None:
    with anyio.fail_after(TIMEOUT):
        # Our idle timeout is 1 s; the broker sends an empty frame at least every 0.25 s (a quarter of it: §2.4.5,
        # we advertise half). The broker runs on this event loop: a stall of the loop past 0.75 s (a loaded CI
        # machine) would hold its frame back and read as silence, which 0.4 s (0.3 s of stall) did once in CI.
        async with serving() as broker, connect(broker, heartbeat=1.0) as conn:
            sender = await conn.open_sender("q")
            await anyio.sleep(3.5)  # several of our idle timeouts: the broker must send empty frames
            assert isinstance(await sender.send(Message(body="still here")), Accepted)
            assert len(broker.connections) == 1


async def test_a_thousand_messages_with_no_loss_and_no_duplicates() -> None:
    count = 1000
    with anyio.fail_after(30):
        async with serving() as broker, connect(broker) as producer, connect(broker) as consumer:
            first = await consumer.open_receiver("bulk", credit=50)
            second = await consumer.open_receiver("bulk", credit=50)
            sender = await producer.open_sender("bulk")
            received: list[int] = []
            shares = {"first": 0, "second": 0}
            everything = anyio.Event()

            async def take(receiver: amqp_async.Receiver, name: str) -> None:
                async for delivery in receiver:
                    received.append(delivery.message.body)
                    shares[name] += 1
                    await delivery.accept()
                    if len(received) >= count:
                        everything.set()

            async with anyio.create_task_group() as group:
                group.start_soon(take, first, "first")
                group.start_soon(take, second, "second")
                trackers = [await sender.submit(Message(body=index)) for index in range(count)]
                for tracker in trackers:
                    assert isinstance(await tracker, Accepted)
                await everything.wait()
                await anyio.sleep(QUIET)  # a duplicate would arrive now
                group.cancel_scope.cancel()
            assert len(received) == count
            assert sorted(received) == list(range(count))
            assert shares["first"] > 0 and shares["second"] > 0  # both competing receivers were served
            assert len(broker.queues["bulk"]) == 0
            await eventually(lambda: all(not c.unsettled for c in broker.queues["bulk"].consumers))


def test_the_attach_answer_names_only_the_filters_the_broker_applies(threaded: Broker) -> None:
    """§3.5.3: the answering attach's source filter is the set of filters actually in place. A filter the broker
    does not know (here a no-local filter) used to be echoed with the selector, telling the receiver it was
    applied; without a selector, nothing is echoed (as before)."""
    from proton import Described, symbol
    from proton.reactor import Filter

    no_local = Described(symbol("apache.org:no-local-filter:list"), ["x"])
    selector = Described(symbol("apache.org:selector-filter:string"), "colour = 'red'")

    def answered_filters(receiver: Any) -> Any:
        data = receiver.link.remote_source.filter
        data.rewind()
        return data.get_object() if data.next() is not None else None

    conn = BlockingConnection(threaded.url, timeout=TIMEOUT)
    try:
        both = conn.create_receiver(
            "filtered", options=Filter({symbol("no-local"): no_local, symbol("jms-selector"): selector}), credit=1
        )
        answered = answered_filters(both)
        assert list(answered) == [symbol("jms-selector")]
        assert answered[symbol("jms-selector")].value == "colour = 'red'"
        unknown_only = conn.create_receiver(
            "filtered", name="unknown-only", options=Filter({symbol("no-local"): no_local}), credit=1
        )
        assert answered_filters(unknown_only) is None
    finally:
        conn.close()


async def test_a_sender_whose_target_has_the_capability_topic_publishes_to_the_topic() -> None:
    """A target with the capability ``topic`` names a topic, as a source with it does: each subscriber gets every
    message, inside a transaction too (at its commit). Its messages used to go to a queue of that name, which no
    subscriber read."""
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker, connect(broker) as conn:
            first = await conn.open_receiver("news", capabilities="topic")
            second = await conn.open_receiver("news", capabilities="topic")
            sender = await conn.open_sender("news", capabilities="topic")
            await send_all(sender, ["a", "b"])
            async with conn.transaction() as txn:
                await sender.send(Message(body="c"), transaction=txn)
            assert await receive_bodies(first, 3) == ["a", "b", "c"]
            assert await receive_bodies(second, 3) == ["a", "b", "c"]
            assert "news" not in broker.queues
