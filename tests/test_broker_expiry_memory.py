"""A message that may expire counts its expiry bookkeeping in the memory limit (amqp_async/broker/_nodes.py,
``EXPIRY_OVERHEAD``).

A queue keeps the messages that may expire in a heap, earliest first: each one's item there (a tuple of three and
its slot in the heap's list) and the float of its expiry time take about 100 bytes, which ``--max-memory`` did not
count. A flood of one-byte messages with a ttl of an hour, nobody consuming, took the broker's RSS to 344 MiB under
the default limit of 256 MiB (the same flood without a ttl: 262 MiB; the auditor's
``/tmp/auditB/t_tiny_ttl.py 3600`` and ``0``); it now levels off at 245 MiB.

- What is counted for messages with a ttl covers what they take beside the same messages without one (measured
  with tracemalloc, as the per-message bookkeeping was).
- The broker's count: a message with a ttl counts its heap item more than the same without, a topic's copies each;
  the count comes back to nothing once the messages are consumed, expire, are dead-lettered and consumed there, or
  are loaded from the store (``data_dir``) and consumed.
"""

from __future__ import annotations

import sys
import time
import tracemalloc
from pathlib import Path

import anyio
import pytest

import amqp_async
from amqp_async import Message
from amqp_async.broker import TOPIC_PREFIX, Broker
from amqp_async.broker._flow import Flow
from amqp_async.broker._nodes import ENTRY_OVERHEAD, Entry, Queue
from amqp_async.codec.delivery_states import Accepted

try:
    from broker_serving import serving
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.broker_serving import serving

TIMEOUT = 20.0
#: What a message that may expire takes besides, at least: its heap item (a tuple of three, and the slot of the
#: heap's list that holds it) and the float of its expiry time.
HEAP_ITEM = sys.getsizeof((1.0, 1, object())) + 8 + sys.getsizeof(1.0)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def fill(ttl: float | None, count: int) -> tuple[int, int]:
    """Put ``count`` one-byte messages (a ttl of ``ttl``, or none) to a queue nobody consumes from: the bytes they
    take (tracemalloc) and the bytes counted for them."""
    flow = Flow()
    queue = Queue("q", flow=flow)
    message = Message(body=b"x", ttl=ttl)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(count):
            queue.put(Entry(message.encode()))
        taken = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(queue) == count and queue.expiring == (count if ttl else 0)
    return taken, flow.held_bytes


def test_what_is_counted_for_messages_with_a_ttl_covers_their_expiry_bookkeeping() -> None:
    count = 20_000
    taken_ttl, counted_ttl = fill(3600.0, count)
    taken_plain, counted_plain = fill(None, count)
    # before: counted 13 bytes more each (the header's), when they took some 110 more
    assert (taken_ttl - taken_plain) / count >= HEAP_ITEM
    assert counted_ttl - counted_plain >= taken_ttl - taken_plain


async def send_all(broker: Broker, address: str, *messages: Message) -> None:
    async with amqp_async.connect(broker.url, reconnect=False) as conn:
        sender = await conn.open_sender(address)
        for message in messages:
            assert isinstance(await sender.send(message), Accepted)


async def receive_all(broker: Broker, address: str) -> list[object]:
    """Every message waiting at ``address`` (accepted): their bodies, in order."""
    async with amqp_async.connect(broker.url, reconnect=False) as conn:
        receiver = await conn.open_receiver(address, credit=100)
        await receiver.drain()
        bodies = []
        while (delivery := receiver.receive_nowait()) is not None:
            bodies.append(delivery.message.body)
            await delivery.accept()
    return bodies


async def settled(broker: Broker, count: int = 0) -> None:
    """Wait until the broker holds ``count`` messages (settlements and sweeps are asynchronous)."""
    while broker.flow.held_count != count:
        await anyio.sleep(0.02)


