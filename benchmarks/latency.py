"""Latency, side by side with python-qpid-proton: confirmed-send round trip and request/reply, p50 and p99.

Run: ``python benchmarks/latency.py [--quick] [--messages N]``.

- confirmed send: one message (16-byte body, at-least-once) at a time to the Qpid Proton C ``direct`` example as
  the receiver (it accepts and settles each one); the round trip runs from handing the message to the client to
  learning its outcome (ours: ``await sender.send(message)``; proton: ``sender.send()`` in ``on_sendable`` to
  ``on_accepted``), and the next message goes only then. The proton program also runs on our callback API
  (``amqp_async.proton``, only its imports changed): proton's own way of writing it, beside proton.
- request/reply: a request (16-byte body, at-least-once, ``reply_to`` = a dynamic reply queue the client attached
  with ``dynamic=True``) to the ``requests`` queue of our broker (its own process); a responder in a third process
  (our client, the same for both) answers each to its ``reply_to``. The round trip runs from handing the request
  to the client to receiving the reply (decoded); the reply is accepted and the request's own outcome awaited
  before the next request, for both clients.

The first ``warm-up`` round trips of every run are left out of the figures, the same number for both clients. The
p50 rows' note gives each client's CPU time per round trip (user and system, over its whole run): what is left of
a round trip is the peer's work and the two processes' wake-ups. Each
client runs in a fresh process of its own; ours on asyncio, and the confirmed send also on uvloop and on the
callback API. The clients take
turns, twice by default, and each keeps its run with the lowest median (p99 from that same run).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import ROOT, Row, broker_process, child_run, percentile, print_rows, proton_available
from _peers import start_direct

import amqp_async
from amqp_async.message import Message

BODY = b"0123456789abcdef"


# --- confirmed send ----------------------------------------------------------------------------------------------


async def ours_confirmed(url: str, address: str, count: int, warmup: int) -> list[float]:
    async with amqp_async.connect(url, reconnect=False) as connection:
        sender = await connection.open_sender(address)
        times = []
        for _ in range(warmup + count):
            start = time.perf_counter()
            await sender.send(Message(body=BODY))
            times.append(time.perf_counter() - start)
        return times[warmup:]


def proton_confirmed(url: str, address: str, count: int, warmup: int, api: str = "proton") -> list[float] | None:
    """The round trips of a proton program: python-qpid-proton's, or with ``api="amqp_async.proton"`` the same
    program on our callback API (only the imports differ)."""
    if api == "proton" and not proton_available():
        return None
    ProtonMessage = importlib.import_module(api).Message
    MessagingHandler = importlib.import_module(f"{api}.handlers").MessagingHandler
    Container = importlib.import_module(f"{api}.reactor").Container

    total = warmup + count

    class Send(MessagingHandler):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.times: list[float] = []
            self.sent = 0
            self.in_flight = False
            self.start = 0.0

        def on_start(self, event: Any) -> None:
            self.sender = event.container.create_sender(url.removeprefix("amqp://") + "/" + address)

        def _next(self) -> None:
            if not self.in_flight and self.sent < total and self.sender.credit:
                self.in_flight = True
                self.sent += 1
                self.start = time.perf_counter()
                message = ProtonMessage(body=BODY)
                message.inferred = True
                self.sender.send(message)

        def on_sendable(self, event: Any) -> None:
            self._next()

        def on_accepted(self, event: Any) -> None:
            self.times.append(time.perf_counter() - self.start)
            self.in_flight = False
            if len(self.times) == total:
                event.connection.close()
            else:
                self._next()

    handler = Send()
    Container(handler).run()
    return handler.times[warmup:]


#: The confirmed-send p50 rows' target: ours at most 0.35x of python-qpid-proton's time (1 / 0.35, rounded up).
P50_TARGET = 2.86

#: One run's figures: {"p50": µs, "p99": µs, "cpu": µs of the client's CPU time per round trip}.
Summary = dict[str, float]

CLIENTS = {
    "proton": None,
    "asyncio": {"backend": "asyncio"},
    "uvloop": {"backend": "asyncio", "backend_options": {"use_uvloop": True}},
}


def child(kind: str, client: str, url: str, address: str, count: int, warmup: int) -> list[float] | None:
    """One client's round trips, in this process (the subprocess body)."""
    if client == "proton":
        function = proton_confirmed if kind == "confirmed" else proton_request_reply
        return function(url, address, count, warmup)
    if client == "callback":
        return proton_confirmed(url, address, count, warmup, api="amqp_async.proton")
    function = ours_confirmed if kind == "confirmed" else ours_request_reply
    return anyio.run(function, url, address, count, warmup, **CLIENTS[client])  # type: ignore[no-any-return]


