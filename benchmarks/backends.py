"""The awaitable client on asyncio, asyncio + uvloop and trio, side by side with python-qpid-proton.

Run: ``python benchmarks/backends.py [--quick] [--messages N]``.

The send and receive benchmark of ``client.py`` (imported from it, timed exactly as there) against the Qpid Proton
C ``direct`` example, once per event loop: asyncio, asyncio with uvloop (when installed) and trio (when installed);
python-qpid-proton measured the same way in the same run is the reference of every row. Azure's pure-Python
``_pyamqp`` async sender (``_pyamqp.py``), where azure-servicebus is installed, sends to a fresh ``direct`` the same
way, one message at a time as its API allows; its figure is in the note of the send rows.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import Row, print_rows
from _peers import start_direct
from _pyamqp import pyamqp_available, pyamqp_send
from client import BODY, ours_receive, ours_send, proton_receive, proton_send, run_against_direct

BACKENDS: tuple[tuple[str, str, dict[str, Any], str | None], ...] = (
    ("asyncio", "asyncio", {}, None),
    ("asyncio + uvloop", "asyncio", {"use_uvloop": True}, "uvloop"),
    ("trio", "trio", {}, "trio"),
)


def pyamqp_against_direct(count: int, warmup: int = 500) -> float | None:
    """Azure's ``_pyamqp`` async sender, the same send to a fresh C ``direct`` (None when it is not installed)."""
    if not pyamqp_available():
        return None
    peer = start_direct("examples", warmup + count)
    try:
        return pyamqp_send(f"amqp://127.0.0.1:{peer.port}", "examples", count, BODY, warmup)
    finally:
        peer.stop()


def run(quick: bool = False, messages: int | None = None) -> list[Row]:
    count = messages or (10_000 if quick else 100_000)
    # _pyamqp sends one message at a time (about 4,000 msg/s here): a smaller count gives a steady figure.
    azure = pyamqp_against_direct(min(count, 2_000 if quick else 20_000))
    rows = []
    for direction, ours, theirs in (("send", ours_send, proton_send), ("receive", ours_receive, proton_receive)):
        reference = run_against_direct(theirs, count)
        for label, backend, options, module in BACKENDS:
            if module is not None and importlib.util.find_spec(module) is None:
                rows.append(
                    Row(
                        "backends",
                        f"{direction}, C direct, on {label}",
                        "msg/s",
                        None,
                        reference,
                        note="(not installed)",
                    )
                )
                continue
            run_options: dict[str, Any] = {"backend": backend}
            if options:
                run_options["backend_options"] = options
            rate = run_against_direct(ours, count, **run_options)
            note = ""
            if direction == "send" and azure and rate:
                note = f"(Azure _pyamqp async sender, one at a time: {azure:,.0f} msg/s; ours x{rate / azure:.1f})"
            row = Row("backends", f"{direction}, C direct, on {label}", "msg/s", rate, reference, target=3, note=note)
            rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small run (10,000 messages)")
    parser.add_argument("--messages", type=int, help="messages per run (default 100,000)")
    args = parser.parse_args()
    rows = run(args.quick, args.messages)
    print_rows(
        "Event loops: client.py's send and receive (16-byte bodies, at-least-once) vs the C direct example", rows
    )


if __name__ == "__main__":
    main()
