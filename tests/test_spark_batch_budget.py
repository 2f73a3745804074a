"""A micro-batch of an executor-side streaming read holds at most ``maxMessagesPerBatch`` messages, however many
partitions share it: planned by the driver's reader as Spark plans it, each partition run as its task would be
(``read_partition``) against the embedded broker, without a JVM."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql.streaming.datasource import ReadMaxRows
from spark_support import drain, fill

import amqp_async
from amqp_async.broker import BrokerThread
from amqp_async.spark import MESSAGE_SCHEMA, AmqpStreamReader, _stream_task
from amqp_async.spark._log import WriteAheadLog
from amqp_async.spark._options import parse_options
from amqp_async.spark._stream_task import StreamPartition, read_partition

pytestmark = [pytest.mark.spark]


@pytest.fixture
def broker() -> Iterator[BrokerThread]:
    with BrokerThread() as running_broker:
        yield running_broker


def _batch_sizes(url: str, log: Path, limit: int, partitions: int, batches: int) -> list[int]:
    """Plan ``batches`` micro-batches and run their tasks: how many rows each batch gave."""
    options = parse_options(
        {
            "url": url,
            "address": "q",
            "logLocation": str(log),
            "maxMessagesPerBatch": str(limit),
            "numPartitions": str(partitions),
        }
    )
    reader = AmqpStreamReader(options, MESSAGE_SCHEMA)
    reader.prepareForTriggerAvailableNow()
    start = reader.initialOffset()
    sizes = []
    for _ in range(batches):
        end = reader.latestOffset(start, ReadMaxRows(limit))
        rows = 0
        for partition in reader.partitions(start, end):
            assert isinstance(partition, StreamPartition)
            rows += sum(batch.num_rows for batch in read_partition(options, MESSAGE_SCHEMA, partition))
        sizes.append(rows)
        reader.commit(end)
        start = end
    return sizes


@pytest.mark.parametrize(("limit", "partitions"), [(4, 3), (10, 4), (2, 5)])
def test_a_micro_batch_never_holds_more_than_max_messages_per_batch(
    broker: BrokerThread, tmp_path: Path, limit: int, partitions: int
) -> None:
    total = 25
    fill(broker.url, "q", [amqp_async.Message(body=f"m{n}", id=f"m{n}") for n in range(total)])
    batches = -(-total // limit)
    sizes = _batch_sizes(broker.url, tmp_path / "log", limit, partitions, batches)
    # Before, each partition had ceil(limit / partitions): 3 x 2 = 6 of a limit of 4, 4 x 3 = 12 of 10, 5 x 1 = 5
    # of 2.
    assert sizes == [min(limit, total - limit * n) for n in range(batches)], sizes
    assert drain(broker.url, "q") == []


def test_partitions_beyond_the_limit_are_not_planned(tmp_path: Path) -> None:
    options = parse_options(
        {"address": "q", "logLocation": str(tmp_path), "maxMessagesPerBatch": "3", "numPartitions": "8"}
    )
    reader = AmqpStreamReader(options, MESSAGE_SCHEMA)
    start = reader.initialOffset()
    planned = reader.partitions(start, reader.latestOffset(start, ReadMaxRows(3)))
    assert [(p.index, p.budget) for p in planned] == [(0, 1), (1, 1), (2, 1)]  # type: ignore[attr-defined]


def test_a_task_takes_no_more_bytes_than_its_bound_and_leaves_the_rest(
    broker: BrokerThread, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The bound scaled down (128 MiB in production) so that the test moves 3 MB, not gigabytes.
    monkeypatch.setattr(_stream_task, "PARTITION_BYTES", 1_000_000, raising=False)
    body = b"x" * 100_000
    fill(broker.url, "q", [amqp_async.Message(body=body, id=f"m{n}") for n in range(30)])
    options = parse_options({"url": broker.url, "address": "q", "logLocation": str(tmp_path)})
    partition = StreamPartition("source1", 0, 0, 10_000, str(tmp_path), 0.0, None)
    rows = sum(batch.num_rows for batch in read_partition(options, MESSAGE_SCHEMA, partition))
    # Before: all 30 (3 MB) into the one task, as a backlog of 10,000 messages of 1 MB each (10 GB) would be.
    assert 10 <= rows <= 11, rows
    outcome = WriteAheadLog(str(tmp_path), "source1").outcomes(0)[0]
    assert outcome is not None and not outcome.drained  # the next batch (AvailableNow too) takes the rest
    # Nothing lost: the deliveries that came beyond the bound were released (tests/test_spark_byte_window.py), and
    # are back in the queue (a moment after the first drain may look).
    left = drain(broker.url, "q")
    deadline = time.monotonic() + 10
    while len(left) < 30 - rows and time.monotonic() < deadline:
        time.sleep(0.1)
        left += drain(broker.url, "q")
    assert sorted(str(message.id) for message in left) == sorted(f"m{n}" for n in range(rows, 30)), left
    assert {message.delivery_count for message in left} == {0}
