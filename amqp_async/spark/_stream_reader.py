"""Streaming reads on the executors (``receiveOn=executors``, the default): the driver plans, the tasks receive.

Spark runs a Python streaming source's planning in one process on the driver (the "streaming source runner"):
``initialOffset``, ``latestOffset(start, limit)``, ``partitions(start, end)``, ``commit(end)``. Here that process
never connects to the broker and never sees a message: it plans micro-batches by number, and each task
(:mod:`._stream_task`) receives its own share on the executor that runs it, through the write-ahead log
(:mod:`._log`), which makes a batch the same however often Spark computes it.

- An offset is ``{"source": ID, "batch": N, "plan": {"numPartitions": P, "maxMessagesPerBatch": M}}``: N
  micro-batches planned, the last with P partitions sharing M messages (null: no limit). ``ID`` is made once, by
  the first ``initialOffset`` of a new query, and travels in every offset, so a query restarted from its checkpoint
  finds its log (``logLocation/ID``). The plan travels in the batch's end offset, which Spark checkpoints before it
  runs the batch, so that a replay is planned as the first run was (see ``partitions``). The initial offset has
  none (no batch).
- ``latestOffset(start)`` answers ``start + 1``: a batch of ``numPartitions`` partitions, whose budgets add up to
  ``maxMessagesPerBatch`` (10,000 messages each without the option; a partition that would have none is not
  planned), each taking what the queue has, up to its budget (and to ``PARTITION_BYTES`` of message bytes,
  :mod:`._stream_task`). In a continuous query a task first waits up to ``pollWaitMs`` for a message, so an idle
  queue gives empty micro-batches at that pace (raise it for a mostly idle queue: a waiting task hands on a
  message the moment it arrives).
- ``Trigger.AvailableNow``: the tasks drain at once, and each chosen entry says whether its task found the queue
  empty. ``latestOffset`` plans the next batch until every partition of the last one found it empty (a listing of
  the log, no message read), then answers ``start``: the query ends. Every run plans at least one batch.
- ``partitions(start, end)`` plans the batch as ``end``'s plan says, whatever the options say now: a restart
  replays the batch the checkpoint had planned but not committed, and Spark wants the same rows again. Before, a
  replay took ``numPartitions`` from the options of the restarted query: with more partitions, the new ones
  received (and accepted) fresh messages into a batch that a sink idempotent per batch id discards as already
  written, and those messages were lost; with fewer, a partition beyond the new count whose task (a zombie of the
  first run) had not yet written to the log when the replay was planned was left out, its messages accepted and
  never read. Changed options take effect from the next new batch. Only the partitions and their budgets are
  recorded: the options that change what a task receives (``windowBytes``, ``pollWaitMs``, ``credit``,
  ``selector``...) need not be, since a partition with a chosen entry returns it whatever they say, and one without
  had accepted nothing (only the chosen entry's attempt accepts): what it receives afresh loses nothing. An offset
  without a plan (a checkpoint of an older version) is planned from the options, with every partition the log has
  for the batch. Its source id is ``end``'s: Spark checkpoints a batch's end offset, but not the start of the first
  batch, which a restart asks of ``initialOffset`` again (a new id, whose log is empty: the first batch's
  messages, accepted, were lost).
- The first batch a process plans writes the marker ``started`` in the source's log. A batch replayed after a
  restart whose source has nothing in the log (the log deleted, moved, or ``logLocation`` changed) fails the query
  with an error naming ``logLocation``: received afresh, the messages its tasks had accepted would be lost.
- ``commit(end)`` (and ``latestOffset``, for batches Spark has committed without calling ``commit``, such as the
  last one of an AvailableNow run) marks the batches below ``end`` done in the log and deletes their files.
"""

from __future__ import annotations

import logging
import socket
import uuid
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from ._log import DEFAULT_LOCATION, WriteAheadLog
from ._options import AmqpOptions
from ._stream_task import StreamPartition, read_partition

