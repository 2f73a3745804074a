"""The embedded broker's durable store (``--data-dir``): crash tests with exact counts.

The broker runs as ``python -m amqp_async.broker --data-dir DIR`` in a subprocess and is killed with SIGKILL (no
chance to flush anything) and started again on the same port and directory:

- a producer sends 20,000 durable messages with confirmed sends (reconnect on) while the broker is killed twice:
  every message the broker accepted is there afterwards, and the only duplicates are of messages whose outcome
  the client reported in doubt (and sent again);
- a consumer process killed mid-stream: its unsettled messages are delivered again, none lost, none twice, and
  what it accepted stays gone across a broker kill as well;
- queues and durable subscriptions survive a kill; durable messages published to a durable subscription while it
  was detached wait for it; non-durable messages do not survive (documented);
- transactional work is stored at the commit, and nothing of a rolled-back transaction.
"""

from __future__ import annotations

import collections
import logging
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

import amqp_async
from amqp_async import DeliveryInDoubt, Message
from amqp_async.broker import Broker
from amqp_async.broker._connection import AWAITING_SETTLEMENT_LIMIT
from amqp_async.codec.delivery_states import Accepted

try:
    from test_broker_cli import BrokerProcess
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.test_broker_cli import BrokerProcess

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")

REPO = Path(__file__).resolve().parent.parent
TIMEOUT = 30.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def start_broker(tmp_path: Path, port: int = 0) -> BrokerProcess:
    return BrokerProcess(tmp_path, "--port", str(port), "--data-dir", str(tmp_path / "data"), "--quiet")


@contextmanager
def durable_broker(tmp_path: Path) -> Iterator[list[BrokerProcess]]:
    """A broker process with a data directory; the list holds the current one (a restart appends)."""
    brokers = [start_broker(tmp_path)]
    try:
        yield brokers
    finally:
        for broker in brokers:
            broker.stop()


async def restart(brokers: list[BrokerProcess], tmp_path: Path) -> None:
    """kill -9 the broker and start it again on the same port and data directory."""
    old = brokers[-1]
    old.process.kill()
    old.process.wait(TIMEOUT)
    brokers.append(await anyio.to_thread.run_sync(start_broker, tmp_path, old.port))


def backoff() -> amqp_async.Backoff:
    return amqp_async.Backoff(initial=0.05, maximum=0.2, jitter=0.0)


async def drain(url: str, address: str, **options: Any) -> list[Any]:
    """Every message waiting at ``address``, accepted, in the order received (ends once a drain brings none).

    The accepts are stored when it returns: it ends with a confirmed durable send on the same connection (to
    ``synced``), which the broker accepts once the store has committed what came before it."""
    bodies: list[Any] = []
    async with amqp_async.connect(url, reconnect=False, **options) as conn:
        receiver = await conn.open_receiver(address, credit=500)
        while True:
            await receiver.drain()
            if not receiver.queued:
                sync = await conn.open_sender("synced")
                await sync.send(Message(body="sync", durable=True))
                return bodies
            while (delivery := receiver.receive_nowait()) is not None:
                bodies.append(delivery.message.body)
                await delivery.accept()


@asynccontextmanager
async def stored(tmp_path: Path) -> AsyncIterator[Broker]:
    """The store as an in-process broker loads it (for what a client cannot see: the queues kept)."""
    async with Broker(port=0, data_dir=tmp_path / "data") as broker:
        yield broker


@pytest.mark.anyio
async def test_20000_confirmed_durable_sends_survive_two_kill_9_with_duplicates_only_of_those_in_doubt(
    tmp_path: Path,
) -> None:
    total = 20_000
    window = 500
    kill_after = (6_000, 13_000)
    accepted: set[int] = set()
    in_doubt: set[int] = set()
    with durable_broker(tmp_path) as brokers:
        url = brokers[0].url
        with anyio.fail_after(TIMEOUT * 2):
            async with amqp_async.connect(url, reconnect=backoff()) as conn:
                sender = await conn.open_sender("crash")
                kills = 0

                async def killer() -> None:
                    nonlocal kills
                    for threshold in kill_after:
                        while len(accepted) < threshold:
                            await anyio.sleep(0.002)
                        await restart(brokers, tmp_path)
                        kills += 1

                async with anyio.create_task_group() as group:
                    group.start_soon(killer)
                    to_send = collections.deque(range(total))
                    pending: collections.deque[tuple[int, amqp_async.Tracker]] = collections.deque()
                    while to_send or pending:
                        while to_send and len(pending) < window:
                            number = to_send.popleft()
                            pending.append((number, await sender.submit(Message(body=number, durable=True))))
                        number, tracker = pending.popleft()
                        try:
                            assert isinstance(await tracker, Accepted)
                            accepted.add(number)
                        except DeliveryInDoubt:
                            in_doubt.add(number)
                            to_send.append(number)  # at-least-once: the caller sends it again
                assert kills == 2
        assert len(accepted) == total
        assert in_doubt  # the kills did catch messages in flight
        with anyio.fail_after(TIMEOUT):
            bodies = await drain(brokers[-1].url, "crash")
    counts = collections.Counter(bodies)
    assert set(counts) == set(range(total))  # 0 accepted message lost
    duplicates = {number for number, count in counts.items() if count > 1}
    assert duplicates <= in_doubt  # duplicates only of messages reported in doubt
    assert len(bodies) == total + len(duplicates) + sum(counts[number] - 2 for number in duplicates)


