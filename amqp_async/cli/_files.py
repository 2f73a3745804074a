"""Files as streamed messages: ``send --file PATH`` and ``receive --output-dir DIR``.

Each file is one message whose body is the file's bytes, read and sent as it goes (never held whole: see
:class:`~amqp_async.StreamSender`): a regular file in one data section (its size is known), standard input (``-``)
in a data section per read. The message carries the file's name in the application property ``filename`` (unless
``--property filename=...`` says otherwise) and the other attributes the options give.

Each message received with ``--output-dir`` is written to a file of its own as its frames arrive (never held
whole: see :class:`~amqp_async.StreamReceiver`), first as ``NAME.part``, renamed to ``NAME`` once complete and only
then settled. ``NAME`` is the message's ``filename`` application property when it is a plain file name (no
directory part, no control or format character, no leading ``-``, at most 240 bytes), else its message id
(characters other than letters, digits, ``.``, ``-`` and ``_`` replaced by ``_``; no leading ``.`` or ``-``, no
trailing ``.``), else ``message-N`` (its number in the run): nothing is ever written outside the directory. An
existing file (or symbolic link, even a dangling one) is never overwritten: ``-1``, ``-2``... is added before the
extension. A body that is no stream of bytes (an amqp-value map, amqp-sequence
sections) is written as JSON. A message that fails midway leaves no file: one its sender aborted is skipped (it is
settled, §2.6.14) and the run goes on; on any other failure (its link lost, a full disk) it is released and the run
ends. A directory that cannot be made or written to is refused before any message is taken (exit code 2).
"""

from __future__ import annotations

import json
import os
import re
import stat
import sys
import tempfile
import unicodedata
from pathlib import Path
from typing import IO, Any

import anyio
import click

from ..client import DeliveryMode, StreamDelivery, connect
from ..errors import DeliveryAborted
from ..message import Message, MessageBodyError
from ._bodies import MessageTemplate
from ._browse import check_browsing
from ._exit import CommandFailed, ExitCode, exit_code_for
from ._run import blocking_read
from ._transfer_progress import TransferProgress
from ._values import message_to_json, to_json

__all__ = ["FILENAME_PROPERTY", "output_name", "receive_files", "send_files"]

#: The application property that carries a sent file's name.
FILENAME_PROPERTY = "filename"
#: Bytes read from a file at a time (each a part of the message's one data section).
READ_SIZE = 256 << 10
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def _regular_size(status: os.stat_result) -> int | None:
    """A regular file's size; None for a pipe, a terminal..., and for a size of 0, which the files of /proc and /sys
    report whatever they hold (only reading tells)."""
    if not stat.S_ISREG(status.st_mode) or status.st_size == 0:
        return None
    return status.st_size


def _size_of(file: IO[bytes]) -> int | None:
    """The bytes left to read in a regular file, now (see :func:`_regular_size`)."""
    try:
        size = _regular_size(os.fstat(file.fileno()))
    except (OSError, ValueError):
        return None
    return None if size is None else max(size - file.tell(), 0)


async def send_files(
    url: str | None,
    options: dict[str, Any],
    address: str,
    paths: tuple[str, ...],
    template: MessageTemplate,
    *,
    delivery: str,
    timeout: float | None,
    quiet: bool,
) -> None:
    """Send each of ``paths`` (``-``: standard input) as one streamed message."""
    total: int | None = 0
    for path in paths:
        try:
            size = None if path == "-" else _regular_size(os.stat(path))
        except OSError as exc:
            raise CommandFailed(ExitCode.USAGE, f"--file {path}: {exc.strerror or exc}") from None
        total = None if total is None or size is None else total + size
    with anyio.fail_after(timeout):
        async with connect(url, **options) as connection:
            sender = await connection.open_stream_sender(address, delivery=_mode(delivery))
            with TransferProgress("sent", total, len(paths), quiet=quiet) as progress:
                for path in paths:
                    try:
                        await _send_one(sender, path, template, progress)
                    except CommandFailed:
                        raise
                    except Exception as error:
                        raise _not_sent(error, path, progress.files) from error
            if not quiet:
                click.echo(progress.summary(), err=True)


def _not_sent(error: Exception, path: str, sent: int) -> CommandFailed:
    """``error`` (its exit code, its condition first) naming the file it stopped and the files sent before it: of
    ``--file a --file b``, which one the peer's ``message of N bytes exceeds ...`` was about went unsaid."""
    before = f"; the {sent:,} file{'' if sent == 1 else 's'} before it went" if sent else ""
    return CommandFailed(exit_code_for(error), f"{error or type(error).__name__} (--file {path}{before})")


