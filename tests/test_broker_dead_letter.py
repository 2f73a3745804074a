"""Dead-lettering in the embedded broker: each reason's annotations, and the rest of the message byte for byte.

Reasons: ``rejected`` (with the rejection's condition and description; a rejection without an error, from
python-qpid-proton, has neither), ``delivery-limit`` (modified with delivery-failed, and rolled-back transactions,
counted in the header's delivery-count), ``queue-full`` (``when_full="reject"``: the producer hears
``amqp:resource-limit-exceeded`` and the message is kept in the dead-letter queue) and ``expired`` (in
tests/test_broker_expiry.py). The annotations read the same through python-qpid-proton's decoder. A message
dead-lettered twice counts 2; one rejected in the dead-letter queue itself is dropped, not looped; without a
dead-letter queue everything given up is dropped; a durable dead-lettered message is kept across a restart with its
annotations. ``--dead-letter-queue`` and ``--delivery-limit`` on the command line do the same.
"""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import pytest

import amqp_async
from amqp_async import Message, MessageRejected
from amqp_async.broker import DEAD_LETTER_ANNOTATIONS, Broker, BrokerThread
from amqp_async.codec.delivery_states import Accepted, Modified, Received, Rejected, Released
from amqp_async.types import symbol

try:
    from broker_serving import serving
    from message_sections import without
    from test_broker_cli import broker_process
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.broker_serving import serving
    from tests.message_sections import without
    from tests.test_broker_cli import broker_process

TIMEOUT = 20.0
REASON, CONDITION, DESCRIPTION, SOURCE, TIME, COUNT = (
    DEAD_LETTER_ANNOTATIONS[name] for name in ("reason", "condition", "description", "source", "time", "count")
)
ORIGINAL = Message(
    body=b"\x00\x01binary payload",
    id=42,
    correlation_id="c-7",
    reply_to="replies",
    durable=True,
    annotations={"x-opt-origin": "sensor-4"},
    properties={"attempt": 1, "kind": "reading"},
)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def take_all(receiver: amqp_async.Receiver) -> list[amqp_async.Delivery]:
    """What the receiver's credit brings now (a drain ends it), each accepted."""
    await receiver.drain()
    got = []
    while (delivery := receiver.receive_nowait()) is not None:
        got.append(delivery)
        await delivery.accept()
    return got


async def dead_letters(url: str, address: str = "dead") -> list[amqp_async.Delivery]:
    async with amqp_async.connect(url, reconnect=False) as conn:
        return await take_all(await conn.open_receiver(address, credit=100))


def check_annotations(
    delivery: amqp_async.Delivery,
    reason: str,
    source: str,
    *,
    condition: str | None,
    description: str | None,
    count: int = 1,
    since: float,
) -> None:
    """The dead-letter annotations, exactly; the message's own annotation kept."""
    annotations = delivery.message.annotations
    assert annotations is not None
    expected = {REASON: reason, SOURCE: source, COUNT: count, symbol("x-opt-origin"): "sensor-4"}
    if condition is not None:
        expected[CONDITION] = condition
    if description is not None:
        expected[DESCRIPTION] = description
    assert {key: value for key, value in annotations.items() if key != TIME} == expected
    assert since * 1000 <= annotations[TIME] <= time.time() * 1000
    assert isinstance(annotations[REASON], symbol)


@pytest.mark.anyio
async def test_a_rejected_message_says_who_rejected_it_and_why_the_rest_byte_for_byte() -> None:
    async with serving(dead_letter_queue="dead") as broker:
        with anyio.fail_after(TIMEOUT):
            since = time.time()
            async with amqp_async.connect(broker.url, reconnect=False) as conn:
                sender = await conn.open_sender("orders")
                await sender.send(ORIGINAL)
                receiver = await conn.open_receiver("orders")
                await (await receiver.receive()).reject("app:bad-payload", "bad payload")
            [dead] = await dead_letters(broker.url)
    check_annotations(dead, "rejected", "orders", condition="app:bad-payload", description="bad payload", since=since)
    assert without(dead.payload, "message-annotations") == without(ORIGINAL.encode(), "message-annotations")
    assert dead.message.durable is True and dead.message.delivery_count == 0
    assert broker.dead_letters.counts == {"rejected": 1}


