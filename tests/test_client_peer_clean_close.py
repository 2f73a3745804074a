"""A peer's close frame without an error (§2.4.3) is its decision, as one with an error: every waiter raises
``ConnectionClosed`` (condition ``amqp:connection:forced``, as a detach without an error is
``amqp:link:detach-forced``), it is not retried, and ``connect()`` raises it when the close comes with the open.

Before, the waiters raised ``ConnectionLost`` (``amqp-async:io``, "connection ... ended"): a network failure, which
it was not; and ``connect()`` returned a connection the peer had already closed.

The peer: python-qpid-proton's Container over TCP (its ``Connection.close()`` without a condition sends a close
frame without an error).
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

import amqp_async
from amqp_async import ConnectionClosed, ConnectionState, Message

try:
    from proton_peer import proton_server
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.proton_peer import proton_server

pytestmark = pytest.mark.anyio

TIMEOUT = 15.0
FORCED = "amqp:connection:forced"


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    if request.param == "trio":
        pytest.importorskip("trio", reason="trio is in the test dependency group")
    return str(request.param)


class ClosesWithoutError:
    """Opens what we open (no credit for our senders); closes the connection, without an error, when a receiver
    link to "close-now" attaches (our sender to it), or at once with its open when ``at_open``."""

    def __init__(self, *, at_open: bool = False) -> None:
        self.at_open = at_open
        self.connections = 0

    def on_connection_remote_open(self, event: Any) -> None:
        self.connections += 1
        event.connection.open()
        if self.at_open:
            event.connection.close()

    def on_session_remote_open(self, event: Any) -> None:
        event.session.open()

    def on_link_remote_open(self, event: Any) -> None:
        link = event.link
        link.source.copy(link.remote_source)
        link.target.copy(link.remote_target)
        link.open()
        if link.is_receiver and link.remote_target.address == "close-now":
            event.connection.close()

    def on_connection_remote_close(self, event: Any) -> None:
        event.connection.close()


async def test_the_waiters_of_a_peers_close_without_error_raise_connection_closed() -> None:
    peer = ClosesWithoutError()
    outcomes: dict[str, BaseException] = {}

    async def waits(name: str, call: Any) -> None:
        try:
            await call()
        except Exception as exc:
            outcomes[name] = exc

    with anyio.fail_after(TIMEOUT), proton_server(peer) as url:
        conn = await amqp_async.connect(url)  # reconnect on: the default
        sender = await conn.open_sender("q")  # no credit: its send waits
        receiver = await conn.open_receiver("q")
        async with anyio.create_task_group() as tg:
            tg.start_soon(waits, "send", lambda: sender.send(Message(body=1)))
            tg.start_soon(waits, "receive", receiver.receive)
            await anyio.sleep(0.2)
            tg.start_soon(waits, "open", lambda: conn.open_sender("close-now"))
        assert set(outcomes) == {"send", "receive", "open"}
        for error in outcomes.values():
            assert type(error) is ConnectionClosed
            assert error.condition == FORCED
            assert str(error).startswith(f"{FORCED}: {url} closed the connection")
        assert conn.state is ConnectionState.FAILED  # not retried: a close frame is the peer's decision
        assert peer.connections == 1
        await conn.close()


async def test_connect_raises_connection_closed_when_the_peer_closes_with_its_open() -> None:
    with anyio.fail_after(TIMEOUT), proton_server(ClosesWithoutError(at_open=True)) as url:
        with pytest.raises(ConnectionClosed) as caught:
            await amqp_async.connect(url)
        assert caught.value.condition == FORCED
