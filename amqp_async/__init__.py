"""amqp_async: a pure-Python, asyncio-native AMQP 1.0 client.

The public surface: :func:`connect` and the awaitable API (:class:`Connection`, :class:`Session`,
:class:`Sender`, :class:`Receiver`, :class:`Delivery`, :class:`Tracker`, :class:`Transaction`), :class:`Message`,
:class:`AMQPError` and its subclasses, the AMQP types in :mod:`amqp_async.types`, the codec in
:mod:`amqp_async.codec`, and the Sans-IO engine in :mod:`amqp_async.protocol`.
"""

from __future__ import annotations

from . import codec, types
from .client import (
    Backoff,
    Connection,
    Delivery,
    PeerCapabilities,
    Receiver,
    Sender,
    Session,
    Tracker,
    Transaction,
    connect,
    selector,
)
from .errors import (
    AMQPError,
    AuthenticationError,
    ConnectionError,
    DecodeError,
    DeliveryError,
    DeliveryInDoubt,
    EncodeError,
    LinkDetached,
    LinkError,
    MessageModified,
    MessageRejected,
    MessageReleased,
    SessionError,
    TransactionError,
    TransactionInDoubt,
    TransactionRolledBack,
)
from .message import Message

__all__ = [
    "AMQPError",
    "AuthenticationError",
    "Backoff",
    "Connection",
    "ConnectionError",
    "DecodeError",
    "Delivery",
    "DeliveryError",
    "DeliveryInDoubt",
    "EncodeError",
    "LinkDetached",
    "LinkError",
    "Message",
    "MessageModified",
    "MessageRejected",
    "MessageReleased",
    "PeerCapabilities",
    "Receiver",
    "Sender",
    "Session",
    "SessionError",
    "Tracker",
    "Transaction",
    "TransactionError",
    "TransactionInDoubt",
    "TransactionRolledBack",
    "codec",
    "connect",
    "selector",
    "types",
]
__version__ = "0.1.0"
