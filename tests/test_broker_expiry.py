"""Message expiry in the embedded broker (§3.2.1 ttl, §3.2.4 absolute-expiry-time), with exact outcomes.

- an expired message is never delivered: dropped without a dead-letter queue, dead-lettered (reason ``expired``)
  with one, its other sections byte for byte as sent;
- the periodic sweep takes expired messages out of queues nobody consumes from: their memory and depth come back
  (a producer blocked by ``max_queue_depth`` gets its credit);
- a message delivered with a ttl carries the time it has left (§3.2.1's reduced ttl), the rest of it unchanged;
- with both a ttl and an absolute-expiry-time, the earlier one wins; released after its expiry, a message is not
  delivered again; browsers do not see expired messages; topic subscriptions expire their copies;
- durable messages keep their expiry across a restart (clean stop and ``kill -9`` with ``--data-dir``): a restart
  neither extends nor forgets it; a store written before expiry was kept gets it when opened.

Waits are bounded and generous (a loaded machine): lifetimes of 0.3-1 s, checks 0.5 s or more after them.
"""

from __future__ import annotations

import signal
import sqlite3
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

import amqp_async
from amqp_async import Message
from amqp_async.broker import DEAD_LETTER_ANNOTATIONS, TOPIC_PREFIX, Broker
from amqp_async.codec.delivery_states import Accepted
from amqp_async.types import symbol

try:
    from message_sections import sections, without
    from test_broker_cli import BrokerProcess
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.message_sections import sections, without
    from tests.test_broker_cli import BrokerProcess

TIMEOUT = 20.0
REASON = DEAD_LETTER_ANNOTATIONS["reason"]
SOURCE = DEAD_LETTER_ANNOTATIONS["source"]
COUNT = DEAD_LETTER_ANNOTATIONS["count"]
TIME = DEAD_LETTER_ANNOTATIONS["time"]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@asynccontextmanager
async def serving(**options: Any) -> AsyncIterator[Broker]:
    options.setdefault("expiry_interval", 0.1)
    async with Broker(port=0, **options) as broker:
        yield broker


async def send_all(url: str, address: str, *messages: Message) -> None:
    async with amqp_async.connect(url, reconnect=False) as conn:
        sender = await conn.open_sender(address)
        for message in messages:
            assert isinstance(await sender.send(message), Accepted)


async def drained(receiver: amqp_async.Receiver) -> list[amqp_async.Delivery]:
    """What the receiver's credit brings now: a drain (§2.6.7) ends it; each accepted."""
    await receiver.drain()
    got = []
    while (delivery := receiver.receive_nowait()) is not None:
        got.append(delivery)
        await delivery.accept()
    return got


async def receive_all(url: str, address: str, **options: Any) -> list[amqp_async.Delivery]:
    """Every message waiting at ``address`` (accepted), in order: a drain ends it."""
    async with amqp_async.connect(url, reconnect=False) as conn:
        got = await drained(await conn.open_receiver(address, credit=100, **options))
    return got


@pytest.mark.anyio
async def test_an_expired_message_is_never_delivered_and_without_a_dead_letter_queue_is_dropped() -> None:
    async with serving() as broker:
        with anyio.fail_after(TIMEOUT):
            now = time.time()
            await send_all(
                broker.url,
                "q",
                Message(body="ttl 300 ms", ttl=0.3),
                Message(body="no expiry"),
                Message(body="absolute in 300 ms", expiry_time=now + 0.3),
                Message(body="ttl 60 s", ttl=60),
                Message(body="absolute in 60 s", expiry_time=now + 60),
            )
            await anyio.sleep(0.8)
            got = await receive_all(broker.url, "q")
    assert [delivery.message.body for delivery in got] == ["no expiry", "ttl 60 s", "absolute in 60 s"]
    assert broker.dead_letters.dropped == {"expired": 2}
    assert broker.dead_letters.counts == {}
    assert broker.flow.held_count == 0 and broker.flow.held_bytes == 0


