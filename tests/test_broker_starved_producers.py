"""Many producers waiting for memory do not stop the broker (amqp_async/broker/_flow.py).

Before, every settlement made the broker look at each starved producer, and for each one it summed the credit of
every producer: with 1,000 producers starved by the memory limit, that was a million credit reads per settlement.
The broker stopped answering, heartbeats included, and its clients declared it gone after 30 s (a probe run by
hand, ``/tmp/probe/starved.py``, not committed). Now a pass sums the credit once, and comes only once the bytes
settled make up what the least needy producer lacked at the last pass. The same probe received and settled
31,785 msg/s with 1,000 starved producers, and 57,000–95,000 with one.

- Counted: the credit reads of 400 settlements with 200 starved producers stay linear.
- End to end: 300 producers starved by a small memory limit; a consumer takes everything at once, and the room
  goes to producers again, which send.
- Many producers to one queue: attaching them, and removing them when starved, reads credit linearly (the flow
  keeps running totals of the credit held, checked against the sums over random histories), and 2,000 senders of
  one connection all send, and leave nothing counted once gone.
"""

from __future__ import annotations

from random import Random

import anyio
import pytest

import amqp_async
from amqp_async.broker import Broker
from amqp_async.broker._flow import Flow, Producer
from amqp_async.broker._nodes import Queue

TIMEOUT = 30.0


class Counted:
    """A producer's link: its credit, counting the reads."""

    reads = 0

    def __init__(self) -> None:
        self.value = 0

    def credit(self) -> int:
        Counted.reads += 1
        return self.value

    def grant(self, room: int) -> None:
        self.value = room


def test_settlements_with_many_producers_starved_read_credit_linearly() -> None:
    size = 1000
    flow = Flow(max_memory=3_000 * size)
    for _ in range(3_000):
        flow.hold(size)  # the memory is full
    links = [Counted() for _ in range(200)]
    for link in links:
        flow.add(Producer(link.credit, link.grant, None))
    assert len(flow.starved) == 200
    Counted.reads = 0
    for _ in range(400):
        flow.drop(size)
    # before: each settlement summed every producer's credit for each starved one: 400 x 200 x 200 reads
    assert Counted.reads < 50 * (400 + 200), Counted.reads
    assert not any(link.value for link in links)  # 400 messages of room: not yet a window worth granting
    for _ in range(1_100):
        flow.drop(size)
    # the room made went to producers, a window worth granting at a time (no trickle)
    granted = [link.value for link in links if link.value]
    assert granted and all(value >= 1_000 for value in granted)


def test_producers_starved_resume_once_the_memory_is_free() -> None:
    size = 1000
    flow = Flow(max_memory=3_000 * size)
    for _ in range(3_000):
        flow.hold(size)
    links = [Counted() for _ in range(10)]
    for link in links:
        flow.add(Producer(link.credit, link.grant, None))
    for _ in range(3_000):
        flow.drop(size)
    # the room (3,000 messages) went out, in windows worth granting, and no more than it
    granted = [link.value for link in links if link.value]
    assert granted and all(value >= 1_000 for value in granted) and sum(granted) <= 3_000
    assert len(flow.starved) == 10 - len(granted)


@pytest.mark.anyio
async def test_three_hundred_starved_producers_do_not_stop_the_broker() -> None:
    body = b"x" * 1000
    # No periodic sweep within the test: producers starved longer than one would get a share of the room the first
    # producer has not filled yet (tests/test_broker_idle_credit.py); here the memory limit alone holds them.
    # 4 MiB: the 300 links take 750 KiB of it (ENDPOINT_SIZE each), the messages the rest.
    broker = Broker(port=0, max_memory=4 << 20, expiry_interval=3600)
    async with broker, amqp_async.connect(broker.url, reconnect=False) as conn:
        with anyio.fail_after(TIMEOUT * 2):
            producers = [await conn.open_sender("crowd")]
            # A message first, so that the size is known: before one, a producer the guessed room starves gets a
            # credit to show the size with (tests/test_broker_first_credit.py), and these would hold one each.
            await producers[0].send(amqp_async.Message(body=body))
            producers += [await conn.open_sender("crowd") for _ in range(299)]
            with anyio.move_on_after(3):
                while True:  # the first producer fills the memory
                    await producers[0].send(amqp_async.Message(body=body))
            assert len(broker.flow.starved) >= 299
            held = len(broker.queues["crowd"])
            # before: the broker stalled at the first settlements, and the connection was lost after 30 s
            receiver = await conn.open_receiver("crowd", credit=500)
            for _ in range(held):
                await (await receiver.receive()).accept()
            # the room went to producers, a window worth granting each (not a trickle to all 300), and they send
            granted = [producer for producer in producers if producer.credit > 0]
            assert granted and len(broker.flow.starved) < 300
            for producer in granted:
                await producer.send(amqp_async.Message(body=b"again"))
            for _ in granted:
                await (await receiver.receive()).accept()


