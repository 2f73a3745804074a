"""At-most-once consumers of a broker with a data directory: a pre-settled delivery of a durable message is never
delivered twice, not even after a ``kill -9`` of the broker right after it.

The store writes by group commit and removals are not waited for: before, a pre-settled transfer was written at
once, its removal committed a few milliseconds later, and a broker killed in between delivered the message again
after its restart. Now the transfer waits for that commit (:func:`amqp_async.broker._consumers._send_after_commit`);
what its link can no longer take when the commit is done goes back to the queue, and a drain is answered after it.

The in-process tests hold the store's writer (its ``_write`` waits for an event: a slow disk) so as to see what the
broker writes while a commit is under way; the last test kills a broker process.
"""

from __future__ import annotations

import sqlite3
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from broker_serving import serving

import amqp_async
from amqp_async import Message
from amqp_async.broker import Broker
from amqp_async.broker._store import Store

try:
    from test_broker_durable import restart, start_broker
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.test_broker_durable import restart, start_broker

TIMEOUT = 30.0
#: How long a delivery that must not come yet is waited for (the store's commit is held meanwhile).
QUIET = 1.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def held_commits(monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Event]:
    """The store's commits wait (in their worker thread) until the event is set; set at the end in any case."""
    gate = threading.Event()
    write = Store._write

    def slow_write(self: Store, batch: Any) -> None:
        gate.wait(TIMEOUT)
        write(self, batch)

    monkeypatch.setattr(Store, "_write", slow_write)
    try:
        yield gate
    finally:
        gate.set()


def stored_rows(data_dir: Path) -> int:
    """The messages the store has committed (read by a connection of its own, as after a crash)."""
    with sqlite3.connect(data_dir / "broker.sqlite3") as db:
        count: int = db.execute("SELECT COUNT(*) FROM messages").fetchone()[0]
    return count


async def wait_dealt(broker: Broker, address: str) -> None:
    """Wait until the queue has dealt every message it held (none waits in it)."""
    while broker.queues[address].entries:
        await anyio.sleep(0.01)


async def fill(url: str, address: str, count: int) -> None:
    async with amqp_async.connect(url, reconnect=False) as conn:
        sender = await conn.open_sender(address)
        await sender.send_many([Message(body=number, durable=True) for number in range(count)])


@pytest.mark.anyio
async def test_a_pre_settled_transfer_of_a_durable_message_waits_for_the_commit_of_its_removal(
    tmp_path: Path, held_commits: threading.Event
) -> None:
    data_dir = tmp_path / "data"
    held_commits.set()  # the messages are stored first
    async with serving(data_dir=data_dir) as broker:
        with anyio.fail_after(TIMEOUT):
            await fill(broker.url, "amo", 5)
            assert stored_rows(data_dir) == 5
            held_commits.clear()
            async with amqp_async.connect(broker.url, reconnect=False) as conn:
                receiver = await conn.open_receiver("amo", delivery="at-most-once", credit=10)
                try:
                    await wait_dealt(broker, "amo")
                    with anyio.move_on_after(QUIET):
                        early = await receiver.receive()
                        pytest.fail(f"message {early.message.body!r} delivered before its removal was committed")
                    assert stored_rows(data_dir) == 5  # a crash now: all five are delivered after the restart, once
                finally:
                    held_commits.set()
                bodies = [(await receiver.receive()).message.body for _ in range(5)]
                assert bodies == [0, 1, 2, 3, 4]
                assert stored_rows(data_dir) == 0


