"""Large messages in bounded memory: one message streamed through a broker, the resident memory of the sender, the
receiver and (ours) the broker sampled every 10 ms.

Run: ``python benchmarks/streaming.py [--size BYTES] [--quick] [--peer ours|rabbitmq] [--stalled] [--json]``.

- ``ours``: ``python -m amqp_async.broker --data-dir DIR`` in its own process (large bodies kept on its disk);
- ``rabbitmq``: a private RabbitMQ 3.10 node (tests/rabbitmq.py). RabbitMQ takes no message above 512 MiB (its
  ``max_message_size`` is 128 MiB by default and cannot be set higher than 512 MiB; the private node is set to
  512 MiB), so its size is capped there. Its AMQP 1.0 plugin holds a message whole (it converts it to an AMQP
  0-9-1 one), so RabbitMQ's own memory is not bounded by the message, and is not reported; ours are. The body
  goes as one data section there (its size given to ``send_stream``), since RabbitMQ 3.10 reverses the order of
  a message's data sections.

Each side is a process of its own (benchmarks/stream_program.py): the sender streams ``--size`` bytes of generated
data (an async iterable of 256 KiB chunks, its length unknown: a data section per chunk) and awaits the outcome,
then the receiver reads the message back chunk by chunk (``body_chunks()``) and accepts it; both compute the
body's sha256, which must agree. Default: 1 GiB through each peer (``--quick``: 64 MiB).

Reported per process: its idle anonymous resident memory (what it allocated: the resident set less the pages of
its shared libraries; connected, link attached) and the most it grew by while the bytes moved, against its window
(``--buffer``: the sender's bytes of frames let wait for the peer, the receiver's session window); the broker's
idle and growth with the whole run. ``--stalled``: the broker is stopped and let go on by turns of 30 ms while the
message is sent, so that the sender's output waits on it. tests/test_streaming_memory.py runs this with 64 MiB,
stalled, and holds the growth to bounds.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PROGRAM = HERE / "stream_program.py"
MiB = 1 << 20
RABBITMQ_LARGEST = 512 * MiB


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}


def resident_of(pid: int) -> int:
    """The anonymous resident memory of process ``pid`` in bytes (Linux): what it allocated (its resident set less
    the pages of its shared libraries and mapped files), as benchmarks/stream_program.py measures its own."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no RssAnon for {pid}")


def run_program(*arguments: str, timeout: float) -> dict[str, Any]:
    """benchmarks/stream_program.py in a process of its own: its line of JSON."""
    result = subprocess.run(
        [sys.executable, str(PROGRAM), *arguments],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=_env(),
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"stream_program.py {' '.join(arguments)} failed:\n{result.stderr[-3000:]}")
    found: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return found


@contextmanager
def meanwhile(work: Callable[[threading.Event], None]) -> Iterator[None]:
    """Run ``work(done)`` in a thread while the block runs: ``done`` is set when the block ends, and the thread
    joined."""
    done = threading.Event()
    thread = threading.Thread(target=work, args=(done,), daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


class BrokerProcess:
    """``python -m amqp_async.broker`` in a process of its own, its resident set sampled while ``sampling``."""

    def __init__(self, *arguments: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "amqp_async.broker", "--port", "0", "--quiet", *arguments],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=_env(),
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line.startswith("listening on "):
            self.stop()
            raise RuntimeError(f"the broker did not start: {line!r}")
        self.url = line.split()[-1]
        self.idle = 0
        self.peak = 0

    @contextmanager
    def sampling(self) -> Iterator[None]:
        """Sample the broker's resident set meanwhile: ``idle`` before, ``peak`` the most seen."""
        self.idle = self.peak = resident_of(self.process.pid)

        def sample(done: threading.Event) -> None:
            while not done.wait(0.01):
                self.peak = max(self.peak, resident_of(self.process.pid))

        with meanwhile(sample):
            yield

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)