async def _send_one(sender: Any, path: str, template: MessageTemplate, progress: TransferProgress) -> None:
    name = "stdin" if path == "-" else os.path.basename(path)
    progress.naming(name)
    message = template.apply(Message())
    properties = dict(message.properties or {})
    properties.setdefault(FILENAME_PROPERTY, name)
    message.properties = properties
    file: IO[bytes]
    try:
        # In a worker thread: opening a FIFO waits for its writer, and the connection's heartbeats must go on.
        if path == "-":
            file = sys.stdin.buffer
        else:
            file = await anyio.to_thread.run_sync(blocking_read, _open_binary, path, abandon_on_cancel=True)
    except OSError as exc:
        raise CommandFailed(ExitCode.USAGE, f"--file {path}: {exc.strerror or exc}") from None
    try:
        # A regular file's size now is declared, and no more is read: one that grows meanwhile (a log) goes as it
        # was. Other files are read to their end, in a worker thread (a pipe's read waits on its writer).
        size = _size_of(file)
        left = size
        async with sender.open_stream(message, body_size=size) as stream:
            while left is None or left > 0:
                if left is None:
                    data = await anyio.to_thread.run_sync(blocking_read, file.read, READ_SIZE, abandon_on_cancel=True)
                else:
                    data = file.read(min(READ_SIZE, left))
                    left -= len(data)
                if not data:
                    break
                await stream.write(data)
                progress.advance(len(data))
    finally:
        if path != "-":
            file.close()
    progress.file_done()


def _open_binary(path: str) -> IO[bytes]:
    # Unbuffered: closing a buffered file waits for its lock, held by a read still waiting in its worker thread (a
    # FIFO's, after a Ctrl-C): the close, and the command, hung until the writer wrote again.
    return open(path, "rb", buffering=0)  # (closed by the caller once the file is sent)


def _mode(delivery: str) -> DeliveryMode:
    if delivery not in ("at-least-once", "at-most-once", "exactly-once"):
        raise CommandFailed(ExitCode.USAGE, f"unknown delivery mode {delivery!r}")
    return delivery  # type: ignore[return-value]  # checked above


#: The longest name taken from a message, in bytes: what file systems allow (255) less room for ``-N`` and
#: ``.part``; a longer one falls back to ``message-N``.
_LONGEST_NAME = 240


def _fits(name: str) -> bool:
    try:
        return len(os.fsencode(name)) <= _LONGEST_NAME
    except UnicodeError:  # not representable in the file system's encoding
        return False


#: Unicode categories no name taken from a message may hold: controls (a newline split the listing on stdout, so
#: that a sender could add a line naming any path to what a script then reads), format characters (U+202E, the
#: right-to-left override, showed ``gnp.exe`` as ``exe.png``), surrogates, line and paragraph separators.
_UNPRINTABLE = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


def _plain_name(given: str) -> str | None:
    """``given`` when it is a plain file name to write in the output directory: no directory part (``/``, ``\\``),
    not ``.`` or ``..``, nothing unprintable, no leading ``-`` (read as an option by the tools a script hands the
    listed paths to: ``./-rf``), and short enough; else None."""
    if os.path.basename(given.replace("\\", "/")) != given or given in ("", ".", "..") or given.startswith("-"):
        return None
    if any(unicodedata.category(character) in _UNPRINTABLE for character in given):
        return None  # NUL included (Cc)
    return given if _fits(given) else None


def output_name(message: Message, number: int, directory: Path) -> Path:
    """Where a received message goes in ``directory`` (see the module's description): a name no file has yet."""
    name = None
    properties = message.properties or {}
    given = properties.get(FILENAME_PROPERTY)
    if isinstance(given, str):
        name = _plain_name(given)
    if name is None and message.id is not None:
        name = _UNSAFE.sub("_", str(message.id)).lstrip("-.").rstrip(".") or None
        if name is not None and not _fits(name):
            name = None
    if name is None:
        name = f"message-{number}"
    candidate = directory / name
    stem, dot, extension = name.partition(".") if not name.startswith(".") else (name, "", "")
    counter = 0
    # lexists: a symbolic link there, even one to nothing, is a file not to replace
    while os.path.lexists(candidate) or os.path.lexists(candidate.with_name(candidate.name + ".part")):
        counter += 1
        candidate = directory / f"{stem}-{counter}{dot}{extension}"
    return candidate


