"""A user's program: a large message streamed out and read back in chunks, with the types a user touches asserted
(mypy --strict and pyright strict check this file in the ``typecheck`` nox session; it is never run)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
from typing_extensions import assert_type

from amqp_async import (
    Accepted,
    Connection,
    DeliveryAborted,
    Message,
    MessageStream,
    Opening,
    Outcome,
    StreamDelivery,
    StreamReceiver,
    StreamSender,
    Tracker,
)
from amqp_async.codec.transactions import TransactionalState


async def generated() -> AsyncIterator[bytes]:
    for _ in range(4):
        yield b"\0" * 65536


async def send(conn: Connection) -> None:
    opening = conn.open_stream_sender("uploads", buffer_size=1 << 20)
    assert_type(opening, Opening[StreamSender[Accepted]])
    sender = await opening
    assert_type(sender, StreamSender[Accepted])
    assert_type(sender, StreamSender)  # the default type argument: a confirmed sender
    with open("model.bin", "rb") as file:
        assert_type(await sender.send_stream(file, Message(subject="model")), Accepted)
    assert_type(await sender.send_stream(generated(), chunk_size=1 << 16), Accepted)
    assert_type(await sender.send_stream([b"a", b"b"], body_size=2), Accepted)
    async with await anyio.open_file("model.bin", "rb") as async_file:
        assert_type(await sender.send_stream(async_file), Accepted)

    async with sender.open_stream(Message(subject="parts"), body_size=3) as stream:
        assert_type(stream, MessageStream[Accepted])
        await stream.write(b"abc")
        assert_type(stream.body_size, int)
    assert_type(stream.outcome, Accepted | None)
    assert_type(stream.tracker, Tracker[Accepted] | None)

    manual = await sender.open_stream()
    assert_type(manual, MessageStream[Accepted])
    await manual.write(memoryview(b"x"))
    assert_type(await manual.complete(), Accepted)
    (await sender.open_stream()).abort()
    assert_type(sender.credit, int)
    assert_type(sender.address, str | None)
    assert_type(sender.unsettled, list[Tracker[Accepted]])

    fast = await conn.open_stream_sender("logs", delivery="at-most-once")
    assert_type(fast, StreamSender[None])
    assert_type(await fast.send_stream(b"bytes"), None)
    async with conn.open_stream_sender(None) as anonymous:  # no separate await
        assert_type(anonymous, StreamSender[Accepted])
        await anonymous.send_stream(b"x", Message(address="uploads"))


async def receive(conn: Connection) -> None:
    async with conn.open_stream_receiver("uploads", buffer_size=1 << 20, credit=1) as receiver:
        assert_type(receiver, StreamReceiver)
        delivery = await receiver.receive()
        assert_type(delivery, StreamDelivery)
        head = await delivery.message()
        assert_type(head, Message)
        assert_type(head.subject, str | None)
        try:
            async for chunk in delivery.body_chunks():
                assert_type(chunk, bytes)
        except DeliveryAborted:
            return
        assert_type(delivery.received_size, int)
        assert_type(delivery.complete, bool)
        assert_type(delivery.aborted, bool)
        assert_type(delivery.tag, bytes)
        assert_type(delivery.state, Outcome | TransactionalState | None)
        await delivery.accept()
        async for other in receiver:
            assert_type(other, StreamDelivery)
            async with other:  # accepted on leaving (as on_error says if the block raised)
                whole = await other.read_message()
                assert_type(whole, Message)
            await other.reject(description="too large")
            await other.release()
            await other.modify(delivery_failed=True)
            await other.discard()
