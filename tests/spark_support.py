"""What the Spark tests share: Java, a Spark session, a TCP proxy that can cut connections, queue helpers, the
orders the end-to-end tests write and check, and who holds a connection to a broker (from /proc).

Spark 4 runs on Java 17: :func:`ensure_java` installs Debian's ``openjdk-17-jre-headless`` when no ``java`` is on
the PATH (as root, idempotent, under a file lock, announced first; skipped with ``AMQP_ASYNC_TEST_NO_INSTALL=1``),
so a fresh machine needs nothing done by hand. The Python
workers Spark starts run the interpreter of the tests (``PYSPARK_PYTHON``), so they import this checkout's
``amqp_async``.
"""

from __future__ import annotations

import atexit
import contextlib
import datetime
import fcntl
import ipaddress
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

import amqp_async
from amqp_async.broker import BrokerThread

try:
    import installs
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests import installs

_INSTALL_LOCK = "/tmp/amqp_async-java-install.lock"

#: The program that runs a Spark driver of its own, for the tests that need their own master or kill the driver.
PROGRAM = [sys.executable, str(Path(__file__).resolve().parent / "spark_stream_program.py")]


def run_program(*arguments: str, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    """Run :data:`PROGRAM` with ``arguments`` to its end, its output captured (the caller checks the exit code)."""
    return subprocess.run([*PROGRAM, *arguments], env=env, capture_output=True, text=True, timeout=timeout, check=False)


#: What Spark raises when a Python process it starts on the driver (a data source's planner, a streaming source's
#: runner) did not connect back within the 10 s ``PythonWorkerFactory.createSimpleWorker`` gives it, a bound no
#: setting changes: on two cores loaded by the rest of the suite, that process's imports alone can take longer.
WORKER_NOT_BACK = "Python worker failed to connect back"


def read_until_empty(spark: Any, url: str, address: str, checkpoint: str, **options: Any) -> Any:
    """The queue at ``address`` read as a stream until it is empty (``Trigger.AvailableNow``), with the source's
    ``options`` (``numPartitions``, ``maxMessagesPerBatch``, ``logLocation``...): its writer, checkpointed at
    ``checkpoint``, to be given a sink and started."""
    reader = spark.readStream.format("amqp").option("url", url).option("address", address)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load().writeStream.option("checkpointLocation", checkpoint).trigger(availableNow=True)


def run_query(start: Callable[[], Any], timeout: float | None, attempts: int = 3) -> Any:
    """Start a streaming query with ``start`` (the whole chain from ``readStream``) and wait for it to end (up to
    ``timeout`` seconds; None: for ever); return it.

    When Spark could not start one of the driver's Python processes (:data:`WORKER_NOT_BACK`) before the query
    made any progress, nothing was read yet: the query is started again from its checkpoint, as a user would
    restart it, up to ``attempts`` times in all (each said on the error output). Any other failure, or that one
    after a micro-batch ran, is raised as it is."""
    for attempt in range(1, attempts + 1):
        query = None
        try:
            query = start()
            if timeout is None:
                query.awaitTermination()
            else:
                query.awaitTermination(timeout)
            return query
        except Exception as exc:
            progressed = query is not None and bool(query.recentProgress)
            if WORKER_NOT_BACK not in str(exc) or progressed or attempt == attempts:
                raise
            print(f"attempt {attempt}: Spark could not start a Python worker in time; starting again", file=sys.stderr)
    raise AssertionError("not reached")


def failure_of(result: subprocess.CompletedProcess[str]) -> str:
    """What a failed :func:`run_program` printed that says why: its output, the Python traceback from its error
    output (which the JVM's shutdown logs follow, so that the tail alone would hide it), and that output's tail."""
    errors = result.stderr
    start = errors.rfind("Traceback (most recent call last)")
    traceback_text = errors[start : start + 6000] if start >= 0 else "(no Python traceback)"
    return f"exit code {result.returncode}\n{result.stdout}\n{traceback_text}\n...\n{errors[-3000:]}"


@pytest.fixture(name="broker")
def broker_fixture() -> Iterator[BrokerThread]:
    """The embedded broker, in a thread of the test's process, on a free port."""
    with BrokerThread() as running_broker:
        yield running_broker


def ensure_java() -> str:
    """The path of ``java``, installing Java 17 with apt-get when there is none."""
    java = shutil.which("java")
    if java:
        return java
    command = ["apt-get", "install", "-y", "--no-install-recommends", "openjdk-17-jre-headless"]

    def run() -> None:
        with open(_INSTALL_LOCK, "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if shutil.which("java"):
                return
            env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
            if subprocess.run(command, env=env, check=False).returncode != 0:
                subprocess.run(["apt-get", "update"], env=env, check=True)
                subprocess.run(command, env=env, check=True)

    # said on the terminal first; skipped instead with AMQP_ASYNC_TEST_NO_INSTALL=1 (tests/installs.py)
    installs.install("Java 17 (openjdk-17-jre-headless)", "the Spark tests", command, run=run)
    java = shutil.which("java")
    assert java, "openjdk-17-jre-headless was installed but java is not on the PATH"
    return java


def _faults_directory() -> str:
    """The directory a parent process made (the environment names it), else a new one, removed at this process's
    exit: each process that imports this module (pytest's workers, the Spark programs they start, Spark's Python
    workers) would otherwise leave one behind."""
    given = os.environ.get("AMQP_ASYNC_SPARK_FAILPOINTS")
    if given and os.path.isdir(given):
        return given
    made = tempfile.mkdtemp(prefix="amqp-spark-faults-")
    atexit.register(shutil.rmtree, made, ignore_errors=True)
    return made


#: The fault points' trigger directory of the tests' Spark session (``amqp_async.spark._failpoints``): set in the
#: environment before the session's JVM starts, so that every Python worker it forks sees it.
FAULTS = _faults_directory()


#: Options for the tests' JVMs (Spark's drivers and executors, a standalone cluster's master and workers), read by
#: every JVM from ``JAVA_TOOL_OPTIONS``: each lives a few minutes and keeps little code hot, so the optimising
#: compiler (C2) costs more CPU than it repays, and the serial collector suits their small heaps. Measured on the
#: 2-core machine, the three files that start Spark: 442 -> 317 CPU-seconds, 295 -> 255 s (2026-11-27).
TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def spark_environment() -> dict[str, str]:
    """The environment for Spark programs: the test's interpreter for every Python worker, the fault points'
    trigger directory (empty unless a test puts a trigger there), and :data:`TEST_JVM_OPTIONS` after any the
    environment had."""
    ensure_java()
    given = os.environ.get("JAVA_TOOL_OPTIONS", "")
    if TEST_JVM_OPTIONS not in given:
        os.environ["JAVA_TOOL_OPTIONS"] = f"{given} {TEST_JVM_OPTIONS}".strip()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["AMQP_ASYNC_SPARK_FAILPOINTS"] = FAULTS
    return {**os.environ}


def fired(directory: str, point: str) -> bool:
    """True once the fault point trigger ``point`` in ``directory`` has fired (a worker renamed it)."""
    return any(name.startswith(f"{point}.fired-") for name in os.listdir(directory))


def new_session(master: str = "local[2,2]") -> Any:
    """A SparkSession for tests (``local[2,2]``: two task threads, a failed task is tried once more)."""
    spark_environment()
    from pyspark.sql import SparkSession

    from amqp_async.spark import AmqpDataSource

    spark = (
        SparkSession.builder.master(master)
        .appName("amqp_async tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(AmqpDataSource)
    return spark


# --- the orders the end-to-end tests write and check -----------------------------------------------------------------

UTC = datetime.timezone.utc


def orders(spark: Any, count: int, partitions: int = 2) -> Any:
    """``count`` rows with most message fields set, each a function of its ``n``."""
    return spark.range(count, numPartitions=partitions).selectExpr(
        "concat('order-', id) as body",
        "concat('subject-', id % 7) as subject",
        "'text/plain' as content_type",
        "cast(id % 10 as int) as priority",
        "id % 2 = 0 as durable",
        "cast(3600000 as bigint) as ttl",  # an hour: the broker expires messages (§3.2.1), none may expire here
        "timestamp_seconds(1700000000 + id) as creation_time",
        "concat('group-', id % 3) as group_id",
        "id as group_sequence",
        "map('n', cast(id as string), 'kind', 'order') as application_properties",
        "map('x-opt-shard', cast(id % 4 as string)) as message_annotations",
    )


def check_orders(rows: list[Any], count: int) -> None:
    """Every order 0..count-1 arrived once, each field as written."""
    assert len(rows) == count
    by_n = {int(row.application_properties["n"]): row for row in rows}
    assert sorted(by_n) == list(range(count))
    for n, row in by_n.items():
        assert row.body == f"order-{n}".encode()
        assert row.body_type == "string"
        assert row.subject == f"subject-{n % 7}"
        assert row.content_type == "text/plain"
        assert row.priority == n % 10
        assert row.durable is (n % 2 == 0)
        assert 3_000_000 < row.ttl <= 3_600_000  # the broker passes on the time left (§3.2.1: the reduced ttl)
        assert row.creation_time.replace(tzinfo=UTC) == datetime.datetime.fromtimestamp(1_700_000_000 + n, UTC)
        assert row.group_id == f"group-{n % 3}"
        assert row.group_sequence == n
        assert row.application_properties == {"n": str(n), "kind": "order"}
        assert row.message_annotations == {"x-opt-shard": str(n % 4)}
        assert row.message_id_type == "string"


# --- who holds a connection: /proc -----------------------------------------------------------------------------------


def command_line(pid: int) -> str:
    """The command line of process ``pid`` ("" when it is gone)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            return cmdline.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def parent_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return int(stat.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def ancestors(pid: int) -> list[int]:
    """The parent, grandparent... of ``pid``."""
    chain: list[int] = []
    parent = parent_of(pid)
    while parent and parent not in chain:
        chain.append(parent)
        parent = parent_of(parent)
    return chain


def _remote_address(field: str) -> tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int]:
    """The address and port of a ``/proc/net/tcp`` or ``tcp6`` line's ``rem_address`` field (``0100007F:1F90``: the
    address in 32-bit words of the host's byte order, little-endian here; an IPv4 peer of an IPv6 socket as the IPv4
    address it maps)."""
    address, port = field.rsplit(":", 1)
    raw = b"".join(bytes.fromhex(address[index : index + 8])[::-1] for index in range(0, len(address), 8))
    ip = ipaddress.ip_address(raw)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped, int(port, 16)
    return ip, int(port, 16)


def connections_to(port: int, host: str = "127.0.0.1") -> dict[int, str]:
    """The processes holding an established TCP connection to ``host``:``port`` (its remote end): pid -> command
    line. The address counts as well as the port: Spark's JVMs listen on the host's own address, where a port of
    the same number as the broker's may be free (a connection between two JVMs was once taken for one to the
    broker)."""
    wanted = (ipaddress.ip_address(socket.gethostbyname(host)), port)
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as lines:
                for line in list(lines)[1:]:
                    fields = line.split()
                    if fields[3] == "01" and _remote_address(fields[2]) == wanted:  # 01: ESTABLISHED
                        inodes.add(fields[9])
        except OSError:
            continue
    holders: dict[int, str] = {}
    if not inodes:
        return holders
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            for descriptor in os.listdir(f"/proc/{name}/fd"):
                target = os.readlink(f"/proc/{name}/fd/{descriptor}")
                if target.startswith("socket:[") and target[8:-1] in inodes:
                    holders[int(name)] = command_line(int(name))
                    break
        except OSError:
            continue
    return holders


class ConnectionWatch:
    """Samples :func:`connections_to` ``host``:``port`` every 50 ms in a thread: every process seen holding one."""

    def __init__(self, port: int, host: str = "127.0.0.1") -> None:
        self.port = port
        self.host = host
        self.holders: dict[int, str] = {}
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.holders.update(connections_to(self.port, self.host))
            self.samples += 1
            self._stop.wait(0.05)

    def __enter__(self) -> ConnectionWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(10)


# --- queues, seen through the awaitable client -------------------------------------------------------------------


def drain(url: str, address: str, *, accept: bool = True, timeout: float = 60) -> list[amqp_async.Message]:
    """Every message ``address`` holds now (taken and accepted unless ``accept`` is False: then released, once all
    are seen, so that none is seen twice).

    Drains until one brings nothing: a sender answers a drain (§2.6.7) by giving back the credit its session window
    (§2.5.6) held back too, as the embedded broker does, so fewer than the credit can come while more wait (as
    ``amqp_async.spark._links._nothing_more`` knows). Before, the first drain that brought fewer than its credit
    ended the count: 53 of 340 messages of 20 KB on the embedded broker. The cost: one more round trip, an empty
    drain."""

    async def run() -> list[amqp_async.Message]:
        held = []
        with anyio.fail_after(timeout):
            async with amqp_async.connect(url, reconnect=False) as connection:
                receiver = await connection.open_receiver(address, credit=0)
                while True:
                    receiver.add_credit(1000)
                    await receiver.drain()
                    taken = 0
                    while (delivery := receiver.receive_nowait()) is not None:
                        held.append(delivery)
                        if accept:
                            await delivery.accept()
                        taken += 1
                    if not taken:
                        break
                for delivery in held if not accept else ():
                    await delivery.release()
                return [delivery.message for delivery in held]

    return anyio.run(run)


def fill(url: str, address: str, messages: list[amqp_async.Message]) -> None:
    """Send ``messages`` to ``address``, each accepted."""

    async def run() -> None:
        async with amqp_async.connect(url, reconnect=False) as connection:
            sender = await connection.open_sender(address)
            trackers = [await sender.submit(message) for message in messages]
            for tracker in trackers:
                await tracker

    anyio.run(run)


# --- a TCP proxy whose connections a test can cut -----------------------------------------------------------------


class CuttableProxy:
    """Forwards 127.0.0.1:``port`` to ``target``; :meth:`cut` drops every connection it carries (as a network
    failure would: the peers see their sockets reset), and new ones are forwarded again."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self._target = (target_host, target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def url(self) -> str:
        return f"amqp://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self._target)
            with self._lock:
                self._sockets += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)

    def cut(self) -> None:
        """Reset every connection now."""
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                # shutdown() first: a close() alone leaves the connection up while a pump thread still blocks in
                # recv() on the socket (the kernel keeps it until that call returns).
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        self.cut()

    def __enter__(self) -> CuttableProxy:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


@contextlib.contextmanager
def running(process: subprocess.Popen[str]) -> Iterator[subprocess.Popen[str]]:
    """Kill ``process`` (and its group) on the way out, whatever happened."""
    try:
        yield process
    finally:
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, 9)
            process.wait(30)


