"""Arguments the awaitable API cannot put on the wire are refused at the call, and leave the connection whole.

A value that goes into a frame is encoded when the connection's task writes that frame. Before these checks, an
argument AMQP cannot carry (a reject description of bytes, a float credit, an int address...) was taken, the
call returned, and the connection's task then failed on it: the whole connection went down, every other link
with it. Each case here checks the call's own error, that nothing took effect, and that the same connection
still sends and receives afterwards. The peer is the embedded broker (in this process), except where a case
says otherwise.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import attrs
import pytest

import amqp_async
from amqp_async import (
    ConnectionState,
    DeliveryError,
    EncodeError,
    LinkError,
    Message,
    MessageTooLarge,
)
from amqp_async.broker import Broker
from amqp_async.client._link_options import receiver_options, sender_options
from amqp_async.codec.terminus import Source, Target


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def still_works(conn: amqp_async.Connection, address: str) -> None:
    """The connection is open, and a message goes through it and back."""
    assert conn.state is ConnectionState.OPEN
    sender = await conn.open_sender(address)
    await sender.send(Message(body=b"after"))
    receiver = await conn.open_receiver(address)
    with anyio.fail_after(10):
        delivery = await receiver.receive()
    assert delivery.message.body == b"after"
    await delivery.accept()
    await sender.close()
    await receiver.close()


async def one_delivery(conn: amqp_async.Connection, address: str) -> amqp_async.Delivery:
    sender = await conn.open_sender(address)
    await sender.send(Message(body=b"first"))
    receiver = await conn.open_receiver(address)
    with anyio.fail_after(10):
        return await receiver.receive()


SETTLEMENTS: list[tuple[str, Callable[[amqp_async.Delivery], Awaitable[None]], type[Exception]]] = [
    ("reject(123, 456)", lambda d: d.reject(123, 456), TypeError),  # type: ignore[arg-type]
    ("reject with bytes description", lambda d: d.reject("app:x", b"bytes"), TypeError),  # type: ignore[arg-type]
    ("reject with an info list", lambda d: d.reject("app:x", "why", [1]), TypeError),  # type: ignore[arg-type]
    ("reject with an object in info", lambda d: d.reject("app:x", "why", {"k": object()}), EncodeError),
    ("modify with an object annotation", lambda d: d.modify(annotations={"k": object()}), EncodeError),
    ("modify with a 70-bit annotation", lambda d: d.modify(annotations={"k": 2**70}), EncodeError),
    ("modify with an int annotation key", lambda d: d.modify(annotations={1: "x"}), TypeError),  # type: ignore[dict-item]
    ("modify(delivery_failed='yes')", lambda d: d.modify(delivery_failed="yes"), TypeError),  # type: ignore[arg-type]
    ("accept(transaction=42)", lambda d: d.accept(transaction=42), TypeError),  # type: ignore[arg-type]
    ("reject longer than a frame", lambda d: d.reject("app:x", "x" * 70_000), ValueError),
]


@pytest.mark.anyio
@pytest.mark.parametrize(("case", "settle", "error"), SETTLEMENTS, ids=[case for case, _, _ in SETTLEMENTS])
async def test_a_settlement_the_wire_cannot_carry_raises_at_the_call_and_the_delivery_stays_unsettled(
    case: str, settle: Callable[[amqp_async.Delivery], Awaitable[None]], error: type[Exception]
) -> None:
    async with Broker(port=0) as broker, amqp_async.connect(broker.url) as conn:
        delivery = await one_delivery(conn, "settle")
        with pytest.raises(error):
            await settle(delivery)
        assert not delivery.settled and delivery.state is None
        await anyio.sleep(0.2)  # the connection's task has had its turn: before, it failed here
        # The delivery can still be settled, once, properly; and the connection carries on.
        await delivery.reject("app:bad-input", "x" * 1000, {"why": "a test"})
        assert delivery.settled
        await still_works(conn, "settle-after")
        assert len(broker.queue("settle")) == 0  # rejected: not delivered again


CREDITS: list[tuple[object, type[Exception]]] = [
    (1.5, TypeError),
    ("3", TypeError),
    (True, TypeError),
    (-5, ValueError),
    (2**32, ValueError),
]


@pytest.mark.anyio
@pytest.mark.parametrize(("credit", "error"), CREDITS, ids=[repr(credit) for credit, _ in CREDITS])
async def test_add_credit_refuses_what_a_uint_cannot_hold(credit: object, error: type[Exception]) -> None:
    async with Broker(port=0) as broker, amqp_async.connect(broker.url) as conn:
        receiver = await conn.open_receiver("credit", credit=0)
        with pytest.raises(error, match="credit"):
            receiver.add_credit(credit)  # type: ignore[arg-type]
        assert receiver._engine_link.link_credit == 0
        await anyio.sleep(0.2)
        receiver.add_credit(2**32 - 1)  # the largest a link holds
        await still_works(conn, "credit-after")


OPENS: list[tuple[str, Callable[[amqp_async.Connection], Awaitable[Any]], type[Exception], str]] = [
    ("open_sender(123)", lambda c: c.open_sender(123), TypeError, "target"),  # type: ignore[call-overload]
    ("open_sender(b'q')", lambda c: c.open_sender(b"q"), TypeError, "target"),  # type: ignore[call-overload]
    ("open_receiver(123)", lambda c: c.open_receiver(123), TypeError, "source"),  # type: ignore[arg-type]
    ("open_receiver(b'q')", lambda c: c.open_receiver(b"q"), TypeError, "source"),  # type: ignore[arg-type]
    ("open_sender(source=5)", lambda c: c.open_sender("q", source=5), TypeError, "source"),  # type: ignore[arg-type]
    ("open_receiver(target=5)", lambda c: c.open_receiver("q", target=5), TypeError, "target"),  # type: ignore[arg-type]
    ("name=5", lambda c: c.open_sender("q", name=5), TypeError, "name"),  # type: ignore[arg-type]
    ("properties with an object", lambda c: c.open_sender("q", properties={"k": object()}), EncodeError, "properties"),
    ("filter with an object", lambda c: c.open_receiver("q", filter={"k": object()}), EncodeError, "filter"),
    ("timeout='5'", lambda c: c.open_receiver("q", timeout="5"), TypeError, "timeout"),  # type: ignore[arg-type]
    ("timeout=2**32", lambda c: c.open_sender("q", timeout=2**32), ValueError, "timeout"),
    ("initial_delivery_count=-1", lambda c: c.open_sender("q", initial_delivery_count=-1), ValueError, "count"),
    ("session properties", lambda c: c.open_session(properties={"k": 2**70}), EncodeError, "properties"),
    ("stream sender at 7", lambda c: c.open_stream_sender(7), TypeError, "target"),  # type: ignore[call-overload]
    ("stream receiver at 7", lambda c: c.open_stream_receiver(7), TypeError, "source"),  # type: ignore[arg-type]
]


@pytest.mark.anyio
@pytest.mark.parametrize(("case", "open_", "error", "named"), OPENS, ids=[case for case, _, _, _ in OPENS])
async def test_a_link_option_the_wire_cannot_carry_raises_at_the_call(
    case: str, open_: Callable[[amqp_async.Connection], Awaitable[Any]], error: type[Exception], named: str
) -> None:
    async with Broker(port=0) as broker, amqp_async.connect(broker.url) as conn:
        with pytest.raises(error, match=named):
            await open_(conn)
        await anyio.sleep(0.2)
        await still_works(conn, "open-after")
        assert conn.engine.frames_sent > 0


@pytest.mark.anyio
async def test_connection_properties_the_wire_cannot_carry_raise_before_connecting() -> None:
    async with Broker(port=0) as broker:
        with pytest.raises(EncodeError, match="properties"):
            await amqp_async.connect(broker.url, properties={"k": object()})
        assert not broker.connections


@pytest.mark.anyio
async def test_send_within_something_that_is_not_a_transaction_raises_before_sending() -> None:
    async with Broker(port=0) as broker, amqp_async.connect(broker.url) as conn:
        sender = await conn.open_sender("txn")
        with pytest.raises(TypeError, match="Transaction"):
            await sender.send(Message(body=b"x"), transaction="txn")  # type: ignore[arg-type]
        stream = await conn.open_stream_sender("txn")
        with pytest.raises(TypeError, match="Transaction"):
            await stream.send_stream([b"x"], transaction=object())  # type: ignore[arg-type]
        assert len(broker.queue("txn")) == 0
        await still_works(conn, "txn-after")


@pytest.mark.anyio
async def test_a_message_above_the_peers_max_message_size_is_a_message_too_large() -> None:
    async with Broker(port=0, max_message_size=1000) as broker, amqp_async.connect(broker.url) as conn:
        sender = await conn.open_sender("large")
        with pytest.raises(MessageTooLarge) as caught:
            await sender.send(Message(body=b"x" * 5000))
        assert isinstance(caught.value, DeliveryError)
        assert caught.value.condition == "amqp:link:message-size-exceeded"
        assert "1000" in caught.value.description
        with pytest.raises(MessageTooLarge):
            await sender.submit(Message(body=b"x" * 5000))
        stream = await conn.open_stream_sender("large")
        with pytest.raises(MessageTooLarge):
            await stream.send_stream([b"y" * 600, b"y" * 600], chunk_size=512)
        assert len(broker.queue("large")) == 0
        await sender.send(Message(body=b"small"))  # the link stays usable
        assert len(broker.queue("large")) == 1


def in_a_thread_of_its_own(call: Callable[[], Awaitable[Any]]) -> BaseException | None:
    """Run ``call`` on an asyncio loop of another thread (as a program that forgot run_threadsafe does); what it
    raised, or None."""
    raised: list[BaseException | None] = [None]

    def run() -> None:
        async def main() -> None:
            try:
                await asyncio.wait_for(call(), 30)
            except BaseException as exc:  # handed back to the test
                raised[0] = exc

        asyncio.run(main())

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(60)
    return raised[0]


@pytest.mark.anyio
async def test_a_call_from_another_threads_loop_is_refused_before_it_does_anything() -> None:
    async with Broker(port=0) as broker, amqp_async.connect(broker.url) as conn:
        sender = await conn.open_sender("thread")
        receiver = await conn.open_receiver("thread", credit=0)

        async def add_credit() -> None:
            receiver.add_credit(1)

        calls: dict[str, Callable[[], Awaitable[Any]]] = {
            "send": lambda: sender.send(Message(body=b"twice?")),
            "submit": lambda: sender.submit(Message(body=b"twice?")),
            "receive": receiver.receive,
            "add_credit": add_credit,
            "open_sender": lambda: conn.open_sender("elsewhere"),
            "open_session": conn.open_session,
            "close a sender": sender.close,
            "close the connection": conn.close,
        }
        for name, call in calls.items():
            raised = await anyio.to_thread.run_sync(in_a_thread_of_its_own, call)
            assert isinstance(raised, RuntimeError), (name, raised)
            assert "run_threadsafe" in str(raised), name
        assert len(broker.queue("thread")) == 0  # nothing was sent
        assert receiver._engine_link.link_credit == 0
        # From that thread, run_threadsafe is the way:
        future = conn.run_threadsafe(sender.send(Message(body=b"once")))
        assert await anyio.to_thread.run_sync(future.result, 10) == amqp_async.Accepted()
        assert len(broker.queue("thread")) == 1
        await still_works(conn, "thread-after")


@pytest.mark.anyio
async def test_a_receive_from_another_thread_takes_nothing_off_the_queue() -> None:
    """Refused before the delivery is taken: it used to be popped, then the thread check raised, and the delivery was
    lost (unsettled at the peer) with the receiver's credit; two such calls left it unable to receive again."""
    async with Broker(port=0) as broker, amqp_async.connect(broker.url) as conn:
        receiver = await conn.open_receiver("queued", credit=2)
        sender = await conn.open_sender("queued")
        for number in range(2):
            await sender.send(Message(body=number))
        with anyio.fail_after(10):
            while len(receiver._engine_link.incoming) < 2:
                await anyio.sleep(0.01)

        async def receive_nowait() -> Any:
            return receiver.receive_nowait()

        for name, call in {
            "receive_nowait": receive_nowait,
            "receive": receiver.receive,
            "receive_many": lambda: receiver.receive_many(2),
        }.items():
            raised = await anyio.to_thread.run_sync(in_a_thread_of_its_own, call)
            assert isinstance(raised, RuntimeError), (name, raised)
            assert len(receiver._engine_link.incoming) == 2, name
        taken = await receiver.receive_many(2, timeout=10)
        assert [delivery.message.body for delivery in taken] == [0, 1]
        await sender.send(Message(body=2))
        with anyio.fail_after(10):
            while not receiver._engine_link.incoming:
                await anyio.sleep(0.01)
        await receiver.close()
        with pytest.raises(amqp_async.ClosedByApplication):
            receiver.receive_nowait()  # as receive() after a close: nothing queued is handed out


