"""The write-ahead log of executor-side streaming reads: what each partition of each micro-batch received.

A queue cannot be read twice, and a delivery can be settled only on the link that received it. So a task that
reads partition ``p`` of micro-batch ``b`` receives its share, writes it here as a log *entry*, has one entry
chosen for ``(b, p)`` among all the attempts Spark made of that task, and only then settles: the attempt whose
entry was chosen accepts its deliveries, any other releases them (the broker delivers them again, to a later
batch). Whoever runs ``(b, p)`` again (a retry, a speculative copy, a re-run after a driver restart) finds the
choice and returns the chosen entry's messages: a batch is the same however often it is computed. The driver
deletes a batch's files once Spark has committed it.

The log is a directory on any filesystem :mod:`pyarrow.fs` supports (a local path, ``hdfs://``, ``s3://``,
``gs://``, ``abfs://``...), laid out as::

    LOCATION/SOURCE/started                     the source has planned a batch (a replay finds the log by it)
    LOCATION/SOURCE/done.N                      batches below N are committed (written before they are deleted)
    LOCATION/SOURCE/B/P/entry.A.COUNT.D.arrow   attempt A's messages (Arrow IPC: one binary column, the payloads);
                                                D is 1 when A found the queue empty (drained), else 0
    LOCATION/SOURCE/B/P/ballot.A.SEQ.R.BR.BA.V  attempt A's SEQ-th ballot block (see ._paxos): round R, accepted
                                                value V at ballot (BR, BA); empty file, the name says it all
    LOCATION/SOURCE/B/P/chosen.A.COUNT.D        the choice, once made: entry A (a cache of what the ballots decide)

``SOURCE`` names one query's source (its id is in the query's offsets, so a restart from the checkpoint finds
it). Every file is written once and never changed, and appears whole: its bytes are made in memory first; on
filesystems with an atomic rename (local, HDFS) it is written under a temporary name (``.tmp-*``, which listings
skip) and renamed; on object stores (S3, GCS, Azure) it is one upload, which the store shows only once complete.
On a local filesystem each file and its directory are synced to disk before it counts (a crash of the machine
must not lose an entry whose messages were accepted). And only an entry whose write completed is ever proposed,
so no reader ever depends on one that did not. The choice among attempts needs no atomic create-if-absent, which
object stores lack: see :mod:`._paxos`.

A zombie (an attempt Spark no longer waits for, still running after its batch was committed and deleted) could
otherwise choose again in an emptied directory: every attempt checks ``done.N`` after the choice and before it
accepts anything, and releases what it received if its batch is already committed.

Nothing here imports pyspark: the log is tested without a JVM.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import tempfile
import uuid
from collections.abc import Callable, Iterable, Sequence

import attrs
import pyarrow as pa
import pyarrow.fs as pafs

from . import _paxos
from ._options import OptionError

__all__ = ["DEFAULT_LOCATION", "Entry", "Slot", "WriteAheadLog", "new_attempt", "open_filesystem"]

log = logging.getLogger("amqp_async.spark")

#: Times a batch's directory is deleted before it is left to the next commit (see :meth:`_Files.delete_dir`).
_DELETE_ATTEMPTS = 3

#: Where the log goes without the ``logLocation`` option: a local directory, for a driver and executors on one
#: machine (``local`` and ``local-cluster`` masters). A task on another host refuses it.
DEFAULT_LOCATION = os.path.join(tempfile.gettempdir(), "amqp-async-spark-log")

#: Filesystems whose uploads are atomic and that have no atomic rename (pyarrow's ``type_name``).
_OBJECT_STORES = frozenset({"s3", "gcs", "abfs"})
#: Rows per record batch in an entry, and bytes (a binary column's offsets are 32-bit).
_CHUNK_ROWS = 16384
_CHUNK_BYTES = 64 << 20
_PAYLOAD_SCHEMA = pa.schema([pa.field("payload", pa.binary(), nullable=False)])
_ATTEMPT = re.compile(r"[0-9a-z-]+")


def new_attempt(spark_attempt: int) -> str:
    """A name for one attempt of a task, unique among all attempts: its Spark attempt number and a random part."""
    return f"{spark_attempt}-{uuid.uuid4().hex[:16]}"


@functools.lru_cache(maxsize=16)
def open_filesystem(location: str) -> tuple[pafs.FileSystem, str]:
    """The filesystem and path of ``location`` (a URI pyarrow understands, or an absolute local path); one
    filesystem object per location and process.

    Raises:
        OptionError: pyarrow cannot make a filesystem of it (a relative path, an unknown scheme...).
    """
    try:
        filesystem, path = pafs.FileSystem.from_uri(location)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError, OSError) as exc:
        raise OptionError(
            f"option 'logLocation' must be an absolute path or a URI pyarrow.fs understands (hdfs://, s3://, gs://, "
            f"abfs://...): {location!r}: {exc}"
        ) from None
    return filesystem, path.rstrip("/")


def _local_path(filesystem: pafs.FileSystem, path: str) -> str | None:
    """The operating system's path of ``path`` when ``filesystem`` is the local one (to sync it), else None."""
    if isinstance(filesystem, pafs.SubTreeFileSystem):
        base = _local_path(filesystem.base_fs, filesystem.base_path.rstrip("/"))
        return None if base is None else base + "/" + path.lstrip("/")
    return path if filesystem.type_name == "local" else None


