"""What ``send`` sends: bodies from arguments, from a file or stdin (one per line), or generated; as text, JSON
values or whole messages (JSON objects as ``receive --output json`` prints them)."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any

import attrs

from ..message import Message
from ._values import from_json, message_from_json

__all__ = ["BATCH", "FORMATS", "InputError", "MessageTemplate", "message_batches", "parse_property"]

#: ``text``: each body is a string; ``json``: each body is a JSON value; ``message``: each item is a JSON object
#: holding a message's body and attributes (see :func:`amqp_async.cli._values.message_from_json`).
FORMATS = ("text", "json", "message")


class InputError(ValueError):
    """An input item that cannot be made into a message (bad JSON, a bad message object); names the item."""


def parse_property(text: str) -> tuple[str, Any]:
    """``NAME=VALUE`` as (name, value): VALUE is taken as JSON when it parses (``3``, ``true``, ``"x"``), else as
    a string."""
    name, separator, raw = text.partition("=")
    if not separator or not name:
        raise ValueError(f"a property is NAME=VALUE, not {text!r}")
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    return name, value


@attrs.frozen(kw_only=True)
class MessageTemplate:
    """The attributes ``send`` puts on every message (the options given; None: not set)."""

    subject: str | None = None
    content_type: str | None = None
    correlation_id: str | None = None
    reply_to: str | None = None
    ttl: float | None = None
    priority: int | None = None
    durable: bool = False
    binary: bool = False
    properties: dict[str, Any] = attrs.field(factory=dict)

    def apply(self, message: Message) -> Message:
        """Set the template's attributes on ``message`` (they win over a ``message``-format item's) and return it."""
        for name in ("subject", "content_type", "correlation_id", "reply_to", "ttl", "priority"):
            value = getattr(self, name)
            if value is not None:
                setattr(message, name, value)
        if self.durable:
            message.durable = True
        if self.binary and isinstance(message.body, str):
            message.body = message.body.encode()
        if self.properties:
            message.properties = {**(message.properties or {}), **self.properties}
        return message


#: Bytes asked of the input per read. What one read gives (``read1``: what is there, waiting only when nothing is)
#: goes to the sending task as one batch: a line that comes alone (``tail -f``) goes at once, a pipe full of lines
#: goes in a few hand-overs instead of one a line; and the batches in memory stay small.
_READ_SIZE = 16 << 10

#: The most messages made and handed over at once (a read of short lines gives thousands).
BATCH = 256


def _line_batches(stream: IO[str]) -> Iterator[list[str]]:
    """The lines of ``stream`` (line ends removed), in batches: those of one read each.

    Read as bytes and decoded a line at a time, strictly: a line that is not UTF-8 is named by its number, after
    the lines before it went (decoding the whole block read, the error named no line and nothing went). Lines end
    with ``\\n``, ``\\r\\n`` or ``\\r``, as text mode reads them.
    """
    read = getattr(getattr(stream, "buffer", None), "read1", None)
    if read is None:  # a text stream with no bytes under it (io.StringIO): nothing to decode, nothing that blocks
        lines = (line.rstrip("\r\n") for line in stream)
        while group := list(itertools.islice(lines, BATCH)):
            yield group
        return
    number = 0
    partial: list[bytes] = []  # the line being read, in parts (a long line is joined once, not at every read)
    while True:
        chunk = read(_READ_SIZE)
        if not chunk:  # the end: the last line may have no line end
            pieces = [b"".join(partial)] if any(partial) else []
        else:
            partial.append(chunk)
            if b"\n" not in chunk and b"\r" not in chunk:
                continue
            pieces = b"".join(partial).splitlines(keepends=True)
            # A last piece without "\n" is not complete: the rest (or the "\n" of a "\r\n") comes next read.
            partial = [pieces.pop()] if not pieces[-1].endswith(b"\n") else []
        batch: list[str] = []
        for piece in pieces:
            number += 1
            try:
                batch.append(piece.rstrip(b"\r\n").decode("utf-8"))
            except UnicodeDecodeError:
                if batch:
                    yield batch  # the lines before it go
                raise InputError(f"line {number}: not UTF-8 text (send binary data with --file)") from None
        if batch:
            yield batch
        if not chunk:
            return


def _message(item: str, fmt: str, number: int) -> Message:
    if fmt == "text":
        return Message(item)
    if not item.strip():
        raise InputError(f"item {number}: empty")
    try:
        value = json.loads(item)
    except json.JSONDecodeError as exc:
        raise InputError(f"item {number}: invalid JSON: {exc}") from None
    if fmt == "json":
        return Message(from_json(value))
    try:
        return message_from_json(value)
    except ValueError as exc:
        raise InputError(f"item {number}: {exc}") from None


def message_batches(
    bodies: Iterable[str] | None,
    stream: IO[str] | None,
    *,
    fmt: str,
    count: int | None,
    size: int | None,
    template: MessageTemplate,
) -> Iterator[list[Message]]:
    """The messages to send, lazily (stdin may be endless), in batches of at most :data:`BATCH`.

    Items come from ``bodies`` (the arguments), else from ``stream``'s lines (blank lines skipped in the JSON
    formats), else are generated: ``message N``, or ``size`` bytes. ``count`` is the total; without it each item
    is sent once (one generated message). With fewer items than ``count``, the arguments repeat in order, and so
    do the lines of a stream that can be read again (a regular file: it is re-read, never held); a stream read
    once (a pipe, a terminal) is not held either: when it ends first, :class:`InputError` follows the batches
    (the lines it had are sent).

    A bad item (a line not UTF-8, invalid JSON) raises :class:`InputError`, after a batch of the items before it.
    """
    items: Iterator[list[str]]
    if bodies:
        items = _repeated(list(bodies), count)
    elif stream is not None:
        items = _stream_items(stream, fmt, count)
    else:
        items = _generated(1 if count is None else count)
    payload = b"x" * size if size is not None else None
    number = 0
    for batch in items:
        messages: list[Message] = []
        for item in batch:
            number += 1
            try:
                message = _message(item, fmt, number)
            except InputError:
                if messages:
                    yield messages  # the items before it go
                raise
            if payload is not None:
                message.body = payload
            messages.append(template.apply(message))
        yield messages


def _generated(count: int) -> Iterator[list[str]]:
    """``message 1`` ... ``message COUNT``, in batches."""
    for first in range(1, count + 1, BATCH):
        yield [f"message {n}" for n in range(first, min(first + BATCH, count + 1))]


def _repeated(bodies: list[str], count: int | None) -> Iterator[list[str]]:
    """``bodies`` once, or repeated in order up to ``count`` items, in batches."""
    items = iter(bodies) if count is None else itertools.islice(itertools.cycle(bodies), count)
    while batch := list(itertools.islice(items, BATCH)):
        yield batch


def _stream_items(stream: IO[str], fmt: str, count: int | None) -> Iterator[list[str]]:
    """The items of ``stream``'s lines, in batches: up to ``count`` of them, re-reading a regular file from where
    it started when it has fewer; never reading past the ``count``-th (``tail -f log | send -i - --count 5``
    ends with the fifth line)."""
    if count == 0:
        return  # not a read: one may wait for ever
    rewind = _rewinder(stream) if count is not None else None
    left = count
    taken = 0
    while True:
        passed = 0
        for lines in _line_batches(stream):
            items = lines if fmt == "text" else [line for line in lines if line.strip()]
            if left is not None:
                items = items[:left]
                left -= len(items)
            passed += len(items)
            taken += len(items)
            for first in range(0, len(items), BATCH):
                yield items[first : first + BATCH]
            if left == 0:
                return
        if count is None:
            return
        if rewind is None:
            raise InputError(
                f"the input ended after {_plural(taken, 'message')}, before --count {count:,}: lines read "
                "from a pipe or a terminal are sent once, never kept (bodies repeat when given as arguments or "
                "in a file, -i FILE)"
            )
        if not passed:
            raise InputError(f"the input has no message to send (--count {count:,})")
        rewind()


def _rewinder(stream: IO[str]) -> Callable[[], None] | None:
    """A function that takes ``stream`` back to where it is now, or None when it cannot (a pipe, a terminal)."""
    source: Any = getattr(stream, "buffer", stream)  # the bytes under a text stream: _line_batches reads those
    try:
        if not source.seekable():
            return None
        start = source.tell()
    except (OSError, ValueError):
        return None

    def rewind() -> None:
        source.seek(start)

    return rewind


def _plural(number: int, noun: str) -> str:
    """``1 item``, ``2 items``, ``1,000 items``."""
    return f"{number:,} {noun}{'' if number == 1 else 's'}"
