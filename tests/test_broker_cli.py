"""``python -m amqp_async.broker``: the embedded broker's command line, run as a subprocess.

Checked: it prints ``listening on amqp://127.0.0.1:PORT`` once, on stdout only (with ``--port 0`` the real port),
serves our client and proton's, logs a line per connection and link opened and closed on stderr, and exits with
code 0 on SIGTERM and on SIGINT within a few seconds (also with a client connected); ``--user``, ``--users-file``
(lines or JSON), ``--max-queue-depth``, ``--dead-letter-queue`` and ``--tls-cert/--tls-key`` do what they say.
What cannot start (a port in use, a host that does not resolve, a missing or bad certificate, key or users file, a
data directory that cannot be made, a bad option) ends with exactly one line on stderr and exit code 1 or 2, no
traceback (one with ``--debug``); every option has help; ``--version``; sizes with units; ``amqp-async broker``
says its own name. Every wait is bounded.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import selectors
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

import amqp_async
from amqp_async import AuthenticationError, Message, MessageRejected
from amqp_async.broker import DEFAULT_MAX_MEMORY, Broker
from amqp_async.broker.__main__ import build_parser, message_budget, parse_arguments, parse_size
from amqp_async.codec.delivery_states import Accepted

try:
    from tls_certs import make_ca, make_cert, openssl_available
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.tls_certs import make_ca, make_cert, openssl_available

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")

REPO = Path(__file__).resolve().parent.parent
TIMEOUT = 10.0
#: How long a signalled broker may take to exit.
EXIT_TIMEOUT = 5.0
LISTENING = re.compile(r"^listening on (amqps?)://([^:\s]+):(\d+)$")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class BrokerProcess:
    """A running ``python -m amqp_async.broker``; stderr goes to a file, stdout is read for the first line."""

    def __init__(self, tmp_path: Path, *arguments: str) -> None:
        self.stderr_path = tmp_path / f"broker-{time.monotonic_ns()}.stderr"
        self._stderr = self.stderr_path.open("wb")
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
        env.pop("AMQP_ASYNC_TRACE_FRM", None)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "amqp_async.broker", *arguments],
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=env,
            cwd=tmp_path,
        )
        self.first_line = self._read_line(TIMEOUT)
        match = LISTENING.match(self.first_line)
        if match is None:
            self.stop()
            raise AssertionError(f"unexpected first line {self.first_line!r}; stderr:\n{self.stderr()}")
        self.scheme, self.host, port = match.groups()
        self.port = int(port)
        self.url = f"{self.scheme}://{self.host}:{self.port}"

    def _read_line(self, timeout: float) -> str:
        assert self.process.stdout is not None
        selector = selectors.DefaultSelector()
        selector.register(self.process.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + timeout
        line = b""
        try:
            while not line.endswith(b"\n"):
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not selector.select(remaining):
                    raise AssertionError(f"no line on stdout within {timeout}s; stderr:\n{self.stderr()}")
                chunk = os.read(self.process.stdout.fileno(), 1)
                if not chunk:
                    raise AssertionError(f"stdout closed (exit {self.process.poll()}); stderr:\n{self.stderr()}")
                line += chunk
        finally:
            selector.close()
        return line.decode().strip()

    def stderr(self) -> str:
        self._stderr.flush()
        return self.stderr_path.read_text(errors="replace")

    def signal(self, signum: int, timeout: float = EXIT_TIMEOUT) -> int:
        """Send ``signum`` and return the exit code (fails the test if the broker does not exit in time)."""
        self.process.send_signal(signum)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the broker did not exit within {timeout}s of {signum}") from None

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(TIMEOUT)
        if self.process.stdout is not None:
            self.process.stdout.close()
        self._stderr.close()


@contextmanager
def broker_process(tmp_path: Path, *arguments: str) -> Iterator[BrokerProcess]:
    broker = BrokerProcess(tmp_path, "--port", "0", *arguments)
    try:
        yield broker
    finally:
        broker.stop()


def run_cli(*arguments: str, timeout: float = TIMEOUT, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run(
        [sys.executable, "-m", "amqp_async.broker", *arguments],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        cwd=cwd,
    )


async def round_trip(url: str, address: str = "q", **options: Any) -> Any:
    """Send one message to ``address`` and receive it back with our client; return its body."""
    options.setdefault("reconnect", False)
    with anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(url, **options) as conn:
            sender = await conn.open_sender(address)
            assert isinstance(await sender.send(Message(body="ping")), Accepted)
            receiver = await conn.open_receiver(address)
            delivery = await receiver.receive()
            await delivery.accept()
            await receiver.close()
            await sender.close()
            return delivery.message.body


# ---------------------------------------------------------------------------------------------------------------
# Serving and logging


@pytest.mark.anyio
async def test_prints_its_url_serves_a_client_and_logs_connections_and_links(tmp_path: Path) -> None:
    with broker_process(tmp_path) as broker:
        assert broker.first_line == f"listening on amqp://127.0.0.1:{broker.port}"
        assert broker.port > 0
        assert await round_trip(broker.url, "logged-queue") == "ping"
        deadline = time.monotonic() + TIMEOUT
        while "closed" not in broker.stderr() and time.monotonic() < deadline:
            await anyio.sleep(0.05)
        assert broker.signal(signal.SIGTERM) == 0
        log = broker.stderr()
        lines = log.splitlines()
        assert any(re.search(r"connection 127\.0\.0\.1:\d+ opened", line) for line in lines), log
        assert any(re.search(r"connection 127\.0\.0\.1:\d+ closed", line) for line in lines), log
        assert any("attached" in line and "sends to logged-queue" in line for line in lines), log
        assert any("attached" in line and "receives from logged-queue" in line for line in lines), log
        assert len([line for line in lines if re.search(r"link .* detached", line)]) == 2, log
        assert "Traceback" not in log


def test_serves_proton_blocking_connection(tmp_path: Path) -> None:
    utils = pytest.importorskip("proton.utils", reason="python-qpid-proton is the independent client")
    proton = pytest.importorskip("proton")
    with broker_process(tmp_path) as broker:
        conn = utils.BlockingConnection(broker.url, timeout=TIMEOUT)
        try:
            conn.create_sender("q").send(proton.Message(body="from proton"))
            receiver = conn.create_receiver("q")
            assert receiver.receive(timeout=TIMEOUT).body == "from proton"
            receiver.accept()
        finally:
            conn.close()
        assert broker.signal(signal.SIGTERM) == 0


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_exits_cleanly_on_a_signal_sent_as_soon_as_it_says_it_listens(tmp_path: Path, signum: int) -> None:
    """The listening line is the readiness signal a supervisor waits for: from then on, SIGTERM and SIGINT must
    shut the broker down cleanly (exit 0), not kill it with the default action."""
    with broker_process(tmp_path) as broker:
        started = time.monotonic()
        assert broker.signal(signum) == 0
        assert time.monotonic() - started < EXIT_TIMEOUT
        log = broker.stderr()
        assert "Traceback" not in log and "KeyboardInterrupt" not in log, log
        assert signal.Signals(signum).name in log  # "signal SIGTERM: shutting down"
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", broker.port), timeout=1).close()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_exits_cleanly_on_a_signal_with_a_client_connected(tmp_path: Path, signum: int) -> None:
    with broker_process(tmp_path) as broker:
        client = socket.create_connection(("127.0.0.1", broker.port), timeout=TIMEOUT)
        try:
            client.sendall(b"AMQP\x00\x01\x00\x00")  # a client that opened and went quiet
            assert client.recv(8) == b"AMQP\x00\x01\x00\x00"
            assert broker.signal(signum) == 0
            assert "Traceback" not in broker.stderr()
        finally:
            client.close()


@contextmanager
def taken_port() -> Iterator[int]:
    """A port some other socket listens on."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        yield taken.getsockname()[1]


