"""Connection isolation in the embedded broker (issue 15): a failure in one connection's handling is that
connection's alone.

A bug of ours is simulated by making the broker's handling of one connection (the "victim", known by its container
id) raise. The broker must close that connection with ``amqp:internal-error``, log the failure once (with its
traceback), return the victim's unsettled messages to their queue and roll back its transactions, and go on serving
every other connection, with exact counts of what each one sends and receives.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

import amqp_async
from amqp_async import ConnectionError, Message
from amqp_async.broker import Broker
from amqp_async.broker import _connection as server
from amqp_async.protocol.link import SenderLink

pytestmark = pytest.mark.anyio

TIMEOUT = 10.0
VICTIM = "victim"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Injected(RuntimeError):
    """The simulated bug."""


@asynccontextmanager
async def serving() -> AsyncIterator[Broker]:
    async with Broker(port=0) as broker:
        yield broker


def connect(broker: Broker, container_id: str) -> Any:
    return amqp_async.connect(broker.url, container_id=container_id, reconnect=False)


def is_victim(connection: server.ServerConnection) -> bool:
    remote_open = connection.engine.remote_open
    return remote_open is not None and remote_open.container_id == VICTIM


async def eventually(predicate: Any) -> None:
    with anyio.fail_after(TIMEOUT):
        while not predicate():
            await anyio.sleep(0.01)


async def send_numbers(conn: amqp_async.Connection, address: str, numbers: range) -> None:
    sender = await conn.open_sender(address)
    for number in numbers:
        await sender.send(Message(body=number))


async def receive_numbers(conn: amqp_async.Connection, address: str, count: int) -> list[Any]:
    receiver = await conn.open_receiver(address, credit=count)
    bodies = []
    for _ in range(count):
        delivery = await receiver.receive()
        bodies.append(delivery.message.body)
        await delivery.accept()
    with anyio.move_on_after(0.2):
        await receiver.receive()
        bodies.append("more than expected")
    return bodies


def internal_errors(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [record for record in caplog.records if record.levelno >= logging.ERROR]


async def test_a_failure_in_one_connections_handling_closes_only_that_connection(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The victim holds 10 unsettled messages when its handling fails: it is closed with amqp:internal-error, the
    failure is logged once, the 10 messages return to the queue in order, and the bystander goes on."""
    handle_outcomes = server.ServerConnection._on_outcomes

    def failing(self: server.ServerConnection, event: Any) -> None:
        if is_victim(self):
            raise Injected("a bug in the broker")
        handle_outcomes(self, event)

    monkeypatch.setattr(server.ServerConnection, "_on_outcomes", failing)
    caplog.set_level(logging.INFO, logger="amqp_async.broker")
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker, connect(broker, "bystander") as bystander:
            await send_numbers(bystander, "work", range(10))
            victim = await connect(broker, VICTIM)
            receiver = await victim.open_receiver("work", credit=10)
            deliveries = [await receiver.receive() for _ in range(10)]
            assert [delivery.message.body for delivery in deliveries] == list(range(10))
            assert len(broker.queues["work"]) == 0
            with pytest.raises(ConnectionError) as failed:
                await deliveries[0].accept()  # its disposition reaches the failing handler
                await receiver.receive()
            assert failed.value.condition == "amqp:internal-error"
            # Released once its driver stopped: all 10 back, the accepted one too (its outcome was never applied).
            await eventually(lambda: len(broker.queues["work"]) == 10 and not broker.queues["work"].consumers)
            assert len(broker.connections) == 1
            assert await receive_numbers(bystander, "work", 10) == list(range(10))
            await send_numbers(bystander, "other", range(5))
            assert await receive_numbers(bystander, "other", 5) == list(range(5))
            async with connect(broker, "newcomer") as newcomer:
                await send_numbers(newcomer, "later", range(3))
                assert await receive_numbers(newcomer, "later", 3) == [0, 1, 2]
            await victim.close()
    [record] = internal_errors(caplog)
    assert "internal error" in record.getMessage()
    assert record.exc_info is not None and isinstance(record.exc_info[1], Injected)


async def test_a_consumer_failing_while_another_connection_dispatches_keeps_the_message(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The victim's link fails while the bystander's message is dispatched to it (on the bystander's turn): the
    victim is closed, the bystander's send is accepted, and the message stays queued for the next consumer."""
    send = SenderLink.send

    def failing(self: SenderLink, *args: Any, **kwargs: Any) -> Any:
        if self.name.startswith("victim-link"):
            raise Injected("a bug while sending to the victim")
        return send(self, *args, **kwargs)

    monkeypatch.setattr(SenderLink, "send", failing)
    caplog.set_level(logging.INFO, logger="amqp_async.broker")
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker, connect(broker, "bystander") as bystander:
            victim = await connect(broker, VICTIM)
            receiver = await victim.open_receiver("jobs", credit=5, name="victim-link")
            await eventually(lambda: "jobs" in broker.queues and broker.queues["jobs"].consumers)
            await send_numbers(bystander, "jobs", range(3))  # each accepted: the victim's failure is not ours
            with pytest.raises(ConnectionError) as failed:
                await receiver.receive()
            assert failed.value.condition == "amqp:internal-error"
            await eventually(lambda: not broker.queues["jobs"].consumers)
            assert len(broker.queues["jobs"]) == 3
            assert await receive_numbers(bystander, "jobs", 3) == [0, 1, 2]
            await victim.close()
    assert len(internal_errors(caplog)) == 1


async def test_a_failed_connections_transaction_rolls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """The victim published within a transaction and took a message within it; its handling fails before the
    discharge: the publication is gone, the taken message is back."""
    handle_flow = server.ServerConnection._on_flow
    armed = False

    def failing(self: server.ServerConnection, event: Any) -> None:
        if armed and is_victim(self):
            raise Injected("a bug in the broker")
        handle_flow(self, event)

    monkeypatch.setattr(server.ServerConnection, "_on_flow", failing)
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker, connect(broker, "bystander") as bystander:
            await send_numbers(bystander, "in", range(2))
            victim = await connect(broker, VICTIM)
            txn = await victim.transaction()
            sender = await victim.open_sender("out")
            await txn.send(sender, Message(body="never"))
            receiver = await victim.open_receiver("in", credit=1)
            delivery = await receiver.receive()
            await txn.accept(delivery)
            armed = True
            with pytest.raises(ConnectionError):
                receiver.add_credit(1)  # a flow: the victim's handling fails
                await receiver.receive()
            await eventually(lambda: len(broker.queues["in"]) == 2 and not broker.queues["in"].consumers)
            assert len(broker.queues["out"]) == 0
            assert await receive_numbers(bystander, "in", 2) == [0, 1]
            await victim.close()
