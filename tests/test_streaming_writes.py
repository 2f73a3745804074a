"""A producer that submits message after message without yielding (the link has credit: ``submit`` does not wait)
has its output written a chunk at a time, not held until it yields.

Held, a window of a thousand sends reached the peer in one burst once the producer waited for their outcomes; the
peer answered once it had handled the whole burst, while the producer waited: the two ends took turns instead of
working at once (against proton's C ``direct``, runs at 120,000 messages a second with 3 ms pauses, instead of
200,000). The peer here is python-qpid-proton's test broker (tests/proton_broker.py), with credit for every message.

And when the peer stops reading, the producer waits once 1 MiB is queued, without using the CPU meanwhile: on
asyncio the writer used to yield in a loop while the socket was full (anyio's protocol replaces its write event
when the transport pauses it, and the one the writer kept stayed set), half a CPU for as long as the peer did not
read.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import anyio
import pytest

import amqp_async
from amqp_async.io import driver

try:
    from proton_broker import ProtonBroker
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.proton_broker import ProtonBroker

pytestmark = pytest.mark.anyio


def broker_pause(broker: ProtonBroker, seconds: float) -> None:
    """Block the broker's thread for ``seconds`` (it reads nothing meanwhile); returns once it is blocked."""
    blocked = threading.Event()

    def pause() -> None:
        blocked.set()
        time.sleep(seconds)

    broker.call(pause, wait=False)
    assert blocked.wait(30.0), "the broker thread did not pause"


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


async def test_a_producer_whose_peer_stops_reading_waits_without_spinning(anyio_backend: Any) -> None:
    """The peer stops reading (its thread blocked) while the producer has credit for far more than the socket holds:
    the producer waits once 1 MiB is queued (no yield per message, no busy loop while the socket is full), and every
    message arrives, in order, once the peer reads again."""
    credit = 20_000  # of 1 KiB messages: 20 MB, more than the kernel's socket buffers and the 1 MiB of output
    body = b"y" * 1024
    with ProtonBroker(timeout=30.0, credit_window=credit) as broker:
        async with amqp_async.connect(broker.url, reconnect=False) as connection:
            sender = await connection.open_sender("queue")
            await sender.send(amqp_async.Message(body=body, subject="0"))  # credit has come
            engine = connection._engine
            assert engine is not None
            trackers = []
            largest = 0

            async def produce() -> None:
                nonlocal largest
                for number in range(1, credit):
                    trackers.append(await sender.submit(amqp_async.Message(body=body, subject=str(number))))
                    largest = max(largest, engine.output_buffered)

            broker_pause(broker, 4.0)
            async with anyio.create_task_group() as group:
                group.start_soon(produce)
                # Until the producer stops (three readings alike, 0.2 s apart): the socket full, 1 MiB queued.
                readings = [-3, -2, -1]
                while len(set(readings[-3:])) > 1:
                    await anyio.sleep(0.2)
                    readings.append(len(trackers))
                submitted = readings[-1]
                stalled_cpu = time.process_time()
                await anyio.sleep(0.5)
                stalled_cpu = time.process_time() - stalled_cpu
                assert 0 < len(trackers) == submitted < credit - 1  # it waits, the peer still paused
                assert stalled_cpu < 0.25  # waiting, not yielding in a loop
            outcomes = [await tracker for tracker in trackers]
        subjects = [message.subject for message in broker.queued("queue")]
    assert largest <= (1 << 20) + 2 * (len(body) + 64)
    assert outcomes == [amqp_async.Accepted()] * (credit - 1)
    assert subjects == [str(number) for number in range(credit)]


async def test_larger_messages_go_out_many_to_a_write(anyio_backend: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A chunk's worth of 4 KiB messages is four of them: written a chunk at a time, a trio sender spent on writes
    what it had for messages (half its rate, 89,000 -> 46,000 msg/s through the embedded broker). They go out
    :data:`driver._STREAMING_BURST` messages (or 256 KiB) to a write."""
    messages = 1000
    body = b"w" * 4096
    takes: list[int] = []
    original = driver.EngineDriver._take_output

    def counted(self: driver.EngineDriver) -> list[Any]:
        buffers = original(self)
        if buffers:
            takes.append(sum(len(buffer) for buffer in buffers))
        return buffers

    with ProtonBroker(timeout=30.0, credit_window=messages + 1) as broker:
        async with amqp_async.connect(broker.url, reconnect=False) as connection:
            sender = await connection.open_sender("queue")
            await sender.send(amqp_async.Message(body=body, subject="0"))  # credit has come
            monkeypatch.setattr(driver.EngineDriver, "_take_output", counted)
            trackers = [await sender.submit(amqp_async.Message(body=body, subject=str(n))) for n in range(messages)]
            monkeypatch.undo()
            outcomes = [await tracker for tracker in trackers]
        subjects = [message.subject for message in broker.queued("queue")]
    assert outcomes == [amqp_async.Accepted()] * messages
    assert subjects == ["0"] + [str(number) for number in range(messages)]
    # About sixteen writes (64 messages each; a chunk a write would make 250); the socket may take fewer, larger ones.
    assert 0 < len(takes) <= messages // 32
