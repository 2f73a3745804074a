"""Client throughput against the Qpid Proton C ``direct`` example, side by side with python-qpid-proton.

Run: ``python benchmarks/client.py [--messages N]`` (or ``nox -s bench``); it installs and builds the C examples
if they are missing (see ``_peers.py``).

- send: N messages with 16-byte bodies, at-least-once, to ``direct`` as the receiver (it accepts and settles each
  one). Both clients build and encode a Message per send, and decode every received one. Ours sends as a user
  writes for throughput: ``submit()`` in a loop, keeping a bounded window of trackers in
  flight and awaiting the oldest half when it fills; python-qpid-proton sends from ``on_sendable`` and counts
  ``on_accepted``, as its examples do. The time runs from the first send to the last outcome.
- receive: ``direct`` sends N messages to our receiver (credit 1000) and we ``await delivery.accept()`` each one;
  python-qpid-proton receives with prefetch 1000 and auto-accept. The time runs from the first message to the last.

Every run connects a fresh ``direct`` process; the connection set-up is outside the timed region for all clients.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _peers import start_direct

import amqp_async

BODY = b"0123456789abcdef"
WINDOW = 1000
PREFETCH = 1000


async def ours_send(port: int, count: int, started: Callable[[], None] | None = None) -> float:
    """Messages per second (``started``, if given, is called when the clock starts)."""
    async with amqp_async.connect(f"amqp://127.0.0.1:{port}", reconnect=False) as connection:
        sender = await connection.open_sender("examples")
        window: list[Any] = []
        if started is not None:
            started()
        start = time.perf_counter()
        for _ in range(count):
            # A message built and encoded per send, as proton's sender does in the same loop.
            window.append(await sender.submit(amqp_async.Message(body=BODY)))
            if len(window) >= WINDOW:
                for tracker in window[: WINDOW // 2]:
                    await tracker
                del window[: WINDOW // 2]
        for tracker in window:
            await tracker
        return count / (time.perf_counter() - start)


async def ours_receive(port: int, count: int, started: Callable[[], None] | None = None) -> float:
    """Messages per second, first to last (``started``, if given, is called when the clock starts)."""
    async with amqp_async.connect(f"amqp://127.0.0.1:{port}", reconnect=False) as connection:
        receiver = await connection.open_receiver("examples", credit=PREFETCH)
        delivery = await receiver.receive()
        if started is not None:
            started()
        start = time.perf_counter()
        delivery.message  # noqa: B018 - decoded, as every message after it
        await delivery.accept()
        for _ in range(count - 1):
            delivery = await receiver.receive()
            delivery.message  # noqa: B018 - decode it, as proton's on_message does for every message
            await delivery.accept()
        return (count - 1) / (time.perf_counter() - start)


def proton_send(port: int, count: int) -> float | None:
    try:
        from proton import Message
        from proton.handlers import MessagingHandler
        from proton.reactor import Container
    except ImportError:
        return None

    class Send(MessagingHandler):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.sent = self.confirmed = 0
            self.start = self.elapsed = 0.0

        def on_start(self, event: Any) -> None:
            event.container.create_sender(f"127.0.0.1:{port}/examples")

        def on_sendable(self, event: Any) -> None:
            if not self.start:
                self.start = time.perf_counter()
            while event.sender.credit and self.sent < count:
                event.sender.send(Message(body=BODY))
                self.sent += 1

        def on_accepted(self, event: Any) -> None:
            self.confirmed += 1
            if self.confirmed == count:
                self.elapsed = time.perf_counter() - self.start
                event.connection.close()

    handler = Send()
    Container(handler).run()
    return count / handler.elapsed


def proton_receive(port: int, count: int) -> float | None:
    try:
        from proton.handlers import MessagingHandler
        from proton.reactor import Container
    except ImportError:
        return None

    class Receive(MessagingHandler):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__(prefetch=PREFETCH)
            self.received = 0
            self.start = self.elapsed = 0.0

        def on_start(self, event: Any) -> None:
            event.container.create_receiver(f"127.0.0.1:{port}/examples")

        def on_message(self, event: Any) -> None:
            if not self.received:
                self.start = time.perf_counter()
            self.received += 1
            if self.received == count:
                self.elapsed = time.perf_counter() - self.start
                event.connection.close()

    handler = Receive()
    Container(handler).run()
    return (count - 1) / handler.elapsed


def run_against_direct(function: Any, count: int, **run_options: Any) -> float | None:
    peer = start_direct("examples", count)
    try:
        if run_options:
            return float(anyio.run(function, peer.port, count, **run_options))
        return function(peer.port, count)  # type: ignore[no-any-return]
    finally:
        peer.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    args = parser.parse_args()
    count = args.messages
    rows = []
    for direction, ours, theirs in (("send", ours_send, proton_send), ("receive", ours_receive, proton_receive)):
        reference = run_against_direct(theirs, count)
        asyncio_rate = run_against_direct(ours, count, backend="asyncio")
        try:
            import uvloop  # noqa: F401

            uvloop_rate = run_against_direct(ours, count, backend="asyncio", backend_options={"use_uvloop": True})
        except ImportError:
            uvloop_rate = None
        rows.append((direction, asyncio_rate, uvloop_rate, reference))
    print(f"Client vs the Qpid Proton C direct example: {count} messages, 16-byte bodies, at-least-once")
    print(f"{'':<10}{'amqp_async':>14}{'+ uvloop':>12}{'proton':>12}{'ratio':>8}")
    for direction, asyncio_rate, uvloop_rate, reference in rows:
        uv = f"{uvloop_rate:>12,.0f}" if uvloop_rate else f"{'-':>12}"
        ref = f"{reference:>12,.0f}" if reference else f"{'-':>12}"
        ratio = f"{asyncio_rate / reference:>8.2f}" if reference and asyncio_rate else ""
        print(f"{direction:<10}{asyncio_rate or 0:>14,.0f}{uv}{ref}{ratio}")


if __name__ == "__main__":
    main()
