"""Memory, side by side with python-qpid-proton: RSS per idle connection and bytes per in-flight message.

Run: ``python benchmarks/memory.py [--quick] [--connections N] [--messages N]``.

The peer is our broker in its own process (``python -m amqp_async.broker --port 0``). Every measurement runs in a
fresh client process of its own, so nothing of one client (or one measurement) is in another's figures.

- idle connection: the client opens one connection first (warm-up: lazily made caches and imports are paid, the
  same for both), takes the process's RSS, opens N more connections (connection only: no session, no link) and
  waits until the broker has answered every one, collects garbage, and takes the RSS again:
  ``(RSS after - RSS before) / N``. Ours: ``await amqp_async.connect(url)`` N times on one event loop;
  proton: one ``Container`` with N ``container.connect(url)``.
- in-flight message: a queue of the broker is filled with N messages (16-byte bodies) beforehand, by another
  process. The client attaches a receiver with no credit, takes its baseline, grants N credit and keeps every
  delivery unsettled, holding the handle it needs to settle it later (ours: the ``Delivery``; proton:
  ``event.delivery`` from ``on_message`` with auto-accept off). Two figures per client, each from its own process:
  the RSS growth per message (the ratio is taken on this one: it counts proton's C allocations too) and the Python
  heap growth per message as ``tracemalloc`` sees it (proton's C heap is invisible to tracemalloc, so its figure
  there is a floor, shown for information).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import sys
import time
import tracemalloc
import uuid
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import Row, broker_process, child_run, print_rows, proton_available, rss_bytes

import amqp_async
from amqp_async.message import Message

BODY = b"0123456789abcdef"


def _raise_file_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or soft < hard):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard if hard != resource.RLIM_INFINITY else 65536, hard))


def _report(figures: dict[str, float]) -> None:
    """Print the child's result and leave at once (tearing 1,000 connections down is not what we measure)."""
    print(json.dumps(figures), flush=True)
    os._exit(0)


class _Meter:
    """RSS (or, with ``traced``, the tracemalloc heap) before and after."""

    def __init__(self, traced: bool) -> None:
        self.traced = traced

    def _now(self) -> int:
        gc.collect()
        return tracemalloc.get_traced_memory()[0] if self.traced else rss_bytes()

    def start(self) -> None:
        if self.traced:
            tracemalloc.start()
        self.before = self._now()

    def per(self, count: int) -> float:
        return (self._now() - self.before) / count


# --- children: idle connections ------------------------------------------------------------------------------------


async def _ours_idle(url: str, count: int) -> None:
    warm = await amqp_async.connect(url, reconnect=False)
    meter = _Meter(traced=False)
    meter.start()
    connections = [await amqp_async.connect(url, reconnect=False) for _ in range(count)]
    await anyio.sleep(0.2)
    _report({"per_connection": meter.per(count), "open": len(connections) + bool(warm)})


def _proton_idle(url: str, count: int) -> None:
    from proton.handlers import MessagingHandler
    from proton.reactor import Container

    address = url.removeprefix("amqp://")

    class Idle(MessagingHandler):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.opened = 0
            self.meter = _Meter(traced=False)
            self.connections: list[Any] = []

        def on_start(self, event: Any) -> None:
            self.connections.append(event.container.connect(address, reconnect=False))

        def on_connection_opened(self, event: Any) -> None:
            self.opened += 1
            if self.opened == 1:
                self.meter.start()
                for _ in range(count):
                    self.connections.append(event.container.connect(address, reconnect=False))
            elif self.opened == count + 1:
                time.sleep(0.2)
                _report({"per_connection": self.meter.per(count), "open": self.opened})

    Container(Idle()).run()


# --- children: in-flight messages ----------------------------------------------------------------------------------


