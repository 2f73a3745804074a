"""Qpid Proton's Python API on amqp_async: programs written for ``proton`` run with ``amqp_async.proton`` instead.

The callback API runs on our engine: :mod:`amqp_async.proton.reactor` has the ``Container`` (and link options,
timers, injected events), :mod:`amqp_async.proton.handlers` the ``MessagingHandler``, and
:mod:`amqp_async.proton.utils` the blocking API. This module has the endpoints (:class:`Connection`,
:class:`Session`, :class:`Sender`, :class:`Receiver`, :class:`Terminus`), :class:`Delivery`, :class:`Event`,
:class:`Transport`, :class:`SSLDomain`, :class:`SASL`, and the data layer: :class:`Data` (proton's navigable tree of
AMQP values), :class:`Url`, :class:`Condition`, proton's exceptions, :class:`PropertyDict`, :class:`AnnotationDict`,
:class:`SymbolList`, :class:`Message` and the AMQP types under proton's names. See ``docs/proton.md`` for what differs.
"""

from __future__ import annotations

import logging

from ..types import (
    UNDESCRIBED,
    Array,
    Described,
    byte,
    char,
    decimal32,
    decimal64,
    decimal128,
    float32,
    int32,
    short,
    symbol,
    timestamp,
    ubyte,
    uint,
    ulong,
    ushort,
)
from ._condition import Condition
from ._data import Data
from ._delivery import Delivery, Disposition, DispositionType
from ._endpoints import Connection, Endpoint, Link, Receiver, Sender, Session, Terminus
from ._events import ApplicationEvent, Collector, Event, EventBase, EventType, Handler
from ._exceptions import (
    ConnectionException,
    DataException,
    Interrupt,
    LinkException,
    MessageException,
    ProtonException,
    SessionException,
    SSLException,
    SSLUnavailable,
    Timeout,
    TransportException,
)
from ._message import Message
from ._restricted import AnnotationDict, PropertyDict, SymbolList
from ._transport import SASL, SSL, SSLDomain, SSLSessionDetails, Transport
from ._url import Url

# As proton: the "proton" logger (MessagingHandler's error reports) stays silent unless the application
# configures logging.
logging.getLogger("proton").addHandler(logging.NullHandler())

#: proton's version constants: the proton API version this module follows (python-qpid-proton 0.40.0's values).
VERSION_MAJOR = 0
VERSION_MINOR = 40
VERSION_POINT = 0
VERSION = (VERSION_MAJOR, VERSION_MINOR, VERSION_POINT)
#: proton's language constants: this implementation is Python all the way down.
API_LANGUAGE = "Python"
IMPLEMENTATION_LANGUAGE = "Python"

__all__ = [
    "API_LANGUAGE",
    "IMPLEMENTATION_LANGUAGE",
    "SASL",
    "SSL",
    "UNDESCRIBED",
    "VERSION",
    "VERSION_MAJOR",
    "VERSION_MINOR",
    "VERSION_POINT",
    "AnnotationDict",
    "ApplicationEvent",
    "Array",
    "Collector",
    "Condition",
    "Connection",
    "ConnectionException",
    "Data",
    "DataException",
    "Delivery",
    "Described",
    "Disposition",
    "DispositionType",
    "Endpoint",
    "Event",
    "EventBase",
    "EventType",
    "Handler",
    "Interrupt",
    "Link",
    "LinkException",
    "Message",
    "MessageException",
    "PropertyDict",
    "ProtonException",
    "Receiver",
    "SSLDomain",
    "SSLException",
    "SSLSessionDetails",
    "SSLUnavailable",
    "Sender",
    "Session",
    "SessionException",
    "SymbolList",
    "Terminus",
    "Timeout",
    "Transport",
    "TransportException",
    "Url",
    "byte",
    "char",
    "decimal32",
    "decimal64",
    "decimal128",
    "float32",
    "int32",
    "short",
    "symbol",
    "timestamp",
    "ubyte",
    "uint",
    "ulong",
    "ushort",
]
