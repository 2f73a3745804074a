"""Errors name what the application opened: a link the peer detached without an error raises ``LinkDetached``
on its next use, and the message names the sender's target or the receiver's source (before: only the link's
generated name, a UUID the application never chose, so with many links one could not tell which had gone).

The peer is python-qpid-proton, whose handler detaches a link (closed, no error) when told to by a message.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

pytest.importorskip("proton", reason="python-qpid-proton is the peer; the test dependency group has it")
from proton.handlers import MessagingHandler

import amqp_async
from amqp_async import DeliveryInDoubt, LinkDetached, Message

try:
    from proton_peer import proton_server
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.proton_peer import proton_server

pytestmark = [pytest.mark.interop, pytest.mark.anyio]

TIMEOUT = 10.0


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


class _DetachesOnRequest(MessagingHandler):
    """Accepts every message, except two (each detaches a link, closed, without an error): "detach" the link it
    came on, "detach gone" the links that send from the address "gone"."""

    def __init__(self) -> None:
        super().__init__(auto_accept=False)  # the "detach" message must stay unsettled

    def on_link_opening(self, event: Any) -> None:
        link = event.link
        link.source.copy(link.remote_source)
        link.target.copy(link.remote_target)

    def on_message(self, event: Any) -> None:
        if event.message.body == "detach":
            event.link.close()
        elif event.message.body == "detach gone":
            self.accept(event.delivery)
            link = event.connection.link_head(0)
            while link is not None:
                if link.is_sender and link.source.address == "gone":
                    link.close()
                link = link.next(0)
        else:
            self.accept(event.delivery)


async def test_a_send_on_a_sender_the_peer_detached_names_its_target() -> None:
    with proton_server(_DetachesOnRequest()) as url:
        with anyio.fail_after(TIMEOUT):
            async with amqp_async.connect(url) as conn:
                sender = await conn.open_sender("orders")
                with pytest.raises(DeliveryInDoubt):
                    await sender.send(Message(body="detach"))
                with pytest.raises(LinkDetached) as raised:
                    await sender.send(Message(body="next"))
                assert "sender to 'orders'" in str(raised.value)
                assert sender.name in str(raised.value)  # and still the link's name
                assert raised.value.condition == "amqp:link:detach-forced"


async def test_a_receive_on_a_receiver_the_peer_detached_names_its_source() -> None:
    with proton_server(_DetachesOnRequest()) as url:
        with anyio.fail_after(TIMEOUT):
            async with amqp_async.connect(url) as conn:
                receiver = await conn.open_receiver("gone")
                async with conn.open_sender("control") as control:
                    await control.send(Message(body="detach gone"))
                with pytest.raises(LinkDetached) as raised:
                    await receiver.receive()
                assert "receiver from 'gone'" in str(raised.value)


class _RefusesAfterOpening(MessagingHandler):
    """Answers each attach, then detaches the link at once, closed and without an error (§2.6.3's refusal, minus
    the error)."""

    def on_link_opening(self, event: Any) -> None:
        link = event.link
        link.source.copy(link.remote_source)
        link.target.copy(link.remote_target)

    def on_link_opened(self, event: Any) -> None:
        event.link.close()


@pytest.mark.parametrize("role", ["sender", "receiver"])
async def test_a_link_refused_without_an_error_says_so_once(role: str) -> None:
    with proton_server(_RefusesAfterOpening()) as url:
        with anyio.fail_after(TIMEOUT):
            async with amqp_async.connect(url) as conn:
                with pytest.raises(LinkDetached) as raised:
                    if role == "sender":
                        await conn.open_sender("gone")
                    else:
                        await conn.open_receiver("gone")
                what = "sender to 'gone'" if role == "sender" else "receiver from 'gone'"
                assert str(raised.value).startswith(
                    f"amqp:link:detach-forced: the peer refused the {what}: it detached the link without an error"
                )
                assert str(raised.value).count(what) == 1
