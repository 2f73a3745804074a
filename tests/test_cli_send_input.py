"""``amqp-async send -i``: what is read, what repeats, and the summary's words (amqp_async/cli/_bodies.py, _send.py).

Before, ``send -i - --count N`` kept every line it read (``itertools.cycle``: some 21 MB more per 300,000 lines,
without bound on a pipe) to repeat them; a stream is now never held: a regular file is re-read, and a pipe that
ends before ``--count`` is an input error after its lines went. The stdin thread handed the messages over one at a
time (``call_soon_threadsafe`` each: some 9,000 messages a second); it now hands over the lines of each read at once,
so these tests check that the batches keep the order, the line numbers of bad lines, and lines split across reads.
The summary said ``sent 1 messages``.
"""

from __future__ import annotations

import io
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

try:
    from test_cli import TIMEOUT, BrokerCLI, cli, cli_command, cli_env, json_lines, ok
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.test_cli import TIMEOUT, BrokerCLI, cli, cli_command, cli_env, json_lines, ok

pytest.importorskip("click", reason="the cli extra (click, rich) is in the test dependency group")

from amqp_async.cli import _bodies  # after the skip: it needs click


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerCLI]:
    process = BrokerCLI(tmp_path_factory.mktemp("cli-input-broker"))
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture
def queue() -> str:
    return f"cli-input-{uuid.uuid4().hex[:10]}"


def bodies(broker: BrokerCLI, queue: str) -> list[object]:
    """Every body waiting on ``queue``, in order (taken)."""
    return [
        m["body"] for m in json_lines(ok("receive", "-u", broker.url, queue, "--timeout", "1", "-o", "json").stdout)
    ]


# ---------------------------------------------------------------------------------------------------------------
# What repeats, and what is not held


def test_a_pipe_shorter_than_count_is_sent_once_then_named(broker: BrokerCLI, queue: str) -> None:
    """Repeating a pipe's lines meant holding them all; its lines go once, then the shortfall is an input error."""
    result = cli("send", "-u", broker.url, queue, "-i", "-", "--count", "10", input="a\nb\nc\n")
    assert result.returncode == 2, result.stderr
    summary, error = result.stderr.splitlines()
    assert summary.startswith("sent 3 messages (3 B) in ")
    assert error.startswith("amqp-async: error: input: the input ended after 3 messages, before --count 10: ")
    assert "-i FILE" in error
    assert bodies(broker, queue) == ["a", "b", "c"]


def test_count_takes_the_first_lines_of_a_pipe(broker: BrokerCLI, queue: str) -> None:
    ok("send", "-u", broker.url, queue, "-i", "-", "--count", "2", input="a\nb\nc\n")
    assert bodies(broker, queue) == ["a", "b"]


def test_a_file_is_re_read_to_repeat_its_lines(broker: BrokerCLI, queue: str, tmp_path: Path) -> None:
    path = tmp_path / "bodies.txt"
    path.write_text("a\n\nb\n")  # the blank line is an item in text, skipped in json
    ok("send", "-u", broker.url, queue, "-i", str(path), "--count", "7")
    assert bodies(broker, queue) == ["a", "", "b", "a", "", "b", "a"]
    path.write_text("1\n\n2\n")
    ok("send", "-u", broker.url, queue, "-i", str(path), "--count", "5", "--format", "json")
    assert bodies(broker, queue) == [1, 2, 1, 2, 1]
    with path.open("rb") as stdin:  # stdin redirected from a file (`< bodies.txt`) can be read again too
        result = subprocess.run(
            [*cli_command(), "send", "-u", broker.url, queue, "-i", "-", "--count", "4", "--format", "json"],
            stdin=stdin,
            capture_output=True,
            env=cli_env(),
            timeout=TIMEOUT,
        )
    assert result.returncode == 0, result.stderr
    assert bodies(broker, queue) == [1, 2, 1, 2]


def test_an_empty_file_with_count_is_an_input_error(broker: BrokerCLI, queue: str, tmp_path: Path) -> None:
    """Before, nothing was sent and the exit code was 0: ``--count 3`` done with no message."""
    path = tmp_path / "empty.txt"
    path.write_text("")
    result = cli("send", "-u", broker.url, queue, "-i", str(path), "--count", "3")
    assert result.returncode == 2, result.stderr
    assert "input: the input has no message to send (--count 3)" in result.stderr


AT_MOST_ONCE_QUIET = ("--delivery", "at-most-once", "-q")


#: Runs the command given and prints its peak RSS. Measured from this small process, not from pytest: a child's
#: ru_maxrss counts its pages before exec, which a fork of pytest shares (some 60 MB, more than ``send`` itself).
PEAK_RSS = """
import os, subprocess, sys
process = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL)
_, status, usage = os.wait4(process.pid, 0)
print(os.waitstatus_to_exitcode(status), usage.ru_maxrss)
"""


