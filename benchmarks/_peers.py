"""Real peers for the benchmarks: the Qpid Proton C examples, and our C sink, installed and built on demand.

Debian's ``libqpid-proton11-dev`` and ``libqpid-proton11-dev-examples`` put the C examples
in ``/usr/share/proton/examples/c/``; each builds with ``gcc -O2 X.c -o X -lqpid-proton -lpthread``. This module
installs the packages when they are missing (as root, with apt-get), builds the examples into a cache directory
(rebuilding when a source is newer than its binary), and starts them on free ports.

``peers/sink.c`` is ours, on the same C library: a receiver that accepts and drops every message, so that a
benchmark of large messages measures the client rather than what the peer does with the bytes.

Not a benchmark itself (the leading underscore keeps ``nox -s bench`` from running it).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

__all__ = ["CPeer", "build_c_examples", "start_direct", "start_peer", "start_sink"]

EXAMPLES = Path("/usr/share/proton/examples/c")
CACHE = Path(os.environ.get("AMQP_ASYNC_PEERS", Path.home() / ".cache" / "amqp_async" / "c-peers"))
PACKAGES = ("libqpid-proton11-dev", "libqpid-proton11-dev-examples")
SINK = Path(__file__).resolve().parent / "peers" / "sink.c"


def _install() -> None:
    """apt-get install the C examples (and ``apt-get update`` once if the first try fails)."""
    if shutil.which("apt-get") is None:
        raise RuntimeError("the Qpid Proton C examples are missing and apt-get is not available to install them")
    command = ["apt-get", "install", "-y", "--no-install-recommends", *PACKAGES]
    environment = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    if subprocess.run(command, env=environment, capture_output=True).returncode != 0:
        subprocess.run(["apt-get", "update"], env=environment, capture_output=True, check=True)
        subprocess.run(command, env=environment, capture_output=True, check=True)


def _build(source: Path, binary: Path) -> Path:
    """``gcc -O2`` ``source`` into ``binary`` against the Qpid Proton C library, unless it is up to date."""
    if not binary.exists() or binary.stat().st_mtime < source.stat().st_mtime:
        subprocess.run(
            ["gcc", "-O2", str(source), "-o", str(binary), "-lqpid-proton", "-lpthread"],
            check=True,
            capture_output=True,
            cwd=source.parent,
        )
    return binary


def build_c_examples(names: tuple[str, ...] = ("direct", "send", "receive", "broker")) -> dict[str, Path]:
    """The paths of the built C examples, installing and building what is missing or stale."""
    if not (EXAMPLES / "direct.c").exists():
        _install()
    CACHE.mkdir(parents=True, exist_ok=True)
    return {name: _build(EXAMPLES / f"{name}.c", CACHE / name) for name in names}


class CPeer:
    """A running C example: its port, and its output, which goes to a temporary file (the examples print every
    message; a pipe would need a reader, and a reader in the benchmark's own process would take CPU time, and the
    GIL, from the client measured there)."""

    def __init__(self, process: subprocess.Popen[bytes], port: int, log: Path | None = None) -> None:
        self.process = process
        self.port = port
        self.log = log
        self._kept: list[str] = []  # the lines, once stop() removed the file

    @property
    def lines(self) -> list[str]:
        """The first 1,000 lines the peer printed after its "listening on PORT" line (kept by ``stop()``)."""
        if self.log is None or not self.log.exists():
            return self._kept
        with self.log.open(errors="replace") as output:
            printed = [line for _, line in zip(range(1001), output, strict=False)]
        if printed and "listening on" in printed[0]:
            del printed[0]
        return printed[:1000]

    def wait(self, timeout: float = 30) -> int:
        """Wait for the peer to exit (it does after its message count)."""
        return self.process.wait(timeout)

    def stop(self) -> None:
        """Kill the peer if it still runs, and remove its output."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(5)
        if self.log is not None:
            self._kept = self.lines
            self.log.unlink(missing_ok=True)
            self.log = None


def start_direct(address: str, count: int) -> CPeer:
    """Start the C ``direct`` example on a free port: it receives (and accepts) ``count`` messages, or sends
    ``count`` messages to a receiver that attaches, then closes."""
    binary = build_c_examples(("direct",))["direct"]
    return start_peer([str(binary), "127.0.0.1", "0", address, str(count)], "the C direct example")


def start_peer(command: list[str], what: str, cwd: Path | None = None) -> CPeer:
    """Start ``command`` (a C peer) with its output in a temporary file, and wait for the "listening on PORT" line
    it prints among its first lines."""
    descriptor, name = tempfile.mkstemp(prefix="amqp-async-peer-", suffix=".log")
    log = Path(name)
    with os.fdopen(descriptor, "wb") as output:
        process = subprocess.Popen(["stdbuf", "-oL", *command], stdout=output, stderr=subprocess.STDOUT, cwd=cwd)
    deadline = time.monotonic() + 10
    while True:
        first = log.read_text(errors="replace")[:4096]
        match = re.search(r"listening on (\d+)", first)
        if match is not None:
            return CPeer(process, int(match.group(1)), log)
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            process.wait(5)
            log.unlink(missing_ok=True)
            raise RuntimeError(f"{what} did not start: {first!r}")
        time.sleep(0.005)


def start_sink() -> CPeer:
    """Start ``peers/sink.c`` on a free port: it accepts and drops every message it is sent, until stopped."""
    build_c_examples(())  # the C library and headers
    binary = _build(SINK, CACHE / "sink")
    return start_peer([str(binary), "127.0.0.1", "0"], "the C sink")
