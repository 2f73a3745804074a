"""What the Spark tests share: Java, a Spark session, a TCP proxy that can cut connections, queue helpers.

Spark 4 runs on Java 17: :func:`ensure_java` installs Debian's ``openjdk-17-jre-headless`` when no ``java`` is on
the PATH (as root, idempotent, under a file lock, announced first; skipped with ``AMQP_ASYNC_TEST_NO_INSTALL=1``),
so a fresh machine needs nothing done by hand. The Python
workers Spark starts run the interpreter of the tests (``PYSPARK_PYTHON``), so they import this checkout's
``amqp_async``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import anyio

import amqp_async

try:
    import installs
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests import installs

_INSTALL_LOCK = "/tmp/amqp_async-java-install.lock"


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


def spark_environment() -> dict[str, str]:
    """The environment for Spark programs: the test's interpreter for every Python worker."""
    ensure_java()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    return {**os.environ}


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


# --- queues, seen through the awaitable client -------------------------------------------------------------------


def drain(url: str, address: str, *, accept: bool = True, timeout: float = 60) -> list[amqp_async.Message]:
    """Every message ``address`` holds now (taken and accepted unless ``accept`` is False: then released)."""

    async def run() -> list[amqp_async.Message]:
        messages = []
        with anyio.fail_after(timeout):
            async with amqp_async.connect(url, reconnect=False) as connection:
                receiver = await connection.open_receiver(address, credit=0)
                while True:
                    receiver.add_credit(1000)
                    await receiver.drain()
                    taken = 0
                    while (delivery := receiver.receive_nowait()) is not None:
                        messages.append(delivery.message)
                        await (delivery.accept() if accept else delivery.release())
                        taken += 1
                    if taken < 1000:
                        return messages

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
