"""Qpid Proton's exception hierarchy, as ``proton`` names it, on top of :class:`amqp_async.AMQPError`.

The classes and their bases among themselves are exactly proton's::

    ProtonException
     +-- Timeout, Interrupt
     +-- MessageException, DataException
     +-- TransportException
     |    +-- SSLException
     |         +-- SSLUnavailable
     +-- ConnectionException, SessionException, LinkException

so ``except proton.X`` clauses behave as they do with proton. In addition, every one of them is an
:class:`amqp_async.AMQPError` (it carries ``condition``, ``description`` and ``info``), so code written against the
awaitable API catches them too, and the session and link errors are also the awaitable API's errors of the same
layer:

* :class:`SessionException` is an :class:`amqp_async.SessionError`;
* :class:`LinkException` is an :class:`amqp_async.LinkError`.

No builtin exception is added as a base (``Timeout`` is not a ``TimeoutError``, which is an ``OSError``: that
would change what ``except OSError`` catches in proton programs). For the same reason :class:`ConnectionException`
and :class:`TransportException` are not :class:`amqp_async.ConnectionError`\\ s, which are also the builtin
``ConnectionError`` (an ``OSError``).

``str()`` and ``repr()`` are those of a plain ``Exception`` (``str(Timeout("x")) == "x"``), as with proton, and
not :class:`~amqp_async.AMQPError`'s ``"condition: description"`` form.
"""

from __future__ import annotations

from typing import Any

from .. import message as _message
from ..errors import AMQPError
from ..errors import EncodeError as _EncodeError
from ..errors import LinkError as _LinkError
from ..errors import SessionError as _SessionError

__all__ = [
    "ConnectionException",
    "DataException",
    "Interrupt",
    "LinkException",
    "MessageException",
    "ProtonException",
    "SSLException",
    "SSLUnavailable",
    "SessionException",
    "Timeout",
    "TransportException",
]


class ProtonException(AMQPError):
    """The root of proton's exception hierarchy; also an :class:`amqp_async.AMQPError`.

    Args:
        *args: as for ``Exception``; the first, if any, becomes the ``description``.
        condition: the AMQP error condition (a symbolic name); the class's ``default_condition`` when None.
        info: the optional ``info`` map of the AMQP error.
    """

    def __init__(self, *args: Any, condition: str | None = None, info: dict[Any, Any] | None = None) -> None:
        super().__init__(str(args[0]) if args else "", condition=condition, info=info)
        # Keep Exception's own view of the arguments (pickling, str, repr), as proton's classes have it.
        self.args = args

    def __str__(self) -> str:
        return Exception.__str__(self)

    def __repr__(self) -> str:
        return Exception.__repr__(self)


class Timeout(ProtonException):
    """A blocking operation timed out."""


class Interrupt(ProtonException):
    """A blocking operation was interrupted."""


class MessageException(ProtonException):
    """The root of the errors raised by :class:`~amqp_async.message.Message` operations in proton's API."""

    default_condition = "amqp:invalid-field"


class DataException(ProtonException):
    """The root of the errors raised by :class:`~amqp_async.proton.Data`: bad values, malformed trees, bad bytes.

    Errors from decoding carry the condition ``amqp:decode-error``; the others ``amqp:invalid-field``.
    """

    default_condition = "amqp:invalid-field"


class TransportException(ProtonException):
    """An error of the AMQP transport (framing, I/O, SASL)."""


class SSLException(TransportException):
    """An error in setting up or using SSL/TLS."""


class SSLUnavailable(SSLException):
    """SSL/TLS is not available."""


class ConnectionException(ProtonException):
    """An error related to a connection."""


class SessionException(ProtonException, _SessionError):
    """An error related to a session; also an :class:`amqp_async.SessionError`."""


class LinkException(ProtonException, _LinkError):
    """An error related to a link; also an :class:`amqp_async.LinkError`."""


class _PropertyKeyError(MessageException, _EncodeError):
    """An application property key that is not a string (proton's MessageException; our EncodeError too)."""


# Message.encode raises this from now on (amqp_async.message cannot import this adapter).
_message.PROPERTY_KEY_ERROR = _PropertyKeyError
