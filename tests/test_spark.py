"""The ``amqp`` data source on a real Spark (PySpark 4, ``local[2,2]``): end to end, faults with exact counts.

Peers: the embedded broker, RabbitMQ 3.10 (its AMQP 1.0 plugin) and python-qpid-proton's reactor (as a rejecting
peer). One SparkSession serves the module (its JVM takes seconds to start); the kill-and-restart test and the
``local-cluster`` pipeline run Spark drivers of their own, in subprocesses.
"""

from __future__ import annotations

import collections
import datetime
import os
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from proton_broker import ProtonBroker
from rabbitmq import rabbitmq_broker  # noqa: F401 -- the fixture
from spark_support import CuttableProxy, drain, fill, new_session, running, spark_environment
from tls_certs import make_ca, make_cert

import amqp_async
from amqp_async.broker import BrokerThread

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent
UTC = datetime.timezone.utc


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    session = new_session()
    yield session
    session.stop()


@pytest.fixture
def broker() -> Iterator[BrokerThread]:
    with BrokerThread() as running_broker:
        yield running_broker


def orders(spark: Any, count: int, partitions: int = 2) -> Any:
    """``count`` rows with most message fields set, each a function of its ``n``."""
    return spark.range(count, numPartitions=partitions).selectExpr(
        "concat('order-', id) as body",
        "concat('subject-', id % 7) as subject",
        "'text/plain' as content_type",
        "cast(id % 10 as int) as priority",
        "id % 2 = 0 as durable",
        "cast(3600000 as bigint) as ttl",  # an hour: the broker expires messages (§3.2.1), none may expire here
        "timestamp_seconds(1700000000 + id) as creation_time",
        "concat('group-', id % 3) as group_id",
        "id as group_sequence",
        "map('n', cast(id as string), 'kind', 'order') as application_properties",
        "map('x-opt-shard', cast(id % 4 as string)) as message_annotations",
    )


