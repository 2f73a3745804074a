"""Our client beside Qpid Proton's own C clients: the C ``send`` and ``receive`` examples, each against the C
``direct`` example as the peer.

Run: ``python benchmarks/c_clients.py [--messages N] [--rounds R] [--clients ...] [--callgrind]``; it installs and
builds the C examples if they are missing (``_peers.py``: Debian's ``libqpid-proton11-dev-examples``).

What each client does, N messages (100,000 by default):

- send: N messages at-least-once to ``direct`` as the receiver (it grants N credits, accepts and settles each
  message, and prints each body). The C ``send`` example builds and encodes each message (an id and a map body,
  ``{"sequence": n}``) with ``pn_message_send`` and counts the accepted outcomes; ours builds and encodes a
  ``Message`` with a 16-byte body per send, ``submit()`` in a loop with a window of 1000 trackers (as
  ``client.py``), and awaits every outcome.
- receive: ``direct`` sends N messages (an id and a map body each) to the client, which decodes and accepts each
  one with credit 1000: the C ``receive`` example with a count of 0 (it then grants 1000 credits and tops them up
  at half, as ours does, and ends when ``direct`` closes the connection; it decodes each message and prints its
  body to /dev/null here), ours ``open_receiver(credit=1000)``, ``delivery.message`` and ``await
  delivery.accept()``.

How it is timed. Every run has a fresh ``direct`` and a fresh client process (the peer's output goes to a file, so
no reader shares a CPU or a GIL with a client). Ours is timed inside its process from the first message to the last
outcome (send) or from the first message to the last (receive), as every benchmark here; the C examples cannot be
timed inside, so their process is timed from start to exit, less the same for a run of one message (start-up,
connection and close: the fixed cost ours leaves out of its clock too). Besides the rate, each row gives the CPU
time (user + system) the client spent per message, the C example's likewise less its one-message run: on a shared
machine the CPU time varies less than the elapsed time. Rounds interleave the clients (A, B, C, A, B, C, ...,
the order rotated each round), and the figures are medians over the rounds, with their range.

``--callgrind`` counts instructions instead (``valgrind --tool=callgrind``: the same count whatever else the machine
does): each client runs under it with N messages and with N/5, and the difference over the difference in messages
is its instructions per message (start-up, imports and connection cancel out). Under valgrind a client runs some
fifty times slower, so its reads find more waiting and its batches grow: the counts compare clients and versions of
ours with each other, not with the timed runs.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import ROOT, Row, print_rows
from _peers import CPeer, build_c_examples, start_direct

#: The clients, in the order of a round: C first, then ours on each event loop.
CLIENTS = ("c", "asyncio", "uvloop", "trio")
LABELS = {"c": "proton C", "asyncio": "asyncio", "uvloop": "asyncio + uvloop", "trio": "trio"}
RUN_OPTIONS: dict[str, dict[str, Any]] = {
    "asyncio": {"backend": "asyncio"},
    "uvloop": {"backend": "asyncio", "backend_options": {"use_uvloop": True}},
    "trio": {"backend": "trio"},
}
DIRECTIONS = ("send", "receive")
ADDRESS = "examples"
TIMEOUT = 300.0


def available(client: str) -> bool:
    """Whether ``client`` can run here (uvloop and trio are optional)."""
    if client in ("uvloop", "trio"):
        import importlib.util

        return importlib.util.find_spec(client) is not None
    return True


# --- one run of one client ---------------------------------------------------------------------------------------


def _peer(direction: str, count: int) -> CPeer:
    # direct receives ``count`` messages from a sending client, or sends ``count`` to a receiving one.
    return start_direct(ADDRESS, count)


def _c_command(direction: str, port: int, count: int) -> list[str]:
    binary = build_c_examples((direction,))[direction]
    # receive with a count of 0: credit 1000, topped up at half (with a count, it would grant all of it at once).
    return [str(binary), "127.0.0.1", str(port), ADDRESS, str(count if direction == "send" else 0)]


def _wait_peer(peer: CPeer) -> None:
    try:
        peer.wait(TIMEOUT)
    except subprocess.TimeoutExpired:
        raise RuntimeError("the C direct example did not finish") from None


def run_c(direction: str, count: int) -> tuple[float, float]:
    """The C example's whole run with ``count`` messages: (elapsed seconds, CPU seconds), start to exit."""
    peer = _peer(direction, count)
    try:
        command = _c_command(direction, peer.port, count)
        start = time.perf_counter()
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(process.pid, 0)
        elapsed = time.perf_counter() - start
        process.returncode = os.waitstatus_to_exitcode(status)
        if process.returncode != 0:
            stderr = process.stderr.read().decode(errors="replace") if process.stderr else ""
            raise RuntimeError(f"the C {direction} example failed ({process.returncode}): {stderr[-500:]}")
        _wait_peer(peer)
        return elapsed, usage.ru_utime + usage.ru_stime
    finally:
        peer.stop()


