"""The executor side of a streaming read without a JVM: a task's receive, log, choice and settlement, run as
Spark would run it (``read_partition``) against the embedded broker and RabbitMQ 3.10.

Spark is not needed to race two attempts of one partition: threads run them, and the fault points
(``amqp_async.spark._failpoints``) stall one at an exact step.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import proton
import pyarrow as pa
import pytest
from broker_process import BrokerProcess, free_port
from proton import Delivery as ProtonDelivery
from proton import Message as ProtonMessage
from proton import Terminus, symbol
from proton.handlers import MessagingHandler
from proton.utils import BlockingConnection
from proton_broker import ProtonBroker
from proton_peer import proton_server
from pyspark.sql.streaming.datasource import ReadMaxRows
from pyspark.sql.types import StringType, StructField, StructType
from slow_relays import slow_relay
from spark_support import drain, fill

import amqp_async
from amqp_async.broker import BrokerThread
from amqp_async.errors import AuthenticationError, ConnectionRefused, LinkTimeout, TransactionError
from amqp_async.spark import MESSAGE_SCHEMA, AmqpBatchReader, AmqpDriverStreamReader, _links
from amqp_async.spark._failpoints import ENVIRONMENT
from amqp_async.spark._links import check_transactions, close_quietly, open_receiver, receive_batch, settle_all
from amqp_async.spark._log import WriteAheadLog
from amqp_async.spark._options import OptionError, parse_options
from amqp_async.spark._schema import MessageBuilder
from amqp_async.spark._stream_task import StreamPartition, read_partition
from amqp_async.spark._writer import send_partition


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


@pytest.mark.interop
def test_a_task_that_takes_its_credit_back_from_rabbitmq_gives_back_the_rest(
    rabbitmq_broker: Any, tmp_path: Path
) -> None:
    """RabbitMQ 3 answers no drain: an idle task's first wait ends with a flow asking it (echo), and a task stopped by
    its byte bound takes its credit back, waits for RabbitMQ's answer and releases what came meanwhile. Both end
    promptly; every message not read is back in the queue, read once by the next task."""
    url = rabbitmq_broker.url
    options = parse_options({"url": url, "address": "/queue/task-credit", "windowBytes": "1500"})
    started = time.monotonic()
    assert list(read_partition(options, MESSAGE_SCHEMA, _partition(tmp_path, 100, wait=1.0))) == []
    fill(url, "/queue/task-credit", [amqp_async.Message(body="y" * 1000, id=f"m{n}") for n in range(20)])
    rows = read_partition(options, MESSAGE_SCHEMA, _partition(tmp_path, 100, batch=1))
    first = [message_id for batch in rows for message_id in batch.column("message_id").to_pylist()]
    assert 1 <= len(first) <= 2  # the byte bound: at most what 1,500 bytes hold, and always the first message
    assert time.monotonic() - started < 30
    assert rabbitmq_broker.wait_queue_depth("task-credit", 20 - len(first)) == 20 - len(first)
    options = parse_options({"url": url, "address": "/queue/task-credit"})
    rest = [
        message_id
        for batch in read_partition(options, MESSAGE_SCHEMA, _partition(tmp_path, 100, batch=2))
        for message_id in batch.column("message_id").to_pylist()
    ]
    assert sorted(first + rest, key=lambda i: int(i[1:])) == [f"m{n}" for n in range(20)]


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


def _send_raw(url: str, address: str, payload: bytes) -> None:
    """Send ``payload`` as a delivery's bytes, as they are (python-qpid-proton: not an AMQP message, §3.2)."""
    connection = BlockingConnection(url)
    try:
        sender = connection.create_sender(address)
        sender.link.delivery(b"raw")
        sender.link.send(payload)
        delivery = sender.link.current
        sender.link.advance()
        connection.wait(lambda: delivery.remote_state != 0, timeout=30, msg="the broker took the raw delivery")
    finally:
        connection.close()