def one_error_line(result: subprocess.CompletedProcess[str], prog: str = "python -m amqp_async.broker") -> str:
    """The single line a failed start writes on stderr (nothing on stdout, no traceback); returns its message."""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"{prog}: error: "), result.stderr
    assert result.stdout == "", result.stdout
    return lines[0][len(f"{prog}: error: ") :]


def test_a_port_in_use_is_one_line_and_exit_code_1() -> None:
    with taken_port() as port:
        result = run_cli("--port", str(port))
    assert result.returncode == 1
    assert one_error_line(result) == (
        f"cannot listen on 127.0.0.1:{port}: address already in use (another broker? choose another port, "
        "or 0 for a free one)"
    )


def test_debug_adds_the_traceback_of_a_failure() -> None:
    with taken_port() as port:
        result = run_cli("--port", str(port), "--debug")
    assert result.returncode == 1
    assert "Traceback (most recent call last)" in result.stderr
    assert "ListenError" in result.stderr
    last = result.stderr.splitlines()[-1]
    assert last.startswith(f"python -m amqp_async.broker: error: cannot listen on 127.0.0.1:{port}: address")


def test_a_websocket_port_in_use_is_one_line_too() -> None:
    pytest.importorskip("wsproto", reason="the websocket extra (wsproto) is in the test dependency group")
    with taken_port() as port:
        result = run_cli("--port", "0", "--ws-port", str(port))
    assert result.returncode == 1
    assert one_error_line(result).startswith(f"cannot listen on 127.0.0.1:{port}: address already in use")


