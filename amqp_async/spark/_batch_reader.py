"""Batch reads: a snapshot of what a queue holds, browsed (default) or consumed.

Each partition is read by a Spark task on an executor, with a connection of its own. The task asks for a window of
messages at a time and drains the link (§2.6.7), so the read ends when the queue has nothing more to give: it is a
snapshot of what the queue holds while it is read.

- ``readMode=browse`` (default): one partition, a receiver with distribution-mode ``copy`` (§3.5.7): the messages
  are seen and stay in the queue. The peer must support browsing (the embedded broker and Qpid brokers do;
  RabbitMQ 3.x does not, and refuses or ignores it).
- ``readMode=consume``: ``numPartitions`` competing receivers; each window of messages is accepted once the task
  has handed all of its rows over and is asked for more (so a task that fails before that point releases them,
  and the broker delivers them again). Handed over is not used: Spark's Python worker asks for rows
  as fast as it can write them out, whatever the JVM reads of them, and a batch read has no commit to wait for.
  So an action that uses fewer rows than the read gives (``limit``, ``show``, ``take``, ``first``) consumes the
  messages of every window handed over, up to the whole queue. Once accepted, a message is gone from the queue:
  if the task fails later, in a stage downstream of the read, it is not read again. For processing that must
  survive such failures, use a streaming read (with ``Trigger.AvailableNow`` for a one-off run): there a message
  is accepted only once the sink has committed its batch.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from ..client import Connection, Delivery, Receiver
from ..errors import AMQPError
from ._links import close_quietly, open_receiver, wait_sent
from ._loop import LoopThread
from ._options import WINDOW_BYTES, AmqpOptions
from ._schema import RowBuilder

__all__ = ["AmqpBatchReader"]

#: Seconds without a transfer that mean "the queue is empty now", with a peer whose drains are broken.
_QUIET = 0.5


async def _next_window(receiver: Receiver, size: int) -> list[Delivery]:
    """Up to ``size`` deliveries: grant that much credit and drain (the sender sends what it has, then gives the
    rest back)."""
    if receiver.credit < size:
        receiver.add_credit(size - receiver.credit)
    await wait_sent(receiver, _QUIET)
    deliveries: list[Delivery] = []
    while len(deliveries) < size:
        delivery = receiver.receive_nowait()
        if delivery is None:
            break
        deliveries.append(delivery)
    return deliveries


class _WindowSizes:
    """How many messages the next window asks for: ``window``, or fewer when ``window_bytes`` of messages at the
    average size seen hold fewer; one before the first message is seen (its size unknown, a window of large
    messages could be gigabytes)."""

    def __init__(self, window: int, window_bytes: int) -> None:
        self._window = window
        self._window_bytes = window_bytes
        self._count = 0
        self._bytes = 0

    def next(self) -> int:
        if not self._count:
            return 1
        average = max(1, self._bytes // self._count)
        return max(1, min(self._window, self._window_bytes // average))

    def seen(self, deliveries: list[Delivery]) -> None:
        self._count += len(deliveries)
        self._bytes += sum(len(delivery.payload) for delivery in deliveries)


async def _accept(deliveries: list[Delivery]) -> None:
    for delivery in deliveries:
        await delivery.accept()


async def _release_and_close(connection: Connection | None, receiver: Receiver, pending: list[Delivery]) -> None:
    """End a read: release the window it did not accept (a consuming task that fails, or whose rows Spark stopped
    taking), and whatever came beyond it, then close. Released (§3.4.4), the broker delivers them again without
    counting a failed delivery; left unsettled to the close, a broker may count them as failed ones towards its
    delivery limit (as :func:`~._links.settle_all` says). A connection that is gone settles nothing."""
    if not receiver.is_closed:
        with contextlib.suppress(AMQPError):
            for delivery in pending:
                if not delivery.settled:
                    await delivery.release()
            while (unread := receiver.receive_nowait()) is not None:
                await unread.release()
    await close_quietly(connection)


class AmqpBatchReader(DataSourceReader):
    """The ``amqp`` source's batch reader (see the module documentation for the two read modes)."""

    def __init__(self, options: AmqpOptions, schema: StructType) -> None:
        self._options = options
        self._schema = schema
        self._consume = options.get("readMode", "browse") == "consume"

    def partitions(self) -> list[InputPartition]:
        """One partition to browse; ``numPartitions`` competing receivers to consume."""
        count = int(self._options.get("numPartitions", 1)) if self._consume else 1
        return [InputPartition(index) for index in range(count)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The partition's messages, a window (the ``credit`` option) at a time, until the queue is empty or
        ``maxMessages`` were read; a window holds at most ``windowBytes`` of messages (at the average size seen:
        one message first, to see it), so a queue of large messages is not taken whole into the task's memory."""
        options = self._options
        window = int(options.get("credit", 1000))
        sizes = _WindowSizes(window, int(options.get("windowBytes", WINDOW_BYTES)))
        remaining: int | None = options.get("maxMessages")
        builder = RowBuilder(self._schema)
        loop = LoopThread("amqp-async-spark-read")
        connection: Connection | None = None
        try:
            opened: Any = loop.call(
                open_receiver, options, timeout=options.connect_timeout * 2 + 5, browse=not self._consume
            )
            connection, receiver = opened
        except BaseException:
            loop.close()
            raise
        pending: list[Delivery] = []  # the window handed over and not accepted yet
        try:
            while remaining is None or remaining > 0:
                size = sizes.next() if remaining is None else min(sizes.next(), remaining)
                pending = loop.call(_next_window, receiver, size)
                deliveries = pending
                sizes.seen(deliveries)
                if deliveries:
                    yield builder.batch([delivery.payload for delivery in deliveries])
                    if self._consume:
                        loop.call(_accept, deliveries)  # Spark has taken every row of the window
                pending = []
                if remaining is not None:
                    remaining -= len(deliveries)
                if len(deliveries) < size:
                    break  # the drain found the queue empty
        finally:
            if self._consume:
                loop.call(_release_and_close, connection, receiver, pending, timeout=20)
            else:  # a browse took nothing (§3.5.7 copy): nothing to give back
                loop.call(close_quietly, connection, timeout=10)
            loop.close()