def test_a_payload_that_is_not_a_message_is_read_as_a_row_not_a_failure_for_ever(
    broker: BrokerThread, tmp_path: Path
) -> None:
    """A failed task would fail again on each retry and restart (the message comes back each time): the stream could
    never move past it. It is read as its raw bytes, accepted as the others, and a rerun gives the same rows."""
    fill(broker.url, "q", [amqp_async.Message(body=b"first", id="m0")])
    _send_raw(broker.url, "q", b"\xff\xfe not an AMQP message")
    fill(broker.url, "q", [amqp_async.Message(body=b"last", id="m2")])
    partition = _partition(tmp_path, 100)
    options = parse_options({"url": broker.url, "address": "q"})

    def rows() -> list[tuple[Any, ...]]:
        found = []
        for batch in read_partition(options, MESSAGE_SCHEMA, partition):
            found += zip(*(batch.column(name).to_pylist() for name in ("body", "body_type", "message_id")), strict=True)
        return found

    expected = [
        (b"first", "data", "m0"),
        (b"\xff\xfe not an AMQP message", "undecodable", None),
        (b"last", "data", "m2"),
    ]
    assert rows() == expected
    assert drain(broker.url, "q") == []  # all three accepted: the stream moved on
    assert rows() == expected  # the rerun, from the log


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


@pytest.mark.parametrize("point", ["received", "logged", "chosen"])
def test_a_task_that_fails_releases_what_it_received_before_it_closes(tmp_path: Path, faults: Path, point: str) -> None:
    """A task that fails (its log's storage, a fault) gives back each delivery it holds with an outcome of its
    own, released (§3.4.4: not a failed delivery), before it closes. Before, it closed with them unsettled and left
    them to the peer's handling of a closed link, which a broker may count towards its delivery limit: every retry
    of the task would have counted against every message it had received."""
    with ProtonBroker() as peer:
        for n in range(20):
            peer.put("q", ProtonMessage(body="x", id=f"m{n}"))
        (faults / point).write_text("raise")
        options = parse_options({"url": peer.url, "address": "q", "logLocation": str(tmp_path)})
        with pytest.raises(RuntimeError, match=f"failpoint {point}"):
            list(read_partition(options, MESSAGE_SCHEMA, _partition(tmp_path, 8)))
        peer.wait_closes(1, timeout=20)
        outcomes = peer.outcomes
        assert len(outcomes) >= 8  # the task's 8, and any that came after its credit was taken back
        assert {(outcome.outcome, outcome.settled) for outcome in outcomes} == {("released", True)}
        assert sorted(message.id for message in peer.queued("q")) == sorted(f"m{n}" for n in range(20))
        assert {message.delivery_count for message in peer.queued("q")} == {0}


class _CountedDelay(list[float]):
    """A :func:`slow_relays.slow_relay`'s delay (read once for each chunk of the peer's bytes), counting its reads."""

    def __init__(self) -> None:
        super().__init__([0.0])
        self.reads = 0

    def __getitem__(self, index: Any) -> Any:
        self.reads += 1
        return super().__getitem__(index)


