"""A micro-batch of an executor-side streaming read holds at most ``maxMessagesPerBatch`` messages, however many
partitions share it: planned by the driver's reader as Spark plans it, each partition run as its task would be
(``read_partition``) against the embedded broker, without a JVM."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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


# --- a replay is planned as the batch was first planned --------------------------------------------------------


def _reader(url: str, log: Path, partitions: int, limit: int) -> AmqpStreamReader:
    """A new driver's reader (as after a restart: nothing planned in this process yet), for AvailableNow."""
    options = {
        "url": url,
        "address": "q",
        "logLocation": str(log),
        "maxMessagesPerBatch": str(limit),
        "numPartitions": str(partitions),
    }
    reader = AmqpStreamReader(parse_options(options), MESSAGE_SCHEMA)
    reader.prepareForTriggerAvailableNow()
    return reader


def _run(reader: AmqpStreamReader, partition: Any) -> list[str]:
    """The message ids of ``partition``'s rows, its task run as Spark would."""
    assert isinstance(partition, StreamPartition)
    rows = [row for batch in reader.read(partition) for row in batch.to_pylist()]
    return [str(row["message_id"]) for row in rows]


def _planned(partitions: list[Any]) -> list[tuple[int, int]]:
    return [(partition.index, partition.budget) for partition in partitions]


@pytest.mark.parametrize(("before", "after"), [(1, 2), (1, 10), (2, 1)])
def test_a_replay_after_a_restart_with_another_partition_count_gives_the_same_rows(
    broker: BrokerThread, tmp_path: Path, before: int, after: int
) -> None:
    """Batch 0 is planned and run with ``before`` partitions, not committed (the sink failed, or the driver died),
    and replayed by a restarted query whose numPartitions is ``after``: the replay is the first run's plan, its
    rows the same, and nothing more is taken from the queue. Before, the replay took numPartitions from the options
    now: with more partitions the new ones received (and accepted) fresh messages into a batch that a sink
    idempotent per batch id discards as written already (lost at the broker); the next new batch has the new
    count."""
    fill(broker.url, "q", [amqp_async.Message(body="m", id=f"m{n:02}") for n in range(30)])
    first = _reader(broker.url, tmp_path, before, 10)
    start = first.initialOffset()
    end = first.latestOffset(start, ReadMaxRows(10))
    planned = first.partitions(start, end)
    rows = sorted(row for partition in planned for row in _run(first, partition))
    assert rows == [f"m{n:02}" for n in range(10)]

    restarted = _reader(broker.url, tmp_path, after, 10)
    replayed = restarted.partitions(start, end)
    assert _planned(replayed) == _planned(planned)
    assert sorted(row for partition in replayed for row in _run(restarted, partition)) == rows
    restarted.commit(end)
    following = restarted.latestOffset(end, ReadMaxRows(10))
    assert len(restarted.partitions(end, following)) == after  # the options take effect from the next batch
    assert len(drain(broker.url, "q", accept=False)) == 20  # before, with more partitions: 15 (5 lost)


def test_a_replay_with_fewer_partitions_keeps_a_partition_that_had_not_logged_yet(
    broker: BrokerThread, tmp_path: Path
) -> None:
    """Batch 0 planned with 2 partitions; partition 1's task (of the first run, a zombie by now) has not written
    to the log yet when the query, restarted with numPartitions 1, replays the batch. Before, the replay planned
    the partitions the options and the log named, so partition 1 was left out: its zombie then chose and accepted
    its messages, which no run of the batch returned."""
    fill(broker.url, "q", [amqp_async.Message(body="m", id=f"m{n:02}") for n in range(30)])
    first = _reader(broker.url, tmp_path, 2, 10)
    start = first.initialOffset()
    end = first.latestOffset(start, ReadMaxRows(10))
    planned = first.partitions(start, end)
    assert _planned(planned) == [(0, 5), (1, 5)]
    assert len(_run(first, planned[0])) == 5  # partition 1's task is late

    replayed = _reader(broker.url, tmp_path, 1, 10).partitions(start, end)
    assert _planned(replayed) == [(0, 5), (1, 5)]  # before: [(0, 10)]


def test_an_offset_of_an_older_version_is_replayed_from_the_options_and_the_log(
    broker: BrokerThread, tmp_path: Path
) -> None:
    """A checkpoint written before offsets recorded their plan (``{"source": ID, "batch": N}``) still replays:
    the options' partitions, and every partition the log has for the batch."""
    fill(broker.url, "q", [amqp_async.Message(body="m", id=f"m{n:02}") for n in range(30)])
    first = _reader(broker.url, tmp_path, 3, 9)
    start = first.initialOffset()
    end = first.latestOffset(start, ReadMaxRows(9))
    assert end == {"source": start["source"], "batch": 1, "plan": {"numPartitions": 3, "maxMessagesPerBatch": 9}}
    assert len(_run(first, first.partitions(start, end)[2])) == 3
    older = {"source": end["source"], "batch": 1}
    assert _planned(_reader(broker.url, tmp_path, 1, 9).partitions(start, older)) == [(0, 9), (2, 9)]
    with pytest.raises(ValueError, match=r"not an offset of the amqp source .*\(its plan\)"):
        _reader(broker.url, tmp_path, 1, 9).partitions(start, {**end, "plan": {"numPartitions": 0}})