def test_the_annotations_read_the_same_through_python_qpid_proton() -> None:
    """An independent decoder: proton's Message reads the dead-letter annotations as symbols, a string, a
    timestamp and a uint."""
    proton = pytest.importorskip("proton", reason="python-qpid-proton is the independent decoder")
    utils = pytest.importorskip("proton.utils")
    with BrokerThread(dead_letter_queue="dead") as broker:
        conn = utils.BlockingConnection(broker.url, timeout=TIMEOUT)
        try:
            conn.create_sender("orders").send(proton.Message(body="bad", durable=True))
            receiver = conn.create_receiver("orders")
            assert receiver.receive(timeout=TIMEOUT).body == "bad"
            receiver.reject()  # proton's reject: no error, so no condition nor description
            dead = conn.create_receiver("dead")
            message = dead.receive(timeout=TIMEOUT)
            dead.accept()
        finally:
            conn.close()
    annotations = message.annotations
    assert set(annotations) == {"x-opt-dead-letter-reason", "x-opt-dead-letter-source", TIME, COUNT}
    assert type(annotations["x-opt-dead-letter-reason"]) is proton.symbol
    assert annotations["x-opt-dead-letter-reason"] == "rejected"
    assert annotations["x-opt-dead-letter-source"] == "orders"
    assert type(annotations["x-opt-dead-letter-count"]) is proton.uint
    assert annotations["x-opt-dead-letter-count"] == 1
    assert type(annotations["x-opt-dead-letter-time"]) is proton.timestamp
    assert message.body == "bad" and message.durable is True


@pytest.mark.anyio
async def test_the_delivery_limit_dead_letters_after_that_many_failed_deliveries() -> None:
    async with serving(dead_letter_queue="dead", delivery_limit=3) as broker:
        with anyio.fail_after(TIMEOUT):
            since = time.time()
            async with amqp_async.connect(broker.url, reconnect=False) as conn:
                sender = await conn.open_sender("work")
                await sender.send(ORIGINAL)
                receiver = await conn.open_receiver("work")
                counts = []
                for _ in range(3):
                    delivery = await receiver.receive()
                    counts.append(delivery.message.delivery_count)
                    await delivery.modify(delivery_failed=True)
                assert await take_all(receiver) == []  # not delivered a fourth time
            [dead] = await dead_letters(broker.url)
    assert counts == [0, 1, 2]
    check_annotations(
        dead,
        "delivery-limit",
        "work",
        condition=None,
        description="3 failed deliveries (the limit is 3)",
        since=since,
    )
    assert dead.message.delivery_count == 3  # the header says so too
    assert without(dead.payload, "message-annotations", "header") == without(
        ORIGINAL.encode(), "message-annotations", "header"
    )
    assert broker.dead_letters.counts == {"delivery-limit": 1}


@pytest.mark.anyio
async def test_rolled_back_transactions_count_toward_the_delivery_limit() -> None:
    async with serving(dead_letter_queue="dead", delivery_limit=2) as broker:
        with anyio.fail_after(TIMEOUT):
            async with amqp_async.connect(broker.url, reconnect=False) as conn:
                await (await conn.open_sender("work")).send(ORIGINAL)
                receiver = await conn.open_receiver("work")
                for _ in range(2):
                    delivery = await receiver.receive()
                    async with conn.transaction() as transaction:
                        await delivery.accept(transaction=transaction)
                        await transaction.rollback()
                assert await take_all(receiver) == []
            [dead] = await dead_letters(broker.url)
    assert dead.message.annotations is not None
    assert dead.message.annotations[REASON] == "delivery-limit"
    assert dead.message.delivery_count == 2