@pytest.mark.anyio
async def test_an_expired_message_is_checked_at_delivery_even_before_the_sweep() -> None:
    async with serving(expiry_interval=3600) as broker:  # no sweep during the test: the dispatch must check
        with anyio.fail_after(TIMEOUT):
            await send_all(broker.url, "q", Message(body="short", ttl=0.3), Message(body="kept"))
            await anyio.sleep(0.6)
            assert len(broker.queues["q"]) == 2  # still there: nobody looked
            got = await receive_all(broker.url, "q")
    assert [delivery.message.body for delivery in got] == ["kept"]
    assert broker.dead_letters.dropped == {"expired": 1}


@pytest.mark.anyio
async def test_an_expired_message_is_dead_lettered_with_reason_expired_and_its_other_sections_unchanged() -> None:
    original = Message(
        body={"order": 7, "lines": ["a", "b"]},
        id="m-1",
        subject="orders",
        ttl=0.3,
        durable=True,
        priority=7,
        annotations={"x-opt-partition": 3},
        properties={"tenant": "acme", "n": 1},
        footer={symbol("checksum"): "abc"},
        content_type="application/json",
        creation_time=1_700_000_000.5,
    )
    payload = original.encode()
    async with serving(dead_letter_queue="dead") as broker:
        with anyio.fail_after(TIMEOUT):
            before = time.time()
            await send_all(broker.url, "orders", original)
            await anyio.sleep(0.8)  # expired, and swept (every 0.1 s) with nobody consuming
            assert len(broker.queues["orders"]) == 0
            after = time.time()
            [dead] = await receive_all(broker.url, "dead")
    annotations = dead.message.annotations
    assert annotations is not None
    assert set(annotations) == {
        symbol("x-opt-partition"),
        REASON,
        SOURCE,
        TIME,
        COUNT,
        DEAD_LETTER_ANNOTATIONS["description"],
    }
    assert annotations[symbol("x-opt-partition")] == 3  # its own annotation kept
    assert annotations[REASON] == "expired"
    assert annotations[SOURCE] == "orders"
    assert annotations[COUNT] == 1
    assert before * 1000 <= annotations[TIME] <= after * 1000
    # everything else byte for byte as sent: header (its ttl too), properties, application properties, body, footer
    assert without(dead.payload, "message-annotations") == without(payload, "message-annotations")
    assert set(sections(dead.payload)) == {
        "header",
        "message-annotations",
        "properties",
        "application-properties",
        "amqp-value",
        "footer",
    }
    assert broker.dead_letters.counts == {"expired": 1}


@pytest.mark.anyio
async def test_the_sweep_frees_memory_and_depth_and_a_blocked_producer_gets_credit() -> None:
    """No consumer: a queue at max_queue_depth full of messages that expire; the producer's next send waits for
    credit, and completes once a sweep has taken them out (the sweep called here, at a time past their expiry:
    nothing depends on how fast the machine is)."""
    async with serving(max_queue_depth=50, expiry_interval=3600) as broker:
        with anyio.fail_after(TIMEOUT):
            async with amqp_async.connect(broker.url, reconnect=False) as conn:
                sender = await conn.open_sender("full")
                for number in range(50):
                    await sender.send(Message(body=number, ttl=60))
                assert len(broker.queues["full"]) == 50
                assert broker.flow.held_count == 50
                assert sender.credit == 0
                async with anyio.create_task_group() as group:
                    sent = anyio.Event()

                    async def send_one_more() -> None:
                        await sender.send(Message(body="after the sweep"))  # waits for credit
                        sent.set()

                    group.start_soon(send_one_more)
                    await anyio.sleep(0.3)
                    assert not sent.is_set()  # no credit while the queue is full
                    assert broker.expire_messages(time.time() + 120) == 50
                    await sent.wait()
            assert broker.flow.held_count == 1
            got = await receive_all(broker.url, "full")
    assert [delivery.message.body for delivery in got] == ["after the sweep"]
    assert broker.dead_letters.dropped == {"expired": 50}
    assert broker.flow.held_count == 0 and broker.flow.held_bytes == 0


