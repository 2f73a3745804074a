"""``amqp-async send --file`` and ``receive --output-dir``: files moved as streamed messages, through the embedded
broker (``amqp-async broker --data-dir``, so that large ones are kept on its disk), run as subprocesses like
tests/test_cli.py: byte-exact files, their names, no overwrite, progress lines, the usage errors, and a message
above ``--max-message-size`` refused with the limit named (exit 6: not accepted)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

try:
    from test_cli import BrokerCLI, cli, ok
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.test_cli import BrokerCLI, cli, ok

pytest.importorskip("click", reason="the cli extra (click, rich) is in the test dependency group")

MiB = 1 << 20
PROTON_PEER = Path(__file__).resolve().parent / "proton_stream_peer.py"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerCLI]:
    base = tmp_path_factory.mktemp("cli-files-broker")
    process = BrokerCLI(base, "--data-dir", str(base / "data"), "--max-message-size", "64MiB")
    try:
        yield process
    finally:
        process.stop()
    assert process.process.returncode == 0, "the broker did not exit cleanly on SIGTERM"


@pytest.fixture
def queue() -> str:
    return f"files-{uuid.uuid4().hex[:10]}"


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_files_go_as_streamed_messages_and_come_back_byte_for_byte(
    broker: BrokerCLI, queue: str, tmp_path: Path
) -> None:
    sent = tmp_path / "sent"
    sent.mkdir()
    big = sent / "model.bin"
    big.write_bytes(os.urandom(24 * MiB + 5))
    small = sent / "notes.txt"
    small.write_text("hello\n")
    empty = sent / "empty"
    empty.write_bytes(b"")
    result = ok("send", "-u", broker.url, queue, "--file", str(big), "-f", str(small), "-f", str(empty), "--durable")
    assert result.stderr.strip().startswith("sent 3 files (25.2 MB) in ")  # 24 MiB, in decimal units
    out = tmp_path / "out"
    received = ok("receive", "-u", broker.url, queue, "--output-dir", str(out), "--count", "3", "--timeout", "10")
    assert received.stdout.splitlines() == [str(out / "model.bin"), str(out / "notes.txt"), str(out / "empty")]
    assert received.stderr.strip().startswith("received 3 files (25.2 MB) in ")
    assert sorted(path.name for path in out.iterdir()) == ["empty", "model.bin", "notes.txt"]
    for name in ("model.bin", "notes.txt", "empty"):
        assert digest(out / name) == digest(sent / name)


def test_names_never_overwrite_and_json_output_carries_the_message(
    broker: BrokerCLI, queue: str, tmp_path: Path
) -> None:
    source = tmp_path / "report.csv"
    source.write_text("a,b\n1,2\n")
    for _ in range(2):
        ok("send", "-u", broker.url, queue, "-f", str(source), "--subject", "monthly", "-p", "team=ops")
    ok("send", "-u", broker.url, queue, "-f", str(source), "-p", "filename=../../etc/passwd")
    out = tmp_path / "out"
    out.mkdir()
    (out / "report.csv").write_text("already here")
    result = ok("receive", "-u", broker.url, queue, "-d", str(out), "-c", "3", "-t", "10", "--output", "json")
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [Path(line["file"]).name for line in lines] == ["report-1.csv", "report-2.csv", "message-3"]
    assert lines[0]["subject"] == "monthly" and lines[0]["properties"] == {"team": "ops", "filename": "report.csv"}
    assert (out / "report.csv").read_text() == "already here"
    assert (out / "report-1.csv").read_text() == "a,b\n1,2\n"
    assert not [path for path in out.iterdir() if path.name.endswith(".part")]


@pytest.mark.parametrize("delivery", ["at-least-once", "at-most-once"])
def test_count_takes_no_message_more(broker: BrokerCLI, queue: str, tmp_path: Path, delivery: str) -> None:
    """The stream receiver kept a message's credit granted: the one after the last came, and was given back, or
    at-most-once, lost (c of a..e was gone). Credit is now granted by hand, never past --count."""
    ok("send", "-q", "-u", broker.url, queue, "a", "b", "c", "d", "e")
    out = tmp_path / "out"
    ok("receive", "-q", "-u", broker.url, queue, "-d", str(out), "-c", "2", "-t", "10", "--delivery", delivery)
    assert sorted(path.read_text() for path in out.iterdir()) == ["a", "b"]
    left = ok("receive", "-q", "-u", broker.url, queue, "--timeout", "1")
    assert left.stdout.splitlines() == ["c", "d", "e"]


def test_stdin_is_streamed_as_it_is_read(broker: BrokerCLI, queue: str, tmp_path: Path) -> None:
    data = "line\n" * 200_000
    ok("send", "-u", broker.url, queue, "--file", "-", input=data)
    out = tmp_path / "out"
    ok("receive", "-u", broker.url, queue, "-d", str(out), "-c", "1", "-t", "10", "--output", "none")
    assert (out / "stdin").read_text() == data


def test_files_of_unknown_size_are_read_to_their_end(broker: BrokerCLI, queue: str, tmp_path: Path) -> None:
    """A file of /proc (its size says 0) and a FIFO whose writer comes late: read to their end, byte for byte (the
    FIFO is opened in a worker thread: the connection goes on meanwhile)."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    data = os.urandom(300_000)

    def late_writer() -> None:
        time.sleep(1.5)
        deadline = time.monotonic() + 30
        while True:  # a non-blocking open fails (ENXIO) until the reader has opened it: never wait for good
            try:
                descriptor = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
                break
            except OSError:
                if time.monotonic() > deadline:
                    return
                time.sleep(0.05)
        os.set_blocking(descriptor, True)
        with os.fdopen(descriptor, "wb") as pipe:
            pipe.write(data)

    writer = threading.Thread(target=late_writer)
    writer.start()
    try:
        result = ok("send", "-u", broker.url, queue, "-f", "/proc/self/status", "-f", str(fifo), "--heartbeat", "0.5")
    finally:
        writer.join()
    assert result.stderr.strip().startswith("sent 2 files ("), result.stderr
    out = tmp_path / "out"
    ok("receive", "-u", broker.url, queue, "-d", str(out), "-c", "2", "-t", "10", "-q")
    assert b"Name:" in (out / "status").read_bytes()  # the sender's own status: another process's than ours
    assert (out / "pipe").read_bytes() == data


