"""A delivery the sender aborts (§2.6.14) is never handed out by a Receiver: ``receive()``, ``receive_nowait()``
and ``receive_many()`` skip it, as a StreamReceiver does.

The engine queues an aborted delivery (settled, without a message) for the layers that report it (the callback
API's ``on_aborted``); the Receiver handed it out as a message with no body (``async with`` accepted it, ``json()``
raised). The peer is a python-qpid-proton sender that streams part of a message, aborts it, then sends a whole one.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

import amqp_async

pytest.importorskip("proton", reason="python-qpid-proton is a test dependency (the independent peer)")
from proton import Message as ProtonMessage
from proton.handlers import MessagingHandler
from proton_peer import proton_server

pytestmark = pytest.mark.anyio

TIMEOUT = 20.0


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


class _Aborter(MessagingHandler):  # type: ignore[misc]
    """On each link: the first 200 KB of a message in frames, its abort a moment later, then a whole message."""

    def __init__(self) -> None:
        super().__init__()
        self.started: set[str] = set()

    def on_sendable(self, event: Any) -> None:
        sender = event.sender
        if sender.name in self.started:
            return
        self.started.add(sender.name)
        whole = ProtonMessage(body=b"x" * 400_000).encode()
        delivery = sender.delivery(b"aborted")
        sender.stream(whole[:200_000])
        self.pending = (sender, delivery)
        event.container.schedule(0.2, self)

    def on_timer_task(self, event: Any) -> None:
        sender, delivery = self.pending
        delivery.abort()
        sender.send(ProtonMessage(body="after the abort"))


@pytest.mark.parametrize("how", ["receive", "receive_nowait", "receive_many"])
async def test_an_aborted_delivery_is_not_handed_out(how: str) -> None:
    with proton_server(_Aborter()) as url, anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(url, reconnect=False) as conn:
            receiver = await conn.open_receiver("source")
            if how == "receive":
                delivery = await receiver.receive()
            elif how == "receive_many":
                [delivery] = await receiver.receive_many(1)
            else:
                while (found := receiver.receive_nowait()) is None:
                    await anyio.sleep(0.01)
                delivery = found
            assert not delivery.aborted
            assert delivery.message.body == "after the abort"  # before: the aborted one, without a body
            await delivery.accept()
            assert receiver.receive_nowait() is None
