"""Spark drivers the streaming tests run in processes of their own (a master of their own, or to be killed).

    python tests/spark_stream_program.py restart URL ADDRESS CHECKPOINT OUT [--receive-on MODE]
        [--stall-at-batch N MARKER]
    python tests/spark_stream_program.py cluster OUT_JSON WORKDIR NAME=URL [NAME=URL...]
    python tests/spark_stream_program.py speculation MASTER URL ADDRESS WORKDIR OUT_JSON

``restart``: stream a queue into a file, batch by batch (1000 messages at most): each micro-batch appends one line
``BATCH MESSAGE_ID`` per message to OUT, synced to disk, in a ``foreachBatch`` sink. With ``--stall-at-batch``, once
batch N is written the program creates MARKER and sleeps: the test kills it there, mid-batch (the sink has the
batch, Spark has not committed it). Without it the query runs with ``Trigger.AvailableNow`` to the end of the
queue and prints ``done``.

``cluster``: on ``local-cluster[2,1,1024]`` (two executors in JVMs of their own, each with its Python workers),
for each broker NAME at URL: 100,000 orders written in a batch, then read as a stream on the executors
(``numPartitions`` 2, batches of 50,000) into a memory table, every field checked; meanwhile every process holding
a connection to the broker is recorded (the driver's streaming source runner must hold none). Then the example
pipeline (examples/spark_pipeline.py, its ``main()``) on the same cluster. Spark's TaskSetManager logs each task's
size: the test reads them from this program's error output. The findings go to OUT_JSON.

``speculation``: on the standalone cluster at MASTER (workers on distinct hosts, so that Spark may run a copy of a
slow task on another one) with ``spark.speculation`` on: the queue read in batches of 2 partitions; a fault point
stalls the first attempt of partition 0 of batch 0 after it received. What the sink saw goes to OUT_JSON.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
import traceback
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))


def _session(master: str, config: dict[str, str] | None = None) -> Any:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from amqp_async.spark import AmqpDataSource

    builder = SparkSession.builder.master(master).config("spark.ui.enabled", "false")
    builder = builder.config("spark.ui.showConsoleProgress", "false")
    for key, value in (config or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(AmqpDataSource)
    return spark


def restart(argv: list[str]) -> None:
    from spark_support import read_until_empty, run_query

    url, address, checkpoint, out = argv[:4]
    rest = argv[4:]
    receive_on = "executors"
    stall_at = marker = None
    while rest:
        if rest[0] == "--receive-on":
            receive_on, rest = rest[1], rest[2:]
        elif rest[0] == "--stall-at-batch":
            stall_at, marker, rest = int(rest[1]), rest[2], rest[3:]
        else:
            raise SystemExit(f"unknown argument {rest[0]!r}")
    spark = _session("local[2]")

    def sink(batch: Any, batch_id: int) -> None:
        ids = [row.message_id for row in batch.select("message_id").collect()]
        with open(out, "a", encoding="utf-8") as file:
            file.writelines(f"{batch_id} {message_id}\n" for message_id in ids)
            file.flush()
            os.fsync(file.fileno())
        if batch_id == stall_at and marker is not None:
            with open(marker, "w", encoding="utf-8") as file:
                file.write(str(len(ids)))
            time.sleep(600)

    options: dict[str, Any] = {"numPartitions": 2, "maxMessagesPerBatch": 1000, "receiveOn": receive_on}
    if receive_on == "executors":
        options["logLocation"] = os.path.join(os.path.dirname(checkpoint), "log")

    def start() -> Any:
        return read_until_empty(spark, url, address, checkpoint, **options).foreachBatch(sink).start()

    run_query(start, timeout=None)
    print("done", flush=True)
    spark.stop()


def _log_task_sizes(spark: Any) -> None:
    """Have Spark log each task it starts, with its size ("Starting task ... N bytes)"), to the error output."""
    jvm = spark.sparkContext._jvm
    level = jvm.org.apache.logging.log4j.Level.INFO
    jvm.org.apache.logging.log4j.core.config.Configurator.setLevel("org.apache.spark.scheduler.TaskSetManager", level)


def cluster(argv: list[str]) -> None:
    from spark_support import ConnectionWatch, check_orders, orders, read_until_empty, run_query

    out, workdir = argv[:2]
    brokers = dict(argument.split("=", 1) for argument in argv[2:])
    count = 100_000
    spark = _session(
        "local-cluster[2,1,1024]",
        {"spark.sql.shuffle.partitions": "2", "spark.executorEnv.PYSPARK_PYTHON": sys.executable},
    )
    jvm_pid = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
    _log_task_sizes(spark)
    findings: dict[str, Any] = {"driver_jvm": jvm_pid}
    for name, url in brokers.items():
        address = "/queue/spark-cluster" if name == "rabbitmq" else "spark-cluster"
        where = urlsplit(url)
        orders(spark, count).write.format("amqp").option("url", url).option("address", address).mode("append").save()
        print(f"PHASE read {name}", file=sys.stderr, flush=True)
        started = time.monotonic()

        def start(url: str = url, address: str = address, name: str = name) -> Any:
            checkpoint, log = os.path.join(workdir, f"checkpoint-{name}"), os.path.join(workdir, f"log-{name}")
            writer = read_until_empty(
                spark, url, address, checkpoint, numPartitions=2, maxMessagesPerBatch=50_000, logLocation=log
            )
            return writer.format("memory").queryName(f"cluster_{name}").start()

        with ConnectionWatch(where.port or 5672, where.hostname or "127.0.0.1") as watch:
            query = run_query(start, timeout=600)
        print(f"PHASE end {name}", file=sys.stderr, flush=True)
        rows = spark.sql(f"select * from cluster_{name}").collect()
        finding: dict[str, Any] = {
            "seconds": time.monotonic() - started,
            "active": query.isActive,
            "exception": None if query.exception() is None else str(query.exception()),
            "rows": len(rows),
            "input_rows": sum(progress.numInputRows for progress in query.recentProgress),
            "distinct_ids": len({row.message_id for row in rows}),
            "delivery_counts": sorted({row.delivery_count for row in rows}),
            "samples": watch.samples,
            "holders": {str(pid): line for pid, line in watch.holders.items()},
        }
        try:
            check_orders(rows, count)
            finding["fields"] = "intact"
        except AssertionError:
            finding["fields"] = "not intact: " + traceback.format_exc(limit=-1)[-2000:]
        findings[name] = finding
    # The example pipeline, run as its users run it (its main() finds this session and stops it at the end).
    import contextlib
    import io

    sys.path.insert(0, str(ROOT / "examples"))
    import spark_pipeline

    printed = io.StringIO()
    arguments = ["--orders", "5000", "--parquet", os.path.join(workdir, "orders.parquet")]
    arguments += ["--checkpoint", os.path.join(workdir, "pipeline-checkpoint")]
    sys.argv = ["spark_pipeline.py", "--master", "local-cluster[2,1,1024]", *arguments]
    with contextlib.redirect_stdout(printed):
        spark_pipeline.main()
    findings["pipeline"] = printed.getvalue().splitlines()
    with open(out, "w", encoding="utf-8") as file:
        json.dump(findings, file)


def speculation(argv: list[str]) -> None:
    from spark_support import read_until_empty, run_query

    master, url, address, workdir, out = argv[:5]
    spark = _session(
        master,
        {
            "spark.executor.cores": "1",
            "spark.executor.memory": "1g",
            "spark.executorEnv.PYSPARK_PYTHON": sys.executable,
            "spark.executorEnv.AMQP_ASYNC_SPARK_FAILPOINTS": os.environ["AMQP_ASYNC_SPARK_FAILPOINTS"],
            "spark.speculation": "true",
            "spark.speculation.interval": "100ms",
            "spark.speculation.quantile": "0.5",
            "spark.speculation.multiplier": "2",
            "spark.speculation.minTaskRuntime": "1s",
        },
    )
    _log_task_sizes(spark)  # and which attempts run where, speculative ones included
    seen: list[tuple[int, str]] = []
    chosen: dict[int, list[str]] = {}
    log = os.path.join(workdir, "log")

    def sink(batch: Any, batch_id: int) -> None:
        seen.extend((batch_id, row.message_id) for row in batch.select("message_id").collect())
        # The log of this batch, before Spark commits it (and the source deletes it): the entry chosen for each
        # partition is named by the attempt that wrote it ("1-..." for Spark's attempt number 1).
        names = []
        for directory, _, files in os.walk(log):
            if re.search(rf"/{batch_id}/\d+$", directory):
                names += [name for name in files if name.startswith("chosen.")]
        chosen[batch_id] = sorted(names)

    def start() -> Any:
        checkpoint = os.path.join(workdir, "checkpoint")
        writer = read_until_empty(
            spark, url, address, checkpoint, numPartitions=2, maxMessagesPerBatch=1000, logLocation=log
        )
        return writer.foreachBatch(sink).start()

    query = run_query(start, timeout=300)
    with open(out, "w", encoding="utf-8") as file:
        json.dump(
            {
                "active": query.isActive,
                "exception": None if query.exception() is None else str(query.exception()),
                "seen": seen,
                "chosen": {str(batch): names for batch, names in chosen.items()},
            },
            file,
        )
    spark.stop()


def main(argv: list[str]) -> None:
    commands = {"restart": restart, "cluster": cluster, "speculation": speculation}
    commands[argv[0]](argv[1:])


if __name__ == "__main__":
    main(sys.argv[1:])