CONSUMER = textwrap.dedent(
    """
    import sys, anyio, amqp_async
    from amqp_async import Message

    async def main(url, count):
        async with amqp_async.connect(url, reconnect=False) as conn:
            receiver = await conn.open_receiver("work", credit=100)
            for expected in range(count):
                delivery = await receiver.receive()
                assert delivery.message.body == expected, delivery.message.body
                await delivery.accept()
            # A confirmed durable send on the same connection: once it is accepted, the broker has handled (and
            # stored) the accepts before it.
            sender = await conn.open_sender("sync")
            await sender.send(Message(body="synced", durable=True))
            while receiver.credit:  # the broker used the credit: prefetched messages, received and never settled
                await anyio.sleep(0.01)
            print("accepted", count, "holding", receiver.queued, flush=True)
            await anyio.sleep_forever()

    anyio.run(main, sys.argv[1], int(sys.argv[2]))
    """
)


@pytest.mark.anyio
async def test_a_consumer_killed_mid_stream_has_its_unsettled_messages_redelivered_and_none_lost(
    tmp_path: Path,
) -> None:
    total, consumed = 1_000, 300
    with durable_broker(tmp_path) as brokers:
        url = brokers[0].url
        with anyio.fail_after(TIMEOUT):
            async with amqp_async.connect(url, reconnect=False) as conn:
                sender = await conn.open_sender("work")
                for number in range(total):
                    await sender.submit(Message(body=number, durable=True))
                await sender.send(Message(body=total, durable=True))
        environment = dict(os.environ, PYTHONPATH=str(REPO))
        consumer = subprocess.Popen(
            [sys.executable, "-c", CONSUMER, url, str(consumed)], stdout=subprocess.PIPE, text=True, env=environment
        )
        try:
            assert consumer.stdout is not None
            line = await anyio.to_thread.run_sync(consumer.stdout.readline)
            assert line.split()[:3] == ["accepted", str(consumed), "holding"]
            assert int(line.split()[3]) > 0
        finally:
            consumer.kill()
            consumer.wait(TIMEOUT)
            if consumer.stdout is not None:
                consumer.stdout.close()
        with anyio.fail_after(TIMEOUT):
            # The broker saw the consumer's connection drop: its 100 unsettled messages went back, in order.
            assert await drain(url, "work") == list(range(consumed, total + 1))
        await restart(brokers, tmp_path)  # and the accepts were stored: nothing comes back after a kill -9
        with anyio.fail_after(TIMEOUT):
            assert await drain(brokers[-1].url, "work") == []
            assert await drain(brokers[-1].url, "sync") == ["synced"]


@pytest.mark.anyio
async def test_unsettled_messages_of_a_killed_broker_are_delivered_again_after_its_restart(tmp_path: Path) -> None:
    with durable_broker(tmp_path) as brokers:
        with anyio.fail_after(TIMEOUT):
            async with amqp_async.connect(brokers[0].url, reconnect=False) as conn:
                sender = await conn.open_sender("held")
                for number in range(10):
                    await sender.send(Message(body=number, durable=True))
                receiver = await conn.open_receiver("held", credit=10)
                for _ in range(4):
                    await (await receiver.receive()).accept()
                await sender.send(Message(body="marker", durable=True))  # the accepts are stored before it
                while receiver.queued < 6:
                    await anyio.sleep(0.01)
                await restart(brokers, tmp_path)  # the 6 received and unsettled were never settled
            assert await drain(brokers[-1].url, "held") == [4, 5, 6, 7, 8, 9, "marker"]


