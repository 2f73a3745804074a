"""A large durable message's file (``DATA_DIR/bodies``) is shared, and goes with the last message that names it.

With a data directory, a message larger than ``large_message_size`` is kept in a file of its own; the store's
row names the file. Several rows and entries may name one file: a dead-lettered message (rejected, at the
delivery limit, expired) keeps its file in the dead-letter queue, and the copies a topic makes for its
subscriptions share one. The file used to be removed with the first row to go: the dead-letter queue's consumer,
or the second subscriber, then got nothing ("cannot read the large message ... it is dropped"), in the same run and
after a restart. Here each such message is delivered whole after the others are settled, in the same run, after a
restart over the same data directory, and after a ``kill -9``; and its file does go once the last one is settled.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from proton import Message as ProtonMessage
from proton.reactor import DurableSubscription
from proton.utils import BlockingConnection

import amqp_async
from amqp_async import Message
from amqp_async.broker import DEAD_LETTER_ANNOTATIONS, Broker, BrokerThread

try:
    from test_broker_cli import BrokerProcess
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.test_broker_cli import BrokerProcess

TIMEOUT = 10.0
KiB = 1024
#: The broker's threshold here: well below the default (1 MiB), so that the bodies are quick to move.
LARGE = 64 * KiB
BODY = bytes(range(256)) * (4 * LARGE // 256)  # four times the threshold: kept on disk
REASON = DEAD_LETTER_ANNOTATIONS["reason"]
TOPIC = "topic://shared"
SUBSCRIBERS = ("subscriber-1", "subscriber-2")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def body_files(data: Path) -> list[str]:
    bodies = data / "bodies"
    return sorted(path.name for path in bodies.iterdir()) if bodies.is_dir() else []


@asynccontextmanager
async def serving(data: Path, **options: Any) -> AsyncIterator[Broker]:
    """A broker over ``data``; leaving it stops it (a clean stop: a restart is the next ``serving``)."""
    async with Broker(port=0, data_dir=data, large_message_size=LARGE, **options) as broker:
        yield broker


def connect(broker: Broker, **options: Any) -> amqp_async.Connection:
    return amqp_async.connect(broker.url, reconnect=False, **options)


async def eventually(predicate: Any) -> None:
    """Wait (bounded) for a broker-side effect the client is not told about: a file removed."""
    with anyio.fail_after(TIMEOUT):
        while not predicate():
            await anyio.sleep(0.01)


async def send_large(broker: Broker, address: str, **fields: Any) -> None:
    async with connect(broker) as conn:
        sender = await conn.open_sender(address)
        await sender.send(Message(body=BODY, durable=True, **fields))  # accepted once stored


async def subscribe(broker: Broker, subscriber: str, *, durable: bool = True) -> None:
    """Make the subscription (durable: kept, with its messages, while detached and across restarts)."""
    options: dict[str, Any] = {"name": "s", "credit": 0}
    if durable:
        options.update(durable=True, expiry_policy="never")
    async with connect(broker, container_id=subscriber) as conn:
        receiver = await conn.open_receiver(TOPIC, **options)
        await receiver.detach()  # closed=false: a durable one is kept (a close would unsubscribe)


async def take(broker: Broker, address: str, *, settle: str = "accept", **options: Any) -> amqp_async.Message:
    """Receive the next message at ``address`` (within TIMEOUT: the broker has it queued) and settle it so."""
    container = options.pop("container_id", None)
    async with connect(broker, container_id=container) as conn:
        receiver = await conn.open_receiver(address, credit=1, **options)
        with anyio.fail_after(TIMEOUT):
            delivery = await receiver.receive()
        if settle == "accept":
            await delivery.accept()
        elif settle == "reject":
            await delivery.reject("app:bad", "cannot process it")
        elif settle == "fail":
            await delivery.modify(delivery_failed=True)
        elif settle == "release":
            await delivery.release()
        # a confirmed durable send on the same connection: the broker answers once the store has committed what
        # came before it (the settlement above included)
        await (await conn.open_sender("synced")).send(Message(body="sync", durable=True))
        return delivery.message


async def take_subscribed(broker: Broker, subscriber: str, *, durable: bool = True) -> amqp_async.Message:
    options: dict[str, Any] = {"name": "s", "container_id": subscriber}
    if durable:
        options.update(durable=True, expiry_policy="never")
    return await take(broker, TOPIC, **options)


@pytest.mark.anyio
@pytest.mark.parametrize("reason", ["rejected", "delivery-limit", "expired"])
async def test_a_dead_lettered_large_message_keeps_its_file_in_the_dead_letter_queue(
    tmp_path: Path, reason: str
) -> None:
    data = tmp_path / "data"
    options: dict[str, Any] = {"dead_letter_queue": "dlq", "delivery_limit": 1}
    async with serving(data, **options) as broker:
        if reason == "expired":
            await send_large(broker, "q", ttl=0.001)
            await eventually(lambda: broker.queues["q"].next_expiry is not None)
            await anyio.sleep(0.01)  # past its expiry: the sweep, or the dispatch below, dead-letters it
            async with connect(broker) as conn:
                await conn.open_receiver("q", credit=1)  # a dispatch takes the expired message out first
                await eventually(lambda: "dlq" in broker.queues and len(broker.queues["dlq"]) == 1)
        else:
            await send_large(broker, "q")
            await take(broker, "q", settle="reject" if reason == "rejected" else "fail")
        assert len(broker.queues["dlq"]) == 1
        assert len(body_files(data)) == 1  # the dead-lettered message's file stays
        # delivered in this run (and released: it stays for the restart)
        message = await take(broker, "dlq", settle="release")
        assert message.body == BODY and message.annotations[REASON] == reason
    async with serving(data, **options) as broker:
        message = await take(broker, "dlq")
        assert message.body == BODY and message.annotations[REASON] == reason
        # done with: the file goes with the message
        await eventually(lambda: body_files(data) == [])


@pytest.mark.anyio
async def test_a_large_message_published_to_two_durable_subscriptions_reaches_both(tmp_path: Path) -> None:
    data = tmp_path / "data"
    async with serving(data) as broker:
        for subscriber in SUBSCRIBERS:
            await subscribe(broker, subscriber)
        await send_large(broker, TOPIC)  # the first: both take it in this run
        await send_large(broker, TOPIC)  # the second: one before the restart, the other after it
        await send_large(broker, TOPIC)  # the third: both after the restart
        assert len(body_files(data)) == 3  # one file for both copies of each
        assert (await take_subscribed(broker, "subscriber-1")).body == BODY
        assert (await take_subscribed(broker, "subscriber-2")).body == BODY  # was: nothing
        assert (await take_subscribed(broker, "subscriber-2")).body == BODY
        assert len(body_files(data)) >= 2
    async with serving(data) as broker:
        assert len(body_files(data)) == 2
        assert (await take_subscribed(broker, "subscriber-1")).body == BODY  # the second
        # the counts were rebuilt from the rows: subscriber 1's row going leaves subscriber 2's copy its file
        assert (await take_subscribed(broker, "subscriber-1")).body == BODY  # the third
        assert (await take_subscribed(broker, "subscriber-2")).body == BODY  # the third
        await eventually(lambda: len(body_files(data)) == 0)


@pytest.mark.anyio
async def test_a_copy_in_a_subscription_that_is_not_kept_outlives_the_stored_copy(tmp_path: Path) -> None:
    """One copy stored (a durable subscription), one in memory only (an ordinary subscription): the stored one
    settled first must not take the file from the other."""
    data = tmp_path / "data"
    async with serving(data) as broker, connect(broker, container_id="subscriber-2") as conn:
        await subscribe(broker, "subscriber-1")
        ordinary = await conn.open_receiver(TOPIC, name="s", credit=0)
        await send_large(broker, TOPIC)
        assert (await take_subscribed(broker, "subscriber-1")).body == BODY
        ordinary.add_credit(1)
        with anyio.fail_after(TIMEOUT):
            delivery = await ordinary.receive()
        assert delivery.message.body == BODY  # was: nothing
        await delivery.accept()
        await eventually(lambda: body_files(data) == [])


def test_proton_subscribers_after_a_restart_and_a_kill_9(tmp_path: Path) -> None:
    """python-qpid-proton's durable subscriptions (the auditor's case), the broker a process: one subscriber's
    accept, committed, then ``kill -9``: the other's copy is loaded again with its file."""
    if sys.platform == "win32":  # pragma: no cover
        pytest.skip("kill -9 is POSIX")
    body = b"L" * (2 * 1024 * KiB)  # past the broker's default threshold (1 MiB)
    data = tmp_path / "data"
    with broker_process(tmp_path) as broker:
        for subscriber in SUBSCRIBERS:
            conn = BlockingConnection(broker.url, timeout=TIMEOUT, container_id=subscriber)
            # detached (closed=false), not closed: a close would unsubscribe (the connection's close follows it)
            conn.create_receiver(TOPIC, name="s", options=DurableSubscription()).detach()
            conn.close()
        conn = BlockingConnection(broker.url, timeout=TIMEOUT)
        conn.create_sender(TOPIC).send(ProtonMessage(body=body, durable=True))  # returns once accepted: stored
        conn.close()
        assert proton_take(broker.url, "subscriber-1") == body
        broker.process.kill()
        broker.process.wait(TIMEOUT)
    with broker_process(tmp_path) as broker:
        assert proton_take(broker.url, "subscriber-2") == body  # was: nothing (its file gone)
        assert len(body_files(data)) <= 1  # the last one settled: gone now, or at the next start


