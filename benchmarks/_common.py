"""Shared pieces of the benchmarks: result rows, our broker in its own process, and the two clients' send and
receive loops written once so every benchmark times them the same way.

Not a benchmark itself (the leading underscore keeps ``nox -s bench`` from running it).

Timing rules, the same for both clients everywhere:

- connection set-up and link attach are outside the timed region;
- send: the clock starts when the first message is handed to the client and stops at the last outcome
  (at-least-once: every message accepted by the peer);
- receive: the clock starts at the first message and stops at the last one, so ``count - 1`` messages are timed;
  every message is accepted (ours: ``await delivery.accept()``; proton: auto-accept in ``on_message``).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import amqp_async  # noqa: E402
from amqp_async.message import Message  # noqa: E402

__all__ = [
    "ROOT",
    "BrokerProcess",
    "Row",
    "broker_process",
    "c_broker",
    "child_run",
    "ours_receive",
    "ours_send",
    "percentile",
    "print_rows",
    "proton_available",
    "proton_receive",
    "proton_send",
    "rss_bytes",
]


@dataclass
class Row:
    """One figure of ours beside proton's.

    ``better`` says which way is good ("higher" for rates, "lower" for latencies and bytes); :attr:`ratio` is
    always "how many times better than proton", so above 1 means ahead whatever the unit.
    """

    section: str
    name: str
    unit: str
    ours: float | None
    proton: float | None
    better: str = "higher"
    target: float | None = None
    note: str = ""

    @property
    def ratio(self) -> float | None:
        if not self.ours or not self.proton:
            return None
        return self.ours / self.proton if self.better == "higher" else self.proton / self.ours


def process_cpu_seconds(pid: int) -> float | None:
    """The CPU time (user + system) a process has used so far, from Linux's /proc; None elsewhere."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _figure(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit in ("µs", "MB/s", "B"):
        return f"{value:,.1f}" if value < 100 else f"{value:,.0f}"
    return f"{value:,.0f}"


def format_rows(rows: list[Row]) -> list[str]:
    """The rows as aligned text lines (header first); the first two columns are as wide as their longest entry."""
    section_width = max([12, *(len(row.section) + 1 for row in rows)])
    name_width = max([46, *(len(row.name) + 1 for row in rows)])
    header = (
        f"{'section':<{section_width}}{'figure':<{name_width}}{'unit':<7}{'amqp_async':>12}{'proton':>12}"
        f"{'x proton':>10}{'target':>8}"
    )
    lines = [header, "-" * len(header)]
    for row in rows:
        ratio = f"{row.ratio:.2f}" if row.ratio is not None else "-"
        target = f">={row.target:g}" if row.target else ""
        lines.append(
            f"{row.section:<{section_width}}{row.name:<{name_width}}{row.unit:<7}{_figure(row.ours, row.unit):>12}"
            f"{_figure(row.proton, row.unit):>12}{ratio:>10}{target:>8}" + (f"  {row.note}" if row.note else "")
        )
    return lines


def print_rows(
    title: str,
    rows: list[Row],
    legend: str = "x proton: how many times better than python-qpid-proton in the same run; >1 is ahead",
) -> None:
    print()
    print(title)
    print(f"({legend})")
    for line in format_rows(rows):
        print(line)


def percentile(values: list[float], fraction: float) -> float:
    """The ``fraction`` quantile (nearest rank) of ``values``."""
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(fraction * len(ordered)) - 1))
    return ordered[index]


def rss_bytes(pid: int | None = None) -> int:
    """The resident set size now of this process, or of process ``pid`` (Linux /proc)."""
    with open(f"/proc/{pid or 'self'}/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def child_run(script: str, arguments: list[str], what: str, timeout: float = 300) -> Any:
    """Run ``script --child ARGUMENTS`` in a fresh interpreter (our package first on its path) and return the JSON
    value it printed last: one measurement with nothing else of the benchmark sharing the client's process.

    Raises:
        RuntimeError: the child failed or printed nothing (with the end of its stderr).
        subprocess.TimeoutExpired: it ran past ``timeout`` seconds.
    """
    environment = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    result = subprocess.run(
        [sys.executable, script, "--child", *arguments],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=environment,
        check=False,
    )
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or not lines:
        raise RuntimeError(f"{what} child {arguments} failed ({result.returncode}):\n{result.stderr[-2000:]}")
    return json.loads(lines[-1])


def proton_available() -> bool:
    try:
        import proton  # noqa: F401
    except ImportError:
        return False
    return True


# --- our broker, in its own process ---------------------------------------------------------------------------


class BrokerProcess:
    """``python -m amqp_async.broker --port 0`` in a subprocess: the same peer for both clients, and one that does
    not share the client's interpreter (or its CPU time)."""

    def __init__(self, *extra: str) -> None:
        environment = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "amqp_async.broker", "--port", "0", "--quiet", *extra],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=environment,
            cwd=ROOT,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        match = re.search(r"listening on (amqps?://[^\s]+)", line)
        if match is None:
            self.process.kill()
            raise RuntimeError(f"the broker did not start: {line!r}")
        self.url = match.group(1)
        self.port = int(self.url.rsplit(":", 1)[1])
        #: with ``--ws-port``: the WebSocket URL, printed on the next line
        self.ws_url: str | None = None
        if "--ws-port" in extra:
            line = self.process.stdout.readline()
            ws_match = re.search(r"listening on (wss?://[^\s]+)", line)
            if ws_match is None:
                self.process.kill()
                raise RuntimeError(f"the broker did not serve WebSocket: {line!r}")
            self.ws_url = ws_match.group(1)
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        assert self.process.stdout is not None
        for _ in self.process.stdout:
            pass

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)


