"""The ``amqp`` data source on a real Spark (PySpark 4): end to end, faults with exact counts.

Peers: the embedded broker, RabbitMQ 3.10 (its AMQP 1.0 plugin) and python-qpid-proton's reactor (as a rejecting
peer). One SparkSession (``local[2,2]``: a failed task is tried once more) serves the module, its JVM started once.
The tests that need a master of their own run Spark drivers in subprocesses (tests/spark_stream_program.py), in
files of their own: tests/test_spark_cluster.py (the 100,000-message reads on ``local-cluster[2,1,1024]``) and
tests/test_spark_drivers.py (the driver killed and restarted, speculation on a standalone cluster whose workers
are distinct hosts). Faults at exact steps of a task
come from the fault points (``amqp_async.spark._failpoints``), armed by trigger files in ``spark_support.FAULTS``.
"""

from __future__ import annotations

import collections
import os
import re
import signal
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from broker_process import BrokerProcess
from proton_broker import ProtonBroker
from spark_support import (
    FAULTS,
    CuttableProxy,
    broker_fixture,  # noqa: F401 -- the fixture "broker"
    check_orders,
    drain,
    fill,
    fired,
    new_session,
    orders,
    read_until_empty,
    run_query,
    running,
    spark_environment,
)
from tls_certs import make_ca, make_cert

import amqp_async
from amqp_async.broker import BrokerThread

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    session = new_session()
    yield session
    session.stop()


@pytest.fixture
def faults() -> Iterator[Path]:
    """The fault points' trigger directory of the session's workers; triggers a test set and did not fire are
    removed after it (so that they cannot fire in another test)."""
    directory = Path(FAULTS)
    yield directory
    for path in directory.iterdir():
        path.unlink()


def stream_to_memory(spark: Any, url: str, address: str, name: str, tmp_path: Path, **options: Any) -> Any:
    """Read ``address`` as a stream until it is empty (Trigger.AvailableNow) into the memory table ``name``."""

    def start() -> Any:
        writer = read_until_empty(spark, url, address, str(tmp_path / f"checkpoint-{name}"), **options)
        return writer.format("memory").queryName(name).start()

    query = run_query(start, timeout=300)
    assert not query.isActive, "the AvailableNow query did not end"
    return query


# --- end to end ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("receive_on", ["executors", "driver"])
def test_rows_written_in_a_batch_arrive_intact_through_a_streaming_read(
    spark: Any, broker: BrokerThread, tmp_path: Path, receive_on: str
) -> None:
    count = 20_000
    orders(spark, count).write.format("amqp").option("url", broker.url).option("address", "orders").mode(
        "append"
    ).save()
    options: dict[str, Any] = {"maxMessagesPerBatch": 8_000, "numPartitions": 2, "receiveOn": receive_on}
    if receive_on == "executors":
        options["logLocation"] = str(tmp_path / "log")
    query = stream_to_memory(spark, broker.url, "orders", f"e2e_{receive_on}", tmp_path, **options)
    rows = spark.sql(f"select * from e2e_{receive_on}").collect()
    check_orders(rows, count)
    assert len({row.message_id for row in rows}) == count
    assert {row.delivery_count for row in rows} == {0}
    sizes = [progress["numInputRows"] for progress in query.recentProgress if progress["numInputRows"]]
    if receive_on == "executors":
        assert sizes == [8_000, 8_000, 4_000]  # planned by number: the same whatever the timing
    else:
        # The driver plans a batch from what it has received by then: at most maxMessagesPerBatch each (under load
        # it may have fewer at hand, as a CI run had: 4,096 then 8,000 then 7,904).
        assert sum(sizes) == count and max(sizes) <= 8_000, sizes
    assert drain(broker.url, "orders") == []  # every message was accepted
    if receive_on == "executors":
        # The source's log: every batch committed, its files deleted; only the marks of how far, and that the
        # source began (a replay after a restart finds its log by it), are left.
        left = sorted(path.name for path in (tmp_path / "log").rglob("*") if path.is_file())
        assert len(left) == 2 and re.fullmatch(r"done\.[34]", left[0]) and left[1] == "started", left


def _send_raw(connection: Any, sender: Any, payload: bytes) -> None:
    """Send ``payload`` as a delivery's bytes, as they are (python-qpid-proton: not an AMQP message, §3.2)."""
    sender.link.delivery(f"raw-{sender.link.unsettled}".encode())
    sender.link.send(payload)
    delivery = sender.link.current
    sender.link.advance()
    connection.wait(lambda: delivery.remote_state != 0, timeout=30, msg="the broker took the raw delivery")


def _send_with_proton(url: str, address: str, items: list[Any]) -> None:
    """Send each of ``items`` with python-qpid-proton: a ``proton.Message``, or bytes (:func:`_send_raw`)."""
    import proton
    from proton.utils import BlockingConnection

    connection = BlockingConnection(url)
    try:
        sender = connection.create_sender(address)
        for item in items:
            if isinstance(item, proton.Message):
                sender.send(item)
            else:
                _send_raw(connection, sender, item)
    finally:
        connection.close()


