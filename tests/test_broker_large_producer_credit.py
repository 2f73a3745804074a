"""A producer of large messages waits for credit under the memory limit; it is not rejected (broker/_flow.py).

A producer's first window is counted in messages of the size the broker has seen (64 KiB before any message), its
own not known yet. A producer of 1 MiB messages got 2,000 credits under the default limit of 256 MiB: once the
memory was full, every message it sent was rejected with ``amqp:resource-limit-exceeded`` (436 accepted and 1,564
rejected in 12 s, beside a consumer taking 50 a second: the whole first window), each one crossing the wire in full
first, and python-qpid-proton's ``BlockingSender`` raised ``SendException(REJECTED)``. Now its credit is lowered
(§2.6.7) once its first message shows the size, and its sends wait for the consumer as the limit promises.

Here 256 KiB messages under an 8 MiB limit (room for about 30), with a consumer that takes one every 20 ms:

- python-qpid-proton's ``BlockingSender`` and our client's ``send()`` (one message at a time): none rejected, all
  delivered in order, the bytes held never past the limit;
- our client's ``submit()`` with 16 messages in flight: the link's credit is lowered while they travel; those
  already sent still come (the broker takes them, §2.6.7, rather than detach the link), so at most those are
  refused, never the rest of the window;
- a broker that has seen small messages before: a new producer's window is counted at their size, and lowered
  once its own first message shows it;
- what must still be refused is: a message larger than the limit.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any

import anyio
import pytest

import amqp_async
from amqp_async import Message
from amqp_async.broker import BrokerThread
from amqp_async.broker._flow import UNSEEN_SIZE, WINDOW, Flow, Producer
from amqp_async.broker._nodes import ENTRY_OVERHEAD

proton = pytest.importorskip("proton", reason="python-qpid-proton is a test dependency (the independent peer)")
from proton import Message as ProtonMessage  # noqa: E402 - after the importorskip that explains its absence
from proton import utils as proton_utils  # noqa: E402

try:
    from broker_serving import serving
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.broker_serving import serving

TIMEOUT = 20.0
LIMIT = 8 << 20
SIZE = 256 << 10
COUNT = 60  # twice what the limit holds: the producer must wait for the consumer
#: The consumer takes a message every PAUSE seconds (50 a second).
PAUSE = 0.02


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def body(number: int) -> bytes:
    return number.to_bytes(4, "big") * (SIZE // 4)


def most_held(flow: Flow) -> list[int]:
    """Record the most bytes of messages ``flow`` ever holds (in a one-item list)."""
    most = [0]
    hold = flow.hold

    def watched(size: int) -> None:
        hold(size)
        most[0] = max(most[0], flow.held_bytes)

    flow.hold = watched  # type: ignore[method-assign]
    return most


class Link:
    """A producer's link as the flow control sees it: its credit."""

    def __init__(self) -> None:
        self.value = 0

    def credit(self) -> int:
        return self.value

    def grant(self, room: int) -> None:
        self.value = room


def test_a_producer_s_first_window_is_lowered_once_its_first_message_shows_the_size() -> None:
    flow = Flow(max_memory=LIMIT)
    link = Link()
    producer = Producer(link.credit, link.grant, None)
    flow.add(producer)
    assert link.value == LIMIT // UNSEEN_SIZE  # counted at the guess: room for 128 messages of 64 KiB
    link.value -= 1  # its first message comes (the connection takes it: took), and is held
    flow.took(producer, SIZE)
    flow.hold(SIZE)
    flow.top_up(producer)
    # before: 127 credits held, worth 32 MiB under an 8 MiB limit: the rest were rejected once the memory was full
    assert link.value == (LIMIT - SIZE) // SIZE
    assert flow._promised == link.value
    # Lowered again when its messages grow larger (tests/test_broker_mixed_size_credit.py): what it holds is
    # counted in messages of the larger size (before: kept, 29 credits at 1 MiB each under an 8 MiB limit).
    link.value -= 1
    flow.took(producer, 4 * SIZE)
    flow.hold(4 * SIZE)
    flow.top_up(producer)
    assert link.value == (LIMIT - 5 * SIZE) // (4 * SIZE)


def test_a_new_producer_on_a_broker_that_saw_small_messages_is_lowered_at_its_first_large_one() -> None:
    flow = Flow(max_memory=LIMIT)
    flow.hold(16)  # another producer's small message, taken
    flow.drop(16)
    link = Link()
    producer = Producer(link.credit, link.grant, None)
    flow.add(producer)
    assert link.value == WINDOW  # counted at 16 bytes: its own size is not known yet
    link.value -= 1
    flow.took(producer, SIZE)
    flow.hold(SIZE)
    flow.top_up(producer)
    assert link.value == (LIMIT - SIZE) // SIZE


def test_a_producer_that_has_sent_but_whose_message_is_not_complete_keeps_its_credit_until_it_is() -> None:
    """A large message comes in many frames: the connection tops its producer up at the first, before the size
    is known. The credit is lowered at the top-up that follows the message's last frame."""
    flow = Flow(max_memory=LIMIT)
    link = Link()
    producer = Producer(link.credit, link.grant, None)
    flow.add(producer)
    first = link.value
    link.value -= 1  # the first frame: its delivery is taken, nothing held yet
    flow.top_up(producer)
    assert link.value == first - 1
    flow.took(producer, SIZE)  # the last frame: the message is taken and held
    flow.hold(SIZE)
    flow.top_up(producer)
    assert link.value == (LIMIT - SIZE) // SIZE


