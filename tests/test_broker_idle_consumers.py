"""A queue's consumers without credit cost its dispatch nothing until their credit comes back
(amqp_async/broker/_nodes.py, ``Queue.credited``; the triggers in amqp_async/broker/_connection.py).

Each message put to a queue used to make its dispatch ask every consumer of the queue for its credit, three
times over: one connection holding 20,000 idle receivers (no credit) on a queue took another client's
send-and-receive on it from 3,600 a second to 124. A consumer found without credit is now parked, and unparked by
what may give it credit again: a flow of its link, its session's window opening (§2.5.6), its connection's output
draining, the end of a large message it was sending. These tests count the credit asked for (not time: a loaded host
makes time bounds flaky), and check that every way back to credit still delivers: python-qpid-proton's receivers
flowing one credit each after a long idle, and two receivers sharing a session whose window is one transfer.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from proton import Message as ProtonMessage
from proton.utils import BlockingConnection

import amqp_async
from amqp_async.broker import BrokerThread
from amqp_async.broker._nodes import Consumer, Entry, Queue

TIMEOUT = 20.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Credit:
    """A consumer's credit, counting how often a dispatch asks for it."""

    asked = 0

    def __init__(self, value: int) -> None:
        self.value = value

    def __call__(self) -> int:
        Credit.asked += 1
        return self.value


def test_idle_consumers_are_asked_for_their_credit_once() -> None:
    idle, puts = 5_000, 200
    queue = Queue("q")
    for _ in range(idle):
        queue.subscribe(Consumer(lambda entry: None, Credit(0)))
    received: list[Entry] = []
    active = Credit(puts)

    def send(entry: Entry) -> None:
        active.value -= 1
        received.append(entry)

    queue.subscribe(Consumer(send, active))
    Credit.asked = 0
    for body in range(puts):
        queue.put(Entry(amqp_async.Message(body=body).encode()))
    assert [entry.message.body for entry in received] == list(range(puts))
    # before: each put asked all 5,001 consumers (three times over), 3,000,600 in all; now the idle ones once (at the
    # first put, which parks them), the active one a few times a put
    assert Credit.asked <= idle + 4 * puts, Credit.asked


def test_a_parked_consumer_is_served_again_once_credited() -> None:
    queue = Queue("q")
    credits = [Credit(0), Credit(0)]
    log: list[tuple[int, Any]] = []

    def sender(index: int) -> Any:
        def send(entry: Entry) -> None:
            credits[index].value -= 1
            log.append((index, entry.message.body))

        return send

    consumers = [Consumer(sender(index), credits[index]) for index in range(2)]
    for consumer in consumers:
        queue.subscribe(consumer)
    for body in range(4):
        queue.put(Entry(amqp_async.Message(body=body).encode()))
    assert log == [] and all(consumer.parked for consumer in consumers)
    credits[1].value = 1
    queue.credited(consumers[1])
    credits[0].value = 3
    queue.credited(consumers[0])
    assert log == [(1, 0), (0, 1), (0, 2), (0, 3)]
    queue.unsubscribe(consumers[0])  # parked again (no credit): leaves cleanly
    credits[1].value = 1
    queue.credited(consumers[1])
    queue.put(Entry(amqp_async.Message(body=4).encode()))
    assert log[-1] == (1, 4)
    assert queue.consumers == [consumers[1]]
    credits[0].value = 5
    queue.credited(consumers[0])  # gone: a late flow of its link brings it nothing
    queue.put(Entry(amqp_async.Message(body=5).encode()))
    assert log[-1] == (1, 4) and len(queue) == 1


def test_python_qpid_proton_receivers_idle_for_long_each_get_a_message_when_they_flow() -> None:
    count = 300
    with BrokerThread() as broker:
        idle = BlockingConnection(broker.url, timeout=TIMEOUT)
        try:
            receivers = [idle.create_receiver("crowd", credit=0, name=f"idle-{index}") for index in range(count)]
            sending = BlockingConnection(broker.url, timeout=TIMEOUT)
            try:
                sender = sending.create_sender("crowd")
                for body in range(count):
                    sender.send(ProtonMessage(body=body))
            finally:
                sending.close()
            queue = broker.broker.queues["crowd"]
            assert len(queue) == count
            assert sum(consumer.parked for consumer in queue.consumers) == count  # none asked again at each put
            bodies = []
            for receiver in receivers:  # each flows one credit, then waits for its message
                bodies.append(receiver.receive(timeout=TIMEOUT).body)
                receiver.accept()
            assert bodies == list(range(count))
        finally:
            idle.close()


@pytest.mark.anyio
async def test_receivers_sharing_a_session_of_one_transfer_get_every_message() -> None:
    """Both receivers are parked whenever the session's window is shut; the client's flow that opens it (on
    either link's handle, or none) unparks both."""
    count = 200
    with BrokerThread() as broker:
        async with amqp_async.connect(broker.url, reconnect=False) as connection:
            session = await connection.open_session(incoming_window=1)
            receivers = [await session.open_receiver("pair", credit=10) for _ in range(2)]
            sender = await connection.open_sender("pair")
            for body in range(count):
                await sender.send(amqp_async.Message(body=body))
            got: list[list[int]] = [[], []]

            async def take(index: int) -> None:
                while sum(map(len, got)) < count:
                    with anyio.move_on_after(0.5):
                        delivery = await receivers[index].receive()
                        got[index].append(delivery.message.body)
                        await delivery.accept()

            with anyio.fail_after(TIMEOUT):
                async with anyio.create_task_group() as group:
                    for index in range(2):
                        group.start_soon(take, index)
    assert sorted(got[0] + got[1]) == list(range(count))
    assert got[0] and got[1]  # both served (round-robin), not one left parked
