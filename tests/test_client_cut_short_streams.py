"""A streamed message cut mid-body, by any ending, was never delivered: ``DeliveryAborted``, never "in doubt".

A stream sender writes a message's body in transfer frames, ``more`` set on all but the last (§2.6.14); past the
peer's incoming window (§2.5.6) the rest wait in the engine. Cut after its first frames (our close of the sender,
its session or the connection; the peer's detach, end or close; the transport's loss, with or without reconnect),
the message never reaches its receiver whole: no frame of the link follows its end (§2.6.4), and the receiver drops
what it got of it. Before, each ending said something else: a confirmed message waiting for its last frames failed
with ``DeliveryInDoubt`` (as if it might have arrived), one between two writes with the bare error of what ended it
(its description silent about the message), an at-most-once one's ``complete()`` returned None while its last
frames still waited, and the ending dropped them with a warning only. Now every one of them raises
``DeliveryAborted`` (``amqp-async:delivery-aborted``), what ended it as its ``__cause__``, its description saying
it was never delivered whole and may be sent again.

The peer is python-qpid-proton with a session window of four frames that reads no transfer, and records the
deliveries it got whole: never the one cut.
"""

from __future__ import annotations

import gc
from typing import Any

import anyio
import anyio.abc
import pytest

import amqp_async
from amqp_async import (
    Backoff,
    ClosedByApplication,
    ConnectionClosed,
    ConnectionLost,
    DeliveryAborted,
    LinkError,
    SessionError,
)

pytest.importorskip("proton", reason="python-qpid-proton is a test dependency (the independent peer)")
from proton_peer import proton_server
from shut_window_peer import EndsOnCue, ShutWindowPeer, cuttable_relay, shorten_close_bounds

pytestmark = pytest.mark.anyio

TIMEOUT = 60.0
#: seven frames of proton's 32 KiB: four fill the peer's window, the rest wait in the engine
BODY = b"a" * 200_000

ENDINGS = [
    ("close-sender", ClosedByApplication),
    ("close-session", ClosedByApplication),
    ("close-connection", ClosedByApplication),
    ("peer-detach", LinkError),  # (a detach with an error: LinkDetached is one without)
    ("peer-end", SessionError),
    ("peer-close", ConnectionClosed),
    ("transport-lost", ConnectionLost),
    ("transport-lost-reconnect", ConnectionLost),
]


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(autouse=True)
def _short_close_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    shorten_close_bounds(monkeypatch)


async def _end(ending: str, handler: EndsOnCue, conn: Any, sender: Any, cut: anyio.Event) -> None:
    """End what ``ending`` names, while the stream's last frames wait for the peer's window."""
    if ending == "close-sender":
        await sender.close()  # the window stays shut for the close's bound (2 s): then the detach drops them
    elif ending == "close-session":
        await sender.session.close()
    elif ending == "close-connection":
        await conn.close()
    elif ending.startswith("transport-lost"):
        cut.set()
    else:
        handler.cue.set()


def _assert_cut_short(raised: BaseException | None, cause: type[BaseException]) -> None:
    assert isinstance(raised, DeliveryAborted), repr(raised)  # before: DeliveryInDoubt, or the ending's error
    assert raised.condition == "amqp-async:delivery-aborted"
    assert "never delivered whole" in str(raised) and "may be sent again" in str(raised)
    assert isinstance(raised.__cause__, cause), repr(raised.__cause__)


def _reconnect(ending: str) -> Any:
    return Backoff(initial=0.1, maximum=0.5, max_time=30) if ending.endswith("-reconnect") else False


