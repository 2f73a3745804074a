"""One task of an executor-side streaming read: receive a partition's share, log it, choose, settle, give the rows.

The task for partition ``p`` of micro-batch ``b`` (a :class:`StreamPartition`, a few hundred bytes however large
the batch) runs in a Python worker on an executor:

1. If the log already has a choice for ``(b, p)`` (an earlier attempt got that far), it returns the chosen entry's
   messages, without connecting. Otherwise:
2. it connects (its own connection, closed before it returns) and receives up to the partition's budget: what
   the queue has now (:func:`~._links.receive_batch`; in a continuous query it first waits up to ``pollWaitMs``
   for a first message);
3. writes them to its log entry (:meth:`~._log.Slot.write_entry`), durable before anything is settled;
4. has one entry chosen among all attempts of ``(b, p)`` (:meth:`~._log.Slot.choose`);
5. accepts its deliveries if its own entry was chosen (and the batch is not committed already: a zombie attempt),
   else releases them (the broker delivers them again, to a later batch) and takes the chosen entry's messages;
6. returns the rows (built while the messages arrived, :class:`_Rows`) while it releases what comes after it
   settled (sent before the sender saw the credit taken back) and closes its connection, and waits for the close
   once Spark has taken them.

A task that dies anywhere before 5 leaves its deliveries unsettled: the broker delivers them again when the
connection drops. docs/spark.md has the table of what each failure costs.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import gc
import logging
import socket
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import InputPartition
from pyspark.sql.types import StructType

from ..client import Connection, Receiver
from ..errors import AMQPError
from ..protocol.delivery import Delivery
from ._failpoints import failpoint
from ._links import check_alive, close_quietly, open_receiver, receive_batch, release_late, settle_all
from ._log import Slot, WriteAheadLog, new_attempt
from ._loop import LoopThread
from ._options import WINDOW_BYTES, AmqpOptions, OptionError
from ._schema import RowBuilder

__all__ = ["StreamPartition", "read_partition"]

log = logging.getLogger("amqp_async.spark")

#: Rows per record batch handed to Spark (and built at a time while more messages arrive).
_ROWS_PER_BATCH = 5_000
#: Seconds the task's thread sleeps when it waits for more deliveries to turn into rows.
_POLL = 0.005
#: Seconds without a transfer that mean "nothing more now", with a peer whose drains are broken.
_QUIET = 0.2
#: The most message bytes one task takes in a micro-batch, whatever its budget in messages, unless the
#: ``windowBytes`` option says otherwise: a task holds them twice (the payloads, and the rows built from them) and
#: writes them to its log entry. Without it, the default budget of 10,000 messages took 10 GB into one Python worker
#: from a backlog of 1 MB messages. A task that stops here has not drained the queue, so the next micro-batch takes
#: more (``Trigger.AvailableNow`` goes on too).
PARTITION_BYTES = WINDOW_BYTES


class StreamPartition(InputPartition):
    """Partition ``index`` of micro-batch ``batch`` of the source ``source``: what its task needs, and no message.

    Attributes:
        budget: the most messages the task takes from the queue.
        location: the log's location (``logLocation``, or the default local directory).
        first_wait: seconds to wait for a first message (0: drain at once, for ``Trigger.AvailableNow``).
        planner_host: the driver's host name when the log is the default local directory, which only a task on
            the same machine can share (None: a location the user gave).
    """

    def __init__(
        self,
        source: str,
        batch: int,
        index: int,
        budget: int,
        location: str,
        first_wait: float,
        planner_host: str | None,
    ) -> None:
        super().__init__(index)
        self.source = source
        self.batch = batch
        self.index = index
        self.budget = budget
        self.location = location
        self.first_wait = first_wait
        self.planner_host = planner_host

    def __repr__(self) -> str:
        return f"StreamPartition(batch={self.batch}, index={self.index}, budget={self.budget})"


def _check_host(partition: StreamPartition) -> None:
    host = socket.gethostname()
    if partition.planner_host is not None and host != partition.planner_host:
        raise OptionError(
            f"this streaming read's task runs on {host!r} and its driver on {partition.planner_host!r}, but its "
            f"write-ahead log is the default local directory {partition.location!r}, which they cannot share: set "
            "the option 'logLocation' to a filesystem every node sees (hdfs://, s3://, gs://, a shared mount...)"
        )


def _spark_attempt() -> int:
    context = TaskContext.get()
    return 0 if context is None else context.attemptNumber()


class _Rows:
    """Rows built from deliveries while more arrive: the task's thread turns each chunk into an Arrow record batch
    as soon as it is there, while the event loop's thread goes on receiving (the broker is kept busy, and the rows
    are ready when the last delivery is)."""

    def __init__(self, schema: StructType) -> None:
        self.builder = RowBuilder(schema)
        self.payloads: list[bytes] = []
        self.batches: list[pa.RecordBatch] = []

    def follow(self, received: list[Delivery], receiving: concurrent.futures.Future[Any]) -> None:
        """Build rows from ``received`` (filled by the loop) until ``receiving`` is done, then the rest."""
        while True:
            done = receiving.done()
            count = len(received)
            if count - len(self.payloads) >= _ROWS_PER_BATCH or (done and count > len(self.payloads)):
                self.add([delivery.payload for delivery in received[len(self.payloads) : count]])
            elif done:
                return
            else:
                concurrent.futures.wait([receiving], timeout=_POLL)

    def add(self, payloads: list[bytes]) -> None:
        self.payloads += payloads
        self.batches.append(self.builder.batch(payloads))


@contextlib.contextmanager
def _no_cycle_collection() -> Iterator[None]:
    """Pause the cyclic garbage collector while a task receives and builds rows: tens of thousands of deliveries,
    messages and row tuples, all freed by reference counting, would otherwise set off full collections, each of
    which walks the whole heap of a Spark Python worker (pyspark, pyarrow and pandas loaded): a fifth of a task's
    time when measured. Cycles made meanwhile are collected once it is back on."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


