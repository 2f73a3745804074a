"""Bounded resources: the embedded broker withholds credit rather than reject or grow, with exact counts.

- producers flooding a queue with no consumer never push it past ``max_queue_depth``: their sends wait for credit,
  and complete once a consumer drains;
- with ``max_memory`` the bytes of the messages held never pass it, whichever queues the producers fill;
- a consumer that does not read (its process stopped) with a large credit: the broker queues at most its output
  limit for the socket, and the rest waits in the queue; none is lost once it reads again;
- our client buffers no more than the credit it grants;
- ``python -m amqp_async.broker`` flooded with no consumer (with ``--max-memory 96MiB``, and with its default
  bound in a slow test): its RSS, sampled every 0.1 s, levels off below the bound while the producers wait for
  credit, and a consumer that comes then receives every message, exactly once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections import deque
from pathlib import Path
from typing import Any

import anyio
import pytest

import amqp_async
from amqp_async import Message
from amqp_async.broker import DEFAULT_MAX_MEMORY, Broker
from amqp_async.broker._connection import OUTPUT_LIMIT
from amqp_async.broker._flow import ENDPOINT_SIZE, NODE_SIZE
from amqp_async.broker._nodes import ENTRY_OVERHEAD
from amqp_async.codec.delivery_states import Accepted

try:
    from broker_serving import serving
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.broker_serving import serving

REPO = Path(__file__).resolve().parent.parent
TIMEOUT = 20.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Deepest(deque[Any]):
    """A queue's entries that remember the most they ever held."""

    deepest = 0

    def append(self, item: Any) -> None:
        super().append(item)
        self.deepest = max(self.deepest, len(self))


async def flood(url: str, address: str, count: int, body: bytes, accepted: list[int]) -> None:
    """Send ``count`` messages with a window of unconfirmed sends, counting each one accepted."""
    async with amqp_async.connect(url, reconnect=False) as conn:
        sender = await conn.open_sender(address)
        pending: deque[amqp_async.Tracker] = deque()
        for _ in range(count):
            pending.append(await sender.submit(Message(body=body)))
            if len(pending) >= 100:
                assert isinstance(await pending.popleft(), Accepted)
                accepted.append(1)
        while pending:
            assert isinstance(await pending.popleft(), Accepted)
            accepted.append(1)


async def settled_at(value: Any, predicate: Any, quiet: float = 0.3) -> None:
    """Wait until ``predicate()`` holds, then make sure it still holds a little later (nothing more moves)."""
    with anyio.fail_after(TIMEOUT):
        while not predicate():
            await anyio.sleep(0.01)
    await anyio.sleep(quiet)
    assert predicate(), value()


async def receive_all(url: str, address: str, count: int) -> int:
    async with amqp_async.connect(url, reconnect=False) as conn:
        receiver = await conn.open_receiver(address, credit=200)
        for _ in range(count):
            await (await receiver.receive()).accept()
        return count


@pytest.mark.anyio
async def test_producers_flooding_a_queue_wait_at_max_queue_depth_and_finish_once_a_consumer_drains() -> None:
    depth, producers, each = 50, 3, 300
    async with serving(max_queue_depth=depth) as broker:
        queue = broker.queue("flood")
        queue.entries = Deepest()
        accepted: list[int] = []
        with anyio.fail_after(TIMEOUT):
            async with anyio.create_task_group() as group:
                for _ in range(producers):
                    group.start_soon(flood, broker.url, "flood", each, b"x" * 100, accepted)
                # No consumer: the queue fills to exactly its limit and every producer waits for credit.
                await settled_at(lambda: len(queue), lambda: len(queue) == depth)
                assert len(accepted) <= depth
                assert all(producer.credit() == 0 for producer in queue.producers)
                assert len(queue.producers) == producers
                # A consumer drains: the producers get credit again and every send completes.
                assert await receive_all(broker.url, "flood", producers * each) == producers * each
        assert len(accepted) == producers * each
        assert queue.entries.deepest == depth  # never past the limit
        assert len(queue) == 0


