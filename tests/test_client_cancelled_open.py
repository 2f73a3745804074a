"""An open cancelled (or timed out) before the peer's answer ends with one attach and one detach (§2.6.3,
§2.6.4), however late the answer comes.

The client detached at once, and the engine forgot the link then, before the peer's answering attach came: that
attach read as a new link the peer started, which the client refused (an attach and a detach of its own, §2.6.3),
which the peer read as a new link... python-qpid-proton's broker and ours went on so thousands of times a second,
for the connection's life. The peer here is python-qpid-proton's broker behind a relay that holds back its bytes
for a moment (a slow network), so that the cancellation comes before the answer.
"""

from __future__ import annotations

import anyio
import anyio.abc
import pytest
from proton_broker import ProtonBroker
from slow_relays import slow_relay

import amqp_async

pytestmark = pytest.mark.anyio

TIMEOUT = 15.0
DELAY = 0.3


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.mark.parametrize("kind", ["sender", "receiver"])
async def test_an_open_cancelled_before_the_answer_sends_one_attach_and_one_detach(kind: str) -> None:
    with ProtonBroker() as broker:
        port = int(broker.url.rsplit(":", 1)[1])
        with anyio.fail_after(TIMEOUT):
            async with slow_relay(port, delay=[DELAY]) as url, amqp_async.connect(url, reconnect=False) as conn:
                await conn.open_sender("warm-up")  # the session is begun: the cancelled open's attach goes out
                with anyio.move_on_after(DELAY / 3) as cancelled:
                    if kind == "sender":
                        await conn.open_sender("q", name="cancelled")
                    else:
                        await conn.open_receiver("q", name="cancelled")
                assert cancelled.cancelled_caught
                await anyio.sleep(4 * DELAY)  # the answer and the detach's answer come meanwhile
                attaches = [attach for attach in broker.attaches if attach.name == "cancelled"]
                assert len(attaches) == 1, len(attaches)  # before: thousands, and more every second
                assert len([d for d in broker.detaches if d.link == "cancelled"]) == 1
                # the exchange is complete: the name is free again, and the connection works
                sender = await conn.open_sender("q", name="cancelled")
                assert await sender.send(amqp_async.Message(body="after")) == amqp_async.Accepted()


async def test_an_open_timed_out_by_open_timeout_ends_the_same_way() -> None:
    with ProtonBroker() as broker:
        port = int(broker.url.rsplit(":", 1)[1])
        with anyio.fail_after(TIMEOUT):
            delay = [0.0]
            async with (
                slow_relay(port, delay=delay) as url,
                amqp_async.connect(url, reconnect=False, open_timeout=DELAY / 3) as conn,
            ):
                await conn.open_sender("warm-up")
                delay[0] = DELAY  # from now on the answers come after open_timeout
                with pytest.raises(amqp_async.LinkTimeout):
                    await conn.open_receiver("q", name="timed-out")
                await anyio.sleep(4 * DELAY)
                assert len([attach for attach in broker.attaches if attach.name == "timed-out"]) == 1
