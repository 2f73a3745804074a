"""Settling a received delivery: ``async with delivery`` and its outcomes (accepted when the block ends normally;
modified with delivery-failed, released or rejected when it raises, as the receiver's ``on_error`` says; released
when it is cancelled), and one outcome per delivery (a second settlement raises ``DeliveryAlreadySettled``).

Three peers, each checked from its own side: the embedded broker (its queues: what is redelivered, with which
delivery-count), python-qpid-proton's broker (`ProtonBroker` records every disposition as proton decoded it: the
outcome, delivery-failed, the rejection's condition and description) and RabbitMQ 3.10 (which has no modified
outcome: its source lists accepted, rejected and released, and the failure outcome falls back to released). All on
asyncio and trio.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.to_thread
import pytest

import amqp_async
from amqp_async import (
    Accepted,
    AMQPError,
    ClosedByApplication,
    DeliveryAlreadySettled,
    Message,
    MessageBodyError,
    Modified,
    Rejected,
    Released,
)
from amqp_async.broker import Broker

try:
    from proton_broker import ProtonBroker
    from rabbitmq import RabbitMQNode
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.proton_broker import ProtonBroker
    from tests.rabbitmq import RabbitMQNode

pytestmark = pytest.mark.anyio

TIMEOUT = 60.0  # a bound on a hang: RabbitMQ (and rabbitmqctl, an Erlang VM a call) is slow on a loaded machine


class Boom(Exception):
    """What the application's handler raises in these tests."""


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    if request.param == "trio":
        pytest.importorskip("trio", reason="trio is in the test dependency group")
    return str(request.param)


@pytest.fixture
def proton_broker() -> Any:
    with ProtonBroker(timeout=TIMEOUT) as running:
        yield running


@asynccontextmanager
async def serving(**options: Any) -> AsyncIterator[Broker]:
    async with Broker(port=0, **options) as broker:
        yield broker


def connect(broker: Any) -> Any:
    return amqp_async.connect(broker.url, reconnect=False)


async def eventually(predicate: Any, timeout: float = 10.0) -> None:
    with anyio.fail_after(timeout):
        while not predicate():
            await anyio.sleep(0.01)


async def put(broker: Any, address: str, *bodies: Any) -> None:
    async with connect(broker) as conn, conn.open_sender(address) as sender:
        await sender.send_many([Message(body=body) for body in bodies])


def queued(broker: Broker, address: str) -> list[Any]:
    queue = broker.queues.get(address)
    return [] if queue is None else [entry.message for entry in queue.entries]


async def outcomes(broker: ProtonBroker, count: int) -> list[Any]:
    return await anyio.to_thread.run_sync(functools.partial(broker.wait_outcomes, count))


# ---------------------------------------------------------------------------------------------------------------
# async with delivery: the embedded broker


async def test_a_block_that_ends_normally_accepts_the_delivery() -> None:
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker:
            await put(broker, "q", "work")
            async with connect(broker) as conn:
                receiver = await conn.open_receiver("q")
                delivery = await receiver.receive()
                async with delivery as entered:
                    assert entered is delivery
                    assert delivery.state is None
                assert delivery.state == Accepted()
                assert delivery.settled
                assert queued(broker, "q") == []
                await eventually(lambda: broker.queues["q"].consumers[0].unsettled == {})  # the broker took it


async def test_a_block_that_raises_modifies_the_delivery_and_the_exception_goes_on() -> None:
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker:
            await put(broker, "q", "work")
            async with connect(broker) as conn:
                receiver = await conn.open_receiver("q")
                delivery = await receiver.receive()
                assert (delivery.message.delivery_count, delivery.message.first_acquirer) == (0, False)
                failure = Boom("the handler failed")
                with pytest.raises(Boom) as raised:
                    async with delivery:
                        raise failure
                assert raised.value is failure
                assert delivery.state == Modified(delivery_failed=True)
                # §3.4.5: the broker counts the failed attempt and delivers the message again.
                again = await receiver.receive()
                assert again.message.body == "work"
                assert again.message.delivery_count == 1
                assert again.message.first_acquirer is False
                async with again:
                    pass
                assert queued(broker, "q") == []