@contextlib.contextmanager
def _relay_in_a_thread(port: int, delay: list[float]) -> Iterator[str]:
    """A :func:`slow_relays.slow_relay` to ``port`` run in a thread of its own (the task runs its own loop)."""
    urls: list[str] = []
    stop = threading.Event()

    async def serve() -> None:
        async with slow_relay(port, delay=delay) as url:
            urls.append(url)
            while not stop.is_set():
                await anyio.sleep(0.02)

    thread = threading.Thread(target=anyio.run, args=(serve,), daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not urls and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert urls, "the relay did not start"
    try:
        yield urls[0]
    finally:
        stop.set()
        thread.join(30)


@pytest.mark.parametrize("fails", [False, True], ids=["task-ends", "task-fails"])
def test_a_message_on_its_way_as_the_first_wait_ends_is_taken_or_released_not_left_to_the_close(
    tmp_path: Path, faults: Path, fails: bool
) -> None:
    """A message the broker sent just before a task's first wait ended (a continuous query on an idle queue) is on
    its way: the task asks the broker whether it has more (a drain) rather than take its credit back blind, so the
    message comes first and is taken into the batch (accepted), or released by a task that fails. Before, the task
    ended its batch empty, the message came after it had settled, and it stayed unsettled until the connection
    closed: its outcome was the broker's (a broker may count a delivery left unsettled at a link's end as a
    failed one).

    The broker's bytes reach the task through a relay that holds them back: the task (first wait 5 s) grants a
    credit, a message is published 1.5 s later and sent at once, and reaches the task 5 s after that, once its wait
    has ended."""
    if fails:
        (faults / "received").write_text("raise")
    delay = _CountedDelay()
    with ProtonBroker() as peer, _relay_in_a_thread(peer.port, delay) as url:
        options = parse_options({"url": url, "address": "q"})
        partition = _partition(tmp_path, 100, wait=5.0)
        results: list[Any] = []

        def task() -> None:
            try:
                results.append(sum(batch.num_rows for batch in read_partition(options, MESSAGE_SCHEMA, partition)))
            except RuntimeError as exc:
                results.append(exc)

        thread = threading.Thread(target=task, daemon=True)
        thread.start()
        peer.wait_for(lambda: [flow for flow in peer.flows if flow.credit > 0] or None, timeout=60, what="credit")
        delay[0] = 5.0
        time.sleep(1.5)
        reads = delay.reads
        peer.put("q", ProtonMessage(body="late", id="late"))
        # Once the relay has the message, the broker's later bytes need not wait: they reach the task right after
        # it (the relay keeps the order).
        peer.wait_for(lambda: delay.reads > reads or None, timeout=60, what="the relay holding the message")
        delay[0] = 0.0
        thread.join(60)
        assert not thread.is_alive()
        peer.wait_closes(1, timeout=30)
        outcomes = [(outcome.outcome, outcome.settled, outcome.message.id) for outcome in peer.outcomes]
        if fails:
            assert isinstance(results[0], RuntimeError) and "failpoint received" in str(results[0])
            assert outcomes == [("released", True, "late")]
            assert [(message.id, message.delivery_count) for message in peer.queued("q")] == [("late", 0)]
        else:
            assert results == [1]
            assert outcomes == [("accepted", True, "late")]
            assert peer.queued("q") == []


def test_messages_on_their_way_when_a_full_task_takes_its_credit_back_are_released(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task that stops at its byte bound (``windowBytes``) with credit still out takes it back; what the broker
    sent before it saw that comes after the task settled its batch, and is released (§3.4.4: delivered again, its
    delivery-count unchanged) before the connection closes. Before, it stayed unsettled until the close, its
    outcome the broker's.

    The broker's bytes reach the task a few at a time (a relay that trickles them), so most of what it sent on the
    credit comes after the task has settled. The broker's answer comes after them (it answers the drain the task had
    asked for; python-qpid-proton answers no echo): the task may wait for it longer than it does by default, on a
    loaded machine (not beyond the 10 s a task gives its close)."""
    monkeypatch.setattr(_links, "_IN_FLIGHT_PATIENCE", 8.0)
    messages = [ProtonMessage(body="x", id="m0")] + [ProtonMessage(body="y" * 1000, id=f"m{n}") for n in range(1, 40)]
    with ProtonBroker() as peer:
        for message in messages:
            peer.put("q", message)

        async def run() -> int:
            async with slow_relay(peer.port, piece=16) as url:
                options = parse_options({"url": url, "address": "q", "windowBytes": "1500"})
                partition = _partition(tmp_path, 100)
                return await anyio.to_thread.run_sync(
                    lambda: sum(batch.num_rows for batch in read_partition(options, MESSAGE_SCHEMA, partition))
                )

        rows = anyio.run(run)
        peer.wait_closes(1, timeout=30)
        # The first message showed the size, and the credit then granted was for messages of its size: the broker
        # sent every other message, of which two reached the bound.
        assert rows == 3
        outcomes = [(outcome.outcome, outcome.message.id) for outcome in peer.outcomes]
        assert outcomes == [("accepted", f"m{n}") for n in range(3)] + [("released", f"m{n}") for n in range(3, 40)]
        queued = [(message.id, message.delivery_count) for message in peer.queued("q")]
        assert sorted(queued) == sorted((f"m{n}", 0) for n in range(3, 40))


# --- a broker that is down when a task starts --------------------------------------------------------------------


def test_a_task_that_starts_while_the_broker_is_down_reads_once_it_is_back(tmp_path: Path) -> None:
    """The broker (a process, its messages on disk) is down when the task connects and starts again 3 s later: the
    task tries again (with growing pauses, within connectTimeoutMs) and reads. Before, it failed at once with
    'connection refused', and a short restart of the broker failed Spark's task (twice: its retry too)."""
    with BrokerProcess("--data-dir", str(tmp_path / "data")) as broker:
        fill(broker.url, "q", [amqp_async.Message(body="x", id=f"m{n}", durable=True) for n in range(10)])
        broker.kill()
        later = threading.Timer(3.0, broker.start)
        later.start()
        try:
            started = time.monotonic()
            ids = _ids(broker.url, "q", _partition(tmp_path / "log", 100))
            waited = time.monotonic() - started
        finally:
            later.join(60)
        assert ids == [f"m{n}" for n in range(10)]
        assert waited >= 2.5  # it waited for the broker
        assert drain(broker.url, "q") == []  # and accepted what it read


def test_a_task_whose_broker_stays_down_fails_after_connect_timeout_naming_it(tmp_path: Path) -> None:
    """Nothing listens: the task tries until connectTimeoutMs has passed, then fails with the last attempt's error
    (its address, its condition, its errno) and how long it tried. A peer that answers and refuses (SASL) is not
    tried again: the task fails at once."""
    port = free_port()
    options = parse_options({"url": f"amqp://127.0.0.1:{port}", "address": "q", "connectTimeoutMs": "2000"})
    started = time.monotonic()
    with pytest.raises(ConnectionRefused) as refused:
        list(read_partition(options, MESSAGE_SCHEMA, _partition(tmp_path, 100)))
    assert 1.5 <= time.monotonic() - started < 30
    assert refused.value.condition == "amqp-async:io" and refused.value.errno == errno.ECONNREFUSED
    assert re.fullmatch(
        rf"amqp-async:io: cannot connect to amqp://127\.0\.0\.1:{port}: connection refused \(ECONNREFUSED\) "
        r"\(tried \d+ times over \d\.\d s: connectTimeoutMs is 2 s\)",
        str(refused.value),
    ), str(refused.value)
    with BrokerThread(users={"user": "right"}) as broker:
        url = broker.url.replace("amqp://", "amqp://user:wrong@")
        options = parse_options({"url": url, "address": "q", "connectTimeoutMs": "60000"})
        started = time.monotonic()
        with pytest.raises(AuthenticationError, match="amqp:unauthorized-access"):
            list(read_partition(options, MESSAGE_SCHEMA, _partition(tmp_path, 100, batch=1)))
        assert time.monotonic() - started < 30


def test_the_url_options_password_is_not_in_the_data_sources_errors() -> None:
    """The data source's own error texts name the peer by the ``url`` option (they go into Spark's errors, logs and
    UI): its password is hidden there, as in the client's errors. Before, a connection that took longer than
    connectTimeoutMs and a peer without transactions were named with the password in clear."""
    with socket.socket() as silent:  # accepts (the kernel's backlog) and never answers: connecting takes too long
        silent.bind(("127.0.0.1", 0))
        silent.listen(5)
        port = silent.getsockname()[1]
        options = parse_options(
            {"url": f"amqp://user:s3cret@127.0.0.1:{port}", "address": "q", "connectTimeoutMs": "1000"}
        )
        with pytest.raises(amqp_async.errors.ConnectTimeout) as slow:
            anyio.run(open_receiver, options)
    assert f"connecting to amqp://user:***@127.0.0.1:{port} took longer" in str(slow.value)
    with ProtonBroker() as peer:  # no transaction coordinator
        url = peer.url.replace("amqp://", "amqp://user:s3cret@")
        options = parse_options({"url": url, "address": "q", "transactional": "true"})
        with pytest.raises(TransactionError) as refused:
            anyio.run(check_transactions, options)
    assert f"the peer at {peer.url.replace('amqp://', 'amqp://user:***@')} cannot run" in str(refused.value)
    assert "s3cret" not in str(slow.value) + str(refused.value)


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


# --- a transactional write's commit --------------------------------------------------------------------------------


class _SilentCommitCoordinator(MessagingHandler):
    """python-qpid-proton as a transaction coordinator (§4.2) that declares and accepts every transfer, but never
    answers a discharge (its heartbeats keep the connection alive)."""

    def __init__(self) -> None:
        super().__init__(auto_accept=False)
        self.accepted = 0
        self.discharges = 0

    def on_link_opening(self, event: Any) -> None:
        link = event.link
        if link.is_receiver and link.remote_target.type == Terminus.COORDINATOR:
            link.target.type = Terminus.COORDINATOR
        link.target.copy(link.remote_target)
        link.open()

    def on_message(self, event: Any) -> None:
        delivery = event.delivery
        if event.link.target.type != Terminus.COORDINATOR:
            self.accepted += 1
            delivery.update(ProtonDelivery.ACCEPTED)
            delivery.settle()
        elif event.message.body.descriptor in (0x31, symbol("amqp:declare:list")):  # a declare (§4.5.1)
            delivery.local.data = [b"txn-1"]
            delivery.update(0x33)  # declared (§4.5.3)
            delivery.settle()
        else:
            self.discharges += 1  # never settled


def test_a_transactional_write_whose_commit_gets_no_answer_fails_after_send_timeout() -> None:
    """Before, the task waited for the commit's outcome for ever, sendTimeoutMs bounding only credit and the
    messages' own outcomes."""
    coordinator = _SilentCommitCoordinator()
    with proton_server(coordinator) as url:
        options = parse_options({"url": url, "address": "q", "transactional": "true", "sendTimeoutMs": "2000"})
        builder = MessageBuilder(StructType([StructField("body", StringType())]), "write:0", partition=0)
        rows = pa.record_batch([pa.array(["a", "b", "c"])], names=["body"])
        outcome: list[BaseException] = []

        def write() -> None:
            try:
                send_partition(options, builder, [rows])
            except BaseException as exc:
                outcome.append(exc)

        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        writer.join(60)
        assert not writer.is_alive(), "the write still waits for the commit's outcome"
    assert (coordinator.accepted, coordinator.discharges) == (3, 1)
    assert len(outcome) == 1 and isinstance(outcome[0], LinkTimeout), outcome
    assert "commit" in str(outcome[0]) and "sendTimeoutMs" in str(outcome[0])


# --- a peer that ignores drains --------------------------------------------------------------------------------------


class _DrainIgnoringSource(MessagingHandler):
    """python-qpid-proton sending ``count`` messages as credit allows, and never answering a drain (§2.6.7: it does
    not call ``drained()``, as many a proton application does not)."""

    def __init__(self, count: int) -> None:
        super().__init__()
        self.left = count

    def on_link_opening(self, event: Any) -> None:
        if event.link.is_sender:
            event.link.source.copy(event.link.remote_source)
        event.link.open()

    def on_sendable(self, event: Any) -> None:
        while self.left and event.link.credit:
            event.link.send(proton.Message(body="x", id=f"m{self.left}"))
            self.left -= 1


def _in_a_thread(work: Callable[[], Any], timeout: float) -> Any:
    """``work()``'s result, run in a thread given ``timeout`` seconds (a hang fails the test, it does not hold it)."""
    outcome: list[Any] = []
    thread = threading.Thread(target=lambda: outcome.append(work()), daemon=True)
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), "still waiting for an answer to its drain"
    assert outcome, "failed (see the thread's exception above)"
    return outcome[0]


