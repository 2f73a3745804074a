"""Messages of any size in bounded memory through the awaitable API, on asyncio and trio, with the embedded broker
in-process: StreamSender (send_stream, open_stream) and StreamReceiver (StreamDelivery: message(), body_chunks(),
read_message()), their bounds, aborts and cancellations, and the broker taking them (in memory within its limit,
on disk with a data directory, refused past max-message-size with the limit named).

Interop with other implementations (python-qpid-proton, rhea, Qpid Proton C) and the 64 MiB / 1 GiB runs with
their memory sampled are in tests/test_streaming_interop.py and tests/test_streaming_memory.py.
"""

from __future__ import annotations

import gc
import hashlib
import io
import os
import random
import re
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

import amqp_async
from amqp_async import (
    Accepted,
    ClosedByApplication,
    DeliveryAborted,
    Message,
    MessageBodyError,
    MessageRejected,
    MessageTooLarge,
    StreamDelivery,
    StreamReceiver,
    StreamSender,
)
from amqp_async.broker import Broker
from amqp_async.codec import conditions
from amqp_async.codec.sections import Data

try:
    from stalls import fails_if_the_loop_stalls
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.stalls import fails_if_the_loop_stalls

pytestmark = pytest.mark.anyio

TIMEOUT = 60.0
MiB = 1 << 20


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    if request.param == "trio":
        pytest.importorskip("trio", reason="trio is in the test dependency group")
    return str(request.param)


@asynccontextmanager
async def serving(**options: Any) -> AsyncIterator[Broker]:
    async with Broker(port=0, **options) as broker:
        yield broker


def connect(broker: Broker) -> Any:
    return amqp_async.connect(broker.url, reconnect=False)


def random_chunks(total: int, seed: int = 1, sizes: tuple[int, int] = (1, 300_000)) -> list[bytes]:
    """Chunks of varied sizes (deterministic), ``total`` bytes together."""
    rng = random.Random(seed)
    chunks = []
    left = total
    while left:
        size = min(left, rng.randint(*sizes))
        chunks.append(rng.randbytes(size))
        left -= size
    return chunks


async def aiter_of(chunks: list[bytes]) -> AsyncIterator[bytes]:
    for chunk in chunks:
        yield chunk
        await anyio.sleep(0)


async def read_body(delivery: StreamDelivery) -> bytes:
    return b"".join([chunk async for chunk in delivery.body_chunks()])


async def eventually(predicate: Any, timeout: float = 10.0) -> None:
    """Wait until ``predicate()`` holds (what the peer does with a frame we wrote, it does a moment later)."""
    with anyio.fail_after(timeout):
        while not predicate():
            await anyio.sleep(0.01)


def depth(broker: Broker, address: str) -> int:
    queue = broker.queues.get(address)
    return 0 if queue is None else len(queue.entries)


# ---------------------------------------------------------------------------------------------------------------
# Sending and receiving streamed


async def test_a_streamed_message_arrives_whole_its_head_body_and_footer() -> None:
    chunks = random_chunks(5 * MiB, seed=3)
    head = Message(subject="photo.jpg", properties={"size": 5 * MiB}, durable=True, id="m-1")
    head.footer = {"x-checksum": hashlib.sha256(b"".join(chunks)).hexdigest()}
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker, connect(broker) as conn:
            async with conn.open_stream_sender("files") as sender:
                assert isinstance(sender, StreamSender)
                assert await sender.send_stream(aiter_of(chunks), head) == Accepted()
            assert depth(broker, "files") == 1
            async with conn.open_stream_receiver("files") as receiver:
                assert isinstance(receiver, StreamReceiver)
                delivery = await receiver.receive()
                message = await delivery.message()
                assert (message.subject, message.properties, message.durable, message.id, message.body) == (
                    "photo.jpg",
                    {"size": 5 * MiB},
                    True,
                    "m-1",
                    None,
                )
                pieces = [chunk async for chunk in delivery.body_chunks()]
                assert b"".join(pieces) == b"".join(chunks)
                assert all(isinstance(piece, bytes) for piece in pieces)
                assert delivery.footer == head.footer
                assert delivery.complete and delivery.received_size > 5 * MiB
                await delivery.accept()
            assert depth(broker, "files") == 0


