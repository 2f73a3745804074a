"""The executor side of a streaming read without a JVM: a task's receive, log, choice and settlement, run as
Spark would run it (``read_partition``) against the embedded broker and RabbitMQ 3.10.

Spark is not needed to race two attempts of one partition: threads run them, and the fault points
(``amqp_async.spark._failpoints``) stall one at an exact step.
"""

from __future__ import annotations

import collections
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from spark_support import drain, fill

import amqp_async
from amqp_async.broker import BrokerThread
from amqp_async.errors import TransactionError
from amqp_async.spark import MESSAGE_SCHEMA
from amqp_async.spark._failpoints import ENVIRONMENT
from amqp_async.spark._links import check_transactions, close_quietly, open_receiver, receive_batch, settle_all
from amqp_async.spark._log import WriteAheadLog
from amqp_async.spark._options import OptionError, parse_options
from amqp_async.spark._stream_task import StreamPartition, read_partition


@pytest.fixture
def broker() -> Iterator[BrokerThread]:
    with BrokerThread() as running_broker:
        yield running_broker


@pytest.fixture
def faults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "faults"
    directory.mkdir()
    monkeypatch.setenv(ENVIRONMENT, str(directory))
    return directory


def _partition(location: Path, budget: int, *, batch: int = 0, index: int = 0, wait: float = 0.0) -> StreamPartition:
    return StreamPartition("source1", batch, index, budget, str(location), wait, None)


def _ids(url: str, address: str, partition: StreamPartition) -> list[str]:
    options = parse_options({"url": url, "address": address})
    rows = []
    for batch in read_partition(options, MESSAGE_SCHEMA, partition):
        rows += batch.column("message_id").to_pylist()
    return rows


def _receive(url: str, address: str, budget: int, window: int, first_wait: float) -> tuple[list[str], bool]:
    async def run() -> tuple[list[str], bool]:
        options = parse_options({"url": url, "address": address})
        connection, receiver = await open_receiver(options)
        try:
            deliveries, drained = await receive_batch(receiver, budget, window, first_wait, 0.2)
            assert receiver.credit == 0  # nothing more may come
            await settle_all(receiver, deliveries, True)
            ids = []
            for delivery in deliveries:
                message = amqp_async.Message()
                message.decode(delivery.payload)
                ids.append(str(message.id))
            return ids, drained
        finally:
            await close_quietly(connection)

    return anyio.run(run)


# --- receiving one partition's share -------------------------------------------------------------------------------


def test_a_task_takes_its_budget_and_no_more_then_what_is_left(broker: BrokerThread) -> None:
    fill(broker.url, "q", [amqp_async.Message(body="x", id=f"m{n}") for n in range(2500)])
    first, drained = _receive(broker.url, "q", 1000, 300, 0.0)
    assert first == [f"m{n}" for n in range(1000)] and not drained
    second, drained = _receive(broker.url, "q", 5000, 300, 0.0)
    assert second == [f"m{n}" for n in range(1000, 2500)] and drained  # the drain found the queue empty
    assert _receive(broker.url, "q", 5000, 300, 0.0) == ([], True)


