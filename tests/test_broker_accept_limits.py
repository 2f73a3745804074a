"""The broker outlasts a client that opens more sockets than it may have files (``EMFILE``).

anyio's accept loop let the failed accept escape: ``python -m amqp_async.broker`` exited with code 1 ("too many
open files"), every client with it. The broker runs here in a subprocess whose limit of open files
(``RLIMIT_NOFILE``) is :data:`LIMIT`, on asyncio (the command line) and on trio (a short program), over TCP, TLS
and WebSocket; a client connects, then the test opens more silent sockets than the limit. Checked: the broker
stays up and logs one warning naming the limit (not one per retry), the connection already open is still served
meanwhile, and once the silent sockets close a new client is served. Every wait is bounded.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import ssl
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from broker_process import read_line

import amqp_async
from amqp_async import Message
from amqp_async.codec.delivery_states import Accepted

try:
    from tls_certs import make_ca, make_cert, openssl_available
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.tls_certs import make_ca, make_cert, openssl_available

resource = pytest.importorskip("resource", reason="RLIMIT_NOFILE is POSIX")

REPO = Path(__file__).resolve().parent.parent
TIMEOUT = 20.0
#: The broker's limit of open files: what it opens to start (Python, its modules, the loop) leaves it a few dozen
#: sockets.
LIMIT = 96
#: Silent sockets the test opens: more than the broker may have.
FLOOD = LIMIT + 60
WARNING = "too many open files (the limit is 96)"

#: The broker on a backend of the test's choice (the command line runs on asyncio only): prints its URL as the
#: command line does, logs as it does.
PROGRAM = """
import logging, ssl, sys
import anyio
from amqp_async.broker import Broker

backend, listener, cert, key = sys.argv[1:]
logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")

async def main():
    context = None
    if cert:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(cert, key)
    ws_port = 0 if listener == "websocket" else None
    async with Broker(port=0, ssl_context=context, ws_port=ws_port) as broker:
        print(f"listening on {broker.url}", flush=True)
        if broker.ws_url is not None:
            print(f"listening on {broker.ws_url}", flush=True)
        await anyio.sleep_forever()

anyio.run(main, backend=backend)
"""

CASES = [
    ("asyncio", "tcp"),
    ("asyncio", "tls"),
    ("asyncio", "websocket"),
    ("trio", "tcp"),
    ("trio", "tls"),
    ("trio", "websocket"),
]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the test's client; the broker's backend is the case's


def _limit_files() -> None:
    """In the broker's process, before it runs: at most :data:`LIMIT` open files."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (LIMIT, hard))


class LimitedBroker:
    """A broker process limited to :data:`LIMIT` open files; ``url`` is the one its clients use (its WebSocket
    URL when it serves WebSocket), ``port`` that URL's port."""

    def __init__(self, command: list[str], stderr_path: Path, lines: int) -> None:
        self.stderr_path = stderr_path
        self._stderr = stderr_path.open("wb")
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
        env.pop("AMQP_ASYNC_TRACE_FRM", None)
        self.process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=self._stderr, env=env, preexec_fn=_limit_files
        )
        try:
            for _ in range(lines):
                line = self._read_line()
                assert line.startswith("listening on "), f"{line!r}; stderr:\n{self.stderr()}"
        except BaseException:
            self.stop()
            raise
        self.url = line.removeprefix("listening on ")
        match = re.match(r"^\w+://127\.0\.0\.1:(\d+)", self.url)
        assert match is not None, self.url
        self.port = int(match.group(1))

    def _read_line(self) -> str:
        return read_line(self.process, TIMEOUT, self.stderr)

    def stderr(self) -> str:
        self._stderr.flush()
        return self.stderr_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(TIMEOUT)
        if self.process.stdout is not None:
            self.process.stdout.close()
        self._stderr.close()