def proton_take(url: str, subscriber: str) -> bytes | None:
    """The next message of a durable subscription, accepted (None: none within TIMEOUT). The accept is committed
    when it returns: a confirmed durable send follows on the same connection."""
    conn = BlockingConnection(url, timeout=TIMEOUT, container_id=subscriber)
    try:
        receiver = conn.create_receiver(TOPIC, name="s", options=DurableSubscription(), credit=1)
        try:
            message = receiver.receive(timeout=TIMEOUT)
        except Exception:
            return None
        receiver.accept()
        conn.create_sender("synced").send(ProtonMessage(body="sync", durable=True))
        return bytes(message.body)  # a copy: proton's binary body may point into memory freed with the message
    finally:
        conn.close()


@contextmanager
def broker_process(tmp_path: Path) -> Iterator[BrokerProcess]:
    broker = BrokerProcess(tmp_path, "--port", "0", "--data-dir", str(tmp_path / "data"), "--quiet")
    try:
        yield broker
    finally:
        broker.stop()


def test_a_broker_thread_delivers_the_dead_lettered_large_message_to_proton(tmp_path: Path) -> None:
    """The same through python-qpid-proton: rejected (no error), then received from the dead-letter queue."""
    data = tmp_path / "data"
    with BrokerThread(data_dir=data, large_message_size=LARGE, dead_letter_queue="dlq") as broker:
        conn = BlockingConnection(broker.url, timeout=TIMEOUT)
        try:
            conn.create_sender("q").send(ProtonMessage(body=BODY, durable=True))
            receiver = conn.create_receiver("q", credit=1)
            receiver.receive(timeout=TIMEOUT)
            receiver.reject()
            # a confirmed durable send: the broker answers once the store has committed what came before it
            conn.create_sender("synced").send(ProtonMessage(body="sync", durable=True))
            assert sorted((data / "bodies").iterdir()) != []  # was: removed at the commit of the rejection
            dead = conn.create_receiver("dlq", credit=1)
            message = dead.receive(timeout=TIMEOUT)  # was: a timeout (its file removed at the rejection)
            assert message.body == BODY
            assert message.annotations["x-opt-dead-letter-reason"] == "rejected"
            dead.accept()
        finally:
            conn.close()
