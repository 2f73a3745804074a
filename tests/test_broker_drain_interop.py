"""The embedded broker answers a drain (§2.6.7) as rhea's receiver needs: rhea counts a drain done only when a flow
with drain set comes back from the sender (its ``receiver_drained`` event), not when its credit reaches 0. So each
drain request is answered once, with the credit left given back (delivery-count advanced), or with credit 0 when
the transfers used it all up; never twice for one request (a proton program saw two ``on_link_flow`` events).
"""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

import amqp_async
from amqp_async import Message

try:
    from broker_serving import serving
    from test_interop_matrix import _rhea_env
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.broker_serving import serving
    from tests.test_interop_matrix import _rhea_env

pytestmark = pytest.mark.anyio

RHEA_DRAIN = Path(__file__).resolve().parent / "interop" / "rhea_drain.js"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.parametrize(
    ("queued", "credit"), [(5, 5), (7, 5), (2, 5), (0, 5)], ids=["credit-used", "more-queued", "credit-left", "empty"]
)
async def test_rheas_drain_is_answered_whether_or_not_the_transfers_used_its_credit(queued: int, credit: int) -> None:
    env = _rhea_env()
    with anyio.fail_after(90):
        async with serving() as broker:
            async with amqp_async.connect(broker.url) as conn:
                sender = await conn.open_sender("drained")
                for index in range(queued):
                    await sender.send(Message(body=f"m{index}"))
            command = ["node", str(RHEA_DRAIN), "--port", str(broker.port), "--address", "drained"]
            command += ["--credit", str(credit), "--timeout", "20"]
            result = await anyio.run_process(command, env=env, check=False)
            lines = [json.loads(line) for line in result.stdout.decode().splitlines() if line.strip()]
            assert lines == [{"received": min(queued, credit), "drained": True}], result.stderr.decode()
            assert len(broker.queues["drained"].entries) == max(0, queued - credit)
