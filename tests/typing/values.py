"""What a received body's AMQP values, the AMQP scalar types and a transactional delivery state read as: narrowed
from :data:`~amqp_async.AMQPValue`, never ``Any`` (``Described.value``, an ``Array``'s elements and ``ulong(7)``
were ``Any``: ``body.value.upper()`` passed unchecked and failed at run time). Their run-time side:
tests/test_typing_user_code.py. Never run."""

from __future__ import annotations

from typing_extensions import assert_type

from amqp_async import (
    Accepted,
    AMQPValue,
    Connection,
    Delivery,
    Message,
    Modified,
    Outcome,
    Rejected,
    Sender,
    TransactionalState,
)
from amqp_async.codec.sections import AmqpSequence, Data
from amqp_async.types import (
    UNDESCRIBED,
    Array,
    Described,
    TypeCode,
    byte,
    decimal32,
    int32,
    short,
    timestamp,
    ubyte,
    uint,
    ulong,
    ushort,
)


def read(delivery: Delivery) -> str | None:
    body = delivery.message.body
    if isinstance(body, Described):
        assert_type(body.descriptor, AMQPValue)
        assert_type(body.value, AMQPValue)
        if isinstance(body.value, str):
            return body.value.upper()
    if isinstance(body, Array):
        for element in body:
            assert_type(element, AMQPValue)
        assert_type(body.elements, tuple[AMQPValue, ...])
        assert_type(body.type, TypeCode)
        if body.descriptor is not UNDESCRIBED:
            print(body.descriptor)
    return None


def write() -> None:
    Described("com.example:point", {"x": 1, "y": 2})  # written with anything, as a body is
    Array(UNDESCRIBED, TypeCode.INT, 1, 2, 3)


def scalars() -> None:
    assert_type(ulong(7), ulong)
    assert_type(uint(7), uint)
    assert_type(ushort(7), ushort)
    assert_type(ubyte(7), ubyte)
    assert_type(byte(-1), byte)
    assert_type(short(-1), short)
    assert_type(int32(-1), int32)
    assert_type(timestamp(1_700_000_000_000), timestamp)
    assert_type(decimal32(0), decimal32)
    Message(id=ulong(7), properties={"when": timestamp(0)})


async def settle_modes(conn: Connection) -> None:
    assert_type(await conn.open_sender("q", snd_settle_mode=2), Sender[Accepted])
    assert_type(await conn.open_sender("q", delivery="at-most-once", snd_settle_mode=1), Sender[None])


async def settle_within(conn: Connection) -> None:
    receiver = await conn.open_receiver("inbox")
    async with conn.transaction() as txn:
        delivery = await receiver.receive()
        await delivery.accept(transaction=txn)
        state = delivery.state
        if isinstance(state, TransactionalState):
            assert_type(state.txn_id, bytes)
        else:
            assert_type(state, Outcome | None)


def outcomes(state: TransactionalState, modified: Modified, rejected: Rejected) -> None:
    """The fields of outcomes and errors as they come from the peer (dict[Any, Any] and Any before)."""
    assert_type(state.outcome, Outcome | None)
    assert_type(modified.message_annotations, dict[str, AMQPValue] | None)
    if rejected.error is not None:
        assert_type(rejected.error.info, dict[str, AMQPValue] | None)


def sections(delivery: Delivery) -> None:
    """A body of several data (or amqp-sequence) sections comes as a list of them."""
    body = delivery.message.body
    if isinstance(body, list):
        for section in body:
            if isinstance(section, Data):
                assert_type(section.value, bytes)
            if isinstance(section, AmqpSequence):
                assert_type(section.value, list[AMQPValue])
