"""What the types of a user's program promise, against what the client gives at run time (through the embedded
broker); the type checkers' side is tests/typing/values.py and negative.py, which the ``typecheck`` nox session
checks with mypy and pyright:

- a received body's ``Described`` and ``Array`` values read as :data:`~amqp_async.AMQPValue`, to be narrowed, where
  they were ``Any`` (``body.value.upper()`` passed unchecked, and an ``AttributeError`` at run time);
- ``TransactionalState``, which ``delivery.state`` is typed with (docs/client.md, "The typed API"), is importable
  from ``amqp_async`` as the four outcomes are;
- the settle modes ``open_sender``'s overloads refuse are refused at run time too, each contradiction with advice
  that fits it (an at-most-once sender given another settle mode was told to pass delivery='at-most-once').
"""

from __future__ import annotations

import typing

import anyio
import pytest
from broker_serving import serving

import amqp_async
from amqp_async import AMQPValue, Message, TransactionalState
from amqp_async.types import UNDESCRIBED, Array, Described, TypeCode, symbol

TIMEOUT = 30


def test_described_and_array_values_are_typed_as_amqp_values_for_any_type_checker() -> None:
    """What every type checker reads (the annotations, and that they resolve), without mypy installed: the names
    of the alias, not ``Any``."""
    assert Described.__annotations__ == {"descriptor": "AMQPValue", "value": "AMQPValue"}
    assert Array.__annotations__ == {
        "descriptor": "AMQPValue | _Undescribed",
        "elements": "tuple[AMQPValue, ...]",
        "type": "TypeCode",
    }
    assert Array.__iter__.__annotations__["return"] == "Iterator[AMQPValue]"
    for hints in (
        typing.get_type_hints(Described, localns={"AMQPValue": AMQPValue}),
        typing.get_type_hints(Array, localns={"AMQPValue": AMQPValue}),
    ):
        assert typing.Any not in hints.values()


def test_transactional_state_is_a_public_name_of_the_package() -> None:
    assert "TransactionalState" in amqp_async.__all__
    assert amqp_async.TransactionalState is TransactionalState


def _is_amqp_value(value: object) -> bool:
    """Whether ``value`` is of the types AMQPValue names (its members, followed into lists and maps)."""
    if isinstance(value, list):
        return all(_is_amqp_value(item) for item in value)
    if isinstance(value, dict):
        return all(_is_amqp_value(key) and _is_amqp_value(item) for key, item in value.items())
    members = typing.get_args(AMQPValue)
    return value is None or isinstance(value, tuple(member for member in members if isinstance(member, type)))


@pytest.mark.anyio
async def test_what_the_types_promise_is_what_a_receiver_gets() -> None:
    """A described body and an array body, sent and received through the embedded broker, read as the annotations
    say (AMQP values); a delivery accepted within a transaction has a TransactionalState as its state."""
    point = Described(symbol("com.example:point"), {"x": 1, "labels": ["a", b"b"]})
    numbers = Array(UNDESCRIBED, TypeCode.INT, 1, 2, 3)
    async with serving() as broker:
        with anyio.fail_after(TIMEOUT):
            async with amqp_async.connect(broker.url, reconnect=False) as conn:
                sender = await conn.open_sender("typed")
                await sender.send_many([Message(body=point), Message(body=numbers)])
                receiver = await conn.open_receiver("typed", credit=2)
                described = (await receiver.receive()).message.body
                assert isinstance(described, Described)
                assert described == point
                assert _is_amqp_value(described.descriptor) and _is_amqp_value(described.value)
                within = await receiver.receive()
                array = within.message.body
                assert isinstance(array, Array)
                assert list(array) == [1, 2, 3]
                assert all(_is_amqp_value(element) for element in array)
                assert array.descriptor is UNDESCRIBED
                async with conn.transaction() as txn:
                    await within.accept(transaction=txn)
                    assert isinstance(within.state, TransactionalState)
                    assert within.state.txn_id == txn.txn_id


@pytest.mark.anyio
async def test_the_settle_modes_the_overloads_refuse_are_refused_at_the_call_saying_what_to_pass() -> None:
    """The two contradictions between ``delivery`` and ``snd_settle_mode`` (type errors, by the overloads of
    ``open_sender``) are ValueErrors at the call, each with its own advice: an at-most-once sender was told to
    pass delivery='at-most-once', which it had."""
    async with serving() as broker:
        with anyio.fail_after(TIMEOUT):
            async with amqp_async.connect(broker.url, reconnect=False) as conn:
                with pytest.raises(ValueError) as raised:
                    conn.open_sender("q", delivery="at-most-once", snd_settle_mode=2)  # type: ignore[call-overload]
                assert str(raised.value) == (
                    "delivery='at-most-once' sends every message settled (snd_settle_mode=1): leave snd_settle_mode "
                    "out, or choose a confirmed delivery ('at-least-once', 'exactly-once') for settle mode 0 or 2 "
                    "(got delivery='at-most-once', snd_settle_mode=2)"
                )
                with pytest.raises(ValueError, match=r"pass delivery='at-most-once' instead \(got delivery='at-least"):
                    conn.open_sender("q", snd_settle_mode=1)  # type: ignore[call-overload]
                assert await conn.open_sender("q", delivery="at-most-once", snd_settle_mode=1) is not None
