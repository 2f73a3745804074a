"""§3.4.5 modified with undeliverable-here: the message "MUST NOT be redelivered to the same link"; other links,
attached then or later, may have it.

The broker kept the refusing consumers as ``id(consumer)`` in the message's exclusion set, and never dropped them:
once a consumer was freed, a brand-new consumer could get the same ``id()`` and find itself excluded from a
message it had never seen (the auditor's repro: 22 rounds of 100 in which a brand-new consumer was not given the
only queued message). Consumers now have keys that are never reused, and a consumer's exclusions go when it does.
"""

from __future__ import annotations

import anyio
import pytest
from proton import Disposition
from proton import Message as ProtonMessage
from proton.utils import BlockingConnection

import amqp_async
from amqp_async import Message
from amqp_async.broker import Broker, BrokerThread

try:
    from broker_serving import serving
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.broker_serving import serving

TIMEOUT = 10.0
ROUNDS = 40


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def connect(broker: Broker) -> amqp_async.Connection:
    return amqp_async.connect(broker.url, reconnect=False)


async def receive(receiver: amqp_async.Receiver) -> amqp_async.Delivery:
    """The next delivery (the broker has one queued for this receiver: it comes at once, or the test fails)."""
    with anyio.fail_after(TIMEOUT):
        return await receiver.receive()


@pytest.mark.anyio
async def test_every_brand_new_consumer_is_offered_a_message_others_refused() -> None:
    async with serving() as broker:
        async with connect(broker) as conn:
            await (await conn.open_sender("uh")).send(Message(body="only"))
        queue = broker.queues["uh"]
        for _ in range(ROUNDS):
            async with connect(broker) as conn:
                receiver = await conn.open_receiver("uh", credit=1)
                delivery = await receive(receiver)  # was: withheld now and then (a reused id())
                assert delivery.message.body == "only"
                await delivery.modify(delivery_failed=False, undeliverable_here=True)
                await receiver.close()  # the broker answers the detach once the consumer is gone
            # the refusing consumer is gone: so is its exclusion (the set grew by one each round)
            assert not queue.consumers
            assert [entry.excluded for entry in queue.entries] == [None]


@pytest.mark.anyio
async def test_the_refusing_link_is_passed_over_while_it_lasts_and_a_later_link_gets_the_message() -> None:
    async with serving() as broker, connect(broker) as conn:
        sender = await conn.open_sender("uh")
        await sender.send(Message(body="refused"))
        refusing = await conn.open_receiver("uh", credit=1)
        delivery = await receive(refusing)
        assert delivery.message.body == "refused"
        await delivery.modify(delivery_failed=False, undeliverable_here=True)
        # back at the head of the queue, but not for this link (its credit is topped up): it gets the next one
        await sender.send(Message(body="next"))
        following = await receive(refusing)
        assert following.message.body == "next"
        await following.accept()
        entry = broker.queues["uh"].entries[0]
        assert entry.message.body == "refused" and entry.excluded is not None and len(entry.excluded) == 1
        # the refusing link goes: the exclusion with it; a link attached later takes the message
        await refusing.close()
        assert entry.excluded is None
        later = await conn.open_receiver("uh", credit=1)
        taken = await receive(later)
        assert taken.message.body == "refused"
        await taken.accept()


@pytest.mark.anyio
async def test_an_exclusion_given_in_a_transaction_committed_after_the_link_went_is_not_kept() -> None:
    """A transactional outcome takes effect at the commit (§4.4.2); a link gone by then leaves no exclusion."""
    async with serving() as broker, connect(broker) as conn:
        await (await conn.open_sender("uh")).send(Message(body="refused"))
        receiver = await conn.open_receiver("uh", credit=1)
        delivery = await receive(receiver)
        transaction = await conn.transaction()
        await delivery.modify(delivery_failed=False, undeliverable_here=True, transaction=transaction)
        await receiver.close()
        await transaction.commit()
        queue = broker.queues["uh"]
        assert [(entry.message.body, entry.excluded) for entry in queue.entries] == [("refused", None)]
        fresh = await conn.open_receiver("uh", credit=1)
        assert (await receive(fresh)).message.body == "refused"


def test_proton_brand_new_consumers_each_get_the_refused_message() -> None:
    """The auditor's repro with python-qpid-proton: each round a new connection and link, which refuses the only
    message with undeliverable-here and goes."""
    with BrokerThread() as thread:
        conn = BlockingConnection(thread.url, timeout=TIMEOUT)
        conn.create_sender("uh").send(ProtonMessage(body="only-message"))
        conn.close()
        for _ in range(ROUNDS):
            conn = BlockingConnection(thread.url, timeout=TIMEOUT)
            try:
                receiver = conn.create_receiver("uh", credit=1)
                message = receiver.receive(timeout=TIMEOUT)  # was: a timeout now and then
                assert message.body == "only-message"
                delivery = receiver.fetcher.unsettled.popleft()
                delivery.local.undeliverable = True
                delivery.update(Disposition.MODIFIED)
                delivery.settle()
                receiver.close()  # returns once the broker answered the detach: the consumer is gone
            finally:
                conn.close()
            excluded = [entry.excluded for entry in thread.broker.queues["uh"].entries]
            assert excluded == [None]
