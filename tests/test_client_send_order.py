"""Concurrent sends on one link go out in the order they were called, when they have to wait for credit.

Tasks that wait for the same credit used to be woken together, and whichever ran first took it: on trio, whose
scheduler runs the tasks it wakes in no set order, the messages of a burst went out shuffled; and a send made
while others were waiting took the credit ahead of them. The peer is python-qpid-proton's broker
(`tests/proton_broker.py`), granting one credit at a time.
"""

from __future__ import annotations

import anyio
import pytest

import amqp_async

pytest.importorskip("proton", reason="python-qpid-proton is the reference peer; CI installs it")

try:
    from proton_broker import ProtonBroker
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.proton_broker import ProtonBroker

pytestmark = [pytest.mark.interop, pytest.mark.anyio]

SENDS = 12


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def test_sends_waiting_for_credit_go_out_in_the_order_they_were_called() -> None:
    broker = ProtonBroker(timeout=10)
    broker.credit_for["q"] = 0  # no credit until every send below waits for it
    await anyio.to_thread.run_sync(broker.start)
    try:
        with anyio.fail_after(20):
            async with amqp_async.connect(broker.url) as conn:
                sender = await conn.open_sender("q", name="ordered")
                outcomes: list[int] = []

                async def send(index: int) -> None:
                    await sender.send(amqp_async.Message(body=index))
                    outcomes.append(index)

                async with anyio.create_task_group() as group:
                    for index in range(SENDS):
                        group.start_soon(send, index)
                        await anyio.wait_all_tasks_blocked()  # each waits for credit before the next one comes
                    await anyio.to_thread.run_sync(lambda: broker.grant_credit("ordered", 1))
                    # A send that comes while the others still wait for credit takes its turn after them.
                    await anyio.to_thread.run_sync(lambda: broker.wait_messages(1, address="q"))
                    group.start_soon(send, SENDS)
                received = await anyio.to_thread.run_sync(lambda: broker.wait_messages(SENDS + 1, address="q"))
                assert [message.body for message in received] == list(range(SENDS + 1))
                assert sorted(outcomes) == list(range(SENDS + 1))
    finally:
        await anyio.to_thread.run_sync(broker.stop)