async def test_on_error_release_and_reject() -> None:
    with anyio.fail_after(TIMEOUT):
        async with serving(dead_letter_queue="dead") as broker:
            await put(broker, "released", "r")
            await put(broker, "rejected", "x")
            async with connect(broker) as conn:
                releasing = await conn.open_receiver("released", on_error="release")
                assert releasing.on_error == "release"
                with pytest.raises(Boom):
                    async with await releasing.receive() as delivery:
                        raise Boom("not now")
                assert delivery.state == Released()
                again = await releasing.receive()
                assert (again.message.body, again.message.delivery_count) == ("r", 0)  # §3.4.4: not counted
                await again.accept()

                rejecting = await conn.open_receiver("rejected", on_error="reject")
                with pytest.raises(Boom):
                    async with await rejecting.receive() as delivery:
                        raise Boom("invalid order")
                assert isinstance(delivery.state, Rejected)
                assert delivery.state.error is not None
                assert (str(delivery.state.error.condition), delivery.state.error.description) == (
                    "amqp:internal-error",
                    "Boom: invalid order",
                )
                assert await rejecting.receive_many(1, timeout=0.3) == []  # §3.4.3: not delivered again
                assert [message.body for message in queued(broker, "dead")] == ["x"]


async def test_a_cancelled_block_releases_the_delivery() -> None:
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker:
            await put(broker, "q", "work")
            async with connect(broker) as conn:
                receiver = await conn.open_receiver("q", on_error="reject")  # a cancellation is no rejection
                delivery = await receiver.receive()
                with anyio.move_on_after(0.05):
                    async with delivery:
                        await anyio.sleep(10)
                assert delivery.state == Released()
                again = await receiver.receive()
                assert (again.message.body, again.message.delivery_count) == ("work", 0)
                await again.accept()


async def test_a_block_that_settles_its_delivery_is_left_as_it_settled_it() -> None:
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker:
            await put(broker, "q", "a", "b")
            async with connect(broker) as conn:
                receiver = await conn.open_receiver("q")
                async with await receiver.receive() as delivery:
                    await delivery.release()
                assert delivery.state == Released()
                with pytest.raises(Boom):
                    async with await receiver.receive() as second:
                        await second.accept()
                        raise Boom("after the accept")
                assert second.state == Accepted()
                third = await receiver.receive()
                assert (third.message.body, third.message.delivery_count) == ("a", 0)
                await third.accept()
                assert queued(broker, "q") == []


async def test_async_with_an_exactly_once_delivery() -> None:
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker:
            await put(broker, "q", "once")
            async with connect(broker) as conn:
                receiver = await conn.open_receiver("q", delivery="exactly-once")
                async with await receiver.receive() as delivery:
                    pass
                # §2.6.12 mode second: the block's end returned once the broker settled too.
                assert delivery.settled and delivery.state == Accepted()
                assert queued(broker, "q") == []


# ---------------------------------------------------------------------------------------------------------------
# async with delivery: python-qpid-proton's broker sees the dispositions


async def test_the_dispositions_as_proton_sees_them(proton_broker: ProtonBroker) -> None:
    for body in ("fails", "invalid", "not json", "long", "fine"):
        proton_broker.put("q", body)
    with anyio.fail_after(TIMEOUT):
        async with connect(proton_broker) as conn:
            # Manual credit, one message at a time (receive_many grants what it lacks): once the broker has the
            # modified outcome, the redelivered message is the next to come.
            modifying = await conn.open_receiver("q", credit=0)

            async def one(receiver: Any) -> Any:
                [delivery] = await receiver.receive_many(1, timeout=5)
                return delivery

            with pytest.raises(Boom):
                async with await one(modifying):
                    raise Boom("fails")
            await outcomes(proton_broker, 1)
            again = await one(modifying)
            assert (again.message.body, again.message.delivery_count) == ("fails", 1)  # proton counted it
            async with again:
                pass
            await modifying.close()

            rejecting = await conn.open_receiver("q", credit=0, on_error="reject")
            with pytest.raises(Boom):
                async with await one(rejecting):
                    raise Boom("no customer id")
            with pytest.raises(MessageBodyError):
                async with await one(rejecting) as delivery:
                    delivery.message.json()  # "not json": an AMQPError gives its own condition
            with pytest.raises(Boom):
                async with await one(rejecting):
                    raise Boom("x" * 1000)
            async with await one(rejecting):
                pass
    recorded = await outcomes(proton_broker, 6)
    assert [(o.message.body, o.outcome, o.delivery_failed, o.undeliverable_here) for o in recorded] == [
        ("fails", "modified", True, False),
        ("fails", "accepted", False, False),
        ("invalid", "rejected", False, False),
        ("not json", "rejected", False, False),
        ("long", "rejected", False, False),
        ("fine", "accepted", False, False),
    ]
    assert recorded[2].condition == ("amqp:internal-error", "Boom: no customer id", None)
    assert recorded[3].condition == (
        "amqp:decode-error",
        "MessageBodyError: the body is not JSON: Expecting value: line 1 column 1 (char 0)",
        None,
    )
    condition, description, _ = recorded[4].condition
    assert (condition, len(description), description[:6], description[-3:]) == (
        "amqp:internal-error",
        400,
        "Boom: ",
        "...",
    )