def test_a_message_arriving_in_parts_counts_whole_in_the_room() -> None:
    """Its credit is used at its first frame, its bytes counted as they come: counted so far only, a 1 MiB
    message in 64 KiB frames left room for itself, the producer got credit for it again, and with 16 messages in
    flight every other one it sent was rejected."""
    size = 1 << 20
    flow = Flow(max_memory=(3 << 20) + (512 << 10))
    link = Link()
    producer = Producer(link.credit, link.grant, None)
    flow.add(producer)
    link.value -= 1
    flow.took(producer, size)
    flow.hold(size)
    flow.top_up(producer)
    assert link.value == 2  # lowered: 2.5 MiB left
    link.value -= 1  # its next message begins to arrive (its first frames: Assembly counts them)
    flow.arriving += 1
    flow.assembling += 64 << 10
    flow.top_up(producer)
    assert link.value == 1  # room for one more beside it, which it holds (before: granted 2)


def test_python_qpid_proton_s_blocking_sender_of_large_messages_waits_for_a_slow_consumer() -> None:
    with BrokerThread(max_memory=LIMIT) as broker:
        most = most_held(broker.broker.flow)
        sent: list[int] = []
        failures: list[BaseException] = []

        def produce() -> None:
            connection = proton_utils.BlockingConnection(broker.url, timeout=TIMEOUT)
            try:
                sender = connection.create_sender("large")
                for number in range(COUNT):
                    # before: SendException(REJECTED) once the memory was full, for the rest of the first window
                    sender.send(ProtonMessage(body=body(number)))
                    sent.append(number)
            except BaseException as exc:  # reported by the test's thread
                failures.append(exc)
            finally:
                connection.close()

        producer = threading.Thread(target=produce, daemon=True)
        producer.start()
        deadline = time.monotonic() + TIMEOUT
        while broker.broker.flow.held_count < (LIMIT - SIZE) // (SIZE + ENTRY_OVERHEAD) and not failures:
            assert time.monotonic() < deadline, "the producer did not fill the memory"
            time.sleep(0.01)
        connection = proton_utils.BlockingConnection(broker.url, timeout=TIMEOUT)
        try:
            receiver = connection.create_receiver("large", credit=5)
            received = []
            for _ in range(COUNT):
                message = receiver.receive(timeout=TIMEOUT)
                receiver.accept()
                received.append(int.from_bytes(bytes(message.body)[:4], "big"))
                time.sleep(PAUSE)
        finally:
            connection.close()
        producer.join(TIMEOUT)
        assert not failures, failures
        assert sent == received == list(range(COUNT))
        assert most[0] <= LIMIT


@pytest.mark.anyio
async def test_our_sender_of_large_messages_waits_for_a_slow_consumer_and_one_too_large_is_still_rejected() -> None:
    async with serving(max_memory=LIMIT) as broker, amqp_async.connect(broker.url, reconnect=False) as conn:
        most = most_held(broker.flow)
        sender = await conn.open_sender("large")
        received: list[int] = []

        async def consume() -> None:
            receiver = await conn.open_receiver("large", credit=5)
            for _ in range(COUNT):
                delivery = await receiver.receive()
                await delivery.accept()
                received.append(int.from_bytes(delivery.message.body[:4], "big"))
                await anyio.sleep(PAUSE)

        with anyio.fail_after(TIMEOUT):
            async with anyio.create_task_group() as group:
                group.start_soon(consume)
                for number in range(COUNT):
                    await sender.send(Message(body=body(number)))  # before: MessageRejected once the memory was full
            assert received == list(range(COUNT))
            assert most[0] <= LIMIT
            # what can never fit is still refused, at once
            with pytest.raises(amqp_async.MessageRejected) as refused:
                await sender.send(Message(body=b"x" * (LIMIT + 1)))
            assert refused.value.condition == "amqp:resource-limit-exceeded"
            assert f"memory limit of {LIMIT} bytes" in str(refused.value)


@pytest.mark.anyio
async def test_messages_in_flight_when_the_credit_is_lowered_still_come_and_only_they_may_be_refused() -> None:
    """Our client's ``submit()`` keeps ``WINDOW`` messages in flight. The broker lowers the credit (to the room for
    a few 1 MiB messages) while they travel: they still come (§2.6.7: the broker takes them rather than detach the
    link), and at most they are refused; the rest wait for credit. Before, all but what the memory held of the
    first window were refused."""
    limit, size, count, window = 4 << 20, 1 << 20, 40, 16
    async with serving(max_memory=limit) as broker, amqp_async.connect(broker.url, reconnect=False) as conn:
        sender = await conn.open_sender("flight")
        outcomes: list[Any] = []
        received: list[int] = []

        async def consume() -> None:
            receiver = await conn.open_receiver("flight", credit=2)
            while len(outcomes) < count or len(received) < sum(outcome == "accepted" for outcome in outcomes):
                with anyio.move_on_after(0.5):
                    delivery = await receiver.receive()
                    await delivery.accept()
                    received.append(delivery.message.body[0])
                    await anyio.sleep(PAUSE)

        async def settle(tracker: Any) -> None:
            try:
                await tracker
            except amqp_async.MessageRejected as exc:
                assert exc.condition == "amqp:resource-limit-exceeded"
                outcomes.append("rejected")
            else:
                outcomes.append("accepted")

        with anyio.fail_after(TIMEOUT):
            async with anyio.create_task_group() as group:
                group.start_soon(consume)
                pending: deque[Any] = deque()
                for number in range(count):
                    pending.append(await sender.submit(Message(body=bytes([number]) * size)))
                    if len(pending) >= window:
                        await settle(pending.popleft())
                while pending:
                    await settle(pending.popleft())
            # the link lived through it (no transfer-limit-exceeded), and still sends
            await sender.send(Message(body=bytes([count])))
        rejected = outcomes.count("rejected")
        assert rejected < window, outcomes  # before: 40 sent, all but the 3 or 4 the memory held rejected
        assert received == sorted(received) and len(received) == count - rejected
