"""1 MiB messages each way (MB/s), side by side with python-qpid-proton.

Run: ``python benchmarks/large.py [--quick] [--messages N]``.

Peers: the Qpid Proton C ``broker`` example (native, queues in memory, prints nothing per message) and our
embedded broker in its own process. The C ``direct`` example is not used here: it prints every message body it
receives (``pn_inspect``, about 4 MB of text per 1 MiB body), which caps it near 10 MB/s whatever the client.

For each peer, both clients in the same run, each with a queue of its own:

- send: N messages with a 1 MiB binary body (a data section), at-least-once, at most 8 unsettled at a time
  (ours: ``submit()`` with a window of 8 trackers; proton: sends from ``on_sendable``/``on_accepted`` while fewer
  than 8 are unconfirmed); the clock runs from the first send to the last outcome;
- receive: the N messages back with credit 8, each decoded and accepted; first to last message.

Each message is built and encoded inside the timed region for both clients.
"""

from __future__ import annotations

import argparse
import sys
import uuid
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import Row, broker_process, c_broker, ours_receive, ours_send, print_rows, proton_receive, proton_send

BODY = bytes(range(256)) * 4096  # 1 MiB
WINDOW = 8
MB = len(BODY) / 1e6


def _measure(url: str, label: str, count: int) -> list[Row]:
    run = uuid.uuid4().hex[:8]
    theirs, mine = f"large-proton-{run}", f"large-ours-{run}"
    proton_sent = proton_send(url, theirs, count, BODY, WINDOW)
    ours_sent = anyio.run(ours_send, url, mine, count, BODY, WINDOW)
    proton_received = proton_receive(url, theirs, count, WINDOW)
    ours_received = anyio.run(ours_receive, url, mine, count, WINDOW)

    def mb(rate: float | None) -> float | None:
        return None if rate is None else rate * MB

    return [
        Row("1 MiB", f"{label}: send confirmed", "MB/s", mb(ours_sent), mb(proton_sent), target=3),
        Row("1 MiB", f"{label}: receive", "MB/s", mb(ours_received), mb(proton_received), target=3),
    ]


def run(quick: bool = False, messages: int | None = None) -> list[Row]:
    count = messages or (40 if quick else 400)
    rows = []
    with c_broker() as peer:
        rows += _measure(f"amqp://127.0.0.1:{peer.port}", "C broker example", count)
    with broker_process() as broker:
        rows += _measure(broker.url, "our broker", count)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small run (40 messages)")
    parser.add_argument("--messages", type=int, help="messages per run (default 400)")
    args = parser.parse_args()
    print_rows(f"1 MiB messages, at-least-once, window/credit {WINDOW}", run(args.quick, args.messages))


if __name__ == "__main__":
    main()
