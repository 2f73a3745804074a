"""Streamed bodies of a declared size larger than one data section holds (a binary's size is a uint, §1.6.19: 4 GiB
less a byte), and what a stream reports of itself, through the embedded broker in-process.

A ``body_size`` above 4 GiB (``amqp-async send --file`` of a 5 GiB file) raised ``OverflowError: int too big to
convert`` before anything was sent, even where the peer's max-message-size should have refused it by name. Such a
body now goes in as few data sections as hold it; the sections' size is patched down here so that the split is
seen without sending gigabytes.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

import amqp_async
from amqp_async import Message, MessageTooLarge
from amqp_async.broker import Broker
from amqp_async.client import _stream_sender
from amqp_async.codec.sections import Data

pytestmark = pytest.mark.anyio

TIMEOUT = 60.0
GiB = 1 << 30


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_a_declared_size_above_4_gib_is_refused_by_the_peers_limit_by_name() -> None:
    with anyio.fail_after(TIMEOUT):
        async with (
            Broker(port=0, max_message_size=1 << 20) as broker,
            amqp_async.connect(broker.url, reconnect=False) as conn,
            conn.open_stream_sender("q") as sender,
        ):
            with pytest.raises(MessageTooLarge, match=r"max-message-size 1048576: nothing of it was sent"):
                await sender.open_stream(Message(subject="big"), body_size=5 * GiB)
            assert await sender.send_stream(b"small") == amqp_async.Accepted()  # the link goes on


@pytest.mark.parametrize(
    ("chunks", "sections"),
    [
        ([b"a" * 700, b"b" * 1300, b"c" * 500], [1000, 1000, 500]),  # chunks across the sections' ends
        ([b"d" * 1000, b"e" * 1000], [1000, 1000]),  # a section's end on a chunk's: no empty third section
        ([b"f" * 2500], [1000, 1000, 500]),  # one chunk over three sections
    ],
)
async def test_a_body_larger_than_a_data_section_holds_goes_in_several(
    monkeypatch: pytest.MonkeyPatch, chunks: list[bytes], sections: list[int]
) -> None:
    monkeypatch.setattr(_stream_sender, "_MAX_SECTION", 1000)
    body = b"".join(chunks)
    expected = [Data(body[start : start + size]) for start, size in zip(_starts(sections), sections, strict=True)]
    with anyio.fail_after(TIMEOUT):
        async with Broker(port=0) as broker, amqp_async.connect(broker.url, reconnect=False) as conn:
            async with conn.open_stream_sender("q") as sender:
                assert await sender.send_stream(iter(chunks), body_size=len(body)) == amqp_async.Accepted()
                assert await sender.send_stream(body) == amqp_async.Accepted()  # bytes: size known
            async with conn.open_receiver("q") as receiver:
                for _ in range(2):
                    delivery = await receiver.receive()
                    assert delivery.message.body == expected
                    await delivery.accept()


def _starts(sizes: list[int]) -> Iterator[int]:
    start = 0
    for size in sizes:
        yield start
        start += size


async def test_the_received_size_of_a_one_frame_message_stays_once_its_body_is_read() -> None:
    message = Message(subject="small", body=b"x" * 100)
    with anyio.fail_after(TIMEOUT):
        async with Broker(port=0) as broker, amqp_async.connect(broker.url, reconnect=False) as conn:
            async with conn.open_sender("q") as sender:
                await sender.send(message)
            async with conn.open_stream_receiver("q") as receiver:
                delivery = await receiver.receive()
                assert delivery.received_size == len(message.encode())
                assert b"".join([chunk async for chunk in delivery.body_chunks()]) == b"x" * 100
                assert delivery.received_size == len(message.encode())  # was 0
                await delivery.accept()


async def test_a_stream_refused_at_its_creation_leaves_no_error_behind_when_collected() -> None:
    unraisable: list[Any] = []
    previous = sys.unraisablehook
    sys.unraisablehook = unraisable.append
    try:
        with anyio.fail_after(TIMEOUT):
            async with (
                Broker(port=0) as broker,
                amqp_async.connect(broker.url, reconnect=False) as conn,
                conn.open_stream_sender("q") as sender,
            ):
                with pytest.raises(ValueError, match=r"leave message\.body None"):
                    sender.open_stream(Message(body=b"a body"))
                with pytest.raises(ValueError, match="body_size must be at least 0"):
                    sender.open_stream(body_size=-1)
                gc.collect()
    finally:
        sys.unraisablehook = previous
    # MessageStream.__del__ read attributes its __init__ had not set: "Exception ignored in ... AttributeError"
    assert [hook.exc_value for hook in unraisable] == []
