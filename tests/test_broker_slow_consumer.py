"""A consumer that takes credit and then reads nothing costs the embedded broker no CPU while its socket is full.

The broker's writer used to yield in a loop on asyncio once the socket to such a consumer was full (anyio's protocol
replaces its write event when the transport pauses writing, and the one kept stayed set): a whole CPU for as long
as the consumer did not read (1.0 s of CPU in this test's second). The consumer is python-qpid-proton's
``BlockingConnection``, which reads only when asked to (a client we did not write).
"""

from __future__ import annotations

import threading
import time

import anyio
import pytest

import amqp_async
from amqp_async.broker import Broker

proton = pytest.importorskip("proton", reason="python-qpid-proton is the independent client; CI installs it")

from proton.utils import BlockingConnection  # noqa: E402

pytestmark = pytest.mark.anyio

MESSAGES = 400
BODY = b"z" * 65536  # 26 MB in all: more than the kernel's socket buffers hold


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the direct stream is asyncio's (trio's writer waits in trio's own send)


async def test_a_consumer_that_reads_nothing_costs_the_broker_no_cpu() -> None:
    async with Broker(port=0) as broker:
        async with amqp_async.connect(broker.url, reconnect=False) as connection:
            sender = await connection.open_sender("slow")
            for number in range(MESSAGES):
                await sender.submit(amqp_async.Message(body=BODY, subject=str(number)))
            await sender.send(amqp_async.Message(body=b"last", subject="last"))

        attached = threading.Event()
        release = threading.Event()
        received: list[str] = []

        def consume() -> None:
            consumer = BlockingConnection(broker.url.removeprefix("amqp://"), timeout=30)
            try:
                receiver = consumer.create_receiver("slow", credit=MESSAGES + 1)
                attached.set()
                release.wait(30)  # reading nothing meanwhile: the broker's socket to us fills
                for _ in range(MESSAGES + 1):
                    message = receiver.receive(timeout=30)
                    received.append(message.subject)
                    receiver.accept()
            finally:
                consumer.close()

        async with anyio.create_task_group() as group:
            group.start_soon(anyio.to_thread.run_sync, consume)
            with anyio.fail_after(30):
                while not attached.is_set():
                    await anyio.sleep(0.05)
            await anyio.sleep(0.5)  # the broker writes what the socket takes, then waits
            cpu = time.process_time()
            await anyio.sleep(1.0)
            cpu = time.process_time() - cpu
            release.set()
        assert cpu < 0.3  # waiting (it was the whole second, yielding in a loop)
        assert received == [str(number) for number in range(MESSAGES)] + ["last"]
