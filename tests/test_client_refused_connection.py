"""A peer that refuses a connection (§2.4.1: its open, then at once a close with the error) makes ``connect()``
raise that error, naming its condition.

Before, ``connect()`` returned a connection that had failed already (``is_closed`` true), logged "connection
failed" as a warning, and the first use raised. The peers: the embedded broker under ``max_connections=1``, and a
raw peer that writes its open and its close together (python-qpid-proton's container, asked to close a connection
as it opens, writes the open alone and the close only when the socket ends).
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Iterator

import anyio
import pytest

import amqp_async
from amqp_async.broker import Broker
from amqp_async.codec.performatives import Close, Error, Open
from amqp_async.types import symbol

try:
    from frames import AMQP_HEADER, frame
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.frames import AMQP_HEADER, frame

pytestmark = pytest.mark.anyio

TIMEOUT = 10.0


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def refuser() -> Iterator[str]:
    """A peer that answers each connection's header and open with its own, and a close naming
    amqp:unauthorized-access, written at once (as a peer refusing a connection does)."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    refusal = frame(
        Close(error=Error(condition=symbol("amqp:unauthorized-access"), description="not on the guest list"))
    )

    listener.settimeout(0.1)
    done = threading.Event()

    def serve() -> None:
        while not done.is_set():
            try:
                peer, _ = listener.accept()
            except TimeoutError:
                continue
            with peer:
                peer.settimeout(TIMEOUT)
                try:
                    peer.recv(65536)  # its header (and its open, once it had ours)
                    peer.sendall(AMQP_HEADER + frame(Open(container_id="refuser")) + refusal)
                    while peer.recv(65536):
                        pass  # until the client closes
                except OSError:
                    pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"amqp://127.0.0.1:{port}"
    finally:
        done.set()
        thread.join(TIMEOUT)
        listener.close()


async def test_connect_raises_the_refusal_that_comes_with_the_peers_open(
    refuser: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="amqp_async")
    with anyio.fail_after(TIMEOUT), pytest.raises(amqp_async.ConnectionClosed) as raised:
        async with amqp_async.connect(refuser, reconnect=False, sasl_enabled=False):
            pass  # pragma: no cover - only reached when the test fails
    assert raised.value.condition == "amqp:unauthorized-access"
    assert "not on the guest list" in str(raised.value)
    # raised to the caller: not also a warning in the log
    assert [record.getMessage() for record in caplog.records if record.levelno >= logging.WARNING] == []


async def test_connect_raises_the_brokers_refusal_past_max_connections() -> None:
    with anyio.fail_after(TIMEOUT):
        async with Broker(port=0, max_connections=1) as broker, amqp_async.connect(broker.url) as first:
            with pytest.raises(amqp_async.ConnectionClosed) as raised:
                await amqp_async.connect(broker.url, reconnect=False)
            assert raised.value.condition == "amqp:resource-limit-exceeded"
            assert "at most 1 connections" in str(raised.value)
            sender = await first.open_sender("q")  # the connection in its place goes on
            await sender.send(amqp_async.Message(body="still served"))