__all__ = ["AmqpStreamReader"]

log = logging.getLogger("amqp_async.spark")

#: Messages a partition takes per micro-batch without ``maxMessagesPerBatch``.
DEFAULT_BUDGET = 10_000


def _parse(offset: dict[str, Any]) -> tuple[str, int]:
    try:
        return str(offset["source"]), int(offset["batch"])
    except (KeyError, TypeError, ValueError):
        raise ValueError(
            f"not an offset of the amqp source with receiveOn=executors: {offset!r} (a checkpoint of another source, "
            "or of receiveOn=driver?)"
        ) from None


def _options_plan(options: AmqpOptions) -> tuple[int, int | None]:
    """The partition count and message limit (None: no limit) of a new micro-batch: the options now."""
    limit = options.get("maxMessagesPerBatch")
    return int(options.get("numPartitions", 1)), None if limit is None else int(limit)


def _plan_of(options: AmqpOptions) -> dict[str, int | None]:
    """The plan a new micro-batch's end offset records (see the module documentation)."""
    count, limit = _options_plan(options)
    return {"numPartitions": count, "maxMessagesPerBatch": limit}


def _planned_with(end: dict[str, Any], options: AmqpOptions) -> tuple[int, int | None, bool]:
    """The partition count and message limit micro-batch ``end - 1`` was planned with, and whether its offset
    recorded them (False: a checkpoint of an older version, planned from the options now)."""
    plan = end.get("plan")
    if plan is None:
        return (*_options_plan(options), False)
    try:
        count, limit = int(plan["numPartitions"]), plan["maxMessagesPerBatch"]
        limit = None if limit is None else int(limit)
    except (KeyError, TypeError, ValueError):
        count = limit = 0
    if count < 1 or (limit is not None and limit < 1):
        raise ValueError(f"not an offset of the amqp source with receiveOn=executors: {end!r} (its plan)")
    return count, limit, True


def _budgets(limit: int | None, count: int) -> dict[int, int]:
    """The budget of each partition of a new micro-batch, by index: ``DEFAULT_BUDGET`` each without a limit, else
    ``limit`` shared out so that the budgets add up to it exactly (the first ``limit % count`` take one more), and
    no partition with nothing to take (``numPartitions`` above the limit plans ``limit`` partitions of 1).

    The ceiling of ``limit / count`` for every partition, as before, let a batch hold up to ``count - 1`` messages
    more than ``maxMessagesPerBatch`` promises (12 of 10 with 4 partitions; 5 of 2 with 5).
    """
    if limit is None:
        return dict.fromkeys(range(count), DEFAULT_BUDGET)
    share, extra = divmod(int(limit), count)
    budgets = {index: share + (index < extra) for index in range(count)}
    return {index: budget for index, budget in budgets.items() if budget > 0}


class AmqpStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The ``amqp`` source's streaming reader (``receiveOn=executors``; see the module documentation).

    Made on the driver and pickled to the executors, where :meth:`read` runs; the planning methods run in the
    streaming source runner, which touches only the log.
    """

    def __init__(self, options: AmqpOptions, schema: StructType) -> None:
        self._options = options
        self._schema = schema
        self._source: str | None = None
        self._log: WriteAheadLog | None = None
        self._available_now = False
        self._planned = False  # a batch was planned (or replayed) by this process
        self._started = False  # this process planned a new batch (latestOffset), and the log has its marker

    def __getstate__(self) -> dict[str, Any]:
        return {"_options": self._options, "_schema": self._schema}

    def __setstate__(self, state: dict[str, Any]) -> None:
        AmqpStreamReader.__init__(self, state["_options"], state["_schema"])

    # --- the driver's side (the streaming source runner) -------------------------------------------------------

    @property
    def _location(self) -> str:
        return str(self._options.get("logLocation", DEFAULT_LOCATION))

    def _log_of(self, source: str) -> WriteAheadLog:
        if self._log is None or self._source != source:
            self._source = source
            self._log = WriteAheadLog(self._location, source)
        return self._log

    def initialOffset(self) -> dict[str, Any]:
        """A new query: a new source id (the same one each time this process is asked), no batch yet."""
        if self._source is None:
            self._source = uuid.uuid4().hex
        self._log_of(self._source)  # the log's filesystem is made now: a bad logLocation fails the query here
        return {"source": self._source, "batch": 0}

    def getDefaultReadLimit(self) -> ReadLimit:
        """``maxMessagesPerBatch`` when given, else everything available (each partition up to its budget)."""
        limit = self._options.get("maxMessagesPerBatch")
        return ReadAllAvailable() if limit is None else ReadMaxRows(limit)

    def prepareForTriggerAvailableNow(self) -> None:
        """Read until a batch finds the queue empty, then end."""
        self._available_now = True

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        """The next micro-batch (``start`` + 1, with its plan: the options now), or ``start`` once an AvailableNow
        run found the queue empty."""
        source, batch = _parse(start)
        log_ = self._log_of(source)
        if not self._started:
            log_.mark_started()
            self._started = True
        # Spark names ``start`` once every batch below it is committed: the one before is still wanted here.
        if batch >= 2:
            log_.commit(batch - 1)
        if self._available_now and self._planned and batch > 0:
            outcomes = log_.outcomes(batch - 1)
            if outcomes and all(outcome is not None and outcome.drained for outcome in outcomes.values()):
                log_.commit(batch)
                return start
        return {"source": source, "batch": batch + 1, "plan": _plan_of(self._options)}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        """The partitions of the batches from ``start`` to ``end``: names and budgets, no messages; as ``end``'s plan
        says (a replay is planned as the batch first was)."""
        start_source, first = _parse(start)
        source, last = _parse(end)
        if start_source != source and first != 0:
            raise ValueError(f"the offsets of one micro-batch name two sources: {start!r} to {end!r}")
        log_ = self._log_of(source)
        if not self._started and not log_.exists():
            # A replay (this process planned no batch yet) of a batch whose log is gone.
            raise ValueError(
                f"the write-ahead log of this query's source {source} is not in logLocation={self._location!r}: it "
                f"was deleted or moved, or the query's logLocation changed. Micro-batch {first}, planned before the "
                "restart and not committed, cannot be replayed: its messages were accepted when it was first run. "
                "Restore the log, or start the query again with a new checkpointLocation (at-least-once is lost "
                "for that batch)"
            )
        options = self._options
        count, limit, recorded = _planned_with(end, options)
        budgets = _budgets(limit, count)
        first_wait = 0.0 if self._available_now else int(options.get("pollWaitMs", 1000)) / 1000.0
        host = None if "logLocation" in options.values else socket.gethostname()
        self._planned = True
        planned: list[InputPartition] = []
        for batch in range(first, last):
            # With a recorded plan, the log has no partition it lacks. Without one (an offset of an older version),
            # a partition the log has and the options now do not (numPartitions lowered before a replay) keeps a
            # budget: it returns its chosen entry, or (no attempt chose) receives as the others do.
            logged = set() if recorded else set(log_.partitions(batch))
            for index in sorted(set(budgets) | logged):
                budget = budgets.get(index) or max(budgets.values())
                planned.append(StreamPartition(source, batch, index, budget, self._location, first_wait, host))
        return planned

    def commit(self, end: dict[str, Any]) -> None:
        """The sink has every batch below ``end``: delete their log files."""
        source, batch = _parse(end)
        deleted = self._log_of(source).commit(batch)
        log.debug("committed up to batch %d: %d batches deleted from the log", batch, deleted)

    def stop(self) -> None:
        """Nothing to close: the driver holds no connection."""

    # --- the executors' side -----------------------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Receive (or replay from the log) one partition's messages, as rows."""
        assert isinstance(partition, StreamPartition)
        return read_partition(self._options, self._schema, partition)
