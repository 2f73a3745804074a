"""Where a streamed message's body comes from: an async iterable, an iterable, a file object (binary, sync or async)
or bytes, read as chunks (:func:`body_chunks`)."""

from __future__ import annotations

import inspect
import os
import stat
import threading
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable, Iterator
from typing import IO, Any, Protocol, TypeAlias, runtime_checkable

import anyio

from ._threadsafe import LoopHandle

__all__ = ["DEFAULT_CHUNK_SIZE", "BodySource", "body_chunks", "known_size"]

#: How much a file object is asked for at a time (each read becomes one data section).
DEFAULT_CHUNK_SIZE = 256 << 10
#: Seconds between two reads of a file in non-blocking mode that had nothing, where its descriptor cannot be waited on.
_NOTHING_YET_PAUSE = 0.01

Chunk: TypeAlias = bytes | bytearray | memoryview


@runtime_checkable
class AsyncReadable(Protocol):
    """A binary file object whose ``read`` is a coroutine (``anyio.open_file``, aiofiles...)."""

    def read(self, size: int = -1, /) -> Awaitable[bytes]: ...


#: What ``send_stream`` takes as a body: chunks from an async iterable or an iterable, a binary file object (its
#: ``read`` a function or a coroutine function), or bytes.
BodySource: TypeAlias = AsyncIterable[Chunk] | Iterable[Chunk] | IO[bytes] | AsyncReadable | Chunk


class _Reader:
    """Chunks from a file object's ``read``: in a worker thread, except from a regular file (a read from disk never
    waits on anyone: it is done on the loop, without the thread's cost). A read in a thread is abandoned to it when
    the caller is cancelled (:func:`_read_in_thread`)."""

    def __init__(
        self,
        read: Callable[[int], Any],
        chunk_size: int,
        *,
        asynchronous: bool,
        regular: bool,
        limit: int | None = None,
        fileno: Callable[[], int] | None = None,
    ) -> None:
        self._read = read
        self._fileno = fileno  # the file's, to wait on when it is in non-blocking mode
        self._size = chunk_size
        self._asynchronous = asynchronous
        self._regular = regular
        self._left = limit  # at most this much is read (a file's size when the message declared it), or None

    def __aiter__(self) -> _Reader:
        return self

    async def __anext__(self) -> Chunk:
        size = self._size
        left = self._left
        if left is not None:
            if left <= 0:
                raise StopAsyncIteration
            size = min(size, left)
        if self._asynchronous:
            data = await self._read(size)
        elif self._regular:
            data = self._read(size)
        else:
            data = await _read_in_thread(self._read, size)
            while data is None:
                # A file in non-blocking mode with nothing to read yet (its read gives None, not b"": io's
                # RawIOBase.read): not the end of the body. Taken for it, the message went complete with what had
                # come so far, and was accepted (1,000 bytes of a pipe's 5,000).
                await self._wait_readable()
                data = await _read_in_thread(self._read, size)
        if not data:
            raise StopAsyncIteration
        if left is not None:
            self._left = left - len(data)
        if isinstance(data, str):
            raise TypeError("the body's file object gave str: open it in binary mode ('rb')")
        return data  # type: ignore[no-any-return]

    async def _wait_readable(self) -> None:
        """Wait until the file has something to read (or a moment, where its descriptor cannot be waited on)."""
        try:
            fileno = self._fileno() if self._fileno is not None else None
        except (OSError, ValueError):
            fileno = None
        if fileno is not None:
            try:
                await anyio.wait_readable(fileno)
                return
            except (NotImplementedError, OSError, ValueError):  # e.g. a pipe on Windows' proactor loop
                pass
        await anyio.sleep(_NOTHING_YET_PAUSE)


