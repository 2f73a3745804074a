"""A Spark pipeline over AMQP: read a queue as a stream, transform, write to another queue and to Parquet.

    pip install 'amqp-async[spark]'            # PySpark 4 and pyarrow; Spark needs Java 17
    python examples/spark_pipeline.py          # an embedded broker, 10,000 orders, one run to the end

Each order is a JSON body ``{"id": ..., "item": ..., "quantity": ..., "price": ...}``. The pipeline parses it,
computes the order's total, and writes each micro-batch twice: as messages (JSON bodies, with the total in an
application property) to the ``results`` queue, and as rows to Parquet files. The orders are received on the
executors, two competing receivers per micro-batch, each writing what it received to the write-ahead log before it
accepts it: stop the program at any point and run it again with the same ``--checkpoint`` (and ``--log``), and
nothing is lost (a batch that was being written when it stopped is written again: the results carry the order's
``message_id`` as ``correlation_id`` to find such repeats). On a cluster of several machines, ``--log`` must name
a directory every node sees (``hdfs://...``, ``s3://...``).

Options: ``--url`` (a broker; without it an embedded one is started and filled), ``--master`` (``local[2]``; the
tests run ``local-cluster[2,1,1024]`` too), ``--orders N``, ``--source``, ``--target``, ``--parquet DIR``,
``--checkpoint DIR``, ``--log DIR`` (the streaming read's write-ahead log; default: a directory beside the
checkpoint), ``--follow`` (keep running and wait for more orders instead of stopping at the end).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
from typing import Any

import anyio

import amqp_async
from amqp_async.broker import BrokerThread


def seed(url: str, address: str, count: int) -> None:
    """Put ``count`` orders on ``address``."""

    async def run() -> None:
        async with amqp_async.connect(url) as connection:
            sender = await connection.open_sender(address)
            trackers = []
            for number in range(count):
                order = {"id": number, "item": f"item-{number % 7}", "quantity": 1 + number % 5, "price": 2.5}
                trackers.append(await sender.submit(amqp_async.Message(body=json.dumps(order), id=f"order-{number}")))
            for tracker in trackers:
                await tracker

    anyio.run(run)


def run_pipeline(spark: Any, url: str, args: argparse.Namespace) -> None:
    from pyspark.sql import functions as F

    orders = (
        spark.readStream.format("amqp")
        .option("url", url)
        .option("address", args.source)
        .option("maxMessagesPerBatch", 5000)
        .option("numPartitions", 2)
        .option("logLocation", args.log)
        .load()
    )
    order_schema = "id long, item string, quantity int, price double"
    parsed = orders.select(
        F.col("message_id"), F.from_json(F.col("body").cast("string"), order_schema).alias("order")
    ).select("message_id", "order.*")
    totals = parsed.withColumn("total", F.col("quantity") * F.col("price"))

    def write_batch(batch: Any, batch_id: int) -> None:
        batch.persist()
        batch.select(
            F.to_json(F.struct("id", "item", "quantity", "total")).alias("body"),
            F.col("message_id").alias("correlation_id"),
            F.lit("application/json").alias("content_type"),
            F.create_map(F.lit("total"), F.col("total").cast("string")).alias("application_properties"),
        ).write.format("amqp").option("url", url).option("address", args.target).mode("append").save()
        batch.write.mode("append").parquet(args.parquet)
        batch.unpersist()

    writer = totals.writeStream.foreachBatch(write_batch).option("checkpointLocation", args.checkpoint)
    query = (writer if args.follow else writer.trigger(availableNow=True)).start()
    query.awaitTermination()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--orders", type=int, default=10_000)
    parser.add_argument("--source", default="orders")
    parser.add_argument("--target", default="results")
    parser.add_argument("--parquet")
    parser.add_argument("--checkpoint")
    parser.add_argument("--log")
    parser.add_argument("--follow", action="store_true")
    args = parser.parse_args()
    workdir = tempfile.mkdtemp(prefix="amqp-spark-")
    args.parquet = args.parquet or os.path.join(workdir, "orders.parquet")
    args.checkpoint = args.checkpoint or os.path.join(workdir, "checkpoint")
    args.log = args.log or os.path.join(os.path.dirname(os.path.abspath(args.checkpoint)), "amqp-log")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    from pyspark.sql import SparkSession

    from amqp_async.spark import AmqpDataSource

    with contextlib.ExitStack() as stack:
        url = args.url
        if url is None:
            url = stack.enter_context(BrokerThread()).url
            seed(url, args.source, args.orders)
        spark = SparkSession.builder.master(args.master).config("spark.ui.enabled", "false").getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
        spark.dataSource.register(AmqpDataSource)
        run_pipeline(spark, url, args)
        results = spark.read.format("amqp").option("url", url).option("address", args.target).load()
        print(f"results queue: {results.count()} messages (browsed)")
        print(f"parquet: {spark.read.parquet(args.parquet).count()} rows in {args.parquet}")
        spark.stop()


if __name__ == "__main__":
    main()
