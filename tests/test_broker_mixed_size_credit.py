"""A producer of small messages gets credit while the memory limit has room for them, whatever large messages the
broker holds or held (broker/_flow.py).

The memory limit counted every producer's credit in messages of one size for all: the larger of the average size
held and the last size seen. One large message made every credit cost its size: with ``--max-memory 256MiB`` (207
MiB left for messages), 49 MiB of 100 kB messages and one 100 MB message held (144 MiB), a producer of 100-byte
messages got no credit at all, 63 MiB free: python-qpid-proton's ``BlockingSender.send`` timed out, a sender with
no timeout hung, and the broker logged its memory full. Now each producer's credit is counted in messages of its
own size (its first at :data:`UNSEEN_SIZE` at most, or one credit to show it), and a large message still waits for
room: the bytes held never pass the limit.

Here a smaller scale: a 24 MiB limit, 8 MB of 100 kB messages and one of 10 MB held (17 MiB), 6.8 MiB free.
"""

from __future__ import annotations

import threading
import time

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
LIMIT = 24 << 20
FILLER = 100_000
FILLERS = 80
LARGE = 10_000_000
SMALL = 100


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def test_python_qpid_proton_sends_small_messages_after_a_large_one_while_there_is_room() -> None:
    with BrokerThread(port=0, max_memory=LIMIT) as broker:
        connection = proton_utils.BlockingConnection(broker.url, timeout=TIMEOUT)
        try:
            filler = connection.create_sender("filler")
            for _ in range(FILLERS):
                filler.send(ProtonMessage(body=b"f" * FILLER))
            filler.send(ProtonMessage(body=b"x" * LARGE))
            flow = broker.broker.flow
            assert LIMIT - flow.held_bytes < LARGE  # no room for another large message: counted at its size, none
            small = connection.create_sender("small")
            for _ in range(200):  # before: Timeout after TIMEOUT seconds, at the first
                small.send(ProtonMessage(body=b"s" * SMALL))
        finally:
            connection.close()
        assert len(broker.broker.queue("small")) == 200
        assert broker.broker.flow.held_bytes <= LIMIT


@pytest.mark.anyio
async def test_our_sender_of_small_messages_gets_windows_and_one_of_large_messages_waits_for_room() -> None:
    # one queue may fill the whole limit here (its share: test_broker_queue_share.py)
    async with serving(max_memory=LIMIT, queue_share=1) as broker, amqp_async.connect(broker.url) as conn:
        filler = await conn.open_sender("filler")
        large = await conn.open_sender("large")
        with anyio.fail_after(TIMEOUT):
            await filler.send_many([Message(body=b"f" * FILLER)] * FILLERS)
            await large.send(Message(body=b"x" * LARGE))
            assert broker.flow.held_bytes > LIMIT - LARGE
            small = await conn.open_sender("small")
            await small.send(Message(body=b"s" * SMALL))  # before: no credit, for as long as nothing was consumed
            await small.send_many([Message(body=b"s" * SMALL)] * 2000)
        assert len(broker.queue("small")) == 2001
        # The large sender's credit is counted at its own size: its next message waits for room (neither taken
        # past the limit nor rejected), and goes once consumers made room.
        taken: list[object] = []

        async def send_large() -> None:
            taken.append(await large.send(Message(body=b"y" * LARGE)))

        receiver = await conn.open_receiver("filler", credit=10)
        with anyio.fail_after(TIMEOUT):
            async with anyio.create_task_group() as group:
                group.start_soon(send_large)
                await anyio.sleep(0.5)  # it would be taken in this time if it had credit
                assert not taken and broker.flow.held_bytes <= LIMIT
                for _ in range(FILLERS):  # room is made: it goes through
                    await (await receiver.receive()).accept()
        assert taken and isinstance(taken[0], amqp_async.Accepted)
        assert broker.flow.held_bytes <= LIMIT


@pytest.mark.anyio
async def test_a_flood_of_small_messages_after_a_large_one_stays_within_the_limit() -> None:
    """The credit of small producers follows the memory free: a flood with no consumer levels off at the limit
    (its sends wait), nothing is rejected, and the bytes held never pass it."""
    async with serving(max_memory=LIMIT, expiry_interval=0.1) as broker, amqp_async.connect(broker.url) as conn:
        flow = broker.flow
        most = 0
        hold = flow.hold

        def watched(size: int) -> None:
            nonlocal most
            hold(size)
            most = max(most, flow.held_bytes)

        flow.hold = watched  # type: ignore[method-assign]
        large = await conn.open_sender("large")
        with anyio.fail_after(TIMEOUT):
            await large.send(Message(body=b"x" * LARGE))
        senders = [await conn.open_sender(f"flood-{index}") for index in range(3)]
        sent = [0] * len(senders)

        async def flood(index: int) -> None:
            while True:
                await senders[index].send_many([Message(body=b"s" * 2000)] * 50)
                sent[index] += 50

        with anyio.move_on_after(TIMEOUT):
            async with anyio.create_task_group() as group:
                for index in range(len(senders)):
                    group.start_soon(flood, index)
                # until the flood levels off: no message taken for a while (the producers wait for credit)
                last = -1
                while sum(sent) != last:
                    last = sum(sent)
                    await anyio.sleep(1.0)
                group.cancel_scope.cancel()
        assert all(sent), f"a producer got no credit: {sent}"
        assert most <= LIMIT
        assert flow.held_bytes > LIMIT - LARGE  # it did fill the room the large message left (up to the limit)


def test_python_qpid_proton_switching_from_small_to_large_messages_waits_for_credit_rather_than_is_rejected() -> None:
    """A producer's credit follows the sizes it sends: lowered when its messages grow (§2.6.7, a flow lowering its
    link-credit). Before, the window granted for its 100-byte messages (1,981 credits under 8 MiB) was kept when it
    switched to 256 KiB messages: once the memory was full, 29 of 60 were rejected (``SendException(REJECTED)``)
    beside a consumer taking them."""
    limit, size, count = 8 << 20, 256 << 10, 60
    with BrokerThread(port=0, max_memory=limit) as broker:
        connection = proton_utils.BlockingConnection(broker.url, timeout=TIMEOUT)
        failures: list[BaseException] = []
        sent: list[int] = []
        try:
            sender = connection.create_sender("switching")
            for _ in range(20):
                sender.send(ProtonMessage(body=b"s" * SMALL))

            def produce() -> None:
                try:
                    for number in range(count):
                        sender.send(ProtonMessage(body=bytes([number]) * size))
                        sent.append(number)
                except BaseException as exc:  # reported by the test's thread
                    failures.append(exc)

            producer = threading.Thread(target=produce, daemon=True)
            producer.start()
            deadline = time.monotonic() + TIMEOUT
            while broker.broker.flow.held_bytes < limit - 2 * size and not failures:
                assert time.monotonic() < deadline, "the producer did not fill the memory"
                time.sleep(0.01)
            consumer = proton_utils.BlockingConnection(broker.url, timeout=TIMEOUT)
            try:
                receiver = consumer.create_receiver("switching", credit=5)
                bodies = []
                for _ in range(20 + count):
                    message = receiver.receive(timeout=TIMEOUT)
                    receiver.accept()
                    bodies.append(bytes(message.body))
            finally:
                consumer.close()
            producer.join(TIMEOUT)
        finally:
            connection.close()
        assert not failures, failures  # before: SendException(REJECTED) for 29 of them
        assert sent == list(range(count))
        assert [body[0] for body in bodies[20:]] == list(range(count))