# ---------------------------------------------------------------------------------------------------------------
# async with delivery: RabbitMQ 3.10 (no modified outcome)


@pytest.mark.interop
async def test_async_with_delivery_on_rabbitmq(rabbitmq_broker: RabbitMQNode) -> None:
    queue = f"/queue/settle-{uuid.uuid4().hex[:8]}"
    with anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(rabbitmq_broker.url, reconnect=False) as conn:
            async with conn.open_sender(queue) as sender:
                await sender.send_many([Message(body="fails"), Message(body="fine")])
            receiver = await conn.open_receiver(queue, credit=0)
            assert "amqp:modified:list" not in (receiver._engine_link.remote_source.outcomes or ())
            [delivery] = await receiver.receive_many(1, timeout=5)
            assert (delivery.message.body, delivery.message.first_acquirer) == ("fails", True)
            with pytest.raises(Boom):
                async with delivery:
                    raise Boom("fails")
            # The source lists no modified (§3.5.3): released instead, and the session lives on.
            assert delivery.state == Released()
            both = await receiver.receive_many(2, timeout=5)
            for received in both:
                async with received:
                    pass
            by_body = {received.message.body: received.message for received in both}
            assert sorted(by_body) == ["fails", "fine"]
            # Redelivered: first-acquirer false (RabbitMQ's redelivered flag); released is not counted (§3.4.4).
            assert (by_body["fails"].first_acquirer, by_body["fails"].delivery_count) == (False, 0)
            assert by_body["fine"].first_acquirer is True
            assert await receiver.receive_many(5, timeout=0.3) == []
        depth = await anyio.to_thread.run_sync(rabbitmq_broker.queue_depth, queue.removeprefix("/queue/"))
        assert depth == 0


# ---------------------------------------------------------------------------------------------------------------
# One outcome per delivery


SETTLE = {
    "accept": lambda d: d.accept(),
    "reject": lambda d: d.reject("app:bad", "bad"),
    "release": lambda d: d.release(),
    "modify": lambda d: d.modify(),
    "release(delivered=True)": lambda d: d.release(delivered=True),
}
FIRST_OUTCOME = {
    "accept": "accepted",
    "reject": "rejected",
    "release": "released",
    "modify": "modified",
    "release(delivered=True)": "modified",
}


async def test_a_second_settlement_raises_whatever_the_outcomes(proton_broker: ProtonBroker) -> None:
    pairs = [(first, second) for first in SETTLE for second in SETTLE if second != "release(delivered=True)"]
    for index in range(len(pairs)):
        proton_broker.put("q", index)
    with anyio.fail_after(TIMEOUT):
        async with connect(proton_broker) as conn:
            receiver = await conn.open_receiver("q", credit=len(pairs))
            deliveries = [await receiver.receive() for _ in pairs]
            for delivery, (first, second) in zip(deliveries, pairs, strict=True):
                await SETTLE[first](delivery)
                with pytest.raises(DeliveryAlreadySettled) as raised:
                    await SETTLE[second](delivery)
                error = raised.value
                assert isinstance(error, AMQPError)
                assert error.condition == "amqp:illegal-state"
                assert error.outcome == delivery.state
                shown = FIRST_OUTCOME[first]
                assert str(error) == (
                    f"amqp:illegal-state: delivery {delivery.tag!r} is settled already ({shown}): a delivery has one "
                    "outcome (§3.4)"
                )
                async with delivery:  # a settled delivery's block adds nothing either
                    pass
    recorded = await outcomes(proton_broker, len(pairs))
    await anyio.sleep(0.2)
    assert len(proton_broker.outcomes) == len(pairs)  # one disposition each, the first
    assert [o.outcome for o in recorded] == [FIRST_OUTCOME[first] for first, _ in pairs]