def run_ours(direction: str, client: str, count: int) -> tuple[float, float]:
    """Our client in a fresh process: (elapsed seconds, CPU seconds) of its timed region."""
    peer = _peer(direction, count)
    try:
        result = _child(["--child", direction, client, str(peer.port), str(count)])
        _wait_peer(peer)
        return result["elapsed"], result["cpu"]
    finally:
        peer.stop()


def _child(arguments: list[str], prefix: list[str] | None = None) -> Any:
    environment = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    result = subprocess.run(
        [*(prefix or []), sys.executable, __file__, *arguments],
        capture_output=True,
        text=True,
        timeout=TIMEOUT * (20 if prefix else 1),
        env=environment,
        check=False,
    )
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or not lines:
        raise RuntimeError(f"client {arguments} failed ({result.returncode}):\n{result.stderr[-2000:]}")
    return json.loads(lines[-1])


def child_main(direction: str, client: str, port: int, count: int) -> None:
    """The body of our client's process: run, and print the timed region's elapsed and CPU seconds as JSON."""
    import anyio
    import client as client_benchmark

    clock: dict[str, float] = {}

    def started() -> None:
        clock["start"] = time.perf_counter()
        clock["cpu"] = _cpu()

    function = client_benchmark.ours_send if direction == "send" else client_benchmark.ours_receive
    anyio.run(function, port, count, started, **RUN_OPTIONS[client])
    elapsed = time.perf_counter() - clock["start"]
    cpu = _cpu() - clock["cpu"]
    print(json.dumps({"elapsed": elapsed, "cpu": cpu}), flush=True)


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


# --- rounds ------------------------------------------------------------------------------------------------------

#: One client's figures over the rounds: rates (messages per second) and CPU µs per message.
Figures = dict[str, list[float]]


def measure(
    count: int, rounds: int, clients: tuple[str, ...], directions: tuple[str, ...] = DIRECTIONS
) -> dict[tuple[str, str], Figures]:
    """Interleaved rounds: each round runs every client once per direction, the order rotated each round."""
    results: dict[tuple[str, str], Figures] = {
        (direction, client): {"rate": [], "cpu": []} for direction in directions for client in clients
    }
    for turn in range(rounds):
        order = clients[turn % len(clients) :] + clients[: turn % len(clients)]
        for direction in directions:
            for client in order:
                if client == "c":
                    elapsed, cpu = run_c(direction, count)
                    fixed_elapsed, fixed_cpu = run_c(direction, 1)
                    # The receiving C example times count messages; ours times count - 1 (first to last).
                    elapsed, cpu = elapsed - fixed_elapsed, cpu - fixed_cpu
                    timed = count - 1
                else:
                    elapsed, cpu = run_ours(direction, client, count)
                    timed = count if direction == "send" else count - 1
                figures = results[(direction, client)]
                figures["rate"].append(timed / elapsed)
                figures["cpu"].append(cpu / timed * 1e6)
                print(
                    f"  round {turn + 1} {direction:<8}{LABELS[client]:<18}{timed / elapsed:>10,.0f} msg/s"
                    f"{cpu / timed * 1e6:>8.2f} µs CPU/msg  (load {os.getloadavg()[0]:.1f})",
                    file=sys.stderr,
                    flush=True,
                )
    return results


def _spread(values: list[float]) -> str:
    return f"{min(values):,.0f}-{max(values):,.0f}" if len(values) > 1 else ""


def rows(results: dict[tuple[str, str], Figures], rounds: int) -> list[Row]:
    """The report's rows: each of our clients beside the C client of the same direction (its reference)."""
    table = []
    for direction in DIRECTIONS:
        reference = results.get((direction, "c"))
        if reference is None:
            continue
        c_rate = statistics.median(reference["rate"])
        c_cpu = statistics.median(reference["cpu"])
        for client in CLIENTS[1:]:
            figures = results.get((direction, client))
            if figures is None:
                continue
            rate = statistics.median(figures["rate"])
            cpu = statistics.median(figures["cpu"])
            note = (
                f"median of {rounds}; ours {_spread(figures['rate'])}, C {_spread(reference['rate'])} msg/s; "
                f"CPU per message: ours {cpu:.2f} µs, C {c_cpu:.2f} µs, x{c_cpu / cpu:.2f}"
            )
            table.append(
                Row("C clients", f"{direction}, C direct, on {LABELS[client]}", "msg/s", rate, c_rate, target=1.0,
                    note=note)
            )  # fmt: skip
    return table


