"""A refused message's error names the address it was sent to.

``MessageRejected``, ``MessageReleased`` and ``MessageModified`` gave only the peer's words
(``amqp:precondition-failed: no such order``): with many senders the application could not tell which node
refused. Now the error's ``address`` is the sender's target address (on the anonymous relay: the message's ``to``)
and ``str()`` names it after the peer's words (``... no such order (sent to 'orders')``); ``description`` stays
the peer's words.

The peer is python-qpid-proton (``ProtonBroker``), with an outcome configured per address.
"""

from __future__ import annotations

from collections.abc import Iterator

import anyio
import pytest

import amqp_async
from amqp_async import DeliveryError, Message, MessageModified, MessageRejected, MessageReleased

pytest.importorskip("proton", reason="python-qpid-proton is a test dependency (the independent peer)")
from proton_broker import ProtonBroker

pytestmark = pytest.mark.anyio

TIMEOUT = 30.0


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def broker() -> Iterator[ProtonBroker]:
    with ProtonBroker(timeout=TIMEOUT) as running:
        running.outcome_for["orders"] = ("rejected", "amqp:precondition-failed", "no such order")
        running.outcome_for["returns"] = "released"
        running.outcome_for["audit"] = ("modified", True, True)
        yield running


def _check(error: DeliveryError, address: str) -> None:
    assert error.address == address
    assert str(error).endswith(f"(sent to {address!r})")  # before: the peer's words only
    assert error.condition in str(error)


async def test_a_refusal_names_the_senders_address(broker: ProtonBroker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(broker.url, reconnect=False) as conn:
            orders = await conn.open_sender("orders")
            returns = await conn.open_sender("returns")
            audit = await conn.open_sender("audit")
            with pytest.raises(MessageRejected) as rejected:
                await orders.send(Message(body="order"))
            _check(rejected.value, "orders")
            assert rejected.value.description == "no such order"  # the peer's words, unchanged
            assert str(rejected.value) == "amqp:precondition-failed: no such order (sent to 'orders')"
            with pytest.raises(MessageReleased) as released:
                await returns.send(Message(body="return"))
            _check(released.value, "returns")
            with pytest.raises(MessageModified) as modified:
                await audit.send(Message(body="entry"))
            _check(modified.value, "audit")
            assert modified.value.description.startswith("the message was modified")


async def test_a_refusal_on_the_anonymous_relay_names_the_messages_to(broker: ProtonBroker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(broker.url, reconnect=False) as conn:
            relay = await conn.open_sender(None)
            with pytest.raises(MessageRejected) as rejected:
                await relay.send(Message(body="order", address="orders"))
            _check(rejected.value, "orders")
            with pytest.raises(MessageReleased) as released:
                tracker = await relay.submit(Message(body=b"x" * 100_000, address="returns"))  # a gathered payload
                await tracker
            _check(released.value, "returns")
            with pytest.raises(MessageRejected) as nowhere:  # no address at all: amqp:not-found, and no address
                await relay.send(Message(body="nowhere"))
            assert nowhere.value.address is None
            assert str(nowhere.value) == f"amqp:not-found: {nowhere.value.description}"
