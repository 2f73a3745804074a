"""Where our client's time goes: the send and receive of ``c_clients.py`` (against the C ``direct`` example) under
a profiler, its top entries printed.

Run: ``python benchmarks/profile_client.py {send,receive} [--messages N] [--backend asyncio|uvloop|trio]
[--tool cprofile|pyspy|callgrind] [--top N] [--output FILE]``.

- ``cprofile`` (the default): Python's deterministic profiler, in the client's process; exact call counts, times
  inflated by the profiler's own cost per call (small functions look dearer than they are), sorted by own time.
- ``pyspy``: py-spy samples the client's process from outside (``pip install py-spy``), without slowing it: the
  share of samples in each function (own time), for where the wall-clock time goes.
- ``callgrind``: valgrind counts the client's instructions (the interpreter's C functions, not Python's): the
  same count whatever else the machine does; the run with N/5 messages is subtracted, so what is left is per
  message.

Not one of the report's sections (it prints no ratios); docs/benchmarks.md quotes its output.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import c_clients
from _common import ROOT
from _peers import start_direct


def _child_command(direction: str, backend: str, port: int, count: int) -> list[str]:
    return [sys.executable, str(Path(c_clients.__file__)), "--child", direction, backend, str(port), str(count)]


def _environment() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def profile_cprofile(direction: str, backend: str, count: int, top: int, output: Path | None) -> None:
    import anyio
    import client as client_benchmark

    function = client_benchmark.ours_send if direction == "send" else client_benchmark.ours_receive
    peer = start_direct("examples", count)
    profiler = cProfile.Profile()
    try:
        anyio.run(function, peer.port, count, profiler.enable, **c_clients.RUN_OPTIONS[backend])
        profiler.disable()
        peer.wait(60)
    finally:
        peer.stop()
    stats = pstats.Stats(profiler)
    if output is not None:
        stats.dump_stats(output)
    stats.sort_stats("tottime").print_stats(top)


def profile_pyspy(direction: str, backend: str, count: int, top: int, output: Path | None) -> None:
    if shutil.which("py-spy") is None:
        raise SystemExit("py-spy is not installed (pip install py-spy)")
    peer = start_direct("examples", count)
    with tempfile.TemporaryDirectory() as directory:
        raw = Path(directory) / "samples.txt"
        try:
            command = [
                "py-spy", "record", "--format", "raw", "--rate", "1000", "--output", str(raw), "--",
                *_child_command(direction, backend, peer.port, count),
            ]  # fmt: skip
            subprocess.run(command, check=True, env=_environment(), stdout=subprocess.DEVNULL)
            peer.wait(60)
        finally:
            peer.stop()
        if output is not None:
            shutil.copy(raw, output)
        own: dict[str, int] = {}
        total = 0
        for line in raw.read_text().splitlines():
            stack, _, samples = line.rpartition(" ")
            frames = stack.split(";")
            number = int(samples)
            total += number
            function = re.sub(r":\d+\)$", ")", frames[-1])  # by function, not by line
            own[function] = own.get(function, 0) + number
    print(f"py-spy: {total} samples; own time by function (the profiled run includes start-up and connection)")
    for frame, number in sorted(own.items(), key=lambda item: -item[1])[:top]:
        print(f"{100 * number / total:6.2f}%  {frame}")


def _callgrind_total(direction: str, backend: str, count: int, out_file: Path) -> None:
    peer = start_direct("examples", count)
    try:
        command = [
            "valgrind", "--tool=callgrind", f"--callgrind-out-file={out_file}",
            *_child_command(direction, backend, peer.port, count),
        ]  # fmt: skip
        subprocess.run(command, check=True, env=_environment(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        peer.wait(60)
    finally:
        peer.stop()


def _functions(out_file: Path) -> dict[str, int]:
    text = subprocess.run(
        ["callgrind_annotate", "--threshold=100", str(out_file)], capture_output=True, text=True, check=True
    ).stdout
    functions: dict[str, int] = {}
    for line in text.splitlines():
        match = re.match(r"\s*([\d,]+) \([^)]*\)\s+(?:\S*:)?(\S+)", line)
        if match:
            name = match.group(2).split("'")[0]
            functions[name] = functions.get(name, 0) + int(match.group(1).replace(",", ""))
    return functions


def profile_callgrind(direction: str, backend: str, count: int, top: int, output: Path | None) -> None:
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (Debian: apt-get install valgrind)")
    small = max(1, count // 5)
    with tempfile.TemporaryDirectory() as directory:
        large_file, small_file = Path(directory) / "large.out", Path(directory) / "small.out"
        _callgrind_total(direction, backend, count, large_file)
        _callgrind_total(direction, backend, small, small_file)
        if output is not None:
            shutil.copy(large_file, output)
        large, little = _functions(large_file), _functions(small_file)
    messages = count - small
    total = (large.pop("PROGRAM", 0) - little.pop("PROGRAM", 0)) / messages
    print(f"callgrind: {total:,.0f} instructions per message (runs of {count:,} and {small:,} messages)")
    per_message = {name: (large.get(name, 0) - little.get(name, 0)) / messages for name in large}
    for name, value in sorted(per_message.items(), key=lambda item: -item[1])[:top]:
        print(f"{value:10,.0f}  {100 * value / total:5.1f}%  {name}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("direction", choices=("send", "receive"))
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--backend", choices=tuple(c_clients.RUN_OPTIONS), default="asyncio")
    parser.add_argument("--tool", choices=("cprofile", "pyspy", "callgrind"), default="cprofile")
    parser.add_argument("--top", type=int, default=30, help="entries to print")
    parser.add_argument("--output", type=Path, help="keep the raw profile here")
    args = parser.parse_args()
    tools = {"cprofile": profile_cprofile, "pyspy": profile_pyspy, "callgrind": profile_callgrind}
    tools[args.tool](args.direction, args.backend, args.messages, args.top, args.output)


if __name__ == "__main__":
    main()
