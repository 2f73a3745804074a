"""Soak: the broker at full rate for minutes on end, with the RSS of broker and client over time (not in CI).

Run: ``python benchmarks/soak.py [--minutes 10] [--interval 30] [--size 100] [--durable]``.

Our broker runs in its own process (``python -m amqp_async.broker --port 0 --max-queue-depth 10000``; with
``--durable`` also ``--data-dir`` in a temporary directory, and the messages are durable). This process is the
client: one connection with a producer (``submit()`` with a window of 1,000 unconfirmed sends, every outcome
awaited) and one with a consumer (credit 1,000, every message decoded and accepted), as fast as they go. The queue
depth limit keeps the backlog bounded when the producer outruns the consumer, so the memory figures measure the
processes, not a growing queue.

Every ``--interval`` seconds it prints the rates and the resident set size (RSS, from /proc) of the broker and of
the client; at the end, the first sample (taken after a warm-up of one interval) beside the last one. Flat RSS
over a long run means nothing accumulates per message (unsettled state, delivery records, store bookkeeping).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import broker_process, rss_bytes

import amqp_async
from amqp_async import Message

WINDOW = 1000
CREDIT = 1000
MAX_QUEUE_DEPTH = 10_000


class Counts:
    """Messages sent (accepted) and received (accepted by us) so far."""

    def __init__(self) -> None:
        self.sent = 0
        self.received = 0


async def produce(url: str, body: bytes, durable: bool, counts: Counts) -> None:
    async with amqp_async.connect(url, reconnect=False) as conn:
        sender = await conn.open_sender("soak")
        pending: list[amqp_async.Tracker] = []
        half = WINDOW // 2
        while True:
            pending.append(await sender.submit(Message(body=body, durable=durable)))
            if len(pending) >= WINDOW:
                for tracker in pending[:half]:
                    await tracker
                del pending[:half]
                counts.sent += half


async def consume(url: str, counts: Counts) -> None:
    async with amqp_async.connect(url, reconnect=False) as conn:
        receiver = await conn.open_receiver("soak", credit=CREDIT)
        async for delivery in receiver:
            delivery.message  # noqa: B018 (decoded, as an application would)
            await delivery.accept()
            counts.received += 1


def _mb(value: int) -> str:
    return f"{value / 1e6:8.1f} MB"


async def soak(minutes: float, interval: float, size: int, durable: bool) -> None:
    data_dir = tempfile.mkdtemp(prefix="soak-") if durable else None
    extra = ["--max-queue-depth", str(MAX_QUEUE_DEPTH)] + (["--data-dir", data_dir] if data_dir else [])
    try:
        with broker_process(*extra) as broker:
            pid = broker.process.pid
            counts = Counts()
            body = b"s" * size
            print(
                f"soak: {minutes:g} min, {size}-byte {'durable ' if durable else ''}messages through {broker.url}"
                f" (broker pid {pid})"
            )
            print(f"{'time':>7} {'sent/s':>9} {'recv/s':>9} {'broker RSS':>12} {'client RSS':>12} {'backlog':>8}")
            samples: list[tuple[float, int, int]] = []
            async with anyio.create_task_group() as group:
                group.start_soon(produce, broker.url, body, durable, counts)
                group.start_soon(consume, broker.url, counts)
                start = last_time = time.monotonic()
                last_sent = last_received = 0
                end = start + minutes * 60
                while True:
                    await anyio.sleep(max(0.0, min(interval, end - time.monotonic())))
                    now = time.monotonic()
                    sent, received = counts.sent, counts.received
                    elapsed = now - last_time
                    broker_rss, client_rss = rss_bytes(pid), rss_bytes()
                    samples.append((now - start, broker_rss, client_rss))
                    print(
                        f"{now - start:6.0f}s {(sent - last_sent) / elapsed:9,.0f} {(received - last_received) / elapsed:9,.0f}"
                        f" {_mb(broker_rss):>12} {_mb(client_rss):>12} {max(0, sent - received):8,}",
                        flush=True,
                    )
                    last_time, last_sent, last_received = now, sent, received
                    if now >= end:
                        break
                group.cancel_scope.cancel()
            total = time.monotonic() - start
            print(
                f"\n{counts.sent:,} sent and {counts.received:,} received in {total:.0f} s"
                f" ({counts.received / total:,.0f} msg/s)"
            )
            first = samples[0]
            last = samples[-1]
            print(f"RSS at {first[0]:.0f} s (after warm-up): broker {_mb(first[1])}, client {_mb(first[2])}")
            print(f"RSS at {last[0]:.0f} s (end):           broker {_mb(last[1])}, client {_mb(last[2])}")
            print(f"growth: broker {(last[1] - first[1]) / 1e6:+.1f} MB, client {(last[2] - first[2]) / 1e6:+.1f} MB")
    finally:
        if data_dir is not None:
            shutil.rmtree(data_dir, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="how long to run (default 10)")
    parser.add_argument("--interval", type=float, default=30.0, help="seconds between samples (default 30)")
    parser.add_argument("--size", type=int, default=100, help="message body size in bytes (default 100)")
    parser.add_argument("--durable", action="store_true", help="durable messages, broker with --data-dir")
    arguments = parser.parse_args()
    anyio.run(soak, arguments.minutes, arguments.interval, arguments.size, arguments.durable)


if __name__ == "__main__":
    main()
