"""Batch and streaming writes: each Spark task sends its partition's rows on a connection of its own.

A task turns its rows into messages (:class:`~._schema.MessageBuilder`) on its own thread, and hands them, a
thousand at a time, to its connection's event loop, which transfers them as credit allows with up to
``maxInFlight`` unsettled at once (pipelined: no round trip per message). The task returns only when the peer has
settled every message: an outcome other than accepted, a detached link or a lost connection fails the task, and
Spark retries it or aborts the job. A retried task sends its rows again: at-least-once. Each message without a
``message_id`` column value gets a deterministic id, ``{write}:{partition}:{row}`` for a batch write and
``{query}:{batch}:{partition}:{row}`` for a streaming one, so a sink with duplicate detection (or a reader, by
``message_id``) can drop the resent ones.

With ``transactional=true`` each task declares one AMQP transaction (§4) on its connection, sends every row
within it, and commits it once the peer has accepted them all; a task that fails rolls it back (and a task that
dies leaves it to the peer, which rolls back the transactions of a connection that ends, §4.2). So a failed task
leaves none of its rows on the queue, and Spark's retry sends each row once. One window stays: a task that dies
after its commit and before Spark records its success is run again, and its rows come twice (with the same ids).
A peer without a transaction coordinator (RabbitMQ 3.x) is refused when the write starts (at ``save()``; a
streaming query fails with it as it starts): :func:`~._links.check_transactions`.

Otherwise nothing can be taken back from a queue: Spark's ``abort`` only reports what had been sent.
"""

from __future__ import annotations

import collections
import logging
import uuid
from collections.abc import Iterable, Iterator

import anyio
import attrs
import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from ..client import Connection, Sender, Tracker, Transaction
from ..errors import LinkTimeout
from ..message import Message
from ._failpoints import failpoint
from ._links import check_transactions, close_quietly, open_sender
from ._loop import LoopThread
from ._options import AmqpOptions, OptionError
from ._schema import MessageBuilder, check_write_schema

__all__ = ["AmqpStreamWriter", "AmqpWriter", "SentMessages"]

log = logging.getLogger("amqp_async.spark")

_CHUNK = 1000
#: How long a write task waits for credit or an outcome before it fails (``sendTimeoutMs``; 0: for ever).
DEFAULT_SEND_TIMEOUT_MS = 120_000


@attrs.frozen
class SentMessages(WriterCommitMessage):
    """What one task sent: ``count`` messages, every one accepted by the peer."""

    partition: int
    count: int


class _Window:
    """The trackers of messages transferred and not yet settled, oldest first; at most ``size`` of them.

    ``stall``: the most seconds one wait may take, for credit, for the oldest message's outcome or for the
    transaction's commit (None: no bound). A peer that holds the task back longer (a full queue whose broker
    withholds credit, a peer that never settles) fails it with :class:`~amqp_async.LinkTimeout`, rather than leave
    it waiting for ever: heartbeats keep such a connection alive.
    """

    def __init__(self, sender: Sender, size: int, stall: float | None = None) -> None:
        self.sender = sender
        self.size = size
        self.stall = stall
        self.trackers: collections.deque[Tracker] = collections.deque()
        #: the transaction every message is sent in (``transactional=true``), else None.
        self.transaction: Transaction | None = None
        #: messages the peer has settled (accepted) so far.
        self.settled = 0

    async def begin(self) -> None:
        """Declare the transaction the messages go in (§4.3)."""
        self.transaction = await self.sender.connection.transaction()

    async def submit(self, payloads: list[bytes]) -> None:
        trackers = self.trackers
        sender = self.sender
        transaction = self.transaction
        for payload in payloads:
            while trackers and (trackers[0].done or len(trackers) >= self.size):
                await self._settle_oldest()  # raises MessageRejected, MessageReleased... : the task fails
            if sender.credit > 0 or self.stall is None:
                trackers.append(await sender.submit(payload, transaction=transaction))
                continue
            with anyio.move_on_after(self.stall):  # cancelled while it waits for credit, it sent nothing
                trackers.append(await sender.submit(payload, transaction=transaction))
                continue
            raise self._stalled("credit to send")

    async def settle_all(self) -> None:
        while self.trackers:
            await self._settle_oldest()

    async def _settle_oldest(self) -> None:
        tracker = self.trackers[0]
        if tracker.done or self.stall is None:
            await tracker
        else:
            with anyio.move_on_after(self.stall):
                await tracker
            if not tracker.done:
                raise self._stalled("the outcome of a message it sent")
        self.trackers.popleft()
        self.settled += 1

    def _stalled(self, waited_for: str) -> LinkTimeout:
        return LinkTimeout(
            f"the peer gave no {waited_for} for {self.stall:g} s (option sendTimeoutMs): {self.settled} of the "
            f"task's messages were settled, {len(self.trackers)} wait for their outcome. A queue at its limit "
            "whose broker withholds credit (the embedded broker's --max-queue-depth with --when-full block) holds "
            "a write back until consumers take messages"
        )

    async def commit(self) -> None:
        """Commit the transaction, if any: its messages reach the queue now (§4.4).

        Raises:
            LinkTimeout: the coordinator gave no outcome of the discharge within ``stall`` seconds (a peer that
                never answers it, its heartbeats keeping the connection alive, held the task for ever).
        """
        transaction = self.transaction
        if transaction is None:
            return
        if self.stall is None:
            await transaction.commit()
            return
        with anyio.move_on_after(self.stall):
            await transaction.commit()
            return
        raise LinkTimeout(
            f"the peer gave no outcome of the transaction's commit for {self.stall:g} s (option sendTimeoutMs): "
            f"whether the task's {self.settled} messages reached the queue is unknown (the peer rolls the "
            "transaction back as the connection ends, unless it committed it: then Spark's retry sends them again)"
        )

    async def roll_back(self) -> None:
        """Roll the transaction back, if one is active: none of its messages reach the queue."""
        transaction = self.transaction
        if transaction is not None and transaction.state == "active":
            await transaction.rollback()


