"""The embedded broker's durable store: SQLite (standard library) in WAL mode, written by group commit.

What it keeps (``Broker(data_dir=...)``, ``--data-dir DIR``): the queues (not the temporary ones of dynamic
nodes), the durable topic subscriptions, and every durable message (header ``durable`` true) held by one of them,
from its arrival until its settlement. Everything else stays in memory only, as without a data directory.

The broker keeps working in memory: every message it holds is also in its queues' memory, and the store is the
write-ahead copy that a restart (or a ``kill -9``) loads back. The broker's loop never waits on the disk: the
operations of a turn of the loop (inserts, payload updates, deletes, new queues) gather in the current
:class:`_Batch`; one task writes the batch in a worker thread as one SQLite transaction, and only once it is
committed runs the batch's callbacks, which send what had to wait for it (the ``accepted`` of a durable message,
the outcome of a transaction's commit). Operations arriving meanwhile gather in the next batch: under load, one
commit (and one ``fsync``) covers many messages.

Removals are not waited for: a message whose settlement was not committed yet when the broker died is delivered
again after the restart (at-least-once). A message inserted and removed before its batch was written is never
written at all. The exception is a message sent pre-settled (at-most-once: a receiver whose snd-settle-mode is
settled): delivered again it would be delivered twice, so its transfer waits until its removal is committed
(:func:`._consumers.attach_outbound`); the transfers of one commit go out together, as its removals were written
together.

The layout: ``queues(name, topic, subscription)``, ``selectors(queue, selector)`` and ``messages(id, queue, payload,
expires, body, body_at)``; a queue's messages load in ``id`` order, which is their arrival order. A durable
subscription's selector (the JMS selector text of its subscriber, :attr:`~._nodes.Queue.selector`) has its row in
``selectors`` (none: it takes every message), so that after a restart it goes on taking only what it matches; a
table of its own, so that a store written before it is read as it was (the table is made when it is opened: no
selector kept, as then), and a broker of before reads a store written since (it ignores the table). An
unsubscribed durable subscription (:meth:`Store.remove_queue`) loses its rows in the three tables in one commit.

A large message kept on disk (:mod:`._bodies`) has its leading sections as ``payload``, its file's name as ``body``
and where its body starts in the file as ``body_at`` (both NULL for the others): the file is synced before the row
is committed. Several rows may name one file (a topic's durable subscriptions share it; a dead-lettered message's
row in the dead-letter queue replaces its row in the queue), and entries that are not stored may hold it too (a copy
in a subscription that is not kept): the store counts, for each file, the rows that name it and the
:class:`~._bodies.BodyFile` objects alive for it (counts rebuilt from the rows at load), and removes the file only
once the count is zero and the batch that removed the last row is committed. A crash never finds a committed row
naming a removed file; a file left behind (a crash before its removal) is named by no row, and the next start
removes it. ``expires`` is when the message expires (seconds since the epoch; NULL: never), computed once at its
arrival (§3.2.1: a ttl counts from the arrival at the intermediary), so that a restart neither extends nor forgets
it. A store written before ``expires`` existed gets the column when it is opened, each message's expiry computed
from its bytes then.

The store's version is SQLite's ``user_version`` (:data:`SCHEMA_VERSION`): a store an earlier version wrote has its
durable subscriptions' keys upgraded once when it is opened (:meth:`Store.upgrade`).

One broker at a time: the store holds an exclusive lock on ``broker.lock`` in the directory for as long as it is
open (``flock``; the file names the holder's pid). Two brokers on one directory would both number their messages
from the same ``max(id)`` and write over each other's rows, so a second one is refused (:class:`DataDirInUse`).
The operating system releases the lock when its process ends, however it ends: a broker restarted after a
``kill -9`` finds the directory free.
"""

from __future__ import annotations

import errno
import logging
import os
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
import anyio.to_thread

from ._bodies import BODIES, remove_file
from ._sections import expiry

try:
    import fcntl
except ImportError:  # Windows: no flock; the directory is not locked there
    fcntl = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from ._bodies import BodyFile
    from ._nodes import Entry

__all__ = ["LOCK_FILE", "DataDirInUse", "Store", "StoredQueue", "is_durable"]