def descendants(pid: int) -> list[int]:
    """``pid`` and the processes below it (Linux: from /proc), parents first."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue  # ended meanwhile
            parent = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(parent, []).append(int(entry.name))
    found = [pid]
    for each in found:
        found.extend(children.get(each, ()))
    return found


@contextmanager
def stalling(pids: Sequence[int], period: float = 0.03) -> Iterator[None]:
    """Stop the processes ``pids`` and let them go on, by turns of ``period`` seconds, meanwhile: a broker that
    reads in bursts, so that what the sender writes waits on it (its memory must stay bounded all the same). No
    ``pids``: nothing is stopped."""

    def signal_all(signum: int) -> None:
        for pid in pids:
            try:
                os.kill(pid, signum)
            except ProcessLookupError:
                pass

    def stall(done: threading.Event) -> None:
        while not done.is_set():
            signal_all(signal.SIGSTOP)
            time.sleep(period)
            signal_all(signal.SIGCONT)
            done.wait(period)

    if not pids:
        yield
        return
    try:
        with meanwhile(stall):
            yield
    finally:
        signal_all(signal.SIGCONT)


def through(
    url: str,
    size: int,
    *,
    timeout: float,
    buffer: int = MiB,
    known_size: bool = False,
    stall: Sequence[int] = (),
) -> tuple[dict[str, Any], dict[str, Any]]:
    """One message of ``size`` bytes streamed to ``url`` and read back streamed: (sender's, receiver's) figures.

    ``known_size``: the sender gives the body's size (one data section) rather than a section per chunk.
    ``stall``: the broker's processes, stopped by turns while the message is sent (see :func:`stalling`).

    Raises:
        RuntimeError: a side failed, or the two ends disagree on the body.
    """
    address = f"stream-{uuid.uuid4().hex[:8]}"
    known = ["--known-size"] if known_size else []
    with stalling(stall):
        sent = run_program("send", url, address, str(size), "--buffer", str(buffer), *known, timeout=timeout)
    received = run_program("receive", url, address, "--buffer", str(buffer), timeout=timeout)
    if not received["size"] == sent["size"] == size or received["sha256"] != sent["sha256"]:
        raise RuntimeError(f"the body changed on its way: sent {sent}, received {received}")
    return sent, received


def via_our_broker(
    data_dir: Path, size: int, *, timeout: float, buffer: int = MiB, stalled: bool = False
) -> dict[str, Any]:
    """``size`` bytes through ``python -m amqp_async.broker --data-dir data_dir``: the figures of all three.
    ``stalled``: the broker is stopped by turns while the message is sent (:func:`stalling`)."""
    broker = BrokerProcess("--data-dir", str(data_dir))
    stall = [broker.process.pid] if stalled else []
    try:
        with broker.sampling():
            sent, received = through(broker.url, size, timeout=timeout, buffer=buffer, stall=stall)
        left_on_disk = sorted(path.name for path in (data_dir / "bodies").iterdir())
    finally:
        broker.stop()
    return {
        "peer": "ours --data-dir",
        "size": size,
        "buffer": buffer,
        "sender": sent,
        "receiver": received,
        "broker": {"idle": broker.idle, "peak": broker.peak},
        "left_on_disk": left_on_disk,
    }


def via_rabbitmq(
    url: str, size: int, *, timeout: float, buffer: int = MiB, stall: Sequence[int] = ()
) -> dict[str, Any]:
    """``size`` bytes through the RabbitMQ node at ``url``: the sender's and receiver's figures. ``stall``: the
    node's processes, stopped by turns while the message is sent (:func:`stalling`).

    The body goes as one data section (its size given): RabbitMQ 3.10 hands a message of several data sections
    over with its sections in reverse order (fixed in 3.11, rabbitmq-server pull request 7001).
    """
    sent, received = through(url, size, timeout=timeout, buffer=buffer, known_size=True, stall=stall)
    return {"peer": "RabbitMQ 3.10", "size": size, "buffer": buffer, "sender": sent, "receiver": received}


def growth(figures: dict[str, Any]) -> int:
    """What a process grew by while the bytes moved."""
    return int(figures["peak"]) - int(figures["idle"])


def lines(run: dict[str, Any]) -> list[str]:
    """A run's figures, one line per process."""
    mb = run["size"] / 1e6
    head = f"{run['size'] / MiB:,.0f} MiB via {run['peer']} (window {run['buffer'] / MiB:g} MiB)"
    found = [head]
    for side in ("sender", "receiver"):
        figures = run[side]
        found.append(
            f"  {side:<8} {mb / figures['seconds']:>7,.0f} MB/s  idle {figures['idle'] / MiB:6.1f} MiB  "
            f"grew {growth(figures) / MiB:5.1f} MiB"
        )
    if "broker" in run:
        found.append(
            f"  {'broker':<8} {'':>12}  idle {run['broker']['idle'] / MiB:6.1f} MiB  "
            f"grew {growth(run['broker']) / MiB:5.1f} MiB"
        )
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=1 << 30, help="bytes of the message (default 1 GiB)")
    parser.add_argument("--quick", action="store_true", help="64 MiB")
    parser.add_argument("--peer", choices=("ours", "rabbitmq"), action="append", help="default: both")
    parser.add_argument("--buffer", type=int, default=MiB, help="each side's window in bytes (default 1 MiB)")
    parser.add_argument(
        "--stalled", action="store_true", help="stop the broker by turns (30 ms) while the message is sent"
    )
    parser.add_argument("--json", action="store_true", help="one line of JSON per run instead of text")
    arguments = parser.parse_args()
    size = 64 * MiB if arguments.quick else arguments.size
    timeout = 60 + size / 2e6  # 2 MB/s at the least
    runs: list[dict[str, Any]] = []
    for peer in arguments.peer or ["ours", "rabbitmq"]:
        if peer == "ours":
            with tempfile.TemporaryDirectory(prefix="amqp-async-stream-") as data_dir:
                runs.append(
                    via_our_broker(
                        Path(data_dir), size, timeout=timeout, buffer=arguments.buffer, stalled=arguments.stalled
                    )
                )
        else:
            from _rabbitmq import rabbitmq_node

            with rabbitmq_node() as node:
                capped = min(size, RABBITMQ_LARGEST)
                assert node.process is not None
                stall = descendants(node.process.pid) if arguments.stalled else []
                runs.append(via_rabbitmq(node.url, capped, timeout=timeout, buffer=arguments.buffer, stall=stall))
        print(json.dumps(runs[-1]) if arguments.json else "\n".join(lines(runs[-1])), flush=True)


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    main()
