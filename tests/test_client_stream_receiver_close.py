"""Closing a stream receiver that has a session of its own (``conn.open_stream_receiver``) takes one wait for the
peer, as any link's ``close()`` does (docs/client.md, "Defaults and their bounds": 10 s), not two.

The peer is python-qpid-proton with a handler that answers the session's end but never the link's detach (the
same holds for a peer that answers neither: the close then takes one close timeout, not two). Before, the close
sent the detach, waited up to 10 s for its answer, and only then sent the end: 10 s here, 20 s on a silent peer.
Now the detach and the end go out together, and the close returns once the end is answered.
"""

from __future__ import annotations

import threading
from typing import Any

import anyio
import pytest

pytest.importorskip("proton", reason="python-qpid-proton is the peer; the test dependency group has it")
from proton import Handler

import amqp_async

try:
    from proton_peer import proton_server
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.proton_peer import proton_server

pytestmark = [pytest.mark.interop, pytest.mark.anyio]

#: Well under the 10 s a link's close waits for a detach that never comes.
TIMEOUT = 6.0


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


class _AnswersEndsNotDetaches(Handler):
    """Opens the connection, sessions and links; never answers a detach; answers an end. Records the order in
    which the detach and the end came."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []
        self.ended = threading.Event()

    def on_connection_remote_open(self, event: Any) -> None:
        event.connection.open()

    def on_connection_remote_close(self, event: Any) -> None:
        event.connection.close()

    def on_session_remote_open(self, event: Any) -> None:
        event.session.open()

    def on_link_remote_open(self, event: Any) -> None:
        link = event.link
        link.source.copy(link.remote_source)
        link.target.copy(link.remote_target)
        link.open()

    def on_link_remote_close(self, event: Any) -> None:
        self.seen.append("detach")

    def on_session_remote_close(self, event: Any) -> None:
        self.seen.append("end")
        event.session.close()
        self.ended.set()


async def test_a_stream_receivers_close_sends_the_end_without_waiting_for_the_detachs_answer() -> None:
    handler = _AnswersEndsNotDetaches()
    with proton_server(handler) as url:
        async with amqp_async.connect(url) as conn:
            receiver = await conn.open_stream_receiver("big-files")
            with anyio.fail_after(TIMEOUT):
                await receiver.close()
            assert receiver.is_closed
            assert handler.ended.is_set()
            assert handler.seen == ["detach", "end"]
            with pytest.raises(amqp_async.ClosedByApplication):
                await receiver.receive()


async def test_a_cancelled_stream_receiver_close_still_sends_the_detach_and_the_end() -> None:
    handler = _AnswersEndsNotDetaches()
    with proton_server(handler) as url:
        async with amqp_async.connect(url) as conn:
            receiver = await conn.open_stream_receiver("big-files")
            with anyio.CancelScope() as scope:
                scope.cancel()
                await receiver.close()
            with anyio.fail_after(TIMEOUT):
                while not handler.ended.is_set():
                    await anyio.sleep(0.01)
            assert handler.seen == ["detach", "end"]
