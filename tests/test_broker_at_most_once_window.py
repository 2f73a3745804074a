"""The pre-settled transfers that wait for the store's commit count against the client's session window.

A consumer's credit, as the broker's dispatch reads it, is none once the client's session incoming-window is shut
(§2.5.6: the next transfer would wait in the session): each transfer written takes one from the window. Those that
wait for the commit of their messages' removal (``_consumers._send_after_commit``) took none before they were written:
a client with a window of 2 and a credit of 1,000 had all the 1,000 messages of its queue (10 MB) dealt, and once the
commit was done, written into the session, where they waited, uncounted in ``--max-memory``, for as long as the client
kept its window shut. Now no more are dealt than the window takes.

The client is our engine on a socket that sends its open, begin (incoming-window 2), attach and flow, and then
reads nothing (a stuck or hostile client).
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from broker_serving import serving

import amqp_async
from amqp_async import Message
from amqp_async.codec.performatives import SND_SETTLED
from amqp_async.codec.terminus import Source, Target
from amqp_async.protocol.connection import CLIENT, Connection

TIMEOUT = 30.0
#: How long the broker is given to write what it would (the store commits meanwhile).
QUIET = 1.0
COUNT, SIZE, WINDOW = 1000, 10_000, 2


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_pre_settled_transfers_waiting_for_the_commit_are_dealt_no_more_than_the_session_window_takes(
    tmp_path: Path,
) -> None:
    async with serving(data_dir=tmp_path / "data") as broker:
        with anyio.fail_after(TIMEOUT):
            async with amqp_async.connect(broker.url, reconnect=False) as conn:
                sender = await conn.open_sender("q")
                await sender.send_many([Message(body=b"x" * SIZE, durable=True) for _ in range(COUNT)])
            queue = broker.queues["q"]
            held = broker.flow.held_bytes
            engine = Connection(role=CLIENT, container_id="stuck")
            engine.open()
            session = engine.begin_session(incoming_window=WINDOW)
            link = session.attach_receiver(
                "pre-settled", source=Source(address="q"), target=Target(), snd_settle_mode=SND_SETTLED
            )
            link.grant_credit(COUNT)
            async with await anyio.connect_tcp("127.0.0.1", broker.port) as stream:
                await stream.send(engine.data_to_send(0.0))  # and it reads nothing from now on
                while len(queue.entries) == COUNT:
                    await anyio.sleep(0.01)
                await anyio.sleep(QUIET)  # the commit of their removal is done: those dealt are written
                assert len(queue.entries) >= COUNT - WINDOW  # before: 0, all 1,000 dealt
                assert broker.flow.held_bytes >= held - WINDOW * (SIZE + 1000)
