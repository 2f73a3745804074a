"""The embedded broker in a process of its own (``python -m amqp_async.broker``), to fail as a real peer fails:
killed (SIGKILL: the kernel closes its sockets), stopped (SIGSTOP: its sockets stay open and nothing answers;
the kernel still completes new TCP handshakes into the listen backlog) and resumed (SIGCONT).

``with BrokerProcess() as broker:`` starts it on a free port of 127.0.0.1 and waits for its ``listening on`` line;
leaving the block kills it (also when stopped: SIGKILL ends a stopped process). Used by the client's error and
bound tests and by ``tests/default_bounds_program.py``.
"""

from __future__ import annotations

import os
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["BrokerProcess", "free_port"]

REPO = Path(__file__).resolve().parent.parent

#: Seconds the broker may take to say it listens (a loaded machine starts Python slowly).
START_TIMEOUT = 30.0


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on (bound and released at once)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def read_line(process: subprocess.Popen[bytes], timeout: float, stderr: Callable[[], str]) -> str:
    """The next line ``process`` writes on its stdout (a pipe), read without blocking past ``timeout`` seconds; an
    AssertionError with ``stderr()`` when none comes or the process exits."""
    assert process.stdout is not None
    deadline = time.monotonic() + timeout
    line = b""
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        while not line.endswith(b"\n"):
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not selector.select(remaining):
                raise AssertionError(f"no line on stdout within {timeout} s; stderr:\n{stderr()}")
            chunk = os.read(process.stdout.fileno(), 1)
            if not chunk:
                raise AssertionError(f"the process exited ({process.poll()}); stderr:\n{stderr()}")
            line += chunk
    return line.decode().strip()


class BrokerProcess:
    """A running embedded broker. ``arguments`` are its command-line options (``--user NAME:PASSWORD``...)."""

    def __init__(self, *arguments: str, port: int | None = None) -> None:
        self.port = port or free_port()
        self.url = f"amqp://127.0.0.1:{self.port}"
        self._arguments = arguments
        self._stderr_file = tempfile.TemporaryFile()  # noqa: SIM115 - closed on leaving the ``with``
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> BrokerProcess:
        self.start()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.kill()
        self._stderr_file.close()

    def start(self) -> None:
        """Start it (again, on the same port, after :meth:`kill`) and wait until it listens."""
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
        env.pop("AMQP_ASYNC_TRACE_FRM", None)
        command = [sys.executable, "-m", "amqp_async.broker", "--quiet", "--host", "127.0.0.1"]
        self.process = subprocess.Popen(
            [*command, "--port", str(self.port), *self._arguments],
            stdout=subprocess.PIPE,
            stderr=self._stderr_file,
            env=env,
        )
        line = self._first_line()
        if line != f"listening on {self.url}":
            self.kill()
            raise AssertionError(f"the broker said {line!r}; stderr:\n{self.stderr()}")

    def _first_line(self) -> str:
        assert self.process is not None
        return read_line(self.process, START_TIMEOUT, self.stderr)

    def stderr(self) -> str:
        self._stderr_file.seek(0)
        return self._stderr_file.read().decode(errors="replace")

    def kill(self) -> None:
        """SIGKILL (a stopped broker too), and wait for it: its sockets are closed by the kernel."""
        process = self.process
        if process is None:
            return
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
            process.wait(START_TIMEOUT)
        if process.stdout is not None:
            process.stdout.close()
        self.process = None

    def stop(self) -> None:
        """SIGSTOP: the broker answers nothing more, its sockets stay open."""
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT: a stopped broker goes on."""
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)
