"""The PySpark data source ``amqp``: batch and streaming reads and writes over the awaitable client.

>>> from amqp_async.spark import AmqpDataSource
>>> spark.dataSource.register(AmqpDataSource)
>>> stream = spark.readStream.format("amqp").option("url", "amqp://host").option("address", "orders").load()
>>> df.write.format("amqp").option("url", "amqp://host").option("address", "results").mode("append").save()

Needs PySpark 4.0 or later and pyarrow (``pip install amqp-async[spark]``). The options, the schema, the delivery
guarantees and how to deploy are in docs/spark.md. In short:

- a streaming read receives in the executors' tasks, each partition of each micro-batch on a connection of its
  own, and writes what it received to a write-ahead log before it accepts it (:mod:`._stream_reader`,
  :mod:`._stream_task`, :mod:`._log`): at-least-once across any failure, with the driver never touching a
  message. ``receiveOn=driver`` receives in Spark's streaming source runner instead, and accepts a micro-batch's
  messages once the sink has committed it (:mod:`._driver_stream_reader`);
- a batch read browses a queue (or consumes it, ``readMode=consume``) from the executors (:mod:`._batch_reader`);
- a write sends each partition from its executor and succeeds only once every message is accepted
  (:mod:`._writer`), with deterministic message ids to detect the resends of retried tasks; with
  ``transactional=true`` each task's messages are sent in one AMQP transaction, so a failed task leaves none.

The class is pickled by reference, so every executor imports ``amqp_async``: install the package on the nodes
(or ship it with ``--py-files``). Every connection is made lazily, in the process that uses it.
"""

from __future__ import annotations

try:
    from pyspark.sql.datasource import DataSource
except ImportError as exc:  # pragma: no cover - depends on the installation
    raise ImportError(
        "amqp_async.spark needs PySpark 4.0 or later and pyarrow: pip install 'amqp-async[spark]'"
    ) from exc

from collections.abc import MutableMapping

from pyspark.sql.types import StructType

from ._batch_reader import AmqpBatchReader
from ._driver_stream_reader import AmqpDriverStreamReader
from ._options import READ, STREAM_READ, WRITE, AmqpOptions, OptionError, parse_options
from ._schema import MESSAGE_SCHEMA, SchemaError, read_schema
from ._stream_reader import AmqpStreamReader
from ._writer import AmqpStreamWriter, AmqpWriter, SentMessages, refuse_overwrite

__all__ = [
    "MESSAGE_SCHEMA",
    "AmqpBatchReader",
    "AmqpDataSource",
    "AmqpDriverStreamReader",
    "AmqpStreamReader",
    "AmqpStreamWriter",
    "AmqpWriter",
    "OptionError",
    "SchemaError",
    "SentMessages",
]


class AmqpDataSource(DataSource):
    """The ``amqp`` data source. Register it with ``spark.dataSource.register(AmqpDataSource)``.

    Spark makes it at ``load()``, ``save()`` and ``start()`` with the query's options; they are validated then.

    Raises:
        OptionError: an unknown option, a malformed value, or one that does not apply to the operation.
        SchemaError: a read schema that does not narrow the message schema, or a DataFrame that cannot be
            written (no ``body`` column, an unknown column, a column of the wrong type).
        TransactionError: ``transactional=true`` with a peer that has no transaction coordinator (at ``save()``;
            a streaming write's query fails with it as it starts, before its first micro-batch).
    """

    def __init__(self, options: MutableMapping[str, str]) -> None:
        super().__init__(options)
        self.amqp_options: AmqpOptions = parse_options(options)

    @classmethod
    def name(cls) -> str:
        """The format name: ``amqp``."""
        return "amqp"

    def schema(self) -> StructType:
        """Every message field as a column (:data:`MESSAGE_SCHEMA`)."""
        return MESSAGE_SCHEMA

    def reader(self, schema: StructType) -> AmqpBatchReader:
        """A batch read."""
        self.amqp_options.check_for(READ)
        return AmqpBatchReader(self.amqp_options, read_schema(schema))

    def streamReader(self, schema: StructType) -> AmqpStreamReader | AmqpDriverStreamReader:
        """A streaming read: received on the executors (default) or, with ``receiveOn=driver``, on the driver."""
        options = self.amqp_options
        options.check_for(STREAM_READ)
        if options.receive_on == "driver":
            return AmqpDriverStreamReader(options, read_schema(schema))
        return AmqpStreamReader(options, read_schema(schema))

    def writer(self, schema: StructType, overwrite: bool) -> AmqpWriter:
        """A batch write (mode append; an AMQP node cannot be overwritten)."""
        self.amqp_options.check_for(WRITE)
        refuse_overwrite(overwrite)
        return AmqpWriter(self.amqp_options, schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> AmqpStreamWriter:
        """A streaming write."""
        self.amqp_options.check_for(WRITE)
        refuse_overwrite(overwrite)
        return AmqpStreamWriter(self.amqp_options, schema)
