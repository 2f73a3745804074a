"""Errors of the protocol engine: the caller's misuse and the peer's violations are different exceptions.

Following h11's split: :class:`LocalProtocolError` says *you* asked for something the protocol (or the current
state) does not allow, such as sending without credit; :class:`RemoteProtocolError` says the *peer* broke the
protocol. Both carry an AMQP condition (§2.8.15-§2.8.19) so that the error can go on the wire as it is.
"""

from __future__ import annotations

from typing import Any

from ..codec import conditions
from ..errors import AMQPError

__all__ = [
    "ConnectionClosedError",
    "LocalProtocolError",
    "NoCreditError",
    "RemoteProtocolError",
    "SessionWindowClosedError",
]


class LocalProtocolError(AMQPError):
    """The caller asked the engine for something the protocol or the endpoint's state does not allow."""

    default_condition = conditions.ILLEGAL_STATE


class NoCreditError(LocalProtocolError):
    """A send on a link with no link credit (§2.6.7): the driver waits for credit instead of calling send."""

    default_condition = conditions.LINK_TRANSFER_LIMIT_EXCEEDED


class SessionWindowClosedError(LocalProtocolError):
    """A transfer while the peer's incoming window or our outgoing window is zero (§2.5.6)."""

    default_condition = conditions.SESSION_WINDOW_VIOLATION


class ConnectionClosedError(LocalProtocolError):
    """A command on a connection that is closed (or closing) on our side."""


class RemoteProtocolError(AMQPError):
    """The peer broke the protocol; the engine closes the connection, session or link with this condition.

    Attributes:
        scope: which endpoint the error ends: ``"connection"``, ``"session"`` or ``"link"``.
    """

    def __init__(
        self,
        description: str = "",
        *,
        condition: str | None = None,
        info: dict[Any, Any] | None = None,
        scope: str = "connection",
    ) -> None:
        super().__init__(description, condition=condition, info=info)
        self.scope = scope
