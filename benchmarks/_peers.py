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
import threading
from pathlib import Path

__all__ = ["CPeer", "build_c_examples", "start_direct", "start_sink"]

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
    """A running C example: its port, and its output drained in a thread (it prints every message, and would
    block on a full pipe otherwise)."""

    def __init__(self, process: subprocess.Popen[str], port: int) -> None:
        self.process = process
        self.port = port
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()

    def _drain(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if len(self.lines) < 1000:
                self.lines.append(line)

    def wait(self, timeout: float = 30) -> int:
        """Wait for the peer to exit (it does after its message count)."""
        return self.process.wait(timeout)

    def stop(self) -> None:
        """Kill the peer if it still runs."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(5)


def start_direct(address: str, count: int) -> CPeer:
    """Start the C ``direct`` example on a free port: it receives (and accepts) ``count`` messages, or sends
    ``count`` messages to a receiver that attaches, then closes."""
    binary = build_c_examples(("direct",))["direct"]
    return _start([str(binary), "127.0.0.1", "0", address, str(count)], "the C direct example")


def _start(command: list[str], what: str) -> CPeer:
    process = subprocess.Popen(["stdbuf", "-oL", *command], stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    line = process.stdout.readline()
    match = re.search(r"listening on (\d+)", line)
    if match is None:
        process.kill()
        raise RuntimeError(f"{what} did not start: {line!r}")
    return CPeer(process, int(match.group(1)))


def start_sink() -> CPeer:
    """Start ``peers/sink.c`` on a free port: it accepts and drops every message it is sent, until stopped."""
    build_c_examples(())  # the C library and headers
    binary = _build(SINK, CACHE / "sink")
    return _start([str(binary), "127.0.0.1", "0"], "the C sink")
