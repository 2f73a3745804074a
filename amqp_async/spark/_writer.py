"""Batch and streaming writes: each Spark task sends its partition's rows on a connection of its own.

A task turns its rows into messages (:class:`~._schema.MessageBuilder`) on its own thread, and hands them, a
thousand at a time, to its connection's event loop, which transfers them as credit allows with up to
``maxInFlight`` unsettled at once (pipelined: no round trip per message). The task returns only when the peer has
settled every message: an outcome other than accepted, a detached link or a lost connection fails the task, and
Spark retries it or aborts the job. A retried task sends its rows again: at-least-once. Each message without a
``message_id`` column value gets a deterministic id, ``{write}:{partition}:{row}`` for a batch write and
``{query}:{batch}:{partition}:{row}`` for a streaming one, so a sink with duplicate detection (or a reader, by
``message_id``) can drop the resent ones.

Nothing can be taken back from a queue: Spark's ``abort`` only reports what had been sent.
"""

from __future__ import annotations

import collections
import logging
import uuid
from collections.abc import Iterable, Iterator

import attrs
import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from ..client import Connection, Sender, Tracker
from ..message import Message
from ._links import close_quietly, open_sender
from ._loop import LoopThread
from ._options import AmqpOptions, OptionError
from ._schema import MessageBuilder, check_write_schema

__all__ = ["AmqpStreamWriter", "AmqpWriter", "SentMessages"]

log = logging.getLogger("amqp_async.spark")

_CHUNK = 1000


@attrs.frozen
class SentMessages(WriterCommitMessage):
    """What one task sent: ``count`` messages, every one accepted by the peer."""

    partition: int
    count: int


class _Window:
    """The trackers of messages transferred and not yet settled, oldest first; at most ``size`` of them."""

    def __init__(self, sender: Sender, size: int) -> None:
        self.sender = sender
        self.size = size
        self.trackers: collections.deque[Tracker] = collections.deque()

    async def submit(self, payloads: list[bytes]) -> None:
        trackers = self.trackers
        sender = self.sender
        for payload in payloads:
            while trackers and (trackers[0].done or len(trackers) >= self.size):
                await trackers.popleft()  # raises MessageRejected, MessageReleased... : the task fails
            trackers.append(await sender.submit(payload))

    async def settle_all(self) -> None:
        trackers = self.trackers
        while trackers:
            await trackers.popleft()


async def _open(options: AmqpOptions) -> tuple[Connection, _Window]:
    connection, sender = await open_sender(options)
    return connection, _Window(sender, int(options.get("maxInFlight", 1000)))


def _payloads(builder: MessageBuilder, batches: Iterable[pa.RecordBatch]) -> Iterator[list[bytes]]:
    """Encoded messages, a chunk at a time, made on the task's thread."""
    chunk: list[bytes] = []
    encode = Message.encode
    for batch in batches:
        for message in builder.messages(batch):
            chunk.append(encode(message))
            if len(chunk) >= _CHUNK:
                yield chunk
                chunk = []
    if chunk:
        yield chunk


def send_partition(options: AmqpOptions, builder: MessageBuilder, batches: Iterable[pa.RecordBatch]) -> int:
    """Send the rows of ``batches`` and wait until the peer has accepted each; return how many were sent.

    Raises:
        SchemaError: a row cannot become a message (nothing after it is sent).
        MessageRejected, MessageReleased, MessageModified: the peer did not accept a message.
        ConnectionError, LinkError, DeliveryInDoubt: the connection or link failed.
    """
    loop = LoopThread("amqp-async-spark-write")
    connection: Connection | None = None
    try:
        connection, window = loop.call(_open, options, timeout=options.connect_timeout * 2 + 5)
        for chunk in _payloads(builder, batches):
            loop.call(window.submit, chunk)
        loop.call(window.settle_all)
        return builder.rows
    finally:
        if connection is not None:
            loop.call(close_quietly, connection, timeout=10)
        loop.close()


def _sent(messages: list[WriterCommitMessage | None]) -> int:
    return sum(message.count for message in messages if isinstance(message, SentMessages))


def _task() -> tuple[int, int]:
    context = TaskContext.get()
    if context is None:
        return 0, 0
    return context.partitionId(), context.attemptNumber()


class AmqpWriter(DataSourceArrowWriter):
    """The ``amqp`` sink for batch writes (``df.write.format("amqp")...save()``)."""

    def __init__(self, options: AmqpOptions, schema: StructType) -> None:
        check_write_schema(schema)
        MessageBuilder(schema, "", need_to=options.address is None)  # refuse a missing 'to' column at save()
        self._options = options
        self._schema = schema
        #: made once, on the driver: a retried task sends the same ids.
        self._write_id = uuid.uuid4().hex

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SentMessages:
        """Send this task's rows and wait for every outcome."""
        partition, attempt = _task()
        prefix = f"{self._write_id}:{partition}"
        options = self._options
        builder = MessageBuilder(
            self._schema, prefix, durable=bool(options.get("durable")), need_to=options.address is None
        )
        count = send_partition(options, builder, iterator)
        log.info("partition %d (attempt %d) sent %d messages", partition, attempt, count)
        return SentMessages(partition, count)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Every task succeeded: every message was accepted."""
        log.info("write %s: %d messages accepted", self._write_id, _sent(messages))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """The job failed: the messages sent by tasks that succeeded stay sent (a queue cannot take them back)."""
        sent = _sent(messages)
        log.warning("write %s aborted; %d messages had been accepted and stay sent", self._write_id, sent)


class AmqpStreamWriter(DataSourceStreamArrowWriter):
    """The ``amqp`` sink for streaming writes (``writeStream.format("amqp")``): each micro-batch is written as a
    batch write is, with ids from the query, the batch, the partition and the row."""

    def __init__(self, options: AmqpOptions, schema: StructType) -> None:
        check_write_schema(schema)
        MessageBuilder(schema, "", need_to=options.address is None)
        self._options = options
        self._schema = schema

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SentMessages:
        """Send this task's rows of the micro-batch and wait for every outcome."""
        context = TaskContext.get()
        partition, _ = _task()
        query = batch = "0"
        if context is not None:
            query = context.getLocalProperty("sql.streaming.queryId") or query
            batch = context.getLocalProperty("streaming.sql.batchId") or batch
        options = self._options
        builder = MessageBuilder(
            self._schema,
            f"{query}:{batch}:{partition}",
            durable=bool(options.get("durable")),
            need_to=options.address is None,
        )
        return SentMessages(partition, send_partition(options, builder, iterator))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Every task of micro-batch ``batchId`` succeeded."""
        log.info("batch %d: %d messages accepted", batchId, _sent(messages))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Micro-batch ``batchId`` failed; what its successful tasks sent stays sent (at-least-once)."""
        log.warning("batch %d aborted; %d messages stay sent", batchId, _sent(messages))


def refuse_overwrite(overwrite: bool) -> None:
    """An AMQP node cannot be overwritten: only mode ``append`` writes."""
    if overwrite:
        raise OptionError("an AMQP node cannot be overwritten: use mode 'append'")
