"""A message of several frames cut short after its first ones went out was never sent whole: not in doubt.

A message larger than the peer's max-frame-size goes in several transfer frames (§2.6.14: "additional data MAY be
transferred in additional transfer frames by setting the more flag on all but the last transfer frame"); past the
peer's incoming window (§2.5.6) the rest wait in the engine. When the link, its session or its connection ended
then (our close that timed out, the peer's detach, end or close, the transport's loss), the engine dropped the rest,
and the message failed with ``DeliveryInDoubt``, as if it might have arrived. It cannot have: no frame of the link
follows its detach (§2.6.4), this client never resumes a delivery (§2.6.13), and the receiver drops what it got of a
message it never got whole. Now it fails as the messages none of whose frames was written do: with the error of
what ended it, of the same kind and condition, its description saying it was never sent whole (it may be sent
again). A message written whole stays in doubt.

The peer is python-qpid-proton with a session window of four frames that reads no transfer: of three messages of
three frames each (64 KiB in proton's 32 KiB frames), the first is written whole, the second's first frame only,
the third not at all. The peer records the deliveries it got whole: never the second.
"""

from __future__ import annotations

import anyio
import anyio.abc
import pytest

import amqp_async
from amqp_async import (
    ClosedByApplication,
    ConnectionClosed,
    ConnectionLost,
    DeliveryInDoubt,
    LinkDetached,
    Message,
    SessionError,
)
from amqp_async.errors import CLOSED_BY_APPLICATION

pytest.importorskip("proton", reason="python-qpid-proton is a test dependency (the independent peer)")
from proton_peer import proton_server
from shut_window_peer import ENDING_CONDITION, EndsOnCue, cuttable_relay, results_of, shorten_close_bounds

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


@pytest.mark.parametrize(
    ("ending", "kind", "condition"),
    [
        ("close-sender", ClosedByApplication, CLOSED_BY_APPLICATION),
        ("close-session", ClosedByApplication, CLOSED_BY_APPLICATION),
        ("close-connection", ClosedByApplication, CLOSED_BY_APPLICATION),
        ("peer-detach", LinkDetached, ENDING_CONDITION),
        ("peer-end", SessionError, ENDING_CONDITION),
        ("peer-close", ConnectionClosed, ENDING_CONDITION),
        ("transport-lost", ConnectionLost, "amqp-async:io"),
    ],
)
async def test_a_message_cut_short_after_its_first_frame_fails_as_never_sent_whole(
    ending: str, kind: type[BaseException], condition: str
) -> None:
    handler = EndsOnCue(ending, answer_detach=ending != "transport-lost")
    with proton_server(handler) as url, anyio.fail_after(TIMEOUT):
        relay = cuttable_relay(url)
        async with relay as (relayed, cut), amqp_async.connect(relayed, reconnect=False) as conn:
            session = await conn.open_session()
            sender = await session.open_sender("stalled")
            trackers = [await sender.submit(Message(body=THREE_FRAMES)) for _ in range(3)]
            engine_session = sender._engine_link.session
            while len(set(engine_session.backlogged_deliveries)) < 2:  # handed over: the 2nd cut by the window
                await anyio.sleep(0.01)
            while not handler.whole:  # the peer got the first whole
                await anyio.sleep(0.01)
            assert trackers[1].delivery is not None and trackers[1].delivery.written  # its first frame went out
            if ending == "close-sender":
                await sender.close()  # the window stays shut for the close's bound (2 s): then it drops them
            elif ending == "close-session":
                await session.close()
            elif ending == "close-connection":
                await conn.close()
            elif ending == "transport-lost":
                cut.set()
            else:
                handler.cue.set()
            first, cut_short, unwritten = await results_of(trackers)
    assert isinstance(first, DeliveryInDoubt), repr(first)  # written whole: it may have arrived
    # before: DeliveryInDoubt
    assert isinstance(cut_short, kind) and not isinstance(cut_short, DeliveryInDoubt), repr(cut_short)
    assert cut_short.condition == condition  # type: ignore[attr-defined]
    assert "never sent whole" in str(cut_short) and "may be sent again" in str(cut_short)
    assert isinstance(unwritten, kind) and "never sent:" in str(unwritten)  # (as before)
    assert "not sent" in repr(trackers[1]) and "in doubt" in repr(trackers[0])
    assert len(handler.whole) == 1  # the peer indeed never got it whole: the first only
