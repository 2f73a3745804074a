"""A clean close writes the transfers the engine still holds for the peer's session window first.

``submit()`` takes a message and returns once it is on its way; past the peer's incoming window (§2.5.6) its
transfer waits in the engine until the peer's flow opens the window again. A close (of the connection, or of the
sender: §2.6.4, nothing of a link goes after its detach) dropped what waited: at-most-once messages were lost
without a word (``amqp-async send --delivery at-most-once`` reported 20,000 sent; the broker had 19,456). Now the
close waits (at most its timeout) until they are written.

The peer is python-qpid-proton with a session window of four frames and credit for every message: all but four
of the messages wait in our engine when the close comes (before: 4 of 2,000 arrived).
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

import amqp_async
from amqp_async import Message

pytest.importorskip("proton", reason="python-qpid-proton is a test dependency (the independent peer)")
from proton.handlers import MessagingHandler
from proton_peer import proton_server

pytestmark = pytest.mark.anyio

MESSAGES = 2_000
TIMEOUT = 30.0


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


class _SmallWindow(MessagingHandler):  # type: ignore[misc]
    """Credit for every message, a session window of four frames (its capacity over its 32 KiB frames)."""

    def __init__(self) -> None:
        super().__init__(prefetch=MESSAGES)
        self.bodies: list[Any] = []

    def on_session_opening(self, event: Any) -> None:
        event.session.incoming_capacity = 4 * 32768
        event.session.open()

    def on_message(self, event: Any) -> None:
        self.bodies.append(event.message.body)


@pytest.mark.parametrize("close_sender", [False, True], ids=["connection-close", "sender-close"])
async def test_at_most_once_messages_submitted_before_a_close_all_arrive(close_sender: bool) -> None:
    peer = _SmallWindow()
    with proton_server(peer) as url, anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(url, reconnect=False) as conn:
            sender = await conn.open_sender("backlog", delivery="at-most-once")
            for number in range(MESSAGES):
                await sender.submit(Message(body=number))
            if close_sender:
                await sender.close()
        while len(peer.bodies) < MESSAGES:  # (the peer's thread may still be reading)
            await anyio.sleep(0.01)
    assert peer.bodies == list(range(MESSAGES))  # before: 4
