"""What wakes a task waiting on a connection: neither the outcome of a message sent (it goes to the message's
tracker) nor the credit a peer gives our senders wakes a receiver of the same connection, and everything a receiver
waits for still does.

A request/reply client waits for the reply while its request's outcome arrives, and, from a peer that tops credit
up after every message, a flow for its sender: waking its receive() for each costs a turn of the event loop for
nothing on every round trip. The peers: python-qpid-proton's test broker (tests/proton_broker.py), which grants a
sender credit again after every message, and our embedded broker, which grants it in windows of 500.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

import amqp_async
from amqp_async import Message
from amqp_async.broker import Broker
from amqp_async.client._connection import Connection

try:
    from proton_broker import ProtonBroker
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.proton_broker import ProtonBroker

pytestmark = pytest.mark.anyio

TIMEOUT = 30.0


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    if request.param == "trio":
        pytest.importorskip("trio", reason="trio is in the test dependency group")
    return str(request.param)


@pytest.fixture(params=["proton", "embedded"])
def peer(request: pytest.FixtureRequest) -> Iterator[str]:
    """The broker's kind: started in the test (the embedded one runs on the test's event loop)."""
    yield str(request.param)


@asynccontextmanager
async def running(kind: str) -> Any:
    if kind == "proton":
        with ProtonBroker(timeout=TIMEOUT) as broker:
            yield broker.url
    else:
        async with Broker(port=0) as broker:
            yield broker.url


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The name of each task that starts waiting for deliveries (or for any change of the connection's state)."""
    started: list[str] = []

    def counted(original: Any) -> Any:
        async def wait(self: Connection) -> None:
            started.append(anyio.get_current_task().name or "")
            await original(self)

        return wait

    monkeypatch.setattr(Connection, "_wait_state", counted(Connection._wait_state))
    monkeypatch.setattr(Connection, "_wait_deliveries", counted(Connection._wait_deliveries))
    return started


async def test_outcomes_and_credit_of_senders_do_not_wake_a_receiver(peer: str, waits: list[str]) -> None:
    received: list[Any] = []
    with anyio.fail_after(TIMEOUT):
        async with running(peer) as url, amqp_async.connect(url, reconnect=False) as conn:
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
                    await sender.send(Message(body=number))  # 20 outcomes (and flows) arrive meanwhile
                during = waits.count("waiting-receiver") - before
                await reply_sender.send(Message(body="reply"))  # what it waits for still wakes it
    assert received == ["reply"]
    assert before == 1
    assert during == 0, f"the receiver woke {during} times while 20 messages were sent"


async def test_a_sender_waiting_for_credit_still_wakes_on_a_flow() -> None:
    """The credit python-qpid-proton's broker gives back after each message is what a sender with none waits for."""
    with anyio.fail_after(TIMEOUT), ProtonBroker(timeout=TIMEOUT) as broker:
        async with amqp_async.connect(broker.url, reconnect=False) as conn:
            sender = await conn.open_sender("q")
            bodies = list(range(sender.credit + 5))  # more than the first grant: the rest wait for credit
            await sender.send_many([Message(body=body) for body in bodies])
        assert [message.body for message in broker.queued("q")] == bodies
