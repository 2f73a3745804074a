"""The write-ahead log of executor-side streaming reads, without a JVM: the choice among attempts (Disk Paxos),
atomic publication of entries, the race of attempts on real filesystems, and cleanup at commit.

The choice is checked the way a protocol is: every interleaving Hypothesis can think of, of up to four attempts
that start late, stall or crash at any step, must end with every attempt that finishes agreeing on one proposed
value; and the same harness must catch a protocol that skips a phase (so the check can fail).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow.fs as pafs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyarrow._fs import _MockFileSystem

from amqp_async.spark import _paxos
from amqp_async.spark._log import Entry, WriteAheadLog, open_filesystem
from amqp_async.spark._options import OptionError

# --- the choice, over every interleaving --------------------------------------------------------------------------

Chooser = Callable[[str, str], _paxos.Steps]


def _paxos_chooser(me: str, proposal: str) -> _paxos.Steps:
    return _paxos.choose(me, proposal, rng=random.Random(me))


class _Attempt:
    """One attempt's steps, run one request at a time against the shared store."""

    def __init__(self, name: str, chooser: Chooser) -> None:
        self.name = name
        self.proposal = f"{name}-entry"
        self.steps = chooser(name, self.proposal)
        self.reply: list[_paxos.Block] | None = None
        self.request: _paxos.Request | None = next(self.steps)
        self.taken = 0
        self.decided: str | None = None

    def step(self, store: dict[str, _paxos.Block]) -> None:
        """Perform the pending request (atomically, as the filesystem does one write or one listing) and run to
        the next one."""
        request = self.request
        reply: list[_paxos.Block] | None = None
        if isinstance(request, _paxos.Write):
            block = request.block
            if block.owner not in store or store[block.owner].seq < block.seq:
                store[block.owner] = block
        elif isinstance(request, _paxos.Read):
            reply = list(store.values())
        self.taken += 1
        try:
            self.request = self.steps.send(reply)
        except StopIteration as done:
            self.decided = done.value
            self.request = None


def simulate(
    count: int, schedule: list[int], crashes: dict[int, int], starts: list[int], chooser: Chooser = _paxos_chooser
) -> list[_Attempt]:
    """Run ``count`` attempts: attempt i joins at step ``starts[i]``, and ``schedule`` says which of the running
    ones moves at each step; attempt i dies after ``crashes[i]`` requests. Then each survivor that has not
    decided runs alone until it does (as random back-off lets one attempt do, in the end)."""
    store: dict[str, _paxos.Block] = {}
    attempts: list[_Attempt] = []
    for step, pick in enumerate(schedule):
        while len(attempts) < count and starts[len(attempts)] <= step:
            attempts.append(_Attempt(f"a{len(attempts)}", chooser))
        running = [a for i, a in enumerate(attempts) if a.decided is None and a.taken < crashes.get(i, 10**9)]
        if running:
            running[pick % len(running)].step(store)
    while len(attempts) < count:
        attempts.append(_Attempt(f"a{len(attempts)}", chooser))
    for index, attempt in enumerate(attempts):
        if attempt.taken >= crashes.get(index, 10**9):
            continue
        for _ in range(100):
            if attempt.decided is not None:
                break
            attempt.step(store)
        assert attempt.decided is not None, f"{attempt.name} running alone did not decide within 100 steps"
    return attempts


def _agreement(attempts: list[_Attempt]) -> set[str]:
    return {attempt.decided for attempt in attempts if attempt.decided is not None}


@settings(max_examples=300, deadline=None)
@given(
    count=st.integers(2, 4),
    schedule=st.lists(st.integers(0, 3), max_size=120),
    crashes=st.dictionaries(st.integers(0, 3), st.integers(0, 12), max_size=3),
    starts=st.lists(st.integers(0, 60), min_size=4, max_size=4),
)
def test_every_attempt_that_decides_learns_the_same_proposed_entry(
    count: int, schedule: list[int], crashes: dict[int, int], starts: list[int]
) -> None:
    crashes = {index: after for index, after in crashes.items() if index < count - 1}  # the last one lives
    attempts = simulate(count, schedule, crashes, sorted(starts))
    decided = _agreement(attempts)
    assert len(decided) == 1
    assert decided <= {attempt.proposal for attempt in attempts}
    assert any(attempt.decided is not None for attempt in attempts)


