"""A long-lived connection does not keep the links and sessions it has closed.

A connection keeps its open sessions, and a session its open links, to attach them again after a reconnect. The
closed ones used to stay in those lists for the connection's life: a service that opened a link per request (a
reply receiver, say) grew by one link object and its deliveries each time. The peer is the embedded broker.
"""

from __future__ import annotations

import gc
import weakref

import anyio
import pytest

import amqp_async
from amqp_async.broker import Broker
from amqp_async.client._open_endpoints import PRUNE_FROM

pytestmark = pytest.mark.anyio

CYCLES = 300


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def churn(conn: amqp_async.Connection, closed: list[weakref.ref[object]]) -> None:
    """Open, use and close a sender, a receiver and a session, ``CYCLES`` times; keep weak references to them."""
    for index in range(CYCLES):
        sender = await conn.open_sender("q")
        await sender.send(amqp_async.Message(body=index))
        await sender.close()
        receiver = await conn.open_receiver("q", credit=1)
        delivery = await receiver.receive()
        await delivery.accept()
        await receiver.close()
        session = await conn.open_session()
        await session.close()
        closed += [weakref.ref(sender), weakref.ref(receiver), weakref.ref(session)]


async def test_closed_links_and_sessions_are_let_go() -> None:
    async with Broker(port=0) as broker, amqp_async.connect(broker.url) as conn:
        kept_sender = await conn.open_sender("kept")
        kept_session = await conn.open_session()
        kept_receiver = await kept_session.open_receiver("kept")
        closed: list[weakref.ref[object]] = []
        with anyio.fail_after(60):
            await churn(conn, closed)
        gc.collect()
        alive = sum(ref() is not None for ref in closed)
        # Dropped as the lists double: at most the last stretch of each is still held.
        assert alive <= 2 * PRUNE_FROM + 2, f"{alive} of {len(closed)} closed endpoints are still held"
        # What is open goes on working, on the same connection.
        await kept_sender.send(amqp_async.Message(body="after"))
        with anyio.fail_after(10):
            assert (await kept_receiver.receive()).message.body == "after"


async def test_closed_state_change_streams_are_let_go_on_a_connection_whose_state_does_not_change() -> None:
    """A stream of ``state_changes()`` closed by the application was forgotten only at the connection's next state
    change: on a healthy connection, 40,000 of them held 48 MB."""
    async with Broker(port=0) as broker, amqp_async.connect(broker.url) as conn:
        kept = conn.state_changes()
        for _ in range(3_000):
            async with conn.state_changes():
                pass
        gc.collect()
        subscribers = conn._publisher._subscribers
        assert len(subscribers) <= 64, len(subscribers)  # before: 3,001
        await conn.close()
        async with kept:
            changes = [change async for change in kept]  # the one kept open still has its changes
        assert [change.state for change in changes] == [amqp_async.ConnectionState.CLOSED]
