"""``proton.handlers`` under its own name: :class:`MessagingHandler` and the handlers it is made of."""

from __future__ import annotations

from ._events import Handler
from ._handlers import (
    Acking,
    CFlowController,
    CHandshaker,
    EndpointStateHandler,
    FlowController,
    Handshaker,
    IncomingMessageHandler,
    IOHandler,
    MessagingHandler,
    OutgoingMessageHandler,
    PythonIO,
    Reject,
    Release,
    TransactionalClientHandler,
    TransactionHandler,
)

__all__ = [
    "Acking",
    "CFlowController",
    "CHandshaker",
    "EndpointStateHandler",
    "FlowController",
    "Handler",
    "Handshaker",
    "IOHandler",
    "IncomingMessageHandler",
    "MessagingHandler",
    "OutgoingMessageHandler",
    "PythonIO",
    "Reject",
    "Release",
    "TransactionHandler",
    "TransactionalClientHandler",
]
