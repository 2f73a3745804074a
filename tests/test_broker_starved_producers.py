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
"""

from __future__ import annotations

import anyio
import pytest

import amqp_async
from amqp_async.broker import Broker
from amqp_async.broker._flow import Flow, Producer

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
    broker = Broker(port=0, max_memory=2 << 20, expiry_interval=3600)
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
