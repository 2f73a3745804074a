"""The ``amqp-async`` command line, run as a subprocess: the installed console script when there is one (CI installs
the package), else ``python -m amqp_async`` from this checkout.

Against the embedded broker (started by ``amqp-async broker --port 0``) and a private RabbitMQ node: exact counts,
the JSON output parsed back, the message attributes and selectors carried, and the exit codes for each failure
(usage 2, connection 3, authentication 4, timeout 5, not accepted 6, link refused 7). Every run is bounded.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

try:
    from rabbitmq import RabbitMQNode
    from tls_certs import make_ca, make_cert, openssl_available
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.rabbitmq import RabbitMQNode
    from tests.tls_certs import make_ca, make_cert, openssl_available

pytest.importorskip("click", reason="the cli extra (click, rich) is in the test dependency group")
pytest.importorskip("rich", reason="the cli extra (click, rich) is in the test dependency group")

REPO = Path(__file__).resolve().parent.parent
TIMEOUT = 30.0
SCRIPT = Path(sys.executable).parent / ("amqp-async.exe" if sys.platform == "win32" else "amqp-async")


def cli_command() -> list[str]:
    """The installed console script next to this interpreter, else ``python -m amqp_async`` (a checkout)."""
    if SCRIPT.exists():
        return [str(SCRIPT)]
    return [sys.executable, "-m", "amqp_async"]


def cli_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    if not SCRIPT.exists():  # not installed: run this checkout's package
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    for name in (
        "AMQP_ASYNC_TRACE_FRM",
        "PN_TRACE_FRM",
        "AMQP_ASYNC_URL",
        "AMQP_ASYNC_PASSWORD",
        "MESSAGING_CONNECT_FILE",
    ):
        env.pop(name, None)
    env.update(extra)
    return env


def cli(
    *arguments: str, input: str | None = None, timeout: float = TIMEOUT, cwd: Path | None = None, **env: str
) -> subprocess.CompletedProcess[str]:
    """Run ``amqp-async ARGUMENTS...`` and return its result (stdout and stderr as text)."""
    return subprocess.run(
        [*cli_command(), *arguments],
        input=input,
        capture_output=True,
        text=True,
        env=cli_env(**env),
        timeout=timeout,
        cwd=cwd,
        stdin=None if input is not None else subprocess.DEVNULL,
    )


def ok(*arguments: str, **options: str) -> subprocess.CompletedProcess[str]:
    result = cli(*arguments, **options)
    assert result.returncode == 0, f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    return result


def json_lines(text: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


class BrokerCLI:
    """``amqp-async broker --port 0 ARGS...`` running; ``url`` from its first line."""

    def __init__(self, tmp_path: Path, *arguments: str) -> None:
        self.stderr_path = tmp_path / f"broker-{uuid.uuid4().hex[:8]}.stderr"
        with self.stderr_path.open("wb") as stderr:
            self.process = subprocess.Popen(
                [*cli_command(), "broker", "--port", "0", "--quiet", *arguments],
                stdout=subprocess.PIPE,
                stderr=stderr,
                env=cli_env(),
                cwd=tmp_path,
            )
        line = self._first_line()
        prefix = "listening on "
        if not line.startswith(prefix):
            self.stop()
            raise AssertionError(f"unexpected first line {line!r}: {self.stderr_path.read_text()}")
        self.url = line[len(prefix) :]
        self.port = int(self.url.rsplit(":", 1)[1])

    def _first_line(self) -> str:
        assert self.process.stdout is not None
        line = b""
        deadline = time.monotonic() + TIMEOUT
        with selectors.DefaultSelector() as selector:
            selector.register(self.process.stdout, selectors.EVENT_READ)
            while not line.endswith(b"\n"):
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not selector.select(remaining):
                    break
                chunk = os.read(self.process.stdout.fileno(), 1)
                if not chunk:
                    break
                line += chunk
        return line.decode(errors="replace").strip()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(TIMEOUT)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(TIMEOUT)
        if self.process.stdout is not None:
            self.process.stdout.close()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerCLI]:
    """One embedded broker for the module, run by ``amqp-async broker``; each test uses queues of its own."""
    process = BrokerCLI(tmp_path_factory.mktemp("cli-broker"))
    try:
        yield process
    finally:
        process.stop()
    assert process.process.returncode == 0, "the broker did not exit cleanly on SIGTERM"


@pytest.fixture
def queue() -> str:
    return f"cli-{uuid.uuid4().hex[:10]}"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# ---------------------------------------------------------------------------------------------------------------
# The script and its extra


def test_help_lists_the_commands_and_exit_codes() -> None:
    result = ok("--help")
    for command in ("send", "receive", "peek", "broker", "bench"):
        assert command in result.stdout
    assert "5 timeout" in result.stdout
    assert ok("--version").stdout.strip() == "amqp-async, version 0.1.0"


def test_import_amqp_async_does_not_import_the_cli() -> None:
    code = "import sys, amqp_async; assert not {'click', 'rich', 'amqp_async.cli'} & set(sys.modules), sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, env=cli_env(), timeout=TIMEOUT)


@pytest.mark.parametrize("missing", ["click", "rich"])
def test_without_the_cli_extra_it_says_how_to_install_it(missing: str) -> None:
    # Setting sys.modules[name] to None makes `import name` fail as when it is not installed. rich is imported late
    # (for a live bar only), so the hint must come from the check made at the start.
    code = f"import sys; sys.modules[{missing!r}] = None; from amqp_async.cli import main; sys.exit(main(['--help']))"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=cli_env(), timeout=TIMEOUT
    )
    assert result.returncode == 2
    assert "pip install 'amqp-async[cli]'" in result.stderr


def test_a_command_imports_only_its_own_module_and_rich_only_for_a_terminal() -> None:
    """``amqp-async send`` starts without the modules of the other commands; rich is imported for a live bar (or
    bench's table) only, so a command whose output is not a terminal starts without it."""
    code = (
        "import sys; from amqp_async.cli import main; main(['send', '--help']); "
        "print(sorted(name for name in sys.modules if name.startswith(('rich', 'amqp_async.cli._'))))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=cli_env(), timeout=TIMEOUT, check=True
    )
    loaded = result.stdout.strip().splitlines()[-1]
    assert "'amqp_async.cli._send'" in loaded
    assert "rich" not in loaded and "_bench" not in loaded and "_receive" not in loaded, loaded


def test_the_broker_command_takes_the_broker_options() -> None:
    result = ok("broker", "--help")
    for option in ("--max-queue-depth", "--tls-cert", "--users-file"):  # the broker's own parser, reused
        assert option in result.stdout
    assert cli("broker", "--no-such-option").returncode == 2


# ---------------------------------------------------------------------------------------------------------------
# Against the embedded broker


def test_send_and_receive_exact_counts(broker: BrokerCLI, queue: str) -> None:
    sent = ok("send", "-u", broker.url, queue, "a", "b", "c", "--count", "10")
    assert "sent 10 messages" in sent.stderr
    received = ok("receive", "-u", broker.url, queue, "--count", "7", "--output", "json")
    assert [m["body"] for m in json_lines(received.stdout)] == list("abcabcabca")[:7]
    assert "received 7 messages" in received.stderr
    rest = ok("receive", "-u", broker.url, queue, "--timeout", "0.5")  # without --count: until idle, exit 0
    assert rest.stdout.splitlines() == ["b", "c", "a"]
    # Empty now: fewer than --count within --timeout is exit 5, after printing what came.
    empty = cli("receive", "-u", broker.url, queue, "--count", "1", "--timeout", "0.3")
    assert empty.returncode == 5, empty.stderr
    assert empty.stdout == ""
    assert "received 0 of 1 messages" in empty.stderr


def test_message_attributes_and_application_properties(broker: BrokerCLI, queue: str) -> None:
    ok(
        "send", "-u", broker.url, queue, "hello", "--subject", "greeting", "--durable", "--priority", "7",
        "--content-type", "text/plain", "--correlation-id", "c-1", "--reply-to", "replies", "--ttl", "60",
        "-p", "n=3", "-p", "flag=true", "-p", "name=x y",
    )  # fmt: skip
    (message,) = json_lines(ok("receive", "-u", broker.url, queue, "--count", "1", "-o", "json").stdout)
    assert message["body"] == "hello"
    assert message["subject"] == "greeting"
    assert message["durable"] is True
    assert message["priority"] == 7
    assert message["content_type"] == "text/plain"
    assert message["correlation_id"] == "c-1"
    assert message["reply_to"] == "replies"
    assert 50 < message["ttl"] <= 60  # the broker passes on the time left (§3.2.1: the reduced ttl)
    assert message["properties"] == {"n": 3, "flag": True, "name": "x y"}


def test_bodies_from_stdin_json_lines_and_a_file(broker: BrokerCLI, queue: str, tmp_path: Path) -> None:
    values = [1, "two", [3, 4], {"five": 5}, None, True]
    ok("send", "-u", broker.url, queue, "-i", "-", "--format", "json", input="\n".join(map(json.dumps, values)) + "\n")
    lines = tmp_path / "bodies.txt"
    lines.write_text("first line\nsecond line\n")
    ok("send", "-u", broker.url, queue, "-i", str(lines), "--binary")
    received = json_lines(ok("receive", "-u", broker.url, queue, "--count", "8", "-o", "json").stdout)
    assert [m["body"] for m in received[:6]] == values
    assert [m["body"] for m in received[6:]] == [{"$binary": "Zmlyc3QgbGluZQ=="}, {"$binary": "c2Vjb25kIGxpbmU="}]


def test_a_line_that_is_not_utf8_is_named_and_the_lines_before_it_go(broker: BrokerCLI, queue: str) -> None:
    """Decoded strictly, the whole block read failed: nothing was sent, and the error named no line."""
    result = subprocess.run(
        [*cli_command(), "send", "-u", broker.url, queue, "-i", "-"],
        input=b"first\n\xff\xfe binary\nthird\n",
        capture_output=True,
        env=cli_env(),
        timeout=TIMEOUT,
    )
    assert result.returncode == 2
    summary, error = result.stderr.decode().splitlines()  # what went (the lines before it), then the failure
    assert summary.startswith("sent 1 message (5 B) in ")
    assert error == "amqp-async: error: input: line 2: not UTF-8 text (send binary data with --file)"
    assert ok("receive", "-u", broker.url, queue, "--timeout", "1").stdout.splitlines() == ["first"]


def test_receive_json_output_resends_as_messages(broker: BrokerCLI, queue: str) -> None:
    ok("send", "-u", broker.url, queue, "x", "y", "--subject", "s", "-p", "k=1", "--size", "4")
    dump = ok("receive", "-u", broker.url, queue, "--count", "2", "-o", "json").stdout
    copy = f"{queue}-copy"
    ok("send", "-u", broker.url, copy, "-i", "-", "--format", "message", input=dump)
    again = ok("receive", "-u", broker.url, copy, "--count", "2", "-o", "json").stdout
    assert json_lines(again) == json_lines(dump)
    assert json_lines(dump)[0] == {"body": {"$binary": "eHh4eA=="}, "subject": "s", "properties": {"k": 1}}


def test_peek_leaves_the_messages(broker: BrokerCLI, queue: str) -> None:
    ok("send", "-u", broker.url, queue, "--count", "5")
    peeked = ok("peek", "-u", broker.url, queue, "--timeout", "0.3")
    assert peeked.stdout.splitlines() == [f"message {n}" for n in range(1, 6)]
    assert ok("peek", "-u", broker.url, queue, "--count", "2", "--timeout", "0.3").stdout.splitlines() == [
        "message 1",
        "message 2",
    ]
    assert len(ok("receive", "-u", broker.url, queue, "--count", "5").stdout.splitlines()) == 5


def read_three_lines_then_close(*arguments: str, **env: str) -> tuple[int, list[str], str]:
    """Run ``amqp-async ARGUMENTS...`` into a pipe whose reader takes three lines and goes (as ``| head -3``)."""
    process = subprocess.Popen(
        [*cli_command(), *arguments],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        env=cli_env(**env),
    )
    assert process.stdout is not None and process.stderr is not None
    lines = [process.stdout.readline().decode() for _ in range(3)]
    process.stdout.close()
    code = process.wait(TIMEOUT)
    return code, lines, process.stderr.read().decode()


@pytest.mark.parametrize("unbuffered", ["1", ""], ids=["unbuffered", "buffered"])
def test_a_reader_that_goes_away_ends_receive_quietly_and_loses_nothing(
    broker: BrokerCLI, queue: str, unbuffered: str
) -> None:
    # More lines than a pipe holds (64 KiB: about 1,000 of these), or a fast receive writes them all before the
    # reader closes its end, and ends as if nothing happened.
    count = 5000
    ok("send", "-u", broker.url, queue, "--count", str(count), "--quiet")
    code, lines, stderr = read_three_lines_then_close(
        "receive", "-u", broker.url, queue, "--count", str(count), "--output", "json", PYTHONUNBUFFERED=unbuffered
    )
    assert code == 141, stderr  # as a program ended by SIGPIPE; before: "error: [Errno 32] Broken pipe", exit 1
    assert stderr == ""
    assert [json.loads(line)["body"] for line in lines] == ["message 1", "message 2", "message 3"]
    # What was not written was released, not accepted: it is delivered again, and nothing before it is missing.
    # Taken are those whose lines reached the pipe before the reader closed it: the three read at least, and as
    # many more as the pipe took meanwhile (unbuffered, each line as write() returns; buffered, at each flush).
    left = cli("receive", "-u", broker.url, queue, "--timeout", "1", "--output", "json").stdout
    bodies = [line["body"] for line in json_lines(left)]
    assert bodies == [f"message {n}" for n in range(count + 1 - len(bodies), count + 1)]
    assert 0 < len(bodies) <= count - 3
    ok("send", "-u", broker.url, queue, "--count", str(count), "--quiet")
    code, lines, stderr = read_three_lines_then_close("peek", "-u", broker.url, queue, "--timeout", "1")
    assert (code, stderr, len(lines)) == (141, "", 3)  # before: "error: [Errno 32] Broken pipe", exit 1
    assert len(ok("receive", "-u", broker.url, queue, "--timeout", "1").stdout.splitlines()) == count  # browsed only


def test_a_failure_is_one_line_on_stderr(tmp_path: Path) -> None:
    limited = BrokerCLI(tmp_path, "--max-connections", "1")

    def hold() -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [*cli_command(), "receive", "-u", limited.url, "held", "--timeout", "30", "--quiet"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            env=cli_env(),
        )

    try:
        holder = hold()
        try:
            deadline = time.monotonic() + TIMEOUT
            while True:  # until the holder's connection is the one the broker takes
                if holder.poll() is not None:  # refused: a probe below held the one connection as it came
                    holder = hold()
                result = cli("send", "-u", limited.url, "other", "x")
                if result.returncode != 0 or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            assert result.returncode == 3
            # before: the connection's own warning ("... WARNING connection failed: ...") came first
            assert result.stderr.splitlines() == [result.stderr.strip()], result.stderr
            assert result.stderr.startswith("amqp-async: error: amqp:resource-limit-exceeded")
        finally:
            holder.terminate()
            holder.wait(TIMEOUT)
    finally:
        limited.stop()


def _connected(pid: int, port: int) -> bool:
    """Whether process ``pid`` has a TCP connection established to ``port`` on 127.0.0.1 (Linux's /proc)."""
    try:
        inodes = {
            os.readlink(f"/proc/{pid}/fd/{fd}")[8:-1]
            for fd in os.listdir(f"/proc/{pid}/fd")
            if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:[")
        }
        lines = Path("/proc/net/tcp").read_text().splitlines()[1:]
    except OSError:  # it ended, or an fd went meanwhile
        return False
    for line in lines:
        fields = line.split()
        remote, state, inode = fields[2], fields[3], fields[9]
        if state == "01" and int(remote.split(":")[1], 16) == port and inode in inodes:
            return True
    return False


@pytest.mark.parametrize("source", ["stdin", "fifo"])
def test_ctrl_c_stops_send_file_while_its_read_waits(
    broker: BrokerCLI, queue: str, tmp_path: Path, source: str
) -> None:
    """``send --file -`` (or a FIFO) read in a worker thread that the exit waited for: a Ctrl-C said "interrupted"
    and the command went on until the input ended; a second one aborted the interpreter (SIGABRT)."""
    path = "-"
    if source == "fifo":
        path = str(tmp_path / "fifo")
        os.mkfifo(path)
    process = subprocess.Popen(
        [*cli_command(), "send", "-u", broker.url, queue, "--file", path],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=cli_env(),
    )
    assert process.stdin is not None
    writer = None
    try:
        if source == "fifo":
            writer = open(path, "wb")  # noqa: SIM115 - closed in finally
            writer.write(b"abc")
            writer.flush()
        else:
            process.stdin.write(b"abc")
            process.stdin.flush()
        deadline = time.monotonic() + TIMEOUT
        while not _connected(process.pid, broker.port):  # (before: a Ctrl-C during start-up is a traceback)
            assert time.monotonic() < deadline, "the command never connected"
            time.sleep(0.05)
        time.sleep(0.5)  # the stream started, its next read waiting
        process.send_signal(signal.SIGINT)
        code = process.wait(TIMEOUT)  # before: waited for the input's end
        assert code == 130
        assert process.communicate()[1].decode().strip() == "amqp-async: interrupted"
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(TIMEOUT)
        process.stdin.close()
        if writer is not None:
            writer.close()


def test_ctrl_c_stops_send_while_it_waits_for_a_line(broker: BrokerCLI, queue: str) -> None:
    process = subprocess.Popen(
        [*cli_command(), "send", "-u", broker.url, queue, "-i", "-"],
        stdin=subprocess.PIPE,  # kept open, nothing written: the read waits (tail -f log | amqp-async send ...)
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=cli_env(),
    )
    assert process.stdin is not None
    try:
        process.stdin.write(b"one\n")
        process.stdin.flush()
        deadline = time.monotonic() + TIMEOUT
        while not cli("peek", "-u", broker.url, queue, "--timeout", "0.2").stdout.strip():
            assert time.monotonic() < deadline, "the first line was never sent"
        process.send_signal(signal.SIGINT)  # now waiting for the second line
        # before: still running until another line came (the reading thread held the process at exit)
        code = process.wait(TIMEOUT)
        assert code == 130
        assert "interrupted" in process.communicate()[1].decode()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(TIMEOUT)
        process.stdin.close()
    assert ok("receive", "-u", broker.url, queue, "--count", "1").stdout == "one\n"


def test_send_shows_progress_while_its_window_is_not_full(broker: BrokerCLI, queue: str) -> None:
    result = ok("send", "-u", broker.url, queue, "--count", "30", "--rate", "10", AMQP_ASYNC_PROGRESS_INTERVAL="0.5")
    progress = [line for line in result.stderr.splitlines() if line.startswith("sent: ")]
    counts = [int(line.split()[1].split("/")[0].replace(",", "")) for line in progress]
    # lines as the run goes (before: none until the end, then "sent: 1/30"), their counts rising
    assert len(counts) >= 3 and counts == sorted(counts) and counts[-1] >= 10, result.stderr
    ok("receive", "-u", broker.url, queue, "--count", "30")


def test_send_timeout_says_how_far_it_got_and_why(tmp_path: Path) -> None:
    limited = BrokerCLI(tmp_path, "--max-queue-depth", "5")
    try:
        result = cli("send", "-u", limited.url, "deep", "--count", "20", "--timeout", "1")
        assert result.returncode == 5
        # before: "amqp-async: error: timed out"
        assert "--timeout 1 s passed: 5 of 20 messages sent and settled" in result.stderr, result.stderr
        assert "credit" in result.stderr
    finally:
        limited.stop()


def test_browse_option_of_receive(broker: BrokerCLI, queue: str) -> None:
    ok("send", "-u", broker.url, queue, "one", "two")
    assert ok("receive", "-u", broker.url, queue, "--browse", "--count", "2").stdout.splitlines() == ["one", "two"]
    assert ok("receive", "-u", broker.url, queue, "--count", "2").stdout.splitlines() == ["one", "two"]


def test_selector(broker: BrokerCLI, queue: str) -> None:
    for color in ("red", "blue", "red", "green", "red"):
        ok("send", "-u", broker.url, queue, color, "-p", f"color={color}", "-q")
    red = ok("receive", "-u", broker.url, queue, "--selector", "color = 'red'", "--timeout", "0.5")
    assert red.stdout.splitlines() == ["red", "red", "red"]
    assert ok("receive", "-u", broker.url, queue, "--timeout", "0.5").stdout.splitlines() == ["blue", "green"]


def test_settle_release_leaves_the_messages_and_reject_drops_them(broker: BrokerCLI, queue: str) -> None:
    ok("send", "-u", broker.url, queue, "a", "b")
    ok("receive", "-u", broker.url, queue, "--count", "2", "--settle", "release")
    ok("receive", "-u", broker.url, queue, "--count", "2", "--settle", "reject")
    assert cli("receive", "-u", broker.url, queue, "--count", "1", "--timeout", "0.3").returncode == 5


def test_at_most_once_both_ways(broker: BrokerCLI, queue: str) -> None:
    ok("send", "-u", broker.url, queue, "--count", "300", "--delivery", "at-most-once")
    result = ok("receive", "-u", broker.url, queue, "--count", "300", "--delivery", "at-most-once", "--credit", "7")
    assert result.stdout.splitlines() == [f"message {n}" for n in range(1, 301)]
    # Exactly 300 taken: no message was prefetched beyond --count (at-most-once would have lost it).
    assert cli("receive", "-u", broker.url, queue, "--count", "1", "--timeout", "0.3").returncode == 5


def test_count_never_takes_more_than_asked(broker: BrokerCLI, queue: str) -> None:
    ok("send", "-u", broker.url, queue, "--count", "50", "-q")
    assert (
        len(ok("receive", "-u", broker.url, queue, "--count", "20", "--delivery", "at-most-once").stdout.split("\n"))
        == 21
    )
    assert len(ok("receive", "-u", broker.url, queue, "--timeout", "0.5").stdout.splitlines()) == 30


def test_rate_paces_the_sends(broker: BrokerCLI, queue: str) -> None:
    started = time.monotonic()
    ok("send", "-u", broker.url, queue, "--count", "6", "--rate", "20", "-q")
    # 6 messages at 20/s: the last leaves 5/20 s after the first (a lower bound on pacing, not a speed claim).
    assert time.monotonic() - started >= 0.25
    assert len(ok("receive", "-u", broker.url, queue, "--count", "6").stdout.splitlines()) == 6


def test_plain_progress_lines_when_not_a_terminal(broker: BrokerCLI, queue: str) -> None:
    result = ok("send", "-u", broker.url, queue, "--count", "200", "--rate", "400", AMQP_ASYNC_PROGRESS_INTERVAL="0.1")
    lines = [line for line in result.stderr.splitlines() if line.startswith("sent: ")]
    assert lines, result.stderr
    assert "/200 messages" in lines[0] and "msg/s" in lines[0] and "ETA" in lines[0]
    assert "\x1b[" not in result.stderr  # no terminal codes in a pipe
    assert result.stderr.splitlines()[-1].startswith("sent 200 messages")


def test_progress_bar_on_a_terminal(broker: BrokerCLI, queue: str) -> None:
    pty = pytest.importorskip("pty")
    primary, secondary = pty.openpty()
    try:
        process = subprocess.run(
            [*cli_command(), "send", "-u", broker.url, queue, "--count", "300", "--rate", "600"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=secondary,
            env=cli_env(TERM="xterm", COLUMNS="120"),
            timeout=TIMEOUT,
        )
        os.close(secondary)
        secondary = -1
        output = b""
        while True:
            try:
                chunk = os.read(primary, 65536)
            except OSError:
                break
            if not chunk:
                break
            output += chunk
    finally:
        os.close(primary)
        if secondary != -1:
            os.close(secondary)
    assert process.returncode == 0
    text = output.decode(errors="replace")
    assert "msg/s" in text and "/300" in text and "ETA" in text
    assert "\x1b[" in text  # drawn live, with terminal codes
    assert "sent 300 messages" in text


def test_bench_json_and_table(broker: BrokerCLI, queue: str) -> None:
    result = ok("bench", "-u", broker.url, "--address", queue, "--count", "500", "--size", "10", "-o", "json")
    phases = json.loads(result.stdout)
    assert [(p["phase"], p["messages"], p["bytes"]) for p in phases] == [("send", 500, 5000), ("receive", 500, 5000)]
    assert all(p["rate"] > 0 for p in phases)
    table = ok("bench", "--embedded", "--count", "200").stdout
    assert "msg/s" in table and "send" in table and "receive" in table and "200" in table


def test_bench_on_a_queue_that_holds_other_messages_says_so_and_takes_none_of_them(
    broker: BrokerCLI, queue: str
) -> None:
    ok("send", "-u", broker.url, queue, "old 1", "old 2", "old 3")
    result = cli("bench", "-u", broker.url, "--address", queue, "--count", "100", "--size", "10", "-o", "json")
    # before: exit 0, the three counted among its 100 (9,712 bytes received) and three of its own left behind
    assert result.returncode == 2
    assert f"{queue} held messages this run did not send" in result.stderr
    left = json_lines(ok("receive", "-u", broker.url, queue, "--timeout", "0.5", "--output", "json").stdout)
    assert [line["body"] for line in left[:3]] == ["old 1", "old 2", "old 3"] and len(left) == 103


def test_connect_json_when_no_url(broker: BrokerCLI, queue: str, tmp_path: Path) -> None:
    config = tmp_path / "connect.json"
    config.write_text(json.dumps({"scheme": "amqp", "host": "127.0.0.1", "port": broker.port}))
    ok("send", queue, "via-config", "--config", str(config))
    # ./connect.json is found as connect() finds it.
    assert ok("receive", queue, "--count", "1", cwd=tmp_path).stdout == "via-config\n"


def test_failover_list(broker: BrokerCLI, queue: str) -> None:
    ok("send", "-u", f"amqp://127.0.0.1:{free_port()}", "-u", broker.url, queue, "failover")
    assert ok("receive", "-u", broker.url, queue, "--count", "1").stdout == "failover\n"


# ---------------------------------------------------------------------------------------------------------------
# Exit codes


@pytest.mark.parametrize(
    ("arguments", "needle"),
    [
        (["send"], "Missing argument"),
        (["send", "q", "--no-such-option"], "No such option"),
        (["receive", "q", "--count", "0"], "--count"),
        (["send", "-u", "http://x", "q", "body"], "scheme"),
        (["send", "-u", "amqp://127.0.0.1:1", "q", "-p", "novalue"], "NAME=VALUE"),
        (["send", "-u", "amqp://127.0.0.1:1", "q", "a", "-i", "-"], "not both"),
    ],
    ids=["missing-address", "unknown-option", "zero-count", "bad-url", "bad-property", "bodies-and-input"],
)
def test_usage_errors_exit_2(arguments: list[str], needle: str) -> None:
    result = cli(*arguments)
    assert result.returncode == 2, result.stderr
    assert needle in result.stderr


def test_invalid_json_input_exits_2(broker: BrokerCLI, queue: str) -> None:
    result = cli("send", "-u", broker.url, queue, "-i", "-", "--format", "json", input="1\n{oops\n")
    assert result.returncode == 2
    assert "item 2: invalid JSON" in result.stderr


def test_unreachable_host_exits_3() -> None:
    result = cli("send", "-u", f"amqp://127.0.0.1:{free_port()}", "q", "x")
    assert result.returncode == 3
    assert "cannot connect" in result.stderr


def test_silent_peer_times_out_with_exit_3() -> None:
    with socket.socket() as server:  # accepts TCP, never answers the protocol header
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        result = cli("receive", "-u", f"amqp://127.0.0.1:{port}", "q", "--connect-timeout", "0.5")
    assert result.returncode == 3
    assert "amqp:" in result.stderr


def test_send_timeout_exits_5(broker: BrokerCLI, queue: str) -> None:
    result = cli("send", "-u", broker.url, queue, "--count", "100", "--rate", "10", "--timeout", "0.5", "-q")
    assert result.returncode == 5
    assert "--timeout 0.5 s passed" in result.stderr and "--rate 10 paces them" in result.stderr


def test_wrong_credentials_exit_4(tmp_path: Path, queue: str) -> None:
    secured = BrokerCLI(tmp_path, "--user", "alice:secret")
    try:
        url = secured.url.replace("amqp://", "amqp://alice:wrong@")
        result = cli("send", "-u", url, queue, "x")
        assert result.returncode == 4, result.stderr
        assert "amqp:unauthorized-access" in result.stderr
        assert cli("send", "-u", secured.url, queue, "x", "--user", "bob", "--password", "secret").returncode == 4
        ok("send", "-u", secured.url, queue, "x", "--user", "alice", AMQP_ASYNC_PASSWORD="secret")
        ok("receive", "-u", secured.url, queue, "--count", "1", "--user", "alice", "--password", "secret")
    finally:
        secured.stop()


def test_rejected_message_exits_6(tmp_path: Path, queue: str) -> None:
    limited = BrokerCLI(tmp_path, "--max-queue-depth", "2", "--when-full", "reject")
    try:
        result = cli("send", "-u", limited.url, queue, "--count", "3", "--window", "1")
        assert result.returncode == 6, result.stderr
        assert "amqp:resource-limit-exceeded" in result.stderr
    finally:
        limited.stop()


def test_refused_link_exits_7(broker: BrokerCLI, queue: str) -> None:
    result = cli("receive", "-u", broker.url, queue, "--selector", "color = ", "--timeout", "1")
    assert result.returncode == 7
    assert "amqp:invalid-field" in result.stderr


@pytest.mark.skipif(not openssl_available(), reason="the openssl command makes the test certificates")
def test_tls_options(tmp_path: Path, queue: str) -> None:
    ca = make_ca(tmp_path, "ca")
    server = make_cert(tmp_path, "server", ca, "localhost", san=["DNS:localhost", "IP:127.0.0.1"])
    secure = BrokerCLI(tmp_path, "--tls-cert", server.cert, "--tls-key", server.key)
    try:
        assert secure.url.startswith("amqps://")
        ok("send", "-u", secure.url, queue, "secret", "--tls-ca", ca.cert)
        assert ok("receive", "-u", secure.url, queue, "--count", "1", "--tls-ca", ca.cert).stdout == "secret\n"
        assert cli("send", "-u", secure.url, queue, "x").returncode == 3  # the system CAs do not know ours
        ok("send", "-u", secure.url, queue, "x", "--tls-no-verify")
        assert cli("send", "-u", secure.url, queue, "x", "--tls-key", server.key).returncode == 2
    finally:
        secure.stop()


# ---------------------------------------------------------------------------------------------------------------
# Against RabbitMQ


@pytest.mark.interop
def test_rabbitmq_send_receive_and_bench(rabbitmq_broker: RabbitMQNode) -> None:
    url = rabbitmq_broker.url
    address = f"/queue/cli-{uuid.uuid4().hex[:10]}"
    ok("send", "-u", url, address, "-p", "n=1", "--subject", "s", "--count", "25", "--durable")
    assert rabbitmq_broker.wait_queue_depth(address.rsplit("/", 1)[1], 25) == 25
    received = json_lines(ok("receive", "-u", url, address, "--count", "25", "-o", "json").stdout)
    assert [m["body"] for m in received] == [f"message {n}" for n in range(1, 26)]
    assert received[0]["subject"] == "s" and received[0]["properties"] == {"n": 1} and received[0]["durable"] is True
    assert cli("receive", "-u", url, address, "--count", "1", "--timeout", "0.5").returncode == 5
    bench_address = f"/queue/cli-bench-{uuid.uuid4().hex[:8]}"
    phases = json.loads(ok("bench", "-u", url, "--address", bench_address, "--count", "300", "-o", "json").stdout)
    assert [(p["phase"], p["messages"]) for p in phases] == [("send", 300), ("receive", 300)]


@pytest.mark.interop
def test_rabbitmq_exit_codes(rabbitmq_broker: RabbitMQNode) -> None:
    wrong = f"amqp://guest:wrong@{rabbitmq_broker.host}:{rabbitmq_broker.port}"
    result = cli("send", "-u", wrong, "/queue/cli-x", "x")
    assert result.returncode == 4, result.stderr
    # RabbitMQ ends the session for a receiver on a queue that does not exist: a refused link, exit 7.
    missing = f"/amq/queue/cli-missing-{uuid.uuid4().hex[:8]}"
    assert cli("receive", "-u", rabbitmq_broker.url, missing, "--timeout", "2").returncode == 7
