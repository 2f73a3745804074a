"""A user's program: send and receive, with the types a user touches asserted (mypy --strict and pyright strict
check this file in the ``typecheck`` nox session; it is never run)."""

from __future__ import annotations

import uuid

import anyio
from typing_extensions import assert_type

import amqp_async
from amqp_async import (
    Accepted,
    AMQPValue,
    Connection,
    Delivery,
    Message,
    MessageId,
    Opening,
    Outcome,
    Receiver,
    Sender,
    Session,
    Tracker,
    proton,
)
from amqp_async.codec.transactions import TransactionalState
from amqp_async.types import symbol


async def send(conn: Connection) -> None:
    opening = conn.open_sender("orders")
    assert_type(opening, Opening[Sender[Accepted]])
    sender = await opening
    assert_type(sender, Sender[Accepted])
    assert_type(sender, Sender)  # the default type argument: a confirmed sender
    outcome = await sender.send(Message(body={"id": 1}, subject="order", properties={"region": "eu"}))
    assert_type(outcome, Accepted)
    tracker = await sender.submit(Message(body=b"raw"))
    assert_type(tracker, Tracker[Accepted])
    assert_type(await tracker, Accepted)
    assert_type(await tracker.wait(), Accepted)
    assert_type(tracker.done, bool)
    assert_type(tracker.tag, bytes | None)
    assert_type(sender.unsettled, list[Tracker[Accepted]])
    assert_type(await sender.send(Message(body="x").encode()), Accepted)
    assert_type(await sender.send(memoryview(bytearray(Message(body="x").encode()))), Accepted)
    assert_type(sender.address, str | None)
    assert_type(sender.credit, int)
    assert_type(sender.name, str)

    fast = await conn.open_sender("metrics", delivery="at-most-once")
    assert_type(fast, Sender[None])
    assert_type(await fast.send(Message(body=1.5)), None)
    assert_type(await fast.submit(Message(body=1.5)), Tracker[None])

    exactly = await conn.open_sender("ledger", delivery="exactly-once", durable=True, capabilities=["queue"])
    assert_type(exactly, Sender[Accepted])

    async with conn.open_sender(None) as anonymous:  # no separate await
        assert_type(anonymous, Sender[Accepted])
        await anonymous.send(Message(address="replies", body="hi"))
    await sender.close()


async def receive(conn: Connection) -> None:
    async with conn.open_receiver("orders", credit=10, selector="region = 'eu'") as receiver:
        assert_type(receiver, Receiver)
        delivery = await receiver.receive()
        assert_type(delivery, Delivery)
        message = delivery.message
        assert_type(message, Message)
        assert_type(message.body, AMQPValue)
        assert_type(message.properties, dict[str, AMQPValue] | None)
        assert_type(message.id, MessageId | None)
        assert_type(message.subject, str | None)
        assert_type(message.content_type, symbol | None)
        assert_type(message.ttl, float)
        assert_type(delivery.tag, bytes)
        assert_type(delivery.settled, bool)
        assert_type(delivery.state, Outcome | TransactionalState | None)
        body = message.body
        if isinstance(body, str):  # the body is narrowed as any union is
            assert_type(body, str)
        await delivery.accept()
        async for delivery in receiver:
            assert_type(delivery, Delivery)
            await delivery.reject("app:invalid", "no customer id")
            break
        assert_type(receiver.receive_nowait(), Delivery | None)
        assert_type(receiver.address, str | None)
        assert_type(receiver.queued, int)


async def sessions(conn: Connection) -> None:
    async with conn.open_session(incoming_window=100) as session:
        assert_type(session, Session)
        sender = await session.open_sender("a", name="my-link")
        assert_type(sender, Sender[Accepted])
        receiver = await session.open_receiver("b", distribution_mode="copy")
        assert_type(receiver, Receiver)
        unconfirmed = await session.open_sender("c", delivery="at-most-once")
        assert_type(unconfirmed, Sender[None])
    dynamic = await conn.open_receiver(None, dynamic=True)
    assert_type(dynamic.address, str | None)


async def main() -> None:
    async with amqp_async.connect("amqp://localhost:5672") as conn:
        assert_type(conn, Connection)
        assert_type(conn.container_id, str)
        assert_type(conn.is_closed, bool)
        assert_type(conn.remote_properties, dict[str, AMQPValue] | None)
        assert_type(conn.remote_offered_capabilities, tuple[symbol, ...])
        await send(conn)
        await receive(conn)
        await sessions(conn)
    conn = await amqp_async.connect("amqp://localhost:5672", heartbeat=30, reconnect=amqp_async.Backoff(max_tries=5))
    assert_type(conn, Connection)
    connecting = amqp_async.connect("amqp://localhost:5672")  # a public name to annotate a variable with
    assert_type(connecting, Opening[Connection])
    held: Opening[Connection] = amqp_async.connect("amqp://localhost:5672")
    async with held as other:
        assert_type(other, Connection)
    assert_type(await connecting, Connection)
    message = Message(id=uuid.uuid4(), durable=True, ttl=30.0, correlation_id=7)
    assert_type(message.correlation_id, MessageId | None)
    await conn.close()


def on_sendable_and_on_message(sender: proton.Sender, receiver: proton.Receiver) -> None:
    """The message type is shared with the callback API, whose links Message.send()/recv() take (proton's)."""
    Message(body="x").send(sender)
    Message(body="x").send(sender, b"tag-1")
    Message().recv(receiver)


anyio.run(main)
