"""1 MiB messages each way (MB/s), side by side with python-qpid-proton.

Run: ``python benchmarks/large.py [--quick] [--messages N] [--repeat R]``.

Peers: ``peers/sink.c`` (ours, on the Qpid Proton C library: it accepts every message and keeps none), the Qpid
Proton C ``broker`` example (native, queues in memory, prints nothing per message) and our embedded broker in its
own process. The sink is where the send figure measures the clients: taking 1 MiB into the C broker's queue
costs it about 1 ms of CPU, which caps any client near 1 GB/s there. Each row's note says how busy the peer's
process was during each client's best run (its CPU time over the timed wall time): near 100%, the peer, not the
client, set the figure. The C ``direct`` example is not used: it prints every message body it receives
(``pn_inspect``, about 4 MB of text per 1 MiB body), which caps it near 10 MB/s whatever the client. The C broker
example takes a message whole only when it arrives in one go: it copies each part of a message that comes in
several frames over the part before (``pn_link_recv`` into the start of its buffer), so the clients send each
1 MiB message in one frame, which the example allows (it sets no max-frame-size).

For each peer, both clients, each with a queue of its own:

- send (to all three peers): N messages with a 1 MiB binary body (a data section), at-least-once, at most 8
  unsettled at a time (ours: ``submit()`` with a window of 8 trackers; proton: sends from
  ``on_sendable``/``on_accepted`` while fewer than 8 are unconfirmed); the clock runs from the first send to the
  last outcome;
- receive (from the two brokers): the N messages back with credit 8, each decoded and accepted; first to last
  message.

Each message is built and encoded inside the timed region for both clients. Each measurement runs in a fresh
process (megabyte buffers make a process's earlier work, its heap and the kernel's page cache of it, part of the
next figure otherwise), ours on the event loop ``Container.run()`` uses (uvloop when installed); with
``--repeat``, the clients take turns and the best run of each is kept.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import uuid
from pathlib import Path
from typing import Any, NamedTuple

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    Row,
    broker_process,
    c_broker,
    child_run,
    ours_receive,
    ours_send,
    print_rows,
    process_cpu_seconds,
    proton_available,
    proton_receive,
    proton_send,
)
from _peers import start_sink

BODY = bytes(range(256)) * 4096  # 1 MiB
WINDOW = 8
MB = len(BODY) / 1e6
CLIENTS = ("ours", "proton")


def child(client: str, kind: str, url: str, address: str, count: int) -> float | None:
    """One measurement in this process (the subprocess body): messages per second."""
    if client == "proton":
        if kind == "send":
            return proton_send(url, address, count, BODY, WINDOW)
        return proton_receive(url, address, count, WINDOW)
    options: dict[str, Any] = {}
    if importlib.util.find_spec("uvloop") is not None:
        options = {"backend": "asyncio", "backend_options": {"use_uvloop": True}}
    if kind == "send":
        return float(anyio.run(ours_send, url, address, count, BODY, WINDOW, **options))
    return float(anyio.run(ours_receive, url, address, count, WINDOW, **options))


def measure(client: str, kind: str, url: str, address: str, count: int, peer_pid: int | None = None) -> Measure:
    """One measurement in a fresh subprocess: MB/s (None for proton when it is not installed), and how busy the
    peer process (``peer_pid``) was meanwhile: its CPU time over the timed part of the run."""
    if client == "proton" and not proton_available():
        return Measure(None, None)
    before = None if peer_pid is None else process_cpu_seconds(peer_pid)
    rate = child_run(__file__, [client, kind, url, address, str(count)], "1 MiB")["rate"]
    after = None if peer_pid is None else process_cpu_seconds(peer_pid)
    figure = None if rate is None else rate * MB
    busy = None
    if rate and before is not None and after is not None:
        busy = (after - before) / (count / rate)  # the process's own setup is in it too: a slight overestimate
    if figure is not None:
        load = "" if busy is None else f", peer busy {busy:.0%}"
        print(f"  {client:>6} {kind} via {url}: {figure:,.0f} MB/s{load}", file=sys.stderr, flush=True)
    return Measure(figure, busy)


class Measure(NamedTuple):
    """One run's MB/s and the peer's busy share (CPU time over the timed wall time; None when unknown)."""

    figure: float | None
    peer_busy: float | None


def _best(runs: list[Measure]) -> Measure:
    known = [run for run in runs if run.figure]
    return max(known, key=lambda run: run.figure or 0.0) if known else Measure(None, None)


def _busy_note(ours: Measure, theirs: Measure) -> str:
    """A note for a row whose peer works hard: at about 100% busy, the peer, not the client, sets the figure."""
    if ours.peer_busy is None or theirs.peer_busy is None:
        return ""
    return f"peer's CPU busy {ours.peer_busy:.0%} with ours, {theirs.peer_busy:.0%} with proton"


def _measure(url: str, label: str, count: int, repeat: int, receive: bool, peer_pid: int | None) -> list[Row]:
    run = uuid.uuid4().hex[:8]
    queues = {client: f"large-{client}-{run}" for client in CLIENTS}
    sent: dict[str, list[Measure]] = {client: [] for client in CLIENTS}
    received: dict[str, list[Measure]] = {client: [] for client in CLIENTS}
    for turn in range(repeat):
        order = CLIENTS if turn % 2 == 0 else CLIENTS[::-1]
        for client in order:
            sent[client].append(measure(client, "send", url, queues[client], count, peer_pid))
        if receive:  # each receive takes back what one send put in that client's queue
            for client in order:
                received[client].append(measure(client, "receive", url, queues[client], count, peer_pid))
    rows = []
    for kind, runs in (("send confirmed", sent), ("receive", received)):
        if kind == "receive" and not receive:
            continue
        ours, theirs = _best(runs["ours"]), _best(runs["proton"])
        note = _busy_note(ours, theirs)
        rows.append(Row("1 MiB", f"{label}: {kind}", "MB/s", ours.figure, theirs.figure, target=3, note=note))
    return rows


def run(quick: bool = False, messages: int | None = None, repeat: int | None = None) -> list[Row]:
    count = messages or (40 if quick else 300)
    repeat = repeat or (1 if quick else 2)
    rows = []
    sink = start_sink()
    try:
        rows += _measure(f"amqp://127.0.0.1:{sink.port}", "C sink", count, repeat, False, sink.process.pid)
    finally:
        sink.stop()
    with c_broker() as peer:
        rows += _measure(f"amqp://127.0.0.1:{peer.port}", "C broker example", count, repeat, True, peer.process.pid)
    # Both clients' sends are held at once before the receives (2 x 300 MiB): above the broker's default memory
    # bound, which refuses a message that does not fit (amqp:resource-limit-exceeded).
    with broker_process("--max-memory", "1GiB") as broker:
        rows += _measure(broker.url, "our broker", count, repeat, True, broker.process.pid)
    return rows


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        client, kind, url, address, count = sys.argv[2:7]
        print(json.dumps({"rate": child(client, kind, url, address, int(count))}), flush=True)
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small run (40 messages, one run each)")
    parser.add_argument("--messages", type=int, help="messages per run (default 300)")
    parser.add_argument("--repeat", type=int, help="runs per figure, the best one kept (default 2; quick 1)")
    args = parser.parse_args()
    rows = run(args.quick, args.messages, args.repeat)
    print_rows(f"1 MiB messages, at-least-once, window/credit {WINDOW}", rows)


if __name__ == "__main__":
    main()