async def test_unknown_length_goes_as_a_data_section_per_chunk_known_length_as_one() -> None:
    chunks = [b"a" * 1000, b"", b"b" * 70_000, b"c"]
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker, connect(broker) as conn:
            async with conn.open_stream_sender("q") as sender:
                await sender.send_stream(aiter_of(chunks))  # an async iterable: its length is unknown
                await sender.send_stream(b"".join(chunks))  # bytes: known, one data section
                async with sender.open_stream(body_size=71_001) as stream:
                    for chunk in chunks:
                        await stream.write(chunk)
            async with conn.open_receiver("q") as receiver:
                whole = [await receiver.receive() for _ in range(3)]
                # an ordinary receiver decodes the sections: three data sections (the empty chunk made none), then one
                assert whole[0].message.body == [Data(b"a" * 1000), Data(b"b" * 70_000), Data(b"c")]
                assert whole[1].message.body == b"".join(chunks)
                assert whole[2].message.body == b"".join(chunks)
                for delivery in whole:
                    await delivery.accept()


async def test_a_writer_completes_on_leaving_its_block_and_reports_the_outcome() -> None:
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker, connect(broker) as conn, conn.open_stream_sender("q") as sender:
            async with sender.open_stream(Message(subject="log")) as stream:
                for index in range(100):
                    await stream.write(b"line %d\n" % index)
                assert stream.tracker is None or not stream.tracker.done  # nothing settled before the end
            assert stream.outcome == Accepted() and stream.body_size == sum(len(b"line %d\n" % i) for i in range(100))
            assert stream.tracker is not None and stream.tracker.settled
            with pytest.raises(RuntimeError, match="complete"):
                await stream.write(b"more")
            got = broker.queues["q"].entries[0].message
            assert got.subject == "log" and b"".join(section.value for section in got.body) == b"".join(
                b"line %d\n" % index for index in range(100)
            )


async def test_body_sources_files_iterables_and_async_files(tmp_path: Path) -> None:
    data = random.Random(5).randbytes(3 * MiB + 17)
    path = tmp_path / "artifact.bin"
    path.write_bytes(data)
    read, write = os.pipe()

    def feed_pipe() -> None:
        with os.fdopen(write, "wb") as pipe:
            for start in range(0, len(data), 100_000):
                pipe.write(data[start : start + 100_000])

    with anyio.fail_after(TIMEOUT):
        async with serving() as broker, connect(broker) as conn, conn.open_stream_sender("q") as sender:
            with path.open("rb") as file:
                await sender.send_stream(file, chunk_size=100_000)  # a regular file: on the loop, one section
            async with await anyio.open_file(path, "rb") as async_file:
                await sender.send_stream(async_file)  # its read is a coroutine
            with os.fdopen(read, "rb") as pipe:
                async with anyio.create_task_group() as group:
                    group.start_soon(anyio.to_thread.run_sync, feed_pipe)
                    await sender.send_stream(pipe)  # not a regular file: read in a worker thread
            await sender.send_stream(iter([data[:10], data[10:]]))  # a plain iterable
            bodies = [entry.message.body for entry in broker.queues["q"].entries]
            assert bodies[0] == data  # one data section: its size was known
            for body in bodies[1:]:
                assert b"".join(section.value for section in body) == data
            with pytest.raises(TypeError, match="not str"):
                await sender.send_stream("text")  # type: ignore[arg-type]


class _GrowingFile(io.FileIO):
    """A log being written: more lines are appended to it as soon as it is first read."""

    grown = False

    def read(self, size: int = -1) -> bytes:  # type: ignore[override]
        if not self.grown:
            self.grown = True
            with open(self.name, "ab") as writer:
                writer.write(b"appended while it was sent\n" * 1000)
        return super().read(size)


