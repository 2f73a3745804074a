"""Streaming reads with ``receiveOn=driver``: one receiver link in Spark's streaming source runner, deliveries
settled at commit. (The default, ``receiveOn=executors``, receives in the executors' tasks: ._stream_reader.)

Theory of operation. Spark runs a Python streaming source in one process on the driver (its "streaming source
runner") and calls it synchronously: ``latestOffset`` to learn how far the next micro-batch may go,
``partitions(start, end)`` to plan it, ``commit(end)`` once the batch is written by the sink, ``stop()`` at the
end. Executors only run ``read(partition)``.

- The runner holds the only connection, on an event loop of its own (:class:`~._loop.LoopThread`), so heartbeats
  and transfers go on between Spark's calls. Executors never connect: a partition carries its rows, as an Arrow
  record batch built here.
- An offset is a count of messages handed to Spark: ``{"messages": N}``. ``latestOffset(start, limit)`` numbers
  received deliveries ``start, start + 1, ...`` (at most ``limit``) and answers the end; the first offset Spark
  names (a fresh query's 0, or the checkpointed one after a restart) is where numbering starts.
- Every delivery stays unsettled until its micro-batch is committed: ``commit(end)`` covers its number, or Spark
  names a later start (``latestOffset`` and ``partitions`` start where the last committed batch ended; Spark does
  not call ``commit`` for the last batch of a query that ends). Then it is accepted. A query that fails or is
  killed before that leaves them unsettled, and the broker delivers them again, to the restarted query.
  A restart replays the batch the checkpoint had planned but not committed: ``partitions(start, end)`` for numbers
  this process never gave out takes the next ``end - start`` deliveries (those the broker gave back come first).
- Credit is bounded by what is held: credit granted + deliveries waiting + deliveries handed to Spark and not yet
  committed never exceed the ``credit`` option (the window), nor, in bytes at the average size seen, the
  ``windowBytes`` option (128 MiB; one credit until a first message shows the size). A commit returns its
  deliveries' credit.
- ``Trigger.AvailableNow``: each ``latestOffset`` drains the link (§2.6.7) and the query ends once a drain finds
  nothing: it reads what the queue holds, and what arrives while it reads.
"""

from __future__ import annotations

import collections
import logging
import os
import signal
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any

import anyio
import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from ..client import Connection, Delivery, Receiver
from ._links import close_quietly, open_receiver, wait_sent
from ._loop import LoopThread
from ._options import WINDOW_BYTES, AmqpOptions
from ._schema import RowBuilder

__all__ = ["AmqpDriverStreamReader", "HeldBatch"]

log = logging.getLogger("amqp_async.spark")

_DEFAULT_WINDOW = 1000
#: Seconds without a transfer that mean "nothing more now", with a peer whose drains are broken.
_QUIET = 0.2
_OFFSET_KEY = "messages"


class HeldBatch(InputPartition):
    """One partition of a micro-batch: its rows, received by the runner (an Arrow record batch, pickled along)."""

    def __init__(self, batch: pa.RecordBatch) -> None:
        super().__init__(batch.num_rows)
        self.batch = batch


def _offset(count: int) -> dict[str, int]:
    return {_OFFSET_KEY: count}


def _count(offset: dict[str, Any]) -> int:
    try:
        return int(offset[_OFFSET_KEY])
    except (KeyError, TypeError, ValueError):
        raise ValueError(f"not an offset of the amqp source: {offset!r} (a checkpoint of another source?)") from None