def _kind(filesystem: pafs.FileSystem) -> str:
    if isinstance(filesystem, pafs.SubTreeFileSystem):
        return _kind(filesystem.base_fs)
    return str(filesystem.type_name)


def _fsync(path: str) -> None:
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


@attrs.frozen
class Entry:
    """A log entry: attempt ``attempt`` received ``count`` messages; ``drained``: it found the queue empty."""

    attempt: str
    count: int
    drained: bool

    def file_name(self) -> str:
        return f"entry.{self.attempt}.{self.count}.{int(self.drained)}.arrow"

    def chosen_name(self) -> str:
        return f"chosen.{self.attempt}.{self.count}.{int(self.drained)}"


def _entry_of(name: str) -> tuple[str, Entry] | None:
    """(kind, entry) of an ``entry.*.arrow`` or ``chosen.*`` file name, else None."""
    parts = name.split(".")
    if parts[0] == "entry" and len(parts) == 5 and parts[4] == "arrow":
        kind = "entry"
    elif parts[0] == "chosen" and len(parts) == 4:
        kind = "chosen"
    else:
        return None
    attempt, count, drained = parts[1:4]
    if not _ATTEMPT.fullmatch(attempt) or not count.isdigit() or drained not in ("0", "1"):
        return None
    return kind, Entry(attempt, int(count), drained == "1")


def _ballot_name(block: _paxos.Block) -> str:
    return (
        f"ballot.{block.owner}.{block.seq}.{block.mbal.round}.{block.bal.round}.{block.bal.attempt}.{block.inp or ''}"
    )


def _block_of(name: str) -> _paxos.Block | None:
    parts = name.split(".")
    if parts[0] != "ballot" or len(parts) != 7:
        return None
    owner, seq, round_, bal_round, bal_attempt, value = parts[1:]
    if not (seq.isdigit() and round_.isdigit() and bal_round.isdigit()):
        return None
    return _paxos.Block(
        owner,
        int(seq),
        _paxos.Ballot(int(round_), owner),
        _paxos.Ballot(int(bal_round), bal_attempt),
        value or None,
    )


class _Files:
    """Whole-file writes and listings on one filesystem (see the module documentation for how a file appears
    whole on each kind)."""

    def __init__(self, filesystem: pafs.FileSystem, *, object_store: bool | None = None) -> None:
        self.fs = filesystem
        self.has_directories = _kind(filesystem) not in _OBJECT_STORES
        self.object_store = not self.has_directories if object_store is None else object_store
        self.local = _local_path(filesystem, "/") is not None

    def names(self, directory: str, *, recursive: bool = False) -> list[str]:
        """The files (and directories) under ``directory``, as paths relative to it; none when it is missing."""
        selector = pafs.FileSelector(directory, allow_not_found=True, recursive=recursive)
        prefix = directory.rstrip("/") + "/"
        return [info.path[len(prefix) :] if info.path.startswith(prefix) else info.base_name for info in
                self.fs.get_file_info(selector)]  # fmt: skip

    def make_dir(self, directory: str) -> None:
        if self.has_directories:  # an object store has none to make (a marker object would cost a call)
            self.fs.create_dir(directory, recursive=True)

    def publish(self, directory: str, name: str, data: bytes | pa.Buffer = b"") -> None:
        """Write file ``directory/name`` holding ``data`` so that it appears whole: written under a temporary name
        and renamed where renames are atomic, uploaded in one piece to an object store (which shows an object only
        once its upload is complete). The data is made before the file is opened, so nothing of ours can fail
        half-way through it."""
        path = f"{directory}/{name}"
        if not len(data) or self.object_store:
            # An empty file is whole as soon as it exists.
            with self.fs.open_output_stream(path) as stream:
                stream.write(data)
            self._sync(path, directory)
            return
        temporary = f"{directory}/.tmp-{uuid.uuid4().hex}"
        with self.fs.open_output_stream(temporary) as stream:
            stream.write(data)
        self._sync(temporary, None)
        self.fs.move(temporary, path)
        self._sync(None, directory)

    def _sync(self, path: str | None, directory: str | None) -> None:
        """On a local filesystem, flush the file and the directory entry to disk (a crash of the machine, not only
        of the process, must not lose a file that messages were accepted on)."""
        if not self.local:
            return
        for name in (path, directory):
            if name is not None:
                local = _local_path(self.fs, name)
                assert local is not None
                _fsync(local)

    def delete_dir(self, directory: str) -> bool:
        """Delete ``directory`` and everything in it; return False when it could not be, and is left for later.

        A file written into it while it is deleted makes the deletion fail ("directory not empty"): an attempt of a
        committed batch that Spark no longer waits for (a speculative copy being killed) writes its entry and its
        ballots there. The deletion is tried again, then left to the next commit: the batch is committed by its
        ``done.N`` mark, written before, and the attempt sees that mark before it accepts anything. Raising here
        failed the query (Spark's commit, on the driver) for files that are only space.
        """
        for attempt in range(_DELETE_ATTEMPTS):
            try:
                self.fs.delete_dir(directory)
                return True
            except FileNotFoundError:
                return True
            except OSError as exc:
                if attempt + 1 == _DELETE_ATTEMPTS:
                    log.warning("the write-ahead log's %s is left for the next commit: %s", directory, exc)
        return False


