"""What ``amqp-async send`` reports when a run ends early: at Ctrl-C (SIGINT) and when the peer refuses a message,
the summary says how many messages the peer accepted (amqp_async/cli/_send.py, ``_send_all``, ``_report``).

Before, a Ctrl-C printed only "amqp-async: interrupted" (the last progress line, up to two seconds old, was all
there was: 994 messages said, 1,069 on the queue), and a refused message only the refusal: a user resuming a
``seq N | amqp-async send q -i -`` could not tell where to resume. Now the messages on their way get up to two
seconds for their outcomes, then the summary counts the accepted ones, exactly what the queue holds; messages
whose outcome never came are named as in doubt.
"""

from __future__ import annotations

import re
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

try:
    from test_cli import TIMEOUT, BrokerCLI, cli, cli_command, cli_env, ok
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.test_cli import TIMEOUT, BrokerCLI, cli, cli_command, cli_env, ok

pytest.importorskip("click", reason="the cli extra (click, rich) is in the test dependency group")

#: The summary line (not the progress lines, which read "sent: N messages, ...").
SUMMARY = re.compile(r"^sent ([\d,]+) messages \(", re.MULTILINE)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerCLI]:
    process = BrokerCLI(tmp_path_factory.mktemp("cli-report-broker"))
    try:
        yield process
    finally:
        process.stop()


def _queued(url: str, queue: str) -> list[str]:
    return cli("receive", "-u", url, queue, "--timeout", "2", "-q").stdout.splitlines()


def test_ctrl_c_during_send_reports_exactly_what_the_peer_accepted(broker: BrokerCLI) -> None:
    queue = f"report-{uuid.uuid4().hex[:10]}"
    process = subprocess.Popen(
        [*cli_command(), "send", "-u", broker.url, queue, "-i", "-", "--rate", "200"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=cli_env(),
        text=True,
    )
    assert process.stdin is not None

    def feed() -> None:
        try:
            for number in range(1, 100_001):
                process.stdin.write(f"{number}\n")  # type: ignore[union-attr]
        except (BrokenPipeError, ValueError):  # the command ended (or its stdin closed)
            pass

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    try:
        deadline = time.monotonic() + TIMEOUT
        while (
            not cli("peek", "-u", broker.url, queue, "--count", "50", "--timeout", "0.5", "-q").stdout.count("\n") >= 50
        ):
            assert time.monotonic() < deadline, "the messages never reached the queue"
        process.send_signal(signal.SIGINT)  # mid-run: messages on their way, the progress line behind
        _, stderr = process.communicate(timeout=TIMEOUT)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(TIMEOUT)
    assert process.returncode == 130, stderr
    assert stderr.endswith("amqp-async: interrupted\n"), stderr
    assert "Traceback" not in stderr
    summary = SUMMARY.findall(stderr)
    assert len(summary) == 1, stderr  # before: none
    accepted = int(summary[0].replace(",", ""))
    # the input's first lines, each once, and as many as the summary says
    assert _queued(broker.url, queue) == [str(number) for number in range(1, accepted + 1)]
    assert "in doubt" not in stderr  # every outcome came within the grace


def test_a_refused_message_still_reports_the_ones_accepted_before_it(tmp_path: Path) -> None:
    limited = BrokerCLI(tmp_path, "--max-queue-depth", "2", "--when-full", "reject")
    try:
        queue = f"report-{uuid.uuid4().hex[:10]}"
        result = cli("send", "-u", limited.url, queue, "a", "b", "c", "d", "--window", "1")
        assert result.returncode == 6, result.stderr
        lines = result.stderr.splitlines()
        assert SUMMARY.match(lines[0]) and SUMMARY.match(lines[0]).group(1) == "2", result.stderr  # before: absent
        assert lines[1].startswith("amqp-async: error: amqp:resource-limit-exceeded: queue ")
        assert "--max-queue-depth" in lines[1]  # the refusal names the option to change
        assert len(lines) == 2
        assert ok("receive", "-u", limited.url, queue, "--count", "2", "-q").stdout.splitlines() == ["a", "b"]
    finally:
        limited.stop()


def test_quiet_reports_nothing_but_the_failure(tmp_path: Path) -> None:
    limited = BrokerCLI(tmp_path, "--max-queue-depth", "1", "--when-full", "reject")
    try:
        result = cli("send", "-u", limited.url, "q", "a", "b", "--window", "1", "-q")
        assert result.returncode == 6
        assert len(result.stderr.splitlines()) == 1 and result.stderr.startswith("amqp-async: error: ")
    finally:
        limited.stop()