class _Closing:
    """The task's connection closing on its loop's thread while Spark takes the rows (the close handshake is a round
    trip, with nothing left to decide: the deliveries are settled, and those beyond the batch are released once
    nothing more can come, :func:`_release_late_and_close`), and :meth:`wait` for it at the end."""

    def __init__(self, loop: LoopThread, connection: Connection, receiver: Receiver) -> None:
        self._loop = loop
        self._closing = loop.submit(_release_late_and_close, connection, receiver)

    def wait(self) -> None:
        try:
            self._closing.result(timeout=10)  # release_late gives up after 2 s, close_quietly after 5 s
        except (concurrent.futures.TimeoutError, concurrent.futures.CancelledError):
            pass
        finally:
            self._loop.close()


def _receive_and_choose(
    options: AmqpOptions, schema: StructType, partition: StreamPartition, log_: WriteAheadLog, slot: Slot
) -> tuple[list[pa.RecordBatch], _Closing]:
    """Steps 2 to 5 of the module documentation; returns the rows of the chosen entry (this attempt's or
    another's), and the connection closing meanwhile (step 6)."""
    attempt = new_attempt(_spark_attempt())
    window = int(options.get("credit", 1000))
    loop = LoopThread("amqp-async-spark-stream-task")
    connection: Connection | None = None
    receiver: Receiver | None = None
    received: list[Delivery] = []
    closing: _Closing | None = None
    try:
        # (its source names released as default-outcome, §3.5.3: see open_receiver)
        opened: Any = loop.call(open_receiver, options, timeout=options.connect_timeout * 2 + 5)
        connection, receiver = opened
        receiving = loop.submit(
            receive_batch,
            receiver,
            partition.budget,
            window,
            partition.first_wait,
            _QUIET,
            received,
            int(options.get("windowBytes", PARTITION_BYTES)),
        )
        rows = _Rows(schema)
        try:
            rows.follow(received, receiving)
        finally:
            deliveries, drained = receiving.result()  # an error of the receive first; waits for the loop's side
        failpoint("received", partition.index, partition.batch)
        entry = slot.write_entry(attempt, rows.payloads, drained)
        failpoint("logged", partition.index, partition.batch)
        # Lost the connection meanwhile? Then fail before the choice: a retry receives afresh, and no entry whose
        # deliveries can no longer be accepted is chosen (which would make them come twice).
        loop.call(check_alive, receiver)
        chosen = slot.choose(attempt, entry)
        failpoint("chosen", partition.index, partition.batch)
        committed = log_.committed()
        ours = chosen == entry and committed <= partition.batch
        try:
            loop.call(settle_all, receiver, deliveries, ours, release_unread=False)  # release_late's, at the end
            loop.call(check_alive, receiver)
        except AMQPError as exc:
            # The dispositions may not have reached the peer: it delivers those messages again (duplicates of
            # this batch's, each with its message_id), to a later batch. The chosen entry stands either way.
            log.warning(
                "batch %d partition %d: the connection ended as %d deliveries were %s; they may come again: %s",
                partition.batch,
                partition.index,
                len(deliveries),
                "accepted" if ours else "released",
                exc,
            )
        log.debug(
            "batch %d partition %d attempt %s: %d received, %s",
            partition.batch,
            partition.index,
            attempt,
            len(deliveries),
            "accepted" if ours else f"released (entry {chosen.attempt} was chosen)",
        )
        if committed > partition.batch:
            raise RuntimeError(
                f"micro-batch {partition.batch} was committed while this attempt of partition {partition.index} ran "
                "(a speculative copy Spark no longer needs): its messages were released"
            )
        failpoint("settled", partition.index, partition.batch)
        batches = rows.batches if ours else _batches(schema, slot.read_entry(chosen))
        closing = _Closing(loop, connection, receiver)
        return batches, closing
    finally:
        if closing is None:  # failed on the way: give back what it received, and close, before the error goes up
            loop.call(_give_back_and_close, connection, receiver, received, timeout=20)
            loop.close()


