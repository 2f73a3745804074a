"""Throughput through a broker, side by side with python-qpid-proton: RabbitMQ 3.10 and our embedded broker.

Run: ``python benchmarks/throughput.py [--quick] [--messages N] [--no-rabbitmq]``.

For each broker, both clients use the same broker process in the same run, each with a queue of its own:

- send confirmed: N messages with 16-byte bodies, at-least-once (every one accepted by the broker). Ours uses
  ``submit()`` with a window of 1000 trackers; proton sends from ``on_sendable`` as credit allows and counts
  ``on_accepted``. Both build and encode each message inside the timed region.
- receive: then the N messages are received from that queue with credit (prefetch) 1000, each decoded and
  accepted (ours: ``delivery.message`` and ``await delivery.accept()``; proton: ``on_message`` with auto-accept).

The timed regions are those of ``_common.py`` (connection and attach outside). Our broker runs in its own process
(``python -m amqp_async.broker``), as RabbitMQ does, so neither client shares its interpreter with the peer.
RabbitMQ is the private node of tests/rabbitmq.py (installed with apt-get if missing; skipped when it cannot be).
"""

from __future__ import annotations

import argparse
import sys
import uuid
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import Row, broker_process, ours_receive, ours_send, print_rows, proton_receive, proton_send

BODY = b"0123456789abcdef"
WINDOW = 1000
PREFETCH = 1000


def _measure(url: str, prefix: str, label: str, count: int) -> list[Row]:
    run = uuid.uuid4().hex[:8]
    theirs, mine = f"{prefix}bench-proton-{run}", f"{prefix}bench-ours-{run}"
    proton_sent = proton_send(url, theirs, count, BODY)
    ours_sent = anyio.run(ours_send, url, mine, count, BODY, WINDOW)
    proton_received = proton_receive(url, theirs, count, PREFETCH)
    ours_received = anyio.run(ours_receive, url, mine, count, PREFETCH)
    return [
        Row("broker", f"{label}: send confirmed 16 B", "msg/s", ours_sent, proton_sent, target=3),
        Row("broker", f"{label}: receive 16 B, credit {PREFETCH}", "msg/s", ours_received, proton_received, target=3),
    ]


def run(quick: bool = False, messages: int | None = None, rabbitmq: bool = True) -> list[Row]:
    """The rows of this benchmark (RabbitMQ's left out, with a note on stderr, when it cannot run)."""
    count = messages or (5_000 if quick else 50_000)
    rows = []
    with broker_process() as broker:
        rows += _measure(broker.url, "", "our broker", count)
    if rabbitmq:
        from _rabbitmq import rabbitmq_node

        try:
            with rabbitmq_node() as node:
                rows += _measure(node.url, "/queue/", "RabbitMQ 3.10", count)
        except RuntimeError as exc:
            print(f"(RabbitMQ not measured: {exc})", file=sys.stderr)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small run (5,000 messages)")
    parser.add_argument("--messages", type=int, help="messages per run (default 50,000)")
    parser.add_argument("--no-rabbitmq", action="store_true", help="our broker only")
    args = parser.parse_args()
    rows = run(args.quick, args.messages, not args.no_rabbitmq)
    print_rows("Throughput through a broker (16-byte bodies, at-least-once)", rows)


if __name__ == "__main__":
    main()