def send_pipe_peak_rss_kib(broker: BrokerCLI, queue: str, lines: int) -> int:
    """The peak RSS (KiB) of ``send -i - --count LINES`` reading LINES lines from a pipe."""
    command = [*cli_command(), "send", "-u", broker.url, queue, "-i", "-", "--count", str(lines), *AT_MOST_ONCE_QUIET]
    data = b"".join(b"line %09d\n" % n for n in range(lines))  # 5 MB at most, written by communicate
    process = subprocess.Popen(
        [sys.executable, "-c", PEAK_RSS, *command],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=cli_env(),
    )
    stdout, stderr = process.communicate(data, timeout=TIMEOUT * 4)
    code, peak = map(int, stdout.split())
    assert code == 0, stderr.decode()
    return peak


def test_a_long_pipe_with_count_is_not_held(broker: BrokerCLI, queue: str) -> None:
    """Before: 10,000 lines then 250,000 lines, the peak grew by some 17 MB (every line kept for the cycle)."""
    small = send_pipe_peak_rss_kib(broker, queue, 10_000)
    large = send_pipe_peak_rss_kib(broker, queue, 250_000)
    assert large - small < 8_000, (small, large)
    ok("receive", "-u", broker.url, queue, "--timeout", "1", "-o", "none", "-q")  # leave the broker empty


# ---------------------------------------------------------------------------------------------------------------
# Batches: the order, the line numbers, lines across reads


def test_batched_lines_keep_their_order_and_a_bad_line_is_named(broker: BrokerCLI, queue: str) -> None:
    """Many reads' worth of lines (a read is 16 KiB), a line longer than a read, CRLF ends; then a line that is
    not UTF-8: the lines before it go, in order, and it is named by its number."""
    good = [f"line {n}" for n in range(1, 6001)]
    good[2999] = "x" * 50_000  # spans several reads
    data = "\r\n".join(good).encode() + b"\r\n\xff bad\nafter\n"
    result = subprocess.run(
        [*cli_command(), "send", "-u", broker.url, queue, "-i", "-", "--delivery", "at-most-once"],
        input=data,
        capture_output=True,
        env=cli_env(),
        timeout=TIMEOUT,
    )
    assert result.returncode == 2, result.stderr
    summary, error = result.stderr.decode().splitlines()
    assert summary.startswith("sent 6,000 messages ")
    assert error == "amqp-async: error: input: line 6001: not UTF-8 text (send binary data with --file)"
    assert ok("receive", "-u", broker.url, queue, "--timeout", "1").stdout.splitlines() == good


class Trickle(io.RawIOBase):
    """Bytes given a few at a time, as a pipe may (each ``read1`` gets at most ``step``)."""

    def __init__(self, data: bytes, step: int) -> None:
        self._data = data
        self._step = step

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        piece = self._data[: min(self._step, len(buffer))]
        self._data = self._data[len(piece) :]
        buffer[: len(piece)] = piece
        return len(piece)


@pytest.mark.parametrize("step", [1, 2, 3, 7, 4096])
def test_line_ends_split_across_reads(step: int) -> None:
    """``\\r\\n`` cut between two reads is one line end; ``\\r`` alone ends a line, as text mode reads it; the
    last line needs no end; the batches unpack to the lines in order."""
    data = "one\r\ntwo\rthree\n\nfour é\r\nfive".encode()
    stream = io.TextIOWrapper(io.BufferedReader(Trickle(data, step), buffer_size=8), encoding="utf-8")
    batches = list(
        _bodies.message_batches(None, stream, fmt="text", count=None, size=None, template=_bodies.MessageTemplate())
    )
    assert [m.body for batch in batches for m in batch] == ["one", "two", "three", "", "four é", "five"]


def test_a_bad_line_comes_after_a_batch_of_the_lines_before_it() -> None:
    data = b"a\nb\n\xc3(\nc\n"
    stream = io.TextIOWrapper(io.BufferedReader(Trickle(data, 4096)), encoding="utf-8")
    batches = _bodies.message_batches(
        None, stream, fmt="text", count=None, size=None, template=_bodies.MessageTemplate()
    )
    assert [m.body for m in next(batches)] == ["a", "b"]
    with pytest.raises(_bodies.InputError, match=r"^line 3: not UTF-8 text"):
        next(batches)


# ---------------------------------------------------------------------------------------------------------------
# The summary's words


def test_one_message_is_said_in_the_singular(broker: BrokerCLI, queue: str) -> None:
    sent = ok("send", "-u", broker.url, queue, "hello")
    assert sent.stderr.startswith("sent 1 message (5 B) in "), sent.stderr
    received = ok("receive", "-u", broker.url, queue, "--count", "1")
    assert received.stderr.startswith("received 1 message (5 B) in "), received.stderr
    ok("send", "-u", broker.url, queue, "a", "b")
    assert "received 2 messages (2 B) in " in ok("receive", "-u", broker.url, queue, "--count", "2").stderr
