"""amqp_async: a pure-Python, asyncio-native AMQP 1.0 client.

The public surface: :func:`connect` and the awaitable API (:class:`Connection`, :class:`Session`,
:class:`Sender`, :class:`Receiver`, :class:`Delivery`, :class:`Tracker`, :class:`Transaction`), :class:`Message`,
the outcomes (:class:`Accepted`, :class:`Rejected`, :class:`Released`, :class:`Modified`), :class:`AMQPError` and
its subclasses, the types of the typed API (:data:`AMQPValue`, :data:`Outcome`, :data:`DeliveryMode`...), the AMQP
types in :mod:`amqp_async.types`, the codec in :mod:`amqp_async.codec`, and the Sans-IO engine in
:mod:`amqp_async.protocol`.
"""

from __future__ import annotations

from . import codec, types
from .client import (
    Backoff,
    Connection,
    ConnectOptions,
    Delivery,
    DeliveryMode,
    DistributionMode,
    ExpiryPolicy,
    OnError,
    Opening,
    Outcome,
    PeerCapabilities,
    Receiver,
    Sender,
    SendManyError,
    Session,
    Tracker,
    Transaction,
    TransactionState,
    connect,
    selector,
)
from .codec.delivery_states import Accepted, Modified, Rejected, Released
from .codec.values import AMQPValue
from .errors import (
    AMQPError,
    AuthenticationError,
    ConnectionError,
    DecodeError,
    DeliveryAlreadySettled,
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
from .message import Message, MessageBodyError, MessageFields, MessageId

__all__ = [
    "AMQPError",
    "AMQPValue",
    "Accepted",
    "AuthenticationError",
    "Backoff",
    "ConnectOptions",
    "Connection",
    "ConnectionError",
    "DecodeError",
    "Delivery",
    "DeliveryAlreadySettled",
    "DeliveryError",
    "DeliveryInDoubt",
    "DeliveryMode",
    "DistributionMode",
    "EncodeError",
    "ExpiryPolicy",
    "LinkDetached",
    "LinkError",
    "Message",
    "MessageBodyError",
    "MessageFields",
    "MessageId",
    "MessageModified",
    "MessageRejected",
    "MessageReleased",
    "Modified",
    "OnError",
    "Opening",
    "Outcome",
    "PeerCapabilities",
    "Receiver",
    "Rejected",
    "Released",
    "SendManyError",
    "Sender",
    "Session",
    "SessionError",
    "Tracker",
    "Transaction",
    "TransactionError",
    "TransactionInDoubt",
    "TransactionRolledBack",
    "TransactionState",
    "codec",
    "connect",
    "selector",
    "types",
]
__version__ = "0.1.0"
