"""A user's program handling the errors of the typed API (checked by mypy --strict and pyright strict; never
run)."""

from __future__ import annotations

from typing_extensions import assert_type

from amqp_async import (
    AMQPError,
    Connection,
    DeliveryAlreadySettled,
    DeliveryInDoubt,
    Message,
    MessageBodyError,
    MessageRejected,
    Outcome,
    Rejected,
)
from amqp_async.codec.transactions import TransactionalState


async def careful(conn: Connection) -> None:
    sender = await conn.open_sender("orders")
    try:
        await sender.send(Message(body="x"))
    except MessageRejected as rejected:
        assert_type(rejected.condition, str)
        assert_type(rejected.description, str)
        assert_type(rejected.outcome, Rejected | None)
        if rejected.outcome is not None and rejected.outcome.error is not None:
            assert_type(rejected.outcome.error.description, str | None)
    except DeliveryInDoubt:
        pass
    receiver = await conn.open_receiver("orders")
    delivery = await receiver.receive()
    try:
        payload = delivery.message.json()
    except MessageBodyError as not_json:
        assert isinstance(not_json, ValueError)  # also a ValueError
        await delivery.reject(not_json.condition, not_json.description)
        return
    print(payload)
    await delivery.accept()
    try:
        await delivery.accept()
    except DeliveryAlreadySettled as twice:
        assert_type(twice, DeliveryAlreadySettled)
        assert isinstance(twice, AMQPError)
    state = delivery.state
    if not isinstance(state, TransactionalState):
        assert_type(state, Outcome | None)