@pytest.mark.anyio
async def test_pre_settled_messages_dealt_to_a_link_that_detaches_before_the_commit_go_back_to_the_queue(
    tmp_path: Path, held_commits: threading.Event
) -> None:
    data_dir = tmp_path / "data"
    held_commits.set()
    async with serving(data_dir=data_dir) as broker:
        with anyio.fail_after(TIMEOUT):
            await fill(broker.url, "amo", 5)
            held_commits.clear()
            async with amqp_async.connect(broker.url, reconnect=False) as conn:
                receiver = await conn.open_receiver("amo", delivery="at-most-once", credit=10)
                try:
                    await wait_dealt(broker, "amo")
                    await receiver.close()  # before the commit: none of them was written to it
                finally:
                    held_commits.set()
                while len(broker.queues["amo"].entries) < 5:
                    await anyio.sleep(0.01)
                again = await conn.open_receiver("amo", credit=10)
                deliveries = [await again.receive() for _ in range(5)]
                assert [delivery.message.body for delivery in deliveries] == [0, 1, 2, 3, 4]
                for delivery in deliveries:
                    await delivery.accept()
            # stored again while back in the queue, and removed with their accepts
            async with amqp_async.connect(broker.url, reconnect=False) as conn:
                sender = await conn.open_sender("sync")
                await sender.send(Message(body="sync", durable=True))  # accepted once what came before is committed
            assert stored_rows(data_dir) == 1


@pytest.mark.anyio
async def test_a_drain_is_answered_after_the_pre_settled_transfers_waiting_for_the_commit(
    tmp_path: Path, held_commits: threading.Event
) -> None:
    held_commits.set()
    async with serving(data_dir=tmp_path / "data") as broker:
        with anyio.fail_after(TIMEOUT):
            await fill(broker.url, "amo", 5)
            held_commits.clear()
            async with amqp_async.connect(broker.url, reconnect=False) as conn:
                receiver = await conn.open_receiver("amo", delivery="at-most-once", credit=5)
                await wait_dealt(broker, "amo")
                async with anyio.create_task_group() as group:
                    group.start_soon(receiver.drain)
                    await anyio.sleep(QUIET / 4)  # the drain's flow reaches the broker while the commit is held
                    held_commits.set()
                bodies = []
                while (delivery := receiver.receive_nowait()) is not None:
                    bodies.append(delivery.message.body)
                assert bodies == [0, 1, 2, 3, 4]  # drained: the five dealt came first, none lost


@pytest.mark.anyio
@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
async def test_a_broker_killed_right_after_pre_settled_deliveries_never_delivers_them_again(tmp_path: Path) -> None:
    brokers = [start_broker(tmp_path)]
    try:
        for round_ in range(3):
            address = f"amo{round_}"
            with anyio.fail_after(TIMEOUT):
                await fill(brokers[-1].url, address, 300)
                async with amqp_async.connect(brokers[-1].url, reconnect=False) as conn:
                    receiver = await conn.open_receiver(address, delivery="at-most-once", credit=300)
                    first = await receiver.receive()
                    brokers[-1].process.kill()  # the moment the first transfers came
                    received = {first.message.body}
                    while (delivery := receiver.receive_nowait()) is not None:
                        received.add(delivery.message.body)
            await restart(brokers, tmp_path)
            with anyio.fail_after(TIMEOUT):
                async with amqp_async.connect(brokers[-1].url, reconnect=False) as conn:
                    receiver = await conn.open_receiver(address, credit=300)
                    again = set()
                    while batch := await receiver.receive_many(300, timeout=QUIET):
                        for delivery in batch:
                            again.add(delivery.message.body)
                            await delivery.accept()
            assert not received & again, f"delivered twice: {sorted(received & again)}"
    finally:
        for broker in brokers:
            broker.stop()