async def _ours_inflight(url: str, address: str, count: int, traced: bool) -> None:
    async with amqp_async.connect(url, reconnect=False) as connection:
        receiver = await connection.open_receiver(address, credit=0)
        meter = _Meter(traced)
        meter.start()
        receiver.add_credit(count)
        held = []
        while len(held) < count:
            held.append(await receiver.receive())
        _report({"per_message": meter.per(count), "held": len(held)})


def _proton_inflight(url: str, address: str, count: int, traced: bool) -> None:
    from proton.handlers import MessagingHandler
    from proton.reactor import Container

    class Hold(MessagingHandler):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__(prefetch=0, auto_accept=False)
            self.held: list[Any] = []
            self.meter = _Meter(traced)

        def on_start(self, event: Any) -> None:
            event.container.create_receiver(url.removeprefix("amqp://") + "/" + address)

        def on_link_opened(self, event: Any) -> None:
            self.meter.start()
            event.receiver.flow(count)

        def on_message(self, event: Any) -> None:
            self.held.append(event.delivery)
            if len(self.held) == count:
                _report({"per_message": self.meter.per(count), "held": len(self.held)})

    Container(Hold()).run()


def _child(arguments: list[str]) -> None:
    _raise_file_limit()
    kind, client, url = arguments[:3]
    if kind == "idle":
        count = int(arguments[3])
        if client == "ours":
            anyio.run(_ours_idle, url, count)
        else:
            _proton_idle(url, count)
    else:
        address, count, traced = arguments[3], int(arguments[4]), arguments[5] == "traced"
        if client == "ours":
            anyio.run(_ours_inflight, url, address, count, traced)
        else:
            _proton_inflight(url, address, count, traced)


# --- the benchmark -----------------------------------------------------------------------------------------------


def _spawn(*arguments: str, timeout: float = 180) -> dict[str, float]:
    figures: dict[str, float] = child_run(__file__, list(arguments), "memory", timeout=timeout)
    return figures


async def _fill(url: str, address: str, count: int) -> None:
    async with amqp_async.connect(url, reconnect=False) as connection:
        sender = await connection.open_sender(address)
        trackers = [await sender.submit(Message(body=BODY)) for _ in range(count)]
        for tracker in trackers:
            await tracker


def run(quick: bool = False, connections: int | None = None, messages: int | None = None) -> list[Row]:
    connections = connections or (200 if quick else 1_000)
    messages = messages or (2_000 if quick else 10_000)
    clients = ["ours", "proton"] if proton_available() else ["ours"]
    idle: dict[str, float | None] = {"ours": None, "proton": None}
    rss: dict[str, float | None] = {"ours": None, "proton": None}
    traced: dict[str, float | None] = {"ours": None, "proton": None}
    with broker_process() as broker:
        for client in clients:
            idle[client] = _spawn("idle", client, broker.url, str(connections))["per_connection"]
        for client in clients:
            for mode, figures in (("rss", rss), ("traced", traced)):
                address = f"inflight-{client}-{mode}-{uuid.uuid4().hex[:8]}"
                anyio.run(_fill, broker.url, address, messages)
                figures[client] = _spawn("inflight", client, broker.url, address, str(messages), mode)["per_message"]
    return [
        Row("memory", f"RSS per idle connection ({connections:,})", "B", idle["ours"], idle["proton"], "lower", 1),
        Row("memory", f"RSS per in-flight message ({messages:,})", "B", rss["ours"], rss["proton"], "lower"),
        Row(
            "memory",
            "tracemalloc per in-flight message",
            "B",
            traced["ours"],
            traced["proton"],
            "lower",
            note="(proton's C heap not seen)",
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small run (200 connections, 2,000 messages)")
    parser.add_argument("--connections", type=int, help="idle connections (default 1,000)")
    parser.add_argument("--messages", type=int, help="in-flight messages (default 10,000)")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.child)
        return
    print_rows("Memory (bytes; lower is better)", run(args.quick, args.connections, args.messages))


if __name__ == "__main__":
    main()
