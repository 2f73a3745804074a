"""A producer that attaches after others, before the broker has seen a message, gets credit (broker/_flow.py).

Before any message, the memory limit counts its room at UNSEEN_SIZE (64 KiB) a message: the default limit,
256 MiB, is room for 4,096 such messages, two producers' windows of 2,000. A third producer found the room
promised to the first two, and waited for a settlement that could not come while nothing was held: a program
that opened three senders on the embedded broker with its defaults and sent on the third hung for ever. Now a
producer starved on that guess alone gets one credit, and the size its first message shows sets its next window.

The producers are python-qpid-proton's BlockingConnection (its ``send`` waits for credit, then for the outcome)
and our client; the broker runs with its default memory limit.
"""

from __future__ import annotations

import anyio
import pytest

import amqp_async
from amqp_async import Message
from amqp_async.broker import Broker, BrokerThread
from amqp_async.broker._flow import UNSEEN_SIZE, WINDOW

proton = pytest.importorskip("proton", reason="python-qpid-proton is a test dependency (the independent peer)")
from proton import Message as ProtonMessage  # noqa: E402 - after the importorskip that explains its absence
from proton import utils as proton_utils  # noqa: E402

TIMEOUT = 20.0
#: Enough idle producers that, counted at UNSEEN_SIZE, their windows pass the default limit several times over.
IDLE = 6


def test_the_default_limit_is_room_for_two_windows_before_the_first_message() -> None:
    with BrokerThread(port=0) as broker:
        assert broker.broker.flow.max_memory is not None
        assert broker.broker.flow.max_memory // UNSEEN_SIZE < 3 * WINDOW  # what starved the third producer


def test_python_qpid_proton_sends_on_the_last_of_several_idle_senders() -> None:
    with BrokerThread(port=0) as broker:
        connection = proton_utils.BlockingConnection(broker.url, timeout=TIMEOUT)
        try:
            senders = [connection.create_sender(f"idle-{index}") for index in range(IDLE)]
            senders[-1].send(ProtonMessage(body="through"))  # raises Timeout after TIMEOUT seconds without credit
            receiver = connection.create_receiver(f"idle-{IDLE - 1}", credit=1)
            assert receiver.receive(timeout=TIMEOUT).body == "through"
            receiver.accept()
            # and every other idle sender can send too, in any order
            for sender in reversed(senders[:-1]):
                sender.send(ProtonMessage(body="also"))
        finally:
            connection.close()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_our_sender_opened_after_idle_ones_gets_a_full_window_once_its_first_message_shows_the_size() -> None:
    async with Broker(port=0) as broker, amqp_async.connect(broker.url) as conn:
        idle = [await conn.open_sender(f"quiet-{index}") for index in range(IDLE)]
        assert sum(sender.credit for sender in idle) <= broker.flow.max_memory // UNSEEN_SIZE  # type: ignore[operator]
        late = await conn.open_sender("late")
        with anyio.fail_after(TIMEOUT):
            await late.send(Message(body=b"first"))  # on the one credit
            for _ in range(10):
                await late.send(Message(body=b"more"))
        assert late.credit >= WINDOW // 2  # the size seen (16 bytes), the room is counted anew: a window
        assert len(broker.queue("late")) == 11