def _one_phase_chooser(me: str, proposal: str) -> _paxos.Steps:
    """A broken protocol: claim a ballot with its own value and keep it unless outbid (no phase that adopts an
    earlier value)."""
    blocks = yield _paxos.Read()
    assert blocks is not None
    ballot = _paxos.Ballot(max([0, *(block.mbal.round for block in blocks)]) + 1, me)
    yield _paxos.Write(_paxos.Block(me, 1, ballot, ballot, proposal))
    blocks = yield _paxos.Read()
    assert blocks is not None
    return proposal


def test_the_interleaving_harness_catches_a_protocol_without_phase_one() -> None:
    rng = random.Random(7)
    for _ in range(2000):
        schedule = [rng.randrange(4) for _ in range(40)]
        attempts = simulate(2, schedule, {}, [0, rng.randrange(10)], chooser=_one_phase_chooser)
        if len(_agreement(attempts)) > 1:
            return
    pytest.fail("the harness never found the broken protocol's two decisions")


def test_a_late_attempt_adopts_the_value_already_chosen() -> None:
    attempts = simulate(3, [0] * 30, {}, [0, 30, 31])  # a0 decides alone, then a1 and a2 come
    assert [attempt.decided for attempt in attempts] == ["a0-entry"] * 3


# --- entries: written whole, read back -----------------------------------------------------------------------------


def _mock_log(object_store: bool) -> WriteAheadLog:
    filesystem = _MockFileSystem()
    return WriteAheadLog("log", "source1", filesystem=filesystem, object_store=object_store)


@pytest.mark.parametrize("kind", ["local", "object store"])
def test_an_entry_round_trips_and_is_named_by_its_count_and_drain(kind: str, tmp_path: Path) -> None:
    log = WriteAheadLog(str(tmp_path), "source1") if kind == "local" else _mock_log(object_store=True)
    slot = log.slot(3, 1)
    payloads = [bytes([n % 256]) * (n % 300) for n in range(20_000)]  # empty ones too
    entry = slot.write_entry("0-abc", payloads, drained=True)
    assert entry == Entry("0-abc", 20_000, True)
    assert slot.read_entry(entry) == payloads
    empty = slot.write_entry("1-def", [], drained=False)
    assert slot.read_entry(empty) == []
    assert slot.chosen() is None  # written is not chosen


def test_an_entry_whose_write_failed_is_not_in_the_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = WriteAheadLog(str(tmp_path), "source1")
    slot = log.slot(0, 0)

    class BrokenRename:
        """The local filesystem, but the rename fails (a disk gone at the last moment)."""

        def __init__(self, real: pafs.FileSystem) -> None:
            self.real = real

        def __getattr__(self, name: str) -> object:
            return getattr(self.real, name)

        def move(self, source: str, destination: str) -> None:
            raise OSError("disk gone")

    monkeypatch.setattr(log.files, "fs", BrokenRename(log.files.fs))
    with pytest.raises(OSError, match="disk gone"):
        slot.write_entry("0-abc", [b"x"] * 10, drained=False)
    names = os.listdir(tmp_path / "source1" / "0" / "0")
    assert len(names) == 1 and names[0].startswith(".tmp-")  # the bytes, under a name no listing takes
    assert slot._listing() == ({}, None, [])


_KILLED_WRITER = """
import sys
from amqp_async.spark._log import WriteAheadLog
slot = WriteAheadLog(sys.argv[1], "source1").slot(0, int(sys.argv[2]))
print("writing", flush=True)
slot.write_entry("0-abc", [b"%06d" % n * 20 for n in range(200_000)], drained=False)
print("written", flush=True)
"""