async def _give_back_and_close(
    connection: Connection | None, receiver: Receiver | None, received: list[Delivery]
) -> None:
    """A task that fails releases what it received and did not settle (§3.4.4: the broker delivers it again, and its
    delivery-count does not grow), then closes. Left unsettled to the close, their outcome would be the peer's: a
    broker may count a delivery left unsettled at a link's end as a failed one (as :func:`~._links.settle_all`
    says), so each retry of a failing task would count against every message it had received, up to the delivery
    limit. Settling is a no-op for deliveries settled already; a connection that is gone settles nothing (its peer
    decides)."""
    if receiver is not None and not receiver.is_closed:
        with contextlib.suppress(AMQPError):
            await settle_all(receiver, received, False, release_unread=False)  # release_late's, below
    await _release_late_and_close(connection, receiver)


async def _release_late_and_close(connection: Connection | None, receiver: Receiver | None) -> None:
    """Release what comes after the task settled its deliveries (in flight when its credit was taken back:
    :func:`~._links.release_late`), then close. Left to the close, their outcome would be the peer's, as above."""
    if receiver is not None:
        with contextlib.suppress(AMQPError):
            await release_late(receiver)
    await close_quietly(connection)


def _batches(schema: StructType, payloads: list[bytes]) -> list[pa.RecordBatch]:
    builder = RowBuilder(schema)
    return [
        builder.batch(payloads[start : start + _ROWS_PER_BATCH]) for start in range(0, len(payloads), _ROWS_PER_BATCH)
    ]


def read_partition(options: AmqpOptions, schema: StructType, partition: StreamPartition) -> Iterator[pa.RecordBatch]:
    """The rows of ``partition``: the chosen log entry's messages (received now when no attempt chose before)."""
    _check_host(partition)
    log_ = WriteAheadLog(partition.location, partition.source)
    slot = log_.slot(partition.batch, partition.index)
    chosen = slot.chosen()
    closing = None
    with _no_cycle_collection():
        if chosen is None:
            batches, closing = _receive_and_choose(options, schema, partition, log_, slot)
        else:
            batches = _batches(schema, slot.read_entry(chosen))
    try:
        for batch in batches:
            if batch.num_rows:
                yield batch
    finally:
        if closing is not None:
            closing.wait()
