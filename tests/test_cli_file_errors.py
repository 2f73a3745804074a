"""``amqp-async send --file`` and ``receive --output-dir`` when a file cannot be sent or written, run as
subprocesses against ``amqp-async broker`` (as tests/test_cli_files.py): each ends with its documented exit code
and one line naming what failed, and no message is lost (the ones taken are released).

- A file larger than a data section holds (4 GiB, §1.6.19) ended ``send`` with exit code 1 and "int too big to
  convert" even where the broker's max-message-size refuses it by name (exit code 6).
- Of several ``--file``, the error did not say which one it was about.
- An ``--output-dir`` that cannot hold files ended ``receive`` with exit code 1 (a bug, the docs say) and a bare
  ``[Errno 20] Not a directory``, after taking a message; a full disk with a bare errno line too.
"""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

try:
    from test_cli import BrokerCLI, cli, cli_command, cli_env, ok
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.test_cli import BrokerCLI, cli, cli_command, cli_env, ok

pytest.importorskip("click", reason="the cli extra (click, rich) is in the test dependency group")

MiB = 1 << 20
GiB = 1 << 30
TIMEOUT = 120.0


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerCLI]:
    base = tmp_path_factory.mktemp("cli-file-errors-broker")
    process = BrokerCLI(base, "--max-message-size", "64MiB")
    try:
        yield process
    finally:
        process.stop()
    assert process.process.returncode == 0, "the broker did not exit cleanly on SIGTERM"


@pytest.fixture
def queue() -> str:
    return f"file-errors-{uuid.uuid4().hex[:10]}"


def test_a_file_above_4_gib_is_refused_by_the_peers_limit_with_its_condition(
    broker: BrokerCLI, queue: str, tmp_path: Path
) -> None:
    huge = tmp_path / "huge.bin"
    with huge.open("wb") as file:
        file.truncate(5 * GiB)  # sparse: nothing of it is read, the size is refused first
    result = cli("send", "-u", broker.url, queue, "--file", str(huge), "-q")
    assert result.returncode == 6, result.stderr  # not accepted: larger than the peer takes
    assert "amqp:link:message-size-exceeded" in result.stderr, result.stderr
    assert "max-message-size 67108864: nothing of it was sent" in result.stderr, result.stderr


def test_the_error_names_the_file_it_stopped_and_how_many_went_before(
    broker: BrokerCLI, queue: str, tmp_path: Path
) -> None:
    small = tmp_path / "small.txt"
    small.write_text("fits\n")
    huge = tmp_path / "huge.bin"
    with huge.open("wb") as file:
        file.truncate(65 * MiB)  # sparse: above the broker's 64 MiB
    result = cli("send", "-u", broker.url, queue, "-f", str(small), "-f", str(huge), "-f", str(small), "-q")
    assert result.returncode == 6, result.stderr
    [line] = result.stderr.splitlines()
    assert re.fullmatch(
        r"amqp-async: error: amqp:link:message-size-exceeded: message of \d+ bytes exceeds the peer's "
        rf"max-message-size 67108864: nothing of it was sent \(--file {re.escape(str(huge))}; the 1 file before "
        r"it went\)",
        line,
    ), line
    out = tmp_path / "out"
    received = ok("receive", "-u", broker.url, queue, "-d", str(out), "-t", "2", "-q")  # what went: the first
    assert received.stdout.splitlines() == [str(out / "small.txt")]


@pytest.mark.parametrize("under", ["a-file/out", "a-file"])
def test_an_output_dir_that_cannot_hold_files_is_a_usage_error_before_any_message_is_taken(
    broker: BrokerCLI, queue: str, tmp_path: Path, under: str
) -> None:
    (tmp_path / "a-file").write_bytes(b"a regular file, no directory")
    sent = tmp_path / "notes.txt"
    sent.write_text("hello\n")
    ok("send", "-u", broker.url, queue, "--file", str(sent), "-q")
    result = cli("receive", "-u", broker.url, queue, "--output-dir", str(tmp_path / under), "-c", "1", "-t", "10")
    assert result.returncode == 2, result.stderr
    assert "--output-dir" in result.stderr and "Traceback" not in result.stderr, result.stderr
    # the message was not taken: a receive into a directory that works gets it
    out = tmp_path / "out"
    received = ok("receive", "-u", broker.url, queue, "--output-dir", str(out), "-c", "1", "-t", "10", "-q")
    assert received.stdout.splitlines() == [str(out / "notes.txt")]
    assert (out / "notes.txt").read_text() == "hello\n"
    assert sorted(path.name for path in out.iterdir()) == ["notes.txt"]  # the check left no file behind


@functools.cache
def _mounts_a_small_tmpfs() -> str | None:
    """Why a small tmpfs cannot be mounted in a mount namespace of our own (None: it can)."""
    if shutil.which("unshare") is None:
        return "no unshare command"
    probe = subprocess.run(
        ["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /mnt"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    return None if probe.returncode == 0 else f"cannot mount a tmpfs here: {probe.stderr.strip()}"


def test_a_full_disk_names_the_file_releases_the_message_and_leaves_no_part_file(
    broker: BrokerCLI, queue: str, tmp_path: Path
) -> None:
    reason = _mounts_a_small_tmpfs()
    if reason is not None:
        pytest.skip(f"a full disk is made with a 1 MiB tmpfs in a mount namespace: {reason}")
    big = tmp_path / "big.bin"
    big.write_bytes(b"\x5a" * (3 * MiB))
    ok("send", "-u", broker.url, queue, "--file", str(big), "-q")
    mount = tmp_path / "small"
    mount.mkdir()
    # the receive runs in a mount namespace whose DIR is a 1 MiB tmpfs; ls shows what it left there
    receive = ["receive", "-u", broker.url, queue, "--output-dir", str(mount / "out"), "-c", "1", "-q"]
    script = 'mount -t tmpfs -o size=1m tmpfs "$0" && "$@"; code=$?; ls -A "$0/out"; exit $code'
    result = subprocess.run(
        ["unshare", "-m", "sh", "-c", script, str(mount), *cli_command(), *receive],
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=TIMEOUT,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 1, result.stderr
    assert result.stderr.strip().splitlines() == [
        f"amqp-async: error: --output-dir: cannot write {mount / 'out' / 'big.bin.part'}: No space left on device; "
        "the message was released"
    ]
    assert result.stdout.split() == []  # no file left in the output directory, not even the .part (ls -A)
    out = tmp_path / "out"
    ok("receive", "-u", broker.url, queue, "--output-dir", str(out), "-c", "1", "-t", "10", "-q")
    assert (out / "big.bin").read_bytes() == big.read_bytes()