@pytest.mark.anyio
async def test_the_periodic_sweep_empties_a_queue_nobody_consumes() -> None:
    async with serving(expiry_interval=0.1) as broker:
        with anyio.fail_after(TIMEOUT):
            async with amqp_async.connect(broker.url, reconnect=False) as conn:
                sender = await conn.open_sender("forgotten")
                for number in range(100):
                    await sender.submit(Message(body=number, ttl=0.2))
                await sender.send(Message(body="kept"))
            while len(broker.queues["forgotten"]) > 1:  # the sweep (every 0.1 s), with nobody consuming
                await anyio.sleep(0.05)
    assert broker.dead_letters.dropped == {"expired": 100}
    assert broker.flow.held_count == 1


@pytest.mark.anyio
async def test_a_delivered_message_carries_the_time_it_has_left() -> None:
    """§3.2.1: an intermediary transmits the reduced ttl; nothing else of the message changes."""
    original = Message(body="countdown", ttl=10, durable=True, properties={"k": "v"})
    async with serving() as broker:
        with anyio.fail_after(TIMEOUT):
            before = time.time()
            await send_all(broker.url, "q", original)
            await anyio.sleep(0.5)
            [delivery] = await receive_all(broker.url, "q")
            spent = time.time() - before
    assert 10 - spent - 0.002 <= delivery.message.ttl <= 9.5 + 0.002
    assert delivery.message.durable is True
    assert without(delivery.payload, "header") == without(original.encode(), "header")


@pytest.mark.anyio
async def test_the_earlier_of_ttl_and_absolute_expiry_time_wins() -> None:
    async with serving() as broker:
        with anyio.fail_after(TIMEOUT):
            now = time.time()
            await send_all(
                broker.url,
                "q",
                Message(body="ttl first", ttl=0.3, expiry_time=now + 60),
                Message(body="absolute first", ttl=60, expiry_time=now + 0.3),
                Message(body="both late", ttl=60, expiry_time=now + 60),
            )
            await anyio.sleep(0.8)
            got = await receive_all(broker.url, "q")
    assert [delivery.message.body for delivery in got] == ["both late"]
    assert broker.dead_letters.dropped == {"expired": 2}


@pytest.mark.anyio
async def test_a_message_released_after_its_expiry_is_not_delivered_again() -> None:
    async with serving(dead_letter_queue="dead") as broker:
        with anyio.fail_after(TIMEOUT):
            async with amqp_async.connect(broker.url, reconnect=False) as conn:
                receiver = await conn.open_receiver("q", credit=10)  # first: the message is delivered on arrival
                await send_all(broker.url, "q", Message(body="held too long", ttl=0.5))
                delivery = await receiver.receive()
                await anyio.sleep(0.8)
                await delivery.release()
                assert await drained(receiver) == []
            [dead] = await receive_all(broker.url, "dead")
    assert dead.message.body == "held too long"
    assert dead.message.annotations is not None and dead.message.annotations[REASON] == "expired"


@pytest.mark.anyio
async def test_browsers_and_topic_subscribers_see_no_expired_message() -> None:
    topic = f"{TOPIC_PREFIX}news"
    async with serving() as broker:
        with anyio.fail_after(TIMEOUT):
            async with amqp_async.connect(broker.url, reconnect=False) as conn:
                subscriber = await conn.open_receiver(topic, credit=0)
                await send_all(broker.url, "q", Message(body="old", ttl=0.3), Message(body="fresh"))
                await send_all(broker.url, topic, Message(body="old news", ttl=0.3), Message(body="news"))
                await anyio.sleep(0.8)
                browsed = await receive_all(broker.url, "q", distribution_mode="copy")
                subscriber.add_credit(10)
                news = await drained(subscriber)
    assert [delivery.message.body for delivery in browsed] == ["fresh"]
    assert [delivery.message.body for delivery in news] == ["news"]
    assert broker.dead_letters.dropped == {"expired": 2}


