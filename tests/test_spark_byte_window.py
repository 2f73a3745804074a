"""The Spark source's readers take and hold at most ``windowBytes`` of messages (the byte counterpart of
``credit``), and give back explicitly what they received beyond it.

Before, each reader granted its window of credit (1,000 messages by default) before it had seen a message, so a
backlog of large messages arrived whole whatever the bound: a streaming task bounded to 1 MB received all 30
messages of 100 kB it was granted credit for, kept 10 and left the other 20 unsettled until its link closed (a
broker may count that as a failed delivery: RabbitMQ's quorum queues do, towards their delivery limit); a batch read
and the driver's receiver had no byte bound at all (a window of 1,000 messages of 1 MB is a gigabyte). Now credit
is one message until one shows the size, then what the bytes left hold at the average size seen; what came beyond
the bound is released (§3.4.4: delivery-count unchanged).

Peers: python-qpid-proton (its reactor as the broker, recording every flow and outcome) and the embedded broker.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from proton_broker import ProtonBroker
from pyspark.sql.streaming.datasource import ReadAllAvailable
from spark_support import drain, fill

import amqp_async
from amqp_async.broker import BrokerThread
from amqp_async.spark import MESSAGE_SCHEMA, AmqpDriverStreamReader
from amqp_async.spark._batch_reader import AmqpBatchReader
from amqp_async.spark._options import parse_options
from amqp_async.spark._stream_task import StreamPartition, read_partition

proton = pytest.importorskip("proton", reason="python-qpid-proton is the independent peer")
from proton import Message as ProtonMessage  # noqa: E402 - after the importorskip that explains its absence

pytestmark = [pytest.mark.spark]

SIZE = 100_000
BOUND = 1_000_000
TIMEOUT = 20


@pytest.fixture
def broker() -> Iterator[BrokerThread]:
    with BrokerThread() as running_broker:
        yield running_broker


def test_a_streaming_task_asks_for_what_its_bound_holds_and_releases_what_came_beyond(tmp_path: Path) -> None:
    with ProtonBroker() as peer:
        for n in range(30):
            peer.put("q", ProtonMessage(body=b"x" * SIZE, id=f"m{n}"))
        options = parse_options(
            {"url": peer.url, "address": "q", "logLocation": str(tmp_path), "windowBytes": str(BOUND)}
        )
        partition = StreamPartition("source1", 0, 0, 10_000, str(tmp_path), 0.0, None)
        rows = sum(batch.num_rows for batch in read_partition(options, MESSAGE_SCHEMA, partition))
        assert 10 <= rows <= 11, rows
        peer.wait_closes(1, timeout=TIMEOUT)
        outcomes = peer.outcomes
        accepted = [outcome for outcome in outcomes if outcome.outcome == "accepted"]
        released = [outcome for outcome in outcomes if outcome.outcome == "released"]
        assert len(accepted) == rows and {outcome.settled for outcome in outcomes} == {True}
        # Before: the first flow granted 1,000 credits, all 30 messages came, and the 19 or 20 beyond the bound were
        # left unsettled (no outcome) until the link closed.
        assert peer.flows[0].credit == 1
        delivered = len(accepted) + len(released)
        assert delivered <= rows + 3, (rows, len(released))
        assert len(outcomes) == delivered  # every delivery the task got has an outcome: none left to the detach
        left = [message.id for message in peer.queued("q")]
        assert sorted(left) == sorted(f"m{n}" for n in range(rows, 30))
        assert {message.delivery_count for message in peer.queued("q")} == {0}


def test_a_batch_read_asks_for_windows_its_bound_holds(broker: BrokerThread) -> None:
    fill(broker.url, "q", [amqp_async.Message(body=b"x" * SIZE, id=f"m{n}") for n in range(25)])
    options = parse_options({"url": broker.url, "address": "q", "readMode": "consume", "windowBytes": "350000"})
    reader = AmqpBatchReader(options, MESSAGE_SCHEMA)
    [partition] = reader.partitions()
    sizes = [batch.num_rows for batch in reader.read(partition)]
    # one message to see the size, then windows of 350 kB: 3 messages (before: one window of all 25, 2.5 MB)
    assert sizes[0] == 1 and max(sizes) == 3 and sum(sizes) == 25, sizes
    assert drain(broker.url, "q") == []


@pytest.mark.parametrize("credit", [1, 2, 7])
def test_a_batch_read_waits_for_a_message_in_several_frames_that_used_the_last_credit(
    broker: BrokerThread, credit: int
) -> None:
    """A window's last message, larger than a frame, has used its credit at its first frame: the read waits for
    the rest of it. It took credit 0 for the drain's end and the message not there for the queue's end, and
    stopped after the first window (2 of 25 read with credit 2)."""
    fill(broker.url, "q", [amqp_async.Message(body=b"x" * SIZE, id=f"m{n}") for n in range(25)])
    options = parse_options({"url": broker.url, "address": "q", "readMode": "consume", "credit": str(credit)})
    reader = AmqpBatchReader(options, MESSAGE_SCHEMA)
    [partition] = reader.partitions()
    ids = [str(value) for batch in reader.read(partition) for value in batch.column("message_id").to_pylist()]
    assert ids == [f"m{n}" for n in range(25)]
    assert drain(broker.url, "q") == []


def test_the_drivers_receiver_holds_at_most_its_bound(broker: BrokerThread) -> None:
    fill(broker.url, "q", [amqp_async.Message(body=b"x" * SIZE, id=f"m{n}") for n in range(25)])
    options = parse_options({"url": broker.url, "address": "q", "receiveOn": "driver", "windowBytes": "300000"})
    reader = AmqpDriverStreamReader(options, MESSAGE_SCHEMA)
    reader.prepareForTriggerAvailableNow()
    start = reader.initialOffset()
    ids: list[str] = []
    largest = 0
    try:
        while True:
            end = reader.latestOffset(start, ReadAllAvailable())
            if end == start:
                break
            session = reader._session
            assert session is not None and session.receiver is not None
            # held (planned, not committed) and waiting, in bytes: within the bound (before: all 25, 2.5 MB)
            held = sum(len(delivery.payload) for _, delivery in session.held)
            waiting = sum(len(delivery.payload) for delivery in session.receiver._engine_link.incoming)
            largest = max(largest, held + waiting)
            for planned in reader.partitions(start, end):
                ids += [str(value) for value in planned.batch.column("message_id").to_pylist()]
            reader.commit(end)
            start = end
    finally:
        reader.stop()
    assert largest <= 300_000 + SIZE, largest
    assert sorted(ids) == sorted(f"m{n}" for n in range(25))
    assert drain(broker.url, "q") == []


def test_the_tests_drain_counts_every_large_message(broker: BrokerThread) -> None:
    """``spark_support.drain``, which the Spark tests count a queue with, sees every message however large. Before,
    it stopped at the first drain that brought fewer than its credit of 1,000, and the embedded broker ends a drain
    with what it could send at once: 53 of 340 messages of 20 KB."""
    fill(broker.url, "big", [amqp_async.Message(body=b"x" * 20_000, id=f"m{n}") for n in range(340)])
    assert len(drain(broker.url, "big", accept=False)) == 340  # released: still there
    assert sorted(str(message.id) for message in drain(broker.url, "big")) == sorted(f"m{n}" for n in range(340))
    assert drain(broker.url, "big") == []


def test_a_consuming_batch_read_that_ends_early_releases_the_window_it_did_not_accept() -> None:
    """A consuming task that fails (or whose rows Spark stops taking) while it holds a window handed over and not
    accepted gives that window back released (§3.4.4: not a failed delivery) before it closes. Before, it closed
    with the window unsettled and left its outcome to the peer's handling of a closed link, which a broker may count
    towards its delivery limit."""
    with ProtonBroker() as peer:
        for n in range(20):
            peer.put("q", ProtonMessage(body="x", id=f"m{n}"))
        options = parse_options({"url": peer.url, "address": "q", "readMode": "consume", "credit": "5"})
        reader = AmqpBatchReader(options, MESSAGE_SCHEMA)
        [partition] = reader.partitions()
        rows = reader.read(partition)
        first, second = next(rows), next(rows)  # one message to see the size, then a window of 5
        assert (first.num_rows, second.num_rows) == (1, 5)
        rows.close()  # the task ends with the second window handed over and not accepted
        peer.wait_closes(1, timeout=TIMEOUT)
        outcomes = [(outcome.outcome, outcome.settled) for outcome in peer.outcomes]
        assert outcomes == [("accepted", True)] + [("released", True)] * 5
        assert sorted(message.id for message in peer.queued("q")) == sorted(f"m{n}" for n in range(1, 20))
        assert {message.delivery_count for message in peer.queued("q")} == {0}
