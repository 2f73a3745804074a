"""Run every benchmark and print ONE table, each figure beside python-qpid-proton's (same run, same peer) as a ratio.

Run: ``python benchmarks/report.py [--quick] [--no-rabbitmq] [--only SECTION ...] [--output-dir docs]``.

Sections, in order: codec (``codec.py``), engine (``engine.py``), backends (``client.py``'s send and receive to the
C ``direct`` example on asyncio, uvloop and trio, via ``backends.py``), broker (``throughput.py``: our broker and
RabbitMQ 3.10), callback (``callback.py``: the callback API ``amqp_async.proton`` and the awaitable API beside
proton's own Container, to the C ``direct`` example) and callback/brokers (the same through our broker and RabbitMQ),
1 MiB (``large.py``), latency (``latency.py``), memory (``memory.py``), transactions (``transactions.py``: batches
of 100 sends or accepts committed through our broker), many links (``many_links.py``: 2,000 senders attached to
one queue of our broker on one connection, 500 with ``--quick``, fewer than the script's own run, and the
connection's end, and a queue's send+receive beside 20,000 idle receivers, 2,000 with ``--quick``, beside the C
broker example), proton engine (``proton_engine.py``: proton's engine API pumped in memory), websocket
(``websocket.py``: send and receive over ``ws://`` beside ``amqp://`` through our broker, and the cost of
OpenTelemetry tracing off and on, in rows of their own section, tracing) and spark (``spark.py``: the Spark data
source beside the awaitable client through our broker, whose rates stand in the reference column of those rows, and
Spark's own ceiling). Each script also runs alone; this one imports them and makes the same measurements with
the same run sizes (default or ``--quick``).

Writes the table (with the machine and the command) into ``docs/benchmarks.md``, between its latest-figures
markers, and ``docs/benchmarks.png`` (the ratios as bars, with the targets marked) when matplotlib is
installed. A section that fails (or takes
more than 5 minutes) is reported on stderr and under the table, and the others still run; the exit status is 0
unless ``--strict``.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import signal
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import ROOT, Row, format_rows, proton_available

import amqp_async

#: No section may take longer than this (a peer that never answers must not hang the report).
SECTION_TIMEOUT = 300

SECTIONS = (
    "codec",
    "engine",
    "backends",
    "C clients",
    "broker",
    "callback",
    "callback/brokers",
    "1 MiB",
    "latency",
    "memory",
    "transactions",
    "many links",
    "proton engine",
    "websocket",
    "spark",
)


def codec_rows(quick: bool) -> list[Row]:
    import codec

    number, large_number = (2_000, 20) if quick else (20_000, 200)
    clients = {"ours": codec.ours()}
    proton_tasks = codec.proton_tasks()
    if proton_tasks is not None:
        clients["proton"] = proton_tasks
    figures = codec.measure(clients, number, large_number)
    ours, theirs = figures["ours"], figures.get("proton", {})
    mib = len(codec.LARGE_BODY) / 1e6

    def rate(figures: dict[str, float], key: str) -> float | None:
        return mib / figures[key] if key in figures else None

    def micro(figures: dict[str, float], key: str) -> float | None:
        return figures[key] * 1e6 if key in figures else None

    section = "codec"
    return [
        Row(section, f"encode {ours['size']:.0f} B message", "µs", micro(ours, "encode"), micro(theirs, "encode"),
            "lower", 2),
        Row(section, f"decode {ours['size']:.0f} B message", "µs", micro(ours, "decode"), micro(theirs, "decode"),
            "lower", 2),
        Row(section, f"decode {ours['size']:.0f} B, general decoder (layout not learnt)", "µs",
            micro(ours, "decode_general"), micro(theirs, "decode"), "lower", 2),
        Row(section, "encode 1 MiB body", "MB/s", rate(ours, "encode_1mib"), rate(theirs, "encode_1mib"), target=2),
        Row(section, "decode 1 MiB body", "MB/s", rate(ours, "decode_1mib"), rate(theirs, "decode_1mib"), target=2),
    ]  # fmt: skip


def engine_rows(quick: bool) -> list[Row]:
    import engine

    count = 10_000 if quick else 50_000
    rows = []
    for label, settled in (("at-most-once", True), ("at-least-once", False)):
        rows.append(
            Row("engine", f"engine pair in memory, {label}", "msg/s", engine.ours(count, settled),
                engine.proton(count, settled))
        )  # fmt: skip
    return rows


def backends_rows(quick: bool) -> list[Row]:
    import backends

    return backends.run(quick)


def broker_rows(quick: bool, rabbitmq: bool) -> list[Row]:
    import throughput

    return throughput.run(quick, rabbitmq=rabbitmq)


def callback_rows(quick: bool) -> list[Row]:
    import callback

    # Best of three turns each: the callback/awaitable ratios compare two of our own figures, both noisy here.
    return callback.run_direct(quick, repeat=1 if quick else 3)


def callback_broker_rows(quick: bool, rabbitmq: bool) -> list[Row]:
    import callback

    return callback.run_brokers(quick, rabbitmq=rabbitmq, repeat=1 if quick else 3)


def c_client_rows(quick: bool) -> list[Row]:
    import c_clients

    return c_clients.run(quick)


def large_rows(quick: bool) -> list[Row]:
    import large

    return large.run(quick)


def latency_rows(quick: bool) -> list[Row]:
    import latency

    return latency.run(quick)


def memory_rows(quick: bool) -> list[Row]:
    import memory

    return memory.run(quick)


def proton_engine_rows(quick: bool) -> list[Row]:
    import proton_engine

    return proton_engine.rows(count=5000 if quick else 20000, turns=2 if quick else 3)


def transactions_rows(quick: bool) -> list[Row]:
    import transactions

    return transactions.run(quick)


def many_links_rows(quick: bool) -> list[Row]:
    import many_links

    return many_links.run(quick, counts=[500] if quick else [2000]) + many_links.idle_rows(
        [2_000] if quick else [20_000]
    )


def websocket_rows(quick: bool) -> list[Row]:
    import websocket

    return websocket.run(quick)


def spark_rows(quick: bool) -> list[Row]:
    import spark

    # Within the section's time limit; the script kills Spark's processes and stops the broker when it overruns.
    return spark.run(quick, timeout=SECTION_TIMEOUT - 20)


def _machine() -> str:
    return (
        f"{platform.python_implementation()} {platform.python_version()}, {os.cpu_count()} CPUs, "
        f"{platform.system()} {platform.release()}"
    )


def _versions() -> str:
    text = f"amqp_async {amqp_async.__version__}"
    if proton_available():
        import proton

        text += ", python-qpid-proton " + ".".join(str(part) for part in proton.VERSION)
    return text


#: docs/benchmarks.md's latest-figures section lies between these lines; the report rewrites only what is between.
BEGIN_MARK = "<!-- latest figures: written by benchmarks/report.py -->"
END_MARK = "<!-- end of latest figures -->"


def latest_section(rows: list[Row], failures: list[str], seconds: float, command: str) -> list[str]:
    """The latest-figures section: how it was made, the table, the failures if any, and the plot."""
    lines = [
        f"Generated by `{command}` on {datetime.date.today().isoformat()} in {seconds:.0f} s; {_machine()}; "
        f"{_versions()}.",
        "",
        "**x proton** is how many times better than proton (rates: ours / proton; times and bytes: proton / ours), so",
        "above 1 is ahead; **target** is the ratio aimed at (the project's goal). In the spark rows the reference column holds",
        "the awaitable client's own rate through the same broker (not proton's), and the ratio is Spark's share of it.",
        "Likewise in the websocket rows the reference is our client over plain TCP (the ratio: WebSocket's share of",
        "it), and in the tracing rows the same client without the tracing hook (off) or with tracing off (on).",
        "",
        "| section | figure | unit | amqp_async | proton | x proton | target |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for row in rows:
        ours = "-" if row.ours is None else (f"{row.ours:,.1f}" if row.ours < 100 else f"{row.ours:,.0f}")
        theirs = "-" if row.proton is None else (f"{row.proton:,.1f}" if row.proton < 100 else f"{row.proton:,.0f}")
        ratio = "-" if row.ratio is None else f"{row.ratio:.2f}"
        met = "" if row.target is None or row.ratio is None else (" ✓" if row.ratio >= row.target else " ✗")
        target = "" if row.target is None else f"≥ {row.target:g}{met}"
        name = row.name + (f" ({row.note})" if row.note else "")
        lines.append(f"| {row.section} | {name} | {row.unit} | {ours} | {theirs} | {ratio} | {target} |")
    if failures:
        lines += ["", "Sections that failed in this run:", ""]
        lines += [f"- {failure}" for failure in failures]
    lines += ["", "![ratios to python-qpid-proton](benchmarks.png)"]
    return lines


def write_markdown(path: Path, section: list[str]) -> None:
    """Put ``section`` between the markers of ``path`` (docs/benchmarks.md), leaving the rest of the page as it
    is; a page without the markers gets them, and the section, at its end (a new page: a title too)."""
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    block = "\n".join([BEGIN_MARK, *section, END_MARK])
    if BEGIN_MARK in text and END_MARK in text:
        before, rest = text.split(BEGIN_MARK, 1)
        after = rest.split(END_MARK, 1)[1]
        text = before + block + after
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    path.write_text(text)


def write_plot(path: Path, rows: list[Row]) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    shown = [row for row in rows if row.ratio is not None]
    if not shown:
        return False
    labels = [f"{row.section}: {row.name}" for row in shown]
    ratios = [row.ratio or 0.0 for row in shown]
    colours = [
        "tab:grey" if row.target is None else ("tab:green" if (row.ratio or 0) >= row.target else "tab:red")
        for row in shown
    ]
    figure, axes = plt.subplots(figsize=(12, 0.32 * len(shown) + 1.5))
    positions = list(range(len(shown)))[::-1]
    axes.barh(positions, ratios, color=colours)
    for position, row in zip(positions, shown, strict=True):
        if row.target is not None:
            axes.plot([row.target, row.target], [position - 0.4, position + 0.4], color="black", linewidth=1.5)
        axes.text((row.ratio or 0) * 1.03, position, f"{row.ratio:.2f}", va="center", fontsize=7)
    axes.axvline(1.0, color="black", linestyle="--", linewidth=0.8)
    axes.set_xscale("log")
    axes.set_yticks(positions)
    axes.set_yticklabels(labels, fontsize=7)
    axes.set_xlabel("times better than python-qpid-proton (log scale; dashed: parity; black tick: target)")
    axes.set_title(f"amqp_async vs python-qpid-proton, same run, same peers ({datetime.date.today().isoformat()})")
    figure.tight_layout()
    figure.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(figure)
    return True


def _timed_out(signum: int, frame: object) -> None:
    raise TimeoutError(f"the section took longer than {SECTION_TIMEOUT} s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small runs of everything (about a minute)")
    parser.add_argument("--no-rabbitmq", action="store_true", help="leave RabbitMQ out")
    parser.add_argument("--only", nargs="+", choices=SECTIONS, help="run only these sections")
    parser.add_argument("--output-dir", default=str(ROOT / "docs"), help="where the .md and .png go (default docs)")
    parser.add_argument("--no-write", action="store_true", help="print the table only")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a section fails")
    args = parser.parse_args()

    runners: dict[str, Callable[[], list[Row]]] = {
        "codec": lambda: codec_rows(args.quick),
        "engine": lambda: engine_rows(args.quick),
        "backends": lambda: backends_rows(args.quick),
        "C clients": lambda: c_client_rows(args.quick),
        "broker": lambda: broker_rows(args.quick, not args.no_rabbitmq),
        "callback": lambda: callback_rows(args.quick),
        "callback/brokers": lambda: callback_broker_rows(args.quick, not args.no_rabbitmq),
        "1 MiB": lambda: large_rows(args.quick),
        "latency": lambda: latency_rows(args.quick),
        "memory": lambda: memory_rows(args.quick),
        "transactions": lambda: transactions_rows(args.quick),
        "many links": lambda: many_links_rows(args.quick),
        "proton engine": lambda: proton_engine_rows(args.quick),
        "websocket": lambda: websocket_rows(args.quick),
        "spark": lambda: spark_rows(args.quick),
    }
    if not proton_available():
        print("python-qpid-proton is not installed: the reference column will be empty", file=sys.stderr)
    rows: list[Row] = []
    failures: list[str] = []
    started = time.monotonic()
    for section in args.only or SECTIONS:
        section_started = time.monotonic()
        print(f"running {section} ...", file=sys.stderr, flush=True)
        previous = signal.signal(signal.SIGALRM, _timed_out)
        signal.alarm(SECTION_TIMEOUT)
        try:
            rows += runners[section]()
        except Exception as exc:  # one failing peer must not lose the other sections' figures
            traceback.print_exc()
            failures.append(f"{section}: {type(exc).__name__}: {exc}".splitlines()[0])
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, previous)
        print(f"  {section}: {time.monotonic() - section_started:.0f} s", file=sys.stderr, flush=True)
    seconds = time.monotonic() - started

    print()
    print(f"amqp_async vs python-qpid-proton, same run, same peers ({_versions()}; {_machine()}; {seconds:.0f} s)")
    print("x proton: how many times better than proton (rates: ours/proton; µs and bytes: proton/ours); >1 is ahead")
    for line in format_rows(rows):
        print(line)
    for failure in failures:
        print(f"FAILED {failure}")

    if not args.no_write:
        output = Path(args.output_dir)
        output.mkdir(parents=True, exist_ok=True)
        command = "python benchmarks/report.py" + (" --quick" if args.quick else "")
        write_markdown(output / "benchmarks.md", latest_section(rows, failures, seconds, command))
        print(f"wrote the latest figures into {output / 'benchmarks.md'}")
        if write_plot(output / "benchmarks.png", rows):
            print(f"wrote {output / 'benchmarks.png'}")
        else:
            print("(matplotlib not installed: no plot)")
    return 1 if failures and args.strict else 0


if __name__ == "__main__":
    sys.exit(main())