@pytest.mark.parametrize("receive_on", ["executors", "driver"])
def test_messages_that_cannot_be_rows_as_they_are_do_not_stop_a_stream(
    spark: Any, broker: BrokerThread, tmp_path: Path, receive_on: str
) -> None:
    """A delivery that is not an AMQP message, and a creation time in nanoseconds where milliseconds belong: before,
    each failed its task, and every retry and restart of the query failed the same way (the message came back each
    time). Now the first reads as its raw bytes (body_type undecodable), the second with a null creation_time."""
    import proton

    nanoseconds = proton.Message(body=b"late", id="m2")
    nanoseconds.creation_time = 1_764_000_000_000_000.0  # proton takes seconds: 1.764e18 "milliseconds"
    garbage = b"\xff\xfe not an AMQP message"
    address = f"poison-{receive_on}"
    _send_with_proton(broker.url, address, [proton.Message(body=b"first", id="m0"), garbage, nanoseconds])
    options: dict[str, Any] = {"receiveOn": receive_on}
    if receive_on == "executors":
        options["logLocation"] = str(tmp_path / "log")
    stream_to_memory(spark, broker.url, address, f"poison_{receive_on}", tmp_path, **options)
    rows = spark.sql(f"select body, body_type, message_id, creation_time from poison_{receive_on}").collect()
    assert sorted((bytes(row.body), row.body_type, row.message_id, row.creation_time) for row in rows) == [
        (b"first", "binary", "m0", None),
        (b"late", "binary", "m2", None),
        (garbage, "undecodable", None, None),
    ]
    assert drain(broker.url, address) == []  # all three accepted: the stream moved on


def test_streaming_write_gives_ids_from_query_batch_partition_and_row(
    spark: Any, broker: BrokerThread, tmp_path: Path
) -> None:
    fill(broker.url, "in", [amqp_async.Message(body=f"m{n}") for n in range(300)])
    query = (
        spark.readStream.format("amqp")
        .option("url", broker.url)
        .option("address", "in")
        .option("maxMessagesPerBatch", 100)
        .load()
        .selectExpr("upper(cast(body as string)) as body")
        .writeStream.format("amqp")
        .option("url", broker.url)
        .option("address", "out")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    received = drain(broker.url, "out")
    assert sorted(m.body for m in received) == sorted(f"M{n}" for n in range(300))
    batches = collections.Counter(m.id.split(":")[1] for m in received)
    assert all(m.id.startswith(f"{query.id}:") for m in received)
    assert batches == {"0": 100, "1": 100, "2": 100}
    assert drain(broker.url, "in") == []


def test_a_to_column_routes_each_row_over_the_anonymous_relay(spark: Any, broker: BrokerThread) -> None:
    rows = spark.range(40, numPartitions=2).selectExpr("cast(id as string) as body", "concat('q', id % 2) as to")
    rows.write.format("amqp").option("url", broker.url).mode("append").save()
    assert sorted(int(m.body) for m in drain(broker.url, "q0")) == list(range(0, 40, 2))
    assert sorted(int(m.body) for m in drain(broker.url, "q1")) == list(range(1, 40, 2))


def test_batch_read_browses_by_default_and_consumes_when_asked(spark: Any, broker: BrokerThread) -> None:
    fill(broker.url, "stock", [amqp_async.Message(body=f"item {n}", subject="s") for n in range(2500)])
    reader = spark.read.format("amqp").option("url", broker.url).option("address", "stock").option("credit", 1000)
    browsed = reader.load()
    assert browsed.count() == 2500
    assert browsed.count() == 2500  # browsing took nothing
    narrowed = reader.schema("body string, subject string").load().collect()
    assert sorted(row.body for row in narrowed) == sorted(f"item {n}" for n in range(2500))
    consumed = reader.option("readMode", "consume").option("numPartitions", 2).load().collect()
    assert len(consumed) == 2500 and len({row.body for row in consumed}) == 2500
    assert reader.load().count() == 0
    assert drain(broker.url, "stock") == []


@pytest.mark.interop
def test_batch_read_browses_a_python_qpid_proton_broker(spark: Any) -> None:
    with ProtonBroker() as proton_broker:
        from proton import Message as ProtonMessage

        for n in range(50):
            proton_broker.put("shelf", ProtonMessage(body=f"p{n}", subject="from proton"))
        rows = spark.read.format("amqp").option("url", proton_broker.url).option("address", "shelf").load().collect()
        assert sorted(row.body for row in rows) == sorted(f"p{n}".encode() for n in range(50))
        assert {row.subject for row in rows} == {"from proton"}


def test_tls_sasl_and_a_selector_through_the_options(spark: Any, tmp_path: Path) -> None:
    ca = make_ca(tmp_path, "ca")
    server = make_cert(tmp_path, "server", ca, "localhost", san=["DNS:localhost", "IP:127.0.0.1"])
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(server.cert, server.key)
    with BrokerThread(ssl_context=context, users={"spark": "s3cret"}) as secure:
        url = secure.url.replace("127.0.0.1", "localhost")
        assert url.startswith("amqps://")
        tls = {"sslCaFile": ca.cert, "user": "spark", "password": "s3cret", "saslMechanisms": "SCRAM-SHA-256"}
        rows = spark.range(20, numPartitions=2).selectExpr(
            "cast(id as string) as body", "if(id % 2 = 0, 'red', 'blue') as subject"
        )
        writer = rows.write.format("amqp").option("url", url).option("address", "colours").mode("append")
        for key, value in tls.items():
            writer = writer.option(key, value)
        writer.save()
        reader = spark.read.format("amqp").option("url", url).option("address", "colours")
        for key, value in tls.items():
            reader = reader.option(key, value)
        red = reader.option("selector", "JMSType = 'red'").load().collect()  # JMSType is the subject
        assert sorted(int(row.body) for row in red) == list(range(0, 20, 2))
        with pytest.raises(Exception, match="amqp:unauthorized-access"):
            reader.option("password", "wrong").load().collect()
        with pytest.raises(Exception, match="CERTIFICATE_VERIFY_FAILED"):
            spark.read.format("amqp").option("url", url).option("address", "colours").load().collect()


# --- faults, with exact counts -------------------------------------------------------------------------------------


def test_a_task_failing_mid_write_is_retried_losing_nothing(spark: Any, broker: BrokerThread, tmp_path: Path) -> None:
    from pyspark.sql.functions import udf

    flag = tmp_path / "failed-once"

    @udf("string")
    def fail_once(n):  # no type hints: Spark would read them as a pandas UDF's
        from pyspark import TaskContext

        context = TaskContext.get()
        if n == 30_000 and context.attemptNumber() == 0 and not os.path.exists(flag):
            open(flag, "w").close()
            time.sleep(2)  # the writer sends what it has before the task fails
            raise RuntimeError("injected failure")
        return f"row {n}"

    count = 40_000
    rows = spark.range(count, numPartitions=2).select(fail_once("id").alias("body"))
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "1000")
    try:
        rows.write.format("amqp").option("url", broker.url).option("address", "retried").mode("append").save()
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    assert flag.exists(), "the failure was not injected"
    received = drain(broker.url, "retried")
    bodies = collections.Counter(m.body for m in received)
    ids = collections.Counter(m.id for m in received)
    assert set(bodies) == {f"row {n}" for n in range(count)}  # 0 lost
    duplicated = {message_id for message_id, seen in ids.items() if seen > 1}
    # Only the failed attempt's rows came twice: rows of partition 1 (n = 20000... before 30000), each exactly
    # twice, and detectable by message_id alone: a body repeats exactly when its id does.
    assert all(seen == 2 for seen in ids.values() if seen > 1)
    assert len(received) == count + len(duplicated)
    assert sum(1 for seen in bodies.values() if seen > 1) == len(duplicated)
    partitions = {message_id.split(":")[1] for message_id in duplicated}
    assert partitions <= {"1"}
    assert all(int(message_id.split(":")[2]) < 10_000 for message_id in duplicated)


