"""The streaming read on the executors of ``local-cluster[2,1,1024]``: 100,000 messages from the embedded broker and
from RabbitMQ 3.10, in a Spark driver of its own (tests/spark_stream_program.py ``cluster``).

The longest test of the suite: tests/conftest.py hands the Spark files to a pytest-xdist worker first.
"""

from __future__ import annotations

import json
import pickle
import re
from pathlib import Path
from typing import Any

import pytest
from spark_support import broker_fixture, drain, failure_of, run_program, spark_environment  # noqa: F401 -- the fixture "broker"

from amqp_async.broker import BrokerThread

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.mark.interop
def test_100k_orders_read_on_the_executors_of_a_local_cluster(
    broker: BrokerThread,
    rabbitmq_broker: Any,
    tmp_path: Path,
) -> None:
    """On ``local-cluster[2,1,1024]``, against the embedded broker and RabbitMQ 3.10: 100,000 orders written, then
    read as a stream with 2 partitions in batches of 50,000, every field intact; the streaming source runner (the
    driver's Python process) never holds a connection to the broker, the executors' Python workers do; each task
    Spark starts stays small. And the example pipeline, on the same cluster."""
    out = tmp_path / "findings.json"
    result = run_program(
        "cluster",
        str(out),
        str(tmp_path),
        f"embedded={broker.url}",
        f"rabbitmq={rabbitmq_broker.url}",
        env=spark_environment(),
        timeout=900,
    )
    assert result.returncode == 0, failure_of(result)
    findings = json.loads(out.read_text())
    for name in ("embedded", "rabbitmq"):
        finding = findings[name]
        assert finding["exception"] is None and not finding["active"]
        assert finding["rows"] == finding["input_rows"] == finding["distinct_ids"] == 100_000
        assert finding["fields"] == "intact"
        assert finding["delivery_counts"] == [0]
        holders = finding["holders"].values()
        assert finding["samples"] > 10 and holders, "no connection to the broker was seen while the query ran"
        assert not [line for line in holders if "python_streaming_source_runner" in line]
        assert all(line.endswith("-m pyspark.daemon pyspark.worker") for line in holders), holders
    assert drain(broker.url, "spark-cluster") == []
    assert rabbitmq_broker.wait_queue_depth("spark-cluster", 0) == 0
    pipeline = findings["pipeline"]
    assert pipeline[0] == "results queue: 5000 messages (browsed)" and pipeline[1].startswith("parquet: 5000 rows")
    # Every task Spark started, read tasks of batches of 50,000 included, carries a few KB: Spark's own
    # description (local properties, the stage's references) and a partition of a few hundred bytes.
    reading = re.findall(r"PHASE read (\w+)\n(.*?)PHASE end", result.stderr, re.S)
    sizes = [int(size) for _, text in reading for size in re.findall(r"Starting task .*? (\d+) bytes\)", text)]
    assert len(sizes) >= 4, result.stderr[-3000:]
    assert max(sizes) < 16_000
    from amqp_async.spark._stream_task import StreamPartition

    assert len(pickle.dumps(StreamPartition("f" * 32, 123, 1, 25_000, str(tmp_path / "log"), 1.0, "host"))) < 500
