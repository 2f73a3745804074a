"""The awaitable client against servers that misbehave (issue 15): every case ends in our own ``AMQPError``, in
bounded time, with nothing of the connection left running (no background task, no open socket); and the
reconnect policy retries network faults only, never a protocol violation, and gives up within its attempts.

The servers are scripts of `tests/scripted_server.py` (raw bytes on a real socket, on the test's loop). The
client runs without SASL unless a test says otherwise, so that a script needs only the AMQP header and an open.
What "no socket left" means here: the server sees the client close its side of every connection it made.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

import amqp_async
import amqp_async.io.driver

try:
    from frames import AMQP_HEADER, frame, raw_frame
    from scripted_server import Peer, ScriptedServer, client_tasks, open_then
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.frames import AMQP_HEADER, frame, raw_frame
    from tests.scripted_server import Peer, ScriptedServer, client_tasks, open_then

from amqp_async.codec.framing import SASL_HEADER
from amqp_async.codec.performatives import Close, Error

pytestmark = pytest.mark.anyio

TIMEOUT = 10.0
#: How long the server waits to see the client close its socket after the client's call has returned.
SOCKET_GRACE = 3.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def short_close_timeout(monkeypatch: pytest.MonkeyPatch) -> float:
    """The driver waits this long (instead of 10 s) for the answer to our close."""
    monkeypatch.setattr(amqp_async.io.driver, "CLOSE_TIMEOUT", 0.3)
    return 0.3


def fast_backoff(max_tries: int | None = None) -> amqp_async.Backoff:
    return amqp_async.Backoff(initial=0.01, maximum=0.05, jitter=0.0, max_tries=max_tries)


#: A frame whose body is no AMQP value (0xff is no constructor): the client must close with amqp:decode-error.
GARBAGE = raw_frame(b"\xff\x00\x00")


async def nothing_left(server: ScriptedServer) -> None:
    """The client's background tasks have ended and it closed every socket it opened."""
    assert await server.all_clients_closed(SOCKET_GRACE), "a client socket was left open"
    assert client_tasks() == []


async def wait_closed(conn: amqp_async.Connection) -> None:
    while not conn.is_closed:
        await anyio.sleep(0.01)


async def failure_as_it_opens(url: str, **options: Any) -> amqp_async.ConnectionError:
    """The error of a connection whose peer fails it as it opens: raised by ``connect()`` when it came with the
    peer's open (in the same read), else by the first use of the connection returned."""
    with pytest.raises(amqp_async.ConnectionError) as caught:
        conn = await amqp_async.connect(url, sasl_enabled=False, **options)
        await wait_closed(conn)
        await conn.open_sender("q")
    return caught.value


# ---------------------------------------------------------------------------------------------------------------
# Bounded time, nothing left running


async def test_a_close_the_peer_never_answers_ends_after_the_close_timeout(short_close_timeout: float) -> None:
    """§2.4.3: we wait a bounded time for the answer to our close, then close the socket ourselves."""
    async with ScriptedServer(open_then(), linger=True) as server:
        with anyio.fail_after(TIMEOUT):
            conn = await amqp_async.connect(server.url, sasl_enabled=False, reconnect=False)
            with anyio.fail_after(short_close_timeout + 3.0):
                await conn.close()
            assert conn.is_closed
            await nothing_left(server)


async def test_a_cancelled_close_drops_the_connection_at_once() -> None:
    """A caller that stops waiting for the close (default close timeout: 10 s) leaves nothing running."""
    async with ScriptedServer(open_then(), linger=True) as server:
        with anyio.fail_after(TIMEOUT):
            conn = await amqp_async.connect(server.url, sasl_enabled=False, reconnect=False)
            with anyio.move_on_after(0.2) as scope:
                await conn.close()
            assert scope.cancelled_caught
            await nothing_left(server)


@pytest.mark.parametrize("sasl", [False, True], ids=["amqp", "sasl"])
async def test_a_cancelled_connect_leaves_nothing_running(sasl: bool) -> None:
    """The peer accepts the socket and never opens: the caller's timeout ends the attempt, and the connection's
    task and socket with it."""

    async def silent(peer: Peer) -> None:
        await peer.wait_received(8, timeout=5.0)

    async with ScriptedServer(silent, linger=True) as server:
        with anyio.fail_after(TIMEOUT):
            with anyio.move_on_after(0.3) as scope:
                await amqp_async.connect(server.url, sasl_enabled=sasl, reconnect=False)
            assert scope.cancelled_caught
            await nothing_left(server)


