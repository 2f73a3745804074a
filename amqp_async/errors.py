"""Errors raised on purpose by amqp_async.

Every error the library raises deliberately is an :class:`AMQPError`, and every :class:`AMQPError` carries an
AMQP error condition (a symbolic name such as ``amqp:decode-error``, spec §2.8.15) and a description, so that the
error a caller sees can be put on the wire unchanged, and an error received from a peer surfaces with the peer's
own words.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "AMQPError",
    "AuthenticationError",
    "ConnectionError",
    "DecodeError",
    "DeliveryAlreadySettled",
    "DeliveryError",
    "DeliveryInDoubt",
    "EncodeError",
    "LinkDetached",
    "LinkError",
    "MessageModified",
    "MessageRejected",
    "MessageReleased",
    "SessionError",
    "TransactionError",
    "TransactionInDoubt",
    "TransactionRolledBack",
]


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


class ConnectionError(AMQPError):  # noqa: A001 - the AMQP layer's own name, exported as amqp_async.ConnectionError
    """The connection failed or was closed with an error (by the peer, by us, or by the transport)."""

    default_condition = "amqp:connection:forced"


class AuthenticationError(ConnectionError):
    """SASL authentication failed (§5.3.3.6): wrong credentials, or no mechanism both sides accept.

    Attributes:
        sasl_code: the SASL outcome code (1 auth, 2 sys, 3 sys-perm, 4 sys-temp), or None when no outcome came.
    """

    default_condition = "amqp:unauthorized-access"

    def __init__(self, description: str = "", *, sasl_code: int | None = None, condition: str | None = None) -> None:
        super().__init__(description, condition=condition)
        self.sasl_code = sasl_code


class SessionError(AMQPError):
    """The session ended with an error."""


class LinkError(AMQPError):
    """The link was detached with an error (for example ``amqp:not-found`` for an unknown address)."""


class LinkDetached(LinkError):
    """The link was detached (or closed) without an error while an operation needed it."""

    default_condition = "amqp:link:detach-forced"


class DeliveryError(AMQPError):
    """A message was not accepted. ``outcome`` holds the delivery state the receiver gave (§3.4)."""

    def __init__(self, description: str = "", *, outcome: Any = None, condition: str | None = None) -> None:
        super().__init__(description, condition=condition)
        self.outcome = outcome


class MessageRejected(DeliveryError):
    """The receiver rejected the message (§3.4.3); ``condition``/``description`` are the receiver's error."""


class MessageReleased(DeliveryError):
    """The receiver released the message (§3.4.4): it was not processed and may be sent again."""

    default_condition = "amqp:released"


class MessageModified(DeliveryError):
    """The receiver modified the message (§3.4.5): ``outcome`` says delivery_failed / undeliverable_here."""

    default_condition = "amqp:modified"


class DeliveryInDoubt(DeliveryError):
    """The connection ended before the outcome of this delivery was known: it may or may not have arrived.

    The caller decides whether to send it again (at-least-once) or not.
    """

    default_condition = "amqp:connection:forced"


class TransactionError(AMQPError):
    """A transaction (§4) could not be declared, used or discharged; ``condition`` is the peer's when it sent one.

    Raised at declare time by a peer without a transaction coordinator (naming the condition of its refusal), for
    a discharge the coordinator rejected (``amqp:transaction:unknown-id``...), and for work on a transaction
    that is already discharged.
    """


class TransactionRolledBack(TransactionError):
    """The transaction did not commit: its work was rolled back (a commit the coordinator refused with
    ``amqp:transaction:rollback`` or ``amqp:transaction:timeout``, or a connection that ended before the commit
    was asked for: the peer rolls back the open transactions of a connection that ends)."""

    default_condition = "amqp:transaction:rollback"


class TransactionInDoubt(TransactionError):
    """The connection ended after the commit was asked for and before its outcome came: the transaction may
    have committed or rolled back."""

    default_condition = "amqp:connection:forced"


class DeliveryAlreadySettled(AMQPError):
    """A received delivery was settled a second time (``accept()``, ``reject()``, ``release()`` or ``modify()``
    after one of them already ran): a delivery has one outcome (§3.4), and the first one stands.

    Attributes:
        outcome: the outcome the delivery was settled with first (None when it was settled without one).
    """

    default_condition = "amqp:illegal-state"

    def __init__(self, description: str = "", *, outcome: Any = None) -> None:
        super().__init__(description)
        self.outcome = outcome
