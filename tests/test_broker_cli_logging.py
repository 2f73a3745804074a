"""``amqp-async broker`` logs as ``python -m amqp_async.broker`` does (docs/broker.md: "the same command under its
own name"): a line per connection and link opened or closed, and the signal that stops it; ``--quiet`` warnings
only.

Before, the ``amqp-async`` group had set logging up for its client commands (warnings only), and the broker's own
``logging.basicConfig`` did nothing after it: ``amqp-async broker`` logged no connection at all, as if no client
came, and not the signal it stopped on. Each test runs the installed command as a subprocess and connects our
client to it.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import pytest
from test_broker_cli import AMQP_ASYNC, EXIT_TIMEOUT, REPO, TIMEOUT

import amqp_async

pytestmark = [
    pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals"),
    pytest.mark.skipif(not AMQP_ASYNC.exists(), reason="the amqp-async console script is not installed"),
]


def _first_line(process: subprocess.Popen[bytes]) -> str:
    """The first line of the broker's stdout, within TIMEOUT (the test fails rather than hangs)."""
    assert process.stdout is not None
    line = b""
    deadline = time.monotonic() + TIMEOUT
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        while not line.endswith(b"\n"):
            remaining = deadline - time.monotonic()
            assert remaining > 0 and selector.select(remaining), "no 'listening on' line in time"
            chunk = os.read(process.stdout.fileno(), 1)
            assert chunk, f"the broker exited ({process.poll()}) before it listened"
            line += chunk
    return line.decode().strip()


@contextmanager
def _amqp_async_broker(tmp_path: Path, *arguments: str) -> Iterator[tuple[str, subprocess.Popen[bytes], Path]]:
    """``amqp-async ARGUMENTS...`` (a broker on a free port); yields its URL, process and stderr file."""
    stderr_path = tmp_path / "broker.stderr"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    with stderr_path.open("wb") as stderr:
        process = subprocess.Popen(
            [str(AMQP_ASYNC), *arguments, "--port", "0"], stdout=subprocess.PIPE, stderr=stderr, env=env
        )
        try:
            line = _first_line(process)
            assert line.startswith("listening on amqp://127.0.0.1:"), line
            yield line.removeprefix("listening on "), process, stderr_path
        finally:
            if process.poll() is None:
                process.kill()
            process.wait(TIMEOUT)
            assert process.stdout is not None
            process.stdout.close()


async def _send_one(url: str) -> None:
    with anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(url, reconnect=False) as connection:
            sender = await connection.open_sender("q")
            await sender.send(amqp_async.Message(body="x"))


def _run(tmp_path: Path, *arguments: str) -> str:
    """Start ``amqp-async ARGUMENTS... --port 0``, send one message through it, stop it with SIGTERM (exit code
    0); returns what it wrote on stderr."""
    with _amqp_async_broker(tmp_path, *arguments) as (url, process, stderr_path):
        anyio.run(_send_one, url)
        process.send_signal(signal.SIGTERM)
        assert process.wait(EXIT_TIMEOUT) == 0
        return stderr_path.read_text()


def test_amqp_async_broker_logs_connections_and_its_signal(tmp_path: Path) -> None:
    log = _run(tmp_path, "broker")
    assert " amqp_async.broker connection 127.0.0.1:" in log and " opened (container " in log, log
    assert "attached: 127.0.0.1:" in log and " sends to q" in log, log
    assert log.rstrip().endswith("amqp_async.broker signal SIGTERM: shutting down"), log


def test_amqp_async_broker_quiet_logs_nothing_of_a_connection(tmp_path: Path) -> None:
    assert _run(tmp_path, "broker", "--quiet") == ""


def test_amqp_async_debug_broker_logs_as_the_brokers_debug(tmp_path: Path) -> None:
    log = _run(tmp_path, "--debug", "broker")
    # the broker's format (no level name), as python -m amqp_async.broker --debug writes it
    assert " amqp_async.broker listening on amqp://127.0.0.1:" in log, log
    assert " amqp_async.broker connection 127.0.0.1:" in log, log