def _stream_to_list(spark: Any, url: str, address: str, tmp_path: Path, **options: Any) -> tuple[Any, list[Any]]:
    """Start reading ``address`` to its end (Trigger.AvailableNow) into a list of (batch id, message id)."""
    seen: list[tuple[int, str]] = []

    def sink(batch: Any, batch_id: int) -> None:
        seen.extend((batch_id, row.message_id) for row in batch.select("message_id").collect())

    reader = spark.readStream.format("amqp").option("url", url).option("address", address)
    for key, value in {"logLocation": str(tmp_path / "log"), **options}.items():
        reader = reader.option(key, value)
    query = (
        reader.load()
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    return query, seen


def test_python_workers_killed_at_each_step_of_a_read_lose_nothing(
    spark: Any, broker: BrokerThread, faults: Path, tmp_path: Path
) -> None:
    """SIGKILL to the Python worker of one task of each of four batches, each at another step: after it received
    and before its log write; after the log write and before the choice; after the choice and before accepting;
    after accepting and before returning the rows. Spark retries each task. Nothing is lost, and only the third
    costs duplicates: its entry was chosen, so the retry returns it, but its deliveries were never accepted and
    the broker delivers them again, each exactly once more."""
    count = 4_000
    fill(broker.url, "faults", [amqp_async.Message(body="f", id=f"f-{n}") for n in range(count)])
    points = {"received@0.0": "kill", "logged@1.1": "kill", "chosen@2.0": "kill", "settled@3.1": "kill"}
    for name, action in points.items():
        (faults / name).write_text(action)
    query, seen = _stream_to_list(spark, broker.url, "faults", tmp_path, maxMessagesPerBatch=1000, numPartitions=2)
    query.awaitTermination(300)
    assert query.exception() is None and not query.isActive
    assert all(fired(str(faults), name) for name in points)  # four workers died, four tasks were retried
    counted = collections.Counter(message_id for _, message_id in seen)
    assert set(counted) == {f"f-{n}" for n in range(count)}  # 0 lost
    duplicated = {message_id for message_id, times in counted.items() if times > 1}
    assert len(duplicated) == 500 and {counted[message_id] for message_id in duplicated} == {2}
    in_batch_2 = {message_id for batch, message_id in seen if batch == 2}
    assert duplicated <= in_batch_2  # batch 2's partition 0, again in a later batch
    assert len(seen) == count + 500
    assert drain(broker.url, "faults") == []


def test_a_connection_cut_under_a_read_is_retried_losing_nothing(
    spark: Any, broker: BrokerThread, faults: Path, tmp_path: Path
) -> None:
    """The network drops every connection to the broker twice: while the task of batch 0 has received (before its
    choice: the retry receives afresh, nothing comes twice) and while the task of batch 1 has chosen its entry
    (before it accepted: the retry returns the entry, and its 500 messages come again, once)."""
    count = 2_000
    fill(broker.url, "cut", [amqp_async.Message(body="c", id=f"c-{n}") for n in range(count)])
    host, port = broker.url.removeprefix("amqp://").rsplit(":", 1)
    points = ("received@0.0", "chosen@1.0")
    for name in points:
        (faults / name).write_text("sleep 3")
    with CuttableProxy(host, int(port)) as proxy:
        query, seen = _stream_to_list(spark, proxy.url(), "cut", tmp_path, maxMessagesPerBatch=500, numPartitions=1)
        for name in points:
            deadline = time.monotonic() + 180
            while not fired(str(faults), name):
                assert time.monotonic() < deadline and query.isActive, f"{name} never fired"
                time.sleep(0.05)
            proxy.cut()  # while the task stalls at the point, holding its deliveries
        query.awaitTermination(300)
    assert query.exception() is None and not query.isActive
    counted = collections.Counter(message_id for _, message_id in seen)
    assert set(counted) == {f"c-{n}" for n in range(count)}  # 0 lost
    duplicated = {message_id for message_id, times in counted.items() if times > 1}
    assert len(duplicated) == 500 and {counted[message_id] for message_id in duplicated} == {2}, (
        collections.Counter(batch for batch, _ in seen),
        os.listdir(faults),
    )
    assert duplicated == {message_id for batch, message_id in seen if batch == 1}
    assert drain(broker.url, "cut") == []


@pytest.mark.interop
def test_a_broker_restarted_under_a_read_loses_nothing(spark: Any, faults: Path, tmp_path: Path) -> None:
    """The embedded broker, in a process of its own keeping its messages on disk (``--data-dir``), is killed
    (SIGKILL) and started again twice: while the task of batch 0 has received (before its choice: its retry
    receives afresh from the restarted broker, nothing comes twice) and while the task of batch 1 has chosen its
    entry (before it accepted: the entry's rows stand, and the restarted broker delivers its 500 messages again,
    once). Every message is read; none is given up at the broker's delivery limit of 1."""
    count = 2_000
    with BrokerProcess("--data-dir", str(tmp_path / "data"), "--delivery-limit", "1") as broker:
        fill(broker.url, "restarted", [amqp_async.Message(body="r", id=f"r-{n}", durable=True) for n in range(count)])
        points = ("received@0.0", "chosen@1.0")
        for name in points:
            # Long enough for the broker to be killed and started again while the task stalls there: its retry
            # then finds the broker up (local[2,2] tries a task twice).
            (faults / name).write_text("sleep 15")
        query, seen = _stream_to_list(spark, broker.url, "restarted", tmp_path, maxMessagesPerBatch=500)
        for name in points:
            deadline = time.monotonic() + 180
            while not fired(str(faults), name):
                assert time.monotonic() < deadline and query.isActive, f"{name} never fired"
                time.sleep(0.05)
            broker.kill()
            broker.start()
        query.awaitTermination(300)
        assert query.exception() is None and not query.isActive
        counted = collections.Counter(message_id for _, message_id in seen)
        assert set(counted) == {f"r-{n}" for n in range(count)}  # 0 lost
        duplicated = {message_id for message_id, times in counted.items() if times > 1}
        assert duplicated == {message_id for batch, message_id in seen if batch == 1}
        assert len(duplicated) == 500 and {counted[message_id] for message_id in duplicated} == {2}
        assert drain(broker.url, "restarted") == []


def test_a_broker_down_as_a_query_starts_delays_its_tasks_and_fails_nothing(spark: Any, tmp_path: Path) -> None:
    """The embedded broker (a process, its messages on disk) is down as the query's first tasks connect and starts
    again 8 s later: the tasks try it again (within connectTimeoutMs) and read every message once. Before, each
    task failed at once with 'connection refused', and so did Spark's retry of it: the query failed."""
    count = 1_000
    with BrokerProcess("--data-dir", str(tmp_path / "data")) as broker:
        fill(broker.url, "late", [amqp_async.Message(body="l", id=f"l-{n}", durable=True) for n in range(count)])
        broker.kill()

        def start_once_read() -> None:
            """Start the broker 8 s after the read's first stage did (its tasks then try it, and fail in a moment
            without trying again, as did the code before)."""
            deadline = time.monotonic() + 120
            while not spark.sparkContext.statusTracker().getActiveStageIds() and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(8.0)
            broker.start()

        later = threading.Thread(target=start_once_read)
        later.start()
        try:
            query, seen = _stream_to_list(spark, broker.url, "late", tmp_path, maxMessagesPerBatch=500, numPartitions=2)
            query.awaitTermination(300)
        finally:
            later.join(60)
        assert query.exception() is None and not query.isActive
        assert collections.Counter(message_id for _, message_id in seen) == collections.Counter(
            f"l-{n}" for n in range(count)
        )
        assert drain(broker.url, "late") == []


def test_a_rejecting_peer_fails_the_write_with_its_condition(spark: Any) -> None:
    with ProtonBroker() as proton_broker:
        proton_broker.outcome_for["refusing"] = ("rejected", "amqp:precondition-failed", "no orders today")
        rows = spark.range(10, numPartitions=1).selectExpr("cast(id as string) as body")
        with pytest.raises(Exception, match="amqp:precondition-failed: no orders today"):
            rows.write.format("amqp").option("url", proton_broker.url).option("address", "refusing").mode(
                "append"
            ).save()


def test_a_full_queue_fails_the_write_with_resource_limit_exceeded(spark: Any) -> None:
    with BrokerThread(max_queue_depth=100, when_full="reject") as small:
        rows = spark.range(500, numPartitions=1).selectExpr("cast(id as string) as body")
        with pytest.raises(Exception, match="amqp:resource-limit-exceeded"):
            rows.write.format("amqp").option("url", small.url).option("address", "tiny").mode("append").save()
        assert len(drain(small.url, "tiny")) == 100


def test_a_queue_that_holds_the_write_back_fails_it_after_send_timeout(spark: Any) -> None:
    """A queue at its limit whose broker withholds credit (the default --when-full block): before, the write
    waited for ever (heartbeats kept the connection alive); now it fails after sendTimeoutMs without credit."""
    with BrokerThread(max_queue_depth=100) as small:
        rows = spark.range(500, numPartitions=1).selectExpr("cast(id as string) as body")
        started = time.monotonic()
        with pytest.raises(Exception, match=r"the peer gave no credit to send for 2 s \(option sendTimeoutMs\)"):
            (
                rows.write.format("amqp")
                .option("url", small.url)
                .option("address", "held")
                .option("sendTimeoutMs", 2000)
                .mode("append")
                .save()
            )
        assert time.monotonic() - started < 60  # two attempts (local[2,2]) of 2 s each, and Spark's own time
        assert len(drain(small.url, "held")) == 100


# --- bad input -----------------------------------------------------------------------------------------------------


def test_a_broker_that_is_down_fails_the_query_with_the_connection_error(spark: Any, tmp_path: Path) -> None:
    """Each task tries the broker until connectTimeoutMs has passed (a broker restarting comes back meanwhile),
    then fails with the connection error, saying how long it tried."""
    with BrokerThread() as gone:
        url = gone.url
    started = time.monotonic()
    rows = spark.range(5, numPartitions=1).selectExpr("cast(id as string) as body")
    with pytest.raises(
        Exception,
        match=r"amqp-async:io: cannot connect to amqp://127\.0\.0\.1:\d+: connection refused \(ECONNREFUSED\) "
        r"\(tried \d+ times over \d+\.\d s: connectTimeoutMs is 3 s\)",
    ):
        (
            rows.write.format("amqp")
            .option("url", url)
            .option("address", "q")
            .option("connectTimeoutMs", 3000)
            .mode("append")
            .save()
        )
    query = (
        spark.readStream.format("amqp")
        .option("url", url)
        .option("address", "q")
        .option("connectTimeoutMs", 3000)
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    with pytest.raises(Exception, match="cannot connect"):
        query.awaitTermination(60)
    assert time.monotonic() - started < 60


def test_a_row_without_a_body_fails_naming_the_column_and_the_row(spark: Any, broker: BrokerThread) -> None:
    rows = spark.range(5, numPartitions=1).selectExpr("case when id = 3 then null else cast(id as string) end as body")
    with pytest.raises(Exception, match="row 3: column 'body' is null"):
        rows.write.format("amqp").option("url", broker.url).option("address", "q").mode("append").save()


def test_bad_options_and_columns_are_refused_before_anything_runs(spark: Any, broker: BrokerThread) -> None:
    good = spark.range(1).selectExpr("'x' as body")
    with pytest.raises(Exception, match="unknown option 'adress'"):
        spark.readStream.format("amqp").option("url", broker.url).option("adress", "q").load()
    with pytest.raises(Exception, match="option 'credit' must be a whole number"):
        spark.read.format("amqp").option("address", "q").option("credit", "lots").load()
    with pytest.raises(Exception, match="option 'logLocation' must be an absolute path or a URI"):
        spark.readStream.format("amqp").option("address", "q").option("logLocation", "relative/dir").load()
    with pytest.raises(Exception, match="option 'receiveOn' must be one of executors, driver"):
        spark.readStream.format("amqp").option("address", "q").option("receiveOn", "both").load()
    with pytest.raises(Exception, match="'logLocation' applies to receiveOn=executors only"):
        spark.readStream.format("amqp").option("address", "q").option("receiveOn", "driver").option(
            "logLocation", "/tmp/log"
        ).load()
    with pytest.raises(Exception, match="column 'colour' is not a message field"):
        good.selectExpr("body", "'red' as colour").write.format("amqp").option("address", "q").mode("append").save()
    with pytest.raises(Exception, match="cannot be overwritten"):
        good.write.format("amqp").option("address", "q").mode("overwrite").save()
    with pytest.raises(Exception, match="option 'readMode' does not apply to a write"):
        good.write.format("amqp").option("address", "q").option("readMode", "consume").mode("append").save()
    with pytest.raises(Exception, match="'transactional' needs deliveryMode at-least-once"):
        good.write.format("amqp").option("address", "q").option("transactional", "true").option(
            "deliveryMode", "at-most-once"
        ).mode("append").save()
    assert drain(broker.url, "q") == []


def test_stopping_a_query_that_receives_on_the_driver_gives_its_uncommitted_messages_back(
    spark: Any, broker: BrokerThread, tmp_path: Path
) -> None:
    fill(broker.url, "held", [amqp_async.Message(body=f"h{n}") for n in range(1000)])
    committed: list[int] = []

    def sink(batch: Any, batch_id: int) -> None:
        committed.append(batch.count())
        time.sleep(1)

    query = (
        spark.readStream.format("amqp")
        .option("url", broker.url)
        .option("address", "held")
        .option("receiveOn", "driver")
        .option("maxMessagesPerBatch", 100)
        .option("credit", 300)
        .load()
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    deadline = time.monotonic() + 60
    while len(committed) < 3 and time.monotonic() < deadline:
        time.sleep(0.1)
    query.stop()
    processed = sum(committed)
    # The runner closes its connection as Spark ends it, an instant after stop() returns: the messages it held
    # come back then.
    left: list[amqp_async.Message] = []
    deadline = time.monotonic() + 30
    while processed + len(left) < 1000 and time.monotonic() < deadline:
        left += drain(broker.url, "held", timeout=30)
        time.sleep(0.2)
    # Every message is either in a batch the sink saw or back in the queue; at most the batch being written when
    # the query stopped is in both (its commit never came).
    assert processed + len(left) - 1000 in range(0, 101)
    assert len({m.body for m in left}) == len(left)


def test_a_continuous_query_stopped_and_restarted_loses_nothing(
    spark: Any, broker: BrokerThread, tmp_path: Path
) -> None:
    """A query without AvailableNow: it follows the queue (an idle one gives empty micro-batches, each task
    waiting pollWaitMs for a first message), takes messages sent while it runs, is stopped in the middle of a
    batch and restarted from its checkpoint: every message arrives, and only the batch the stop interrupted twice
    (its messages were accepted when received, and the restart replays it from the log)."""
    seen: list[tuple[int, str]] = []

    def sink(batch: Any, batch_id: int) -> None:
        seen.extend((batch_id, row.message_id) for row in batch.select("message_id").collect())
        time.sleep(0.5)

    def start() -> Any:
        return (
            spark.readStream.format("amqp")
            .option("url", broker.url)
            .option("address", "followed")
            .option("maxMessagesPerBatch", 200)
            .option("numPartitions", 2)
            .option("pollWaitMs", 300)
            .option("logLocation", str(tmp_path / "log"))
            .load()
            .writeStream.foreachBatch(sink)
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .start()
        )

    query = start()
    deadline = time.monotonic() + 120
    while len(query.recentProgress) < 2 and time.monotonic() < deadline:  # idle: empty micro-batches
        time.sleep(0.1)
    assert query.isActive and len(query.recentProgress) >= 2 and not seen
    fill(broker.url, "followed", [amqp_async.Message(body="x", id=f"x-{n}") for n in range(1000)])
    while len(seen) < 400 and time.monotonic() < deadline:
        time.sleep(0.05)
    query.stop()
    before = len(seen)
    assert 400 <= before < 1000
    restarted = start()
    while len({message_id for _, message_id in seen}) < 1000 and time.monotonic() < deadline + 60:
        time.sleep(0.1)
    restarted.stop()
    counted = collections.Counter(message_id for _, message_id in seen)
    assert set(counted) == {f"x-{n}" for n in range(1000)}  # 0 lost
    duplicated = {message_id for message_id, times in counted.items() if times > 1}
    last_batch = max(batch for batch, _ in seen[:before])
    assert duplicated <= {message_id for batch, message_id in seen[:before] if batch == last_batch}
    assert all(times <= 2 for times in counted.values())
    assert drain(broker.url, "followed") == []


@pytest.mark.parametrize("failing_batch", [0, 1])
def test_a_batch_whose_sink_failed_is_replayed_from_the_log_at_restart(
    spark: Any, broker: BrokerThread, tmp_path: Path, failing_batch: int
) -> None:
    """The sink fails in micro-batch 0 (or 1), after its tasks accepted its messages; the query is restarted from
    its checkpoint. Before, a failure in batch 0 lost the batch: Spark does not checkpoint the start of the first
    batch and asked initialOffset() again, a new source id whose log was empty, so the tasks received afresh from
    a queue that no longer held those messages."""
    address = f"replayed-{failing_batch}"
    fill(broker.url, address, [amqp_async.Message(body="x", id=f"r-{n}") for n in range(20)])
    seen: list[str] = []
    failing = [True]

    def sink(batch: Any, batch_id: int) -> None:
        ids = [row.message_id for row in batch.select("message_id").collect()]
        if failing[0] and batch_id == failing_batch:
            raise RuntimeError("injected sink failure")
        seen.extend(ids)

    def start() -> Any:
        writer = read_until_empty(
            spark,
            broker.url,
            address,
            str(tmp_path / "checkpoint"),
            maxMessagesPerBatch=10,
            logLocation=str(tmp_path / "log"),
        )
        return writer.foreachBatch(sink).start()

    with pytest.raises(Exception, match="injected sink failure"):
        run_query(start, timeout=300)
    failing[0] = False
    run_query(start, timeout=300)
    assert sorted(seen) == sorted(f"r-{n}" for n in range(20))  # before, failing in batch 0: the first 10 lost
    assert drain(broker.url, address) == []


@pytest.mark.parametrize(("before", "after"), [(1, 2), (2, 1)])
def test_a_restart_with_another_partition_count_replays_the_batch_as_first_planned(
    spark: Any, broker: BrokerThread, tmp_path: Path, before: int, after: int
) -> None:
    """The sink writes micro-batch 0 and the query fails before Spark commits it (as a crash would); the query is
    restarted from its checkpoint with numPartitions ``after`` instead of ``before``, and the sink, idempotent per
    batch id as Spark's file sinks and Delta are, discards the replayed batch 0. The replay has the first run's
    rows. Before, with more partitions, the replay's new partition received and accepted 5 fresh messages, which
    the sink discarded with the batch: lost."""
    address = f"replanned-{before}-{after}"
    fill(broker.url, address, [amqp_async.Message(body="x", id=f"p-{n:02}") for n in range(30)])
    written: dict[int, list[str]] = {}
    replayed: list[str] = []
    failing = [True]

    def sink(batch: Any, batch_id: int) -> None:
        ids = sorted(row.message_id for row in batch.select("message_id").collect())
        if batch_id in written:
            replayed.extend(ids)  # written already: discarded
            return
        written[batch_id] = ids
        if failing[0]:
            raise RuntimeError("injected failure after the sink wrote the batch")

    def start(partitions: int) -> Any:
        writer = read_until_empty(
            spark,
            broker.url,
            address,
            str(tmp_path / "checkpoint"),
            maxMessagesPerBatch=10,
            numPartitions=partitions,
            logLocation=str(tmp_path / "log"),
        )
        return writer.foreachBatch(sink).start()

    with pytest.raises(Exception, match="injected failure after the sink wrote"):
        run_query(lambda: start(before), timeout=300)
    failing[0] = False
    run_query(lambda: start(after), timeout=300)
    assert replayed == written[0] and len(replayed) == 10  # before, 1 -> 2: 15 rows, 5 of them fresh
    delivered = sorted(message_id for ids in written.values() for message_id in ids)
    assert delivered == [f"p-{n:02}" for n in range(30)]  # before, 1 -> 2: 25 (5 lost)
    assert drain(broker.url, address) == []


def test_a_replay_whose_log_is_gone_fails_naming_log_location(spark: Any, broker: BrokerThread, tmp_path: Path) -> None:
    """The batch to replay was accepted at the broker when first run; without its log (deleted, moved, or another
    logLocation) it cannot be replayed. Before, its tasks received afresh and the batch was lost without a word."""
    address = "log-gone"
    fill(broker.url, address, [amqp_async.Message(body="x", id=f"g-{n}") for n in range(10)])
    failing = [True]

    def sink(batch: Any, batch_id: int) -> None:
        if failing[0] and batch.count():
            raise RuntimeError("injected sink failure")

    def start(log: str) -> Any:
        writer = read_until_empty(spark, broker.url, address, str(tmp_path / "checkpoint"), logLocation=log)
        return writer.foreachBatch(sink).start()

    with pytest.raises(Exception, match="injected sink failure"):
        run_query(lambda: start(str(tmp_path / "log")), timeout=300)
    failing[0] = False
    with pytest.raises(Exception, match=r"is not in logLocation=.*moved-log") as caught:
        run_query(lambda: start(str(tmp_path / "moved-log")), timeout=300)
    assert "cannot be replayed" in str(caught.value)


# --- transactional writes ------------------------------------------------------------------------------------------


def test_a_transactional_write_task_killed_mid_write_leaves_none_of_its_rows(
    spark: Any, broker: BrokerThread, faults: Path
) -> None:
    """The Python worker of partition 1 is killed with SIGKILL after every one of its rows was sent and accepted
    within its transaction, before the commit: none of them reaches the queue (the broker rolls back the
    transaction of a connection that ends), and Spark's retry writes each row once."""
    (faults / "write-settled@1").write_text("kill")
    count = 20_000
    rows = spark.range(count, numPartitions=2).selectExpr("cast(id as string) as body")
    rows.write.format("amqp").option("url", broker.url).option("address", "txn").option("transactional", "true").mode(
        "append"
    ).save()
    assert fired(str(faults), "write-settled@1")
    received = drain(broker.url, "txn")
    assert collections.Counter(m.body for m in received) == collections.Counter(str(n) for n in range(count))


def test_a_plain_write_task_killed_the_same_way_leaves_its_rows_twice(
    spark: Any, broker: BrokerThread, faults: Path
) -> None:
    """The contrast: without a transaction the killed task's rows were on the queue already, and the retry sends
    them again (with the same message ids)."""
    (faults / "write-settled@1").write_text("kill")
    count = 2_000
    rows = spark.range(count, numPartitions=2).selectExpr("cast(id as string) as body")
    rows.write.format("amqp").option("url", broker.url).option("address", "plain").mode("append").save()
    assert fired(str(faults), "write-settled@1")
    received = drain(broker.url, "plain")
    ids = collections.Counter(m.id for m in received)
    assert len(received) == count + count // 2 and len(ids) == count
    assert {message_id.split(":")[1] for message_id, times in ids.items() if times == 2} == {"1"}


@pytest.mark.interop
def test_a_transactional_write_to_rabbitmq_3_is_refused_at_save_and_start(
    spark: Any,
    rabbitmq_broker: Any,
    tmp_path: Path,
) -> None:
    rows = spark.range(10, numPartitions=1).selectExpr("cast(id as string) as body")
    refusal = r"option 'transactional'.*RabbitMQ 3\.x.*no transaction coordinator"
    with pytest.raises(Exception, match=refusal):
        rows.write.format("amqp").option("url", rabbitmq_broker.url).option("address", "/queue/txn").option(
            "transactional", "true"
        ).mode("append").save()
    # A streaming write: Spark makes the data source when the query starts, after start() returned; the query
    # ends there, with the refusal, before its first micro-batch writes anything.
    stream = spark.readStream.format("rate").load().selectExpr("cast(value as string) as body")
    query = (
        stream.writeStream.format("amqp")
        .option("url", rabbitmq_broker.url)
        .option("address", "/queue/txn")
        .option("transactional", "true")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    with pytest.raises(Exception, match=refusal):
        query.awaitTermination(120)
    assert query.lastProgress is None  # no micro-batch ran
    assert rabbitmq_broker.queue_depth("txn") in (None, 0)


# --- the driver-side mode's runner ----------------------------------------------------------------------------------

_HOLDING_RUNNER = """
import sys, time
from pyspark.sql.streaming.datasource import ReadMaxRows
from amqp_async.spark import MESSAGE_SCHEMA, AmqpDriverStreamReader
from amqp_async.spark._options import parse_options

reader = AmqpDriverStreamReader(parse_options({"url": sys.argv[1], "address": "held"}), MESSAGE_SCHEMA)
start = reader.initialOffset()
end = reader.latestOffset(start, ReadMaxRows(10))
print("holding", len(reader.partitions(start, end)[0].batch), flush=True)
time.sleep(600)  # as Spark's runner, blocked between calls, when Spark ends it
"""


@pytest.mark.interop
def test_sigterm_to_the_runner_closes_the_connection_and_gives_the_messages_back() -> None:
    with ProtonBroker() as proton_broker:
        from proton import Message as ProtonMessage

        for n in range(30):
            proton_broker.put("held", ProtonMessage(body=f"h{n}"))
        process = subprocess.Popen(
            [sys.executable, "-c", _HOLDING_RUNNER, proton_broker.url],
            env=spark_environment(),
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        with running(process):
            assert process.stdout is not None
            assert process.stdout.readline().split() == ["holding", "10"]
            process.send_signal(signal.SIGTERM)
            assert process.wait(15) == -signal.SIGTERM  # it still dies of SIGTERM, and promptly
        # A close frame, not a dropped transport: the broker takes the held messages back at once.
        assert [close.by for close in proton_broker.wait_closes(1, timeout=10)] == ["client"]
        assert sorted(m.body for m in drain(proton_broker.url, "held")) == sorted(f"h{n}" for n in range(30))
