"""``Session.close()`` writes its senders' backlog before it ends the session, as ``Sender.close()`` and
``Connection.close()`` do, within one close bound.

``submit()`` hands a message to the engine once the link has credit; past the peer's incoming window (§2.5.6) its
transfer waits in the engine. A session's end dropped those transfers at once: on a slow peer that was reading,
at-most-once messages were lost without a word (4 of 12 arrived) and at-least-once ones failed. Now the close waits
for the peer's window to take them, then ends the session, the backlog and the peer's end under one bound
(``CLOSE_TIMEOUT``); a cancelled close ends the session at once.

The peers are python-qpid-proton with a session window of four frames: one that reads and accepts what comes, one
that reads nothing and answers no end.
"""

from __future__ import annotations

import threading
from typing import Any

import anyio
import pytest

import amqp_async
from amqp_async import ClosedByApplication, DeliveryInDoubt, Message
from amqp_async.errors import CLOSED_BY_APPLICATION

pytest.importorskip("proton", reason="python-qpid-proton is a test dependency (the independent peer)")
from proton import Delivery
from proton_peer import proton_server
from shut_window_peer import CLOSE_BOUND, ONE_FRAME, WINDOW_FRAMES, ShutWindowPeer, results_of, shorten_close_bounds

pytestmark = pytest.mark.anyio

TIMEOUT = 60.0


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(autouse=True)
def _short_close_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    shorten_close_bounds(monkeypatch)


class _Peer(ShutWindowPeer):
    """:class:`ShutWindowPeer`, but ``reading``: reads, accepts and settles every message (its window reopens as it
    reads) and answers an end; else reads nothing and answers no end (``ended`` is set when one comes)."""

    def __init__(self, *, reading: bool) -> None:
        super().__init__(answer_end=reading)
        self.reading = reading
        self.received = 0
        self.ended = threading.Event()

    def on_session_remote_close(self, event: Any) -> None:
        self.ended.set()
        super().on_session_remote_close(event)

    def on_delivery(self, event: Any) -> None:
        delivery = event.delivery
        if not self.reading or delivery.partial:
            return
        event.link.recv(delivery.pending)
        delivery.update(Delivery.ACCEPTED)
        delivery.settle()
        self.received += 1


async def test_at_most_once_messages_waiting_for_the_window_are_written_before_the_end() -> None:
    peer = _Peer(reading=True)
    with proton_server(peer) as url, anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(url, reconnect=False) as conn:
            session = await conn.open_session()
            sender = await session.open_sender("slow", delivery="at-most-once")
            for _ in range(12):  # the first four fill the peer's window; the rest wait for it to read them
                await sender.submit(Message(body=ONE_FRAME))
            await session.close()
            assert session.is_closed
            while peer.received < 12:  # before: 4 (the end dropped the other eight, without a word)
                await anyio.sleep(0.05)


async def test_confirmed_messages_waiting_for_the_window_are_written_before_the_end() -> None:
    peer = _Peer(reading=True)
    with proton_server(peer) as url, anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(url, reconnect=False) as conn:
            session = await conn.open_session()
            sender = await session.open_sender("slow")
            trackers = [await sender.submit(Message(body=ONE_FRAME)) for _ in range(12)]
            await session.close()
            results = await results_of(trackers)
    # all written (the peer reads what came before our end: its outcomes for the last ones may not come after it)
    assert peer.received == 12
    assert not any(isinstance(result, ClosedByApplication) for result in results), results  # before: 8 never sent


async def test_one_bound_for_the_backlog_and_the_peers_end() -> None:
    peer = _Peer(reading=False)
    with proton_server(peer) as url, anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(url, reconnect=False) as conn:
            session = await conn.open_session()
            sender = await session.open_sender("stalled")
            trackers = [await sender.submit(Message(body=ONE_FRAME)) for _ in range(12)]
            started = anyio.current_time()
            await session.close()
            took = anyio.current_time() - started
            results = await results_of(trackers)
    # the backlog waited for the bound, and the peer's end (never coming) for what was left of it: not twice
    assert CLOSE_BOUND * 0.9 <= took < 2 * CLOSE_BOUND, took  # one bound for both waits, not one each
    assert peer.ended.is_set()
    assert all(isinstance(result, DeliveryInDoubt) for result in results[:WINDOW_FRAMES]), results
    for unwritten in results[WINDOW_FRAMES:]:
        assert isinstance(unwritten, ClosedByApplication) and unwritten.condition == CLOSED_BY_APPLICATION
        assert "never sent" in str(unwritten)


async def test_a_cancelled_close_ends_the_session_at_once() -> None:
    peer = _Peer(reading=False)
    with proton_server(peer) as url, anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(url, reconnect=False) as conn:
            session = await conn.open_session()
            sender = await session.open_sender("stalled")
            trackers = [await sender.submit(Message(body=ONE_FRAME)) for _ in range(12)]
            with anyio.CancelScope() as scope:
                async with anyio.create_task_group() as group:
                    group.start_soon(session.close)
                    while not session._closing:  # the close waits for the peer's window now
                        await anyio.sleep(0.01)
                    scope.cancel()
            results = await results_of(trackers[WINDOW_FRAMES:])
            while not peer.ended.is_set():  # the end went out all the same
                await anyio.sleep(0.05)
    for unwritten in results:
        assert isinstance(unwritten, ClosedByApplication) and "never sent" in str(unwritten), repr(unwritten)