class Slot:
    """The log of one partition of one micro-batch: its entries, its ballots, its choice."""

    def __init__(self, log: WriteAheadLog, batch: int, partition: int) -> None:
        self.log = log
        self.batch = batch
        self.partition = partition
        self.directory = f"{log.root}/{batch}/{partition}"
        self._files = log.files

    def _listing(self) -> tuple[dict[str, Entry], Entry | None, list[_paxos.Block]]:
        """The entries (by attempt), the choice if made, and each attempt's latest ballot block."""
        entries: dict[str, Entry] = {}
        chosen: Entry | None = None
        blocks: dict[str, _paxos.Block] = {}
        for name in self._files.names(self.directory):
            found = _entry_of(name)
            if found is not None:
                kind, entry = found
                if kind == "entry":
                    entries[entry.attempt] = entry
                else:
                    chosen = entry
                continue
            block = _block_of(name)
            if block is not None and (block.owner not in blocks or blocks[block.owner].seq < block.seq):
                blocks[block.owner] = block
        return entries, chosen, list(blocks.values())

    def chosen(self) -> Entry | None:
        """The entry chosen for this partition, when the choice is known (a chosen marker was written)."""
        return self._listing()[1]

    def write_entry(self, attempt: str, payloads: Sequence[bytes], drained: bool) -> Entry:
        """Write attempt ``attempt``'s messages (encoded) as its entry; return it. Durable once this returns."""
        entry = Entry(attempt, len(payloads), drained)
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, _PAYLOAD_SCHEMA) as writer:
            for chunk in _chunks(payloads):
                writer.write_batch(pa.record_batch([pa.array(chunk, pa.binary())], schema=_PAYLOAD_SCHEMA))
        self._files.make_dir(self.directory)
        self._files.publish(self.directory, entry.file_name(), sink.getvalue())
        return entry

    def read_entry(self, entry: Entry) -> list[bytes]:
        """The messages of ``entry``, in the order they were received.

        Raises:
            OSError: the entry cannot be read (missing, or does not hold ``entry.count`` messages).
        """
        path = f"{self.directory}/{entry.file_name()}"
        with self.log.filesystem.open_input_stream(path) as stream:
            table = pa.ipc.open_stream(stream).read_all()
        payloads: list[bytes] = table.column("payload").to_pylist() if table.num_rows else []
        if len(payloads) != entry.count:
            raise OSError(f"log entry {path} holds {len(payloads)} messages, its name says {entry.count}")
        return payloads

    def choose(self, attempt: str, entry: Entry, *, sleep: Callable[[float], None] | None = None) -> Entry:
        """Propose ``entry`` (attempt ``attempt``'s, written) and return the entry chosen for the partition: this
        one or another attempt's. Every attempt that calls it learns the same entry (see :mod:`._paxos`)."""
        files = self._files
        directory = self.directory
        entries: dict[str, Entry] = {}

        def read() -> list[_paxos.Block]:
            listed, _, blocks = self._listing()
            entries.update(listed)
            return blocks

        def write(block: _paxos.Block) -> None:
            files.publish(directory, _ballot_name(block))

        files.make_dir(directory)
        steps = _paxos.choose(attempt, entry.attempt)
        value = _paxos.run(steps, write, read, *(() if sleep is None else (sleep,)))
        chosen = entry if value == entry.attempt else entries.get(value)
        if chosen is None:
            chosen = self._listing()[0].get(value)
        if chosen is None:
            raise OSError(f"the log entry chosen for batch {self.batch}, partition {self.partition} ({value}) is gone")
        files.publish(directory, chosen.chosen_name())
        return chosen