async def test_a_file_is_sent_as_its_size_was_when_the_send_began(tmp_path: Path) -> None:
    """Its size then is declared (one data section), and no more of it is read: a file that grows meanwhile goes as
    it was. A file whose size says 0 but holds more (those of /proc) is read to its end."""
    path = tmp_path / "service.log"
    snapshot = b"".join(b"line %d\n" % index for index in range(50_000))
    path.write_bytes(snapshot)
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker, connect(broker) as conn, conn.open_stream_sender("q") as sender:
            with _GrowingFile(path, "rb") as growing:
                assert await sender.send_stream(growing, chunk_size=64 << 10) == Accepted()
            assert path.stat().st_size > len(snapshot)  # it did grow while it was sent
            proc = Path("/proc/self/cmdline")
            if proc.exists():  # Linux: size 0, content the interpreter's command line
                with proc.open("rb") as pseudo:
                    assert await sender.send_stream(pseudo) == Accepted()
            bodies = [entry.message.body for entry in broker.queues["q"].entries]
            assert bodies[0] == snapshot
            if proc.exists():
                body = bodies[1]  # one data section (one read) or several
                whole = body if isinstance(body, bytes) else b"".join(section.value for section in body)
                assert whole == proc.read_bytes() != b""


async def test_a_declared_body_size_is_held_to() -> None:
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker, connect(broker) as conn, conn.open_stream_sender("q") as sender:
            with pytest.raises(ValueError, match="not the body_size declared"):
                async with sender.open_stream(body_size=10) as stream:
                    await stream.write(b"12345")
            with pytest.raises(ValueError, match="longer than the body_size"):
                async with sender.open_stream(body_size=3) as stream:
                    await stream.write(b"12345")
            assert await sender.send_stream(b"ok") == Accepted()
            assert [entry.message.body for entry in broker.queues["q"].entries] == [b"ok"]


async def test_a_failing_body_source_aborts_the_delivery_and_raises_its_error() -> None:
    """Frames went out (more than a window's worth), then the source fails: the broker discards the message; the
    link goes on."""

    async def failing() -> AsyncIterator[bytes]:
        for _ in range(40):
            yield b"x" * 100_000
        raise OSError("the disk went away")

    with anyio.fail_after(TIMEOUT):
        async with serving() as broker, connect(broker) as conn, conn.open_stream_sender("q") as sender:
            with pytest.raises(OSError, match="the disk went away"):
                await sender.send_stream(failing())
            await eventually(lambda: broker.flow.assembling == 0)  # the aborted frame came: the parts are dropped
            assert depth(broker, "q") == 0
            assert sender.unsettled == []
            assert await sender.send_stream(b"after") == Accepted()
            assert [entry.message.body for entry in broker.queues["q"].entries] == [b"after"]


async def test_a_send_cancelled_mid_body_aborts_the_delivery() -> None:
    written = anyio.Event()

    async def endless() -> AsyncIterator[bytes]:
        count = 0
        while True:
            yield b"y" * 65536
            count += 1
            if count == 50:
                written.set()

    with anyio.fail_after(TIMEOUT):
        async with serving() as broker, connect(broker) as conn, conn.open_stream_sender("q") as sender:
            async with anyio.create_task_group() as group:
                group.start_soon(sender.send_stream, endless())
                await written.wait()
                group.cancel_scope.cancel()
            await eventually(lambda: broker.flow.assembling == 0)
            assert depth(broker, "q") == 0
            assert await sender.send_stream(b"after") == Accepted()
            assert depth(broker, "q") == 1


async def test_streams_of_one_sender_go_one_at_a_time() -> None:
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker, connect(broker) as conn, conn.open_stream_sender("q") as sender:
            bodies = [bytes([index]) * (200_000 + index) for index in range(6)]
            async with anyio.create_task_group() as group:
                for body in bodies:
                    group.start_soon(sender.send_stream, aiter_of([body[:1000], body[1000:]]))
            got = sorted(b"".join(d.value for d in entry.message.body) for entry in broker.queues["q"].entries)
            assert got == sorted(bodies)


# ---------------------------------------------------------------------------------------------------------------
# The receiving side


async def test_the_stream_receivers_window_bounds_what_it_holds_unread() -> None:
    """A reader that reads nothing holds the peer at its window: the bytes received stay within the buffer (a
    session of its own, 256 KiB of frames), whatever the message's size; once read, the whole message comes."""
    data = random.Random(9).randbytes(16 * MiB)
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker, connect(broker) as conn:
            async with conn.open_stream_sender("big") as sender:
                await sender.send_stream(data, Message(subject="big"))
            async with conn.open_stream_receiver("big", buffer_size=256 << 10) as receiver:
                engine_session = receiver.session._engine_session
                assert engine_session is not None and engine_session.initial_incoming_window == 4  # 4 x 64 KiB
                delivery = await receiver.receive()
                await anyio.sleep(0.5)  # the peer sends what the window allows, then waits
                assert delivery.received_size <= 5 * 65536  # the window, and the frame being read
                assert engine_session.held_frames <= 5
                assert not delivery.complete
                assert hashlib.sha256(await read_body(delivery)).digest() == hashlib.sha256(data).digest()
                await delivery.accept()
            assert depth(broker, "big") == 0


