"""Errors raised on purpose by amqp_async.

Every error the library raises deliberately is an :class:`AMQPError`, and every :class:`AMQPError` carries an
error condition (a symbolic name such as ``amqp:decode-error``, spec §2.8.15) and a description, so that the
error a caller sees can be put on the wire unchanged, and an error received from a peer surfaces with the peer's
own words. Where no AMQP condition applies (the network failed before any frame, the application used what it had
closed, the peer ended a session without an error), the condition is one of this library's own, prefixed
``amqp-async:`` (:data:`IO_ERROR`, :data:`TLS_ERROR`, :data:`CLOSED_BY_APPLICATION`, :data:`DELIVERY_ABORTED`,
:data:`SESSION_ENDED`), never one of the spec's names.

The connection's errors, by type (docs/client.md, "Errors", has the table)::

    ConnectionError                 also the builtin ConnectionError (an OSError)
        ConnectError                could not be established
            NameResolutionError
            ConnectionRefused       also the builtin ConnectionRefusedError
            ConnectTimeout          also the builtin TimeoutError
            TLSError
                CertificateVerifyFailed
            AuthenticationError
        ConnectionClosed            the peer closed it (its condition and description)
        ConnectionLost              the network failed while it was open (or reconnecting gave up)
    ClosedByApplication             used after the application closed it (connection, session, link, delivery)

A peer that stays connected but does not answer (docs/client.md, "Defaults and their bounds")::

    SessionError
        SessionTimeout              no begin within ``open_timeout``; also the builtin TimeoutError
    LinkError
        LinkTimeout                 no attach within ``open_timeout``, or no drain within ``drain_timeout``; also
                                    the builtin TimeoutError
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the codec imports this module: its classes are named for the type checker only
    from .codec.composite import Composite
    from .codec.delivery_states import Accepted, Modified, Rejected, Released
    from .codec.transactions import TransactionalState
    from .codec.values import AMQPValue

__all__ = [
    "CLOSED_BY_APPLICATION",
    "DELIVERY_ABORTED",
    "IO_ERROR",
    "SESSION_ENDED",
    "TLS_ERROR",
    "AMQPError",
    "AuthenticationError",
    "CertificateVerifyFailed",
    "ClosedByApplication",
    "ConnectConfigError",
    "ConnectError",
    "ConnectTimeout",
    "ConnectionClosed",
    "ConnectionError",
    "ConnectionLost",
    "ConnectionRefused",
    "DecodeError",
    "DeliveryAborted",
    "DeliveryAlreadySettled",
    "DeliveryError",
    "DeliveryInDoubt",
    "EncodeError",
    "InvalidURL",
    "LinkDetached",
    "LinkError",
    "LinkTimeout",
    "MessageModified",
    "MessageRejected",
    "MessageReleased",
    "MessageTooLarge",
    "NameResolutionError",
    "SessionError",
    "SessionTimeout",
    "TLSError",
    "TransactionError",
    "TransactionInDoubt",
    "TransactionRolledBack",
]


class AMQPError(Exception):
    """Base of every error amqp_async raises on purpose.

    Attributes:
        condition: the AMQP error condition, a symbolic name such as ``amqp:not-found``.
        description: human-readable text about the error.
        info: the optional ``info`` map of the AMQP ``error`` type (§2.8.14), None when there is none. Its keys are
            symbols (``fields``, §2.8.19: "keys are restricted to be of type symbol"), which are ``str``, so
            ``error.info.get("network-host")`` reads one; its values are any :data:`~amqp_async.AMQPValue`, to be
            narrowed with ``isinstance``. The constructor takes any mapping with ``str`` keys; a key of another
            type in a peer's map (which breaks §2.8.19) is kept under its ``str()``.
    """

    #: The condition used when none is given; subclasses narrow it.
    default_condition = "amqp:internal-error"

    def __init__(
        self, description: str = "", *, condition: str | None = None, info: Mapping[str, AMQPValue] | None = None
    ) -> None:
        self.condition: str = condition if condition is not None else self.default_condition
        self.description: str = description
        self.info: dict[str, AMQPValue] | None = _info_map(info)
        super().__init__(description)

    def __str__(self) -> str:
        if self.description:
            return f"{self.condition}: {self.description}"
        return self.condition

    def __repr__(self) -> str:
        return f"{type(self).__name__}(condition={self.condition!r}, description={self.description!r})"


def _info_map(info: Mapping[Any, AMQPValue] | None) -> dict[str, AMQPValue] | None:
    """``info`` as the dict the ``info`` attribute promises: keyed by ``str`` (symbols stay symbols)."""
    if info is None:
        return None
    if all(isinstance(key, str) for key in info):
        return dict(info)
    # The codec takes a peer's fields map as it comes; a non-symbol key is the peer's fault, kept readable.
    return {key if isinstance(key, str) else str(key): value for key, value in info.items()}


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


class InvalidURL(AMQPError, ValueError):
    """A connection URL (or a URL part) that cannot be used: unknown scheme, bad port, no host.

    It is also a :class:`ValueError`, because it is raised for bad arguments.
    """

    default_condition = "amqp:invalid-field"


class ConnectConfigError(AMQPError, ValueError):
    """A connection configuration file (connect.json) that cannot be used: unreadable, not JSON, or with a bad
    value.

    The message names the file. It is also a :class:`ValueError`.

    Attributes:
        path: the file at fault.
    """

    default_condition = "amqp:invalid-field"

    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        super().__init__(f"connection configuration file {path!r}: {problem}")


# --- the connection's errors --------------------------------------------------------------------------------------
#
# Conditions of our own, for failures where no AMQP frame was exchanged (so no AMQP condition applies), named as
# python-qpid-proton names its own ("proton:io"): a vendor prefix, never one of the spec's ``amqp:`` names.

#: The network failed: a name that does not resolve, a refused or unreachable port, a reset or ended socket.
IO_ERROR = "amqp-async:io"
#: The TLS handshake failed (the certificate was not trusted, the peer does not speak TLS, ...).
TLS_ERROR = "amqp-async:tls"
#: The application closed the connection, session or link, and then used it.
CLOSED_BY_APPLICATION = "amqp-async:closed-by-application"
#: A delivery ended without its last part (§2.6.14 aborted, or cut off): no AMQP condition names it.
DELIVERY_ABORTED = "amqp-async:delivery-aborted"
#: The peer ended the session without an error (§2.5.1): no AMQP condition names that (a link's counterpart is
#: ``amqp:link:detach-forced``, a connection's ``amqp:connection:forced``; a session has none).
SESSION_ENDED = "amqp-async:session-ended"


class ConnectionError(AMQPError, builtins.ConnectionError):  # noqa: A001 - deliberately the builtin's name
    """The connection could not be made, or it ended: every waiter on it raises one (see the subclasses).

    It is also the builtin :class:`ConnectionError` (so an :class:`OSError`): ``except ConnectionError`` catches
    it whichever of the two names is in scope, and ``errno`` holds the errno of the OS error behind it, if any
    (that error is chained as ``__cause__``).

    Attributes:
        url: the URL of the peer (its password hidden), when known.
        host, port: the peer's host and port, when known.
        errno: the ``errno`` of the underlying :class:`OSError` (None when there is none).
        strerror: that error's text (None when there is none).
    """

    default_condition = "amqp:connection:forced"

    def __init__(
        self,
        description: str = "",
        *,
        condition: str | None = None,
        info: Mapping[str, AMQPValue] | None = None,
        url: str | None = None,
        host: str | None = None,
        port: int | None = None,
        cause: BaseException | None = None,
    ) -> None:
        super().__init__(description, condition=condition, info=info)
        self.url = url
        self.host = host
        self.port = port
        if cause is not None:
            self.__cause__ = cause
            underlying = _os_error_in(cause)
            if underlying is not None:
                self.errno = underlying.errno
                self.strerror = underlying.strerror

    def __reduce__(self) -> tuple[Any, ...]:
        # OSError keeps errno and strerror outside __dict__: carry them over a pickle too.
        return (type(self), self.args, {**self.__dict__, "errno": self.errno, "strerror": self.strerror})


def _os_error_in(error: BaseException) -> OSError | None:
    """The first OS error with an errno along ``error``'s chain of causes (``error`` itself included)."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno is not None:
            return current
        current = current.__cause__
    return None