def run(quick: bool = False, messages: int | None = None, rounds: int | None = None) -> list[Row]:
    """The report's section: every client available here, interleaved rounds (3, or 1 with ``quick``)."""
    count = messages or (20_000 if quick else 100_000)
    turns = rounds or (1 if quick else 3)
    clients = tuple(client for client in CLIENTS if available(client))
    return rows(measure(count, turns, clients), turns)


# --- instructions (callgrind) ------------------------------------------------------------------------------------


def _instructions(out_file: Path) -> int:
    """The total instruction count a callgrind output file records."""
    text = out_file.read_text()
    match = re.search(r"^(?:totals|summary): (\d+)", text, re.MULTILINE)
    if match is None:
        raise RuntimeError(f"no totals in {out_file}")
    return int(match.group(1))


def _callgrind_prefix(out_file: Path) -> list[str]:
    return ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out_file}", "--dump-instr=no"]


def callgrind_run(direction: str, client: str, count: int, directory: Path) -> int:
    """The instructions of one whole run of ``client`` under callgrind (start-up included)."""
    out_file = directory / f"{direction}-{client}-{count}.out"
    peer = _peer(direction, count)
    try:
        if client == "c":
            subprocess.run(
                [*_callgrind_prefix(out_file), *_c_command(direction, peer.port, count)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                check=True,
                timeout=TIMEOUT * 20,
            )
        else:
            _child(["--child", direction, client, str(peer.port), str(count)], prefix=_callgrind_prefix(out_file))
        _wait_peer(peer)
    finally:
        peer.stop()
    return _instructions(out_file)


def callgrind(count: int, clients: tuple[str, ...], directions: tuple[str, ...]) -> dict[tuple[str, str], float]:
    """Instructions per message of each client: (runs of ``count`` and ``count // 5`` messages), the difference
    over the difference in messages."""
    if shutil.which("valgrind") is None:
        raise RuntimeError("valgrind is not installed (Debian: apt-get install valgrind)")
    small = max(1, count // 5)
    per_message: dict[tuple[str, str], float] = {}
    with tempfile.TemporaryDirectory(prefix="amqp-async-callgrind-") as name:
        directory = Path(name)
        for direction in directions:
            for client in clients:
                large = callgrind_run(direction, client, count, directory)
                little = callgrind_run(direction, client, small, directory)
                per_message[(direction, client)] = (large - little) / (count - small)
                print(
                    f"  {direction:<8}{LABELS[client]:<18}{per_message[(direction, client)]:>10,.0f} instructions/msg",
                    file=sys.stderr,
                    flush=True,
                )
    return per_message


# --- command line ------------------------------------------------------------------------------------------------


def _choices(text: str, allowed: tuple[str, ...]) -> tuple[str, ...]:
    chosen = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [part for part in chosen if part not in allowed]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown {unknown}; choose from {', '.join(allowed)}")
    return chosen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000, help="messages per run (default 100,000)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    parser.add_argument(
        "--clients",
        type=lambda text: _choices(text, CLIENTS),
        default=CLIENTS,
        help=f"comma-separated, from {','.join(CLIENTS)}",
    )
    parser.add_argument(
        "--directions", type=lambda text: _choices(text, DIRECTIONS), default=DIRECTIONS, help="send,receive"
    )
    parser.add_argument("--callgrind", action="store_true", help="count instructions per message instead")
    parser.add_argument("--child", nargs=4, metavar="ARG", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        direction, client, port, count = args.child
        child_main(direction, client, int(port), int(count))
        return
    clients = tuple(client for client in args.clients if available(client))
    if args.callgrind:
        counts = callgrind(args.messages, clients, args.directions)
        print(f"\nInstructions per message (callgrind; runs of {args.messages:,} and {args.messages // 5:,})")
        for direction in args.directions:
            reference = counts.get((direction, "c"))
            for client in clients:
                value = counts[(direction, client)]
                ratio = f"  C/ours {reference / value:.2f}" if reference and client != "c" else ""
                print(f"{direction:<9}{LABELS[client]:<18}{value:>10,.0f}{ratio}")
        return
    load = os.getloadavg()
    started: Callable[[], float] = time.monotonic
    begin = started()
    results = measure(args.messages, args.rounds, clients, args.directions)
    print_rows(
        f"Our client vs Qpid Proton's C send/receive examples, against C direct ({args.messages:,} messages, "
        f"{args.rounds} interleaved rounds, medians; load before {load[0]:.1f}, after {os.getloadavg()[0]:.1f}; "
        f"{started() - begin:.0f} s)",
        rows(results, args.rounds),
        legend="here the reference column is proton's C client, and x proton is ours / C; >1 is ahead",
    )


if __name__ == "__main__":
    main()
