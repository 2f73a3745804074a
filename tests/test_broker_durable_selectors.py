"""A durable topic subscription keeps its selector across a restart (``data_dir``; amqp_async/broker/_store.py,
table ``selectors``).

The store kept a durable subscription without its selector: after a restart it took a copy of every message
published until its subscriber attached again, the ones it would never deliver included, and those filled the
memory limit until the topic's producers waited for credit (and every other producer of the broker). Now the
selector is stored with the subscription, and loaded with it:

- subscribed with a selector, detached, broker restarted: the subscription takes only what the selector matches,
  before its subscriber is back (python-qpid-proton publishes);
- a subscriber back without a selector clears it in the store: after the next restart, everything;
- a data directory written before selectors were stored (its tables as the broker wrote them, made here by hand)
  loads as it did: the subscription and its messages, no selector; a selector given since is kept from then on;
  the ``queues`` table keeps its three columns, so that a broker of before still reads and writes a store written
  since.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import anyio
import pytest
from proton import Message as ProtonMessage
from proton.utils import BlockingConnection

import amqp_async
from amqp_async import Message

try:
    from broker_serving import serving
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.broker_serving import serving

TIMEOUT = 20.0
TOPIC = "topic://news"
KEY = "subscriber/sub"
RED = "color = 'red'"
LIMIT = 1 << 20  # room for about 100 of the blue messages below
BLUE = b"x" * 10_000


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def subscribe(url: str, selector: str | None) -> None:
    """Attach the durable subscription ``sub`` of container ``subscriber`` with ``selector``, and detach (closed=false:
    kept; a close would unsubscribe)."""
    async with amqp_async.connect(url, reconnect=False, container_id="subscriber") as conn:
        receiver = await conn.open_receiver(TOPIC, name="sub", durable=True, expiry_policy="never", selector=selector)
        await receiver.detach()


def publish_with_proton(url: str, colours: list[str]) -> None:
    """Publish one message per colour (each a durable one of 10 kB, its colour in its application properties)."""
    connection = BlockingConnection(url, timeout=TIMEOUT)
    try:
        sender = connection.create_sender(TOPIC)
        for colour in colours:
            # with the selector lost, the limit filled with blue copies and this waited for credit: a timeout
            sender.send(
                ProtonMessage(body=BLUE if colour == "blue" else colour, properties={"color": colour}, durable=True),
                timeout=5,
            )
    finally:
        connection.close()


def queued(broker: amqp_async.broker.Broker) -> list[object]:
    return [entry.message.body for entry in broker.topics[TOPIC].subscriptions[KEY].entries]


@pytest.mark.anyio
async def test_a_durable_subscription_filters_after_a_restart_before_its_subscriber_is_back(tmp_path: Path) -> None:
    async with serving(data_dir=tmp_path) as broker:
        with anyio.fail_after(TIMEOUT):
            await subscribe(broker.url, RED)
    async with serving(data_dir=tmp_path, max_memory=LIMIT) as broker:
        await anyio.to_thread.run_sync(publish_with_proton, broker.url, ["blue"] * 300 + ["red"])
        assert queued(broker) == ["red"]  # before: 100-odd blue copies, then a timeout
    async with serving(data_dir=tmp_path) as broker:
        assert queued(broker) == ["red"]  # and kept
        assert broker.topics[TOPIC].subscriptions[KEY].selector.text == RED


@pytest.mark.anyio
async def test_a_subscriber_back_without_a_selector_clears_the_stored_one(tmp_path: Path) -> None:
    async with serving(data_dir=tmp_path) as broker:
        with anyio.fail_after(TIMEOUT):
            await subscribe(broker.url, RED)
            await subscribe(broker.url, None)
    async with serving(data_dir=tmp_path) as broker:
        await anyio.to_thread.run_sync(publish_with_proton, broker.url, ["blue", "red"])
        assert queued(broker) == [BLUE, "red"]
    with sqlite3.connect(tmp_path / "broker.sqlite3") as db:
        assert db.execute("SELECT * FROM selectors").fetchall() == []


#: The tables as the broker wrote them before selectors were stored.
_FORMER_SCHEMA = """
CREATE TABLE queues (name TEXT PRIMARY KEY, topic TEXT, subscription TEXT);
CREATE TABLE messages (
    id INTEGER PRIMARY KEY, queue TEXT NOT NULL, payload BLOB NOT NULL, expires REAL, body TEXT, body_at INTEGER
);
"""


@pytest.mark.anyio
async def test_a_data_dir_written_before_selectors_were_stored_loads_as_before(tmp_path: Path) -> None:
    name = f"{TOPIC}#{KEY}"
    with sqlite3.connect(tmp_path / "broker.sqlite3") as db:
        db.execute("PRAGMA journal_mode=WAL")
        db.executescript(_FORMER_SCHEMA)
        db.execute("INSERT INTO queues VALUES (?, ?, ?)", (name, TOPIC, KEY))
        db.execute("INSERT INTO queues VALUES (?, NULL, NULL)", ("plain",))
        kept = Message(body="kept", durable=True, properties={"color": "blue"}).encode()
        db.execute("INSERT INTO messages (id, queue, payload) VALUES (1, ?, ?)", (name, kept))
        db.execute("INSERT INTO messages (id, queue, payload) VALUES (2, 'plain', ?)", (kept,))
    db.close()
    async with serving(data_dir=tmp_path) as broker:
        # as before: loaded, no selector (none was kept), its message there
        assert broker.topics[TOPIC].subscriptions[KEY].selector is None
        assert queued(broker) == ["kept"] and [entry.message.body for entry in broker.queues["plain"].entries] == [
            "kept"
        ]
        with anyio.fail_after(TIMEOUT):
            await subscribe(broker.url, RED)  # its subscriber back, with a selector: kept from now on
    async with serving(data_dir=tmp_path) as broker:
        await anyio.to_thread.run_sync(publish_with_proton, broker.url, ["blue", "red"])
        assert queued(broker) == ["kept", "red"]
        async with amqp_async.connect(broker.url, reconnect=False) as conn:
            receiver = await conn.open_receiver("plain", credit=1)
            with anyio.fail_after(TIMEOUT):
                assert (await receiver.receive()).message.body == "kept"
    with sqlite3.connect(tmp_path / "broker.sqlite3") as db:
        # a broker of before writes ``INSERT INTO queues VALUES (?, ?, ?)``: the table keeps its three columns
        assert [row[1] for row in db.execute("PRAGMA table_info(queues)")] == ["name", "topic", "subscription"]
        assert db.execute("SELECT * FROM selectors").fetchall() == [(name, RED)]
    db.close()
