"""AMQP error condition symbols (spec §2.8.15-§2.8.18, transactions §4.5.8).

The ``condition`` of an ``error`` (§2.8.14) is one of these symbols (or an implementation-defined one). The codec
and the protocol engine both use them: the engine closes a connection, ends a session or detaches a link with the
condition that names what went wrong.
"""

from __future__ import annotations

from ..types import symbol

__all__ = [
    "CONNECTION_FORCED",
    "CONNECTION_FRAMING_ERROR",
    "CONNECTION_REDIRECT",
    "DECODE_ERROR",
    "FRAME_SIZE_TOO_SMALL",
    "ILLEGAL_STATE",
    "INTERNAL_ERROR",
    "INVALID_FIELD",
    "LINK_DETACH_FORCED",
    "LINK_MESSAGE_SIZE_EXCEEDED",
    "LINK_REDIRECT",
    "LINK_STOLEN",
    "LINK_TRANSFER_LIMIT_EXCEEDED",
    "NOT_ALLOWED",
    "NOT_FOUND",
    "NOT_IMPLEMENTED",
    "PRECONDITION_FAILED",
    "RESOURCE_DELETED",
    "RESOURCE_LIMIT_EXCEEDED",
    "RESOURCE_LOCKED",
    "SESSION_ERRANT_LINK",
    "SESSION_HANDLE_IN_USE",
    "SESSION_UNATTACHED_HANDLE",
    "SESSION_WINDOW_VIOLATION",
    "TRANSACTION_ROLLBACK",
    "TRANSACTION_TIMEOUT",
    "TRANSACTION_UNKNOWN_ID",
    "UNAUTHORIZED_ACCESS",
]

# §2.8.15 amqp-error: shared error conditions.
#: An internal error occurred; operator intervention might be necessary to resume normal operation.
INTERNAL_ERROR = symbol("amqp:internal-error")
#: A peer attempted to work with a remote entity that does not exist.
NOT_FOUND = symbol("amqp:not-found")
#: A peer attempted to work with a remote entity to which it has no access due to security settings.
UNAUTHORIZED_ACCESS = symbol("amqp:unauthorized-access")
#: Data could not be decoded.
DECODE_ERROR = symbol("amqp:decode-error")
#: A peer exceeded its resource allocation.
RESOURCE_LIMIT_EXCEEDED = symbol("amqp:resource-limit-exceeded")
#: The peer tried to use a frame in a manner that is inconsistent with the semantics defined in the spec.
NOT_ALLOWED = symbol("amqp:not-allowed")
#: An invalid field was passed in a frame body, and the operation could not proceed.
INVALID_FIELD = symbol("amqp:invalid-field")
#: The peer tried to use functionality that is not implemented in its partner.
NOT_IMPLEMENTED = symbol("amqp:not-implemented")
#: The client attempted to work with a server entity to which it has no access because another client is using it.
RESOURCE_LOCKED = symbol("amqp:resource-locked")
#: The client made a request that was not allowed because some precondition failed.
PRECONDITION_FAILED = symbol("amqp:precondition-failed")
#: A server entity the client is working with has been deleted.
RESOURCE_DELETED = symbol("amqp:resource-deleted")
#: The peer sent a frame that is not permitted in the current state.
ILLEGAL_STATE = symbol("amqp:illegal-state")
#: The peer cannot send a frame because the smallest encoding of the performative exceeds the max frame size.
FRAME_SIZE_TOO_SMALL = symbol("amqp:frame-size-too-small")

# §2.8.16 connection-error.
#: An operator intervened to close the connection for some reason.
CONNECTION_FORCED = symbol("amqp:connection:forced")
#: A valid frame header cannot be formed from the incoming byte stream.
CONNECTION_FRAMING_ERROR = symbol("amqp:connection:framing-error")
#: The container is no longer available on the current connection; reconnect elsewhere (see ``info``).
CONNECTION_REDIRECT = symbol("amqp:connection:redirect")

# §2.8.17 session-error.
#: The peer violated incoming window for the session.
SESSION_WINDOW_VIOLATION = symbol("amqp:session:window-violation")
#: Input was received for a link that was detached with an error.
SESSION_ERRANT_LINK = symbol("amqp:session:errant-link")
#: An attach was received using a handle that is already in use for an attached link.
SESSION_HANDLE_IN_USE = symbol("amqp:session:handle-in-use")
#: A frame (other than attach) was received referencing a handle which is not currently in use.
SESSION_UNATTACHED_HANDLE = symbol("amqp:session:unattached-handle")

# §2.8.18 link-error.
#: An operator intervened to detach for some reason.
LINK_DETACH_FORCED = symbol("amqp:link:detach-forced")
#: The peer sent more message transfers than currently allowed on the link.
LINK_TRANSFER_LIMIT_EXCEEDED = symbol("amqp:link:transfer-limit-exceeded")
#: The peer sent a larger message than is supported on the link.
LINK_MESSAGE_SIZE_EXCEEDED = symbol("amqp:link:message-size-exceeded")
#: The address provided cannot be resolved to a terminus at the current container (see ``info``).
LINK_REDIRECT = symbol("amqp:link:redirect")
#: The link has been attached elsewhere, causing the existing attachment to be forcibly closed.
LINK_STOLEN = symbol("amqp:link:stolen")

# §4.5.8 transaction-error.
#: The specified txn-id does not exist.
TRANSACTION_UNKNOWN_ID = symbol("amqp:transaction:unknown-id")
#: The transaction was rolled back for an unspecified reason.
TRANSACTION_ROLLBACK = symbol("amqp:transaction:rollback")
#: The work represented by this transaction took too long.
TRANSACTION_TIMEOUT = symbol("amqp:transaction:timeout")