async def test_read_message_reads_any_body_whole_and_body_chunks_names_what_it_cannot_stream() -> None:
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker, connect(broker) as conn:
            async with conn.open_sender("q") as plain:
                await plain.send(Message(body={"a": [1, 2]}, subject="map"))
                sequence = Message(body=[1, 2, 3])
                sequence.inferred = True
                await plain.send(sequence)
                await plain.send(Message(body="héllo" * 20_000))
                await plain.send(Message(body=b"raw" * 50_000))
            async with conn.open_stream_receiver("q", credit=4) as receiver:
                first = await receiver.receive()
                whole = await first.read_message()
                assert (whole.body, whole.subject) == ({"a": [1, 2]}, "map")
                await first.accept()
                second = await receiver.receive()
                with pytest.raises(MessageBodyError, match="amqp-sequence"):
                    await read_body(second)
                assert (await second.read_message()).body == [1, 2, 3]  # as the error advises: read it whole
                await second.reject()
                third = await receiver.receive()
                assert (await read_body(third)).decode() == "héllo" * 20_000  # a string amqp-value: its UTF-8
                await third.accept()
                fourth = await receiver.receive()
                message = await fourth.read_message()
                assert message.body == b"raw" * 50_000
                await fourth.accept()
            assert depth(broker, "q") == 0


async def test_settling_before_the_end_drops_the_rest_and_taking_the_next_drops_the_unread() -> None:
    big = random.Random(2).randbytes(8 * MiB)
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker, connect(broker) as conn:
            async with conn.open_stream_sender("q") as sender:
                await sender.send_stream(big, Message(subject="first"))
                await sender.send_stream(big, Message(subject="second"))
                await sender.send_stream(b"small", Message(subject="third"))
            async with conn.open_stream_receiver("q", buffer_size=128 << 10) as receiver:
                first = await receiver.receive()
                assert (await first.message()).subject == "first"
                iterator = first.body_chunks()
                assert len(await iterator.__anext__()) > 0
                await first.reject("app:too-big", "no room for it")  # early: the rest is dropped as it comes
                with pytest.raises(ClosedByApplication, match=r"settled .* before its body was read"):
                    await iterator.__anext__()
                second = await receiver.receive()
                assert (await second.message()).subject == "second"
                third = await receiver.receive()  # the second's body was not read: dropped
                assert (await third.message()).subject == "third" and await read_body(third) == b"small"
                await third.accept()
                await second.release()
            assert depth(broker, "q") == 1  # the second, released, is back; the first rejected (dropped)
            async with conn.open_stream_receiver("q") as receiver:
                again = await receiver.receive()
                assert (await again.message()).subject == "second" and await read_body(again) == big
                await again.accept()


@pytest.mark.parametrize("ending", ["accept", "discard"])
async def test_a_body_read_after_settling_a_delivery_that_had_arrived_whole_raises(ending: str) -> None:
    """Every frame had come before the settlement: the body it drops is refused at once, not waited for (a read
    that waited for frames that cannot come would stall the loop)."""
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker, connect(broker) as conn:
            async with conn.open_stream_sender("q") as sender:
                await sender.send_stream(b"hello world", Message(subject="small"))
            async with conn.open_stream_receiver("q") as receiver:
                delivery = await receiver.receive()
                assert (await delivery.message()).subject == "small"
                await eventually(lambda: delivery.complete)
                await (delivery.accept() if ending == "accept" else delivery.discard())
                with fails_if_the_loop_stalls(5), pytest.raises(ClosedByApplication, match="the rest was dropped"):
                    await read_body(delivery)


