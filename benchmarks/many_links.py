"""Many links to one queue of the embedded broker, beside python-qpid-proton opening the same links.

    python benchmarks/many_links.py [--quick] [--links N ...] [--max-memory BYTES] [--idle N ...]

One connection opens ``N`` senders to one queue (each attach awaited before the next, as a program opening its
links does), then closes. Two figures for each ``N``, each client in a fresh process, the broker in its own:

- **attaches/s**: links attached per second, from the first attach to the last answer;
- **end**: milliseconds from the connection's close to the broker having let go of every link (the next attach on
  another connection is answered: the broker handles one connection's end before the next frame).

The broker runs with ``--max-memory`` (default: room for the links, which take at most half the broker's budget,
and 1 MiB more: see ``memory_for``), and a first message of 100 kB is sent before the other links attach, so that they are starved by the memory
limit: the case where the broker's flow control does the most work per link. Both figures should stay flat as
``N`` grows (linear work in all). The broker once summed every producer's credit at each attach and made a pass
over the starved ones at each detach: with 4,000 links, 734 attaches/s and 19.2 s to end (proton's Container 424
and 20.8 s); since it keeps running totals (2026-11-28), 3,255/s and 18 ms (proton's 2,383/s and 7 ms), about the
same at 1,000 and 8,000.

A third figure, for each ``--idle`` count: one connection holds that many receivers without credit on a queue,
and another sends and receives 1,000 messages on it, one at a time (our client in both, in a fresh process), through
our broker and through the Qpid Proton C broker example (in the proton column). Each message put made our broker
ask every consumer of the queue for its credit: with 20,000 idle receivers, 124 a second where 3,600 went without
them; a consumer found without credit is passed by until its next flow (2026-11-29): 4,500.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import anyio
from _common import Row, broker_process, c_broker, child_run, print_rows, proton_available

import amqp_async
from amqp_async.broker._flow import ENDPOINT_SIZE

SECTION = "many links"
FIRST = b"x" * 100_000
ADDRESS = "crowd"
IDLE_ADDRESS = "beside-the-idle"
IDLE_ROUND_TRIPS = 1_000


async def _next_attach_answered(url: str) -> None:
    async with amqp_async.connect(url, reconnect=False) as connection:
        await connection.open_sender(ADDRESS)


async def ours(url: str, links: int) -> tuple[float, float]:
    """(attaches per second, seconds to end) for our client."""
    connection = await amqp_async.connect(url, reconnect=False)
    first = await connection.open_sender(ADDRESS)
    await first.send(amqp_async.Message(body=FIRST))
    start = time.perf_counter()
    for _ in range(links):
        await connection.open_sender(ADDRESS)
    attached = time.perf_counter()
    await connection.close()
    await _next_attach_answered(url)
    return links / (attached - start), time.perf_counter() - attached


def proton(url: str, links: int) -> tuple[float, float]:
    """(attaches per second, seconds to end) for python-qpid-proton's Container."""
    from proton import Message
    from proton.handlers import MessagingHandler
    from proton.reactor import Container

    class Crowd(MessagingHandler):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.opened = 0
            self.start = self.attached = self.ended = 0.0
            self.phase = "first"

        def on_start(self, event: Any) -> None:
            self.container = event.container
            self.connection = self.container.connect(url.removeprefix("amqp://"), reconnect=False)
            self.first = self.container.create_sender(self.connection, ADDRESS)

        def _attach(self) -> None:
            # proton names a link after its container and address: each needs a name of its own (§2.6.1)
            self.container.create_sender(self.connection, ADDRESS, name=f"{ADDRESS}-{self.opened}")

        def on_sendable(self, event: Any) -> None:
            if self.phase == "first":
                self.phase = "sent"
                self.first.send(Message(body=FIRST))

        def on_accepted(self, event: Any) -> None:
            if self.phase == "sent":
                self.phase = "attaching"
                self.start = time.perf_counter()
                self._attach()

        def on_link_opened(self, event: Any) -> None:
            if self.phase == "probing":
                self.ended = time.perf_counter()
                self.probe.close()
                return
            if self.phase != "attaching":
                return
            self.opened += 1
            if self.opened < links:
                self._attach()
            else:
                self.attached = time.perf_counter()
                self.phase = "closing"
                self.connection.close()

        def on_connection_closed(self, event: Any) -> None:
            if self.phase == "closing":
                self.probe = self.container.connect(url.removeprefix("amqp://"), reconnect=False)
                self.container.create_sender(self.probe, ADDRESS)
                self.phase = "probing"

    handler = Crowd()
    Container(handler).run()
    return links / (handler.attached - handler.start), handler.ended - handler.attached