@pytest.mark.anyio
async def test_a_message_refused_by_a_full_queue_is_rejected_to_its_producer_and_kept_in_the_dead_letters() -> None:
    async with serving(dead_letter_queue="dead", max_queue_depth=1, when_full="reject") as broker:
        with anyio.fail_after(TIMEOUT):
            since = time.time()
            async with amqp_async.connect(broker.url, reconnect=False) as conn:
                sender = await conn.open_sender("small")
                assert isinstance(await sender.send(Message(body="fits")), Accepted)
                with pytest.raises(MessageRejected) as refused:
                    await sender.send(ORIGINAL)
            assert refused.value.condition == "amqp:resource-limit-exceeded"
            [dead] = await dead_letters(broker.url)
            [kept] = await dead_letters(broker.url, "small")
    check_annotations(
        dead,
        "queue-full",
        "small",
        condition="amqp:resource-limit-exceeded",
        # it names the option to change
        description="queue 'small' is full (1 message): run the broker with a larger --max-queue-depth, or consume "
        "from it",
        since=since,
    )
    assert without(dead.payload, "message-annotations") == without(ORIGINAL.encode(), "message-annotations")
    assert kept.message.body == "fits"


@pytest.mark.anyio
async def test_a_message_dead_lettered_twice_counts_two_and_a_rejection_in_the_dead_letter_queue_drops_it() -> None:
    async with serving(dead_letter_queue="dead") as broker:
        with anyio.fail_after(TIMEOUT):
            async with amqp_async.connect(broker.url, reconnect=False) as conn:
                sender = await conn.open_sender("first")
                await sender.send(ORIGINAL)
                receiver = await conn.open_receiver("first")
                await (await receiver.receive()).reject("app:first", "first try")
                dead = await conn.open_receiver("dead")
                once = await dead.receive()
                # an operator sends it back as it is (annotations and all), to another queue: rejected again
                await (await conn.open_sender("second")).send(once.payload)
                await once.accept()
                again = await conn.open_receiver("second")
                await (await again.receive()).reject("app:second", "second try")
                twice = await dead.receive()
                annotations = twice.message.annotations
                assert annotations is not None
                assert (annotations[COUNT], annotations[SOURCE], annotations[CONDITION]) == (2, "second", "app:second")
                # rejected in the dead-letter queue itself: dropped, not dead-lettered into itself for ever
                await twice.reject("app:still-bad", "no")
                assert await take_all(dead) == []
    assert broker.dead_letters.counts == {"rejected": 2}
    assert broker.dead_letters.dropped == {"rejected": 1}
    assert broker.flow.held_count == 0


@pytest.mark.anyio
async def test_without_a_dead_letter_queue_what_is_given_up_is_dropped() -> None:
    async with serving(delivery_limit=1, max_queue_depth=1, when_full="reject") as broker:
        with anyio.fail_after(TIMEOUT):
            async with amqp_async.connect(broker.url, reconnect=False) as conn:
                sender = await conn.open_sender("q")
                await sender.send(Message(body="rejected"))
                receiver = await conn.open_receiver("q", credit=1)
                await (await receiver.receive()).reject("app:no", "no")
                await sender.send(Message(body="failed"))
                await (await receiver.receive()).modify(delivery_failed=True)
                await receiver.close()
                await sender.send(Message(body="fits"))
                with pytest.raises(MessageRejected):
                    await sender.send(Message(body="refused"))
    assert broker.dead_letters.dropped == {"rejected": 1, "delivery-limit": 1, "queue-full": 1}
    assert broker.dead_letters.counts == {}
    assert "dead" not in broker.queues


@pytest.mark.anyio
async def test_a_durable_dead_lettered_message_is_kept_across_a_restart_with_its_annotations(tmp_path: Path) -> None:
    data = tmp_path / "data"
    async with serving(dead_letter_queue="dead", data_dir=data) as broker:
        with anyio.fail_after(TIMEOUT):
            async with amqp_async.connect(broker.url, reconnect=False) as conn:
                await (await conn.open_sender("orders")).send(ORIGINAL)
                receiver = await conn.open_receiver("orders")
                await (await receiver.receive()).reject("app:bad-payload", "bad payload")
                # a durable send after the rejection: accepted once stored, so the dead-lettering is stored too
                await (await conn.open_sender("sync")).send(Message(body="sync", durable=True))
    async with serving(dead_letter_queue="dead", data_dir=data) as broker:
        with anyio.fail_after(TIMEOUT):
            [dead] = await dead_letters(broker.url)
            assert await dead_letters(broker.url, "orders") == []
    assert dead.message.annotations is not None
    assert dead.message.annotations[REASON] == "rejected"
    assert dead.message.annotations[CONDITION] == "app:bad-payload"
    assert without(dead.payload, "message-annotations") == without(ORIGINAL.encode(), "message-annotations")