async def _open(options: AmqpOptions) -> tuple[Connection, _Window]:
    connection, sender = await open_sender(options)
    stall = int(options.get("sendTimeoutMs", DEFAULT_SEND_TIMEOUT_MS))
    return connection, _Window(sender, int(options.get("maxInFlight", 1000)), stall / 1000.0 if stall else None)


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

    With the ``transactional`` option, every message goes in one transaction, committed once all are accepted
    and rolled back when anything fails.

    Raises:
        SchemaError: a row cannot become a message (nothing after it is sent).
        MessageRejected, MessageReleased, MessageModified: the peer did not accept a message.
        ConnectionError, LinkError, DeliveryInDoubt: the connection or link failed.
        TransactionError: the transaction could not be declared, or was rolled back instead of committed
            (TransactionRolledBack), or its outcome is unknown (TransactionInDoubt).
    """
    loop = LoopThread("amqp-async-spark-write")
    connection: Connection | None = None
    window: _Window | None = None
    partition = builder.partition
    try:
        connection, window = loop.call(_open, options, timeout=options.connect_timeout * 2 + 5)
        if options.get("transactional"):
            loop.call(window.begin, timeout=options.connect_timeout * 2 + 5)
        for chunk in _payloads(builder, batches):
            loop.call(window.submit, chunk)
            failpoint("write-chunk", partition)
        loop.call(window.settle_all)
        failpoint("write-settled", partition)
        loop.call(window.commit)
        return builder.rows
    except BaseException:
        if window is not None and connection is not None:
            try:
                loop.call(window.roll_back, timeout=10)
            except Exception as exc:  # the error that stopped the write is the one to report
                log.warning("rolling back the write's transaction failed (the peer rolls it back): %r", exc)
        raise
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
        refuse_without_transactions(options)
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
            self._schema,
            prefix,
            durable=bool(options.get("durable")),
            need_to=options.address is None,
            partition=partition,
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
        refuse_without_transactions(options)
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
            partition=partition,
        )
        return SentMessages(partition, send_partition(options, builder, iterator))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Every task of micro-batch ``batchId`` succeeded."""
        log.info("batch %d: %d messages accepted", batchId, _sent(messages))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Micro-batch ``batchId`` failed; what its successful tasks sent stays sent (at-least-once)."""
        log.warning("batch %d aborted; %d messages stay sent", batchId, _sent(messages))


def refuse_without_transactions(options: AmqpOptions) -> None:
    """With ``transactional=true``, make sure on the driver, as the write starts (at ``save()``; for a streaming
    write when its query starts, before the first micro-batch), that the peer has a transaction coordinator, rather
    than in every task.

    Raises:
        TransactionError: it has none (RabbitMQ 3.x), or refused a declare.
        ConnectionError: it cannot be reached.
    """
    if not options.get("transactional"):
        return
    loop = LoopThread("amqp-async-spark-check")
    try:
        loop.call(check_transactions, options, timeout=options.connect_timeout * 3 + 5)
    finally:
        loop.close()


def refuse_overwrite(overwrite: bool) -> None:
    """An AMQP node cannot be overwritten: only mode ``append`` writes."""
    if overwrite:
        raise OptionError("an AMQP node cannot be overwritten: use mode 'append'")