def test_attaching_many_producers_to_one_queue_reads_credit_linearly() -> None:
    """Each attach counted the credit of every producer (in all, and of its queue): 4,000 senders to one queue took
    6 s to attach. The credit held is a running total now."""
    flow = Flow(max_memory=100 << 20)
    queue = Queue("crowd", flow=flow, max_depth=1_000_000)
    Counted.reads = 0
    links = [Counted() for _ in range(2_000)]
    for link in links:
        flow.add(Producer(link.credit, link.grant, queue))
    # before: an attach read every producer's credit twice (the memory room, and the queue's): 4,000,000 reads
    assert Counted.reads < 10 * len(links), Counted.reads
    assert all(link.value for link in links)


def test_removing_many_starved_producers_reads_credit_linearly() -> None:
    """A producer gone made a pass over every starved one, even when it held no credit to free: a connection with
    4,000 starved senders took 19 s to end, its broker answering nobody meanwhile."""
    size = 1000
    flow = Flow(max_memory=3_000 * size)
    for _ in range(3_000):
        flow.hold(size)  # the memory is full
    producers = [Producer(link.credit, link.grant, None) for link in [Counted() for _ in range(2_000)]]
    for producer in producers:
        flow.add(producer)
    assert len(flow.starved) == 2_000
    Counted.reads = 0
    flow.remove(*producers[:1_000])  # a connection's producers, at its end
    for producer in producers[1_000:]:
        flow.remove(producer)  # links detached one by one
    assert Counted.reads < 10 * len(producers), Counted.reads
    assert not flow.producers and not flow.starved


def test_the_running_totals_are_the_credit_the_producers_hold() -> None:
    """Whatever producers come, send, go and get credit in, the flow's totals are the sums it used to compute."""
    random = Random(7)
    size = 1000
    flow = Flow(max_memory=400 * size)
    queues = [Queue(f"q{i}", flow=flow, max_depth=depth) for i, depth in enumerate((50, 300, None))]
    live: list[tuple[Counted, Producer]] = []
    held: list[int] = []
    for _ in range(5_000):
        action = random.random()
        if action < 0.1 or not live:
            link = Counted()
            producer = Producer(link.credit, link.grant, random.choice([*queues, None]))
            flow.add(producer)
            live.append((link, producer))
        elif action < 0.15:
            link, producer = live.pop(random.randrange(len(live)))
            flow.remove(producer)
        elif action < 0.6:
            link, producer = random.choice(live)
            if link.value:  # it sends a message: the broker holds it, and tops the producer up
                link.value -= 1
                flow.hold(size)
                held.append(size)
                flow.top_up(producer)
        elif held:
            flow.drop(held.pop())  # a consumer settles one
        assert flow._promised == sum(link.value for link, _ in live)
        for queue in queues:
            by_queue = sum(link.value for link, producer in live if producer.target is queue)
            assert flow._promised_to.get(id(queue), 0) == by_queue
    for _, producer in live:
        flow.remove(producer)
    assert flow._promised == 0 and flow._promised_to == {}


@pytest.mark.anyio
async def test_two_thousand_senders_to_one_queue_all_send_and_leave_nothing_counted() -> None:
    broker = Broker(port=0, max_memory=64 << 20)
    async with broker:
        async with amqp_async.connect(broker.url, reconnect=False) as conn:
            with anyio.fail_after(TIMEOUT * 2):
                senders = [await conn.open_sender("crowd") for _ in range(2_000)]
                assert sorted(sender._engine_link.handle for sender in senders[-3:]) == [1_997, 1_998, 1_999]
                for number, sender in enumerate(senders):
                    await sender.send(amqp_async.Message(body=number))
                receiver = await conn.open_receiver("crowd", credit=500)
                bodies = []
                for _ in senders:
                    delivery = await receiver.receive()
                    await delivery.accept()
                    bodies.append(delivery.message.body)
                assert sorted(bodies) == list(range(2_000))
        with anyio.fail_after(TIMEOUT):
            while broker.flow.producers:
                await anyio.sleep(0.01)
        assert broker.flow._promised == 0 and broker.flow._promised_to == {}