@pytest.mark.anyio
async def test_a_message_with_a_ttl_counts_its_heap_item_until_it_is_consumed() -> None:
    async with serving() as broker:
        with anyio.fail_after(TIMEOUT):
            await send_all(broker, "plain", Message(body="same"))
            plain = broker.flow.held_bytes
            await send_all(broker, "ttl", Message(body="same", ttl=3600))
            with_ttl = broker.flow.held_bytes - plain
            header = len(broker.queues["ttl"].entries[0].payload) - len(broker.queues["plain"].entries[0].payload)
            assert with_ttl - plain - header >= HEAP_ITEM  # before: the header's bytes alone
            # a topic's copies each count theirs (the payload they share counts once: test_broker_topic_memory.py)
            shared = len(broker.queues["ttl"].entries[0].payload)
            async with amqp_async.connect(broker.url, reconnect=False) as conn:
                for name in ("one", "two"):
                    await conn.open_receiver(f"{TOPIC_PREFIX}news", name=name, credit=0)
                before = broker.flow.held_bytes
                await send_all(broker, f"{TOPIC_PREFIX}news", Message(body="same", ttl=3600))
                assert broker.flow.held_bytes - before == 2 * with_ttl - shared
            await settled(broker, 2)  # the subscriptions went with their links
            assert broker.flow.held_bytes == before
            assert await receive_all(broker, "plain") == ["same"]
            assert await receive_all(broker, "ttl") == ["same"]
            await settled(broker)
    assert broker.flow.held_bytes == 0


@pytest.mark.anyio
async def test_the_count_comes_back_once_messages_expire_or_are_dead_lettered_and_consumed() -> None:
    async with serving(expiry_interval=0.1, dead_letter_queue="dlq") as broker:
        with anyio.fail_after(TIMEOUT):
            await send_all(broker, "short", *[Message(body=number, ttl=0.2) for number in range(10)])
            assert broker.flow.held_bytes >= sum(
                len(entry.payload) + ENTRY_OVERHEAD + HEAP_ITEM for entry in broker.queues["short"].entries
            )
            while broker.dead_letters.counts.get("expired", 0) < 10:  # the sweep, every 0.1 s
                await anyio.sleep(0.02)
            # in the dead-letter queue they no longer expire: each counts its bytes and bookkeeping, no heap item
            dead = broker.queues["dlq"].entries
            assert [entry.size for entry in dead] == [len(entry.payload) + ENTRY_OVERHEAD for entry in dead]
            assert broker.flow.held_bytes == sum(entry.size for entry in dead)
            assert await receive_all(broker, "dlq") == list(range(10))
            await settled(broker)
    assert broker.flow.held_bytes == 0
    async with serving(expiry_interval=0.1) as broker:
        with anyio.fail_after(TIMEOUT):
            await send_all(broker, "short", *[Message(body=number, ttl=0.2) for number in range(10)])
            await settled(broker)  # dropped (no dead-letter queue)
    assert broker.flow.held_bytes == 0 and broker.dead_letters.dropped == {"expired": 10}


@pytest.mark.anyio
async def test_messages_loaded_from_the_store_count_their_expiry_and_give_it_back(tmp_path: Path) -> None:
    async with serving(data_dir=tmp_path, expiry_interval=3600) as broker:
        with anyio.fail_after(TIMEOUT):
            await send_all(broker, "kept", Message(body="ttl", ttl=3600, durable=True))
            counted = broker.flow.held_bytes
            assert counted >= len(broker.queues["kept"].entries[0].payload) + ENTRY_OVERHEAD + HEAP_ITEM
    async with serving(data_dir=tmp_path, expiry_interval=3600) as broker:
        assert broker.queues["kept"].entries[0].expires == pytest.approx(time.time() + 3600, abs=60)
        assert broker.flow.held_bytes == counted  # as when it arrived: its heap item included
        with anyio.fail_after(TIMEOUT):
            assert await receive_all(broker, "kept") == ["ttl"]
            await settled(broker)
    assert broker.flow.held_bytes == 0


@pytest.mark.anyio
async def test_a_drained_backlog_of_messages_with_a_ttl_leaves_nothing_of_them_in_the_expiry_heap() -> None:
    """The heap kept an item (and its entry, the message's bytes with it, settled and no longer counted) for every
    message delivered until its ttl was up, unless more came: a consumer that drained 2,000 messages with an hour's
    ttl, one left queued, kept all 2,000 for an hour. Compacted as delivery empties it (twice the messages still
    to expire, plus 64, at most)."""
    async with serving() as broker, amqp_async.connect(broker.url, reconnect=False) as conn:
        with anyio.fail_after(TIMEOUT):
            sender = await conn.open_sender("backlog")
            await sender.send_many([Message(body=number, ttl=3600) for number in range(2000)])
            queue = broker.queues["backlog"]
            assert len(queue._expiries) == 2000
            receiver = await conn.open_receiver("backlog", credit=0)
            receiver.add_credit(1999)
            for delivery in await receiver.receive_many(1999, timeout=TIMEOUT):
                await delivery.accept()
            assert queue.expiring == 1 and len(queue) == 1
            assert len(queue._expiries) <= 2 * 1 + 64  # before: 2,000
            assert queue.next_expiry is not None  # the one left still expires
