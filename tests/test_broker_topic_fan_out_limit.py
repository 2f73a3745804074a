"""A message to a topic is checked against the memory limit at what all its copies take, not at one copy's size.

Each copy of a topic's message counts its bookkeeping (``ENTRY_OVERHEAD``, 256 bytes) beside the payload they share
(``Entry.copy``). A producer holding credit granted while the topic had one subscription (counted at one copy's
size) sent on it after 200 more subscribed: each message passed the check as it arrived (its payload alone) and took
51 kB, and the bytes held passed ``max_memory`` (by 28 kB under 4 MiB). Now a message to a topic is refused unless
all its copies fit (``_producers._fan_out_refusal``).
"""

from __future__ import annotations

import anyio
import pytest
from broker_serving import serving

import amqp_async
from amqp_async import AMQPError, Message
from amqp_async.codec import conditions

TIMEOUT = 30.0
LIMIT = 4 << 20
SUBSCRIBERS = 200


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_messages_sent_on_credit_granted_before_subscribers_joined_never_pass_the_memory_limit() -> None:
    async with serving(max_memory=LIMIT) as broker, amqp_async.connect(broker.url, reconnect=False) as conn:
        await conn.open_receiver("topic://fan", credit=0, name="first")
        sender = await conn.open_sender("topic://fan")
        with anyio.fail_after(TIMEOUT):
            for _ in range(5):
                await sender.send(Message(body=b"x" * 20))  # its credit is counted at one copy's size
            for number in range(SUBSCRIBERS):
                await conn.open_receiver("topic://fan", credit=0, name=f"subscriber-{number}")
        trackers = []
        with anyio.move_on_after(2):  # all the credit it holds: the sends then wait
            while True:
                trackers.append(await sender.submit(Message(body=b"x" * 20)))
        accepted = 0
        with anyio.fail_after(TIMEOUT):
            for tracker in trackers:
                try:
                    await tracker
                    accepted += 1
                except AMQPError as exc:
                    assert exc.condition == conditions.RESOURCE_LIMIT_EXCEEDED
        assert accepted > 0
        assert broker.flow.held_bytes <= LIMIT  # before: 4,222,847 bytes held