async def beside_idle(url: str, idle: int, count: int = IDLE_ROUND_TRIPS) -> float:
    """Messages per second sent and received one at a time on a queue where another connection holds ``idle``
    receivers without credit."""
    async with amqp_async.connect(url, reconnect=False) as crowd, amqp_async.connect(url, reconnect=False) as busy:
        for _ in range(idle):
            await crowd.open_receiver(IDLE_ADDRESS, credit=0)
        sender = await busy.open_sender(IDLE_ADDRESS)
        receiver = await busy.open_receiver(IDLE_ADDRESS, credit=10)
        start = time.perf_counter()
        for body in range(count):
            await sender.send(amqp_async.Message(body=body))
            await (await receiver.receive()).accept()
        return count / (time.perf_counter() - start)


def idle_rows(counts: list[int]) -> list[Row]:
    """For each count of idle receivers, our broker's figure beside the C broker example's."""
    rows = []
    for idle in counts:
        with broker_process() as broker:
            ours_rate = child_run(__file__, ["idle", broker.url, str(idle)], "idle receivers")
        proton_rate = None
        try:
            with c_broker() as peer:
                proton_rate = child_run(__file__, ["idle", f"amqp://127.0.0.1:{peer.port}", str(idle)], "C broker")
        except Exception as exc:  # the C examples cannot be built here: our figure alone
            print(f"(the C broker example: {exc})", file=sys.stderr)
        rows.append(
            Row(
                SECTION,
                f"send+receive beside {idle:,} idle receivers on the queue",
                "msg/s",
                ours_rate,
                proton_rate,
                note="proton column: the C broker example",
            )
        )
    return rows


def _child(client: str, url: str, links: int) -> tuple[float, float] | float:
    if client == "idle":
        rate: float = anyio.run(beside_idle, url, links)
        return rate
    if client == "ours":
        result: tuple[float, float] = anyio.run(ours, url, links)
        return result
    return proton(url, links)


def memory_for(links: int) -> int:
    """The broker's ``--max-memory`` for ``links``: what leaves the links their room (half the budget at most) and
    1 MiB more. The budget is what the option leaves once the process's own memory is counted, a quarter of it at
    least (``amqp_async.broker.__main__.message_budget``)."""
    return 4 * (2 * (links + 2) * ENDPOINT_SIZE + (1 << 20))


def run(quick: bool = False, counts: list[int] | None = None, max_memory: int | None = None) -> list[Row]:
    """Each count of links, ours then proton's, each through a broker of its own; returns the report rows."""
    counts = counts or ([500, 2000] if quick else [1000, 4000, 8000])
    rows: list[Row] = []
    for links in counts:
        figures: dict[str, tuple[float, float] | None] = {}
        for client in ("ours", "proton"):
            if client == "proton" and not proton_available():
                figures[client] = None
                continue
            with broker_process("--max-memory", str(max_memory or memory_for(links))) as broker:
                figures[client] = tuple(child_run(__file__, [client, broker.url, str(links)], f"{client} links"))
        ours_figures, proton_figures = figures["ours"], figures["proton"]
        rows.append(
            Row(
                SECTION,
                f"sender attaches to one queue, {links:,} on a connection",
                "link/s",
                ours_figures[0] if ours_figures else None,
                proton_figures[0] if proton_figures else None,
            )
        )
        rows.append(
            Row(
                SECTION,
                f"the connection's end, {links:,} starved senders",
                "ms",
                ours_figures[1] * 1000 if ours_figures else None,
                proton_figures[1] * 1000 if proton_figures else None,
                better="lower",
            )
        )
    return rows


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        client, url, links = sys.argv[2:5]
        print(json.dumps(_child(client, url, int(links))))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--links", type=int, nargs="+")
    parser.add_argument("--max-memory", type=int, help="default: room for the links, and 1 MiB more")
    parser.add_argument("--idle", type=int, nargs="+", help="idle receivers (default 20,000; 2,000 with --quick)")
    args = parser.parse_args()
    idle = args.idle or ([2_000] if args.quick else [20_000])
    print_rows(
        "Many links to one queue of our broker, beside python-qpid-proton",
        run(args.quick, args.links, args.max_memory) + idle_rows(idle),
    )


if __name__ == "__main__":
    main()