def _chunks(payloads: Sequence[bytes]) -> Iterable[Sequence[bytes]]:
    start = size = 0
    for index, payload in enumerate(payloads):
        size += len(payload)
        if index > start and (index - start >= _CHUNK_ROWS or size > _CHUNK_BYTES):
            yield payloads[start:index]
            start, size = index, len(payload)
    if start < len(payloads) or not payloads:
        yield payloads[start:]


class WriteAheadLog:
    """The log of one streaming source (``source``: its id, from the query's offsets) under ``location``."""

    def __init__(
        self,
        location: str,
        source: str,
        *,
        filesystem: pafs.FileSystem | None = None,
        object_store: bool | None = None,
    ) -> None:
        """Args:
        location: a path or URI (see :func:`open_filesystem`), or a path on ``filesystem`` when given.
        source: the source's id.
        filesystem: a filesystem object to use instead of resolving ``location`` (tests use pyarrow's mock).
        object_store: write as to an object store (one upload per file, no rename); default: by filesystem kind.

        Raises:
            ValueError: ``source`` is not a source id (letters, digits and dashes).
            OptionError: ``location`` cannot be resolved.
        """
        if not _ATTEMPT.fullmatch(source):
            raise ValueError(f"not a source id of the amqp data source: {source!r}")
        self.location = location
        if filesystem is None:
            self.filesystem, base = open_filesystem(location)
        else:
            self.filesystem, base = filesystem, location.rstrip("/")
        self.root = f"{base}/{source}"
        self.files = _Files(self.filesystem, object_store=object_store)

    def mark_started(self) -> None:
        """Say the source has planned a batch (once; a restart's replay then knows the log is there)."""
        if "started" not in self.files.names(self.root):
            self.files.make_dir(self.root)
            self.files.publish(self.root, "started")

    def exists(self) -> bool:
        """Whether the log has anything of this source (its marker, a batch's files, a commit)."""
        return bool(self.files.names(self.root))

    def slot(self, batch: int, partition: int) -> Slot:
        """The log of partition ``partition`` of micro-batch ``batch``."""
        return Slot(self, batch, partition)

    def partitions(self, batch: int) -> list[int]:
        """The partitions of ``batch`` that have files in the log."""
        return sorted(int(name) for name in self.files.names(f"{self.root}/{batch}") if name.isdigit())

    def outcomes(self, batch: int) -> dict[int, Entry | None]:
        """For each partition of ``batch`` in the log, the entry chosen for it (None: no choice made yet)."""
        outcomes: dict[int, Entry | None] = {}
        for name in self.files.names(f"{self.root}/{batch}", recursive=True):
            partition, _, file_name = name.partition("/")
            if not partition.isdigit():
                continue
            outcomes.setdefault(int(partition), None)
            found = _entry_of(file_name)
            if found is not None and found[0] == "chosen":
                outcomes[int(partition)] = found[1]
        return outcomes

    def committed(self) -> int:
        """N when every batch below N is committed (0: none known to be)."""
        marks = [name.split(".", 1)[1] for name in self.files.names(self.root) if name.startswith("done.")]
        return max((int(mark) for mark in marks if mark.isdigit()), default=0)

    def commit(self, end: int) -> int:
        """Every batch below ``end`` is committed: say so (``done.END``), then delete their files; return how many
        batches were deleted (one that could not be is deleted by a later commit)."""
        files = self.files
        names = files.names(self.root)
        done = [int(name[5:]) for name in names if name.startswith("done.") and name[5:].isdigit()]
        if not done or max(done) < end:
            files.make_dir(self.root)
            files.publish(self.root, f"done.{end}")
        deleted = 0
        for name in names:
            if name.isdigit() and int(name) < end and files.delete_dir(f"{self.root}/{name}"):
                deleted += 1
        for mark in done:
            if mark < end:
                try:
                    self.filesystem.delete_file(f"{self.root}/done.{mark}")
                except FileNotFoundError:
                    pass
        return deleted