@pytest.mark.anyio
async def test_queues_and_durable_subscriptions_survive_kill_9_and_non_durable_messages_do_not(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    subscriber = {"container_id": "subscriber"}
    with durable_broker(tmp_path) as brokers:
        url = brokers[0].url
        with anyio.fail_after(TIMEOUT):
            async with amqp_async.connect(url, reconnect=False, **subscriber) as conn:
                receiver = await conn.open_receiver(
                    "topic://news", name="news-sub", durable=True, expiry_policy="never", credit=0
                )
                await receiver.detach()  # closed=false: kept (a close would unsubscribe)
            async with amqp_async.connect(url, reconnect=False) as conn:
                await conn.open_receiver("empty-queue")
                topic = await conn.open_sender("topic://news")
                queue = await conn.open_sender("mixed")
                for number in range(5):
                    await topic.send(Message(body=f"durable {number}", durable=True))
                    await queue.send(Message(body=f"durable {number}", durable=True))
                await topic.send(Message(body="not durable"))
                await queue.send(Message(body="not durable"))
        await restart(brokers, tmp_path)
        url = brokers[-1].url
        with anyio.fail_after(TIMEOUT):
            async with amqp_async.connect(url, reconnect=False, **subscriber) as conn:
                receiver = await conn.open_receiver(
                    "topic://news", name="news-sub", durable=True, expiry_policy="never", credit=10
                )
                bodies = []
                for _ in range(5):
                    delivery = await receiver.receive()
                    bodies.append(delivery.message.body)
                    await delivery.accept()
                assert bodies == [f"durable {number}" for number in range(5)]
                with anyio.move_on_after(0.3):
                    await receiver.receive()
                    pytest.fail("a non-durable message survived the kill")
            assert await drain(url, "mixed") == [f"durable {number}" for number in range(5)]
        brokers[-1].process.kill()
        brokers[-1].process.wait(TIMEOUT)
    with caplog.at_level(logging.INFO, logger="amqp_async.broker"):
        async with stored(tmp_path) as broker:
            assert {"empty-queue", "mixed"} <= set(broker.queues)
            assert not any(name.startswith("temp-queue://") for name in broker.queues)
            assert list(broker.topics["topic://news"].subscriptions) == ["subscriber/news-sub"]
            nodes = len(broker.queues) + 1
    # the start's log counts the subscription too (it counted the queues alone)
    assert any(f": {nodes} queues and durable subscriptions, " in record.getMessage() for record in caplog.records)


@pytest.mark.anyio
async def test_transactional_work_is_stored_at_the_commit_and_a_rollback_leaves_nothing(tmp_path: Path) -> None:
    with durable_broker(tmp_path) as brokers:
        with anyio.fail_after(TIMEOUT):
            async with amqp_async.connect(brokers[0].url, reconnect=False) as conn:
                sender = await conn.open_sender("txn")
                for number in range(3):
                    await sender.send(Message(body=number, durable=True))
                transaction = await conn.transaction()
                await sender.send(Message(body="rolled back", durable=True), transaction=transaction)
                await transaction.rollback()
                receiver = await conn.open_receiver("txn", credit=1)
                async with conn.transaction() as transaction:
                    for number in range(100):
                        await sender.submit(Message(body=f"committed {number}", durable=True), transaction=transaction)
                    await sender.send(Message(body="committed 100", durable=True), transaction=transaction)
                    delivery = await receiver.receive()
                    assert delivery.message.body == 0
                    await delivery.accept(transaction=transaction)
                # the commit's outcome came once the store had it: a kill now loses none of it
                await restart(brokers, tmp_path)
        with anyio.fail_after(TIMEOUT):
            bodies = await drain(brokers[-1].url, "txn")
        # message 1 was prefetched by the receiver (credit 1, topped up) and never settled: it comes back
        assert bodies == [1, 2] + [f"committed {number}" for number in range(101)]


@pytest.mark.anyio
async def test_sigterm_writes_what_is_pending_and_a_restart_without_messages_finds_the_store_empty(
    tmp_path: Path,
) -> None:
    with durable_broker(tmp_path) as brokers:
        with anyio.fail_after(TIMEOUT):
            async with amqp_async.connect(brokers[0].url, reconnect=False) as conn:
                sender = await conn.open_sender("clean")
                for number in range(100):
                    await sender.submit(Message(body=number, durable=True))
                await sender.send(Message(body=100, durable=True))
                receiver = await conn.open_receiver("clean", credit=200)
                for _ in range(101):
                    await (await receiver.receive()).accept()
        assert brokers[0].signal(signal.SIGTERM) == 0
        brokers.append(await anyio.to_thread.run_sync(start_broker, tmp_path, brokers[0].port))
        with anyio.fail_after(TIMEOUT):
            assert await drain(brokers[-1].url, "clean") == []


@pytest.mark.anyio
async def test_pipelined_durable_sends_beyond_the_settlement_limit_never_stall(tmp_path: Path) -> None:
    """Durable messages are settled once the store has committed them, and meanwhile count among the session's
    unsettled ones: past AWAITING_SETTLEMENT_LIMIT (4,096) the producer's credit is held back. Only a producer's own
    settlement (receiver settle mode second) gave it again, so a producer in mode first that pipelined durable
    messages (submit()) stalled for good, every message settled, credit 0 (5,571 of 80,000 in one run)."""
    count = 3 * AWAITING_SETTLEMENT_LIMIT
    async with (
        Broker(port=0, data_dir=str(tmp_path / "store")) as broker,
        amqp_async.connect(broker.url, reconnect=False) as conn,
    ):
        sender = await conn.open_sender("piped")
        with anyio.fail_after(TIMEOUT):  # before: waited for credit for ever
            trackers = [await sender.submit(Message(body=n, durable=True)) for n in range(count)]
            outcomes = [await tracker for tracker in trackers]
        assert outcomes == [Accepted()] * count
        assert len(broker.queue("piped")) == count
