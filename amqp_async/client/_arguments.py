"""Checks of what the application passes in, made at the call, before anything reaches the engine.

A value that goes into a frame is encoded when the driver writes that frame, later and in the connection's own
task: an argument AMQP cannot carry would fail there, and take the whole connection (every link on it) with it,
after the call that gave it had returned as if it had worked. So every value an API call puts on the wire is
checked here first, and the call raises (``TypeError``, ``ValueError`` or :class:`~amqp_async.EncodeError`, each
naming the argument) with nothing changed: no delivery settled, no credit granted, no link attached.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from ..codec import encode_value
from ..codec.conditions import LINK_MESSAGE_SIZE_EXCEEDED
from ..errors import AMQPError, EncodeError, MessageTooLarge
from ..protocol.serial import MASK

if TYPE_CHECKING:
    from ._connection import Connection
    from ._transaction import Transaction

__all__ = [
    "check_address",
    "check_credit",
    "check_encodable",
    "check_outcome",
    "check_thread",
    "check_transaction",
    "check_uint",
    "get_ident",
    "refusal",
]

#: The calling thread's identifier: hot paths compare it with the connection's ``_thread`` inline (a call to
#: :func:`check_thread` only when they differ).
get_ident = threading.get_ident

#: What a disposition frame holds besides its state (§2.7.6), at most: the frame header (8), the descriptor (3), a
#: list32 head (9), role, first and last as uints, settled and batchable (13); and, within a transaction, the
#: transactional-state around the outcome (§4.5.5: descriptor, list32 head, a txn-id of up to 32 bytes as a vbin32).
_DISPOSITION_ROOM = 8 + 3 + 9 + 13 + 3 + 9 + 5 + 32


def check_encodable(value: Any, what: str) -> bytearray:
    """Encode ``value`` as the frame will; return its bytes.

    Raises:
        EncodeError: AMQP cannot carry it (a type it has no encoding for, a number out of its type's range);
            the description names ``what``.
    """
    buffer = bytearray()
    try:
        encode_value(buffer, value)
    except EncodeError as error:
        raise EncodeError(f"{what} cannot be sent: {error.description}") from None
    except (TypeError, ValueError, OverflowError) as error:  # a value whose own conversion failed
        raise EncodeError(f"{what} cannot be sent: {error}") from None
    return buffer


def check_outcome(outcome: Any, connection: Connection, what: str) -> None:
    """Check that ``outcome`` (a rejected or modified state the application filled) goes into a disposition frame
    the peer takes: encodable, and with the frame's other fields within the peer's max-frame-size (§2.7.1: a
    disposition is one frame; it cannot be split as a transfer is).

    Raises:
        EncodeError: AMQP cannot carry it.
        ValueError: it is too large for one frame of the peer's.
    """
    size = len(check_encodable(outcome, what))
    engine = connection._engine
    if engine is None:  # reconnecting: settling then raises LinkDetached (the link it came on is gone)
        return
    limit = engine.remote_max_frame_size - _DISPOSITION_ROOM
    if size > limit:
        raise ValueError(
            f"{what} takes {size} bytes encoded; a disposition is one frame, and the peer's max-frame-size "
            f"({engine.remote_max_frame_size} bytes) leaves {limit} for it (shorten the description or the info)"
        )


def refusal(error: AMQPError) -> AMQPError:
    """What a send raises for the engine's refusal of one message (its link still attached): a message larger than
    the peer's max-message-size is a :class:`~amqp_async.MessageTooLarge` (a DeliveryError, as the peer's refusals
    are); any other refusal is the engine's error as it is."""
    if error.condition == LINK_MESSAGE_SIZE_EXCEEDED:
        return MessageTooLarge(error.description)
    return error


def check_address(address: object, name: str) -> None:
    """An address option: a str, or None where the node is given otherwise (dynamic, anonymous).

    Raises:
        TypeError: anything else (an address is an address-string on the wire, §3.5.3: an int or bytes given by
            mistake would reach the peer as a value of another type).
    """
    if address is not None and not isinstance(address, str):
        raise TypeError(f"{name} must be a str (the node's address) or None, got {type(address).__name__}")


def check_credit(credit: object, current: int) -> int:
    """The credit to add to a link holding ``current``.

    Raises:
        TypeError: not an int.
        ValueError: below 0, or making the link's credit more than a uint holds (§2.7.4: 2**32 - 1).
    """
    if isinstance(credit, bool) or not isinstance(credit, int):
        raise TypeError(f"credit must be an int (a number of messages), got {type(credit).__name__}")
    if credit < 0:
        raise ValueError(f"credit must be >= 0, got {credit}")
    if current + credit > MASK:
        raise ValueError(f"the link's credit would be {current + credit}, above 2**32 - 1 (a uint, §2.7.4)")
    return credit


def check_uint(value: object, name: str, *, minimum: int = 0, why: str = "") -> int:
    """A count that goes on the wire as a uint (§1.6.6: 0 to 2**32 - 1), at least ``minimum``.

    Raises:
        TypeError: not an int (a bool is not a count).
        ValueError: out of range; ``why`` says what a value below ``minimum`` would do.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}{why}, got {value}")
    if value > MASK:
        raise ValueError(f"{name} must be at most 2**32 - 1 (a uint on the wire), got {value}")
    return value


def check_transaction(transaction: object, connection: Connection) -> Transaction:
    """``transaction=``: a :class:`~amqp_async.Transaction` of ``connection``.

    Raises:
        TypeError: not a Transaction.
        ValueError: a transaction of another connection.
    """
    from ._transaction import Transaction  # the transaction module builds on the links, which check through here

    if not isinstance(transaction, Transaction):
        raise TypeError(
            f"transaction must be a Transaction (from connection.transaction()), got {type(transaction).__name__}"
        )
    if transaction.connection is not connection:
        raise ValueError("the transaction belongs to another connection")
    return transaction


def check_thread(connection: Connection) -> None:
    """Refuse a call from a thread other than the one whose event loop runs ``connection``.

    The connection's state (the engine, its windows and credit, the socket's transport) belongs to its event loop:
    a call from elsewhere would change it under the loop's feet, and awaiting there waits on a loop that is not
    running the call (asyncio says so only after the message is sent: a retry would send it twice).

    Raises:
        RuntimeError: naming the way to call it from another thread, :meth:`Connection.run_threadsafe`.
    """
    if get_ident() != connection._thread:
        raise RuntimeError(
            f"{connection!r} runs in the event loop of another thread: from this thread, call it through "
            "connection.run_threadsafe(coroutine) (or anyio.from_thread)"
        )