@pytest.mark.anyio
async def test_the_command_line_options(tmp_path: Path) -> None:
    with broker_process(tmp_path, "--dead-letter-queue", "dead", "--delivery-limit", "2") as broker:
        with anyio.fail_after(TIMEOUT):
            async with amqp_async.connect(broker.url, reconnect=False) as conn:
                await (await conn.open_sender("cli")).send(ORIGINAL)
                receiver = await conn.open_receiver("cli")
                for _ in range(2):
                    await (await receiver.receive()).modify(delivery_failed=True)
            [dead] = await dead_letters(broker.url)
    assert dead.message.annotations is not None
    assert (dead.message.annotations[REASON], dead.message.annotations[SOURCE]) == ("delivery-limit", "cli")


@pytest.mark.anyio
async def test_a_consumers_default_outcome_settles_what_it_leaves_without_one() -> None:
    """§3.5.3 default-outcome: "used for transfers that have not reached a terminal state at the receiver when the
    transfer is settled, including when the source is destroyed"."""
    async with serving(dead_letter_queue="dead", delivery_limit=1) as broker:
        with anyio.fail_after(TIMEOUT):
            async with amqp_async.connect(broker.url, reconnect=False) as conn:
                sender = await conn.open_sender("q")
                await sender.send(Message(body="settled bare"))
                released = await conn.open_receiver("q", credit=1, default_outcome=Released())
                delivery = await released.receive()
                await delivery._settle(None)  # settled with no outcome: its default, released, keeps it
                await released.close()
                await sender.send(Message(body="left at detach"))
                rejecting = await conn.open_receiver("q", credit=2, default_outcome=Rejected())
                assert [(await rejecting.receive()).message.body for _ in range(2)] == [
                    "settled bare",
                    "left at detach",
                ]
                await rejecting.close()  # both unsettled: the default outcome rejects them (dead-lettered)
                await sender.send(Message(body="failed at detach"))
                failing = await conn.open_receiver("q", credit=1, default_outcome=Modified(delivery_failed=True))
                assert (await failing.receive()).message.body == "failed at detach"
                await failing.close()  # a failed delivery at the delivery limit of 1: dead-lettered
        reasons = [
            (delivery.message.body, delivery.message.annotations[REASON])  # type: ignore[index]
            for delivery in await dead_letters(broker.url)
        ]
    assert reasons == [
        ("settled bare", "rejected"),
        ("left at detach", "rejected"),
        ("failed at detach", "delivery-limit"),
    ]
    assert not broker.queues["q"].entries


@pytest.mark.anyio
async def test_a_delivery_settled_without_a_terminal_outcome_is_not_lost_nor_stuck() -> None:
    """Settled with a non-terminal state (received) and no default outcome: released, not kept unsettled for as long
    as the link lasts; settled with none at all: done with (accepted), as before."""
    async with serving() as broker:
        with anyio.fail_after(TIMEOUT):
            async with amqp_async.connect(broker.url, reconnect=False) as conn:
                sender = await conn.open_sender("q")
                await sender.send(Message(body="received"))
                receiver = await conn.open_receiver("q", credit=1)
                first = await receiver.receive()
                await first._settle(Received(section_number=0, section_offset=0))
                again = await receiver.receive()
                assert again.message.body == "received"  # released: back at the head of the queue, redelivered
                await again.accept()
                await sender.send(Message(body="bare"))
                bare = await receiver.receive()
                await bare._settle(None)
                await receiver.close()
    assert not broker.queues["q"].entries


@pytest.mark.parametrize("address", ["topic://dead", ""])
def test_a_dead_letter_queue_must_be_a_queue(address: str) -> None:
    """Dead letters sent to a topic address went to a queue of that name that no receiver could read (a receiver on
    a topic address subscribes to the topic); the broker now refuses such an address when it is made."""
    with pytest.raises(ValueError, match="dead-letter queue"):
        Broker(port=0, dead_letter_queue=address)
