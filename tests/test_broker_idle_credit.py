"""Credit that producers hold and do not use never holds another producer back for good (broker/_flow.py).

The broker counts the room it may grant less the credit every producer holds. A sender opened and left idle keeps
its credit, and so does one granted its window when messages were smaller than those since: the room promised to
them is never turned into messages, so no settlement ever frees it. Before, a producer starved by such credit
waited for ever with the broker empty (a 3 MiB message sent and consumed, then a second sender's first ``send()``
hung). Now the broker's periodic sweep gives producers starved since the last sweep a share of the room really free.

The producers are python-qpid-proton's BlockingConnection (its ``send`` waits for credit, then for the outcome)
and our client.
"""

from __future__ import annotations

import anyio
import pytest

import amqp_async
from amqp_async import Message
from amqp_async.broker import Broker, BrokerThread
from amqp_async.broker._flow import UNSEEN_SIZE, WINDOW, Flow, Producer

proton = pytest.importorskip("proton", reason="python-qpid-proton is a test dependency (the independent peer)")
from proton import Message as ProtonMessage  # noqa: E402 - after the importorskip that explains its absence
from proton import utils as proton_utils  # noqa: E402

TIMEOUT = 20.0
#: Sweeps often, so that a starved producer is seen starved at two sweeps soon.
SWEEP = 0.1
LARGE = 3 << 20


class Link:
    """A producer's link as the flow control sees it: its credit."""

    def __init__(self) -> None:
        self.value = 0

    def credit(self) -> int:
        return self.value

    def grant(self, room: int) -> None:
        self.value = room


def producer(flow: Flow) -> Link:
    link = Link()
    flow.add(Producer(link.credit, link.grant, None))
    return link


def test_a_producer_starved_by_unused_credit_gets_a_share_of_the_free_room_at_the_second_sweep() -> None:
    flow = Flow(max_memory=100 * LARGE)
    flow.hold(UNSEEN_SIZE)  # a message of 64 KiB, consumed: nothing held
    flow.drop(UNSEEN_SIZE)
    idle = [producer(flow) for _ in range(2)]
    assert [link.value for link in idle] == [WINDOW, WINDOW]  # 250 MiB of 300 promised, counted at 64 KiB each
    starved = producer(flow)
    assert starved.value == 0  # the room left (800 messages) is less than a window worth granting
    assert flow.unstall() == 0  # starved since the last sweep only: not yet
    assert flow.unstall() == 1
    # half the room really free (4,800 messages of 64 KiB), at most half a window
    assert starved.value == WINDOW // 2
    assert not flow.starved


def test_the_sweep_grants_nothing_when_the_memory_is_really_full() -> None:
    flow = Flow(max_memory=100 * 1000)
    for _ in range(100):
        flow.hold(1000)
    starved = [producer(flow) for _ in range(3)]
    flow.unstall()
    assert flow.unstall() == 0
    assert [link.value for link in starved] == [0, 0, 0] and len(flow.starved) == 3
    for _ in range(60):
        flow.drop(1000)  # consumers take messages: the room goes out as before, in windows worth granting
    assert any(link.value for link in starved)


def test_the_sweep_leaves_the_last_of_the_room_to_settlements() -> None:
    """Less room really free than a grant worth making is the limit reached, not credit unused: no share (before
    this rule, each sweep gave half of what was left, a trickle towards the limit that a flood test caught)."""
    flow = Flow(max_memory=100 * 1000)
    for _ in range(95):
        flow.hold(1000)
    starved = producer(flow)
    flow.unstall()
    assert flow.unstall() == 0 and starved.value == 0


def test_shares_of_several_starved_producers_stay_within_half_the_free_room() -> None:
    flow = Flow(max_memory=1000 * 1000)
    hog = producer(flow)
    flow.hold(1000)
    flow.drop(1000)
    hog.value = 10_000  # holds far more than the limit's room (granted when messages were smaller)
    # Set here behind the flow's back (a grant is counted as it is made): the flow keeps running totals of the
    # credit held, and its periodic pass counts every producer anew.
    assert flow.unstall() == 0
    starved = [producer(flow) for _ in range(10)]
    flow.unstall()
    flow.unstall()
    granted = [link.value for link in starved]
    assert all(granted) and sum(granted) <= 500


def test_python_qpid_proton_sends_after_a_large_message_left_the_credit_counted_at_its_size() -> None:
    with BrokerThread(port=0, expiry_interval=SWEEP) as broker:

        async def large_then_idle() -> None:
            async with amqp_async.connect(broker.url) as conn:
                first = await conn.open_sender("large")
                await first.send(Message(body=b"x" * LARGE))
                receiver = await conn.open_receiver("large")
                await (await receiver.receive()).accept()
                # its credit held unused: its window at the first (unseen) size, lowered once its first message
                # showed the size to what the memory limit leaves (84 of 3 MiB messages under 256 MiB)
                assert first.credit > 50
                connection = proton_utils.BlockingConnection(broker.url, timeout=TIMEOUT)
                try:
                    sender = connection.create_sender("after")
                    # before: Timeout after TIMEOUT seconds, the broker empty
                    await anyio.to_thread.run_sync(lambda: sender.send(ProtonMessage(body="small")))
                finally:
                    connection.close()

        anyio.run(large_then_idle)
        assert len(broker.broker.queue("after")) == 1


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_our_sender_to_a_bounded_queue_is_not_held_back_by_an_idle_sender_to_it() -> None:
    async with (
        Broker(port=0, max_queue_depth=10, expiry_interval=SWEEP) as broker,
        amqp_async.connect(broker.url) as conn,
    ):
        idle = await conn.open_sender("bounded")
        assert idle.credit == 10  # the queue's whole room
        busy = await conn.open_sender("bounded")
        assert busy.credit == 0
        with anyio.fail_after(TIMEOUT):
            await busy.send(Message(body=b"through"))  # before: waited for ever, the queue empty
        assert len(broker.queue("bounded")) == 1
