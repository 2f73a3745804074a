"""A producer that submits message after message without yielding (the link has credit: ``submit`` does not wait)
has its output written a chunk at a time, not held until it yields.

Held, a window of a thousand sends reached the peer in one burst once the producer waited for their outcomes; the
peer answered once it had handled the whole burst, while the producer waited: the two ends took turns instead of
working at once (against proton's C ``direct``, runs at 120,000 messages a second with 3 ms pauses, instead of
200,000). The peer here is python-qpid-proton's test broker (tests/proton_broker.py), with credit for every message.
"""

from __future__ import annotations

from typing import Any

import pytest

import amqp_async
from amqp_async.io import driver

try:
    from proton_broker import ProtonBroker
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.proton_broker import ProtonBroker

pytestmark = pytest.mark.anyio

MESSAGES = 3000
BODY = b"x" * 64  # about 110 bytes a transfer frame: the messages make twenty chunks


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    if request.param == "trio":
        pytest.importorskip("trio", reason="trio is in the test dependency group")
    return str(request.param)


async def test_a_producer_that_does_not_yield_is_written_in_chunks(anyio_backend: Any) -> None:
    chunk = driver.STREAMING_CHUNK
    assert MESSAGES * len(BODY) > 10 * chunk
    with ProtonBroker(timeout=30.0, credit_window=MESSAGES) as broker:
        async with amqp_async.connect(broker.url, reconnect=False) as connection:
            sender = await connection.open_sender("queue")
            engine = connection._engine
            assert engine is not None
            trackers = []
            largest = 0
            for number in range(MESSAGES):
                trackers.append(await sender.submit(amqp_async.Message(body=BODY, subject=str(number))))
                largest = max(largest, engine.output_buffered)
            outcomes = [await tracker for tracker in trackers]
        subjects = [message.subject for message in broker.queued("queue")]
    assert outcomes == [amqp_async.Accepted()] * MESSAGES
    # Every message reached the peer, in order.
    assert subjects == [str(number) for number in range(MESSAGES)]
    # Never more than a chunk and a message or two waited for a yield (it was all of them, 330 KB, before).
    assert largest < chunk + 4 * (len(BODY) + 64)
