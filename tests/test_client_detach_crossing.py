"""Transfers that cross our detach still take their delivery-ids (§2.7.5: a session numbers its deliveries in
order; §2.6.4: the peer sends until it reads our detach).

The engine dropped such a frame before the link took its delivery-id, so the next transfer on any link of the
session read as out of sequence and the session ended with ``amqp:invalid-field``: closing a prefetching receiver
while the peer still sent to it failed every sender and receiver on the session (the connection's default session,
for most programs). Peers: a python-qpid-proton source that answers a flow after a pause (our detach crosses its
transfers, every time), and the embedded broker streaming to receivers closed mid-stream.
"""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest

import amqp_async
from amqp_async import Message

pytest.importorskip("proton", reason="python-qpid-proton is a test dependency (the independent peer)")
from broker_serving import serving
from proton import Message as ProtonMessage
from proton.handlers import MessagingHandler
from proton_peer import proton_server

pytestmark = pytest.mark.anyio

TIMEOUT = 20.0


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


class _SlowSource(MessagingHandler):  # type: ignore[misc]
    """Sends as much as the credit allows, after a pause: a busy peer, whose transfers cross our detach."""

    def __init__(self) -> None:
        super().__init__()
        self.sent = 0

    def on_sendable(self, event: Any) -> None:
        time.sleep(0.2)
        sender = event.sender
        while sender.credit:
            self.sent += 1
            sender.send(ProtonMessage(body=self.sent))


async def test_transfers_crossing_our_detach_leave_the_sessions_other_links_working() -> None:
    with proton_server(_SlowSource()) as url, anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(url, reconnect=False) as conn:
            other = await conn.open_receiver("other", credit=0)  # another link of the same (default) session
            other.add_credit(1)
            await (await other.receive()).accept()  # the session's delivery-ids have started
            closed = await conn.open_receiver("source", credit=0)
            closed.add_credit(3)
            await anyio.sleep(0.05)  # the flow is written; the peer answers it after its pause
            await closed.close()  # our detach crosses the peer's three transfers
            other.add_credit(1)
            delivery = await other.receive()  # before: SessionError, amqp:invalid-field (delivery-id out of order)
            await delivery.accept()
            assert not conn.is_closed


async def test_receivers_closed_while_the_broker_streams_to_them_leave_the_session_working() -> None:
    async with serving() as broker, amqp_async.connect(broker.url) as conn:
        with anyio.fail_after(TIMEOUT):
            sender = await conn.open_sender("streamed")
            await sender.send_many([Message(body=b"x" * 2000) for _ in range(5000)])
            for _ in range(10):
                receiver = await conn.open_receiver("streamed", credit=500)
                await (await receiver.receive()).accept()
                await receiver.close()  # the broker is still sending the rest of the credit
                await sender.send(Message(body="still working"))  # before: SessionError after a round or two