@contextmanager
def broker_process(*extra: str) -> Iterator[BrokerProcess]:
    broker = BrokerProcess(*extra)
    try:
        yield broker
    finally:
        broker.stop()


# --- our client ------------------------------------------------------------------------------------------------


async def ours_send(url: str, address: str, count: int, body: bytes, window: int = 1000) -> float:
    """Messages per second: ``count`` messages at-least-once, ``submit()`` with a bounded window of trackers
    (awaiting the oldest half when it fills), as a user writes for throughput (as benchmarks/client.py).

    Each message is built and encoded inside the timed region, as proton's ``sender.send(Message(...))`` does."""
    async with amqp_async.connect(url, reconnect=False) as connection:
        sender = await connection.open_sender(address)
        pending: list[Any] = []
        half = max(1, window // 2)
        start = time.perf_counter()
        for _ in range(count):
            pending.append(await sender.submit(Message(body=body)))
            if len(pending) >= window:
                for tracker in pending[:half]:
                    await tracker
                del pending[:half]
        for tracker in pending:
            await tracker
        return count / (time.perf_counter() - start)


async def ours_receive(url: str, address: str, count: int, credit: int = 1000) -> float:
    """Messages per second: receive ``count`` messages with ``credit``, decode each (``delivery.message``, as
    proton's ``on_message`` hands a decoded message) and ``await delivery.accept()`` it."""
    async with amqp_async.connect(url, reconnect=False) as connection:
        receiver = await connection.open_receiver(address, credit=credit)
        delivery = await receiver.receive()
        start = time.perf_counter()
        delivery.message  # noqa: B018 (decoded on first access)
        await delivery.accept()
        for _ in range(count - 1):
            delivery = await receiver.receive()
            delivery.message  # noqa: B018
            await delivery.accept()
        return (count - 1) / (time.perf_counter() - start)


# --- python-qpid-proton ----------------------------------------------------------------------------------------


def _proton_connect(container: Any, url: str) -> Any:
    """A proton connection to ``url`` (with its user and password for SASL PLAIN when it has them)."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    options: dict[str, Any] = {"reconnect": False}
    if parts.username:
        options.update(user=parts.username, password=parts.password or "", allow_insecure_mechs=True)
    return container.connect(f"{parts.hostname}:{parts.port}", **options)


def proton_send(url: str, address: str, count: int, body: bytes, window: int | None = None) -> float | None:
    """Messages per second for python-qpid-proton: sends from ``on_sendable`` (and, with a window, from
    ``on_accepted`` as room frees up) and counts ``on_accepted``, as its examples do."""
    if not proton_available():
        return None
    from proton import Message as ProtonMessage
    from proton.handlers import MessagingHandler
    from proton.reactor import Container

    class Send(MessagingHandler):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.sent = self.confirmed = 0
            self.start = self.elapsed = 0.0
            self.sender: Any = None

        def on_start(self, event: Any) -> None:
            self.sender = event.container.create_sender(_proton_connect(event.container, url), address)

        def _send(self) -> None:
            sender = self.sender
            while sender.credit and self.sent < count and (window is None or self.sent - self.confirmed < window):
                message = ProtonMessage(body=body)
                message.inferred = True  # a data section, as ours sends bytes
                sender.send(message)
                self.sent += 1

        def on_sendable(self, event: Any) -> None:
            if not self.start:
                self.start = time.perf_counter()
            self._send()

        def on_accepted(self, event: Any) -> None:
            self.confirmed += 1
            if self.confirmed == count:
                self.elapsed = time.perf_counter() - self.start
                event.connection.close()
            elif window is not None:
                self._send()

    handler = Send()
    Container(handler).run()
    return count / handler.elapsed


def proton_receive(url: str, address: str, count: int, prefetch: int = 1000) -> float | None:
    """Messages per second for python-qpid-proton: prefetch ``prefetch``, auto-accept, first to last message."""
    if not proton_available():
        return None
    from proton.handlers import MessagingHandler
    from proton.reactor import Container

    class Receive(MessagingHandler):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__(prefetch=prefetch)
            self.received = 0
            self.start = self.elapsed = 0.0

        def on_start(self, event: Any) -> None:
            event.container.create_receiver(_proton_connect(event.container, url), address)

        def on_message(self, event: Any) -> None:
            if not self.received:
                self.start = time.perf_counter()
            self.received += 1
            if self.received == count:
                self.elapsed = time.perf_counter() - self.start
                event.connection.close()

    handler = Receive()
    Container(handler).run()
    return (count - 1) / handler.elapsed


# --- the Qpid Proton C broker example ---------------------------------------------------------------------------


@contextmanager
def c_broker() -> Iterator[Any]:
    """The Qpid Proton C ``broker`` example on a free port (built on demand by ``_peers.py``): a fast native peer
    that queues messages in memory and prints nothing per message. Yields a ``CPeer`` (``.port``)."""
    from _peers import EXAMPLES, build_c_examples, start_peer

    binary = build_c_examples(("broker",))["broker"]
    peer = start_peer([str(binary), "127.0.0.1", "0"], "the C broker example", cwd=EXAMPLES)
    try:
        yield peer
    finally:
        peer.stop()