# --- a standalone cluster whose workers are distinct hosts ---------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _wait_for_line(path: Path, text: str, process: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text(errors="replace"):
            return
        if process.poll() is not None:
            break
        time.sleep(0.2)
    tail = path.read_text(errors="replace")[-3000:] if path.exists() else ""
    raise RuntimeError(f"no {text!r} in {path} within {timeout:.0f} s:\n{tail}")


@contextlib.contextmanager
def standalone_cluster(workdir: Path, hosts: tuple[str, ...] = ("127.0.0.2", "127.0.0.3")) -> Iterator[str]:
    """A Spark standalone master and one worker (1 core, 1 GiB) on each of ``hosts``: loopback addresses that
    Spark's scheduler takes for distinct machines (it never runs a speculative copy of a task on the host of the
    first attempt, and every executor of ``local-cluster`` is on one host). Yields the master's URL; stops them all.
    """
    import pyspark

    spark_home = Path(pyspark.__file__).resolve().parent
    environment = {
        **spark_environment(),
        "SPARK_HOME": str(spark_home),
        "SPARK_LOG_DIR": str(workdir / "logs"),
        "SPARK_WORKER_DIR": str(workdir / "work"),
        "SPARK_NO_DAEMONIZE": "1",
    }
    port = _free_port()
    master_url = f"spark://127.0.0.1:{port}"
    processes: list[subprocess.Popen[bytes]] = []
    try:
        daemons = [("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port)])]
        daemons += [
            (f"worker-{host}", ["org.apache.spark.deploy.worker.Worker", "--host", host, "--cores", "1", "--memory",
                                "1g", "--work-dir", str(workdir / f"work-{host}"), master_url])
            for host in hosts
        ]  # fmt: skip
        for name, arguments in daemons:
            output = workdir / f"{name}.log"
            with open(output, "wb") as log_file:
                process = subprocess.Popen(
                    [str(spark_home / "bin" / "spark-class"), *arguments, "--webui-port", "0"],
                    env=environment,
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            processes.append(process)
            ready = "Starting Spark master" if name == "master" else "Successfully registered with master"
            _wait_for_line(output, ready, process, 120)
        yield master_url
    finally:
        for process in reversed(processes):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, 9)
            process.wait(30)