@pytest.mark.anyio
async def test_a_clean_stop_before_the_commit_keeps_the_messages_whose_pre_settled_transfers_waited_for_it(
    tmp_path: Path, held_commits: threading.Event
) -> None:
    """The broker stops while the commit the transfers wait for is queued behind one under way: that commit is
    written by the store's last flush, its callbacks dropped. Before, it removed the five messages, which no transfer
    had carried: a clean stop lost them. Now they go back to their queue and stay stored."""
    data_dir = tmp_path / "data"
    held_commits.set()
    async with serving(data_dir=data_dir) as broker:
        with anyio.fail_after(TIMEOUT):
            await fill(broker.url, "amo", 5)
            held_commits.clear()
            store = broker.storage
            assert store is not None
            conn = await amqp_async.connect(broker.url, reconnect=False)
            sender = await conn.open_sender("other", delivery="at-most-once")
            await sender.send(Message(body="in flight", durable=True))
            while store._in_flight is None:  # its commit is under way (held): the next one waits behind it
                await anyio.sleep(0.01)
            receiver = await conn.open_receiver("amo", delivery="at-most-once", credit=10)
            await wait_dealt(broker, "amo")
        # the stop is asked for at once as the block ends: the commit under way completes after it
        threading.Timer(QUIET, held_commits.set).start()
    received = []
    while (delivery := receiver.receive_nowait()) is not None:
        received.append(delivery.message.body)
    await conn.close()  # its broker is gone: closed here, nothing said
    assert received == []
    assert stored_rows(data_dir) == 6  # before: 1 (the five removed)
    async with serving(data_dir=data_dir) as broker:
        with anyio.fail_after(TIMEOUT):
            async with amqp_async.connect(broker.url, reconnect=False) as again:
                taken = await again.open_receiver("amo", delivery="at-most-once", credit=10)
                assert [(await taken.receive()).message.body for _ in range(5)] == [0, 1, 2, 3, 4]


@pytest.mark.anyio
async def test_messages_whose_pre_settled_transfers_wait_for_the_commit_count_in_the_memory_limit(
    tmp_path: Path, held_commits: threading.Event
) -> None:
    """A slow disk, a pre-settled consumer with a large credit: the messages dealt to it wait for the commit. Before,
    they were uncounted as they were dealt: a producer went on sending (4.4 MB waited under a 1 MiB limit after five
    seconds, ``flow.held_bytes`` 0). Now they count until written, and the producer waits for credit."""
    limit, size = 1 << 20, 1000
    submitted = []
    async with serving(data_dir=tmp_path / "data", max_memory=limit) as broker:
        with anyio.fail_after(TIMEOUT):
            async with (
                amqp_async.connect(broker.url, reconnect=False) as consuming,
                amqp_async.connect(broker.url, reconnect=False) as producing,
            ):
                receiver = await consuming.open_receiver("amo", delivery="at-most-once", credit=100_000)
                sender = await producing.open_sender("amo")

                async def produce() -> None:
                    while True:
                        submitted.append(await sender.submit(Message(body=b"x" * size, durable=True)))

                try:
                    async with anyio.create_task_group() as group:
                        group.start_soon(produce)
                        # until the producer waits for credit (or, before, went past twice the limit)
                        sent = -1
                        while sent != len(submitted) and len(submitted) * size <= 2 * limit:
                            sent = len(submitted)
                            await anyio.sleep(QUIET)
                        assert len(submitted) * size <= limit
                        assert broker.flow.held_bytes <= limit
                        group.cancel_scope.cancel()
                finally:
                    held_commits.set()
                for _ in submitted:
                    await receiver.receive()
                while broker.flow.held_bytes:  # every one written: none counted any more
                    await anyio.sleep(0.01)


@pytest.mark.anyio
async def test_a_message_that_expires_while_its_pre_settled_transfer_waits_for_the_commit_is_not_delivered(
    tmp_path: Path, held_commits: threading.Event
) -> None:
    """§3.2.1: a message that lives past its expiry is discarded or dead-lettered. Before, one whose ttl ran out while
    its transfer waited for a slow commit was written all the same, with a ttl of 1 ms."""
    held_commits.set()
    async with serving(data_dir=tmp_path / "data", dead_letter_queue="dlq") as broker:
        with anyio.fail_after(TIMEOUT):
            async with amqp_async.connect(broker.url, reconnect=False) as conn:
                sender = await conn.open_sender("amo")
                await sender.send(Message(body="short-lived", durable=True, ttl=QUIET / 2))
                await sender.send(Message(body="kept", durable=True))
                held_commits.clear()
                receiver = await conn.open_receiver("amo", delivery="at-most-once", credit=10)
                try:
                    await wait_dealt(broker, "amo")
                    await anyio.sleep(QUIET)  # its ttl runs out while the commit is held
                finally:
                    held_commits.set()
                assert (await receiver.receive()).message.body == "kept"
                dead = await conn.open_receiver("dlq", credit=1)
                assert (await dead.receive()).message.body == "short-lived"
                assert receiver.receive_nowait() is None