class ConnectError(ConnectionError):
    """The connection could not be established: the peer was not reached, or did not let us in.

    Raised by :func:`amqp_async.connect`, and as the ``__cause__`` of the :class:`ConnectionLost` that ends a
    reconnect which gave up (the last attempt's error). A failure that no subclass names (a host or network that
    is unreachable, a proxy or a WebSocket upgrade that refused us, a peer that dropped the socket before its
    open) is this class itself.
    """

    default_condition = IO_ERROR


class NameResolutionError(ConnectError):
    """The host name does not resolve (DNS): ``errno`` is the resolver's (``socket.EAI_NONAME``...)."""


class ConnectionRefused(ConnectError, builtins.ConnectionRefusedError):
    """Nothing listens at the peer's address: the TCP connect was refused (``errno`` ``ECONNREFUSED``).

    Also the builtin :class:`ConnectionRefusedError`.
    """


class ConnectTimeout(ConnectError, builtins.TimeoutError):
    """The attempt took longer than ``connect_timeout``: the TCP connect, the TLS handshake, SASL, or the wait for
    the peer's open (condition ``amqp:resource-limit-exceeded``). Also the builtin :class:`TimeoutError`."""

    default_condition = "amqp:resource-limit-exceeded"


class TLSError(ConnectError):
    """The TLS handshake failed: the peer does not speak TLS there, or no protocol version or cipher suits both.

    Its ``__cause__`` is the :class:`ssl.SSLError`.
    """

    default_condition = TLS_ERROR