class _StreamSession:
    """The runner's connection, receiver and held deliveries. Every method but :meth:`close` runs on the loop."""

    def __init__(self, options: AmqpOptions) -> None:
        self.options = options
        self.window: int = int(options.get("credit", max(_DEFAULT_WINDOW, 2 * options.get("maxMessagesPerBatch", 0))))
        self.poll_wait = int(options.get("pollWaitMs", 1000)) / 1000.0
        self.available_now = False
        self.connection: Connection | None = None
        self.receiver: Receiver | None = None
        #: the number the next delivery handed to Spark gets (None until Spark names its first offset).
        self.next: int | None = None
        #: deliveries handed to Spark and not committed yet, with their numbers, in order.
        self.held: collections.deque[tuple[int, Delivery]] = collections.deque()
        #: the most message bytes held and waiting (``windowBytes``), and the bytes held now.
        self.window_bytes: int = int(options.get("windowBytes", WINDOW_BYTES))
        self.held_bytes = 0
        # Messages taken so far, and their bytes: the average size that credit is granted at.
        self._seen = 0
        self._seen_bytes = 0

    async def open(self) -> None:
        self.connection, self.receiver = await open_receiver(self.options)
        self._top_up()

    def _top_up(self) -> int:
        """Grant credit up to the window, counting what is held and queued (§2.6.7 link-credit), and within
        ``windowBytes`` at the average size seen (one credit at a time before a first message shows a size: a
        window granted blind let a backlog of large messages arrive whole); return how much was granted."""
        receiver = self.receiver
        assert receiver is not None
        link = receiver._engine_link
        waiting = receiver.queued + receiver.credit
        wanted = self.window - len(self.held) - waiting
        seen, seen_bytes = self._seen, self._seen_bytes
        queued_bytes = sum(len(delivery.payload) for delivery in link.incoming)
        seen, seen_bytes = seen + receiver.queued, seen_bytes + queued_bytes
        if seen:
            room = (self.window_bytes - self.held_bytes - queued_bytes) // max(1, seen_bytes // seen)
            wanted = min(wanted, room - receiver.credit)
        else:
            wanted = min(wanted, 1 - waiting)
        if not self.held and not waiting:
            wanted = max(wanted, 1)  # one message however large: the stream moves on
        if wanted > 0 and not link.drain:
            receiver.add_credit(wanted)
            return wanted
        return 0

    async def _start_at(self, start: int) -> None:
        """Spark names ``start``: the end of the last micro-batch its sink committed (``latestOffset`` and
        ``partitions`` always start there). So every delivery numbered below it is done with, even when Spark
        never calls ``commit`` for it: it does not for the last batch of a query that ends (``AvailableNow``)."""
        await self.commit(start)
        if self.next is None:
            self.next = start
        elif start > self.next:
            # Spark skipped ahead of what this process handed out (a batch it planned before a restart): number on.
            self.next = start

    def _take(self, count: int) -> int:
        """Number up to ``count`` waiting deliveries and hold them; return how many were taken."""
        receiver = self.receiver
        assert receiver is not None and self.next is not None
        taken = 0
        while taken < count:
            delivery = receiver.receive_nowait()
            if delivery is None:
                break
            self.held.append((self.next, delivery))
            size = len(delivery.payload)
            self.held_bytes += size
            self._seen += 1
            self._seen_bytes += size
            self.next += 1
            taken += 1
        return taken

    async def _drain(self, enough: int) -> None:
        """Have the sender send what it has now, up to the window (§2.6.7 drain); return as soon as ``enough``
        deliveries wait (the drain goes on meanwhile)."""
        receiver = self.receiver
        assert receiver is not None
        while True:
            before = receiver.queued
            granted = self._top_up()
            await wait_sent(receiver, max(self.poll_wait, _QUIET), enough)
            # A grant held back by the byte bound (or to one message, the size unknown) that the sender used up:
            # it may have more, and the bound may allow more now that the size is known.
            if not granted or receiver.queued >= enough or receiver.queued - before < granted:
                return

    async def latest(self, start: int, max_rows: int | None, min_rows: int) -> int:
        """The end offset of the next micro-batch from ``start``: deliveries numbered and held up to it."""
        await self._start_at(start)
        receiver = self.receiver
        assert receiver is not None and self.next is not None
        receiver._check()  # a lost connection or link fails the query here
        limit = self.window if max_rows is None else max_rows
        planned = self.next - start  # numbered already (asked twice without a batch in between)
        if self.available_now:
            if receiver.queued < limit - planned:
                await self._drain(limit - planned)
        else:
            if receiver.queued == 0 and planned == 0 and self.poll_wait > 0:
                with anyio.move_on_after(self.poll_wait):
                    while receiver.queued == 0:
                        receiver._check()
                        await receiver.connection._wait_state()
            if not self._seen and 0 < receiver.queued < limit - planned:
                # The query's first message, come on a single credit (_top_up): its size known now, what the
                # sender has comes into this batch too, not that message alone.
                await self._drain(limit - planned)
        if planned + receiver.queued < min_rows:
            return start
        self._take(limit - planned)
        self._top_up()
        return self.next

    async def take_range(self, start: int, end: int) -> list[bytes]:
        """The payloads of the deliveries numbered ``start`` to ``end`` (taking them first when this process has
        not numbered them yet: a batch replayed after a restart)."""
        await self._start_at(start)
        assert self.next is not None
        if end > self.next:
            missing = end - self.next
            missing -= self._take(missing)
            if missing > 0:
                await self._drain(missing)
                missing -= self._take(missing)
            if missing > 0:
                log.warning(
                    "replaying offsets %d to %d: the peer had %d message(s) fewer than the batch planned before "
                    "the restart (another consumer took them, or they expired)",
                    start,
                    end,
                    missing,
                )
            self.next = end
            self._top_up()
        return [delivery.payload for number, delivery in self.held if start <= number < end]

    async def commit(self, end: int) -> int:
        """Accept every held delivery numbered below ``end`` (§3.4.2); return how many."""
        held = self.held
        if held and held[0][0] < end and self.receiver is not None:
            self.receiver._check()  # a lost connection fails the query: its deliveries come again
        settled = 0
        while held and held[0][0] < end:
            _, delivery = held.popleft()
            self.held_bytes -= len(delivery.payload)
            await delivery.accept()
            settled += 1
        if self.receiver is not None and not self.receiver.is_closed:
            self._top_up()
        return settled

    async def report(self) -> int | None:
        if self.next is None or self.receiver is None:
            return None
        return self.next + self.receiver.queued

    async def close(self) -> None:
        await close_quietly(self.connection)


class AmqpDriverStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The ``amqp`` source's streaming reader with ``receiveOn=driver`` (see the module documentation).

    Made on the driver and pickled to executors; it connects lazily, on Spark's first call in the streaming
    source runner, and only there.
    """

    def __init__(self, options: AmqpOptions, schema: StructType) -> None:
        self._options = options
        self._schema = schema
        self._loop: LoopThread | None = None
        self._session: _StreamSession | None = None
        self._builder: RowBuilder | None = None
        self._previous_sigterm: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {"_options": self._options, "_schema": self._schema}

    def __setstate__(self, state: dict[str, Any]) -> None:
        AmqpDriverStreamReader.__init__(self, state["_options"], state["_schema"])

    # --- the runner's side -------------------------------------------------------------------------------------

    def _call(self, function: Any, *args: Any) -> Any:
        if self._session is None:
            self._connect()
        assert self._loop is not None and self._session is not None
        return self._loop.call(getattr(self._session, function), *args)

    def _connect(self) -> None:
        self._loop = LoopThread("amqp-async-spark-stream")
        session = _StreamSession(self._options)
        try:
            self._loop.call(session.open, timeout=self._options.connect_timeout * 2 + 5)  # connect, then attach
        except BaseException:
            self._loop.close()
            self._loop = None
            raise
        self._session = session
        self._builder = RowBuilder(self._schema)
        # Messages are arriving now, on the loop's thread: meanwhile, pay here the first Arrow conversion's one-off
        # cost (pyarrow loads its pandas support), not in the first micro-batch.
        self._builder.batch([])
        self._install_sigterm_handler()

    def _install_sigterm_handler(self) -> None:
        # Spark ends the runner with SIGTERM when the query stops, without calling stop(): close the connection
        # first, so the broker takes the uncommitted deliveries back at once, then die as SIGTERM would.
        if threading.current_thread() is not threading.main_thread():
            return
        self._previous_sigterm = signal.getsignal(signal.SIGTERM)
        signal.signal(signal.SIGTERM, self._on_sigterm)

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        self.stop()
        previous = self._previous_sigterm
        signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
        if callable(previous):
            previous(signum, frame)
        else:
            os.kill(os.getpid(), signal.SIGTERM)

    def initialOffset(self) -> dict[str, int]:
        """A new query starts at message 0 (and connects now, so that messages arrive while Spark plans)."""
        if self._session is None:
            self._connect()
        return _offset(0)

    def getDefaultReadLimit(self) -> ReadLimit:
        """``maxMessagesPerBatch`` when given, else everything available (bounded by the credit window)."""
        limit = self._options.get("maxMessagesPerBatch")
        return ReadAllAvailable() if limit is None else ReadMaxRows(limit)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, int]:
        """The end of the next micro-batch: waiting deliveries (at most the limit's rows) numbered from ``start``;
        ``start`` itself when none came within ``pollWaitMs``."""
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        min_rows = limit.min_rows if isinstance(limit, ReadMinRows) else 0
        return _offset(self._call("latest", _count(start), max_rows, min_rows))

    def reportLatestOffset(self) -> dict[str, int] | None:
        """What has arrived so far, for the query's progress report."""
        if self._session is None:
            return None
        count = self._call("report")
        return None if count is None else _offset(count)

    def prepareForTriggerAvailableNow(self) -> None:
        """Read what the queue holds and stop: every latestOffset drains the link."""
        if self._session is None:
            self._connect()
        assert self._session is not None
        self._session.available_now = True

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[HeldBatch]:
        """The micro-batch's rows, split into ``numPartitions`` partitions that carry them."""
        payloads: list[bytes] = self._call("take_range", _count(start), _count(end))
        if not payloads:
            return []
        assert self._builder is not None
        parts = min(int(self._options.get("numPartitions", 1)), len(payloads))
        size = -(-len(payloads) // parts)
        return [HeldBatch(self._builder.batch(payloads[i : i + size])) for i in range(0, len(payloads), size)]

    def commit(self, end: dict[str, Any]) -> None:
        """The sink has the batch up to ``end``: accept its deliveries."""
        settled = self._call("commit", _count(end))
        log.debug("committed offset %s: %d deliveries accepted", end, settled)

    def stop(self) -> None:
        """Close the connection (uncommitted deliveries go back to the broker) and end the event loop."""
        loop, session = self._loop, self._session
        self._loop = self._session = None
        if loop is None or session is None:
            return
        try:
            loop.call(session.close, timeout=10)
        except Exception as exc:
            log.warning("closing the AMQP connection failed: %r", exc)
        finally:
            loop.close()

    # --- the executors' side -----------------------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The partition's rows, as received by the runner (no connection here)."""
        assert isinstance(partition, HeldBatch)
        if partition.batch.num_rows:
            yield partition.batch
