"""What ``send`` sends: bodies from arguments, from a file or stdin (one per line), or generated; as text, JSON
values or whole messages (JSON objects as ``receive --output json`` prints them)."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Iterator
from typing import IO, Any

import attrs

from ..message import Message
from ._values import from_json, message_from_json

__all__ = ["FORMATS", "InputError", "MessageTemplate", "message_stream", "parse_property"]

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


def _lines(stream: IO[str]) -> Iterator[str]:
    """The lines of ``stream`` (read with ``errors="surrogateescape"``: a line that is not UTF-8 is named by its
    number, after the lines before it went; decoded strictly, the whole block read failed, with no number)."""
    for number, line in enumerate(stream, 1):
        try:
            line.encode("utf-8")
        except UnicodeEncodeError:
            raise InputError(f"line {number}: not UTF-8 text (send binary data with --file)") from None
        yield line.rstrip("\r\n")


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


def message_stream(
    bodies: Iterable[str] | None,
    stream: IO[str] | None,
    *,
    fmt: str,
    count: int | None,
    size: int | None,
    template: MessageTemplate,
) -> Iterator[Message]:
    """The messages to send, lazily (stdin may be endless).

    Items come from ``bodies`` (the arguments), else from ``stream``'s lines (blank lines skipped in the JSON
    formats), else are generated: ``message N``, or ``size`` bytes. ``count`` is the total: items repeat in order
    when there are fewer; without it each item is sent once (one generated message).
    """
    items: Iterable[str]
    if bodies:
        items = list(bodies)
    elif stream is not None:
        items = (line for line in _lines(stream) if fmt == "text" or line.strip())
    else:
        items = (f"message {n}" for n in itertools.count(1))
        count = 1 if count is None else count
    if count is not None:
        items = itertools.islice(itertools.cycle(items), count)
    payload = b"x" * size if size is not None else None
    for number, item in enumerate(items, 1):
        message = _message(item, fmt, number)
        if payload is not None:
            message.body = payload
        yield template.apply(message)