def test_a_host_that_does_not_resolve_is_one_line() -> None:
    result = run_cli("--host", "no-such-host.invalid", "--port", "0")
    assert result.returncode == 1
    message = one_error_line(result)
    assert message.startswith("cannot listen on no-such-host.invalid:0: the host 'no-such-host.invalid' does not")


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        (["--tls-cert", "missing.pem"], "cannot read --tls-cert missing.pem: no such file or directory"),
        (["--tls-cert", "garbage.pem"], "cannot load --tls-cert garbage.pem: "),
        (["--tls-cert", "garbage.pem", "--tls-key", "missing.key"], "cannot read --tls-key missing.key: "),
        (["--users-file", "missing.txt"], "cannot read --users-file missing.txt: no such file or directory"),
        (["--users-file", "bad.json"], "--users-file bad.json is not valid JSON: "),
        (["--users-file", "list.json"], "--users-file list.json: a JSON file holds an object of names to passwords"),
        (["--users-file", "no-colon.txt"], "--users-file no-colon.txt, line 2: NAME:PASSWORD expected"),
        (["--user", "alice"], "--user takes NAME:PASSWORD, got 'alice'"),
        (["--users-file", "empty.txt"], "--users-file empty.txt names no user"),
        (["--users-file", "comments.txt"], "--users-file comments.txt names no user"),
        (["--users-file", "empty.json"], "--users-file empty.json names no user"),
        (["--users-file", "null.json"], "--users-file null.json: the password of 'bob' is not a string (null)"),
        (["--users-file", "nested.json"], "--users-file nested.json: the password of 'amy' is not a string ({"),
        (["--users-file", "number.json"], "--users-file number.json: the password of 'cy' is not a string (123)"),
        (["--users-file", "empty-password.txt"], "the password of 'ann' is empty: SASL PLAIN and SCRAM take none"),
        (["--user", "ann:"], "the password of 'ann' is empty: SASL PLAIN and SCRAM take none"),
        (["--user", ":secret"], "a user name is empty: SASL PLAIN and SCRAM take none"),
    ],
    ids=[
        "missing-cert",
        "garbage-cert",
        "missing-key",
        "missing-users-file",
        "bad-json",
        "json-not-an-object",
        "line-without-password",
        "user-without-password",
        # a users file without a user let everyone in as ANONYMOUS, silently (it asks for authentication)
        "empty-users-file",
        "users-file-of-comments",
        "empty-json-users-file",
        # a null password read as the password "None": anyone could log in as bob with it
        "null-password",
        "object-password",
        "number-password",
        "empty-password-in-file",
        "empty-password",
        "empty-user-name",
    ],
)
def test_an_unreadable_file_is_one_line_and_exit_code_2(tmp_path: Path, arguments: list[str], expected: str) -> None:
    (tmp_path / "garbage.pem").write_text("-----BEGIN CERTIFICATE-----\nnot a certificate\n")
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "list.json").write_text('["alice:secret"]')
    (tmp_path / "no-colon.txt").write_text("alice:secret\nbob\n")
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "comments.txt").write_text("# alice:secret\n\n")
    (tmp_path / "empty.json").write_text("{}")
    (tmp_path / "null.json").write_text('{"alice": "secret", "bob": null}')
    (tmp_path / "nested.json").write_text('{"amy": {"password": "s3cret"}}')
    (tmp_path / "number.json").write_text('{"cy": 123}')
    (tmp_path / "empty-password.txt").write_text("alice:secret\nann:\n")
    result = run_cli("--port", "0", *arguments, cwd=tmp_path)
    assert result.returncode == 2
    assert one_error_line(result).startswith(expected), result.stderr


