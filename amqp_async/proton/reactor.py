"""``proton.reactor`` under its own name: the container, link options, timers and injected events."""

from __future__ import annotations

from ._events import ApplicationEvent, EventType
from ._reactor import (
    Acceptor,
    AtLeastOnce,
    AtMostOnce,
    Backoff,
    Container,
    Copy,
    DurableSubscription,
    DynamicNodeProperties,
    EventInjector,
    Filter,
    LinkOption,
    Move,
    Reactor,
    ReceiverOption,
    Selectable,
    Selector,
    SenderOption,
    SSLConfig,
    Task,
    Transaction,
    delay_iter,
)

__all__ = [
    "Acceptor",
    "ApplicationEvent",
    "AtLeastOnce",
    "AtMostOnce",
    "Backoff",
    "Container",
    "Copy",
    "DurableSubscription",
    "DynamicNodeProperties",
    "EventInjector",
    "EventType",
    "Filter",
    "LinkOption",
    "Move",
    "Reactor",
    "ReceiverOption",
    "SSLConfig",
    "Selectable",
    "Selector",
    "SenderOption",
    "Task",
    "Transaction",
    "delay_iter",
]
