"""A streamed message whose connection is lost mid-body, with reconnect on: the reader's body iterator says so at
once (it used to wait until reconnecting gave up, 60 s by default), and the message, unsettled, comes again whole
on the restored link. The broker runs in a process of its own, killed (SIGKILL) mid-body and started again on its
port and data directory."""

from __future__ import annotations

import hashlib
import random
import time
from pathlib import Path

import anyio
import pytest

import amqp_async
from amqp_async import Backoff, LinkDetached, Message, StreamDelivery

try:
    from broker_process import BrokerProcess
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.broker_process import BrokerProcess

pytestmark = pytest.mark.anyio

MiB = 1 << 20
#: Far beyond the seconds the loss may take to be seen: a reader waiting for the reconnect fails this bound.
PROMPT = 20.0
#: Reconnecting goes on longer than PROMPT (the old code's reader waited for it to give up).
RECONNECT_FOR = 120.0


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    if request.param == "trio":
        pytest.importorskip("trio", reason="trio is in the test dependency group")
    return str(request.param)


async def read_body(delivery: StreamDelivery) -> bytes:
    return b"".join([chunk async for chunk in delivery.body_chunks()])


async def test_a_connection_lost_mid_body_fails_the_read_at_once_and_the_message_comes_again(tmp_path: Path) -> None:
    data = random.Random(7).randbytes(48 * MiB)
    with BrokerProcess("--data-dir", str(tmp_path / "data")) as broker:
        async with amqp_async.connect(broker.url, reconnect=False) as conn, conn.open_stream_sender("q") as sender:
            with anyio.fail_after(120):
                await sender.send_stream(data, Message(durable=True, subject="artifact"))  # kept across the restart
        reconnect = Backoff(initial=0.2, maximum=1.0, max_time=RECONNECT_FOR)
        async with (
            amqp_async.connect(broker.url, reconnect=reconnect) as conn,
            conn.open_stream_receiver("q") as receiver,
        ):
            with anyio.fail_after(60):
                delivery = await receiver.receive()
                chunks = delivery.body_chunks()
                read = len(await chunks.__anext__())
                while read < 4 * MiB:
                    read += len(await chunks.__anext__())
            broker.kill()  # mid-body: the rest of the message cannot come
            lost_at = time.monotonic()
            with anyio.fail_after(PROMPT), pytest.raises(LinkDetached) as caught:
                async for chunk in chunks:
                    read += len(chunk)
            assert time.monotonic() - lost_at < PROMPT
            assert read < len(data)
            assert "was lost before the last frame" in caught.value.description
            assert "incomplete" in caught.value.description
            assert isinstance(caught.value.__cause__, amqp_async.ConnectionLost)
            with pytest.raises(LinkDetached):  # a second reader of the same delivery hears the same
                await delivery.read_message()

            broker.start()  # the same port and data directory: the durable message is there again
            with anyio.fail_after(120):
                again = await receiver.receive()  # waits for the reconnect, then the message from its start
                assert hashlib.sha256(await read_body(again)).digest() == hashlib.sha256(data).digest()
                assert (await again.message()).subject == "artifact"
                await again.accept()