@pytest.mark.parametrize("value", ["5", b"5"])
def test_a_ttl_given_as_text_names_the_field(value: object) -> None:
    with pytest.raises(EncodeError, match="ttl must be seconds as a number") as caught:
        Message(body=b"x", ttl=value)  # type: ignore[arg-type]
    assert len(str(caught.value)) < 100  # before: "5" * 1000 in the message
    with pytest.raises(EncodeError, match="creation_time must be seconds"):
        Message(body=b"x", creation_time=value)  # type: ignore[arg-type]
    with pytest.raises(EncodeError, match="finite"):
        Message(body=b"x", ttl=float("nan"))


@pytest.mark.parametrize("value", [2**70, -1])
def test_a_message_id_out_of_a_ulongs_range_says_so(value: int) -> None:
    with pytest.raises(EncodeError, match=r"out of a ulong's range \(0 to 2\*\*64 - 1\)"):  # before: "is negative"
        Message(body=b"x", id=value)


# --- the broker, given addresses that are not strings ------------------------------------------------------------
# The termini's address fields have type * (§3.5.3, §3.5.4): a peer may send an int or bytes. The broker named its
# nodes with them (an int has no startswith: an internal error that closed the whole connection); it now refuses
# the link alone. Our client no longer sends such an address, so the frames come from its engine directly.


@pytest.mark.anyio
async def test_the_broker_refuses_a_link_whose_address_is_not_a_string_and_keeps_the_connection() -> None:
    async with Broker(port=0) as broker, amqp_async.connect(broker.url) as conn:
        sending = attrs.evolve(sender_options("x"), target=Target(address=123))
        with pytest.raises(LinkError) as caught:
            await conn._attach_sender(sending)
        assert caught.value.condition == "amqp:invalid-field"
        assert "target address must be a string" in caught.value.description
        receiving = attrs.evolve(receiver_options("x"), source=Source(address=b"q"))
        with pytest.raises(LinkError) as caught:
            await conn._attach_receiver(receiving)
        assert caught.value.condition == "amqp:invalid-field"
        assert "source address must be a string" in caught.value.description
        await still_works(conn, "address-after")
