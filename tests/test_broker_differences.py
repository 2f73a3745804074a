"""The facts of docs/broker-differences.md that a peer running here can show, checked against that peer.

- RabbitMQ 3.10 echoes a JMS selector in its attach and ignores it: every message is delivered [T3];
- python-qpid-proton's broker example (as shipped) offers no capability, yet routes a sender with no target by each
  message's address; it drops a selector from its attach and ignores it; it never answers a drain [T5];
- the embedded broker applies a selector (the contrast).

The other facts of the page (refusals, capabilities, request/reply) are in tests/test_request_reply.py.
"""

from __future__ import annotations

import anyio
import pytest

import amqp_async
from amqp_async import Message
from amqp_async.broker import Broker
from amqp_async.codec.delivery_states import Accepted

try:
    from rabbitmq import RabbitMQNode
    from test_request_reply import proton_broker_example
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.rabbitmq import RabbitMQNode
    from tests.test_request_reply import proton_broker_example

TIMEOUT = 60.0
SELECTOR = "colour = 'blue'"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def selected(url: str, address: str) -> tuple[list[str], bool]:
    """Send a red and a blue message to ``address``, then receive with a selector for blue: the bodies that came
    within 2 s, and whether the peer's attach echoed the filter."""
    async with amqp_async.connect(url, reconnect=False) as conn:
        sender = await conn.open_sender(address)
        for colour in ("red", "blue"):
            assert await sender.send(Message(body=colour, properties={"colour": colour})) == Accepted()
        receiver = await conn.open_receiver(address, selector=SELECTOR, credit=10)
        remote = receiver._engine_link.remote_source
        echoed = remote is not None and any(
            getattr(value, "value", None) == SELECTOR for value in (remote.filter or {}).values()
        )
        got = []
        with anyio.move_on_after(2):
            while len(got) < 2:
                delivery = await receiver.receive()
                got.append(str(delivery.message.body))
                await delivery.accept()
        return got, echoed


@pytest.mark.interop
@pytest.mark.anyio
async def test_rabbitmq_3_ignores_a_selector(rabbitmq_broker: RabbitMQNode) -> None:
    with anyio.fail_after(TIMEOUT):
        got, echoed = await selected(rabbitmq_broker.url, "/queue/differences-selector")
    assert echoed  # it says it took the filter...
    assert got == ["red", "blue"]  # ...and delivers what it does not match


@pytest.mark.anyio
async def test_the_embedded_broker_applies_a_selector() -> None:
    async with Broker(port=0) as broker:
        with anyio.fail_after(TIMEOUT):
            got, echoed = await selected(broker.url, "selector")
    assert echoed
    assert got == ["blue"]


@pytest.mark.interop
@pytest.mark.anyio
async def test_python_qpid_protons_broker_example() -> None:
    with proton_broker_example() as url, anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(url, reconnect=False) as conn:
            assert conn.peer_capabilities.anonymous_relay is False  # not offered...
            relay = await conn.open_sender(None)
            assert await relay.send(Message(body="relayed", address="relay-q")) == Accepted()  # ...yet it routes
            receiver = await conn.open_receiver("relay-q", credit=1)
            assert (await receiver.receive()).message.body == "relayed"
            # a drain is never answered: broker.py does not call drained()
            quiet = await conn.open_receiver("quiet-q", credit=3)
            with anyio.move_on_after(2) as waited:
                await quiet.drain()
            assert waited.cancelled_caught
        got, echoed = await selected(url, "selector-q")
    assert (got, echoed) == (["red", "blue"], False)  # the filter is dropped from its attach, and ignored