class CertificateVerifyFailed(TLSError):
    """The peer's certificate was refused: not signed by a CA the TLS context trusts, expired, or not naming the
    host connected to (its ``__cause__`` is the :class:`ssl.SSLCertVerificationError`).

    Attributes:
        verify_code: OpenSSL's verification error code (None when unknown).
        verify_message: OpenSSL's words for it ("self-signed certificate"...), or None.
    """

    def __init__(
        self,
        description: str = "",
        *,
        verify_code: int | None = None,
        verify_message: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(description, **kwargs)
        self.verify_code = verify_code
        self.verify_message = verify_message


class AuthenticationError(ConnectError):
    """SASL authentication failed (§5.3.3.6): wrong credentials, or no mechanism both sides accept.

    Attributes:
        sasl_code: the SASL outcome code (1 auth, 2 sys, 3 sys-perm, 4 sys-temp), or None when no outcome came.
    """

    default_condition = "amqp:unauthorized-access"

    def __init__(self, description: str = "", *, sasl_code: int | None = None, **kwargs: Any) -> None:
        super().__init__(description, **kwargs)
        self.sasl_code = sasl_code


class ConnectionClosed(ConnectionError):
    """The peer closed the connection with a close frame (§2.4.3): its decision, never retried.

    ``condition``, ``description`` and ``info`` are the peer's own; ``str()`` adds where.
    """

    def __str__(self) -> str:
        where = f"{self.url} closed the connection" if self.url else "the peer closed the connection"
        text = f"{self.condition}: {where}"
        return f"{text}: {self.description}" if self.description else text


class ConnectionLost(ConnectionError):
    """The network failed while the connection was open: the socket broke or ended without a close frame, or the
    peer fell silent past our idle timeout (condition ``amqp:resource-limit-exceeded``, §2.4.5).

    With reconnect on, raised once reconnecting gave up: its ``__cause__`` is then the last attempt's
    :class:`ConnectError` (and ``errno`` that attempt's).
    """

    default_condition = IO_ERROR


class ClosedByApplication(AMQPError):
    """A connection, session, link or delivery was used after the application closed it (or closed what it
    belongs to): a mistake in the program, not a failure of the peer or the network.

    Its condition is ``amqp-async:closed-by-application``: no AMQP condition applies (``amqp:connection:forced``
    would claim the peer forced it), so it is one of this library's own.
    """

    default_condition = CLOSED_BY_APPLICATION


class SessionError(AMQPError):
    """The session ended: the peer ended it with an error (its condition), or without one (condition
    :data:`SESSION_ENDED`, ``amqp-async:session-ended``)."""


class SessionTimeout(SessionError, builtins.TimeoutError):
    """The peer did not answer a session's begin within ``open_timeout`` (condition
    ``amqp:resource-limit-exceeded``): the session was ended, with that error, so a late answer is not used. Also
    the builtin :class:`TimeoutError`."""

    default_condition = "amqp:resource-limit-exceeded"


class LinkError(AMQPError):
    """The link was detached with an error (for example ``amqp:not-found`` for an unknown address)."""


class LinkTimeout(LinkError, builtins.TimeoutError):
    """The peer did not answer in time (condition ``amqp:resource-limit-exceeded``): a link's attach within
    ``open_timeout`` (the link was then detached with that error, so a late answer is not used), or a drain
    within ``drain_timeout`` (the link stays attached: the credit is the sender's until it answers). Also the
    builtin :class:`TimeoutError`."""

    default_condition = "amqp:resource-limit-exceeded"


class LinkDetached(LinkError):
    """The link was detached (or closed) without an error while an operation needed it."""

    default_condition = "amqp:link:detach-forced"


class DeliveryError(AMQPError):
    """A message was not accepted. ``outcome`` holds the delivery state the receiver gave (§3.4), None when none
    came (the subclasses narrow its type: a ``MessageRejected``'s is a ``Rejected``...).

    Attributes:
        address: the address the message was sent to, when known: the sender's target address, or on the
            anonymous relay (a sender without a target) the message's ``to``. ``str()`` names it, so that with
            many senders the error says which node refused; ``description`` stays the peer's words.
    """

    # Declared on the class (not only assigned in __init__) so that each subclass can narrow it for the type
    # checker: ``except MessageRejected as e: e.outcome.error`` is checked, where ``Any`` let every typo through.
    outcome: Composite | None

    def __init__(
        self,
        description: str = "",
        *,
        outcome: Composite | None = None,
        condition: str | None = None,
        address: str | None = None,
    ) -> None:
        super().__init__(description, condition=condition)
        self.outcome = outcome
        self.address = address

    def __str__(self) -> str:
        text = super().__str__()
        # After the peer's words, not before: "condition: description" stays whole for those who match on it.
        return text if self.address is None else f"{text} (sent to {self.address!r})"


class MessageRejected(DeliveryError):
    """The receiver rejected the message (§3.4.3); ``condition``/``description`` are the receiver's error, and
    ``outcome`` the :class:`~amqp_async.Rejected` it sent."""

    outcome: Rejected | None


class MessageReleased(DeliveryError):
    """The receiver released the message (§3.4.4): it was not processed and may be sent again. ``outcome`` is
    the :class:`~amqp_async.Released` it sent."""

    default_condition = "amqp:released"
    outcome: Released | None


class MessageModified(DeliveryError):
    """The receiver modified the message (§3.4.5): ``outcome`` (a :class:`~amqp_async.Modified`) says
    delivery_failed / undeliverable_here."""

    default_condition = "amqp:modified"
    outcome: Modified | None


class MessageTooLarge(DeliveryError):
    """A message larger than the receiving end takes: its max-message-size, announced when the link was attached
    (§2.7.3: "Any attempt to deliver a message larger than this results in a message-size-exceeded link-error").

    Nothing of it was sent (a message streamed in parts is aborted at the part that passes the limit, §2.6.14), so
    the link stays attached and usable for smaller messages. The description names the size and the limit.
    """

    default_condition = "amqp:link:message-size-exceeded"


class DeliveryAborted(DeliveryError):
    """A message sent in parts (a streamed delivery) ended before its last part: it was not delivered, and its
    receiver discards what came of it (§2.6.14).

    A receiver reading a message streamed gets it from the body's iterator when the sender aborted the delivery. A
    stream sender gets it when its message was cut mid-body, after its first frames were written and before its
    last: by its own close or its session's or connection's, by the peer's detach, end or close, or by the
    connection's loss (with or without reconnect); ``__cause__`` is what ended it, and it may be sent again. (A
    body source that raises, or a cancellation, aborts the delivery too, and that exception is what the sender
    sees.)
    """

    default_condition = DELIVERY_ABORTED


class DeliveryInDoubt(DeliveryError):
    """The connection or the session ended, or the peer detached the link, before the outcome of this delivery was
    known: it may or may not have arrived. Its condition and ``__cause__`` are the connection's, the session's or the
    link's error (the default condition when none was given).

    The caller decides whether to send it again (at-least-once) or not. A message not written whole (nothing of it,
    or not its last frame: it waited for the peer's session window when the end came) is not in doubt: it fails
    with the error of what ended it (:class:`ClosedByApplication`, :class:`ConnectionLost`,
    :class:`ConnectionClosed`, :class:`SessionError`, :class:`LinkDetached`), its description saying it was never
    sent (whole), and may be sent again safely; a streamed one cut mid-body with :class:`DeliveryAborted`.
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
    """The connection ended after the commit was asked for and before its outcome came, or the coordinator did
    not settle the discharge within ``open_timeout`` (condition ``amqp:resource-limit-exceeded``): the
    transaction may have committed or rolled back."""

    default_condition = "amqp:connection:forced"


class DeliveryAlreadySettled(AMQPError):
    """A received delivery was settled a second time (``accept()``, ``reject()``, ``release()`` or ``modify()``
    after one of them already ran): a delivery has one outcome (§3.4), and the first one stands.

    Attributes:
        outcome: the outcome the delivery was settled with first (None when it was settled without one).
    """

    default_condition = "amqp:illegal-state"

    def __init__(
        self,
        description: str = "",
        *,
        outcome: Accepted | Rejected | Released | Modified | TransactionalState | None = None,
    ) -> None:
        super().__init__(description)
        self.outcome: Accepted | Rejected | Released | Modified | TransactionalState | None = outcome
