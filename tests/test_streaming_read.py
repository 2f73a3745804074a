"""``StreamDelivery.read(max_bytes)`` and ``read_exactly(size)``: a streamed body parsed as it arrives (records with
a length first), where the chunks of ``body_chunks()`` come in sizes that say nothing of the body's structure.
Through the embedded broker, on asyncio and trio, with records that straddle the transfer frames and the data
sections."""

from __future__ import annotations

import random
import struct
from collections.abc import AsyncIterator

import anyio
import pytest

import amqp_async
from amqp_async import Message, MessageBodyError
from amqp_async.broker import Broker

pytestmark = pytest.mark.anyio

TIMEOUT = 60.0


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    if request.param == "trio":
        pytest.importorskip("trio", reason="trio is in the test dependency group")
    return str(request.param)


def records(count: int, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    return [rng.randbytes(rng.choice((0, 1, 7, 300, 70_000, 200_000))) for _ in range(count)]


async def framed(items: list[bytes], piece: int) -> AsyncIterator[bytes]:
    """The records, each after its length (4 bytes), cut in pieces of ``piece`` bytes whatever the records."""
    data = b"".join(struct.pack(">I", len(item)) + item for item in items)
    for offset in range(0, len(data), piece):
        yield data[offset : offset + piece]


async def test_read_parses_a_body_as_it_arrives() -> None:
    items = records(60, seed=3)
    with anyio.fail_after(TIMEOUT):
        async with Broker(port=0) as broker, amqp_async.connect(broker.url, reconnect=False) as conn:
            async with conn.open_stream_sender("q") as sender:
                await sender.send_stream(framed(items, piece=99_991), Message(subject="records"))
            async with conn.open_stream_receiver("q", buffer_size=128 << 10) as receiver:
                delivery = await receiver.receive()
                got = []
                while header := await delivery.read(4):  # at the end of a record: the body may end there
                    if len(header) < 4:
                        header += await delivery.read_exactly(4 - len(header))
                    (size,) = struct.unpack(">I", header)
                    got.append(await delivery.read_exactly(size))
                assert got == items
                assert await delivery.read() == b""  # the end, again
                assert delivery.complete
                await delivery.accept()


async def test_small_reads_mix_with_the_chunk_iterator_and_each_byte_comes_once() -> None:
    data = random.Random(5).randbytes(3 << 20)
    with anyio.fail_after(TIMEOUT):
        async with Broker(port=0) as broker, amqp_async.connect(broker.url, reconnect=False) as conn:
            async with conn.open_stream_sender("q") as sender:
                await sender.send_stream(data)  # one data section, frames of the peer's max-frame-size
            async with conn.open_stream_receiver("q") as receiver:
                delivery = await receiver.receive()
                with pytest.raises(ValueError, match="max_bytes must be at least 1"):
                    await delivery.read(0)
                head = [await delivery.read(1) for _ in range(1000)]  # inside the first frame
                assert b"".join(head) == data[:1000]
                middle = await delivery.read_exactly(1 << 20)
                rest = [chunk async for chunk in delivery.body_chunks()]  # from where read() stopped
                assert all(type(chunk) is bytes for chunk in rest)
                assert b"".join(head) + middle + b"".join(rest) == data
                assert await delivery.read(10) == b""
                assert await delivery.read_exactly(0) == b""
                with pytest.raises(MessageBodyError, match="ended 0 bytes into a read of 10"):
                    await delivery.read_exactly(10)
                with pytest.raises(RuntimeError, match=r"body_chunks\(\) or read\(\)"):
                    await delivery.read_message()
                await delivery.accept()


async def test_read_exactly_names_a_body_that_ends_inside_a_record() -> None:
    with anyio.fail_after(TIMEOUT):
        async with Broker(port=0) as broker, amqp_async.connect(broker.url, reconnect=False) as conn:
            async with conn.open_stream_sender("q") as sender:
                await sender.send_stream(framed([b"a" * 100_000], piece=10_000))
            async with conn.open_stream_receiver("q") as receiver:
                delivery = await receiver.receive()
                assert await delivery.read_exactly(4) == struct.pack(">I", 100_000)
                with pytest.raises(MessageBodyError, match=r"ended 100000 bytes into a read of 100001"):
                    await delivery.read_exactly(100_001)
                await delivery.accept()
