"""A Spark driver for the kill-and-restart test: stream a queue into a file, batch by batch.

    python tests/spark_stream_program.py URL ADDRESS CHECKPOINT OUT [--stall-at-batch N MARKER]

Each micro-batch (1000 messages at most) appends one line ``BATCH MESSAGE_ID`` per message to OUT, synced to disk,
in a ``foreachBatch`` sink. With ``--stall-at-batch``, once batch N is written the program creates MARKER and
sleeps: the test kills it there, mid-batch (the sink has the batch, Spark has not committed it). Without it the
query runs with ``Trigger.AvailableNow`` to the end of the queue and prints ``done``.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any


def main(argv: list[str]) -> None:
    url, address, checkpoint, out = argv[:4]
    stall_at = int(argv[5]) if len(argv) > 4 and argv[4] == "--stall-at-batch" else None
    marker = argv[6] if stall_at is not None else None
    os.environ["PYSPARK_PYTHON"] = sys.executable

    from pyspark.sql import SparkSession

    from amqp_async.spark import AmqpDataSource

    spark = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(AmqpDataSource)

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

    query = (
        spark.readStream.format("amqp")
        .option("url", url)
        .option("address", address)
        .option("maxMessagesPerBatch", 1000)
        .load()
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    print("done", flush=True)
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1:])
