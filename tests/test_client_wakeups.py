"""What wakes a task waiting on a connection: the outcome of a message sent does not wake a receiver of the same
connection (it goes to the message's tracker), and everything a receiver waits for still does.

A request/reply client waits for the reply while the request's outcome arrives: waking its receive() for that
outcome costs a turn of the event loop for nothing on every round trip. The peer is our embedded broker: it grants
a producer credit in windows of 500 (amqp_async/broker/_flow.py), so no flow frame comes during the sends here (a
flow does wake every waiter, rightly: credit is what senders wait for; python-qpid-proton's test broker tops up
credit after every message, and would wake the receiver for that).
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

import amqp_async
from amqp_async import Message
from amqp_async.broker import Broker
from amqp_async.client._connection import Connection

pytestmark = pytest.mark.anyio

TIMEOUT = 30.0


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    if request.param == "trio":
        pytest.importorskip("trio", reason="trio is in the test dependency group")
    return str(request.param)


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The name of each task that starts waiting for a change of the connection's state."""
    started: list[str] = []
    original = Connection._wait_state

    async def counted(self: Connection) -> None:
        started.append(anyio.get_current_task().name or "")
        await original(self)

    monkeypatch.setattr(Connection, "_wait_state", counted)
    return started


async def test_outcomes_of_sent_messages_do_not_wake_a_receiver(waits: list[str]) -> None:
    received: list[Any] = []
    with anyio.fail_after(TIMEOUT):
        async with Broker(port=0) as broker, amqp_async.connect(broker.url, reconnect=False) as conn:
            receiver = await conn.open_receiver("replies")
            sender = await conn.open_sender("requests")
            reply_sender = await conn.open_sender("replies")

            async def wait_for_reply() -> None:
                received.append((await receiver.receive()).message.body)

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(wait_for_reply, name="waiting-receiver")
                await anyio.wait_all_tasks_blocked()
                before = waits.count("waiting-receiver")
                for number in range(20):
                    await sender.send(Message(body=number))  # 20 outcomes arrive while the receiver waits
                during = waits.count("waiting-receiver") - before
                await reply_sender.send(Message(body="reply"))  # what it waits for still wakes it
    assert received == ["reply"]
    assert before == 1
    assert during == 0, f"the receiver woke {during} times for 20 outcomes of messages sent"