def test_a_body_no_file_can_hold_as_bytes_or_a_name_too_long_still_gets_a_file(
    broker: BrokerCLI, queue: str, tmp_path: Path
) -> None:
    """Neither blocks the queue (released, it would come first again at every run): a map body is written as JSON,
    a filename longer than file systems take falls back to message-N."""
    ok("send", "-u", broker.url, queue, '{"a": [1, 2]}', "--format", "json")
    ok("send", "-u", broker.url, queue, "plain", "-p", "filename=" + "n" * 300)
    ok("send", "-u", broker.url, queue, "last", "-p", "filename=last.txt")
    out = tmp_path / "out"
    result = ok("receive", "-u", broker.url, queue, "-d", str(out), "-c", "3", "-t", "10")
    assert result.stdout.splitlines() == [str(out / "message-1"), str(out / "message-2"), str(out / "last.txt")]
    assert json.loads((out / "message-1").read_text()) == {"a": [1, 2]}
    assert (out / "message-2").read_text() == "plain"
    assert (out / "last.txt").read_text() == "last"


def test_a_message_aborted_by_its_sender_is_skipped_and_the_run_goes_on(tmp_path: Path) -> None:
    """python-qpid-proton sends a message, aborts it midway (§2.6.14), then sends a whole one."""
    pytest.importorskip("proton", reason="python-qpid-proton is a test dependency")
    size = 200_000
    peer = subprocess.Popen(
        [sys.executable, str(PROTON_PEER), "listen-send-aborted", str(size)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert peer.stdout is not None
        port = peer.stdout.readline().split()[-1]
        out = tmp_path / "out"
        result = ok("receive", "-u", f"amqp://127.0.0.1:{port}", "aborts", "-d", str(out), "-c", "1", "-t", "20")
    finally:
        peer.kill()
        peer.wait(10)
    assert "aborted by its sender before its end: skipped" in result.stderr
    assert [path.name for path in out.iterdir()] == ["message-1"]  # the aborted one left no file, not even a .part
    block = bytes(range(256))
    assert (out / "message-1").read_bytes() == (block * (size // 256 + 1))[:size]


def test_progress_lines_name_the_bytes_and_the_rate(broker: BrokerCLI, queue: str, tmp_path: Path) -> None:
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(32 * MiB))
    result = ok("send", "-u", broker.url, queue, "-f", str(big), AMQP_ASYNC_PROGRESS_INTERVAL="0.01")
    progress = [line for line in result.stderr.splitlines() if line.startswith("sent: ")]
    assert progress, result.stderr
    assert "/33.6 MB, " in progress[0] and "MB/s" in progress[0]  # 32 MiB in all, in decimal units
    ok("receive", "-u", broker.url, queue, "-d", str(tmp_path / "out"), "-c", "1", "-t", "10", "-q")
    assert digest(tmp_path / "out" / "big.bin") == digest(big)


def test_a_file_above_max_message_size_is_refused_naming_the_limit(
    broker: BrokerCLI, queue: str, tmp_path: Path
) -> None:
    big = tmp_path / "huge.bin"
    with big.open("wb") as file:
        file.truncate(65 * MiB)  # sparse: 65 MiB of zeros
    result = cli("send", "-u", broker.url, queue, "-f", str(big), "-q")
    assert result.returncode == 6, result.stderr  # not accepted: larger than the peer takes
    assert "amqp:link:message-size-exceeded" in result.stderr and "max-message-size 67108864" in result.stderr
    assert cli("receive", "-u", broker.url, queue, "-d", str(tmp_path / "out"), "-c", "1", "-t", "1").returncode == 5


@pytest.mark.parametrize(
    ("arguments", "needle"),
    [
        (["send", "q", "body", "--file", "x"], "--file sends files"),
        (["send", "q", "--file", "x", "--count", "2"], "--file sends files"),
        (["send", "q", "--file", "/nonexistent/file"], "--file /nonexistent/file"),
    ],
)
def test_usage_errors(arguments: list[str], needle: str) -> None:
    result = cli(*arguments, "-u", "amqp://127.0.0.1:1")
    assert result.returncode == 2 and needle in result.stderr, result.stderr