@pytest.mark.parametrize(
    ("sent", "sasl"),
    [(b"", True), (b"AMQP", True), (SASL_HEADER, True), (AMQP_HEADER + frame(None), False)],
    ids=["nothing", "half-a-header", "sasl-header-only", "header-and-heartbeat"],
)
async def test_a_peer_that_never_opens_fails_connect_after_connect_timeout(sent: bytes, sasl: bool) -> None:
    async def stalls(peer: Peer) -> None:
        await peer.wait_received(8, timeout=5.0)
        await peer.send(sent)

    async with ScriptedServer(stalls, linger=True) as server:
        with anyio.fail_after(TIMEOUT):
            with pytest.raises(amqp_async.ConnectionError) as caught:
                await amqp_async.connect(server.url, sasl_enabled=sasl, reconnect=False, connect_timeout=0.3)
            assert caught.value.condition == "amqp:resource-limit-exceeded"
            assert "connect_timeout" in str(caught.value)
            await nothing_left(server)


async def test_a_peer_silent_after_its_open_is_declared_dead_by_the_heartbeat() -> None:
    async with ScriptedServer(open_then(), linger=True) as server:
        with anyio.fail_after(TIMEOUT):
            conn = await amqp_async.connect(server.url, sasl_enabled=False, reconnect=False, heartbeat=0.3)
            with pytest.raises(amqp_async.ConnectionError) as caught:
                await conn.open_sender("q")  # the attach is never answered
            assert caught.value.condition == "amqp:resource-limit-exceeded"
            await conn.close()
            await nothing_left(server)


async def test_a_protocol_violation_fails_the_waiters_with_its_condition() -> None:
    async def breaks_after_begin(peer: Peer) -> None:
        await open_then()(peer)
        await peer.wait_received(len(peer.received) + 1, timeout=5.0)  # the begin
        await peer.send(GARBAGE)

    async with ScriptedServer(breaks_after_begin, linger=True) as server:
        with anyio.fail_after(TIMEOUT):
            conn = await amqp_async.connect(server.url, sasl_enabled=False, reconnect=fast_backoff())
            with pytest.raises(amqp_async.ConnectionError) as caught:
                await conn.open_sender("q")
            assert caught.value.condition == "amqp:decode-error"
            await nothing_left(server)
            assert server.accepted == 1


# ---------------------------------------------------------------------------------------------------------------
# The reconnect policy: network faults only, within the Backoff's attempts


async def test_a_peer_breaking_the_protocol_on_every_connection_is_not_retried() -> None:
    """Each connection opens and then gets garbage: a protocol violation is final, even with reconnect on."""
    async with ScriptedServer(open_then(GARBAGE)) as server:
        with anyio.fail_after(TIMEOUT):
            error = await failure_as_it_opens(server.url, reconnect=fast_backoff())
            assert error.condition == "amqp:decode-error"
            await anyio.sleep(0.2)  # several backoff delays
            assert server.accepted == 1
            await nothing_left(server)


async def test_a_protocol_violation_after_a_reconnect_ends_the_reconnecting() -> None:
    """The first connection drops (a network fault: retried); the second breaks the protocol: the waiters get its
    condition and no third connection is made."""

    async def script(peer: Peer) -> None:
        await open_then(*([GARBAGE] if peer.index > 0 else []))(peer)

    async with ScriptedServer(script) as server:
        with anyio.fail_after(TIMEOUT):
            conn = await amqp_async.connect(server.url, sasl_enabled=False, reconnect=fast_backoff())
            await wait_closed(conn)
            with pytest.raises(amqp_async.ConnectionError) as caught:
                await conn.open_sender("q")
            assert caught.value.condition == "amqp:decode-error"
            await anyio.sleep(0.2)
            assert server.accepted == 2
            await nothing_left(server)


async def test_a_peer_that_drops_each_connection_after_its_open_exhausts_the_attempts() -> None:
    """Opening and dropping at once is a network fault, retried; but such a connection never counts as restored,
    so the Backoff goes on (it is not restarted by each open) and ``max_tries`` ends the reconnecting."""
    async with ScriptedServer(open_then()) as server:
        with anyio.fail_after(TIMEOUT):
            conn = await amqp_async.connect(server.url, sasl_enabled=False, reconnect=fast_backoff(max_tries=3))
            await wait_closed(conn)
            with pytest.raises(amqp_async.ConnectionError):
                await conn.open_sender("q")
            assert server.accepted == 4  # the first connection, then one per try
            await nothing_left(server)


async def test_a_close_frame_from_the_peer_is_final() -> None:
    close = frame(Close(error=Error(condition="amqp:connection:forced")))
    async with ScriptedServer(open_then(close)) as server:
        with anyio.fail_after(TIMEOUT):
            error = await failure_as_it_opens(server.url, reconnect=fast_backoff())
            assert error.condition == "amqp:connection:forced"
            await anyio.sleep(0.2)
            assert server.accepted == 1
            await nothing_left(server)
