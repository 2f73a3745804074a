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

Attached links count too (ENDPOINT_SIZE, 2.5 kB: 20,000 idle receivers grew the broker by 46 MiB, outside the limit,
one attach frame each). They may take half the limit, whatever the messages take (a broker full of messages still
takes the consumer that drains it); past it an attach is refused with ``amqp:resource-limit-exceeded``. A link's
room comes back at its detach, its session's end or its connection's.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

import amqp_async
from amqp_async.broker import Broker, BrokerThread
from amqp_async.broker._flow import ENDPOINT_SIZE, NODE_SIZE
from amqp_async.codec.performatives import Attach, Begin, End, Open
from amqp_async.codec.terminus import Source
from amqp_async.codec.transactions import Coordinator

try:
    from frames import AMQP_HEADER, frame
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.frames import AMQP_HEADER, frame

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
            assert made == (LIMIT - ENDPOINT_SIZE) // NODE_SIZE  # the connection's session takes its room too
            assert raised.value.condition == CONDITION
            remote = raised.value.link.remote_condition
            assert remote.description == (
                f"no room for a new queue 'queue-{made}' within the broker's memory limit ({LIMIT} bytes): "
                "run the broker with a larger --max-memory"
            )  # it names the option to change
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


def test_python_qpid_proton_attaching_links_is_refused_past_half_the_limit_and_room_comes_back() -> None:
    links = (LIMIT // 2) // ENDPOINT_SIZE - 1  # the connection's session takes the room of one
    with BrokerThread(max_memory=LIMIT) as broker:
        connection = proton_utils.BlockingConnection(broker.url, timeout=TIMEOUT)
        try:
            receivers = [connection.create_receiver("crowd", name=f"r-{index}") for index in range(links)]
            with pytest.raises(proton_utils.LinkDetached) as raised:
                connection.create_receiver("crowd", name="one-too-many")
            assert raised.value.condition == CONDITION
            description = raised.value.link.remote_condition.description
            assert description == (
                "no room for another link: sessions and links take at most half the broker's memory limit "
                f"({LIMIT} bytes): run the broker with a larger --max-memory"
            )
            receivers.pop().close()  # a detach gives its room back
            receivers.append(connection.create_receiver("crowd", name="in-its-place"))
            with pytest.raises(proton_utils.LinkDetached) as raised:
                connection.create_sender("crowd")  # a producer's link is refused too
            assert raised.value.condition == CONDITION
        finally:
            connection.close()
        # the connection's end gives every link's room back (the broker handles it in its own thread)
        _wait_for(lambda: broker.broker.flow.endpoint_bytes == 0)


async def test_a_broker_full_of_messages_still_takes_the_consumer_that_drains_it() -> None:
    body = b"x" * 4096
    # one queue may fill the whole limit here (its share: test_broker_queue_share.py)
    async with (
        Broker(port=0, max_memory=LIMIT, queue_share=1) as broker,
        amqp_async.connect(broker.url, reconnect=False) as conn,
    ):
        sender = await conn.open_sender("full")
        sent = 0
        with anyio.move_on_after(1):  # until the memory limit gives no more credit
            while True:
                await sender.send(amqp_async.Message(body=body))
                sent += 1
        assert sent and broker.flow.held_bytes + broker.flow.endpoint_bytes > LIMIT - 2 * len(body)
        with anyio.fail_after(TIMEOUT):
            receiver = await conn.open_receiver("full", credit=sent)
            for _ in range(sent):
                await (await receiver.receive()).accept()


async def test_a_sessions_end_gives_its_links_room_back_and_sessions_past_the_room_are_ended() -> None:
    room = (LIMIT // 2) // ENDPOINT_SIZE
    async with Broker(port=0, max_memory=LIMIT) as broker, amqp_async.connect(broker.url, reconnect=False) as conn:
        flow = broker.flow
        with anyio.fail_after(TIMEOUT):
            await conn.open_sender("q")  # the connection's own session is begun
            before = flow.endpoint_bytes
            for _ in range(3):  # more sessions and links in all than the room takes at once
                session = await conn.open_session()
                for index in range(room - before // ENDPOINT_SIZE - 1):
                    await session.open_receiver("q", name=f"r-{index}")
                assert flow.endpoint_bytes == room * ENDPOINT_SIZE
                with pytest.raises(amqp_async.SessionError) as raised:
                    await (await conn.open_session()).open_receiver("q")  # ended at its begin
                assert raised.value.condition == CONDITION
                assert "no room for another session" in str(raised.value)
                await session.close()
                assert flow.endpoint_bytes == before
            sender = await conn.open_sender("q")  # what was there goes on
            await sender.send(amqp_async.Message(body="still here"))


def test_transaction_controllers_count_as_links_until_their_session_ends() -> None:
    """A coordinator link (§4.1) counts as any link, and gives its room back when its session ends (raw frames: a
    peer that ends the session without detaching it)."""
    with BrokerThread(max_memory=LIMIT) as broker:
        flow = broker.broker.flow
        with socket.create_connection(("127.0.0.1", broker.broker.port), timeout=TIMEOUT) as sock:
            sock.sendall(AMQP_HEADER + frame(Open(container_id="raw-controller")))
            sock.sendall(frame(Begin(next_outgoing_id=0, incoming_window=100, outgoing_window=100)))
            controller = Attach(
                name="txn", handle=0, role=False, source=Source(), target=Coordinator(), initial_delivery_count=0
            )
            sock.sendall(frame(controller))
            _wait_for(lambda: flow.endpoint_bytes == 2 * ENDPOINT_SIZE)  # its session, and it
            sock.sendall(frame(End()))
            _wait_for(lambda: flow.endpoint_bytes == 0)


def _wait_for(predicate: Callable[[], bool]) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert predicate()
