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
