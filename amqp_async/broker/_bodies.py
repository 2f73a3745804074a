"""Large messages kept on disk (``--data-dir``): the file that holds one, and the directory they are written to.

A message larger than the broker's ``large_message_size`` that arrives on a broker with a data directory is
written to a file of its own in ``DATA_DIR/bodies`` as its frames come (never held whole in memory). The broker
keeps in memory only the message's leading sections (header, annotations, properties, application properties:
what selectors, expiry, dead-lettering and redelivery read and rewrite) and the :class:`BodyFile`; a consumer gets
the leading sections as they are now, then the file's bytes from the body on, streamed (see
:mod:`._outbound`).

Lifetime: one file may be named by several of the broker's entries (a topic's copies share one; a message
dead-lettered keeps its file) and by several stored rows (a topic's durable subscriptions; the dead-letter queue's
row replacing the queue's). It goes with the last of them, never before:

- the file of a message that was never stored goes when the last entry that holds its :class:`BodyFile` goes (a
  weak finalizer);
- once one of its entries is stored, the :class:`~._store.Store` owns the file (:meth:`BodyFile.own`): it counts
  the rows that name it and the :class:`BodyFile` objects alive for it, and removes the file only when both are
  gone and the removal of the last row is committed (a crash before that commit finds the file the row names).

A restart removes the files no stored row names (an orphan left by a crash between a file's write and its row's
commit, or between a row's removal and its file's).
"""

from __future__ import annotations

import logging
import os
import uuid
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

__all__ = ["BODIES", "BodyFile", "BodySpool", "remove_file"]

log = logging.getLogger("amqp_async.broker")

#: The subdirectory of the data directory that holds large messages.
BODIES = "bodies"


def remove_file(path: str) -> None:
    """Remove a body file (one already gone is no error; another failure is logged: the next start removes it)."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as exc:  # the broker goes on: a file left behind is removed at the next start
        log.warning("cannot remove %s: %s", path, exc)


class BodyFile:
    """One large message on disk: the whole encoded message, whose body starts at ``body_offset``.

    Attributes:
        path: the file.
        size: the message's encoded size (the file's).
        body_offset: where its body starts (the leading sections before it are also in memory, and may have been
            rewritten there since: a delivery sends those, then the file from here).
    """

    __slots__ = ("__weakref__", "_finalizer", "_owned", "body_offset", "path", "size")

    def __init__(self, path: str | Path, size: int, body_offset: int, *, kept: bool = False) -> None:
        self.path = str(path)
        self.size = size
        self.body_offset = body_offset
        self._finalizer: weakref.finalize[[str], Any] | None = None
        #: a store decides when the file goes (:meth:`own`).
        self._owned = False
        if not kept:
            self._when_gone(remove_file, self.path)

    @property
    def name(self) -> str:
        """The file's name in the bodies directory (what the store records)."""
        return os.path.basename(self.path)

    @property
    def body_size(self) -> int:
        """The bytes from the body on (the body sections and the footer)."""
        return self.size - self.body_offset

    def own(self, release: Callable[[str], None]) -> bool:
        """A store owns the file from now on: when this object goes (the last entry holding it went),
        ``release(name)`` tells the store, which removes the file once no stored row names it either, instead of
        removing it at once. Return whether this object was not owned before (the store counts it once).

        A file loaded from the store (``kept``) had no finalizer: it gets one now, so that the store also knows
        when the entries holding this object are gone.
        """
        if self._owned:
            return False
        self._owned = True
        if self._finalizer is not None:
            self._finalizer.detach()
        self._when_gone(release, self.name)
        return True

    def _when_gone(self, callback: Callable[[str], None], argument: str) -> None:
        finalizer = weakref.finalize(self, callback, argument)
        finalizer.atexit = False  # a broker that stops leaves them: the next start removes those no row names
        self._finalizer = finalizer

    def open_body(self) -> BinaryIO:
        """The file, open for reading at the start of the body."""
        file = open(self.path, "rb")  # noqa: SIM115 - the caller closes it (it outlives this call)
        file.seek(self.body_offset)
        return file

    def __repr__(self) -> str:
        return f"BodyFile({self.name}, {self.size} bytes, body at {self.body_offset})"


class BodySpool:
    """Where large incoming messages are written: ``directory`` (made on first use)."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self._made = False

    def create(self) -> tuple[str, BinaryIO]:
        """A new file for one message: its path and the file, open for writing."""
        if not self._made:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._made = True
        path = str(self.directory / f"{uuid.uuid4().hex}.amqp")
        return path, open(path, "xb")

    def remove_unknown(self, known: set[str]) -> int:
        """Remove the files no stored message names (left by messages that were not stored, or by a crash between
        a file's write and its row's commit); return how many."""
        if not self.directory.is_dir():
            return 0
        removed = 0
        for path in self.directory.iterdir():
            if path.is_file() and path.name not in known:
                remove_file(str(path))
                removed += 1
        return removed
