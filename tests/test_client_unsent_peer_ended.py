"""A message never put on the wire is not in doubt when the PEER ends what carried it, either.

``submit()`` hands a message to the engine once the link has credit; past the peer's incoming window (§2.5.6) its
transfer waits in the engine. When the peer detached the link, ended the session or closed the connection, the
engine dropped those transfers as it read the frame, before the client saw the event, and every one of them failed
with ``DeliveryInDoubt``, as if it might have arrived. Now the engine marks each delivery as its first frame goes
out (``Delivery.written``), and a message of which nothing was written fails with the error of what ended it, of the
same kind and condition (``LinkDetached``, ``SessionError``, ``ConnectionClosed``), its description saying it was
never sent; one written stays in doubt.

The peer is python-qpid-proton with a session window of four frames that reads no transfer, and ends what the test
asks once every message is handed over.
"""

from __future__ import annotations

import anyio
import pytest

import amqp_async
from amqp_async import ConnectionClosed, DeliveryAborted, DeliveryInDoubt, LinkDetached, Message, SessionError

pytest.importorskip("proton", reason="python-qpid-proton is a test dependency (the independent peer)")
from proton_peer import proton_server
from shut_window_peer import ENDING_CONDITION, ONE_FRAME, WINDOW_FRAMES, EndsOnCue, results_of

pytestmark = pytest.mark.anyio

TIMEOUT = 60.0


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.mark.parametrize(
    ("ending", "kind", "condition"),
    [
        ("detach", LinkDetached, ENDING_CONDITION),
        ("detach-plain", LinkDetached, "amqp:link:detach-forced"),
        ("end", SessionError, ENDING_CONDITION),
        ("close", ConnectionClosed, ENDING_CONDITION),
    ],
)
async def test_messages_waiting_for_the_window_fail_as_never_sent_when_the_peer_ends(
    ending: str, kind: type[BaseException], condition: str
) -> None:
    handler = EndsOnCue(ending)
    with proton_server(handler) as url, anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(url, reconnect=False) as conn:
            sender = await conn.open_sender("stalled")
            # one frame each: the first four fill the peer's window, the other eight never leave the engine
            trackers = [await sender.submit(Message(body=ONE_FRAME)) for _ in range(12)]
            handler.cue.set()
            results = await results_of(trackers)
    for written in results[:WINDOW_FRAMES]:
        assert isinstance(written, DeliveryInDoubt), repr(written)  # written: they may have arrived
    for unwritten in results[WINDOW_FRAMES:]:  # before: DeliveryInDoubt each
        assert isinstance(unwritten, kind) and not isinstance(unwritten, DeliveryInDoubt), repr(unwritten)
        assert unwritten.condition == condition  # type: ignore[attr-defined]
        assert "never sent" in str(unwritten)
    assert "in doubt" in repr(trackers[0]) and "not sent" in repr(trackers[-1])


@pytest.mark.parametrize(("ending", "kind"), [("detach", LinkDetached), ("end", SessionError)])
async def test_a_streamed_message_queued_behind_another_fails_as_never_sent(
    ending: str, kind: type[BaseException]
) -> None:
    """A stream sender's message whose frames all wait behind a message cut off by the window: never sent (the
    written part of the queue's head is no longer guessed from byte counts, which took any streamed head for partly
    written and its followers along with it). The one cut off fails as cut mid-body: ``DeliveryAborted``."""
    handler = EndsOnCue(ending)
    results: dict[str, BaseException | None] = {}
    with proton_server(handler) as url, anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(url, reconnect=False) as conn:
            sender = await conn.open_stream_sender("stalled", buffer_size=1 << 20)
            session = sender._engine_link.session

            async def send(name: str, body: bytes) -> None:
                try:
                    await sender.send_stream(body)
                except Exception as exc:
                    results[name] = exc
                else:
                    results[name] = None

            async with anyio.create_task_group() as group:
                group.start_soon(send, "cut off", b"a" * 200_000)  # seven frames: four go out
                while not session.has_backlog:
                    await anyio.sleep(0.01)
                group.start_soon(send, "behind", b"b" * 30_000)
                while len(set(session.backlogged_deliveries)) < 2:  # both handed over, the second all waiting
                    await anyio.sleep(0.01)
                handler.cue.set()
    # cut mid-body (its first frames written, not its last): never delivered whole, not in doubt
    # (tests/test_client_cut_short_streams.py, for every ending)
    cut_off = results["cut off"]
    assert isinstance(cut_off, DeliveryAborted), repr(cut_off)
    assert "never delivered whole" in str(cut_off) and cut_off.__cause__.condition == ENDING_CONDITION  # type: ignore[union-attr]
    behind = results["behind"]
    assert isinstance(behind, kind) and not isinstance(behind, DeliveryInDoubt), repr(behind)  # before: in doubt
    assert behind.condition == ENDING_CONDITION and "never sent" in str(behind)  # type: ignore[attr-defined]