log = logging.getLogger("amqp_async.broker")

#: The file in the data directory whose lock says which broker uses it (it holds that broker's pid).
LOCK_FILE = "broker.lock"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS queues (name TEXT PRIMARY KEY, topic TEXT, subscription TEXT);
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY, queue TEXT NOT NULL, payload BLOB NOT NULL, expires REAL, body TEXT, body_at INTEGER
);
CREATE TABLE IF NOT EXISTS selectors (queue TEXT PRIMARY KEY, selector TEXT NOT NULL);
"""

#: The store's version (SQLite's ``user_version``): 1 since durable subscriptions shared by several links are kept under
#: the key the AMQP JMS mapping names them by (``CONTAINER/NAME``, ``|global/NAME``: :mod:`._consumers`); 0, a store
#: written before, keeps one subscription per link name (``CONTAINER/NAME|2``, ``CONTAINER/NAME|global``), upgraded
#: once when opened (:meth:`Store.upgrade`).
SCHEMA_VERSION = 1

# §3.2.1: the header section (descriptor 0x70) comes first; its first field is durable (a boolean).
_HEADER = b"\x00\x53\x70"
_TRUE = 0x41
_BOOLEAN = 0x56
_LIST8 = 0xC0
_LIST32 = 0xD0


def is_durable(payload: bytes) -> bool:
    """Whether an encoded message's header says ``durable`` (§3.2.1), read from its first bytes."""
    if payload[:3] != _HEADER or len(payload) < 6:
        return False
    code = payload[3]
    if code == _LIST8:
        # list8: size, count, then the fields; a count of 0 leaves durable at its default (false)
        return payload[5] > 0 and len(payload) > 6 and _boolean(payload, 6)
    if code == _LIST32:
        return len(payload) > 12 and int.from_bytes(payload[8:12], "big") > 0 and _boolean(payload, 12)
    return False  # list0: no fields


def _add_expiry(db: sqlite3.Connection) -> None:
    """Give a store written before expiry was kept its ``expires`` column, each message's computed now."""
    columns = {row[1] for row in db.execute("PRAGMA table_info(messages)")}
    if "expires" in columns:
        return
    now = time.time()
    db.execute("BEGIN")
    db.execute("ALTER TABLE messages ADD COLUMN expires REAL")
    rows = db.execute("SELECT id, payload FROM messages").fetchall()
    updates = [(expires, identifier) for identifier, payload in rows if (expires := expiry(bytes(payload), now)[0])]
    db.executemany("UPDATE messages SET expires = ? WHERE id = ?", updates)
    db.execute("COMMIT")
    log.info("store: expiry column added (%d of %d messages expire)", len(updates), len(rows))


def _add_body(db: sqlite3.Connection) -> None:
    """Give a store written before large messages were kept on disk its ``body`` and ``body_at`` columns (NULL:
    the message is in the row)."""
    columns = {row[1] for row in db.execute("PRAGMA table_info(messages)")}
    if "body" not in columns:
        db.execute("ALTER TABLE messages ADD COLUMN body TEXT")
        db.execute("ALTER TABLE messages ADD COLUMN body_at INTEGER")


def _row(queue: str, entry: Entry) -> tuple[str, bytes, float | None, str | None, int | None]:
    """A message's row (without its id)."""
    body = entry.body
    if body is None:
        return queue, entry.payload, entry.expires, None, None
    return queue, entry.payload, entry.expires, body.name, body.body_offset