async def _read_in_thread(read: Callable[[int], Any], size: int) -> Any:
    """``read(size)`` in a daemon thread of its own, its result (or what it raised) returned; abandoned to that
    thread when the caller is cancelled (what it reads later is lost, as the delivery is aborted anyway).

    A pipe or a socket may have nothing to read for ever, and a read cannot be interrupted: a cancellation (the
    caller's ``fail_after`` around ``send_stream``) must not wait for it. ``anyio.to_thread.run_sync`` waited (and
    with ``abandon_on_cancel``, its worker thread, not a daemon, kept the process from exiting while the pipe
    stayed silent); a daemon thread neither holds the cancellation nor the process's exit.
    """
    loop = LoopHandle.current()
    assert loop is not None  # called from a task
    done = anyio.Event()
    outcome: list[tuple[bool, Any]] = []

    def work() -> None:
        try:
            outcome.append((True, read(size)))
        except BaseException as exc:  # raised on the loop, by the task that waits
            outcome.append((False, exc))
        loop.call_soon(done.set)  # False: the loop has ended, nobody waits any more

    threading.Thread(target=work, name="amqp-async body read", daemon=True).start()
    await done.wait()
    [(ok, value)] = outcome
    if not ok:
        raise value
    return value


class _Sliced:
    """Chunks of one bytes-like body."""

    def __init__(self, data: Chunk, chunk_size: int) -> None:
        self._view = memoryview(data).cast("B")
        self._size = chunk_size
        self._offset = 0

    def __aiter__(self) -> _Sliced:
        return self

    async def __anext__(self) -> Chunk:
        offset = self._offset
        if offset >= len(self._view):
            raise StopAsyncIteration
        self._offset = offset + self._size
        return self._view[offset : offset + self._size]


class _FromIterable:
    """Chunks of a (synchronous) iterable."""

    def __init__(self, iterator: Iterator[Chunk]) -> None:
        self._iterator = iterator

    def __aiter__(self) -> _FromIterable:
        return self

    async def __anext__(self) -> Chunk:
        try:
            return next(self._iterator)
        except StopIteration:
            raise StopAsyncIteration from None


def _is_regular(file: Any) -> bool:
    try:
        return stat.S_ISREG(os.fstat(file.fileno()).st_mode)
    except (AttributeError, OSError, ValueError):
        return False


def known_size(source: BodySource) -> int | None:
    """The bytes a body source holds, when that is known before reading it: bytes, or a regular file read with a
    plain ``read`` (its size now, from where it is read on); None for anything else.

    A file's size is a snapshot: :func:`body_chunks` given it as ``limit`` reads no further, so a file that grows
    while it is sent (a log being written) goes as it was. A regular file of size 0 counts as unknown: the files of
    /proc and /sys say 0 and hold more, which only reading tells.
    """
    if isinstance(source, (bytes, bytearray, memoryview)):
        return memoryview(source).nbytes
    read = getattr(source, "read", None)
    if callable(read) and not inspect.iscoroutinefunction(read) and _is_regular(source):
        try:
            file: Any = source
            size = os.fstat(file.fileno()).st_size
            return None if size == 0 else max(size - int(file.tell()), 0)
        except (OSError, ValueError, AttributeError):
            return None
    return None


def body_chunks(
    source: BodySource, chunk_size: int = DEFAULT_CHUNK_SIZE, *, limit: int | None = None
) -> AsyncIterator[Chunk]:
    """The chunks of a body source, as an async iterator (each chunk becomes one data section).

    ``limit``: a file object is read no further than this many bytes (the size :func:`known_size` gave).

    Raises:
        TypeError: ``source`` is none of the kinds a body comes from (a str is refused: encode it first).
        ValueError: ``chunk_size`` below 1.
    """
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be at least 1, got {chunk_size!r}")
    if isinstance(source, (bytes, bytearray, memoryview)):
        return _Sliced(source, chunk_size)
    if isinstance(source, str):
        raise TypeError("a streamed body is bytes, not str: encode it (e.g. text.encode()), or send it whole")
    read = getattr(source, "read", None)
    if callable(read):
        asynchronous = inspect.iscoroutinefunction(read)
        regular = not asynchronous and _is_regular(source)
        fileno = getattr(source, "fileno", None)
        return _Reader(
            read,
            chunk_size,
            asynchronous=asynchronous,
            regular=regular,
            limit=limit,
            fileno=fileno if callable(fileno) else None,
        )
    if isinstance(source, AsyncIterable):
        return aiter(source)
    if isinstance(source, Iterable):
        return _FromIterable(iter(source))
    raise TypeError(
        "a streamed body comes from an async iterable or an iterable of bytes, a binary file object, or bytes; got "
        f"{type(source).__name__}"
    )
