"""proton's engine API pumped in memory: ``amqp_async.proton`` beside python-qpid-proton's own engine.

One engine program, written once against proton's engine API (two ``Connection`` + ``Transport`` pairs, a
``Collector`` each, bytes moved between the transports by the program), sends 1 KiB messages at-least-once: the
receiver accepts and settles each one, the sender settles each once its outcome arrives. It runs with ``proton`` and
with ``amqp_async.proton``, each in a child process of its own; the clock covers the transfers only (connection and
link set-up are outside it).

    python benchmarks/proton_engine.py [--count 20000] [--window 200] [--turns 3]
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
from typing import Any

from _common import Row, child_run, print_rows, proton_available

BODY = bytes(1024)


def _pump(src: Any, dst: Any) -> bool:
    pending = src.pending()
    if pending <= 0:
        return False
    capacity = dst.capacity()
    if capacity <= 0:
        return False
    data = src.peek(min(pending, capacity))
    dst.push(data)
    src.pop(len(data))
    return True


def run(module_name: str, count: int, window: int) -> float:
    """Send ``count`` messages through an in-memory engine pair; return messages per second."""
    mod = importlib.import_module(module_name)
    c1, c2 = mod.Connection(), mod.Connection()
    col1, col2 = mod.Collector(), mod.Collector()
    c1.collect(col1)
    c2.collect(col2)
    t1, t2 = mod.Transport(), mod.Transport(mod.Transport.SERVER)
    t1.bind(c1)
    t2.bind(c2)
    c1.open()
    session = c1.session()
    session.open()
    sender = session.sender("bench")
    sender.target.address = "q"
    sender.open()

    def pump() -> None:
        while _pump(t1, t2) or _pump(t2, t1):
            pass

    pump()
    c2.open()
    mask = mod.Endpoint.LOCAL_UNINIT | mod.Endpoint.REMOTE_ACTIVE
    c2.session_head(mask).open()
    receiver = c2.link_head(mask)
    receiver.target.copy(receiver.remote_target)
    receiver.open()
    receiver.flow(window)
    pump()
    accepted = mod.Delivery.ACCEPTED
    sent = done = 0
    tag = 0
    start = time.perf_counter()
    while done < count:
        while sent < count and sender.credit > 0:
            tag += 1
            sender.delivery(b"%d" % tag)
            sender.send(BODY)
            sender.advance()
            sent += 1
        pump()
        # The receiver: every delivery that arrived is read, accepted and settled; credit is topped up.
        event = col2.peek()
        while event is not None:
            if event.type == mod.Event.DELIVERY:
                delivery = event.delivery
                if delivery.readable and not delivery.partial:
                    receiver.recv(delivery.pending)
                    delivery.update(accepted)
                    delivery.settle()
                    receiver.flow(1)
            col2.pop()
            event = col2.peek()
        pump()
        # The sender: settle what the receiver settled.
        event = col1.peek()
        while event is not None:
            if event.type == mod.Event.DELIVERY:
                delivery = event.delivery
                if delivery.remote_state == accepted and delivery.settled:
                    delivery.settle()
                    done += 1
            col1.pop()
            event = col1.peek()
    elapsed = time.perf_counter() - start
    return count / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=20000)
    parser.add_argument("--window", type=int, default=200)
    parser.add_argument("--turns", type=int, default=3, help="runs of each, best kept")
    parser.add_argument("--child", nargs=3, metavar=("MODULE", "COUNT", "WINDOW"), help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.child:
        module_name, count, window = arguments.child
        print(json.dumps(run(module_name, int(count), int(window))))
        return
    print_rows(
        f"proton engine API, in-memory pair, {arguments.count} x 1 KiB at-least-once (window {arguments.window})",
        rows(arguments.count, arguments.window, arguments.turns),
    )


def rows(count: int = 20000, window: int = 200, turns: int = 3) -> list[Row]:
    """The report's row: each implementation ``turns`` times, in alternation, a fresh process each; best kept."""
    rates: dict[str, float] = {}
    modules = ["amqp_async.proton"] + (["proton"] if proton_available() else [])
    for _ in range(turns):
        for module_name in modules:
            rate = child_run(__file__, [module_name, str(count), str(window)], "proton engine")
            rates[module_name] = max(rates.get(module_name, 0.0), rate)
    return [
        Row(
            "proton engine",
            "send+accept+settle, 1 KiB, in-memory pair",
            "msg/s",
            rates["amqp_async.proton"],
            rates.get("proton"),
            target=3.0,
            note=f"{count} messages, best of {turns}",
        )
    ]


if __name__ == "__main__":
    sys.exit(main())
