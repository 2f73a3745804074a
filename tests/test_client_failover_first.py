"""A first connect goes down the failover list past a peer that accepts TCP and never opens AMQP.

``connect(urls=[...])`` tries each URL once. A URL that refused went on to the next; one whose peer accepted the
TCP connection and then did not open the connection within ``connect_timeout`` (or closed the socket first) ended
the connect there, with the URLs after it never tried. Now both go on to the next URL, and the error once every URL
failed names each and why.

The silent peers are plain sockets; the peer that works is python-qpid-proton's test broker (tests/proton_broker.py,
an independent implementation), or our embedded broker where the test says so.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import anyio
import pytest

import amqp_async
from amqp_async import ConnectError, ConnectTimeout, Message
from amqp_async.broker import Broker

TIMEOUT = 20.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@contextmanager
def silent_peer(close_at_once: bool = False) -> Iterator[str]:
    """A TCP listener that accepts and never answers the protocol header (or closes each socket at once)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except (TimeoutError, OSError):
                continue
            if close_at_once:
                conn.close()
            else:
                held.append(conn)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"amqp://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(5)
        for conn in held:
            conn.close()
        listener.close()


@contextmanager
def foreign_peer(answer: bytes) -> Iterator[str]:
    """A TCP listener that speaks another protocol: it reads the client's header, writes ``answer`` (an AMQP 0-9-1
    broker's header, an HTTP error) and closes the socket."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except (TimeoutError, OSError):
                continue
            with conn:
                conn.settimeout(5)
                try:
                    conn.recv(8)
                    conn.sendall(answer)
                except OSError:
                    pass

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"amqp://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(5)
        listener.close()


AMQP_0_9_1 = b"AMQP\x00\x00\x09\x01"
HTTP_ERROR = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"


@pytest.mark.anyio
async def test_the_first_connect_goes_on_past_peers_of_another_protocol() -> None:
    """A URL of the list served by an AMQP 0-9-1 broker or a web server: the next one is tried (the first connect
    stopped there, with a ConnectionError)."""
    with foreign_peer(AMQP_0_9_1) as rabbit_0_9_1, foreign_peer(HTTP_ERROR) as web:
        async with Broker(port=0) as broker:
            with anyio.fail_after(TIMEOUT):
                async with amqp_async.connect(urls=[rabbit_0_9_1, web, broker.url], sasl_enabled=False) as conn:
                    assert str(conn.address) == broker.url
                    await (await conn.open_sender("failover")).send(Message(body=b"past two"))
            assert len(broker.queue("failover")) == 1


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("answer", "named"),
    [
        (AMQP_0_9_1, "b'AMQP\\x00\\x00\\t\\x01' (AMQP 0-9-1)"),
        # No AMQP header at all: its first bytes are named (they were said as "none (the peer sent nothing)").
        (HTTP_ERROR, "b'HTTP/1.1' (HTTP)"),
        (b"\x16\x03\x01\x00\x05hello", "b'\\x16\\x03\\x01\\x00\\x05hel' (a TLS handshake: the port wants amqps)"),
        (b"SSH", "b'SSH'"),  # fewer than 8 bytes that cannot begin a header: not waited for
    ],
    ids=["amqp-0-9-1", "http", "tls", "short"],
)
async def test_a_peer_of_another_protocol_is_named_in_the_error(answer: bytes, named: str) -> None:
    with foreign_peer(answer) as foreign, anyio.fail_after(TIMEOUT), pytest.raises(ConnectError) as caught:
        await amqp_async.connect(foreign, sasl_enabled=False)
    assert caught.value.condition == "amqp:not-allowed"
    assert caught.value.description == (
        f"cannot connect to {foreign}: unsupported protocol header {named}; b'AMQP\\x00\\x01\\x00\\x00' expected"
    )


@pytest.mark.anyio
@pytest.mark.parametrize("close_at_once", [False, True], ids=["never-opens", "closes-the-socket"])
async def test_the_first_connect_goes_on_past_a_peer_that_does_not_open(close_at_once: bool) -> None:
    with silent_peer(close_at_once) as silent:
        async with Broker(port=0) as broker:
            started = time.monotonic()
            with anyio.fail_after(TIMEOUT):
                async with amqp_async.connect(urls=[silent, broker.url], connect_timeout=1) as conn:
                    assert str(conn.address) == broker.url  # before: ConnectTimeout (or ConnectError) from the first
                    sender = await conn.open_sender("failover")
                    await sender.send(Message(body=b"through the second"))
            assert time.monotonic() - started < 1 + TIMEOUT / 2
            assert len(broker.queue("failover")) == 1


def test_the_second_url_may_be_python_qpid_protons_broker() -> None:
    pytest.importorskip("proton", reason="python-qpid-proton is a test dependency (the independent peer)")
    try:
        from proton_broker import ProtonBroker
    except ImportError:  # tests/ imported as a package
        from tests.proton_broker import ProtonBroker

    async def main(url: str, silent: str) -> str:
        with anyio.fail_after(TIMEOUT):
            async with amqp_async.connect(urls=[silent, url], connect_timeout=1) as conn:
                sender = await conn.open_sender("failover")
                await sender.send(Message(body=b"x"))
                return str(conn.address)

    with silent_peer() as silent, ProtonBroker() as proton_broker:
        assert anyio.run(main, proton_broker.url, silent) == proton_broker.url


@pytest.mark.anyio
async def test_when_every_url_fails_the_error_names_each() -> None:
    with (
        silent_peer() as silent,
        silent_peer(close_at_once=True) as closing,
        anyio.fail_after(TIMEOUT),
        pytest.raises(ConnectError) as caught,
    ):
        await amqp_async.connect(urls=[silent, closing], connect_timeout=1)
    description = caught.value.description
    assert description.startswith("cannot connect to any of the 2 URLs: ")
    assert f"{silent}: the peer did not open the connection within 1 s" in description
    assert f"{closing}: " in description
    # a single URL keeps its own error, as before
    with (
        silent_peer() as silent,
        anyio.fail_after(TIMEOUT),
        pytest.raises(ConnectTimeout, match="did not open the connection within 1 s"),
    ):
        await amqp_async.connect(silent, connect_timeout=1)
