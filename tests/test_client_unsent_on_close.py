"""A message never put on the wire is not in doubt: it fails with a definite error that says it was never sent.

``submit()`` hands a message to the engine once the link has credit; past the peer's incoming window (§2.5.6) its
transfer waits in the engine. A close that timed out on a peer whose window stayed shut (the sender's, its
session's or its connection's) dropped those transfers, and every one of them failed with ``DeliveryInDoubt``, as if
it might have arrived: the application could not tell the messages it may safely send again. Now a message of which
nothing was written fails with the error of what ended it (``ClosedByApplication`` for a close, ``ConnectionLost``
for a lost transport), its description saying it was never sent; one partly or wholly written stays in doubt.

The peer is python-qpid-proton with a session window of four frames that reads no transfer and answers no detach.
"""

from __future__ import annotations

import anyio
import anyio.abc
import pytest

import amqp_async
from amqp_async import ClosedByApplication, ConnectionLost, DeliveryInDoubt, Message
from amqp_async.errors import CLOSED_BY_APPLICATION

pytest.importorskip("proton", reason="python-qpid-proton is a test dependency (the independent peer)")
from proton_peer import proton_server
from shut_window_peer import ONE_FRAME, WINDOW_FRAMES, ShutWindowPeer, cuttable_relay, results_of, shorten_close_bounds

pytestmark = pytest.mark.anyio

TIMEOUT = 60.0


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(autouse=True)
def _short_close_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    shorten_close_bounds(monkeypatch)


def _assert_never_sent(error: BaseException | None, kind: type[BaseException], condition: str) -> None:
    assert isinstance(error, kind) and not isinstance(error, DeliveryInDoubt), repr(error)
    assert error.condition == condition  # type: ignore[attr-defined]
    assert "never sent" in str(error)


@pytest.mark.parametrize("closing", ["sender", "session", "connection"])
async def test_messages_waiting_for_the_window_fail_as_never_sent_on_close(
    closing: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with proton_server(ShutWindowPeer(answer_detach=False)) as url, anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(url, reconnect=False) as conn:
            session = await conn.open_session()
            sender = await session.open_sender("stalled")
            # one frame each: the first four fill the peer's window, the other eight never leave the engine
            trackers = [await sender.submit(Message(body=ONE_FRAME)) for _ in range(12)]
            if closing == "sender":
                await sender.close()
            elif closing == "session":
                await session.close()
            else:
                await conn.close()
            results = await results_of(trackers)
    for written in results[:WINDOW_FRAMES]:
        assert isinstance(written, DeliveryInDoubt), repr(written)  # written: they may have arrived
    for unwritten in results[WINDOW_FRAMES:]:  # before: DeliveryInDoubt each
        _assert_never_sent(unwritten, ClosedByApplication, CLOSED_BY_APPLICATION)
    assert "in doubt" in repr(trackers[0]) and "not sent" in repr(trackers[-1])


async def test_a_message_written_whole_stays_in_doubt_and_one_cut_short_was_never_sent_whole() -> None:
    """(The one cut short: tests/test_client_unsent_dropped_partly_written.py, for every ending.)"""
    with proton_server(ShutWindowPeer(answer_detach=False)) as url, anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(url, reconnect=False) as conn:
            sender = await conn.open_sender("stalled")
            # three frames each (64 KiB in 32 KiB frames): the first whole, the second cut off by the window
            trackers = [await sender.submit(Message(body=b"x" * 65536)) for _ in range(5)]
            await sender.close()
            results = await results_of(trackers)
    assert isinstance(results[0], DeliveryInDoubt), results[0]
    _assert_never_sent(results[1], ClosedByApplication, CLOSED_BY_APPLICATION)  # "never sent whole"
    for unwritten in results[2:]:
        _assert_never_sent(unwritten, ClosedByApplication, CLOSED_BY_APPLICATION)


async def test_send_many_names_the_messages_never_sent() -> None:
    with proton_server(ShutWindowPeer(answer_detach=False)) as url, anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(url, reconnect=False) as conn:
            sender = await conn.open_sender("stalled")
            async with anyio.create_task_group() as group:
                caught: list[BaseException] = []

                async def send_all() -> None:
                    try:
                        await sender.send_many([Message(body=ONE_FRAME) for _ in range(10)])
                    except amqp_async.AMQPError as exc:
                        caught.append(exc)

                group.start_soon(send_all)
                while sender.credit > 90:  # all ten handed over (credit 100)
                    await anyio.sleep(0.01)
                await sender.close()
    [error] = caught
    assert isinstance(error, amqp_async.SendManyError), repr(error)
    results = error.results
    assert all(isinstance(result, DeliveryInDoubt) for result in results[:WINDOW_FRAMES]), results
    for unwritten in results[WINDOW_FRAMES:]:  # before: the close's ClosedByApplication ended send_many itself
        _assert_never_sent(unwritten, ClosedByApplication, CLOSED_BY_APPLICATION)


@pytest.mark.parametrize("reconnect", [False, True], ids=["no-reconnect", "reconnect"])
async def test_a_lost_transport_fails_the_messages_never_written_as_not_sent(reconnect: bool) -> None:
    with proton_server(ShutWindowPeer(answer_detach=False)) as url, anyio.fail_after(TIMEOUT):
        relay = cuttable_relay(url)
        async with relay as (relayed, cut), amqp_async.connect(relayed, reconnect=reconnect) as conn:
            sender = await conn.open_sender("stalled")
            trackers = [await sender.submit(Message(body=ONE_FRAME)) for _ in range(12)]
            cut.set()
            results = await results_of(trackers)
    for written in results[:WINDOW_FRAMES]:
        assert isinstance(written, DeliveryInDoubt), repr(written)
    for unwritten in results[WINDOW_FRAMES:]:
        assert isinstance(unwritten, ConnectionLost), repr(unwritten)
        assert "never sent" in str(unwritten) and isinstance(unwritten.__cause__, ConnectionLost)
