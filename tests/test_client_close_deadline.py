"""A sender's close is one bound (``CLOSE_TIMEOUT``, 10 s), its backlog and the peer's detach sharing it.

A close writes the transfers still waiting for the peer's session window first, then waits for the peer's detach.
Each wait had its own 10 s: on a peer that stopped opening its session window (it reads nothing more) and did not
answer the detach, ``Sender.close()`` took 20 s, twice the documented bound. The peer is python-qpid-proton with a
session window of four frames that reads no transfer and answers no detach; the test shrinks the bound.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

import amqp_async
from amqp_async import Message
from amqp_async.client import _links

pytest.importorskip("proton", reason="python-qpid-proton is a test dependency (the independent peer)")
from proton_peer import proton_server

pytestmark = pytest.mark.anyio

BOUND = 2.0  # the close bound the test sets (the default is 10 s)


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


class _Stalled:
    """A proton handler that opens what the client opens, gives credit, then reads no transfer (its session
    window of four frames stays shut once full) and answers no detach."""

    def on_connection_remote_open(self, event: Any) -> None:
        event.connection.open()

    def on_connection_remote_close(self, event: Any) -> None:
        event.connection.close()

    def on_session_remote_open(self, event: Any) -> None:
        event.session.incoming_capacity = 4 * 32768
        event.session.open()

    def on_link_remote_open(self, event: Any) -> None:
        event.link.open()
        event.link.flow(100)


async def test_a_sender_close_on_a_stalled_peer_takes_one_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_links, "CLOSE_TIMEOUT", BOUND, raising=False)
    with proton_server(_Stalled()) as url, anyio.fail_after(60):
        async with amqp_async.connect(url, reconnect=False) as conn:
            sender = await conn.open_sender("stalled")
            for _ in range(20):  # 20 x 64 KiB: most of it waits for a window that does not open
                await sender.submit(Message(body=b"x" * 65536))
            started = anyio.current_time()
            await sender.close()
            elapsed = anyio.current_time() - started
            assert sender.is_closed
            # before: 2 x 10 s (the backlog's wait, then the detach's), whatever the constant
            assert BOUND - 0.5 <= elapsed < BOUND + 4.0
