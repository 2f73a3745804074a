"""A drain is answered once the messages available are sent (§2.6.7), when a large message (streamed from its file)
waits behind pre-settled transfers waiting for the store's commit, or streams.

§2.6.7: "If the sender's drain flag is set and there are no available messages, the sender MUST advance the
delivery-count until link-credit is zero". Before, the broker answered the drain as soon as the pre-settled transfers
that waited for a commit were written (a large message is not dealt while others wait: it streams alone), or as soon
as a large message's stream began: a drain of 10 credits with s0, a large L1, s2 and s3 queued got s0 alone on an
at-most-once link (s0 and L1 on an at-least-once one), the rest of the credit given back while messages waited.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import anyio
import pytest
from broker_serving import serving

import amqp_async
from amqp_async import Message

TIMEOUT = 30.0
#: Past this a message is kept on disk (and streamed from its file); the large one is sent in many frames.
LARGE = 2000
BODIES = ["s0", "L1" + "x" * 300_000, "s2", "s3"]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
@pytest.mark.parametrize("delivery", ["at-most-once", "at-least-once"])
async def test_a_drain_is_answered_after_the_messages_queued_behind_a_large_one(
    tmp_path: Path, delivery: Literal["at-most-once", "at-least-once"]
) -> None:
    async with serving(data_dir=tmp_path / "data", large_message_size=LARGE) as broker:
        with anyio.fail_after(TIMEOUT):
            async with amqp_async.connect(broker.url, reconnect=False) as conn:
                sender = await conn.open_sender("q")
                await sender.send_many([Message(body=body, durable=True) for body in BODIES])
                receiver = await conn.open_receiver("q", delivery=delivery, credit=0)
                receiver.add_credit(10)
                await receiver.drain()  # one flow: credit 10, drain
                received = []
                while (taken := receiver.receive_nowait()) is not None:
                    received.append(str(taken.message.body)[:2])
                    if delivery == "at-least-once":
                        await taken.accept()
                assert received == ["s0", "L1", "s2", "s3"]
                assert not broker.queues["q"].entries