def measure(kind: str, client: str, url: str, address: str, count: int, warmup: int) -> Summary | None:
    """:func:`child` in a fresh subprocess, summarized (p50, p99 in µs): nothing else of the benchmark (such as the
    thread that reads the C peer's output) shares the client's interpreter."""
    if client == "proton" and not proton_available():
        return None
    if client == "uvloop" and importlib.util.find_spec("uvloop") is None:
        return None
    summary: Summary | None = child_run(__file__, [kind, client, url, address, str(count), str(warmup)], "latency")
    return summary


def _against_direct(client: str, count: int, warmup: int) -> Summary | None:
    peer = start_direct("examples", count + warmup)
    try:
        return measure("confirmed", client, f"amqp://127.0.0.1:{peer.port}", "examples", count, warmup)
    finally:
        peer.stop()


# --- request/reply -----------------------------------------------------------------------------------------------


async def responder(url: str, address: str) -> None:
    """Answer every request on ``address`` with its body, to its ``reply_to``, correlated by its id."""
    async with amqp_async.connect(url, reconnect=False) as connection:
        receiver = await connection.open_receiver(address, credit=100)
        sender = await connection.open_sender(None)
        print("ready", flush=True)
        async for delivery in receiver:
            request = delivery.message
            await sender.submit(Message(body=request.body, address=request.reply_to, correlation_id=request.id))
            await delivery.accept()


class Responder:
    """The responder in its own process (our client; the same peer for both clients)."""

    def __init__(self, url: str, address: str) -> None:
        environment = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--responder", url, address], stdout=subprocess.PIPE, text=True, env=environment
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if line.strip() != "ready":
            self.process.kill()
            raise RuntimeError(f"the responder did not start: {line!r}")

    def stop(self) -> None:
        self.process.kill()
        self.process.wait(5)


async def ours_request_reply(url: str, address: str, count: int, warmup: int) -> list[float]:
    async with amqp_async.connect(url, reconnect=False) as connection:
        replies = await connection.open_receiver(None, dynamic=True, credit=10)
        reply_to = replies.address
        sender = await connection.open_sender(address)
        times = []
        for number in range(warmup + count):
            start = time.perf_counter()
            tracker = await sender.submit(Message(body=BODY, id=number, reply_to=reply_to))
            delivery = await replies.receive()
            reply = delivery.message
            times.append(time.perf_counter() - start)
            assert reply.correlation_id == number
            await delivery.accept()
            await tracker
        return times[warmup:]


def proton_request_reply(url: str, address: str, count: int, warmup: int) -> list[float] | None:
    if not proton_available():
        return None
    from proton import Message as ProtonMessage
    from proton.handlers import MessagingHandler
    from proton.reactor import Container

    total = warmup + count

    class Client(MessagingHandler):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__(prefetch=10)
            self.times: list[float] = []
            self.sent = 0
            self.reply_to: str | None = None
            self.replied = self.accepted = True
            self.start = 0.0

        def on_start(self, event: Any) -> None:
            connection = event.container.connect(url.removeprefix("amqp://"), reconnect=False)
            self.receiver = event.container.create_receiver(connection, None, dynamic=True)
            self.sender = event.container.create_sender(connection, address)

        def on_link_opened(self, event: Any) -> None:
            if event.link.is_receiver:
                self.reply_to = event.link.remote_source.address
                self._next()

        def _next(self) -> None:
            ready = self.replied and self.accepted and self.reply_to is not None and self.sender.credit
            if ready and self.sent < total:
                self.replied = self.accepted = False
                self.start = time.perf_counter()
                self.sender.send(ProtonMessage(body=BODY, id=self.sent, reply_to=self.reply_to, inferred=True))
                self.sent += 1

        def on_sendable(self, event: Any) -> None:
            self._next()

        def on_message(self, event: Any) -> None:
            self.times.append(time.perf_counter() - self.start)
            assert event.message.correlation_id == self.sent - 1
            self.replied = True
            self._after()

        def on_accepted(self, event: Any) -> None:
            self.accepted = True
            self._after()

        def _after(self) -> None:
            if not (self.replied and self.accepted):
                return
            if len(self.times) == total:
                self.sender.connection.close()
            else:
                self._next()

    handler = Client()
    Container(handler).run()
    return handler.times[warmup:]