def _sync(path: Path) -> None:
    """Make a body file's bytes durable before the row that names it is committed."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _refuse_truncated(path: Path) -> None:
    """Refuse a store file cut to nothing. SQLite takes an empty file for a new database, so the broker started
    with no messages at all, and wrote over the file. A store this broker made is never empty (setting its WAL mode
    writes the database header), so an empty one lost what it held: an operator must decide, not the broker.

    Raises:
        sqlite3.DatabaseError: naming the file.
    """
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return  # a new data directory
    if size == 0:
        raise sqlite3.DatabaseError(
            f"{path} is empty (0 bytes): it was truncated, and its messages are gone; move it aside to start with "
            "an empty store"
        )


class DataDirInUse(OSError):
    """The data directory is in use by another broker (its store holds the directory's lock): two brokers on one
    store write over each other's messages. ``pid`` is the other broker's process id (None if unknown)."""

    def __init__(self, directory: Path, pid: int | None, code: int = errno.EWOULDBLOCK) -> None:
        holder = f"pid {pid}" if pid is not None else "its pid unknown"
        super().__init__(code, f"{directory} is in use by another broker ({holder})")
        self.directory = directory
        self.pid = pid

    def __str__(self) -> str:
        return str(self.strerror)


def _lock(directory: Path) -> int | None:
    """Take the data directory's lock for this process (:data:`LOCK_FILE`, its pid written in it); return the
    descriptor that holds it (closing it releases the lock), None where there is no ``flock``.

    Raises:
        DataDirInUse: another process holds the lock.
        OSError: the lock file cannot be made or opened.
    """
    if fcntl is None:
        return None
    descriptor = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        # flock(2): the lock belongs to this open file, and goes when it is closed, by close() or by the end of
        # the process (a kill -9 included): nothing stale to clean up after a crash, unlike a pid file alone.
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError as exc:
        holder = os.pread(descriptor, 32, 0).strip()
        os.close(descriptor)
        # (empty when the holder took the lock and has not written its pid yet)
        error = DataDirInUse(directory, int(holder) if holder.isdigit() else None, exc.errno or errno.EWOULDBLOCK)
        raise error from None
    except BaseException:
        os.close(descriptor)
        raise
    try:
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, f"{os.getpid()}\n".encode(), 0)
    except OSError as exc:  # the lock is what counts; the pid only helps the operator
        log.warning("store %s: cannot write the pid in %s: %s", directory, LOCK_FILE, exc)
    return descriptor


def _boolean(payload: bytes, offset: int) -> bool:
    code = payload[offset]
    return code == _TRUE or (code == _BOOLEAN and len(payload) > offset + 1 and payload[offset + 1] == 1)


class StoredQueue:
    """A queue as the store has it: its name, and for a durable subscription its topic and subscription key."""

    __slots__ = ("messages", "name", "selector", "subscription", "topic")

    def __init__(self, name: str, topic: str | None, subscription: str | None) -> None:
        self.name = name
        self.topic = topic
        self.subscription = subscription
        #: a durable subscription's selector (its text), or None.
        self.selector: str | None = None
        #: (id, payload, expires, body file name or None, where the body starts in it) in arrival order.
        self.messages: list[tuple[int, bytes, float | None, str | None, int | None]] = []


class _Batch:
    """The operations of one SQLite transaction, and what waits for its commit."""

    __slots__ = (
        "callbacks",
        "committed",
        "deletes",
        "dropped",
        "dropped_queues",
        "fresh",
        "queues",
        "removals",
        "selectors",
        "writes",
    )

    def __init__(self) -> None:
        #: queues deleted (an unsubscribed durable subscription): their rows go first, before the queues added.
        self.dropped_queues: list[str] = []
        self.queues: list[tuple[str, str | None, str | None]] = []
        #: queue name -> its subscription's selector text now (None: none), written after the queues.
        self.selectors: dict[str, str | None] = {}
        #: id -> (queue, payload, expires, body file name, where its body starts): rows to insert or replace.
        self.writes: dict[int, tuple[str, bytes, float | None, str | None, int | None]] = {}
        #: body files (names) whose count fell to zero: removed once this batch is committed, unless counted again
        #: meanwhile (a row naming one inserted since).
        self.removals: list[str] = []
        #: ids first inserted by this batch (a removal then cancels the insert: nothing to write).
        self.fresh: set[int] = set()
        self.deletes: list[int] = []
        self.callbacks: list[Callable[[], None]] = []
        #: what runs instead of callbacks that never will (the broker stopped first: :meth:`Store.flush`).
        self.dropped: list[Callable[[], None]] = []
        self.committed = False

    def __bool__(self) -> bool:
        return bool(self.rows or self.callbacks or self.removals)

    @property
    def rows(self) -> bool:
        """Whether it has rows to write (a SQLite transaction to run)."""
        return bool(self.dropped_queues or self.queues or self.selectors or self.writes or self.deletes)


class Store:
    """The durable copy of the broker's queues and durable messages, in ``directory/broker.sqlite3``; the
    directory is locked for it until :meth:`close`.

    Args:
        directory: the data directory (made if missing).
        synchronous: SQLite's ``synchronous`` setting: ``"FULL"`` (the default) makes each commit survive a
            power loss as well as a crash; ``"NORMAL"`` survives a crash of the broker process (``kill -9``) and
            may lose the last commits on a power loss.

    Raises:
        DataDirInUse: another broker's store has the directory.
        OSError: the directory or its lock file cannot be made.
        sqlite3.Error: the database cannot be opened (or is a truncated one, see :func:`_refuse_truncated`).
    """

    def __init__(self, directory: str | Path, *, synchronous: str = "FULL") -> None:
        self.directory = Path(directory)
        if self.directory.exists() and not self.directory.is_dir():
            # mkdir's FileExistsError read "file exists": true, and no help to an operator who named a file
            raise NotADirectoryError(errno.ENOTDIR, f"{self.directory} is not a directory")
        self.directory.mkdir(parents=True, exist_ok=True)
        self.path = self.directory / "broker.sqlite3"
        # before anything is read: another broker's writes would be under way
        self._lock: int | None = _lock(self.directory)
        try:
            _refuse_truncated(self.path)
            # One thread at a time uses the connection (the writer task's worker thread, or the loop at start and
            # stop): never concurrently, so sharing it between threads is safe.
            db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            try:
                db.execute("PRAGMA journal_mode=WAL")
                db.execute(f"PRAGMA synchronous={synchronous}")
                #: the version the store was written by (SCHEMA_VERSION; 0: an earlier one's, see upgrade()).
                self.version: int = db.execute("PRAGMA user_version").fetchone()[0]
                if db.execute("SELECT name FROM sqlite_master WHERE name = 'queues'").fetchone() is None:
                    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")  # a store just made: current
                    self.version = SCHEMA_VERSION
                db.executescript(_SCHEMA)
                _add_expiry(db)
                _add_body(db)
            except BaseException:
                db.close()
                raise
        except BaseException:
            self._unlock()
            raise
        #: where large messages are kept (:mod:`._bodies`).
        self.bodies = self.directory / BODIES
        self._next_id: int = 1 + db.execute("SELECT coalesce(max(id), 0) FROM messages").fetchone()[0]
        self._db: sqlite3.Connection | None = db
        self._batch = _Batch()
        self._in_flight: _Batch | None = None  # taken by the writer task, maybe not written (cancelled first)
        self._wake: anyio.Event | None = None
        self._known_queues: set[str] = set()
        #: body file name -> the rows that name it (inserted, not deleted) and the BodyFile objects alive for it
        #: (:meth:`._bodies.BodyFile.own`): the file goes when this reaches zero (and the batch is committed).
        self._references: dict[str, int] = {}
        #: body file name -> the batch whose commit lets it go (the one open when its count last reached zero).
        self._zeroed: dict[str, _Batch] = {}
        # The thread of the broker's loop, where the counts change; a finalizer that runs on another thread (the
        # cyclic garbage collector may run anywhere) leaves its name here for the loop.
        self._thread = threading.get_ident()
        self._released_elsewhere: deque[str] = deque()
        self.commits = 0  # batches written (the number of SQLite transactions)
        #: the broker is stopping (:meth:`flush`): no :meth:`after_commit` callback will run any more.
        self.closing = False

    # --- loading -----------------------------------------------------------------------------------------

    def upgrade(self, rekey: Callable[[str], str | None]) -> None:
        """Bring a store an earlier version wrote (:attr:`version` below :data:`SCHEMA_VERSION`) up to date, once,
        before :meth:`load`: each durable subscription whose key ``rekey`` maps to another (the key the broker now
        gives the links that named it) moves to that key, with its messages and selector; when a subscription
        already has that key on its topic (one kept before, or moved there first), it is a copy the earlier version
        kept apart for one more link of the same shared subscription, and it is removed with its messages (their
        files go as no row names them: :meth:`._bodies.BodySpool.remove_unknown`). Each is logged.

        Before, such a subscription was loaded under its old key, which no link names any more: it took a copy of
        every message published to its topic, for ever, and a shared subscription found none of its messages.
        """
        db = self._db
        assert db is not None, "the store is closed"
        if self.version >= SCHEMA_VERSION:
            return
        rows = db.execute("SELECT name, topic, subscription FROM queues WHERE subscription IS NOT NULL ORDER BY rowid")
        subscriptions = [(name, topic, key) for name, topic, key in rows]
        taken = {(topic, key) for _, topic, key in subscriptions}
        db.execute("BEGIN")
        try:
            for name, topic, key in subscriptions:
                new_key = rekey(key)
                if new_key is None or new_key == key:
                    continue
                taken.discard((topic, key))
                if (topic, new_key) in taken:
                    count = self._drop_queue_rows(db, name)
                    log.warning(
                        "store %s: subscription %r of %s, kept apart by an earlier version for one link of the shared "
                        "subscription %r, removed with its %d messages (copies of that subscription's)",
                        self.path,
                        key,
                        topic,
                        new_key,
                        count,
                    )
                    continue
                new_name = f"{topic}#{new_key}"  # as Topic.subscription names its queue
                db.execute("UPDATE queues SET name = ?, subscription = ? WHERE name = ?", (new_name, new_key, name))
                db.execute("UPDATE messages SET queue = ? WHERE queue = ?", (new_name, name))
                db.execute("UPDATE selectors SET queue = ? WHERE queue = ?", (new_name, name))
                taken.add((topic, new_key))
                log.warning(
                    "store %s: subscription %r of %s, kept by an earlier version under its link's name, is now %r "
                    "(the key its shared links name)",
                    self.path,
                    key,
                    topic,
                    new_key,
                )
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        self.version = SCHEMA_VERSION

    @staticmethod
    def _drop_queue_rows(db: sqlite3.Connection, name: str) -> int:
        """Remove the rows of the queue ``name`` (its messages, selector and itself); return how many messages."""
        count: int = db.execute("DELETE FROM messages WHERE queue = ?", (name,)).rowcount
        db.execute("DELETE FROM selectors WHERE queue = ?", (name,))
        db.execute("DELETE FROM queues WHERE name = ?", (name,))
        return count

    def load(self) -> list[StoredQueue]:
        """The queues stored, each with its messages in arrival order."""
        db = self._db
        assert db is not None, "the store is closed"
        queues: dict[str, StoredQueue] = {}
        for name, topic, subscription in db.execute("SELECT name, topic, subscription FROM queues"):
            queues[name] = StoredQueue(name, topic, subscription)
            self._known_queues.add(name)
        for name, selector in db.execute("SELECT queue, selector FROM selectors"):
            if name in queues:
                queues[name].selector = selector
        orphans = 0
        for identifier, queue, payload, expires, body, body_at in db.execute(
            "SELECT id, queue, payload, expires, body, body_at FROM messages ORDER BY id"
        ):
            stored = queues.get(queue)
            if stored is None:
                orphans += 1  # cannot happen through the broker (queues are written before their messages)
                continue
            stored.messages.append((identifier, bytes(payload), expires, body, body_at))
            if body is not None:
                self._references[body] = self._references.get(body, 0) + 1
        if orphans:
            log.warning("store %s: %d messages of unknown queues ignored", self.path, orphans)
        return list(queues.values())

    # --- operations (on the event loop; written by the next commit) --------------------------------------

    def add_queue(self, name: str, topic: str | None = None, subscription: str | None = None) -> None:
        """Keep a queue (or a durable subscription's queue) across restarts."""
        if name in self._known_queues:
            return
        self._known_queues.add(name)
        self._batch.queues.append((name, topic, subscription))
        self._wake_writer()

    def remove_queue(self, name: str) -> None:
        """Forget a kept queue (an unsubscribed durable subscription): its row and its selector's. Its messages are
        removed one by one before (:meth:`delete`, which counts their files down); the rows of any left are removed
        with it. A queue of the same name kept again later (the same subscriber subscribing anew) is a new one."""
        self._known_queues.discard(name)
        batch = self._batch
        # added and removed within one batch: nothing of it to write (and the removal goes before the additions)
        batch.queues = [row for row in batch.queues if row[0] != name]
        batch.selectors.pop(name, None)
        batch.dropped_queues.append(name)
        self._wake_writer()

    def set_selector(self, queue: str, selector: str | None) -> None:
        """Keep a durable subscription's selector (its text; None: it has none, and takes every message)."""
        self._batch.selectors[queue] = selector
        self._wake_writer()

    def insert(self, entry: Entry, queue: str) -> None:
        """Keep a message held by ``queue`` (its ``stored`` id is set now)."""
        identifier = self._next_id
        self._next_id = identifier + 1
        entry.stored = identifier
        body = entry.body
        if body is not None:
            # one more row names the file (and, the first time, the store owns it: see hold)
            references = self._references
            references[body.name] = references.get(body.name, 0) + 1
            self.hold(body)
        batch = self._batch
        batch.writes[identifier] = _row(queue, entry)
        batch.fresh.add(identifier)
        self._wake_writer()

    def update(self, entry: Entry, queue: str) -> None:
        """A kept message changed (annotations, delivery-count): write its new bytes."""
        self._batch.writes[entry.stored] = _row(queue, entry)
        self._wake_writer()

    def hold(self, body: BodyFile) -> None:
        """The store owns a large message's file (one of its messages is stored, or loaded): counted while this
        :class:`BodyFile` is alive (an entry holds it: a copy that is not stored, a message on its way to the
        dead-letter queue), and while a row names it."""
        if body.own(self._released):
            references = self._references
            references[body.name] = references.get(body.name, 0) + 1

    def delete(self, entry: Entry) -> None:
        """A kept message was settled: remove it (its file too, when nothing else counts it any more)."""
        identifier = entry.stored
        entry.stored = 0
        batch = self._batch
        body = entry.body
        if identifier in batch.fresh:
            batch.fresh.discard(identifier)  # never written: nothing to remove
            del batch.writes[identifier]
        else:
            batch.writes.pop(identifier, None)
            batch.deletes.append(identifier)
        if body is not None:
            self._uncount(body.name)
        self._wake_writer()

    def _uncount(self, name: str) -> None:
        """One row or BodyFile no longer counts for a file; at zero, the file goes once this batch is committed
        (its rows' removals are in this batch or an earlier one, committed first)."""
        references = self._references
        count = references.get(name, 0) - 1
        if count > 0:
            references[name] = count
        else:
            references.pop(name, None)
            self._zeroed[name] = self._batch  # a later zero (counted again meanwhile) moves it to a later batch
            self._batch.removals.append(name)

    def _released(self, name: str) -> None:
        """The finalizer of a BodyFile the store owns: the last entry holding that object went."""
        if self._db is None:
            return  # closed: the rows may still name it (the next start removes it if none does)
        if threading.get_ident() != self._thread:
            self._released_elsewhere.append(name)  # counted on the loop, at the writer's next batch
            return
        self._uncount(name)
        self._wake_writer()

    def _take_released_elsewhere(self) -> None:
        released = self._released_elsewhere
        while released:
            self._uncount(released.popleft())

    def _remove_files(self, batch: _Batch) -> None:
        """Remove the files of a committed batch that nothing counts any more (on the loop's thread: the counts
        change there; a row naming one again since keeps it)."""
        references, zeroed = self._references, self._zeroed
        for name in batch.removals:
            if zeroed.get(name) is not batch:
                # counted again, and back to zero in a later batch, which may remove a row naming it: not
                # before that one is committed
                continue
            del zeroed[name]
            if name not in references:
                remove_file(str(self.bodies / name))  # a reader that opened it keeps it until it closes it
        batch.removals = []

    @property
    def batch(self) -> object:
        """The commit that what is asked of the store now will be part of (an opaque token: the same object until
        that batch goes to be written). An :meth:`after_commit` callback asked for under one token runs once
        everything asked under it is committed."""
        return self._batch

    def after_commit(self, callback: Callable[[], None], *, dropped: Callable[[], None] | None = None) -> None:
        """Call ``callback`` once everything asked of the store so far is committed; or, when the broker stops
        first (its callbacks dropped), ``dropped`` instead, before the store's last commit (what it asks of the
        store is written by that commit)."""
        batch = self._batch
        batch.callbacks.append(callback)
        if dropped is not None:
            batch.dropped.append(dropped)
        self._wake_writer()

    # --- writing -----------------------------------------------------------------------------------------

    def _wake_writer(self) -> None:
        wake = self._wake
        if wake is not None:
            self._wake = None
            wake.set()

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Write batches until cancelled; then write what is left (on a clean stop) and close the database."""
        self._thread = threading.get_ident()
        task_status.started()
        try:
            while True:
                self._take_released_elsewhere()
                if not self._batch:
                    wake = self._wake = anyio.Event()
                    await wake.wait()
                batch = self._in_flight = self._batch
                self._batch = _Batch()
                if batch.rows:
                    # The thread is not abandoned on cancellation: a commit under way completes. Cancelled
                    # before it started, the batch is written by close().
                    await anyio.to_thread.run_sync(self._write, batch)
                self._in_flight = None
                self._remove_files(batch)
                for callback in batch.callbacks:
                    try:
                        callback()
                    except Exception:  # one connection's trouble must not stop the store for everyone
                        log.exception("after a commit")
        finally:
            self.close()

    def _write(self, batch: _Batch) -> None:
        db = self._db
        if db is None:
            return  # closed (the broker stopped): what came after is not kept
        for row in batch.writes.values():
            if row[3] is not None:
                _sync(self.bodies / row[3])  # the file a row names is on disk before the row is
        db.execute("BEGIN")
        try:
            if batch.dropped_queues:
                # before the additions of this batch: a subscription unsubscribed, then made again, is kept anew
                dropped = [(name,) for name in batch.dropped_queues]
                db.executemany("DELETE FROM messages WHERE queue = ?", dropped)
                db.executemany("DELETE FROM selectors WHERE queue = ?", dropped)
                db.executemany("DELETE FROM queues WHERE name = ?", dropped)
            if batch.queues:
                db.executemany("INSERT OR IGNORE INTO queues VALUES (?, ?, ?)", batch.queues)
            if batch.selectors:
                kept = [(name, text) for name, text in batch.selectors.items() if text is not None]
                dropped = [(name,) for name, text in batch.selectors.items() if text is None]
                db.executemany("INSERT OR REPLACE INTO selectors VALUES (?, ?)", kept)
                db.executemany("DELETE FROM selectors WHERE queue = ?", dropped)
            if batch.writes:
                db.executemany(
                    "INSERT OR REPLACE INTO messages (id, queue, payload, expires, body, body_at) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    [(identifier, *row) for identifier, row in batch.writes.items()],
                )
            if batch.deletes:
                db.executemany("DELETE FROM messages WHERE id = ?", [(identifier,) for identifier in batch.deletes])
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
        batch.committed = True
        self.commits += 1

    def flush(self) -> None:
        """Write the pending operations now, on this thread (at a clean stop; their callbacks are dropped, what
        :meth:`after_commit` named to run instead runs first, and its operations are written too)."""
        self.closing = True
        in_flight = self._in_flight
        self._in_flight = None
        if in_flight is not None:
            if not in_flight.committed and in_flight.rows:
                self._write(in_flight)  # before what came after it, which may remove what it inserts
            self._remove_files(in_flight)
        self._take_released_elsewhere()
        for dropped in [*(in_flight.dropped if in_flight is not None else ()), *self._batch.dropped]:
            try:
                dropped()  # a pre-settled transfer never written: its message stored again (this batch)
            except Exception:  # as for a callback: the rest of the store's last commit still goes
                log.exception("at a clean stop")
        batch = self._batch
        self._batch = _Batch()
        if batch.rows:
            self._write(batch)
        self._remove_files(batch)

    def close(self) -> None:
        """Write what is pending, close the database and release the directory's lock (idempotent)."""
        db = self._db
        if db is None:
            return
        try:
            self.flush()
        finally:
            db.close()
            self._db = None
            self._unlock()

    def _unlock(self) -> None:
        """Release the data directory's lock: another broker may use the directory now."""
        descriptor = self._lock
        if descriptor is not None:
            self._lock = None
            os.close(descriptor)

    def stats(self) -> dict[str, Any]:
        """Figures for tests and benchmarks: commits written so far."""
        return {"commits": self.commits}
