"""At-most-once messages that our close drops unsent are reported: a warning counts them and names the sender.

An at-most-once message is settled as it is handed to the engine (``submit()`` and ``send()`` return then, with no
outcome to wait for); past the peer's incoming window (§2.5.6) its transfer waits in the engine. A close that timed
out on a peer whose window stayed shut (the sender's, its session's or its connection's) dropped those transfers
without a word: no tracker could fail, and nothing said messages were lost. Now the close logs a warning on
``amqp_async.connection`` with how many were dropped and the sender's address.

The peer is python-qpid-proton with a session window of four frames that reads no transfer (it answers detaches,
ends and closes).

And ``send()`` on an at-most-once sender keeps its promise, to return once the transfer is written: it returned
while the message still waited for the peer's window (a close then dropped it, and the caller never knew). It now
waits for the window, and raises the error of what dropped the message, saying it was never sent.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio
import pytest

import amqp_async
from amqp_async import ClosedByApplication, Message
from amqp_async.errors import CLOSED_BY_APPLICATION

pytest.importorskip("proton", reason="python-qpid-proton is a test dependency (the independent peer)")
from proton_peer import proton_server
from shut_window_peer import ONE_FRAME, WINDOW_FRAMES, ShutWindowPeer, shorten_close_bounds

pytestmark = pytest.mark.anyio

TIMEOUT = 60.0


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(autouse=True)
def _short_close_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    shorten_close_bounds(monkeypatch)


@pytest.mark.parametrize("closing", ["sender", "session", "connection"])
async def test_at_most_once_messages_dropped_by_a_close_are_counted_in_a_warning(
    closing: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="amqp_async.connection")
    with proton_server(ShutWindowPeer()) as url, anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(url, reconnect=False) as conn:
            session = await conn.open_session()
            sender = await session.open_sender("stalled", delivery="at-most-once")
            # one frame each: the first four fill the peer's window, the other eight never leave the engine
            for _ in range(12):
                await sender.submit(Message(body=ONE_FRAME))
            if closing == "sender":
                await sender.close()
            elif closing == "session":
                await session.close()
            else:
                await conn.close()
    dropped = [record for record in caplog.records if "at-most-once" in record.getMessage()]
    [warning] = dropped  # before: none (the messages went without a word)
    assert warning.levelno == logging.WARNING
    message = warning.getMessage()
    assert message.startswith("8 at-most-once message(s) of the sender to 'stalled' were dropped"), message
    assert f"the {closing} ended" in message


async def test_nothing_is_reported_when_the_backlog_was_written(caplog: pytest.LogCaptureFixture) -> None:
    class _Reading(ShutWindowPeer):
        """Reads and settles what comes: its window reopens."""

        received = 0

        def on_delivery(self, event: Any) -> None:
            if not event.delivery.partial:
                event.link.recv(event.delivery.pending)
                event.delivery.settle()
                self.received += 1

    caplog.set_level(logging.WARNING, logger="amqp_async.connection")
    peer = _Reading()
    with proton_server(peer) as url, anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(url, reconnect=False) as conn:
            sender = await conn.open_sender("reading", delivery="at-most-once")
            for _ in range(12):
                await sender.submit(Message(body=ONE_FRAME))
            await sender.close()  # writes them first (as the peer reads): nothing dropped
            while peer.received < 12:
                await anyio.sleep(0.05)
    assert not [record for record in caplog.records if "at-most-once" in record.getMessage()]


def _never_sent(error: BaseException | None) -> None:
    assert isinstance(error, ClosedByApplication), repr(error)
    assert error.condition == CLOSED_BY_APPLICATION and "never sent" in str(error)


async def test_an_at_most_once_send_returns_once_its_transfer_is_written() -> None:
    outcome: list[BaseException | None] = []
    with proton_server(ShutWindowPeer()) as url, anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(url, reconnect=False) as conn:
            sender = await conn.open_sender("stalled", delivery="at-most-once")
            for _ in range(WINDOW_FRAMES):  # written at once: the peer's window takes four frames
                assert await sender.send(Message(body=ONE_FRAME)) is None
            session = sender._engine_link.session

            async def fifth() -> None:
                try:
                    await sender.send(Message(body=ONE_FRAME))
                except Exception as exc:
                    outcome.append(exc)
                else:
                    outcome.append(None)

            async with anyio.create_task_group() as group:
                group.start_soon(fifth)
                while not session.has_backlog:  # handed over: it waits for the window
                    await anyio.sleep(0.01)
                assert not outcome  # before: it had returned None, its message still waiting
                await sender.close()  # the window stays shut: the close drops it
    [error] = outcome
    _never_sent(error)


async def test_an_at_most_once_send_many_names_the_messages_never_written() -> None:
    caught: list[BaseException] = []
    with proton_server(ShutWindowPeer()) as url, anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(url, reconnect=False) as conn:
            sender = await conn.open_sender("stalled", delivery="at-most-once")

            async def send_all() -> None:
                try:
                    await sender.send_many([Message(body=ONE_FRAME) for _ in range(10)])
                except amqp_async.AMQPError as exc:
                    caught.append(exc)

            async with anyio.create_task_group() as group:
                group.start_soon(send_all)
                while sender.credit > 90:  # all ten handed over (credit 100)
                    await anyio.sleep(0.01)
                await sender.close()
    [error] = caught  # before: send_many returned ten None
    assert isinstance(error, amqp_async.SendManyError), repr(error)
    assert error.results[:WINDOW_FRAMES] == [None] * WINDOW_FRAMES
    for unwritten in error.results[WINDOW_FRAMES:]:
        _never_sent(unwritten)