# --- the benchmark -----------------------------------------------------------------------------------------------


def summarize(times: list[float] | None) -> Summary | None:
    """p50 and p99 of one run's round trips, in µs."""
    if not times:
        return None
    return {"p50": percentile(times, 0.50) * 1e6, "p99": percentile(times, 0.99) * 1e6}


def _rows(section: str, label: str, ours: Summary | None, theirs: Summary | None, target: bool) -> list[Row]:
    rows = []
    for name in ("p50", "p99"):
        mine = ours[name] if ours else None
        reference = theirs[name] if theirs else None
        # The goal: a confirmed send's p50 at most 0.35x of python-qpid-proton's (x proton >= 1 / 0.35).
        goal = P50_TARGET if target and name == "p50" else None
        note = ""
        if name == "p50" and ours and theirs and "cpu" in ours and "cpu" in theirs:
            note = f"client CPU per round trip: ours {ours['cpu']:,.0f} µs, proton {theirs['cpu']:,.0f} µs"
        rows.append(Row(section, f"{label} {name}", "µs", mine, reference, better="lower", target=goal, note=note))
    return rows


def _best(runs: list[Summary | None]) -> Summary | None:
    """The run with the lowest median (each client's best turn, as the throughput figures keep their best)."""
    known = [summary for summary in runs if summary]
    return min(known, key=lambda summary: summary["p50"]) if known else None


def run(quick: bool = False, messages: int | None = None, repeat: int | None = None) -> list[Row]:
    count = messages or (1_000 if quick else 10_000)
    warmup = max(50, count // 20)
    turns = repeat or (1 if quick else 2)
    clients = ("proton", "asyncio", "uvloop", "callback")
    confirmed: dict[str, list[Summary | None]] = {client: [] for client in clients}
    replies: dict[str, list[Summary | None]] = {client: [] for client in ("proton", "asyncio")}
    for turn in range(turns):
        for client in clients if turn % 2 == 0 else clients[::-1]:
            confirmed[client].append(_against_direct(client, count, warmup))
    with broker_process() as broker:
        responder_process = Responder(broker.url, "requests")
        try:
            for turn in range(turns):
                for client in ("proton", "asyncio") if turn % 2 == 0 else ("asyncio", "proton"):
                    replies[client].append(measure("request-reply", client, broker.url, "requests", count, warmup))
        finally:
            responder_process.stop()
    theirs = _best(confirmed["proton"])
    rows = _rows("latency", "confirmed send to C direct", _best(confirmed["asyncio"]), theirs, True)
    rows += _rows("latency", "confirmed send to C direct, uvloop", _best(confirmed["uvloop"]), theirs, True)
    rows += _rows(
        "latency",
        "confirmed send to C direct, callback API (proton's program)",
        _best(confirmed["callback"]),
        theirs,
        True,
    )
    rows += _rows(
        "latency",
        "request/reply, dynamic queue, our broker",
        _best(replies["asyncio"]),
        _best(replies["proton"]),
        False,
    )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small run (1,000 round trips)")
    parser.add_argument("--messages", type=int, help="round trips measured per run (default 10,000)")
    parser.add_argument("--repeat", type=int, help="runs per client, the best median kept (default 2; quick 1)")
    parser.add_argument("--responder", nargs=2, metavar=("URL", "ADDRESS"), help=argparse.SUPPRESS)
    parser.add_argument("--child", nargs=6, metavar="ARG", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, client, url, address, count, warmup = args.child
        before = resource.getrusage(resource.RUSAGE_SELF)
        summary = summarize(child(kind, client, url, address, int(count), int(warmup)))
        after = resource.getrusage(resource.RUSAGE_SELF)
        if summary is not None:
            # The client's CPU time per round trip (connecting and the warm-up included: about, not exactly).
            used = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
            summary["cpu"] = used / (int(count) + int(warmup)) * 1e6
        print(json.dumps(summary), flush=True)
        return
    if args.responder:
        anyio.run(responder, *args.responder)
        return
    rows = run(args.quick, args.messages, args.repeat)
    print_rows("Latency (µs; one message at a time; warm-up round trips excluded)", rows)


if __name__ == "__main__":
    main()