def test_a_writer_killed_at_any_moment_leaves_the_whole_entry_or_none(tmp_path: Path) -> None:
    def writer(partition: int) -> subprocess.Popen[str]:
        process = subprocess.Popen(
            [sys.executable, "-c", _KILLED_WRITER, str(tmp_path), str(partition)], stdout=subprocess.PIPE, text=True
        )
        assert process.stdout is not None and process.stdout.readline().strip() == "writing"
        return process

    def listing(partition: int) -> tuple[dict[str, Entry], Entry | None, list[_paxos.Block]]:
        return WriteAheadLog(str(tmp_path), "source1").slot(0, partition)._listing()

    started = time.monotonic()
    whole = writer(0)
    assert whole.stdout is not None and whole.stdout.readline().strip() == "written"
    duration = time.monotonic() - started
    whole.wait(10)
    assert list(listing(0)[0].values()) == [Entry("0-abc", 200_000, False)]
    seen_whole = 0
    for partition, fraction in enumerate((0.05, 0.2, 0.4, 0.6, 0.8, 0.95), start=1):
        process = writer(partition)
        time.sleep(duration * fraction)  # die somewhere in the 24 MB write (or just after it)
        process.send_signal(signal.SIGKILL)
        process.wait(10)
        entries, chosen, blocks = listing(partition)
        assert chosen is None and blocks == []
        if entries:
            assert list(entries.values()) == [Entry("0-abc", 200_000, False)]
            payloads = WriteAheadLog(str(tmp_path), "source1").slot(0, partition).read_entry(entries["0-abc"])
            assert len(payloads) == 200_000 and payloads[-1] == b"199999" * 20
            seen_whole += 1
        else:
            directory = tmp_path / "source1" / "0" / str(partition)
            leftovers = os.listdir(directory) if directory.exists() else []
            assert all(name.startswith(".tmp-") for name in leftovers)
    assert seen_whole < 6  # some writes were cut: the check above saw them leave nothing under an entry's name