@pytest.fixture
def short_patience(monkeypatch: pytest.MonkeyPatch) -> None:
    """How long a silent sender is waited for: 5 s rather than 30, for the tests' sake (still ample for the peer to
    send what it has, on a loaded machine)."""
    monkeypatch.setattr(_links, "_PATIENCE", 5.0)


def test_a_batch_read_of_a_peer_that_ignores_drains_ends(short_patience: None) -> None:
    """Before, the read waited for the drain's answer for ever (the peer's heartbeats keep the connection alive)."""
    with proton_server(_DrainIgnoringSource(3)) as url:
        reader = AmqpBatchReader(parse_options({"url": url, "address": "q", "readMode": "consume"}), MESSAGE_SCHEMA)
        rows = _in_a_thread(lambda: sum(batch.num_rows for batch in reader.read(reader.partitions()[0])), 60)
    assert rows == 3


def test_the_drivers_receiver_of_a_peer_that_ignores_drains_ends_an_available_now_run(short_patience: None) -> None:
    """The drain is called off after the wait, so credit is granted again: the next micro-batch is planned as usual
    (before, the first latestOffset waited for ever)."""
    with proton_server(_DrainIgnoringSource(5)) as url:
        options = parse_options({"url": url, "address": "q", "receiveOn": "driver", "maxMessagesPerBatch": "3"})
        reader = AmqpDriverStreamReader(options, MESSAGE_SCHEMA)
        try:
            reader.prepareForTriggerAvailableNow()

            def run() -> list[int]:
                start, ends = reader.initialOffset(), []
                while (end := reader.latestOffset(start, ReadMaxRows(3))) != start:
                    ends.append(end["messages"])
                    assert (
                        sum(part.batch.num_rows for part in reader.partitions(start, end))
                        == ends[-1] - start["messages"]
                    )
                    reader.commit(end)
                    start = end
                return ends

            ends = _in_a_thread(run, 120)
            # Every message, in batches of at most 3 (how many the first batch gets depends on the peer's pace: the
            # first credit is one message, its size unknown).
            assert ends[-1] == 5 and all(
                0 < later - earlier <= 3 for earlier, later in zip([0, *ends[:-1]], ends, strict=True)
            ), ends
        finally:
            reader.stop()
