"""One queue holds at most its share of the memory limit: a stuck consumer does not block the producers of other
queues (broker/_flow.py, ``Flow.share_left``).

A consumer that took its prefetch and never settles (or a slow one, or none) lets its queue grow; its messages,
queued and delivered not settled, counted in the broker-wide ``max_memory``. Before, that one queue took the whole
limit, and a producer to any other queue got no credit at all, for as long as the consumer stayed stuck:
python-qpid-proton's ``BlockingSender.send`` to queue B timed out at its first message. Now a queue (or a topic's
subscription) holds at most ``queue_share`` (half by default) of what the other queues leave: its own producers
wait there, and the others keep room (``docs/broker-differences.md``, the memory limit).
"""

from __future__ import annotations

import subprocess
import sys

import anyio
import pytest

import amqp_async
from amqp_async import Message
from amqp_async.broker import BrokerThread

proton = pytest.importorskip("proton", reason="python-qpid-proton is a test dependency (the independent peer)")
from proton import Message as ProtonMessage  # noqa: E402 - after the importorskip that explains its absence
from proton import utils as proton_utils  # noqa: E402

try:
    from broker_serving import serving
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.broker_serving import serving

TIMEOUT = 20.0
#: How long python-qpid-proton's send to A waits for credit before it counts as held back.
HELD_BACK = 3.0
LIMIT = 8 << 20
SIZE = 64 << 10
#: What the producer to another queue sends: room for 30 such messages is left (half of the half A leaves).
COUNT = 20


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def test_a_stuck_consumer_on_queue_a_does_not_block_python_qpid_proton_s_producer_on_queue_b() -> None:
    with BrokerThread(port=0, max_memory=LIMIT) as broker:
        flow = broker.broker.flow
        stuck = proton_utils.BlockingConnection(broker.url, timeout=TIMEOUT)
        # a send waiting this long for credit is the producer held back (the broker grants credit at once otherwise)
        flooding = proton_utils.BlockingConnection(broker.url, timeout=HELD_BACK)
        other = None
        try:
            stuck.create_receiver("A", credit=10)  # takes 10 messages and never settles them
            sender_a = flooding.create_sender("A")
            with pytest.raises(proton.Timeout):
                for _ in range(LIMIT // SIZE):
                    sender_a.send(ProtonMessage(body=b"a" * SIZE))  # waits for credit at A's share
            held_by_a = flow.held_bytes
            other = proton_utils.BlockingConnection(broker.url, timeout=TIMEOUT)
            sender_b = other.create_sender("B")
            for _ in range(COUNT):  # before: Timeout at the first, the memory held by A
                sender_b.send(ProtonMessage(body=b"b" * SIZE))
            assert len(broker.broker.queues["B"]) == COUNT
            assert flow.held_bytes <= LIMIT
            assert flow.held_bytes - held_by_a >= COUNT * SIZE
            # A's messages, unsettled and queued, took its share at most: half the limit, nothing else held then
            assert held_by_a <= LIMIT // 2
        finally:
            for connection in (other, flooding, stuck):
                if connection is not None:
                    connection.close()


@pytest.mark.anyio
async def test_a_stuck_topic_subscriber_does_not_block_our_producer_to_a_queue() -> None:
    """A topic's subscription is a queue of its own: a subscriber that never settles stops the topic's producer at
    its share; a producer to a queue (our client) keeps sending."""
    async with serving(max_memory=LIMIT) as broker, amqp_async.connect(broker.url, reconnect=False) as conn:
        await conn.open_receiver("topic://news", credit=5)  # never settles
        news = await conn.open_sender("topic://news")
        body = b"n" * SIZE

        async def publish() -> None:
            while True:
                await news.send(Message(body=body))

        with anyio.fail_after(TIMEOUT):
            async with anyio.create_task_group() as group:
                group.start_soon(publish)
                while not broker.flow.starved:
                    await anyio.sleep(0.02)
                orders = await conn.open_sender("orders")
                for _ in range(COUNT):  # before: no credit while the subscription held the limit
                    await orders.send(Message(body=body))
                group.cancel_scope.cancel()
        assert len(broker.queue("orders")) == COUNT
        assert broker.flow.held_bytes <= LIMIT


@pytest.mark.anyio
async def test_with_a_share_of_one_a_queue_may_take_the_whole_limit() -> None:
    """``queue_share=1`` (``--queue-share 1``): one queue may fill the whole limit, as before (and as RabbitMQ's
    memory alarm, which blocks every publisher)."""
    async with (
        serving(max_memory=LIMIT, queue_share=1) as broker,
        amqp_async.connect(broker.url, reconnect=False) as conn,
    ):
        sender = await conn.open_sender("A")
        body = b"a" * SIZE

        async def flood() -> None:
            while True:
                await sender.send(Message(body=body))

        with anyio.fail_after(TIMEOUT):
            async with anyio.create_task_group() as group:
                group.start_soon(flood)
                while broker.flow.held_bytes < LIMIT * 3 // 4:  # past the default share: before, the same
                    await anyio.sleep(0.02)
                group.cancel_scope.cancel()


def test_the_command_line_refuses_a_share_out_of_range() -> None:
    for value in ("0", "1.5", "half"):
        done = subprocess.run(
            [sys.executable, "-m", "amqp_async.broker", "--port", "0", "--queue-share", value],
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
        assert done.returncode == 2, done
        assert "--queue-share" in done.stderr
