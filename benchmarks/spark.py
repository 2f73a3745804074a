"""The Spark data source (``amqp_async.spark``) beside the awaitable client, through our embedded broker, with
Spark's own ceiling on the same machine (the data source's performance goals: issues 13 and 23).

Run: ``python benchmarks/spark.py [--quick] [--messages N] [--batches 10000,20000,50000]`` (Java 17 and PySpark
4 with pyarrow installed; the Python workers run this interpreter unless ``PYSPARK_PYTHON`` says otherwise).

The goals, in one run on this machine: a streaming read received on the executors (the default,
``receiveOn=executors``) with 2 partitions at no less than 0.9 of the awaitable client's own receive rate from the
same broker; the driver's CPU time per micro-batch the same for batches of 10,000 and 50,000 (it must not grow with
the batch's bytes); a transactional write at no less than half a plain write; a plain write from 2 partitions at
no less than half the client's send rate.

Everything talks to ONE embedded broker in its own process (``python -m amqp_async.broker``), so that neither the
client nor Spark's driver shares its interpreter with it. Each measurement runs in a fresh process:

- the awaitable client (the reference): N messages with 16-byte bodies sent at-least-once (``submit()`` with a
  window of 1000 trackers) to a queue, then received from it (credit 1000, each decoded and accepted), timed as in
  ``_common.py`` (connection and attach outside the clock). On asyncio and on uvloop (the data source's event loop
  runs on uvloop when it is installed); the reference is the faster of the two, the stricter comparison. The
  client runs once before Spark and once after it, and its better round is the reference: the host's speed
  drifts over a run on a shared machine, and the faster figure is again the stricter comparison.
- Spark, in one ``local[2]`` session (UI off, 2 shuffle partitions):

  - a warm-up, not timed: 2,000 rows written and read back as below (Spark starts its Python workers and the
    source runner's imports are made once);
  - Spark's ceiling: the ``rate-micro-batch`` source, ``rowsPerBatch`` = each read setting's batch size, to the
    ``noop`` sink, a few batches after the first one: what Spark's micro-batch machinery costs on its own;
  - batch writes: ``spark.range(N).selectExpr("cast(id as string) as body")`` in 2 partitions (cached and counted
    before the clock starts) written with ``.write.format("amqp")...mode("append").save()`` to a fresh queue: N /
    the ``save()`` wall time. One per read (each read reads the queue its write filled), and as many with
    ``transactional=true`` interleaved with the first ones, to fresh queues that are checked to hold N each;
  - streaming reads: a queue read with ``readStream.format("amqp")`` (``maxMessagesPerBatch``, ``numPartitions``,
    ``credit``, ``receiveOn`` per setting, the full message schema unless said) into the ``noop`` sink with
    ``Trigger.AvailableNow`` and a fresh checkpoint: N / the time from the first micro-batch's start to the end of
    the last one that had rows (the query's start-up, its source runner's start are outside, as the client's
    connection is; the note gives the end-to-end figure too). The settings: 2 partitions with each batch size (the
    best is held to the goal); 1 and 4 partitions with the largest (how the rate grows); the largest with the read
    schema ``body binary``; and the largest received on the driver (``receiveOn=driver``: the former design).
    Every setting runs in two rounds (all settings, then all again), and its better round is held to the goal, as
    the client's better round is its reference: the first read of a path pays for the JVM compiling it.
    Every message is accepted when its micro-batch commits: afterwards the queues must be empty (checked with the
    client, and reported).

Where the time goes: for the reads, the query's ``durationMs`` summed over its micro-batches, as shares of the
trigger time, and batch by batch; the CPU time of the streaming source runner (the driver's Python process that
plans the batches: ``pyspark.sql.streaming.python_streaming_source_runner``, sampled from /proc) per micro-batch,
from the end of the first batch to the end (its start-up, imports included, is once per query); for the writes,
the Spark job's wall time beside the write stage's task time and the time the client alone takes for N messages.
The broker's CPU use during each measurement is given too (near 100%: the broker set the pace). The messages Spark
writes carry a message id and a string body (about 50 bytes encoded), a little more than the client's 16-byte data
bodies: if anything, the comparison is against Spark.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import anyio
from _common import ROOT, Row, broker_process, ours_receive, ours_send, process_cpu_seconds
from streaming import descendants

import amqp_async

BODY = b"0123456789abcdef"
#: Rounds of each Spark read setting (each a write and a read of its own queue); the better one is held to the goal.
READ_ROUNDS = 2
WINDOW = 1000
PREFETCH = 1000
#: The goals: the executor-side read (2 partitions) against the client's receive; a write against its send; a
#: transactional write against a plain one.
READ_TARGET = 0.9
WRITE_TARGET = 0.5
TRANSACTIONAL_TARGET = 0.5
#: Each read task's link credit (``credit``) on the executors.
TASK_CREDIT = 2000
#: Durations of a micro-batch that Spark reports, in the order they happen.
PHASES = ("latestOffset", "queryPlanning", "getBatch", "addBatch", "commitOffsets", "walCommit")
SECTION = "spark"
#: The phases shown batch by batch for the reads.
PER_BATCH = ("latestOffset", "addBatch", "commitOffsets", "triggerExecution")


# --- the children ----------------------------------------------------------------------------------------------


def _child_command(arguments: list[str]) -> list[str]:
    return [sys.executable, str(Path(__file__).resolve()), "--child", *arguments]


def run_child(arguments: list[str], timeout: float, scratch: str | None = None) -> Any:
    """Run ``spark.py --child ARGUMENTS`` in a new process group and return the JSON it printed last. The whole
    group (Spark's JVM and Python workers with it) is killed once it has answered, when it overruns ``timeout``,
    or when this process is interrupted. ``scratch``: the directory for Spark's files (checkpoints, local dir).

    Raises:
        RuntimeError: the child failed, printed nothing, or ran past ``timeout`` seconds.
    """
    environment = {
        **os.environ,
        "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
        "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable),
        "PYSPARK_DRIVER_PYTHON": sys.executable,
    }
    if scratch is not None:
        environment["SPARK_BENCH_TMP"] = scratch
    output: str | None = None
    with tempfile.TemporaryFile("w+") as errors:
        process = subprocess.Popen(
            _child_command(arguments),
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
            env=environment,
            cwd=ROOT,
            start_new_session=True,
        )
        try:
            output, _ = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass
        finally:
            _kill_group(process)  # whatever is left of it: Spark's JVM and workers run in its process group
        errors.seek(0)
        error_text = errors.read()
    if output is None:
        raise RuntimeError(f"spark child {arguments[:2]} ran past {timeout:.0f} s:\n{error_text[-3000:]}")
    lines = output.strip().splitlines()
    if process.returncode != 0 or not lines:
        raise RuntimeError(f"spark child {arguments[:2]} failed ({process.returncode}):\n{error_text[-3000:]}")
    return json.loads(lines[-1])


def _kill_group(process: subprocess.Popen[str]) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        pass


def client_child(kind: str, loop: str, url: str, address: str, count: int) -> float:
    """One awaitable-client measurement in this process: msg/s."""
    import anyio

    options: dict[str, Any] = {"backend": "asyncio"}
    if loop == "uvloop":
        options["backend_options"] = {"use_uvloop": True}
    if kind == "send":
        return float(anyio.run(ours_send, url, address, count, BODY, WINDOW, **options))
    return float(anyio.run(ours_receive, url, address, count, PREFETCH, **options))


def _uvloop_available() -> bool:
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return False
    return True


# --- Spark, in its own process -----------------------------------------------------------------------------------


def _progress_span(progresses: list[Any]) -> tuple[float, int]:
    """Seconds from the first micro-batch's start to the end of the last one with rows, and the rows in them."""
    with_rows = [progress for progress in progresses if progress.numInputRows]
    if not with_rows:
        return 0.0, 0
    first = datetime.datetime.fromisoformat(progresses[0].timestamp)
    last = with_rows[-1]
    end = datetime.datetime.fromisoformat(last.timestamp) + datetime.timedelta(
        milliseconds=last.durationMs.get("triggerExecution", 0)
    )
    return (end - first).total_seconds(), sum(progress.numInputRows for progress in with_rows)


def _durations(progresses: list[Any]) -> dict[str, float]:
    """Each phase's milliseconds summed over the micro-batches (and ``triggerExecution``, their total)."""
    totals: dict[str, float] = {}
    for progress in progresses:
        for phase, milliseconds in (progress.durationMs or {}).items():
            totals[phase] = totals.get(phase, 0.0) + float(milliseconds)
    return totals


def _stage_times(spark: Any, group: str) -> dict[str, float]:
    """The write job's stages, from Spark's status store: tasks' run time and JVM CPU time summed (ms), and the
    time from the first task's launch to the last stage's completion (ms)."""
    context = spark.sparkContext
    store = context._jsc.sc().statusStore()
    run_time = cpu = 0.0
    launched: list[int] = []
    completed: list[int] = []
    tasks = 0
    for job in context.statusTracker().getJobIdsForGroup(group):
        info = context.statusTracker().getJobInfo(job)
        if info is None:
            continue
        for stage_id in info.stageIds:
            try:
                stage = store.lastStageAttempt(stage_id)
            except Exception:
                continue
            if str(stage.status().toString()) != "COMPLETE":
                continue
            tasks += stage.numTasks()
            run_time += stage.executorRunTime()
            cpu += stage.executorCpuTime() / 1e6
            if stage.firstTaskLaunchedTime().isDefined():
                launched.append(stage.firstTaskLaunchedTime().get().getTime())
            if stage.completionTime().isDefined():
                completed.append(stage.completionTime().get().getTime())
    span = float(max(completed) - min(launched)) if launched and completed else 0.0
    return {"tasks": tasks, "task_run_ms": run_time, "task_jvm_cpu_ms": cpu, "stages_ms": span}


class _BrokerCpu:
    """The broker process's CPU time over a measurement, as a share of its wall time."""

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def __enter__(self) -> _BrokerCpu:
        self.cpu = process_cpu_seconds(self.pid) if self.pid else None
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        cpu = process_cpu_seconds(self.pid) if self.pid else None
        elapsed = time.perf_counter() - self.start
        self.busy = None if cpu is None or self.cpu is None or not elapsed else (cpu - self.cpu) / elapsed


def _ceiling(spark: Any, rows_per_batch: int, batches: int, timeout: float) -> dict[str, Any]:
    """The rate-micro-batch source to the noop sink: rows/s over ``batches`` micro-batches after the first."""
    checkpoint = tempfile.mkdtemp(prefix="ceiling-", dir=os.environ["SPARK_BENCH_TMP"])
    query = (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", rows_per_batch)
        .option("numPartitions", 2)
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", checkpoint)
        .start()
    )
    deadline = time.monotonic() + timeout
    try:
        while len(query.recentProgress) < batches + 1 and time.monotonic() < deadline:
            if query.exception() is not None:
                raise RuntimeError(f"the rate-micro-batch query failed: {query.exception()}")
            time.sleep(0.1)
    finally:
        query.stop()
    progresses = [progress for progress in query.recentProgress if progress.numInputRows][1:]
    span, rows = _progress_span(progresses)
    return {
        "rows_per_batch": rows_per_batch,
        "batches": len(progresses),
        "rate": rows / span if span else None,
        "durations": _durations(progresses),
    }


class _RunnerCpu:
    """CPU time while a query runs, sampled from /proc every 50 ms: the streaming source runners that Spark's JVM
    (``jvm_pid``) starts (``samples``: [(seconds since start, CPU seconds)]; a runner ends with its query), and in
    all (``cpu``, once the block ends) the JVM's, its Python workers' (``pyspark.daemon`` and the workers it forks),
    and the whole machine's, so that a read's time can be told apart: receiving and building rows, or Spark taking
    them."""

    RUNNER = b"pyspark.sql.streaming.python_streaming_source_runner"
    WORKERS = b"pyspark.daemon"

    def __init__(self, jvm_pid: int) -> None:
        self.jvm_pid = jvm_pid
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        #: pid -> CPU seconds when first seen (0 for a process started meanwhile) and when last seen
        self._workers: dict[int, list[float]] = {}
        self._known: dict[int, bytes] = {}
        self._scans = 0
        #: the threads of this query's source runners: (pid, thread id) -> CPU seconds when last seen
        self._runners: dict[tuple[int, int], float] = {}
        self._earlier_runners: set[int] = set()

    def _descendants(self) -> dict[int, bytes]:
        """The JVM's processes below it (its children and theirs): pid -> command line."""
        below: dict[int, bytes] = {}
        for pid in descendants(self.jvm_pid)[1:]:
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                    below[pid] = cmdline.read()
            except OSError:
                continue  # ended meanwhile
        return below

    @staticmethod
    def _thread_cpu(pid: int) -> dict[int, float]:
        """CPU seconds of each of the process's threads now, to the nanosecond (/proc/PID/task/*/schedstat), where
        /proc/PID/stat counts in ticks of 10 ms: too coarse for a few milliseconds per micro-batch."""
        threads: dict[int, float] = {}
        try:
            names = os.listdir(f"/proc/{pid}/task")
        except OSError:
            return threads  # the process ended
        for thread in names:
            try:
                with open(f"/proc/{pid}/task/{thread}/schedstat") as schedstat:
                    threads[int(thread)] = int(schedstat.read().split()[0]) / 1e9
            except (OSError, ValueError, IndexError):
                continue
        return threads

    def _scan(self, first: bool = False) -> None:
        # Walking /proc for the JVM's processes costs milliseconds: every tenth sample, the CPU of those known between.
        if first or self._scans % 10 == 0:
            self._known = self._descendants()
        self._scans += 1
        for pid, cmdline in self._known.items():
            if self.RUNNER in cmdline:
                if first:
                    self._earlier_runners.add(pid)  # an earlier query's, ending: not this one's
                elif pid not in self._earlier_runners:
                    # Thread by thread, each thread's last value kept when it ends (a runner's threads come and
                    # go): the sum never drops.
                    for thread, seconds in self._thread_cpu(pid).items():
                        self._runners[pid, thread] = seconds
            elif self.WORKERS in cmdline:
                # /proc/PID/stat, in ticks of 10 ms, but with ended threads (a read task's event-loop thread ends
                # with the task, and its time with it from /proc/PID/task)
                cpu = process_cpu_seconds(pid)
                if cpu is not None:
                    self._workers.setdefault(pid, [cpu if first else 0.0, cpu])[1] = cpu
        if self._runners:
            self.samples.append((time.time() - self.started, sum(self._runners.values())))

    def _sample(self) -> None:
        while not self._stop.wait(0.05):
            self._scan()

    @staticmethod
    def _machine_busy() -> float:
        """Busy CPU seconds of the whole machine since boot (/proc/stat, all cores)."""
        with open("/proc/stat") as stat:
            fields = [int(value) for value in stat.readline().split()[1:]]
        idle = fields[3] + fields[4]
        return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")

    def __enter__(self) -> _RunnerCpu:
        self.started = time.time()
        self._jvm = process_cpu_seconds(self.jvm_pid)
        self._machine = self._machine_busy()
        self._scan(first=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
        self._scan()
        jvm = process_cpu_seconds(self.jvm_pid)
        self.cpu = {
            "wall": time.time() - self.started,
            "jvm": None if jvm is None or self._jvm is None else jvm - self._jvm,
            "workers": sum(last - first for first, last in self._workers.values()),
            "machine": self._machine_busy() - self._machine,
        }

    def at(self, moment: float) -> float | None:
        """The runner's CPU seconds at the last sample before ``moment`` (a time.time() value)."""
        offset = moment - self.started
        before = [cpu for seconds, cpu in self.samples if seconds <= offset]
        return before[-1] if before else None


def _write(
    spark: Any, frame: Any, url: str, address: str, group: str, broker_pid: int, transactional: bool = False
) -> dict[str, Any]:
    spark.sparkContext.setJobGroup(group, "amqp write benchmark")
    with _BrokerCpu(broker_pid) as busy:
        start = time.perf_counter()
        writer = frame.write.format("amqp").option("url", url).option("address", address).mode("append")
        if transactional:
            writer = writer.option("transactional", "true")
        writer.save()
        elapsed = time.perf_counter() - start
    spark.sparkContext.setJobGroup("other", "other")
    return {"seconds": elapsed, "broker_busy": busy.busy, "transactional": transactional, **_stage_times(spark, group)}


def _describe(setting: dict[str, Any]) -> str:
    where = "driver" if setting["mode"] == "driver" else "executors"
    schema = ", body only" if setting.get("body_only") else ""
    return (
        f"stream read on the {where}, {setting['partitions']} partition{'s' if setting['partitions'] > 1 else ''}, "
        f"batches {setting['batch']:,}{schema}"
    )


def _read(
    spark: Any, url: str, address: str, count: int, setting: dict[str, Any], broker_pid: int, jvm_pid: int,
    timeout: float,
) -> dict[str, Any]:  # fmt: skip
    checkpoint = tempfile.mkdtemp(prefix="read-", dir=os.environ["SPARK_BENCH_TMP"])
    log_location = tempfile.mkdtemp(prefix="log-", dir=os.environ["SPARK_BENCH_TMP"])
    with _BrokerCpu(broker_pid) as busy, _RunnerCpu(jvm_pid) as runner:
        start = time.perf_counter()
        reader = spark.readStream.format("amqp")
        if setting.get("body_only"):
            reader = reader.schema("body binary")  # a narrowed read schema: only the body column is built
        reader = (
            reader.option("url", url)
            .option("address", address)
            .option("maxMessagesPerBatch", setting["batch"])
            .option("credit", setting["credit"])
            .option("numPartitions", setting["partitions"])
            .option("receiveOn", setting["mode"])
        )
        if setting["mode"] == "executors":
            reader = reader.option("logLocation", log_location)
        query = (
            reader.load()
            .writeStream.format("noop")
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        try:
            finished = query.awaitTermination(timeout)
        finally:
            if query.isActive:
                query.stop()
        wall = time.perf_counter() - start
    if not finished:
        raise RuntimeError(f"the streaming read did not end within {timeout:.0f} s")
    if query.exception() is not None:
        raise RuntimeError(f"the streaming read failed: {query.exception()}")
    progresses = list(query.recentProgress)
    span, rows = _progress_span(progresses)
    if rows != count:
        raise RuntimeError(f"the streaming read took {rows} rows, not {count}")
    batches = [progress for progress in progresses if "addBatch" in (progress.durationMs or {})]
    per_batch_cpu = None
    if len(batches) >= 2:
        first_end = _end_of(batches[0])
        before, after = runner.at(first_end), runner.at(_end_of(batches[-1]) + 0.06)
        if before is not None and after is not None:
            per_batch_cpu = (after - before) / (len(batches) - 1)
    return {
        **setting,
        "rows": rows,
        "batches": sum(1 for progress in progresses if progress.numInputRows),
        "micro_batches": len(batches),
        "seconds": span,
        "wall": wall,
        "rate": rows / span if span else None,
        "wall_rate": rows / wall,
        "broker_busy": busy.busy,
        "runner_cpu_per_batch": per_batch_cpu,
        "runner_cpu": runner.samples[-1][1] if runner.samples else None,
        "cpu": runner.cpu,
        "durations": _durations(progresses),
        "per_batch": [
            [progress.numInputRows, *(float(progress.durationMs.get(phase, 0)) for phase in PER_BATCH)]
            for progress in batches
        ],
    }


def _end_of(progress: Any) -> float:
    """When a micro-batch ended (a time.time() value)."""
    started = datetime.datetime.fromisoformat(progress.timestamp)
    return started.timestamp() + progress.durationMs.get("triggerExecution", 0) / 1000.0


def spark_child(
    url: str, prefix: str, count: int, settings: list[dict[str, Any]], broker_pid: int, transactional_rounds: int
) -> dict[str, Any]:
    """Every Spark measurement, in this process (one session): the ceilings, then for each read setting a batch
    write of ``count`` rows to a fresh queue and a streaming read of it; the transactional writes between the first
    ones."""
    from pyspark.sql import SparkSession

    from amqp_async.spark import AmqpDataSource

    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="spark-", dir=os.environ.get("SPARK_BENCH_TMP")) as scratch:
        os.environ["SPARK_BENCH_TMP"] = scratch
        spark = (
            SparkSession.builder.master("local[2]")
            .appName("amqp_async spark benchmark")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.default.parallelism", "2")
            .config("spark.sql.streaming.numRecentProgressUpdates", "1000")
            .config("spark.local.dir", scratch)
            .config("spark.sql.warehouse.dir", os.path.join(scratch, "warehouse"))
            .getOrCreate()
        )
        try:
            spark.sparkContext.setLogLevel("ERROR")
            spark.dataSource.register(AmqpDataSource)
            jvm_pid = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
            result: dict[str, Any] = {"startup": time.perf_counter() - started}
            frame = spark.range(count).selectExpr("cast(id as string) as body").repartition(2).cache()
            if frame.count() != count:
                raise RuntimeError("the cached DataFrame lost rows")
            # Warm-up, not timed: Spark's Python workers and the source runner start, the code paths are compiled.
            warm = min(count, 2_000)
            for index, mode in enumerate(("executors", "driver")):
                address = f"{prefix}-warm-up-{index}"
                _write(spark, frame.limit(warm), url, address, "warm-up", broker_pid, transactional=index == 1)
                warm_setting = {"batch": 1_000, "credit": 2_000, "partitions": 2, "mode": mode}
                _read(spark, url, address, warm, warm_setting, broker_pid, jvm_pid, 120)
            sizes = sorted({setting["batch"] for setting in settings})
            result["ceilings"] = [_ceiling(spark, size, 5, 60) for size in sizes]
            result["writes"] = []
            result["transactional_writes"] = []
            rounds: list[list[dict[str, Any]]] = [[] for _ in settings]
            for round_ in range(READ_ROUNDS):
                for index, setting in enumerate(settings):
                    if round_ == 0 and index < transactional_rounds:
                        address = f"{prefix}-txn-{index}"
                        write = _write(spark, frame, url, address, f"txn-{index}", broker_pid, transactional=True)
                        result["transactional_writes"].append(write)
                    address = f"{prefix}-{round_}-{index}"
                    group = f"write-{round_}-{index}"
                    result["writes"].append(_write(spark, frame, url, address, group, broker_pid))
                    rounds[index].append(_read(spark, url, address, count, setting, broker_pid, jvm_pid, 120))
            # Each setting's better round, as the client's reference is its better round: the first read of a
            # setting may pay for the JVM compiling its path (the warm-up reads only 2,000 rows).
            result["reads"] = [
                {**max(each, key=lambda read: read["rate"] or 0.0), "rates": [read["rate"] for read in each]}
                for each in rounds
            ]
            return result
        finally:
            spark.stop()


# --- the benchmark -----------------------------------------------------------------------------------------------


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def measure(
    count: int, settings: list[dict[str, Any]], timeout: float = 280, transactional_rounds: int = 3
) -> dict[str, Any]:
    """Every figure (client and Spark) through one broker process, which is always stopped at the end."""
    run = uuid.uuid4().hex[:8]
    started = time.monotonic()
    client: dict[str, dict[str, Any]] = {}
    transactional_rounds = min(transactional_rounds, len(settings))
    with broker_process() as broker:
        loops = ["asyncio", "uvloop"] if _uvloop_available() else ["asyncio"]
        rounds = [_client_round(broker, loops, count, f"{run}-before")]
        remaining = max(30.0, timeout - (time.monotonic() - started))
        _say(f"  Spark: {len(settings)} write + streaming read rounds of {count:,} rows (at most {remaining:.0f} s)")
        arguments = ["spark", broker.url, f"bench-spark-{run}", str(count), json.dumps(settings)]
        with tempfile.TemporaryDirectory(prefix="amqp-spark-bench-") as scratch:
            figures = run_child(
                [*arguments, str(broker.process.pid), str(transactional_rounds)], timeout=remaining, scratch=scratch
            )
        addresses = [
            f"bench-spark-{run}-{round_}-{index}" for round_ in range(READ_ROUNDS) for index in range(len(settings))
        ]
        figures["left"] = anyio.run(_left_in, broker.url, addresses)
        committed = [f"bench-spark-{run}-txn-{index}" for index in range(transactional_rounds)]
        figures["transactional_held"] = [anyio.run(_left_in, broker.url, [address]) for address in committed]
        rounds.append(_client_round(broker, loops, count, f"{run}-after"))
    for loop in loops:
        # The reference is the client's better round: the host's speed drifts over a run (the machine is shared),
        # and the better round is the stricter reference for Spark's figures.
        client[loop] = {"rounds": [each[loop] for each in rounds]}
        for kind in ("send", "receive"):
            best = max(rounds, key=lambda each: float(each[loop][kind]))[loop]
            client[loop][kind] = best[kind]
            client[loop][f"{kind}_broker_busy"] = best[f"{kind}_broker_busy"]
    return {"count": count, "client": client, "spark": figures, "seconds": time.monotonic() - started}


def _client_round(broker: Any, loops: list[str], count: int, tag: str) -> dict[str, dict[str, Any]]:
    """The awaitable client's send and receive of ``count`` messages on each loop, each in a process of its own:
    msg/s and the broker's CPU use meanwhile."""
    found: dict[str, dict[str, Any]] = {}
    for loop in loops:
        address = f"bench-spark-client-{loop}-{tag}"
        figures: dict[str, Any] = {}
        for kind in ("send", "receive"):
            with _BrokerCpu(broker.process.pid) as busy:
                figures[kind] = run_child(["client", kind, loop, broker.url, address, str(count)], timeout=120)
            figures[f"{kind}_broker_busy"] = busy.busy
            _say(f"  awaitable client on {loop}, {kind} ({tag.rsplit('-', 1)[1]} Spark): {figures[kind]:,.0f} msg/s")
        found[loop] = figures
    return found


async def _left_in(url: str, addresses: list[str]) -> int:
    """How many messages the queues hold (each streaming read must have taken and accepted all of its own; each
    transactional write must have committed all); they are taken and accepted here."""
    left = 0
    with anyio.fail_after(60):
        async with amqp_async.connect(url, reconnect=False) as connection:
            for address in addresses:
                receiver = await connection.open_receiver(address, credit=0)
                while True:
                    receiver.add_credit(1000)
                    await receiver.drain()
                    taken = 0
                    while (delivery := receiver.receive_nowait()) is not None:
                        await delivery.accept()
                        taken += 1
                    left += taken
                    if taken < 1000:
                        break
                await receiver.close()
    return left


def _settings(batches: tuple[int, ...] | list[int]) -> list[dict[str, Any]]:
    """The read settings: 2 partitions on the executors for each batch size (the goal's rounds), then at the
    largest: 1 and 4 partitions (scaling), the body alone, and on the driver (the former design)."""
    largest = max(batches)
    settings: list[dict[str, Any]] = [
        {"batch": batch, "credit": TASK_CREDIT, "partitions": 2, "mode": "executors"} for batch in batches
    ]
    settings += [
        {"batch": largest, "credit": TASK_CREDIT, "partitions": partitions, "mode": "executors"}
        for partitions in (1, 4)
    ]
    settings.append({"batch": largest, "credit": TASK_CREDIT, "partitions": 2, "mode": "executors", "body_only": 1})
    settings.append({"batch": largest, "credit": 2 * largest, "partitions": 2, "mode": "driver"})
    return settings


def default_settings(quick: bool) -> list[dict[str, Any]]:
    """The read settings for a full run (batches of 10,000, 20,000 and 50,000) or a quick one (5,000 to 20,000)."""
    return _settings((5_000, 10_000, 20_000) if quick else (10_000, 20_000, 50_000))


def _reference(client: dict[str, dict[str, Any]], kind: str) -> tuple[float, str]:
    loop = max(client, key=lambda name: client[name][kind])
    return float(client[loop][kind]), loop


def _shares(durations: dict[str, float]) -> str:
    total = durations.get("triggerExecution") or 0.0
    if not total:
        return "-"
    parts = [(phase, durations.get(phase, 0.0)) for phase in PHASES]
    other = total - sum(milliseconds for _, milliseconds in parts)
    parts.append(("other", max(0.0, other)))
    return ", ".join(f"{phase} {100 * milliseconds / total:.0f}%" for phase, milliseconds in parts if milliseconds)


def _busy(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def _goal_reads(reads: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in reads if r["mode"] == "executors" and r["partitions"] == 2 and not r.get("body_only")]


def rows_from(figures: dict[str, Any]) -> list[Row]:
    """The report's rows: the Spark figures with the awaitable client's in the reference column (and a plain
    write's for the transactional write)."""
    count = figures["count"]
    client, spark = figures["client"], figures["spark"]
    send, send_loop = _reference(client, "send")
    receive, receive_loop = _reference(client, "receive")
    writes, reads = spark["writes"], spark["reads"]
    left = f"; {spark['left']:,} messages left in the queues after the reads" if spark.get("left") else ""
    best_write = min(writes, key=lambda write: write["seconds"])
    plain_rate = count / best_write["seconds"]
    goal = _goal_reads(reads) or reads
    best_read = max(goal, key=lambda read: read["rate"] or 0.0)
    ceilings = {ceiling["rows_per_batch"]: ceiling for ceiling in spark["ceilings"]}
    rows = [
        Row(
            SECTION,
            "batch write, 2 partitions",
            "rows/s",
            plain_rate,
            send,
            target=WRITE_TARGET,
            note=(
                f"reference column: the awaitable client's send on {send_loop}, not proton; best of {len(writes)}, "
                f"median {count / statistics.median(write['seconds'] for write in writes):,.0f} rows/s"
            ),
        )
    ]
    transactional = spark.get("transactional_writes") or []
    if transactional:
        best = min(transactional, key=lambda write: write["seconds"])
        held = spark.get("transactional_held") or []
        rows.append(
            Row(
                SECTION,
                "batch write, 2 partitions, transactional=true",
                "rows/s",
                count / best["seconds"],
                plain_rate,
                target=TRANSACTIONAL_TARGET,
                note=(
                    f"reference column: the best plain write of this run; best of {len(transactional)}; the queues "
                    f"held {', '.join(f'{n:,}' for n in held)} messages after the commits"
                ),
            )
        )
    for read in reads:
        best = read is best_read
        cpu = read.get("runner_cpu_per_batch")
        rows.append(
            Row(
                SECTION,
                _describe(read),
                "rows/s",
                read["rate"],
                receive,
                target=READ_TARGET if best else None,
                note=(
                    f"reference column: the awaitable client's receive on {receive_loop}; "
                    f"{read['wall_rate']:,.0f} rows/s from query start to end; driver (source runner) CPU "
                    + ("-" if cpu is None else f"{1000 * cpu:.0f} ms")
                    + " per micro-batch"
                    + ("; the best setting" + left if best else "")
                ),
            )
        )
    ceiling = ceilings.get(best_read["batch"])
    if ceiling is not None:
        rows.append(
            Row(
                SECTION,
                f"Spark ceiling: rate-micro-batch {ceiling['rows_per_batch']:,}/batch",
                "rows/s",
                ceiling["rate"],
                None,
                note="rate-micro-batch source to noop sink: Spark alone, same session and machine",
            )
        )
    return rows


def run(
    quick: bool = False,
    messages: int | None = None,
    settings: list[dict[str, Any]] | None = None,
    timeout: float = 600,
) -> list[Row]:
    """The rows of this benchmark (for report.py); everything within ``timeout`` seconds."""
    count = messages or (20_000 if quick else 100_000)
    return rows_from(measure(count, settings or default_settings(quick), timeout=timeout))


def print_figures(figures: dict[str, Any]) -> None:
    """The table (measure, rows/s, ratio to the reference, target, met), then where the time goes."""
    count = figures["count"]
    client, spark = figures["client"], figures["spark"]
    send, send_loop = _reference(client, "send")
    receive, receive_loop = _reference(client, "receive")
    print()
    print(f"Spark data source vs the awaitable client, through our embedded broker: {count:,} messages, local[2]")
    header = f"{'measure':<66}{'rows/s':>10}{'x ref':>8}{'target':>8}{'met':>5}"
    print(header)
    print("-" * len(header))

    def line(name: str, rate: float | None, reference: float | None, target: float | None) -> None:
        ratio = rate / reference if rate and reference else None
        met = "" if target is None or ratio is None else ("yes" if ratio >= target else "no")
        print(
            f"{name:<66}{rate or 0:>10,.0f}{'-' if ratio is None else f'{ratio:.2f}':>8}"
            f"{'' if target is None else f'>={target:g}':>8}{met:>5}"
        )

    for loop, rates in client.items():
        line(f"awaitable client send, {loop}", rates["send"], None, None)
        line(f"awaitable client receive, {loop}", rates["receive"], None, None)
    for row in rows_from(figures):
        line(row.name, row.ours, row.proton, row.target)
    print(
        f"(reference: the client's send on {send_loop} for the plain write, the best plain write for the "
        f"transactional one, the client's receive on {receive_loop} for the reads)"
    )

    print()
    print("Where the time goes")
    print(f"  Spark session start: {spark['startup']:.1f} s")
    for loop, rates in client.items():
        rounds = rates.get("rounds", [])
        history = ""
        if len(rounds) > 1:
            sends, receives = (" / ".join(f"{each[kind]:,.0f}" for each in rounds) for kind in ("send", "receive"))
            history = f"; before / after Spark: send {sends}, receive {receives} msg/s (the better is the reference)"
        print(
            f"  client on {loop}: broker CPU busy {_busy(rates['send_broker_busy'])} while it sent, "
            f"{_busy(rates['receive_broker_busy'])} while it received{history}"
        )
    print(f"  batch writes of {count:,} rows (client alone: {count / send:.2f} s for them):")
    for write in spark["writes"] + spark.get("transactional_writes", []):
        tasks = max(1, int(write["tasks"]))
        kind = "transactional" if write.get("transactional") else "plain"
        print(
            f"    {kind}: save() {write['seconds']:.2f} s ({count / write['seconds']:,.0f} rows/s); stages from "
            f"first task to end {write['stages_ms'] / 1000:.2f} s; {tasks} tasks ran {write['task_run_ms'] / 1000:.2f}"
            f" s in all; broker CPU busy {_busy(write['broker_busy'])}"
        )
    print(f"  streaming reads of {count:,} messages (client alone: {count / receive:.2f} s for them):")
    for read in spark["reads"]:
        durations = read["durations"]
        cpu = read.get("runner_cpu_per_batch")
        print(
            f"    {_describe(read)}, credit {read['credit']:,}: {read['batches']} batches with rows in "
            f"{read['seconds']:.2f} s ({read['rate'] or 0:,.0f} rows/s; query start to end {read['wall']:.2f} s); "
            f"broker CPU busy {_busy(read['broker_busy'])}; the better of rounds at "
            + " and ".join(f"{rate or 0:,.0f}" for rate in read.get("rates", []))
            + " rows/s"
        )
        print(
            "      driver: the source runner's CPU per micro-batch "
            + ("-" if cpu is None else f"{1000 * cpu:.1f} ms")
            + f" over {read['micro_batches']} micro-batches (its whole life: "
            + ("-" if read.get("runner_cpu") is None else f"{read['runner_cpu']:.2f} s")
            + ", start-up and imports included)"
        )
        print(f"      trigger time {durations.get('triggerExecution', 0) / 1000:.2f} s: {_shares(durations)}")
        cpu_split = read.get("cpu")
        if cpu_split:
            print(
                f"      CPU seconds over the query's {cpu_split['wall']:.2f} s: Spark's JVM "
                + ("-" if cpu_split["jvm"] is None else f"{cpu_split['jvm']:.2f}")
                + f", its Python workers {cpu_split['workers']:.2f}, broker "
                + ("-" if read["broker_busy"] is None else f"{read['broker_busy'] * read['wall']:.2f}")
                + f", the whole machine {cpu_split['machine']:.2f} of {os.cpu_count() or 1} cores"
            )
        batches = "; ".join(
            f"{rows:,.0f} rows {latest:.0f}/{add:.0f}/{commit:.0f}/{total:.0f}"
            for rows, latest, add, commit, total in read.get("per_batch", [])
        )
        print(f"      per batch, ms of latestOffset/addBatch/commitOffsets/trigger: {batches}")
    for ceiling in spark["ceilings"]:
        durations = ceiling["durations"]
        print(
            f"  Spark's ceiling, rate-micro-batch {ceiling['rows_per_batch']:,} rows a batch to noop: "
            f"{ceiling['rate'] or 0:,.0f} rows/s over {ceiling['batches']} batches; "
            f"per batch {durations.get('triggerExecution', 0) / max(1, ceiling['batches']):.0f} ms: {_shares(durations)}"
        )
    print(f"  messages left in the read queues afterwards (should be 0): {spark.get('left', '-')}")
    held = spark.get("transactional_held") or []
    print(f"  messages in each transactional write's queue (should be {count:,}): {', '.join(map(str, held)) or '-'}")
    print(f"(the whole benchmark: {figures['seconds']:.0f} s)")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        kind = sys.argv[2]
        if kind == "client":
            direction, loop, url, address, count = sys.argv[3:8]
            print(json.dumps(client_child(direction, loop, url, address, int(count))), flush=True)
        else:
            url, prefix, count, settings, broker_pid, rounds = sys.argv[3:9]
            figures = spark_child(url, prefix, int(count), json.loads(settings), int(broker_pid), int(rounds))
            print(json.dumps(figures), flush=True)
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small run (20,000 messages; batches of 5k-20k)")
    parser.add_argument("--messages", type=int, help="messages per measurement (default 100,000)")
    parser.add_argument("--batches", help="maxMessagesPerBatch values, comma-separated")
    parser.add_argument("--timeout", type=float, default=900, help="seconds the whole run may take (default 900)")
    parser.add_argument("--json", action="store_true", help="print the raw figures as JSON as well")
    args = parser.parse_args()
    count = args.messages or (20_000 if args.quick else 100_000)
    settings = (
        _settings([int(batch) for batch in args.batches.split(",") if batch.strip()])
        if args.batches
        else default_settings(args.quick)
    )
    figures = measure(count, settings, timeout=args.timeout)
    print_figures(figures)
    if args.json:
        print(json.dumps(figures))


if __name__ == "__main__":
    main()
