"""The nodes the embedded broker makes count in its memory limit (amqp_async/broker/_flow.py, NODE_SIZE).

A queue is made on first use: by an attach, or a message to a new address. Before, a peer could make them for
as long as it liked without sending one message, each attach of about 100 bytes leaving an empty queue of about
1.4 KB behind (measured with tracemalloc), outside ``--max-memory``. Now each node counts 1,536 bytes; one the
limit has no room for is not made, and the attach (or the message) is refused with
``amqp:resource-limit-exceeded``, naming the limit. Nodes deleted (dynamic queues, subscriptions) free theirs.

- python-qpid-proton attaching receivers to new addresses is refused once the room is used; what exists still works.
- A message to a new address through the anonymous relay is rejected with the same condition.
- Subscriptions made and deleted a thousand times over fit in room for a few dozen.
- With ``--data-dir``, queues loaded at start are counted, never refused.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

import amqp_async
from amqp_async.broker import Broker, BrokerThread
from amqp_async.broker._flow import NODE_SIZE

proton = pytest.importorskip("proton", reason="python-qpid-proton is a test dependency (the independent peer)")
from proton import utils as proton_utils  # noqa: E402 - after the importorskip that explains its absence

pytestmark = pytest.mark.anyio

TIMEOUT = 20.0
LIMIT = 64 * 1024  # room for 42 nodes and no message: each test's own small broker
CONDITION = "amqp:resource-limit-exceeded"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def test_python_qpid_proton_attaching_to_new_addresses_is_refused_once_the_room_is_used() -> None:
    with BrokerThread(max_memory=LIMIT) as broker:
        connection = proton_utils.BlockingConnection(broker.url, timeout=TIMEOUT)
        try:
            made = 0
            with pytest.raises(proton_utils.LinkDetached) as raised:
                for index in range(10 * (LIMIT // NODE_SIZE)):
                    connection.create_receiver(f"queue-{index}").close()
                    made += 1
            assert made == LIMIT // NODE_SIZE
            assert raised.value.condition == CONDITION
            remote = raised.value.link.remote_condition
            assert f"no room for a new queue 'queue-{made}' within the broker's memory limit" in remote.description
            # the queues made still take attaches (the room is the nodes': their producers get no credit)
            connection.create_receiver("queue-0").close()
        finally:
            connection.close()


async def test_a_message_to_a_new_address_is_rejected_once_the_room_is_used() -> None:
    async with Broker(port=0, max_memory=LIMIT) as broker, amqp_async.connect(broker.url, reconnect=False) as conn:
        relay = await conn.open_sender(None)  # the anonymous relay: the address in each message
        accepted = 0
        with anyio.fail_after(TIMEOUT), pytest.raises(amqp_async.MessageRejected) as raised:
            for index in range(10 * (LIMIT // NODE_SIZE)):
                await relay.send(amqp_async.Message(body=index, address=f"new-{index}"))
                accepted += 1
        assert raised.value.condition == CONDITION
        assert "no room for a new queue" in str(raised.value)
        assert len(broker.queues) == accepted < LIMIT // NODE_SIZE  # the messages take room too
        assert broker.flow.node_bytes + broker.flow.held_bytes <= LIMIT


async def test_subscriptions_made_and_deleted_free_their_room() -> None:
    # room for the nodes of the test's end (a topic and a subscription) and a first message (64 KiB assumed)
    broker = Broker(port=0, max_memory=4 * LIMIT)
    async with broker, amqp_async.connect(broker.url, reconnect=False) as conn:
        with anyio.fail_after(TIMEOUT * 3):
            for _ in range(1_000):  # 2,000 nodes made and deleted, in room for 170
                receiver = await conn.open_receiver("topic://news")
                await receiver.close()
                dynamic = await conn.open_receiver(None, dynamic=True)
                await dynamic.close()
            assert broker.flow.node_bytes == NODE_SIZE  # what is left: the topic
            sender = await conn.open_sender("topic://news")
            async with conn.open_receiver("topic://news") as receiver:
                await sender.send(amqp_async.Message(body="after"))
                delivery = await receiver.receive()
                assert delivery.message.body == "after"
                await delivery.accept()


async def test_queues_loaded_from_the_data_dir_are_counted_and_never_refused(tmp_path: Path) -> None:
    data = tmp_path / "data"
    async with Broker(port=0, data_dir=data) as broker, amqp_async.connect(broker.url, reconnect=False) as conn:
        for index in range(60):
            sender = await conn.open_sender(f"kept-{index}")
            await sender.send(amqp_async.Message(body=index, durable=True))
    # restarted with room for fewer nodes than it kept: all loaded, and counted; no new one
    async with Broker(port=0, data_dir=data, max_memory=LIMIT) as broker:
        assert len(broker.queues) == 60 and broker.flow.node_bytes == 60 * NODE_SIZE
        async with amqp_async.connect(broker.url, reconnect=False) as conn:
            receiver = await conn.open_receiver("kept-59")
            delivery = await receiver.receive()
            assert delivery.message.body == 59
            await delivery.accept()
            with pytest.raises(amqp_async.LinkError) as raised:
                await conn.open_receiver("not-kept")
            assert raised.value.condition == CONDITION


async def test_a_commit_to_a_new_address_without_room_rolls_back_rather_than_lose_the_message() -> None:
    broker = Broker(port=0, max_memory=LIMIT)
    async with broker, amqp_async.connect(broker.url, reconnect=False) as conn:
        with anyio.fail_after(TIMEOUT):
            relay = await conn.open_sender(None)
            transaction = await conn.transaction()
            await relay.send(amqp_async.Message(body="kept?", address="late-node"), transaction=transaction)
            with pytest.raises(amqp_async.LinkError):  # the room goes to other nodes meanwhile
                for index in range(LIMIT // NODE_SIZE + 1):
                    await (await conn.open_receiver(f"filler-{index}")).close()
            with pytest.raises(amqp_async.TransactionRolledBack) as raised:
                await transaction.commit()
            assert "has no room" in str(raised.value)
            assert "late-node" not in broker.queues  # nothing routed, nothing made