@pytest.mark.parametrize(("ending", "cause"), ENDINGS)
async def test_a_confirmed_stream_whose_last_frames_wait_is_aborted_by_any_ending(
    ending: str, cause: type[BaseException]
) -> None:
    handler = EndsOnCue(ending, answer_detach=not ending.startswith("transport-lost"))
    raised: BaseException | None = None
    with proton_server(handler) as url, anyio.fail_after(TIMEOUT):
        relay = cuttable_relay(url, reconnects_pass=True)
        async with relay as (relayed, cut), amqp_async.connect(relayed, reconnect=_reconnect(ending)) as conn:
            sender = await conn.open_stream_sender("stalled", buffer_size=1 << 20)
            session = sender._engine_link.session

            async def send() -> None:
                nonlocal raised
                try:
                    await sender.send_stream(BODY)  # all handed over: it waits for the outcome
                except Exception as exc:
                    raised = exc

            async with anyio.create_task_group() as group:
                group.start_soon(send)
                while not session.has_backlog:  # four frames written, the rest wait
                    await anyio.sleep(0.01)
                await _end(ending, handler, conn, sender, cut)
    _assert_cut_short(raised, cause)
    assert not handler.whole  # the peer never got it whole


@pytest.mark.parametrize(("ending", "cause"), ENDINGS)
async def test_an_at_most_once_stream_cut_between_two_writes_raises_at_the_next(
    ending: str, cause: type[BaseException]
) -> None:
    handler = EndsOnCue(ending, answer_detach=not ending.startswith("transport-lost"))
    with proton_server(handler) as url, anyio.fail_after(TIMEOUT):
        relay = cuttable_relay(url, reconnects_pass=True)
        async with relay as (relayed, cut), amqp_async.connect(relayed, reconnect=_reconnect(ending)) as conn:
            sender = await conn.open_stream_sender("stalled", buffer_size=1 << 20, delivery="at-most-once")
            stream = await sender.open_stream()
            await stream.write(BODY)  # four frames written, the rest wait
            assert stream.tracker is not None and stream.tracker.delivery is not None
            await _end(ending, handler, conn, sender, cut)
            with pytest.raises(DeliveryAborted) as caught:
                while True:  # (a peer's ending or a loss is seen once its frame or the socket's end is read)
                    await stream.write(b"more")
                    await anyio.sleep(0.02)
            assert stream.abort() is None  # over: nothing to abort
    _assert_cut_short(caught.value, cause)
    assert not handler.whole


@pytest.mark.parametrize(("ending", "cause"), [("peer-detach", LinkError), ("close-sender", ClosedByApplication)])
async def test_an_at_most_once_stream_completes_once_its_last_frame_is_written(
    ending: str, cause: type[BaseException]
) -> None:
    """complete() returned once the last frame was handed to the engine, while it waited for the peer's window, and
    the ending then dropped it with a warning only: now it waits for the last frame, and raises when it is cut."""
    handler = EndsOnCue(ending, answer_detach=not ending.startswith("transport-lost"))
    raised: BaseException | None = None
    returned = False
    with proton_server(handler) as url, anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(url, reconnect=False) as conn:
            sender = await conn.open_stream_sender("stalled", buffer_size=1 << 20, delivery="at-most-once")
            session = sender._engine_link.session

            async def send() -> None:
                nonlocal raised, returned
                try:
                    await sender.send_stream(BODY)
                except Exception as exc:
                    raised = exc
                else:
                    returned = True

            async with anyio.create_task_group() as group:
                group.start_soon(send)
                while not session.has_backlog:
                    await anyio.sleep(0.01)
                await anyio.sleep(0.3)
                assert not returned  # before: returned, its last frames waiting
                await _end(ending, handler, conn, sender, anyio.Event())
    _assert_cut_short(raised, cause)
    assert not handler.whole


async def test_an_at_most_once_stream_left_open_and_forgotten_still_frees_its_sender() -> None:
    """The sender keeps its at-most-once streams not yet written whole, for an ending to fail them: weakly, so that
    one left open and forgotten is still collected, aborted, and gives the sender back."""
    with proton_server(ShutWindowPeer()) as url, anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(url, reconnect=False) as conn:
            sender = await conn.open_stream_sender("stalled", delivery="at-most-once")

            async def forget() -> None:
                stream = await sender.open_stream()
                await stream.write(b"x" * 40_000)  # more than a frame: its delivery begun
                assert stream.tracker is not None

            with pytest.warns(ResourceWarning, match="left open"):
                await forget()
                gc.collect()
            assert not sender._settled_streams
            async with sender.open_stream() as stream:  # the sender is free again
                await stream.write(b"next")