def test_a_data_dir_that_cannot_be_made_is_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    result = run_cli("--port", "0", "--data-dir", str(blocker / "store"))
    assert result.returncode == 1
    assert one_error_line(result).startswith(f"cannot use --data-dir {blocker / 'store'}: ")


def test_a_data_dir_that_is_a_file_says_so(tmp_path: Path) -> None:
    file = tmp_path / "a-file"
    file.write_text("not a directory")
    result = run_cli("--port", "0", "--data-dir", str(file))
    assert result.returncode == 1
    # before: "cannot use --data-dir ...: file exists"
    assert one_error_line(result) == f"cannot use --data-dir {file}: {file} is not a directory"


def test_a_store_truncated_to_nothing_is_refused_and_kept(tmp_path: Path) -> None:
    """SQLite takes an empty file for a new database: the broker used to start with no messages, as if the store had
    held none, and wrote over the file. A store it made is never empty; an empty one is refused, left as it is."""
    store = tmp_path / "broker.sqlite3"
    store.write_bytes(b"")
    result = run_cli("--port", "0", "--data-dir", str(tmp_path))
    assert result.returncode == 1
    line = one_error_line(result)
    assert line.startswith(f"cannot use --data-dir {tmp_path}: {store} is empty (0 bytes)"), line
    assert store.stat().st_size == 0


def test_prints_the_listening_line_once_and_not_in_the_log(tmp_path: Path) -> None:
    """One line per listener, on stdout only (stderr is the log): a script reads the first line of stdout."""
    with broker_process(tmp_path) as broker:
        assert broker.signal(signal.SIGTERM) == 0
        assert broker.process.stdout is not None
        rest = broker.process.stdout.read().decode()
        assert rest == "", rest  # nothing after the listening line
        assert "listening" not in broker.stderr()