def test_local_files_and_their_directories_are_synced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(descriptor: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{descriptor}"))
        real_fsync(descriptor)

    monkeypatch.setattr(os, "fsync", fsync)
    slot = WriteAheadLog(str(tmp_path), "source1").slot(0, 0)
    entry = slot.write_entry("0-abc", [b"m"], drained=False)
    directory = str(tmp_path / "source1" / "0" / "0")
    assert synced[-1] == directory  # the rename, made durable
    assert synced[-2].startswith(directory + "/.tmp-")  # the bytes, before the rename
    synced.clear()
    slot.choose("0-abc", entry)
    assert synced.count(directory) == 3  # two ballots and the choice


# --- the race of attempts, on filesystems --------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["local", "object store"])
def test_attempts_racing_on_one_partition_all_learn_one_entry(kind: str, tmp_path: Path) -> None:
    log = WriteAheadLog(str(tmp_path), "source1") if kind == "local" else _mock_log(object_store=True)
    for batch in range(20):
        barrier = threading.Barrier(4)
        learned: dict[str, Entry] = {}

        def attempt(
            name: str, batch: int = batch, barrier: threading.Barrier = barrier, learned: dict[str, Entry] = learned
        ) -> None:
            slot = log.slot(batch, 0)
            entry = slot.write_entry(name, [name.encode()] * 3, drained=False)
            barrier.wait()
            learned[name] = slot.choose(name, entry, sleep=lambda seconds: time.sleep(seconds / 10))

        threads = [threading.Thread(target=attempt, args=(f"{n}-x{batch}",)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert len(learned) == 4
        (chosen,) = set(learned.values())
        assert chosen.attempt in learned
        assert log.slot(batch, 0).chosen() == chosen
        assert log.slot(batch, 0).read_entry(chosen) == [chosen.attempt.encode()] * 3


_RACER = """
import sys
from amqp_async.spark._log import WriteAheadLog
location, name, start = sys.argv[1:4]
slot = WriteAheadLog(location, "source1").slot(0, 0)
entry = slot.write_entry(name, [name.encode()], drained=True)
import time
while time.time() < float(start):
    pass
print(slot.choose(name, entry).attempt, flush=True)
"""


def test_attempts_in_separate_processes_agree(tmp_path: Path) -> None:
    start = time.time() + 1.5
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", _RACER, str(tmp_path), f"{n}-proc", str(start)], stdout=subprocess.PIPE, text=True
        )
        for n in range(3)
    ]
    answers = [process.communicate(timeout=60)[0].strip() for process in processes]
    assert len(set(answers)) == 1 and answers[0] in {"0-proc", "1-proc", "2-proc"}


# --- the driver's side: outcomes, commit, cleanup -------------------------------------------------------------------


def test_outcomes_list_each_partitions_choice_without_reading_entries(tmp_path: Path) -> None:
    log = WriteAheadLog(str(tmp_path), "source1")
    for partition, drained in ((0, True), (1, False)):
        slot = log.slot(5, partition)
        slot.choose("0-a", slot.write_entry("0-a", [b"x"] * (partition + 1), drained))
    log.slot(5, 2).write_entry("0-b", [b"y"], drained=True)  # written, never chosen (its task is running)
    assert log.outcomes(5) == {0: Entry("0-a", 1, True), 1: Entry("0-a", 2, False), 2: None}
    assert log.partitions(5) == [0, 1, 2]
    assert log.outcomes(6) == {} and log.partitions(6) == []


@pytest.mark.parametrize("kind", ["local", "object store"])
def test_commit_marks_the_batches_done_then_deletes_them(kind: str, tmp_path: Path) -> None:
    log = WriteAheadLog(str(tmp_path), "source1") if kind == "local" else _mock_log(object_store=True)
    for batch in range(4):
        slot = log.slot(batch, 0)
        slot.choose("0-a", slot.write_entry("0-a", [b"x"], drained=False))
    assert log.committed() == 0
    assert log.commit(2) == 2
    assert log.committed() == 2
    assert log.outcomes(0) == {} and log.outcomes(1) == {}
    assert log.outcomes(2) == {0: Entry("0-a", 1, False)}
    assert log.commit(2) == 0  # again: nothing more
    assert log.commit(4) == 2
    assert log.committed() == 4
    names = log.files.names(log.root)
    assert names == ["done.4"]  # the older mark went with the batches


def test_a_zombie_attempt_sees_its_batch_committed_after_choosing(tmp_path: Path) -> None:
    log = WriteAheadLog(str(tmp_path), "source1")
    slot = log.slot(0, 0)
    slot.choose("0-a", slot.write_entry("0-a", [b"x"], drained=False))
    log.commit(1)  # Spark committed batch 0 and its files are gone
    zombie = log.slot(0, 0)  # a speculative copy still running: it finds nothing and chooses its own
    assert zombie.choose("1-z", zombie.write_entry("1-z", [b"y"], drained=False)).attempt == "1-z"
    assert log.committed() > 0  # which is why every attempt checks this before it accepts


def _write_ballots(log: WriteAheadLog, directory: str, writing: threading.Event, stop: threading.Event) -> None:
    """Write ballot files into ``directory`` (making it again when it went away) until ``stop``, as a zombie attempt
    would; ``writing`` is set once one was written."""
    ballot = 0
    while not stop.is_set():
        try:
            log.files.make_dir(directory)
            log.files.publish(directory, f"ballot.1-z.{ballot}.1.0.-.")
        except OSError:
            pass  # the directory went away under it: write on
        writing.set()
        ballot += 1


def test_a_commit_while_a_zombie_writes_into_the_batch_leaves_its_files_for_the_next_commit(tmp_path: Path) -> None:
    """A speculative copy Spark no longer waits for writes its entry and ballots into its batch's directory as the
    driver deletes it: the deletion finds the directory not empty. Before, the commit raised, and the query failed
    (on the driver, in Spark's commit); now it leaves those files to the next commit. Each trial races a thread that
    writes files there for as long as the commit runs."""
    for trial in range(20):
        log = WriteAheadLog(str(tmp_path), f"source{trial}")
        slot = log.slot(0, 0)
        slot.choose("0-a", slot.write_entry("0-a", [b"x"], drained=False))
        writing, stop = threading.Event(), threading.Event()
        zombie = threading.Thread(target=_write_ballots, args=(log, slot.directory, writing, stop), daemon=True)
        zombie.start()
        try:
            assert writing.wait(30)
            log.commit(1)
        finally:
            stop.set()
            zombie.join(30)
        assert log.committed() == 1  # committed, whatever was left
        log.commit(2)  # the next commit, the zombie gone
        assert log.partitions(0) == []


def test_a_log_location_must_be_absolute_or_a_uri() -> None:
    with pytest.raises(OptionError, match="logLocation"):
        open_filesystem("ftp-without-scheme")
    filesystem, path = open_filesystem("file:///tmp/amqp-log/")
    assert isinstance(filesystem, pafs.LocalFileSystem) and path == "/tmp/amqp-log"
