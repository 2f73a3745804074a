"""A user's program with a local transaction (checked by mypy --strict and pyright strict; never run)."""

from __future__ import annotations

from typing_extensions import assert_type

from amqp_async import Accepted, Connection, Message, Transaction, TransactionState


async def move(conn: Connection) -> None:
    receiver = await conn.open_receiver("inbox")
    outbox = await conn.open_sender("outbox")
    async with conn.transaction() as txn:
        assert_type(txn, Transaction)
        delivery = await receiver.receive()
        outcome = await outbox.send(Message(body=delivery.message.body), transaction=txn)
        assert_type(outcome, Accepted)
        await delivery.accept(transaction=txn)
    assert_type(txn.state, TransactionState)
    assert_type(txn.txn_id, bytes | None)

    by_hand = await conn.transaction()
    assert_type(by_hand, Transaction)
    assert_type(await by_hand.send(outbox, Message(body="x")), Accepted)
    assert_type(await by_hand.send(outbox, bytearray(Message(body="x").encode())), Accepted)
    streamed = await (await conn.open_stream_receiver("large")).receive()
    await by_hand.accept(streamed)  # a streamed delivery is settled within a transaction too
    await by_hand.rollback()
