"""A message to a topic is counted once in the memory limit, however many subscriptions hold a copy: the copies share
its bytes (broker/_nodes.py, ``Entry.copy``).

Each copy was counted whole: a topic with ten subscribers counted ten payloads for the one bytes object they share.
200 messages of 50 kB filled a 64 MiB limit with 10.6 MiB really taken (tracemalloc); and as the producer's credit
was counted at one message's size, the bytes counted passed the limit and 66 of the 200 were rejected with
``amqp:resource-limit-exceeded`` instead of waiting for credit. Now the payload counts once (with the last copy to
go), each copy's bookkeeping apart, and a copy whose bytes change (a delivery-count, dead-letter annotations) counts
its own.
"""

from __future__ import annotations

import tracemalloc

import anyio
import pytest

import amqp_async
from amqp_async import Message
from amqp_async.broker._flow import Flow
from amqp_async.broker._nodes import ENTRY_OVERHEAD, Entry, Topic

try:
    from broker_serving import serving
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.broker_serving import serving

TIMEOUT = 20.0
SUBSCRIBERS = 10
COUNT = 200
SIZE = 50_000
LIMIT = 64 << 20


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_our_producer_to_a_topic_of_ten_subscribers_is_counted_what_the_copies_take_and_none_rejected() -> None:
    async with serving(max_memory=LIMIT) as broker, amqp_async.connect(broker.url, reconnect=False) as conn:
        for number in range(SUBSCRIBERS):
            await conn.open_receiver("topic://fan", credit=0, name=f"subscriber-{number}")
        sender = await conn.open_sender("topic://fan")
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            with anyio.fail_after(TIMEOUT):
                for number in range(COUNT):
                    # before: MessageRejected (amqp:resource-limit-exceeded) from the 135th
                    await sender.send(Message(body=number.to_bytes(4, "big") * (SIZE // 4)))
            taken = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        counted = broker.flow.held_bytes
        assert all(len(queue) == COUNT for queue in broker.topics["topic://fan"].subscriptions.values())
        # one payload per message, and each copy's bookkeeping (before: ten payloads, 64 MiB counted)
        assert counted == COUNT * (SIZE + ENTRY_OVERHEAD * SUBSCRIBERS) + _framing(broker)
        assert counted < 2 * taken


def _framing(broker: object) -> int:
    """The bytes of each message's encoding beyond its body (its sections' headers), counted once per message."""
    topic = broker.topics["topic://fan"]  # type: ignore[attr-defined]
    entry = next(iter(topic.subscriptions.values())).entries[0]
    return COUNT * (len(entry.payload) - SIZE)


def test_the_payload_is_uncounted_with_the_last_copy_and_a_changed_copy_counts_its_own() -> None:
    flow = Flow(max_memory=LIMIT)
    topic = Topic("t")
    queues = [topic.subscription(f"s{number}", flow=flow) for number in range(3)]
    payload = b"\x00\x53\x75\xb0" + (SIZE).to_bytes(4, "big") + b"x" * SIZE  # a data section
    topic.publish(Entry(payload))
    assert flow.held_bytes == len(payload) + 3 * ENTRY_OVERHEAD
    first, second, third = (queue.entries.popleft() for queue in queues)
    queues[0].release(first)
    assert flow.held_bytes == len(payload) + 2 * ENTRY_OVERHEAD
    second.annotate({"x-opt-note": "changed"})  # its bytes are its own from now on (a dead letter's, a modified)
    queues[1].put_back([second])
    assert flow.held_bytes == len(payload) + len(second.payload) + 2 * ENTRY_OVERHEAD
    queues[2].release(third)
    assert flow.held_bytes == len(second.payload) + ENTRY_OVERHEAD
    queues[1].release(queues[1].entries.popleft())
    assert flow.held_bytes == 0
    assert [queue.held_bytes for queue in queues] == [0, 0, 0]


@pytest.mark.anyio
async def test_our_producer_of_small_messages_to_fifty_subscribers_waits_for_credit_rather_than_is_rejected() -> None:
    """A small message to many subscribers costs mostly their copies' bookkeeping: the producer's credit is counted
    at what the message took in all (before: at one copy's size, 356 bytes for 12.9 kB taken; 1,675 of 3,000 were
    rejected under a 4 MiB limit)."""
    limit, subscribers = 4 << 20, 50
    async with serving(max_memory=limit) as broker, amqp_async.connect(broker.url, reconnect=False) as conn:
        for number in range(subscribers):
            await conn.open_receiver("topic://many", credit=0, name=f"subscriber-{number}")
        sender = await conn.open_sender("topic://many")
        body = b"m" * 100
        with anyio.fail_after(TIMEOUT):
            while broker.flow.held_bytes < limit // 2:
                await sender.send(Message(body=body))
        with anyio.move_on_after(2):  # the limit is near: the sends wait for credit (before: MessageRejected)
            while True:
                await sender.send(Message(body=body))
        assert broker.flow.starved
        assert broker.flow.held_bytes <= limit
