"""The broker says when its memory limit holds producers back, and when it no longer does
(amqp_async/broker/_server.py, ``Broker._report_memory``; ``Flow.memory_full`` in _flow.py).

Once the memory limit is reached, producers get no more credit and their sends wait (deliberate: as RabbitMQ's
memory alarm blocks publishers). Before, the broker said nothing: `python -m amqp_async.broker --max-memory 64MiB`
flooded by a python-qpid-proton producer with no consumer stopped it after 281 messages of 64 KiB, the producer's
send timed out ("timed out: Sending on sender ...") and the broker's log showed only the attach, a hung broker to
the user. Now its periodic sweep logs one warning that names the limit, the messages held, the producers waiting
and the fullest queues, and one line when there is room again (once the messages held fall to three quarters of the
limit with no producer waiting: a consumer a little slower than its producer does not repeat the pair).
"""

from __future__ import annotations

import logging
import re
import subprocess
import sys

import anyio
import pytest

pytest.importorskip("proton", reason="python-qpid-proton is the reference peer; CI installs it")

from proton import Message as ProtonMessage
from proton import Timeout
from proton.utils import BlockingConnection

import amqp_async
from amqp_async import Message

try:
    from broker_serving import serving
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.broker_serving import serving

TIMEOUT = 30.0
BODY = b"x" * 65536


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def notices(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The broker's memory-limit lines logged so far."""
    return [record.getMessage() for record in caplog.records if record.getMessage().startswith("memory limit")]


async def wait_for(caplog: pytest.LogCaptureFixture, count: int) -> list[str]:
    """Wait until ``count`` memory-limit lines were logged (the sweep runs every expiry_interval)."""
    while len(notices(caplog)) < count:
        await anyio.sleep(0.05)
    return notices(caplog)


@pytest.mark.anyio
async def test_the_broker_says_when_the_memory_limit_holds_producers_back_and_when_it_no_longer_does(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="amqp_async.broker")
    with anyio.fail_after(TIMEOUT):
        async with (
            # one queue may fill the whole limit here (its share: test_broker_queue_share.py)
            serving(max_memory=2 << 20, expiry_interval=0.1, queue_share=1) as broker,
            amqp_async.connect(broker.url, reconnect=False) as conn,
            anyio.create_task_group() as flooding,
        ):
            sender = await conn.open_sender("flood")

            async def flood() -> None:
                while True:
                    await sender.send(Message(body=BODY))  # waits for credit once the limit is reached

            flooding.start_soon(flood)
            [reached] = await wait_for(caplog, 1)
            assert re.fullmatch(
                r"memory limit reached: \d+ messages \(\d+\.\d MiB\) held within the 2\.0 MiB the limit leaves "
                r"messages \(--max-memory, Broker\(max_memory=\.\.\.\)\); producers waiting for credit until "
                r"consumers take messages: 1; most held by: flood \(\d+\)",
                reached,
            ), reached
            # A consumer slower than the producer: room is made and filled again, the memory stays at the limit,
            # and the broker says nothing more (no "room again" then "reached" at every grant).
            receiver = await conn.open_receiver("flood", credit=1)
            for _ in range(40):
                delivery = await receiver.receive()
                await delivery.accept()
                await anyio.sleep(0.05)
            assert len(notices(caplog)) == 1, notices(caplog)
            flooding.cancel_scope.cancel()  # the producer stops; the consumer drains the queue
            receiver.add_credit(100)
            while len(notices(caplog)) < 2:
                with anyio.move_on_after(1):
                    delivery = await receiver.receive()
                    await delivery.accept()
            assert re.fullmatch(
                r"memory limit: room again \(\d+\.\d MiB of messages held\): producers get credit", notices(caplog)[1]
            )
            assert len(notices(caplog)) == 2  # once each, not at every sweep


def test_the_command_line_broker_logs_the_limit_a_flooding_producer_reached() -> None:
    """The CLI as a user runs it, flooded by python-qpid-proton: the producer's send times out, and the broker's
    log says why."""
    broker = subprocess.Popen(
        [sys.executable, "-m", "amqp_async.broker", "--port", "0", "--max-memory", "64MiB", "--expiry-interval", "0.2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert broker.stdout is not None
        url = re.search(r"amqp://\S+", broker.stdout.readline())
        assert url is not None
        connection = BlockingConnection(url.group(0), timeout=3)
        sender = connection.create_sender("flood")
        sent = 0
        with pytest.raises(Timeout):
            while sent < 100_000:
                sender.send(ProtonMessage(body=BODY))
                sent += 1
        assert sent > 10
        connection.close()
    finally:
        broker.terminate()
        _, stderr = broker.communicate(timeout=TIMEOUT)
    [line] = [line for line in stderr.splitlines() if "memory limit reached" in line]
    assert "producers waiting for credit until consumers take messages: 1; most held by: flood (" in line, line
