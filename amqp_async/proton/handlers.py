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
    MessagingHandler,
    OutgoingMessageHandler,
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
    "IncomingMessageHandler",
    "MessagingHandler",
    "OutgoingMessageHandler",
    "Reject",
    "Release",
    "TransactionHandler",
    "TransactionalClientHandler",
]