@pytest.mark.anyio
async def test_durable_messages_keep_their_expiry_across_a_restart(tmp_path: Path) -> None:
    """The expiry is computed at arrival and stored: a restart must not extend it (a ttl counted again from the
    restart would keep "ttl 1.5 s" alive past 2 s) nor forget it. No sweep runs and nobody consumes until the
    check, so nothing expires early however slow the machine is."""
    data = tmp_path / "data"
    async with serving(data_dir=data, expiry_interval=3600) as broker:
        with anyio.fail_after(TIMEOUT):
            absolute = round(time.time() + 1.5, 3)
            before = time.time()
            await send_all(
                broker.url,
                "kept",
                Message(body="ttl 1.5 s", ttl=1.5, durable=True),
                Message(body="ttl 60 s", ttl=60, durable=True),
                Message(body="absolute in 1.5 s", expiry_time=absolute, durable=True),
            )
            after = time.time()
    async with serving(data_dir=data, expiry_interval=3600) as broker:
        expiries = {entry.message.body: entry.expires for entry in broker.queues["kept"].entries}
        assert set(expiries) == {"ttl 1.5 s", "ttl 60 s", "absolute in 1.5 s"}
        assert before + 1.5 <= (expiries["ttl 1.5 s"] or 0) <= after + 1.5  # as computed at the arrival
        assert before + 60 <= (expiries["ttl 60 s"] or 0) <= after + 60
        assert expiries["absolute in 1.5 s"] == pytest.approx(absolute, abs=0.001)
        with anyio.fail_after(TIMEOUT):
            await anyio.sleep(max(0.0, after + 2.0 - time.time()))
            got = await receive_all(broker.url, "kept")
    assert [delivery.message.body for delivery in got] == ["ttl 60 s"]
    assert 50 < got[0].message.ttl < 59.5


@pytest.mark.anyio
@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
async def test_expiry_survives_a_kill_9_with_data_dir(tmp_path: Path) -> None:
    arguments = ("--port", "0", "--data-dir", str(tmp_path / "data"), "--quiet", "--expiry-interval", "0.1")
    broker = BrokerProcess(tmp_path, *arguments)
    try:
        with anyio.fail_after(TIMEOUT):
            sent = time.time()
            await send_all(
                broker.url,
                "kept",
                Message(body="short", ttl=1.0, durable=True),
                Message(body="long", ttl=60, durable=True),
            )
            broker.process.send_signal(signal.SIGKILL)
            broker.process.wait(TIMEOUT)
        broker.stop()
        broker = BrokerProcess(tmp_path, *arguments)
        with anyio.fail_after(TIMEOUT):
            await anyio.sleep(max(0.0, sent + 1.5 - time.time()))
            got = await receive_all(broker.url, "kept")
        assert [delivery.message.body for delivery in got] == ["long"]
    finally:
        broker.stop()


@pytest.mark.anyio
async def test_a_store_from_before_expiry_was_kept_gets_it_when_opened(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    db = sqlite3.connect(data / "broker.sqlite3")
    db.executescript(
        """
        CREATE TABLE queues (name TEXT PRIMARY KEY, topic TEXT, subscription TEXT);
        CREATE TABLE messages (id INTEGER PRIMARY KEY, queue TEXT NOT NULL, payload BLOB NOT NULL);
        INSERT INTO queues VALUES ('old', NULL, NULL);
        """
    )
    rows = [(1, "old", Message(body="no ttl", durable=True).encode())]
    rows.append((2, "old", Message(body="ttl 60 s", durable=True, ttl=60).encode()))
    db.executemany("INSERT INTO messages VALUES (?, ?, ?)", rows)
    db.commit()
    db.close()
    opened = time.time()
    async with serving(data_dir=data) as broker:
        entries = list(broker.queues["old"].entries)
        assert [entry.expires is None for entry in entries] == [True, False]
        assert opened + 59 <= (entries[1].expires or 0) <= time.time() + 60
        with anyio.fail_after(TIMEOUT):
            got = await receive_all(broker.url, "old")
    assert [delivery.message.body for delivery in got] == ["no ttl", "ttl 60 s"]
    columns = [row[1] for row in sqlite3.connect(data / "broker.sqlite3").execute("PRAGMA table_info(messages)")]
    assert columns == ["id", "queue", "payload", "expires"]