@pytest.mark.anyio
async def test_max_memory_bounds_the_bytes_held_across_queues_and_producers_resume_when_drained() -> None:
    body = b"m" * 1000
    limit = 100_000
    async with serving(
        max_memory=limit, queue_share=1
    ) as broker:  # one queue may fill the whole limit here (its share: test_broker_queue_share.py)
        flow = broker.flow
        most = 0
        hold = flow.hold

        def watched_hold(size: int) -> None:
            nonlocal most
            hold(size)
            most = max(most, flow.held_bytes)

        flow.hold = watched_hold  # type: ignore[method-assign]
        accepted: list[int] = []
        with anyio.fail_after(TIMEOUT):
            async with anyio.create_task_group() as group:
                for address in ("a", "b", "c"):
                    group.start_soon(flood, broker.url, address, 200, body, accepted)
                size = len(Message(body=body).encode()) + ENTRY_OVERHEAD  # what the broker counts per message
                # the three queues count too, and each producer's session and link
                room = limit - 3 * NODE_SIZE - 6 * ENDPOINT_SIZE
                await settled_at(lambda: flow.held_bytes, lambda: flow.held_count == room // size)
                assert sum(len(broker.queues[address]) for address in "abc") == room // size
                # consumers of all three (one alone could wait forever: the others' messages fill the memory)
                async with anyio.create_task_group() as consumers:
                    for address in "abc":
                        consumers.start_soon(receive_all, broker.url, address, 200)
        assert len(accepted) == 600
        assert most + 3 * NODE_SIZE <= limit
        assert flow.held_bytes == 0 and flow.held_count == 0 and flow.node_bytes == 3 * NODE_SIZE


SLOW_CONSUMER = textwrap.dedent(
    """
    import sys, anyio, amqp_async

    async def main(url, count):
        async with amqp_async.connect(url, reconnect=False) as conn:
            receiver = await conn.open_receiver("slow", credit=count)
            print("attached", flush=True)
            for _ in range(count):
                await (await receiver.receive()).accept()
            print("received", count, flush=True)

    anyio.run(main, sys.argv[1], int(sys.argv[2]))
    """
)


@pytest.mark.anyio
async def test_a_consumer_that_does_not_read_makes_the_broker_queue_no_more_than_its_output_limit() -> None:
    count, body = 20_000, b"s" * 1000  # 20 MB: far more than the socket buffers take
    async with serving() as broker:
        environment = dict(os.environ, PYTHONPATH=str(REPO))
        consumer = subprocess.Popen(
            [sys.executable, "-c", SLOW_CONSUMER, broker.url, str(count)],
            stdout=subprocess.PIPE,
            text=True,
            env=environment,
        )
        try:
            assert consumer.stdout is not None
            assert (await anyio.to_thread.run_sync(consumer.stdout.readline)).split() == ["attached"]
            queue = broker.queues["slow"]
            with anyio.fail_after(TIMEOUT):
                while not queue.consumers or queue.consumers[0].credit() == 0:
                    await anyio.sleep(0.01)
            consumer.send_signal(signal.SIGSTOP)  # it reads nothing from now on, with credit for everything
            most = 0
            accepted: list[int] = []
            with anyio.fail_after(TIMEOUT):
                async with anyio.create_task_group() as group:
                    group.start_soon(flood, broker.url, "slow", count, body, accepted)
                    while len(accepted) < count:
                        most = max(most, *(connection.engine.output_buffered for connection in broker.connections))
                        await anyio.sleep(0.001)
            # Every send was accepted (the queue holds what the consumer cannot take), the consumer's output
            # waits within the limit (plus the one message that crossed it), and most messages are still queued.
            assert most <= OUTPUT_LIMIT + 2 * len(body)
            assert len(queue) > count // 2
            unsettled = len(queue.consumers[0].unsettled)
            assert len(queue) + unsettled == count
            consumer.send_signal(signal.SIGCONT)
            line = await anyio.to_thread.run_sync(consumer.stdout.readline)
            assert line.split() == ["received", str(count)]
            assert len(queue) == 0
        finally:
            consumer.send_signal(signal.SIGCONT)
            consumer.kill()
            consumer.wait(TIMEOUT)
            if consumer.stdout is not None:
                consumer.stdout.close()


@pytest.mark.anyio
async def test_our_receiver_buffers_no_more_than_the_credit_it_grants() -> None:
    async with serving() as broker:
        with anyio.fail_after(TIMEOUT):
            async with amqp_async.connect(broker.url, reconnect=False) as conn:
                sender = await conn.open_sender("prefetch")
                for _ in range(999):
                    await sender.submit(Message(body=b"p" * 100))
                await sender.send(Message(body=b"p" * 100))
                receiver = await conn.open_receiver("prefetch", credit=50)
                await settled_at(lambda: receiver.queued, lambda: receiver.queued == 50)
                assert len(broker.queues["prefetch"]) == 950
                for _ in range(100):
                    await (await receiver.receive()).accept()
                    assert receiver.queued + receiver.credit <= 50
                await anyio.sleep(0.3)  # the broker sends what the last top-up granted, and no more
                assert receiver.queued + receiver.credit <= 50
                assert len(broker.queues["prefetch"]) + 100 + receiver.queued + receiver.credit == 1000


# ---------------------------------------------------------------------------------------------------------------
# The memory bound of `python -m amqp_async.broker` (the default one too), under a flood with no consumer


def rss(pid: int) -> int:
    """The resident memory of process ``pid``, in bytes (Linux: /proc)."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for {pid}")


def numbered(number: int, size: int) -> Message:
    return Message(body=f"{number:08d}".encode().ljust(size, b"."))


class Producer:
    """Sends ``numbers`` to ``address`` with a window of unconfirmed sends; counts what was accepted."""

    def __init__(self, numbers: range) -> None:
        self.numbers = numbers
        self.accepted = 0
        self.sender: amqp_async.Sender | None = None

    @property
    def waiting_for_credit(self) -> bool:
        """Blocked by the broker: the link is open, sends are left, and the broker has granted no credit."""
        return self.sender is not None and self.accepted < len(self.numbers) and self.sender.credit == 0

    @property
    def finished(self) -> bool:
        return self.accepted == len(self.numbers)

    async def run(self, url: str, address: str, size: int) -> None:
        async with amqp_async.connect(url, reconnect=False) as conn:
            self.sender = await conn.open_sender(address)
            pending: deque[amqp_async.Tracker] = deque()
            for number in self.numbers:
                pending.append(await self.sender.submit(numbered(number, size)))
                if len(pending) >= 200:
                    assert isinstance(await pending.popleft(), Accepted)
                    self.accepted += 1
            while pending:
                assert isinstance(await pending.popleft(), Accepted)
                self.accepted += 1


async def flood_until_it_levels_off(
    limit: int, *arguments: str, total: int, size: int = 4096, producers: int = 2
) -> tuple[list[int], int]:
    """Start ``python -m amqp_async.broker ARGUMENTS``, flood it with ``total`` messages from ``producers``
    connections and no consumer, sampling its RSS every 0.1 s; once the producers have waited for credit for
    2 s (none left, nothing accepted), check that RSS levelled off below ``limit``, then receive every message.
    Returns the RSS samples and the number accepted before a consumer came."""
    if not sys.platform.startswith("linux"):
        pytest.skip("reads the broker's RSS from /proc (Linux)")
    try:
        from test_broker_cli import BrokerProcess
    except ImportError:  # pragma: no cover - tests/ imported as a package
        from tests.test_broker_cli import BrokerProcess
    broker = BrokerProcess(Path(os.environ.get("TMPDIR", "/tmp")), "--port", "0", "--quiet", *arguments)
    samples: list[int] = []
    each = total // producers
    flooders = [Producer(range(index * each, (index + 1) * each)) for index in range(producers)]
    try:
        samples.append(rss(broker.process.pid))
        async with anyio.create_task_group() as group:

            async def sample() -> None:
                while True:
                    samples.append(rss(broker.process.pid))
                    await anyio.sleep(0.1)

            group.start_soon(sample)
            for flooder in flooders:
                group.start_soon(flooder.run, broker.url, "flood", size)
            with anyio.fail_after(120):
                quiet_since, seen = time.monotonic(), -1
                while time.monotonic() - quiet_since < 2.0:
                    await anyio.sleep(0.1)
                    accepted = sum(flooder.accepted for flooder in flooders)
                    # A producer that got all its messages in before the bound was reached (the broker need not
                    # share its credit evenly between connections) is not waiting, and is no reason to wait longer.
                    blocked = all(flooder.waiting_for_credit or flooder.finished for flooder in flooders)
                    if accepted != seen or not blocked:
                        quiet_since, seen = time.monotonic(), accepted
            waited = len(samples)
            await anyio.sleep(1.5)  # still no consumer: RSS must stay where it levelled off
            plateau = samples[waited:]
            assert seen < total, "the flood fitted: nothing was held back"
            assert max(samples) < limit, f"RSS reached {max(samples) / 2**20:.1f} MiB (limit {limit / 2**20} MiB)"
            assert max(plateau) - min(plateau) < 2 << 20, [round(value / 2**20, 1) for value in plateau]
            assert sum(flooder.accepted for flooder in flooders) == seen  # producers still waiting for credit
            # A consumer arrives: it receives everything, and every producer's last sends complete.
            received: set[int] = set()
            with anyio.fail_after(180):
                async with amqp_async.connect(broker.url, reconnect=False) as conn:
                    receiver = await conn.open_receiver("flood", credit=500)
                    while len(received) < total:
                        delivery = await receiver.receive()
                        received.add(int(bytes(delivery.message.body[:8])))
                        await delivery.accept()
                    assert await _nothing_more(receiver)
            group.cancel_scope.cancel()
        assert received == set(range(total))
        assert [flooder.accepted for flooder in flooders] == [each] * producers
        return samples, seen
    finally:
        broker.stop()


async def _nothing_more(receiver: amqp_async.Receiver) -> bool:
    await receiver.drain()
    return receiver.receive_nowait() is None


@pytest.mark.anyio
async def test_a_flood_with_no_consumer_levels_off_under_max_memory_and_a_consumer_then_gets_everything() -> None:
    """A small explicit bound (``--max-memory 96MiB`` for the whole process) keeps it quick."""
    limit = 96 << 20
    samples, held_back = await flood_until_it_levels_off(limit, "--max-memory", "96MiB", total=20_000)
    assert 5_000 < held_back < 20_000  # the messages' share (96 MiB less the process's own) filled, not more
    assert max(samples) > limit // 2  # it did fill most of it: the bound, not the flood, stopped it


@pytest.mark.slow
@pytest.mark.anyio
async def test_with_default_options_a_flood_levels_off_under_the_default_max_memory() -> None:
    """Default options: 256 MiB for the whole broker process (DEFAULT_MAX_MEMORY), one queue holding half of what
    it leaves messages (QUEUE_SHARE, the rest kept for the other queues)."""
    samples, held_back = await flood_until_it_levels_off(DEFAULT_MAX_MEMORY, total=70_000)
    assert 15_000 < held_back < 40_000
    assert max(samples) > 96 << 20  # it did fill its share: the bound, not the flood, stopped it


@pytest.mark.anyio
async def test_producers_given_credit_for_small_messages_cannot_send_large_ones_past_the_memory_limit() -> None:
    """The credit a producer gets is counted in messages of the size seen so far: four producers granted windows
    while messages were 1 byte, then sending 60 kB messages in one frame each, took 48 MB under a 4 MiB limit.
    Each message is now checked in bytes as it arrives, in one frame as in many: one that does not fit is rejected
    with amqp:resource-limit-exceeded, the limit named, and what was accepted stays receivable. The credit is
    lowered once the larger size shows (tests/test_broker_mixed_size_credit.py): the messages sent before the
    producers saw it may be refused, the rest wait for a consumer."""
    limit = 4 << 20
    with anyio.fail_after(60):
        # one queue may fill the whole limit here (its share: test_broker_queue_share.py)
        async with Broker(port=0, max_memory=limit, queue_share=1) as broker, amqp_async.connect(broker.url) as conn:
            most = [0]
            hold = broker.flow.hold

            def watched(size: int) -> None:
                hold(size)
                most[0] = max(most[0], broker.flow.held_bytes)

            broker.flow.hold = watched  # type: ignore[method-assign]
            senders = [await conn.open_sender("q") for _ in range(4)]
            for sender in senders:
                await sender.send_many([Message(body=b"x")] * 10)
            assert all(sender.credit > 1000 for sender in senders)  # windows granted for 1-byte messages
            results: list[Any] = []
            received = [0]

            async def flood(sender: amqp_async.Sender) -> None:
                try:
                    results.extend(await sender.send_many([Message(body=b"y" * 60_000)] * 200))
                except amqp_async.SendManyError as exc:
                    results.extend(exc.results)

            async def drain() -> None:
                while not broker.flow.starved:  # the producers wait for credit: the limit was reached
                    await anyio.sleep(0.05)
                receiver = await conn.open_receiver("q", credit=50)
                while True:
                    await (await receiver.receive()).accept()
                    received[0] += 1

            async with anyio.create_task_group() as draining:
                draining.start_soon(drain)
                async with anyio.create_task_group() as group:
                    for sender in senders:
                        group.start_soon(flood, sender)
                accepted = sum(isinstance(result, amqp_async.Accepted) for result in results) + 40
                while received[0] < accepted:
                    await anyio.sleep(0.05)
                draining.cancel_scope.cancel()
            assert most[0] <= limit
            assert received[0] == accepted
            refused = [result for result in results if not isinstance(result, amqp_async.Accepted)]
            assert refused, "every message was taken: the limit was not applied"
            assert all(isinstance(error, amqp_async.MessageRejected) for error in refused)
            assert {error.condition for error in refused} == {"amqp:resource-limit-exceeded"}
            assert "memory limit of 4194304 bytes" in str(refused[0])
