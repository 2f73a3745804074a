"""An at-most-once message of several frames is sent once its LAST frame is written, not its first.

A message larger than the peer's max-frame-size goes in several transfer frames, ``more`` set on all but the last
(§2.6.14); past the peer's incoming window (§2.5.6) the rest wait in the engine. ``send()`` on an at-most-once
sender returned once the first frame was written: an ending then (our close, the peer's detach, end or close, the
transport's loss) dropped the rest, and only a warning said so, while the caller believed it sent. The message
never reached its receiver: it drops what it got of a message it never got whole, and no frame of a link follows
its end (§2.6.4). Now ``send()`` (and ``send_many()``) returns once the last frame is written, and raises the error
of what ended it, "never sent whole", when an ending drops the rest first.

The peer is python-qpid-proton with a session window of four frames that reads no transfer: of two messages of
three frames each (64 KiB in proton's 32 KiB frames), the first is written whole, the second's first frame only.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

import amqp_async
from amqp_async import ClosedByApplication, ConnectionClosed, LinkError, Message, SendManyError, SessionError
from amqp_async.errors import CLOSED_BY_APPLICATION

pytest.importorskip("proton", reason="python-qpid-proton is a test dependency (the independent peer)")
from proton_peer import proton_server
from shut_window_peer import ENDING_CONDITION, EndsOnCue, ShutWindowPeer, shorten_close_bounds

pytestmark = pytest.mark.anyio

TIMEOUT = 60.0
#: three frames each in proton's 32 KiB frames
THREE_FRAMES = b"x" * 65536


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(autouse=True)
def _short_close_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    shorten_close_bounds(monkeypatch)


async def _end(ending: str, handler: EndsOnCue, conn: Any, sender: Any) -> None:
    if ending == "close-sender":
        await sender.close()  # the window stays shut for the close's bound (2 s): then the detach drops the rest
    elif ending == "close-connection":
        await conn.close()
    else:
        handler.cue.set()


def _never_sent_whole(error: BaseException | None, kind: type[BaseException], condition: str) -> None:
    assert isinstance(error, kind), repr(error)  # before: send() had returned None
    assert error.condition == condition  # type: ignore[attr-defined]
    assert "never sent whole" in str(error) and "may be sent again" in str(error)


@pytest.mark.parametrize(
    ("ending", "kind", "condition"),
    [
        ("close-sender", ClosedByApplication, CLOSED_BY_APPLICATION),
        ("close-connection", ClosedByApplication, CLOSED_BY_APPLICATION),
        ("peer-detach", LinkError, ENDING_CONDITION),
        ("peer-end", SessionError, ENDING_CONDITION),
        ("peer-close", ConnectionClosed, ENDING_CONDITION),
    ],
)
async def test_an_at_most_once_send_returns_once_its_last_frame_is_written(
    ending: str, kind: type[BaseException], condition: str
) -> None:
    handler = EndsOnCue(ending)
    outcome: list[BaseException | None] = []
    with proton_server(handler) as url, anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(url, reconnect=False) as conn:
            sender = await conn.open_sender("stalled", delivery="at-most-once")
            assert await sender.send(Message(body=THREE_FRAMES)) is None  # three frames: the window takes them
            session = sender._engine_link.session

            async def second() -> None:
                try:
                    await sender.send(Message(body=THREE_FRAMES))
                except Exception as exc:
                    outcome.append(exc)
                else:
                    outcome.append(None)

            async with anyio.create_task_group() as group:
                group.start_soon(second)
                while not session.has_backlog:  # its first frame written, the other two wait
                    await anyio.sleep(0.01)
                [delivery] = session.backlogged_deliveries[:1]
                assert delivery.written and not delivery.written_whole
                await anyio.sleep(0.2)
                assert not outcome  # before: it had returned None once its first frame was written
                await _end(ending, handler, conn, sender)
    [error] = outcome
    _never_sent_whole(error, kind, condition)


async def test_an_at_most_once_send_many_waits_for_the_last_frames_too() -> None:
    caught: list[BaseException] = []
    handler = EndsOnCue("peer-detach")
    with proton_server(handler) as url, anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(url, reconnect=False) as conn:
            sender = await conn.open_sender("stalled", delivery="at-most-once")
            session = sender._engine_link.session

            async def send_all() -> None:
                try:
                    await sender.send_many([Message(body=THREE_FRAMES) for _ in range(2)])
                except amqp_async.AMQPError as exc:
                    caught.append(exc)

            async with anyio.create_task_group() as group:
                group.start_soon(send_all)
                while not session.has_backlog:
                    await anyio.sleep(0.01)
                await anyio.sleep(0.2)
                assert not caught
                handler.cue.set()
    [error] = caught  # before: send_many returned [None, None]
    assert isinstance(error, SendManyError), repr(error)
    assert error.results[0] is None
    _never_sent_whole(error.results[1], LinkError, ENDING_CONDITION)


async def test_a_multi_frame_at_most_once_send_with_the_window_open_returns_at_once() -> None:
    """The window open, every frame goes out as the message is handed over: nothing to wait for."""
    with proton_server(ShutWindowPeer()) as url, anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(url, reconnect=False) as conn:
            sender = await conn.open_sender("stalled", delivery="at-most-once")
            tracker = await sender.submit(Message(body=THREE_FRAMES))
            assert tracker.delivery is not None and tracker.delivery.written_whole
            assert await sender.send(Message(body=b"small")) is None  # (the fourth frame of the window)