def test_competing_tasks_share_a_queue_to_its_end_without_stalling(broker: BrokerThread) -> None:
    """Two receivers on one queue, as two partitions of a batch: together they take every message, promptly (a
    drain that hands one receiver's credit back must not leave it without credit while messages remain)."""
    fill(broker.url, "shared", [amqp_async.Message(body="x", id=f"m{n}") for n in range(30_000)])
    results: list[tuple[list[str], bool]] = []
    started = time.monotonic()
    threads = [
        threading.Thread(target=lambda: results.append(_receive(broker.url, "shared", 20_000, 2000, 0.0)))
        for _ in range(2)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert time.monotonic() - started < 20  # well under the 30 s a silent sender would cost
    taken = [message_id for ids, _ in results for message_id in ids]
    assert sorted(taken) == sorted(f"m{n}" for n in range(30_000))
    for ids, drained in results:
        assert drained is (len(ids) < 20_000)


def _connections_after(broker: BrokerThread, timeout: float = 5.0) -> int:
    """The broker's open connections once none is left, or after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while broker.broker.connections and time.monotonic() < deadline:
        time.sleep(0.01)
    return len(broker.broker.connections)


def test_a_task_closes_its_connection_while_its_rows_are_taken(broker: BrokerThread, tmp_path: Path) -> None:
    """The connection closes while Spark takes the rows (step 6): gone once they are taken, and gone too when Spark
    stops taking them early (the generator closed); each task accepted its share."""
    fill(broker.url, "rows", [amqp_async.Message(body="x", id=f"m{n}") for n in range(12_000)])
    options = parse_options({"url": broker.url, "address": "rows"})
    rows = read_partition(options, MESSAGE_SCHEMA, _partition(tmp_path / "log", 6_000))
    first = next(rows)
    assert first.column("message_id").to_pylist()[:2] == ["m0", "m1"]
    taken = first.num_rows + sum(batch.num_rows for batch in rows)
    assert taken == 6_000
    assert _connections_after(broker) == 0
    early = read_partition(options, MESSAGE_SCHEMA, _partition(tmp_path / "log", 6_000, batch=1))
    assert next(early).column("message_id").to_pylist()[0] == "m6000"
    early.close()
    assert _connections_after(broker) == 0
    assert _receive(broker.url, "rows", 100, 100, 0.0) == ([], True)  # each task accepted its share


def test_an_idle_task_waits_for_a_first_message_then_takes_what_came(broker: BrokerThread) -> None:
    def later() -> None:
        time.sleep(0.5)
        fill(broker.url, "idle", [amqp_async.Message(body="x", id=f"m{n}") for n in range(3)])

    sender = threading.Thread(target=later)
    sender.start()
    ids, drained = _receive(broker.url, "idle", 100, 100, 10.0)
    sender.join()
    assert 1 <= len(ids) <= 3 and drained
    assert _receive(broker.url, "idle", 100, 100, 0.3)[0] == ["m0", "m1", "m2"][len(ids) :]


@pytest.mark.interop
def test_a_task_reads_rabbitmq_without_drains(rabbitmq_broker: Any) -> None:
    url = rabbitmq_broker.url
    fill(url, "/queue/task-budget", [amqp_async.Message(body="x", id=f"m{n}") for n in range(1500)])
    first, drained = _receive(url, "/queue/task-budget", 1000, 300, 0.0)
    assert len(first) == 1000 and not drained
    second, drained = _receive(url, "/queue/task-budget", 1000, 300, 0.0)
    assert len(second) == 500 and drained  # 0.2 s without a transfer: RabbitMQ 3 cannot answer a drain
    assert sorted(first + second, key=lambda i: int(i[1:])) == [f"m{n}" for n in range(1500)]
    assert rabbitmq_broker.wait_queue_depth("task-budget", 0) == 0


# --- one partition, several attempts --------------------------------------------------------------------------------


def test_a_rerun_partition_returns_the_logged_messages_without_connecting(broker: BrokerThread, tmp_path: Path) -> None:
    fill(broker.url, "q", [amqp_async.Message(body="x", id=f"m{n}") for n in range(300)])
    partition = _partition(tmp_path, 200)
    first = _ids(broker.url, "q", partition)
    assert first == [f"m{n}" for n in range(200)]
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        nowhere = f"amqp://127.0.0.1:{unused.getsockname()[1]}"  # nothing listens: a connection would fail
    assert _ids(nowhere, "q", partition) == first
    assert [m.id for m in drain(broker.url, "q")] == [f"m{n}" for n in range(200, 300)]  # the 200 were accepted


def test_of_two_racing_attempts_one_accepts_and_the_other_releases(
    broker: BrokerThread, tmp_path: Path, faults: Path
) -> None:
    fill(broker.url, "q", [amqp_async.Message(body="x", id=f"m{n}") for n in range(100)])
    partition = _partition(tmp_path, 50)
    (faults / "received@0").write_text("sleep 1.5")  # the first attempt to get here stalls; the other overtakes
    results: dict[str, list[str]] = {}

    def attempt(name: str) -> None:
        results[name] = _ids(broker.url, "q", partition)

    threads = [threading.Thread(target=attempt, args=(name,)) for name in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert results["a"] == results["b"] and len(results["a"]) == 50  # one batch, whoever computed it
    left = [m.id for m in drain(broker.url, "q")]
    assert sorted(left + results["a"], key=lambda i: int(i[1:])) == [f"m{n}" for n in range(100)]  # 0 lost
    assert len(left) == 50  # the loser's messages, released: back in the queue, not accepted
    chosen = WriteAheadLog(str(tmp_path), "source1").slot(0, 0).chosen()
    assert chosen is not None and chosen.count == 50


def test_an_attempt_of_a_committed_batch_releases_what_it_received(broker: BrokerThread, tmp_path: Path) -> None:
    fill(broker.url, "q", [amqp_async.Message(body="x", id=f"m{n}") for n in range(30)])
    log = WriteAheadLog(str(tmp_path), "source1")
    log.commit(1)  # batch 0 was committed and its log deleted while a zombie attempt of it still ran
    with pytest.raises(RuntimeError, match="was committed while this attempt"):
        _ids(broker.url, "q", _partition(tmp_path, 20))
    assert len(drain(broker.url, "q")) == 30  # released, all of them


def test_a_task_on_another_host_than_the_default_log_is_refused(tmp_path: Path) -> None:
    partition = StreamPartition("source1", 0, 0, 10, str(tmp_path), 0.0, "some-other-host")
    with pytest.raises(OptionError, match="set the option 'logLocation'"):
        list(read_partition(parse_options({"address": "q"}), MESSAGE_SCHEMA, partition))


def test_a_task_killed_after_choosing_leaves_its_entry_for_the_rerun(broker: BrokerThread, tmp_path: Path) -> None:
    """The choice made, the deliveries never settled (the task dies): the rerun gives the same rows, and the
    broker delivers those messages again (the documented duplicates)."""
    fill(broker.url, "q", [amqp_async.Message(body="x", id=f"m{n}") for n in range(40)])
    partition = _partition(tmp_path, 25)
    options = parse_options({"url": broker.url, "address": "q"})
    log = WriteAheadLog(str(tmp_path), "source1")
    slot = log.slot(0, 0)

    async def die_after_choosing() -> None:
        connection, receiver = await open_receiver(options)
        deliveries, drained = await receive_batch(receiver, 25, 100, 0.0, 0.2)
        entry = slot.write_entry("0-dead", [delivery.payload for delivery in deliveries], drained)
        assert slot.choose("0-dead", entry) == entry
        await close_quietly(connection)  # nothing settled: as a process that died here

    anyio.run(die_after_choosing)
    rerun = _ids(broker.url, "q", partition)
    assert rerun == [f"m{n}" for n in range(25)]
    again = collections.Counter(m.id for m in drain(broker.url, "q"))
    assert again == collections.Counter(f"m{n}" for n in range(40))  # the 25 come again: duplicates, by id


# --- transactions ----------------------------------------------------------------------------------------------------


def test_the_transaction_check_passes_with_a_coordinator(broker: BrokerThread) -> None:
    anyio.run(check_transactions, parse_options({"url": broker.url, "address": "q", "transactional": "true"}))


@pytest.mark.interop
def test_the_transaction_check_refuses_rabbitmq_3_saying_why(rabbitmq_broker: Any) -> None:
    options = parse_options({"url": rabbitmq_broker.url, "address": "/queue/t", "transactional": "true"})
    with pytest.raises(TransactionError, match=r"option 'transactional'.*RabbitMQ 3\.x.*no transaction coordinator"):
        anyio.run(check_transactions, options)
