"""Messages a consumer gives back come back to the queue in the order they arrived in (broker/_nodes.py put_back).

Before, each returned message went to the head alone: a, b and c released one disposition at a time, or in one
disposition covering the three, came back as c, b, a, ahead of d and e. Now a returned message goes behind the
messages at the head that arrived before it (looking at most RETURN_SCAN of them, so that a consumer releasing a
great many one at a time costs each release that much at most).

The consumer that releases is python-qpid-proton's BlockingConnection (a disposition per release) and our client
(one disposition for several, or one each); the broker is the embedded one.
"""

from __future__ import annotations

import anyio
import pytest

import amqp_async
from amqp_async import Message, Released
from amqp_async.broker import Broker, BrokerThread
from amqp_async.broker._nodes import RETURN_SCAN

proton = pytest.importorskip("proton", reason="python-qpid-proton is a test dependency (the independent peer)")
from proton import Message as ProtonMessage  # noqa: E402 - after the importorskip that explains its absence
from proton import utils as proton_utils  # noqa: E402

TIMEOUT = 20.0


@pytest.mark.parametrize("delivered", [False, True], ids=["released", "modified-delivery-failed"])
def test_what_python_qpid_proton_releases_one_at_a_time_comes_back_in_order(delivered: bool) -> None:
    with BrokerThread(port=0) as broker:
        connection = proton_utils.BlockingConnection(broker.url, timeout=TIMEOUT)
        try:
            sender = connection.create_sender("order")
            for body in "abcde":
                sender.send(ProtonMessage(body=body))
            receiver = connection.create_receiver("order", credit=3)
            taken = []
            for _ in range(3):
                taken.append(receiver.receive(timeout=TIMEOUT).body)
                receiver.release(delivered=delivered)  # a disposition each, in the order received
            receiver.close()
            assert taken == ["a", "b", "c"]
            again = connection.create_receiver("order", credit=10)
            got = []
            for _ in range(5):
                got.append(again.receive(timeout=TIMEOUT).body)
                again.accept()
            assert got == ["a", "b", "c", "d", "e"]  # before: c, b, a, d, e
        finally:
            connection.close()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def received_bodies(conn: amqp_async.Connection, address: str, count: int) -> list[str]:
    got: list[str] = []
    async with conn.open_receiver(address, credit=count) as receiver:
        with anyio.fail_after(TIMEOUT):
            for _ in range(count):
                delivery = await receiver.receive()
                got.append(delivery.message.body)
                await delivery.accept()
    return got


@pytest.mark.anyio
@pytest.mark.parametrize("order", ["as-received", "reversed", "one-disposition"])
async def test_what_our_client_releases_comes_back_in_order(order: str) -> None:
    async with Broker(port=0) as broker, amqp_async.connect(broker.url) as conn:
        sender = await conn.open_sender("ours")
        for body in "abcdef":
            await sender.send(Message(body=body))
        async with conn.open_receiver("ours", credit=0) as receiver:
            receiver.add_credit(4)
            with anyio.fail_after(TIMEOUT):
                taken = [await receiver.receive() for _ in range(4)]
            if order == "one-disposition":
                for delivery in taken:  # settled in one turn: one disposition frame for the four
                    delivery._settle_now(Released(), None)
                await anyio.sleep(0.2)
            else:
                for delivery in taken if order == "as-received" else reversed(taken):
                    await delivery.release()
                    await anyio.sleep(0.02)  # its own disposition frame
        assert await received_bodies(conn, "ours", 6) == list("abcdef")


@pytest.mark.anyio
async def test_many_released_one_at_a_time_all_come_back_once_and_within_the_scan_in_order() -> None:
    count = RETURN_SCAN + 150
    async with Broker(port=0) as broker, amqp_async.connect(broker.url) as conn:
        sender = await conn.open_sender("many")
        for index in range(count):
            await sender.submit(Message(body=f"{index:04}"))
        await sender.send(Message(body="last"))
        async with conn.open_receiver("many", credit=count) as receiver:
            with anyio.fail_after(TIMEOUT):
                taken = [await receiver.receive() for _ in range(count)]
                for delivery in taken:
                    await delivery.release()
        got = await received_bodies(conn, "many", count + 1)
        assert sorted(got) == sorted([f"{index:04}" for index in range(count)] + ["last"])  # each once
        # Returned one disposition at a time, in the order received: the first RETURN_SCAN + 1 keep their order
        # (each looks past at most RETURN_SCAN returned before it); the later ones go to the head.
        kept = [body for body in got if body != "last" and int(body) <= RETURN_SCAN]
        assert kept == [f"{index:04}" for index in range(RETURN_SCAN + 1)]
        assert got[-1] == "last"
