"""Conversions between our AMQP values and python-qpid-proton's, for the differential tests."""

from __future__ import annotations

import uuid
from typing import Any

import proton

from amqp_async import types as T

__all__ = ["from_proton", "to_proton"]

_SCALARS_TO_PROTON: dict[type, Any] = {
    T.symbol: proton.symbol,
    T.ulong: proton.ulong,
    T.uint: proton.uint,
    T.ushort: proton.ushort,
    T.ubyte: proton.ubyte,
    T.byte: proton.byte,
    T.short: proton.short,
    T.int32: proton.int32,
    T.float32: proton.float32,
    T.decimal32: proton.decimal32,
    T.decimal64: proton.decimal64,
    T.decimal128: proton.decimal128,
    T.char: proton.char,
    T.timestamp: proton.timestamp,
}
_SCALARS_FROM_PROTON: dict[type, Any] = {v: k for k, v in _SCALARS_TO_PROTON.items()}


def to_proton(value: Any) -> Any:
    """Our value -> the same value in proton's classes."""
    cls = type(value)
    if cls in _SCALARS_TO_PROTON:
        target = _SCALARS_TO_PROTON[cls]
        if cls is T.decimal128:
            return target(bytes(value))
        return target(value)
    if isinstance(value, list):
        return [to_proton(v) for v in value]
    if isinstance(value, dict):
        return {to_proton(k): to_proton(v) for k, v in value.items()}
    if isinstance(value, T.Described):
        return proton.Described(to_proton(value.descriptor), to_proton(value.value))
    if isinstance(value, T.Array):
        desc = proton.UNDESCRIBED if value.descriptor is T.UNDESCRIBED else to_proton(value.descriptor)
        return proton.Array(desc, int(value.type), *[to_proton(e) for e in value.elements])
    assert cls in (type(None), bool, int, float, str, bytes, uuid.UUID), cls
    return value


def from_proton(value: Any) -> Any:
    """A value proton gave -> our classes (AnnotationDict and other dict subclasses -> dict)."""
    cls = type(value)
    if cls in _SCALARS_FROM_PROTON:
        target = _SCALARS_FROM_PROTON[cls]
        if target is T.decimal128:
            return target(bytes(value))
        if target is T.float32:
            return float.__new__(T.float32, value)
        return target(value)
    if cls is memoryview:
        return bytes(value)
    if cls is list:
        return [from_proton(v) for v in value]
    if isinstance(value, dict):
        return {from_proton(k): from_proton(v) for k, v in value.items()}
    if cls is proton.Described:
        return T.Described(from_proton(value.descriptor), from_proton(value.value))
    if cls is proton.Array:
        desc = T.UNDESCRIBED if value.descriptor is proton.UNDESCRIBED else from_proton(value.descriptor)
        return T.Array(desc, value.type, *[from_proton(e) for e in value.elements])
    assert cls in (type(None), bool, int, float, str, bytes, uuid.UUID), cls
    return value