async def test_a_receiver_cancelled_mid_body_releases_the_message_for_the_next() -> None:
    data = random.Random(4).randbytes(12 * MiB)
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker, connect(broker) as conn:
            async with conn.open_stream_sender("q") as sender:
                await sender.send_stream(data, Message(subject="model.bin"))
            read = 0
            with anyio.move_on_after(30) as scope:
                async with conn.open_stream_receiver("q") as receiver:
                    async for delivery in receiver:
                        async with delivery:  # cancelled inside: released (§3.4.4), the rest dropped
                            async for chunk in delivery.body_chunks():
                                read += len(chunk)
                                if read > 2 * MiB:
                                    scope.cancel()
                                    await anyio.sleep(1)
            assert scope.cancelled_caught and 2 * MiB < read < 12 * MiB
            await eventually(lambda: depth(broker, "q") == 1)  # released: back in the queue, whole
            async with conn.open_stream_receiver("q") as receiver:
                again = await receiver.receive()
                assert await read_body(again) == data
                await again.accept()


# ---------------------------------------------------------------------------------------------------------------
# The broker's limits


async def test_above_max_message_size_the_sender_is_refused_with_the_limit_named() -> None:
    with anyio.fail_after(TIMEOUT):
        async with serving(max_message_size=MiB) as broker, connect(broker) as conn:
            async with conn.open_stream_sender("q") as sender:
                with pytest.raises(MessageTooLarge) as caught:
                    await sender.send_stream(aiter_of([b"z" * 300_000] * 5))
                assert caught.value.condition == conditions.LINK_MESSAGE_SIZE_EXCEEDED
                assert "max-message-size 1048576" in caught.value.description
                # the size it had reached when it passed the limit (it used to quote one below the limit)
                reached = re.search(r"message of at least (\d+) bytes", caught.value.description)
                assert reached is not None and int(reached.group(1)) > MiB
                await eventually(lambda: broker.flow.assembling == 0)  # the aborted one's parts are dropped
                with pytest.raises(MessageTooLarge, match=r"of 1048[0-9]{3} bytes .* nothing of it was sent"):
                    await sender.send_stream(b"z" * (MiB + 1))  # its size known: refused before any frame
                assert await sender.send_stream(b"z" * 1000) == Accepted()  # the link goes on
            assert [len(entry.payload) for entry in broker.queues["q"].entries] == [1008]


async def test_a_message_larger_than_the_memory_limit_is_refused_without_a_data_dir() -> None:
    with anyio.fail_after(TIMEOUT):
        async with serving(max_memory=8 * MiB) as broker, connect(broker) as conn:
            async with conn.open_stream_sender("q") as sender:
                with pytest.raises(MessageRejected) as caught:
                    await sender.send_stream(aiter_of([b"m" * MiB] * 16))
                error = caught.value
                assert error.condition == conditions.RESOURCE_LIMIT_EXCEEDED
                assert "memory limit of 8388608 bytes" in error.description and "--data-dir" in error.description
                assert broker.flow.assembling == 0 and broker.flow.held_bytes == 0 and depth(broker, "q") == 0
                assert await sender.send_stream(aiter_of([b"m" * MiB] * 4)) == Accepted()  # within the limit
            assert depth(broker, "q") == 1 and broker.flow.held_bytes > 4 * MiB


async def test_with_a_data_dir_large_messages_are_kept_on_disk_and_streamed_back(tmp_path: Path) -> None:
    data = random.Random(6).randbytes(24 * MiB)
    bodies = tmp_path / "data" / "bodies"
    with anyio.fail_after(TIMEOUT):
        async with serving(max_memory=8 * MiB, data_dir=tmp_path / "data") as broker, connect(broker) as conn:
            async with conn.open_stream_sender("q") as sender:
                await sender.send_stream(data, Message(subject="durable", durable=True))
                await sender.send_stream(data[: 2 * MiB], Message(subject="transient"))
                await sender.send_stream(b"small", Message(subject="small"))
            entries = list(broker.queues["q"].entries)
            assert [entry.body is not None for entry in entries] == [True, True, False]
            assert all(entry.size < 4096 for entry in entries)  # only the leading sections are in memory
            assert broker.flow.held_bytes < 16384
            assert len(list(bodies.iterdir())) == 2
        # the durable one survives a restart; the transient one's file goes
        async with serving(max_memory=8 * MiB, data_dir=tmp_path / "data") as broker, connect(broker) as conn:
            assert [entry.message.subject for entry in broker.queues["q"].entries] == ["durable"]
            assert len(list(bodies.iterdir())) == 1
            async with conn.open_stream_receiver("q") as receiver:
                delivery = await receiver.receive()
                assert (await delivery.message()).subject == "durable"
                assert await read_body(delivery) == data
                await delivery.accept()
            await anyio.sleep(0.2)  # the removal's commit, then the file
            assert depth(broker, "q") == 0
        assert list(bodies.iterdir()) == []


