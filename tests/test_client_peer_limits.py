"""Opening more sessions than the peer's channel-max (§2.7.1) or more links than a session's handle-max (§2.7.2).

Each such open raises the awaitable API's own error, a :class:`~amqp_async.SessionError` or
:class:`~amqp_async.LinkError` with the condition ``amqp:resource-limit-exceeded``; it used to raise the engine's
internal ``LocalProtocolError``, which no ``except SessionError`` or ``except LinkError`` caught. Nothing else
changes: the connection and its other endpoints go on working, and a handle freed by a close is used again.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import pytest

import amqp_async
from amqp_async.broker import Broker

proton_handlers = pytest.importorskip("proton.handlers", reason="python-qpid-proton is the reference peer")
try:  # after the importorskip that explains proton's absence
    from proton_peer import proton_server
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.proton_peer import proton_server

pytestmark = pytest.mark.anyio

LIMIT_EXCEEDED = "amqp:resource-limit-exceeded"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class _OneChannelServer(proton_handlers.MessagingHandler):  # type: ignore[misc]
    """A python-qpid-proton server whose connections have one channel (channel-max 0) and accept every message."""

    def on_connection_init(self, event: Any) -> None:
        event.transport.channel_max = 0


@pytest.fixture
def one_channel_server() -> Iterator[str]:
    with proton_server(_OneChannelServer()) as url:
        yield url


async def test_a_session_past_the_peers_channel_max_is_a_session_error(one_channel_server: str) -> None:
    with anyio.fail_after(15):
        async with amqp_async.connect(one_channel_server) as conn:
            session = await conn.open_session()
            with pytest.raises(amqp_async.SessionError) as caught:
                await conn.open_session()
            assert caught.value.condition == LIMIT_EXCEEDED
            assert "channel-max is 0" in str(caught.value)
            sender = await session.open_sender("q")
            assert await sender.send(amqp_async.Message(body="still works")) == amqp_async.Accepted()
            assert conn.state is amqp_async.ConnectionState.OPEN


async def test_a_link_past_the_sessions_handle_max_is_a_link_error() -> None:
    with anyio.fail_after(15):
        async with Broker(port=0) as broker, amqp_async.connect(broker.url) as conn:
            session = await conn.open_session(handle_max=0)
            first = await session.open_sender("q")
            for open_link in (
                lambda: session.open_sender("q"),
                lambda: session.open_receiver("q"),
                lambda: session.open_stream_sender("q"),
                lambda: session.open_stream_receiver("q"),
            ):
                with pytest.raises(amqp_async.LinkError) as caught:
                    await open_link()
                assert caught.value.condition == LIMIT_EXCEEDED
            await first.close()
            again = await session.open_sender("q")  # the handle the close freed
            assert await again.send(amqp_async.Message(body="x")) == amqp_async.Accepted()
