"""A user's program handling the errors of the typed API (checked by mypy --strict and pyright strict; never
run)."""

from __future__ import annotations

from typing_extensions import assert_type

from amqp_async import (
    AMQPError,
    AMQPValue,
    Connection,
    ConnectionClosed,
    DeliveryAlreadySettled,
    DeliveryInDoubt,
    Message,
    MessageBodyError,
    MessageRejected,
    Outcome,
    Rejected,
)
from amqp_async.codec.transactions import TransactionalState
from amqp_async.types import symbol


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


def redirected(closed: ConnectionClosed) -> str | None:
    """The info map of an error (§2.8.14; symbol keys, §2.8.19): read with str keys, values narrowed."""
    assert_type(closed.info, dict[str, AMQPValue] | None)
    if closed.info is None:
        return None
    host = closed.info.get("network-host")
    assert_type(host, AMQPValue)
    for key in closed.info:
        assert_type(key, str)
    return host if isinstance(host, str) else None


def raising() -> None:
    """Errors an application raises take an info map of str (or symbol) keys and narrower values."""
    counts: dict[str, int] = {"limit": 10}
    AMQPError("too many", condition="amqp:resource-limit-exceeded", info=counts)
    AMQPError("gone", info={symbol("network-host"): "b.example", "port": 5672})
    AMQPError("none", info=None)