async def test_a_large_message_on_disk_to_a_slow_and_an_ordinary_receiver(tmp_path: Path) -> None:
    """The broker streams a message from its file within the consumer's window; an ordinary receiver (which joins
    the frames) gets it whole too, its annotations as the broker rewrote them (a failed delivery counted)."""
    data = random.Random(7).randbytes(6 * MiB)
    with anyio.fail_after(TIMEOUT):
        async with serving(data_dir=tmp_path, large_message_size=MiB) as broker, connect(broker) as conn:
            async with conn.open_stream_sender("q") as sender:
                await sender.send_stream(data, Message(subject="x"))
            async with conn.open_receiver("q") as receiver:
                first = await receiver.receive()
                assert first.message.body == data and first.message.delivery_count == 0
                await first.modify(delivery_failed=True)
                second = await receiver.receive()
                assert second.message.body == data and second.message.delivery_count == 1
                await second.accept()


def _chunks_of(data: bytes, size: int) -> Iterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


async def test_an_aborted_delivery_is_discarded_by_the_broker(tmp_path: Path) -> None:
    with anyio.fail_after(TIMEOUT):
        async with serving(data_dir=tmp_path) as broker, connect(broker) as conn:
            async with conn.open_stream_sender("q") as sender:
                stream = await sender.open_stream(Message(subject="partial"))
                for chunk in _chunks_of(b"p" * (3 * MiB), 256 << 10):
                    await stream.write(chunk)
                await anyio.sleep(0.2)
                stream.abort()
                assert await sender.send_stream(b"next") == Accepted()
            assert [entry.message.body for entry in broker.queues["q"].entries] == [b"next"]
            await eventually(lambda: list((tmp_path / "bodies").iterdir()) == [])  # the partial file is gone


async def test_a_message_stream_left_open_and_forgotten_is_aborted_and_frees_its_sender() -> None:
    """A task that failed between two writes of ``stream = await open_stream()`` kept the sender's turn: every
    later message on the sender waited for ever. Collected, the stream aborts its message and warns."""

    async def fails_between_writes(sender: Any) -> None:
        stream = await sender.open_stream(Message(subject="forgotten"))
        await stream.write(b"x" * 1000)
        raise RuntimeError("the application failed before its next write")

    with anyio.fail_after(TIMEOUT):
        async with serving() as broker, connect(broker) as conn:
            async with conn.open_stream_sender("q") as sender:
                with pytest.warns(ResourceWarning, match="MessageStream .* was left open: its message is aborted"):
                    with pytest.raises(RuntimeError):
                        await fails_between_writes(sender)
                    gc.collect()
                assert await sender.send_stream(b"next") == Accepted()  # before: waited for ever
            assert [entry.message.body for entry in broker.queues["q"].entries] == [b"next"]


async def test_deliveries_aborted_while_read_raise_delivery_aborted() -> None:
    """Through the broker a partial message never reaches a consumer; a direct peer that aborts mid-body is
    python-qpid-proton's (tests/test_streaming_interop.py). Here the engine is told so by hand."""
    data = random.Random(8).randbytes(4 * MiB)
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker, connect(broker) as conn:
            async with conn.open_stream_sender("q") as sender:
                await sender.send_stream(data)
            async with conn.open_stream_receiver("q", buffer_size=128 << 10) as receiver:
                delivery = await receiver.receive()
                iterator = delivery.body_chunks()
                await iterator.__anext__()
                engine_delivery = delivery._delivery
                engine_delivery.aborted = True  # as continue_stream marks it on an aborted frame
                engine_delivery.complete = True  # type: ignore[attr-defined]
                engine_delivery.chunks.clear()  # type: ignore[attr-defined]
                with pytest.raises(DeliveryAborted, match="aborted"):
                    while True:
                        await iterator.__anext__()
                assert delivery.aborted and delivery.settled