def test_version() -> None:
    result = run_cli("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"python -m amqp_async.broker (amqp_async {amqp_async.__version__})"


def test_every_option_has_help() -> None:
    parser = build_parser()
    options = [action for action in parser._actions if action.option_strings]
    assert len(options) == 27  # help and version included
    missing = [action.option_strings[0] for action in options if not action.help]
    assert missing == []
    result = run_cli("--help")
    assert result.returncode == 0
    for action in options:
        assert action.option_strings[-1] in result.stdout


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("1048576", 1 << 20),
        ("512KiB", 512 << 10),
        ("256MiB", 256 << 20),
        ("1GiB", 1 << 30),
        ("1.5G", 1_500_000_000),
        ("10 mb", 10_000_000),
        ("0", None),
        ("unlimited", None),
        ("none", None),
    ],
)
def test_sizes(text: str, size: int | None) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["lots", "-1", "1 parsec", "", "1e3"])
def test_bad_sizes(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        parse_size(text)


def test_max_memory_defaults_to_the_brokers_default_and_takes_unlimited() -> None:
    assert parse_arguments([]).max_memory == DEFAULT_MAX_MEMORY
    assert parse_arguments(["--max-memory", "0"]).max_memory is None
    assert parse_arguments(["--max-memory", "unlimited"]).max_memory is None
    assert parse_arguments(["--max-memory", "64MiB"]).max_memory == 64 << 20
    assert Broker().max_memory == DEFAULT_MAX_MEMORY <= 1 << 30
    assert message_budget(3, 40 << 20) == 1  # a limit of a few bytes leaves the messages one, not 0 (refused)


# ---------------------------------------------------------------------------------------------------------------
# Options


@pytest.mark.anyio
async def test_user_requires_authentication(tmp_path: Path) -> None:
    with broker_process(tmp_path, "--user", "alice:secret", "--user", "bob:pa:ss") as broker:
        assert await round_trip(broker.url, user="alice", password="secret", allowed_mechs="SCRAM-SHA-256") == "ping"
        assert await round_trip(broker.url, user="bob", password="pa:ss", allowed_mechs="PLAIN") == "ping"
        with anyio.fail_after(TIMEOUT):
            with pytest.raises(AuthenticationError):
                await round_trip(broker.url, user="alice", password="wrong", allowed_mechs="PLAIN")
            with pytest.raises(amqp_async.ConnectionError):  # no credentials: ANONYMOUS is not offered
                await round_trip(broker.url)
        assert broker.signal(signal.SIGTERM) == 0


@pytest.mark.anyio
async def test_allow_anonymous_with_users(tmp_path: Path) -> None:
    with broker_process(tmp_path, "--user", "alice:secret", "--allow-anonymous") as broker:
        assert await round_trip(broker.url) == "ping"
        assert await round_trip(broker.url, user="alice", password="secret", allowed_mechs="PLAIN") == "ping"


@pytest.mark.anyio
@pytest.mark.parametrize("form", ["lines", "json"])
async def test_users_file(tmp_path: Path, form: str) -> None:
    users = tmp_path / "users"
    if form == "lines":
        users.write_text("# the broker's users\nalice:secret\n\ncarol:c0l:on\n")
    else:
        users.write_text(json.dumps({"alice": "secret", "carol": "c0l:on"}))
    with broker_process(tmp_path, "--users-file", str(users)) as broker:
        assert await round_trip(broker.url, user="alice", password="secret", allowed_mechs="SCRAM-SHA-256") == "ping"
        assert await round_trip(broker.url, user="carol", password="c0l:on", allowed_mechs="PLAIN") == "ping"
        with anyio.fail_after(TIMEOUT), pytest.raises(AuthenticationError):
            await round_trip(broker.url, user="carol", password="c0l", allowed_mechs="SCRAM-SHA-256")


@pytest.mark.anyio
async def test_max_queue_depth(tmp_path: Path) -> None:
    """A full queue gives its producer no credit: the third send waits until a consumer takes one."""
    with broker_process(tmp_path, "--max-queue-depth", "2") as broker:
        with anyio.fail_after(TIMEOUT):
            async with amqp_async.connect(broker.url, reconnect=False) as conn:
                sender = await conn.open_sender("q")
                assert sender.credit == 2
                await sender.send(Message(body=1))
                await sender.send(Message(body=2))
                assert sender.credit == 0
                with anyio.move_on_after(0.3) as waited:
                    await sender.send(Message(body=3))
                assert waited.cancelled_caught  # waiting for credit: nothing was sent
                receiver = await conn.open_receiver("q", credit=2)
                assert [(await receiver.receive()).message.body for _ in range(2)] == [1, 2]
                assert isinstance(await sender.send(Message(body=3)), Accepted)
        assert broker.signal(signal.SIGTERM) == 0


@pytest.mark.anyio
async def test_max_queue_depth_when_full_reject(tmp_path: Path) -> None:
    with broker_process(tmp_path, "--max-queue-depth", "2", "--when-full", "reject") as broker:
        with anyio.fail_after(TIMEOUT):
            async with amqp_async.connect(broker.url, reconnect=False) as conn:
                sender = await conn.open_sender("q")
                await sender.send(Message(body=1))
                await sender.send(Message(body=2))
                with pytest.raises(MessageRejected) as info:
                    await sender.send(Message(body=3))
                assert info.value.condition == "amqp:resource-limit-exceeded"
        assert broker.signal(signal.SIGTERM) == 0


@pytest.mark.anyio
async def test_dead_letter_queue_and_max_message_size(tmp_path: Path) -> None:
    with broker_process(tmp_path, "--dead-letter-queue", "dead", "--max-message-size", "4096") as broker:
        with anyio.fail_after(TIMEOUT):
            async with amqp_async.connect(broker.url, reconnect=False) as conn:
                sender = await conn.open_sender("q")
                assert sender._engine_link.remote_max_message_size == 4096
                await sender.send(Message(body="poison"))
                receiver = await conn.open_receiver("q")
                await (await receiver.receive()).reject()
                dead = await conn.open_receiver("dead")
                assert (await dead.receive()).message.body == "poison"


@pytest.mark.anyio
@pytest.mark.skipif(not openssl_available(), reason="the openssl command makes the test certificates")
async def test_tls_cert_and_key(tmp_path: Path) -> None:
    ca = make_ca(tmp_path, "ca")
    server = make_cert(tmp_path, "server", ca, "localhost", san=["DNS:localhost", "IP:127.0.0.1"])
    with broker_process(tmp_path, "--tls-cert", server.cert, "--tls-key", server.key) as broker:
        assert broker.first_line == f"listening on amqps://127.0.0.1:{broker.port}"
        context = ssl.create_default_context(cafile=ca.cert)
        assert await round_trip(broker.url, ssl_context=context) == "ping"
        assert await round_trip(f"amqps://localhost:{broker.port}", ssl_context=context) == "ping"
        with anyio.fail_after(TIMEOUT), pytest.raises(amqp_async.ConnectionError):
            await round_trip(broker.url, ssl_context=ssl.create_default_context())
        assert broker.signal(signal.SIGTERM) == 0


@pytest.mark.skipif(not openssl_available(), reason="the openssl command makes the test certificates")
def test_a_certificate_without_its_key_says_so(tmp_path: Path) -> None:
    ca = make_ca(tmp_path, "ca")
    server = make_cert(tmp_path, "server", ca, "localhost", san=["IP:127.0.0.1"])
    result = run_cli("--port", "0", "--tls-cert", server.cert)
    assert result.returncode == 2
    # before: "cannot load --tls-cert ...: PEM lib", naming neither what is missing nor how to give it
    assert one_error_line(result) == (
        f"cannot load --tls-cert {server.cert}: {server.cert} holds a certificate and no private key: "
        "give the key's file too (--tls-key, key=...)"
    )
    # the client's TLS files (connect.json, the command line, Spark's options) say the same
    from amqp_async.client._config import tls_context

    with pytest.raises(ssl.SSLError, match="holds a certificate and no private key"):
        tls_context(cert=server.cert)
    tls_context(cert=server.cert, key=server.key)  # with it, the chain loads


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        (["--port", "not-a-number"], "argument --port: 'not-a-number' is not a port number"),
        (["--port", "70000"], "argument --port: 70000 is not a port number (0-65535; 0: a free port)"),
        (["--no-such-option"], "unrecognized arguments: --no-such-option"),
        (["--max-queue-depth", "many"], "argument --max-queue-depth: 'many' is not a whole number"),
        (["--max-queue-depth", "0"], "argument --max-queue-depth: 0 is not above 0"),
        (["--max-memory", "lots"], "argument --max-memory: 'lots' is not a size"),
        # every client was refused its session (the messages, sessions and links got 256 bytes)
        (["--max-memory", "1KiB"], "argument --max-memory: '1KiB' is less than the broker runs in (1MiB"),
        (["--when-full", "drop"], "argument --when-full: invalid choice: 'drop'"),
        (
            ["--transaction-timeout", "-1"],
            "argument --transaction-timeout: '-1' is not a finite number of seconds above 0",
        ),
        (["--expiry-interval", "inf"], "argument --expiry-interval: 'inf' is not a finite number of seconds above 0"),
        # 0 is taken (no limit): "above 0" alone read as if it were refused too
        (
            ["--handshake-timeout", "-1"],
            "argument --handshake-timeout: '-1' is not a finite number of seconds above 0 (0: no limit)",
        ),
        (
            ["--dead-letter-queue", "topic://dead"],
            "argument --dead-letter-queue: the dead-letter queue 'topic://dead' names a topic",
        ),
        (["--dead-letter-queue", ""], "argument --dead-letter-queue: the dead-letter queue needs an address"),
        (["--tls-key", "key.pem"], "--tls-key needs --tls-cert"),
        (["--ws-path", "/ws"], "--ws-path needs --ws-port"),
        # accepted, printed as ws://127.0.0.1:PORTws, and every upgrade answered 404
        (["--ws-port", "0", "--ws-path", "ws"], "argument --ws-path: the WebSocket path 'ws' does not start with '/'"),
        (["--ws-port", "0", "--ws-path", ""], "argument --ws-path: the WebSocket path '' does not start with '/'"),
        (["--quiet", "--debug"], "argument --debug: not allowed with argument --quiet"),
        (["stray"], "unrecognized arguments: stray"),
    ],
    ids=[
        "bad-port",
        "port-range",
        "unknown-option",
        "bad-depth",
        "zero-depth",
        "bad-memory",
        "tiny-memory",
        "bad-when-full",
        "negative-timeout",
        "infinite-expiry-interval",
        "negative-handshake-timeout",
        "topic-dead-letter-queue",
        "empty-dead-letter-queue",
        "key-without-cert",
        "path-without-ws-port",
        "ws-path-without-slash",
        "empty-ws-path",
        "quiet-and-debug",
        "positional",
    ],
)
def test_a_bad_argument_is_one_line_and_exit_code_2(arguments: list[str], expected: str) -> None:
    result = run_cli(*arguments)
    assert result.returncode == 2
    message = one_error_line(result)
    assert message.startswith(expected), message
    assert message.endswith("(--help lists the options)")