async def test_a_delivery_the_sender_settled_takes_one_settlement_quietly(proton_broker: ProtonBroker) -> None:
    proton_broker.put("q", "a")
    proton_broker.put("q", "b")
    with anyio.fail_after(TIMEOUT):
        async with connect(proton_broker) as conn:
            receiver = await conn.open_receiver("q", delivery="at-most-once")
            first = await receiver.receive()
            assert first.settled  # it arrived settled (§2.6.12)
            await first.accept()  # nothing to send: recorded only
            assert first.state == Accepted()
            with pytest.raises(DeliveryAlreadySettled, match=r"settled already \(accepted\)"):
                await first.reject()
            async with await receiver.receive() as second:
                assert second.message.body == "b"
            assert second.state == Accepted()
    await anyio.sleep(0.2)
    assert proton_broker.outcomes == []  # no disposition for a settled delivery
    assert [attach.snd_settle_mode for attach in proton_broker.attaches] == ["settled"]


async def test_a_settlement_within_a_transaction_counts_too() -> None:
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker:
            await put(broker, "q", "in a transaction")
            async with connect(broker) as conn:
                receiver = await conn.open_receiver("q")
                delivery = await receiver.receive()
                async with conn.transaction() as txn:
                    await delivery.accept(transaction=txn)
                    with pytest.raises(
                        DeliveryAlreadySettled, match=r"settled already \(accepted within a transaction\)"
                    ):
                        await delivery.accept()
                assert txn.state == "committed"
                assert queued(broker, "q") == []


async def test_a_settlement_that_could_not_be_sent_is_no_settlement() -> None:
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker:
            await put(broker, "q", "kept")
            async with connect(broker) as conn:
                receiver = await conn.open_receiver("q")
                delivery = await receiver.receive()
                await receiver.close()
                for _ in range(2):  # the application closed its link, each time: never "already settled"
                    with pytest.raises(ClosedByApplication):
                        await delivery.accept()
                again = await (await conn.open_receiver("q")).receive()
                assert again.message.body == "kept"
                await again.accept()


async def test_an_outcome_given_after_the_connection_failed_raises_its_error_and_settles_nothing() -> None:
    """The failed connection's engine keeps its links as they were (attached): the outcome used to be taken as
    given (settled, accepted) though no frame could carry it, and the broker delivered the message again."""
    broker = Broker(port=0)
    async with broker:
        conn = await amqp_async.connect(broker.url, reconnect=False)
        sender = await conn.open_sender("lost")
        await sender.send(Message(body="once"))
        receiver = await conn.open_receiver("lost")
        delivery = await receiver.receive()
    with anyio.fail_after(10):
        while not conn.is_closed:
            await anyio.sleep(0.01)
    with pytest.raises(amqp_async.ConnectionError):
        await delivery.accept()
    assert not delivery.settled and delivery.state is None
    await conn.close()


async def test_release_takes_delivered_as_a_bool_as_modify_does() -> None:
    async with Broker(port=0) as broker, amqp_async.connect(broker.url, reconnect=False) as conn:
        sender = await conn.open_sender("strict")
        await sender.send(Message(body="kept"))
        receiver = await conn.open_receiver("strict")
        delivery = await receiver.receive()
        with pytest.raises(TypeError, match="delivered must be a bool, not str"):
            await delivery.release(delivered="yes")  # type: ignore[arg-type]
        assert not delivery.settled  # nothing was given: it can still be settled
        await delivery.release()