@contextmanager
def limited_broker(tmp_path: Path, backend: str, listener: str) -> Iterator[tuple[LimitedBroker, dict[str, Any]]]:
    """The case's broker, and the options its clients connect with."""
    options: dict[str, Any] = {"reconnect": False}
    cert = key = ""
    if listener == "tls":
        if not openssl_available():
            pytest.skip("the openssl command makes the test certificates")
        ca = make_ca(tmp_path, "ca")
        server = make_cert(tmp_path, "server", ca, "localhost", san=["IP:127.0.0.1"])
        cert, key = server.cert, server.key
        options["ssl_context"] = ssl.create_default_context(cafile=ca.cert)
    if listener == "websocket":
        pytest.importorskip("wsproto", reason="AMQP over WebSocket needs wsproto (the websocket extra)")
        options["http_proxy"] = False
    if backend == "asyncio":
        command = [sys.executable, "-m", "amqp_async.broker", "--host", "127.0.0.1", "--port", "0"]
        if cert:
            command += ["--tls-cert", cert, "--tls-key", key]
        if listener == "websocket":
            command += ["--ws-port", "0"]
    else:
        pytest.importorskip("trio")
        command = [sys.executable, "-c", PROGRAM, backend, listener, cert, key]
    broker = LimitedBroker(command, tmp_path / "broker.stderr", 2 if listener == "websocket" else 1)
    try:
        yield broker, options
    finally:
        broker.stop()


def flood(port: int, count: int) -> list[socket.socket]:
    """``count`` connected sockets that send nothing (the kernel completes their handshake into the listen
    backlog, accepted or not)."""
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sockets.append(socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT))
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    return sockets


async def round_trip(conn: amqp_async.Connection, body: str) -> None:
    """A message sent and received back on ``conn``."""
    sender = await conn.open_sender("q")
    assert isinstance(await sender.send(Message(body=body)), Accepted)
    receiver = await conn.open_receiver("q")
    delivery = await receiver.receive()
    assert delivery.message.body == body
    await delivery.accept()
    await receiver.close()
    await sender.close()


async def wait_for(broker: LimitedBroker, text: str) -> None:
    """Until the broker's log says ``text`` (fails at once if the broker exits)."""
    while text not in broker.stderr():
        code = broker.process.poll()
        assert code is None, f"the broker exited with code {code}; stderr:\n{broker.stderr()[-3000:]}"
        await anyio.sleep(0.05)


@pytest.mark.anyio
@pytest.mark.skipif(sys.platform == "win32", reason="RLIMIT_NOFILE is POSIX")
@pytest.mark.parametrize(("backend", "listener"), CASES, ids=[f"{b}-{listener}" for b, listener in CASES])
async def test_more_sockets_than_the_file_limit_pause_accepting_and_the_broker_goes_on(
    tmp_path: Path, backend: str, listener: str
) -> None:
    with limited_broker(tmp_path, backend, listener) as (broker, options), ExitStack() as silent:
        with anyio.fail_after(TIMEOUT):
            async with amqp_async.connect(broker.url, **options) as opened:
                await round_trip(opened, "before")
                sockets = await anyio.to_thread.run_sync(flood, broker.port, FLOOD)
                for sock in sockets:
                    silent.callback(sock.close)
                await wait_for(broker, WARNING)
                await anyio.sleep(1.0)  # ten pauses of accepting: still one warning
                assert broker.process.poll() is None, broker.stderr()
                log = broker.stderr()
                assert log.count("too many open files") == 1, log[-3000:]
                assert "raise the limit (ulimit -n)" in log
                await round_trip(opened, "while the limit is reached")  # what is open is served meanwhile
            silent.close()  # the descriptors come free
            await wait_for(broker, "again (after ")
            async with amqp_async.connect(broker.url, **options) as conn:
                await round_trip(conn, "after")
        assert broker.process.poll() is None
        if backend == "asyncio":
            broker.process.send_signal(signal.SIGTERM)
            assert broker.process.wait(TIMEOUT) == 0