@pytest.mark.parametrize("path", ["ws", "", "ws/amqp"])
def test_a_websocket_path_without_its_leading_slash_is_a_value_error(path: str) -> None:
    with pytest.raises(ValueError, match=f"the WebSocket path {re.escape(repr(path))} does not start with '/'"):
        Broker(port=0, ws_port=0, ws_path=path)
    assert Broker(port=0, ws_port=0, ws_path="/" + path).ws_path == "/" + path


# ---------------------------------------------------------------------------------------------------------------
# amqp-async broker: the same command line under its own name

AMQP_ASYNC = Path(sys.executable).parent / "amqp-async"


def run_amqp_async(*arguments: str) -> subprocess.CompletedProcess[str]:
    """``amqp-async ARGUMENTS...``: the installed console script, else ``python -m amqp_async`` (a checkout)."""
    pytest.importorskip("click", reason="the cli extra (click, rich) is in the test dependency group")
    command = [str(AMQP_ASYNC)] if AMQP_ASYNC.exists() else [sys.executable, "-m", "amqp_async"]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([*command, *arguments], capture_output=True, text=True, env=env, timeout=TIMEOUT)


def test_amqp_async_broker_names_itself_in_its_usage_and_errors() -> None:
    result = run_amqp_async("broker", "--help")
    assert result.returncode == 0
    assert result.stdout.startswith("usage: amqp-async broker ")
    assert "python -m amqp_async.broker" not in result.stdout
    with taken_port() as port:
        busy = run_amqp_async("broker", "--port", str(port))
        debug = run_amqp_async("--debug", "broker", "--port", str(port))  # the group's --debug is the broker's
    assert busy.returncode == 1
    assert one_error_line(busy, prog="amqp-async broker").startswith(f"cannot listen on 127.0.0.1:{port}: address")
    assert debug.returncode == 1
    assert "Traceback (most recent call last)" in debug.stderr
    bad = run_amqp_async("broker", "--max-memory", "lots")
    assert bad.returncode == 2
    assert one_error_line(bad, prog="amqp-async broker").startswith("argument --max-memory: 'lots' is not a size")
    version = run_amqp_async("broker", "--version")
    assert version.stdout.strip() == f"amqp-async broker (amqp_async {amqp_async.__version__})"