def stream_to_memory(spark: Any, url: str, address: str, name: str, tmp_path: Path, **options: Any) -> Any:
    """Read ``address`` as a stream until it is empty (Trigger.AvailableNow) into the memory table ``name``."""
    reader = spark.readStream.format("amqp").option("url", url).option("address", address)
    for key, value in options.items():
        reader = reader.option(key, value)
    query = (
        reader.load()
        .writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(tmp_path / f"checkpoint-{name}"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    assert not query.isActive, "the AvailableNow query did not end"
    return query


def check_orders(rows: list[Any], count: int) -> None:
    """Every order 0..count-1 arrived once, each field as written."""
    assert len(rows) == count
    by_n = {int(row.application_properties["n"]): row for row in rows}
    assert sorted(by_n) == list(range(count))
    for n, row in by_n.items():
        assert row.body == f"order-{n}".encode()
        assert row.body_type == "string"
        assert row.subject == f"subject-{n % 7}"
        assert row.content_type == "text/plain"
        assert row.priority == n % 10
        assert row.durable is (n % 2 == 0)
        assert 3_000_000 < row.ttl <= 3_600_000  # the broker passes on the time left (§3.2.1: the reduced ttl)
        assert row.creation_time.replace(tzinfo=UTC) == datetime.datetime.fromtimestamp(1_700_000_000 + n, UTC)
        assert row.group_id == f"group-{n % 3}"
        assert row.group_sequence == n
        assert row.application_properties == {"n": str(n), "kind": "order"}
        assert row.message_annotations == {"x-opt-shard": str(n % 4)}
        assert row.message_id_type == "string"


# --- end to end ----------------------------------------------------------------------------------------------------


def test_100k_rows_written_in_a_batch_arrive_intact_through_a_streaming_read(
    spark: Any, broker: BrokerThread, tmp_path: Path
) -> None:
    orders(spark, 100_000).write.format("amqp").option("url", broker.url).option("address", "orders").mode(
        "append"
    ).save()
    query = stream_to_memory(spark, broker.url, "orders", "e2e_embedded", tmp_path, maxMessagesPerBatch=20_000)
    rows = spark.sql("select * from e2e_embedded").collect()
    check_orders(rows, 100_000)
    assert len({row.message_id for row in rows}) == 100_000
    assert {row.delivery_count for row in rows} == {0}
    assert sum(progress["numInputRows"] for progress in query.recentProgress) == 100_000
    assert drain(broker.url, "orders") == []  # every message was accepted at commit


@pytest.mark.interop
def test_100k_rows_through_rabbitmq(spark: Any, rabbitmq_broker: Any, tmp_path: Path) -> None:  # noqa: F811
    url = rabbitmq_broker.url
    orders(spark, 100_000).write.format("amqp").option("url", url).option("address", "/queue/spark-e2e").mode(
        "append"
    ).save()
    assert rabbitmq_broker.wait_queue_depth("spark-e2e", 100_000) == 100_000
    stream_to_memory(spark, url, "/queue/spark-e2e", "e2e_rabbitmq", tmp_path, maxMessagesPerBatch=20_000)
    rows = spark.sql("select * from e2e_rabbitmq").collect()
    check_orders(rows, 100_000)
    assert rabbitmq_broker.wait_queue_depth("spark-e2e", 0) == 0


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


def test_a_query_killed_mid_batch_restarts_from_its_checkpoint_losing_nothing(
    broker: BrokerThread, tmp_path: Path
) -> None:
    count = 5_000
    fill(broker.url, "killed", [amqp_async.Message(body=f"k{n}", id=f"k-{n}") for n in range(count)])
    program = [sys.executable, str(ROOT / "tests" / "spark_stream_program.py")]
    arguments = [broker.url, "killed", str(tmp_path / "checkpoint"), str(tmp_path / "out.txt")]
    marker = tmp_path / "stalled"
    environment = spark_environment()
    process = subprocess.Popen(
        [*program, *arguments, "--stall-at-batch", "2", str(marker)],
        env=environment,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    with running(process):
        deadline = time.monotonic() + 180
        while not marker.exists():
            assert process.poll() is None, process.stdout.read() if process.stdout else ""
            assert time.monotonic() < deadline, "the program never reached batch 2"
            time.sleep(0.2)
        os.killpg(process.pid, signal.SIGKILL)  # driver, runner and workers: mid-batch, before Spark's commit
        process.wait(30)
    killed_lines = (tmp_path / "out.txt").read_text().split("\n")
    interrupted = {line.split()[1] for line in killed_lines if line.startswith("2 ")}
    assert len(interrupted) == int(marker.read_text()) == 1000

    finished = subprocess.run(
        [*program, *arguments], env=environment, capture_output=True, text=True, timeout=300, check=False
    )
    assert "done" in finished.stdout, finished.stdout + finished.stderr
    lines = [line.split() for line in (tmp_path / "out.txt").read_text().splitlines()]
    seen = collections.Counter(message_id for _, message_id in lines)
    assert set(seen) == {f"k-{n}" for n in range(count)}  # 0 lost
    duplicates = {message_id for message_id, times in seen.items() if times > 1}
    assert duplicates == interrupted  # exactly the interrupted batch, once more
    assert all(times <= 2 for times in seen.values())
    assert len(lines) == count + len(interrupted)
    assert drain(broker.url, "killed") == []


def test_a_dropped_connection_fails_the_query_and_a_restart_loses_nothing(
    spark: Any, broker: BrokerThread, tmp_path: Path
) -> None:
    count = 3_000
    fill(broker.url, "dropped", [amqp_async.Message(body=f"d{n}", id=f"d-{n}") for n in range(count)])
    host, port = broker.url.removeprefix("amqp://").rsplit(":", 1)
    seen: list[tuple[int, str]] = []
    with CuttableProxy(host, int(port)) as proxy:

        def sink(batch: Any, batch_id: int) -> None:
            seen.extend((batch_id, row.message_id) for row in batch.select("message_id").collect())
            if batch_id == 1:
                proxy.cut()  # the network fails while the batch is being written

        def start() -> Any:
            return (
                spark.readStream.format("amqp")
                .option("url", proxy.url())
                .option("address", "dropped")
                .option("maxMessagesPerBatch", 500)
                .load()
                .writeStream.foreachBatch(sink)
                .option("checkpointLocation", str(tmp_path / "checkpoint"))
                .trigger(availableNow=True)
                .start()
            )

        first = start()
        with pytest.raises(Exception, match=r"amqp:connection|connection"):
            first.awaitTermination(120)
        assert first.exception() is not None
        before = len(seen)
        second = start()
        second.awaitTermination(120)
        assert second.exception() is None
    counted = collections.Counter(message_id for _, message_id in seen)
    assert set(counted) == {f"d-{n}" for n in range(count)}  # 0 lost
    duplicated = {message_id for message_id, times in counted.items() if times > 1}
    in_flight = {message_id for batch_id, message_id in seen[:before] if batch_id == 1}
    assert duplicated <= in_flight and len(in_flight) == 500  # only the batch the drop interrupted, at most once
    assert all(times <= 2 for times in counted.values())
    assert drain(broker.url, "dropped") == []


@pytest.mark.interop
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


# --- bad input -----------------------------------------------------------------------------------------------------


def test_a_broker_that_is_down_fails_the_query_with_the_connection_error(spark: Any, tmp_path: Path) -> None:
    with BrokerThread() as gone:
        url = gone.url
    started = time.monotonic()
    rows = spark.range(5, numPartitions=1).selectExpr("cast(id as string) as body")
    with pytest.raises(
        Exception, match=r"amqp-async:io: cannot connect to amqp://127\.0\.0\.1:\d+: connection refused"
    ):
        rows.write.format("amqp").option("url", url).option("address", "q").mode("append").save()
    query = (
        spark.readStream.format("amqp")
        .option("url", url)
        .option("address", "q")
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
    with pytest.raises(Exception, match="column 'colour' is not a message field"):
        good.selectExpr("body", "'red' as colour").write.format("amqp").option("address", "q").mode("append").save()
    with pytest.raises(Exception, match="cannot be overwritten"):
        good.write.format("amqp").option("address", "q").mode("overwrite").save()
    with pytest.raises(Exception, match="option 'readMode' does not apply to a write"):
        good.write.format("amqp").option("address", "q").option("readMode", "consume").mode("append").save()
    assert drain(broker.url, "q") == []


def test_stopping_a_query_gives_its_uncommitted_messages_back(spark: Any, broker: BrokerThread, tmp_path: Path) -> None:
    fill(broker.url, "held", [amqp_async.Message(body=f"h{n}") for n in range(1000)])
    committed: list[int] = []

    def sink(batch: Any, batch_id: int) -> None:
        committed.append(batch.count())
        time.sleep(1)

    query = (
        spark.readStream.format("amqp")
        .option("url", broker.url)
        .option("address", "held")
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


# --- past one machine ------------------------------------------------------------------------------------------------


def test_the_example_pipeline_on_a_local_cluster(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "examples" / "spark_pipeline.py"),
            "--master",
            "local-cluster[2,1,1024]",
            "--orders",
            "5000",
            "--parquet",
            str(tmp_path / "orders.parquet"),
            "--checkpoint",
            str(tmp_path / "checkpoint"),
        ],
        env=spark_environment(),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr[-5000:]
    assert "results queue: 5000 messages" in result.stdout
    assert "parquet: 5000 rows" in result.stdout


_HOLDING_RUNNER = """
import sys, time
from pyspark.sql.streaming.datasource import ReadMaxRows
from amqp_async.spark import MESSAGE_SCHEMA, AmqpStreamReader
from amqp_async.spark._options import parse_options

reader = AmqpStreamReader(parse_options({"url": sys.argv[1], "address": "held"}), MESSAGE_SCHEMA)
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
