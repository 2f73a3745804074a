"""``amqp-async send --size SIZE`` with a large SIZE: bounded memory (amqp_async/cli/_send.py, ``_send_streamed``).

Before, each body was SIZE bytes made whole and encoded whole: 228 MB of RSS for ``--size 100000000``, so a
``--size 2000000000`` took some 4.4 GB. Above 1 MiB each body is now streamed in parts of 256 KiB (one delivery,
one data section of SIZE bytes, one outcome): the command stays near its own size whatever SIZE. Checked through
the embedded broker (the message stored whole on its side, received byte for byte by ``receive --output-dir``) and
python-qpid-proton's reactor broker (the attributes kept, the body one binary of SIZE bytes).
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("proton", reason="python-qpid-proton is the reference peer; CI installs it")

try:
    from proton_broker import ProtonBroker
    from test_cli import TIMEOUT, BrokerCLI, cli_env, ok
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.proton_broker import ProtonBroker
    from tests.test_cli import TIMEOUT, BrokerCLI, cli_env, ok

pytest.importorskip("click", reason="the cli extra (click, rich) is in the test dependency group")

MiB = 1 << 20
SIZE = 96 * MiB


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerCLI]:
    process = BrokerCLI(tmp_path_factory.mktemp("cli-size-broker"), "--max-memory", "512MiB")
    try:
        yield process
    finally:
        process.stop()


#: Runs ``amqp-async ARGUMENTS`` in this process and, at its exit, writes its peak RSS (``VmHWM``, KiB) to the file
#: named by ``PEAK_FILE``. Not ``ru_maxrss`` from ``wait4``: Linux keeps that across ``execve``, so it counts the
#: image forked from the test's worker before the exec (a worker that had run large-message tests read 223 MiB for a
#: CLI of 30); ``VmHWM`` is the peak of this process's own memory, which ``execve`` began afresh.
_MEASURED = """\
import atexit, os, runpy, sys

def _peak():
    with open("/proc/self/status") as status:
        kib = next(line.split()[1] for line in status if line.startswith("VmHWM:"))
    with open(os.environ["PEAK_FILE"], "w") as out:
        out.write(kib)

atexit.register(_peak)
sys.argv = ["amqp-async", *sys.argv[1:]]
runpy.run_module("amqp_async", run_name="__main__", alter_sys=True)
"""


def _run_measured(tmp_path: Path, *arguments: str) -> tuple[int, str, int]:
    """Run ``amqp-async ARGUMENTS``: its exit code, its stderr and its peak RSS in bytes."""
    peak_file = tmp_path / "peak"
    env = cli_env(PEAK_FILE=str(peak_file))  # the installed package, else this checkout's (as cli_command)
    done = subprocess.run(
        [sys.executable, "-c", _MEASURED, *arguments],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
        timeout=TIMEOUT * 4,
    )
    return done.returncode, done.stderr.decode(), int(peak_file.read_text()) * 1024


def test_a_large_size_is_streamed_in_bounded_memory(broker: BrokerCLI, tmp_path: Path) -> None:
    queue = f"size-{uuid.uuid4().hex[:10]}"
    code, stderr, peak = _run_measured(tmp_path, "send", "-u", broker.url, queue, "--size", str(SIZE))
    assert code == 0, stderr
    # the summary (a progress line may come before it on a slow run)
    assert stderr.splitlines()[-1].startswith("sent 1 message (100.7 MB) in "), stderr
    # Before: ~2.2 x SIZE (the body made whole, then encoded whole). Now some 30 MiB whatever the size. On 3.12 and
    # 3.13, 78 MiB was seen under a loaded CI run: their selector transport's writelines() never paused the protocol
    # (amqp_async/io/direct_stream.py, _pause_if_full), so the transport held what the peer had not read yet.
    assert peak < 2 * SIZE // 3, f"peak RSS {peak / MiB:.0f} MiB for a body of {SIZE / MiB:.0f} MiB"
    out = tmp_path / "out"
    ok("receive", "-u", broker.url, queue, "-d", str(out), "--count", "1", "--timeout", "20", "-q")
    [received] = out.iterdir()
    assert received.stat().st_size == SIZE
    with received.open("rb") as file:
        assert file.read(4096) == b"x" * 4096


def test_streamed_bodies_keep_the_attributes_for_python_qpid_proton() -> None:
    with ProtonBroker() as peer:
        ok("send", "-u", peer.url, "q", "--size", str(2 * MiB), "--count", "3", "--subject", "s", "-p", "n=1", "-q")
        messages = peer.wait_messages(3, address="q")
    assert [(m.message.subject, m.properties, len(m.body), m.outcome) for m in messages] == [
        ("s", {"n": 1}, 2 * MiB, "accepted")
    ] * 3
    assert all(bytes(m.body) == b"x" * (2 * MiB) for m in messages)
