"""A sender's ``close()`` (or its session's) that the peer never answers, while the peer keeps the connection alive:
``close()`` returns after its bound, and the trackers of the messages still without an outcome are in doubt then.

Before, they stayed pending: ``await tracker`` after ``close()`` waited for ever (only the connection's end failed
them, and a peer that keeps sending empty frames never lets it end).

The peer: python-qpid-proton's Container over TCP with a handler that opens what we open and grants credit, but never
answers a detach or an end, nor settles a message; its idle timeout makes it send empty frames (§2.4.5), so the
connection stays open.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

import amqp_async
import amqp_async.client._links
from amqp_async import ClosedByApplication, DeliveryInDoubt, Message

proton = pytest.importorskip("proton", reason="python-qpid-proton is the reference peer")

try:
    from proton_peer import proton_server
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.proton_peer import proton_server

pytestmark = pytest.mark.anyio

TIMEOUT = 40.0
LINK_CLOSE_TIMEOUT = 1.0  # the link's bound, made short; a session's is 10 s (not a setting)


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    if request.param == "trio":
        pytest.importorskip("trio", reason="trio is in the test dependency group")
    return str(request.param)


class AnswersNoDetachNorEnd:
    """Opens the connection, sessions and links we open (copying our terminus and settle modes), grants 10 credits
    to our senders, sends our receivers one message (unsettled); never answers a detach or an end, never settles;
    answers the connection's close (the test ends sooner)."""

    sent = False

    def on_connection_remote_open(self, event: Any) -> None:
        event.transport.idle_timeout = 8.0  # proton then sends empty frames: the connection stays alive
        event.connection.open()

    def on_session_remote_open(self, event: Any) -> None:
        event.session.open()

    def on_link_remote_open(self, event: Any) -> None:
        link = event.link
        link.source.copy(link.remote_source)
        link.target.copy(link.remote_target)
        link.snd_settle_mode = link.remote_snd_settle_mode
        link.rcv_settle_mode = link.remote_rcv_settle_mode
        link.open()
        if link.is_receiver:
            link.flow(10)

    def on_link_flow(self, event: Any) -> None:
        link = event.link
        if link.is_sender and link.credit and not self.sent:
            self.sent = True
            link.delivery(b"tag-1")
            link.send(proton.Message(body="x").encode())
            link.advance()

    def on_connection_remote_close(self, event: Any) -> None:
        event.connection.close()


async def test_a_sender_close_the_peer_never_answers_leaves_its_trackers_in_doubt(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(amqp_async.client._links, "CLOSE_TIMEOUT", LINK_CLOSE_TIMEOUT)
    with anyio.fail_after(TIMEOUT), proton_server(AnswersNoDetachNorEnd()) as url:
        async with amqp_async.connect(url) as conn:
            sender = await conn.open_sender("q")
            tracker = await sender.submit(Message(body=1))
            await sender.close()  # after LINK_CLOSE_TIMEOUT: no detach came
            assert tracker.done
            with anyio.fail_after(5), pytest.raises(DeliveryInDoubt, match="did not answer its detach") as caught:
                await tracker
            assert caught.value.condition == "amqp-async:closed-by-application"
            assert isinstance(caught.value.__cause__, ClosedByApplication)
            assert not conn.is_closed  # the connection goes on
            assert sender.unsettled == []
            with pytest.raises(ClosedByApplication):
                await sender.send(Message(body=2))


async def test_a_session_close_the_peer_never_answers_leaves_its_senders_trackers_in_doubt() -> None:
    with anyio.fail_after(TIMEOUT), proton_server(AnswersNoDetachNorEnd()) as url:
        async with amqp_async.connect(url) as conn:
            session = await conn.open_session()
            sender = await session.open_sender("q")
            tracker = await sender.submit(Message(body=1))
            await session.close()  # after 10 s: no end came
            assert tracker.done
            with anyio.fail_after(5), pytest.raises(DeliveryInDoubt) as caught:
                await tracker
            assert caught.value.condition == "amqp-async:closed-by-application"
            assert not conn.is_closed


async def test_an_accept_waiting_for_the_senders_settlement_ends_when_the_close_goes_unanswered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Receiver settle mode second (§2.6.12): accept() waits for the sender to settle. Before, once the receiver's
    # close went unanswered, it waited on as long as the connection lived.
    monkeypatch.setattr(amqp_async.client._links, "CLOSE_TIMEOUT", LINK_CLOSE_TIMEOUT)
    outcome: list[BaseException] = []

    async def accept(delivery: amqp_async.Delivery) -> None:
        try:
            await delivery.accept()
        except Exception as exc:
            outcome.append(exc)

    with anyio.fail_after(TIMEOUT), proton_server(AnswersNoDetachNorEnd()) as url:
        async with amqp_async.connect(url) as conn:
            receiver = await conn.open_receiver("q", delivery="exactly-once")
            delivery = await receiver.receive()
            async with anyio.create_task_group() as tg:
                tg.start_soon(accept, delivery)
                await anyio.sleep(0.2)
                await receiver.close()  # after LINK_CLOSE_TIMEOUT: no detach came
            [error] = outcome
            assert isinstance(error, ClosedByApplication)
            assert not conn.is_closed
