"""A declare cancelled after it was written must not leave its transaction open at the coordinator: the late
``declared`` is rolled back (discharged with fail=True, §4.4) in the background."""

from __future__ import annotations

import anyio
import pytest

import amqp_async
from amqp_async.broker import Broker

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def open_transactions(broker: Broker) -> int:
    return sum(len(c.transactions.transactions) for c in broker.connections)


async def test_cancelled_declares_leave_no_transaction_open() -> None:
    async with Broker(port=0, max_transactions=5) as broker, amqp_async.connect(broker.url) as conn:
        first = await conn.transaction()  # the controller link attached
        await first.rollback()
        cancelled = 0
        for _ in range(10):
            async with anyio.create_task_group() as group:

                async def declare() -> None:
                    nonlocal cancelled
                    try:
                        await conn.transaction()
                    except anyio.get_cancelled_exc_class():
                        cancelled += 1
                        raise

                group.start_soon(declare)
                # two loop turns: the declare written, the coordinator's answer not yet taken
                await anyio.sleep(0)
                await anyio.sleep(0)
                group.cancel_scope.cancel()
        assert cancelled == 10
        with anyio.fail_after(5):
            while open_transactions(broker):
                await anyio.sleep(0.01)
        assert open_transactions(broker) == 0
        txn = await conn.transaction()  # not refused with amqp:resource-limit-exceeded
        assert txn.state == "active"
        await txn.rollback()
