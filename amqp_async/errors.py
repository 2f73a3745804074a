"""Errors raised on purpose by amqp_async.

Every error the library raises deliberately is an :class:`AMQPError`, and every :class:`AMQPError` carries an
AMQP error condition (a symbolic name such as ``amqp:decode-error``, spec §2.8.15) and a description, so that the
error a caller sees can be put on the wire unchanged, and an error received from a peer surfaces with the peer's
own words.
"""

from __future__ import annotations

from typing import Any

__all__ = ["AMQPError", "DecodeError", "EncodeError"]


class AMQPError(Exception):
    """Base of every error amqp_async raises on purpose.

    Attributes:
        condition: the AMQP error condition, a symbolic name such as ``amqp:not-found``.
        description: human-readable text about the error.
        info: the optional ``info`` map of the AMQP ``error`` type (symbol keys).
    """

    #: The condition used when none is given; subclasses narrow it.
    default_condition = "amqp:internal-error"

    def __init__(
        self, description: str = "", *, condition: str | None = None, info: dict[Any, Any] | None = None
    ) -> None:
        self.condition: str = condition if condition is not None else self.default_condition
        self.description: str = description
        self.info: dict[Any, Any] | None = info
        super().__init__(description)

    def __str__(self) -> str:
        if self.description:
            return f"{self.condition}: {self.description}"
        return self.condition

    def __repr__(self) -> str:
        return f"{type(self).__name__}(condition={self.condition!r}, description={self.description!r})"


class DecodeError(AMQPError):
    """Bytes that are not a valid AMQP encoding (condition ``amqp:decode-error``, §2.8.15).

    Attributes:
        offset: the position in the input at which the problem was found.
        reason: what was wrong, without the offset.
    """

    default_condition = "amqp:decode-error"

    def __init__(self, reason: str, *, offset: int = 0) -> None:
        self.offset = offset
        self.reason = reason
        super().__init__(f"{reason} (at offset {offset})")


class EncodeError(AMQPError, ValueError):
    """A value that cannot be encoded: out of its type's range, of an unknown type, or too large.

    It is also a :class:`ValueError`, because it is raised for bad arguments.
    """

    default_condition = "amqp:invalid-field"
