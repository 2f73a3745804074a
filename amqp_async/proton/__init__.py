"""Qpid Proton's Python API on amqp_async: programs written for ``proton`` run with ``amqp_async.proton`` instead.

This first part is the data layer: :class:`Data` (proton's navigable tree of AMQP values), :class:`Url`,
:class:`Condition`, proton's exceptions, :class:`PropertyDict`, :class:`AnnotationDict`, :class:`SymbolList`,
:class:`Message` and the AMQP types under proton's names. The rest of proton's API (``Container``, the endpoint and
delivery classes, ``MessagingHandler``, ``proton.reactor``, ``proton.handlers``, ``proton.utils``) is coming.
"""

from __future__ import annotations

from ..message import Message
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
from ._restricted import AnnotationDict, PropertyDict, SymbolList
from ._url import Url

__all__ = [
    "UNDESCRIBED",
    "AnnotationDict",
    "Array",
    "Condition",
    "ConnectionException",
    "Data",
    "DataException",
    "Described",
    "Interrupt",
    "LinkException",
    "Message",
    "MessageException",
    "PropertyDict",
    "ProtonException",
    "SSLException",
    "SSLUnavailable",
    "SessionException",
    "SymbolList",
    "Timeout",
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