async def receive_files(
    url: str | None,
    options: dict[str, Any],
    address: str,
    directory: Path,
    *,
    count: int | None,
    timeout: float | None,
    link_options: dict[str, Any],
    settle: str,
    output: str,
    quiet: bool,
    credit: int = 1,
) -> None:
    """Receive messages from ``address`` into files of ``directory``, each streamed to disk as it arrives.

    Credit is granted by hand, ``credit`` messages at most and never past ``count`` in all (as ``receive`` does):
    the receiver's own top-up let the message after the last one come, given back (or, at-most-once, lost)."""
    _check_writable(directory)
    out = sys.stdout
    async with connect(url, **options) as connection:
        receiver = await connection.open_stream_receiver(address, **link_options, credit=0)
        if link_options.get("distribution_mode") == "copy":
            check_browsing(connection, receiver, address)
        with TransferProgress("received", None, count, quiet=quiet) as progress:
            while count is None or progress.files < count:
                wanted = credit if count is None else min(credit, count - progress.files)
                missing = wanted - (receiver.credit + receiver.queued)
                if missing > 0:
                    receiver.add_credit(missing)
                delivery = None
                with anyio.move_on_after(timeout):
                    delivery = await receiver.receive()
                if delivery is None:
                    if count is not None:
                        raise CommandFailed(
                            ExitCode.TIMEOUT,
                            f"received {progress.files} of {count} messages: none came for {timeout} s",
                        )
                    break
                try:
                    message = await delivery.message()
                    path = output_name(message, progress.files + 1, directory)
                    progress.naming(path.name)
                    await _write(delivery, path, progress)
                except DeliveryAborted:
                    # The sender gave it up (§2.6.14): nothing of it is kept, nothing to settle; the next one may
                    # be whole.
                    click.echo("a message was aborted by its sender before its end: skipped", err=True)
                    continue
                await _settle(delivery, settle)
                progress.file_done()
                if output == "json":
                    out.write(_json_line(message, path) + "\n")
                elif output == "text":
                    out.write(f"{path}\n")
                out.flush()
        if not quiet:
            click.echo(progress.summary(), err=True)


def _check_writable(directory: Path) -> None:
    """Make ``directory`` (with its parents) and check that a file can be created in it, before any message is
    taken: a directory that cannot hold the files is a usage error (exit code 2) naming ``--output-dir``, where
    the OSError of the first message's file ended the run with exit code 1, the option unnamed."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=directory, prefix=".amqp-async-", suffix=".probe"):
            pass
    except OSError as exc:
        raise CommandFailed(ExitCode.USAGE, f"--output-dir {directory}: {exc.strerror or exc}") from None


async def _write(delivery: StreamDelivery, path: Path, progress: TransferProgress) -> None:
    """Write the body to ``path`` as it arrives (via ``path.part``); on failure nothing is left and the message is
    released. A file that cannot be created or written (a full disk) ends the run with exit code 1, the file
    named."""
    partial = path.with_name(path.name + ".part")
    try:
        file = partial.open("xb")
    except OSError as exc:  # nothing of ours to remove: a .part there (made meanwhile) is another's
        await _release(delivery)
        raise _file_failure("cannot create", partial, exc) from None
    try:
        with file:
            try:
                async for chunk in delivery.body_chunks():
                    _write_chunk(file, partial, chunk)
                    progress.advance(len(chunk))
            except MessageBodyError:
                # A body that is no stream of bytes (an amqp-value map, amqp-sequence sections) is read whole and
                # written as JSON, rather than refused again at every run.
                body = json.dumps(to_json((await delivery.read_message()).body), ensure_ascii=False).encode()
                _write_chunk(file, partial, body)
                progress.advance(len(body))
            try:
                file.flush()  # here, not in the close: a full disk's error is named as a write's
            except OSError as exc:
                raise _file_failure("cannot write", partial, exc) from None
        try:
            os.replace(partial, path)
        except OSError as exc:
            raise _file_failure("cannot rename", partial, exc) from None
    except BaseException:
        partial.unlink(missing_ok=True)
        await _release(delivery)
        raise


def _write_chunk(file: IO[bytes], partial: Path, chunk: bytes) -> None:
    try:
        file.write(chunk)
    except OSError as exc:  # a full disk, an I/O error: named, where a bare errno ended the run
        raise _file_failure("cannot write", partial, exc) from None


def _file_failure(what: str, partial: Path, error: OSError) -> CommandFailed:
    return CommandFailed(
        ExitCode.FAILURE, f"--output-dir: {what} {partial}: {error.strerror or error}; the message was released"
    )


async def _release(delivery: StreamDelivery) -> None:
    """Give the message back to the peer (§3.4.4 released: to be delivered again), unless it is settled."""
    if not delivery.settled:
        with anyio.CancelScope(shield=True), anyio.move_on_after(10):
            try:
                await delivery.release()
            except Exception:  # the link is gone: the peer delivers it again anyway
                pass


async def _settle(delivery: StreamDelivery, settle: str) -> None:
    if settle == "accept":
        await delivery.accept()
    elif settle == "release":
        await delivery.release()
    else:
        await delivery.reject("amqp:internal-error", "rejected by amqp-async receive --settle reject")


def _json_line(message: Message, path: Path) -> str:
    fields = message_to_json(message)
    fields.pop("body", None)
    fields["file"] = str(path)
    return json.dumps(fields, ensure_ascii=False)
