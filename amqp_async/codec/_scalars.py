"""AMQP 1.0 scalar decoding (spec §1.6.2-§1.6.21): the decoders of the fixed- and variable-width values, by format
code, in :data:`_SCALAR_DECODERS`, which ``_decoder.py`` completes with its compound and described decoders.

Each decoder takes ``(data, offset, depth)``, ``offset`` just past the format code, and returns the value and the
offset past it; it checks that the bytes it needs are there before reading them, and raises
:class:`~amqp_async.errors.DecodeError` for bytes that are not a valid encoding, nothing else.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from ..errors import DecodeError
from ..types import (
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
from ._uuid import uuid_class

__all__ = ["Decoder"]

#: A decoder: ``(data, offset, depth) -> (value, offset past it)``.
Decoder = Callable[[Any, int, int], tuple[Any, int]]

_unpack_B = struct.Struct(">B").unpack_from
_unpack_b = struct.Struct(">b").unpack_from
_unpack_H = struct.Struct(">H").unpack_from
_unpack_h = struct.Struct(">h").unpack_from
_unpack_I = struct.Struct(">I").unpack_from
_unpack_i = struct.Struct(">i").unpack_from
_unpack_Q = struct.Struct(">Q").unpack_from
_unpack_q = struct.Struct(">q").unpack_from
_unpack_f = struct.Struct(">f").unpack_from
_unpack_d = struct.Struct(">d").unpack_from
_unpack_BB = struct.Struct(">BB").unpack_from
_unpack_II = struct.Struct(">II").unpack_from

_new_int = int.__new__
_new_str = str.__new__
_new_float = float.__new__
_new_bytes = bytes.__new__


def _truncated(offset: int, needed: int, data: Any) -> DecodeError:
    return DecodeError(f"needs {needed} more bytes but only {max(len(data) - offset, 0)} remain", offset=offset)


def _overrun(offset: int, what: str, container: str) -> DecodeError:
    return DecodeError(f"{what} runs past the end of its {container}", offset=offset)


# --- fixed-width values ------------------------------------------------------------------------------------


def _dec_null(data: Any, offset: int, depth: int) -> tuple[Any, int]:
    return None, offset


def _dec_true(data: Any, offset: int, depth: int) -> tuple[Any, int]:
    return True, offset


def _dec_false(data: Any, offset: int, depth: int) -> tuple[Any, int]:
    return False, offset


def _dec_boolean(data: Any, offset: int, depth: int) -> tuple[Any, int]:
    if offset >= len(data):
        raise _truncated(offset, 1, data)
    value = data[offset]
    if value > 1:
        raise DecodeError(f"boolean byte must be 0 or 1, got {value}", offset=offset)
    return value == 1, offset + 1


def _fixed(unpack: Callable[[Any, int], tuple[Any, ...]], width: int, cls: type | None) -> Decoder:
    if cls is None:

        def decode_plain(data: Any, offset: int, depth: int) -> tuple[Any, int]:
            end = offset + width
            if end > len(data):
                raise _truncated(offset, width, data)
            return unpack(data, offset)[0], end

        return decode_plain

    new = _new_float if issubclass(cls, float) else _new_int

    def decode_typed(data: Any, offset: int, depth: int) -> tuple[Any, int]:
        end = offset + width
        if end > len(data):
            raise _truncated(offset, width, data)
        return new(cls, unpack(data, offset)[0]), end

    return decode_typed


def _zero(cls: type) -> Decoder:
    zero: Any = _new_int(cls, 0)

    def decode_zero(data: Any, offset: int, depth: int) -> tuple[Any, int]:
        return zero, offset

    return decode_zero


def _one_byte(cls: type, signed: bool) -> tuple[Decoder, tuple[Any, ...]]:
    """The decoder of a one-byte integer encoding (smalluint, smallulong, smallint, ubyte, byte) and its table.

    The 256 values are made once: a decode is a table lookup, not a new instance (the classes are immutable
    and slotted, so one instance serves every message; a delivery id or a message id is one of these).
    """
    table: tuple[Any, ...] = tuple(
        _new_int(cls, value - 256 if signed and value > 0x7F else value) for value in range(256)
    )

    def decode_one_byte(data: Any, offset: int, depth: int) -> tuple[Any, int]:
        try:
            return table[data[offset]], offset + 1
        except IndexError:
            raise _truncated(offset, 1, data) from None

    return decode_one_byte, table


def _dec_decimal128(data: Any, offset: int, depth: int) -> tuple[Any, int]:
    end = offset + 16
    if end > len(data):
        raise _truncated(offset, 16, data)
    return _new_bytes(decimal128, data[offset:end]), end


def _dec_char(data: Any, offset: int, depth: int) -> tuple[Any, int]:
    end = offset + 4
    if end > len(data):
        raise _truncated(offset, 4, data)
    point = _unpack_I(data, offset)[0]
    if point > 0x10FFFF or 0xD800 <= point <= 0xDFFF:
        raise DecodeError(f"char {point:#x} is not a Unicode scalar value", offset=offset)
    return _new_str(char, chr(point)), end


#: uuid.UUID once the first uuid was decoded (see _uuid.py: importing uuid with the codec loads subprocess on 3.10).
_UUID: Any = None


def _dec_uuid(data: Any, offset: int, depth: int) -> tuple[Any, int]:
    global _UUID
    end = offset + 16
    if end > len(data):
        raise _truncated(offset, 16, data)
    cls = _UUID
    if cls is None:
        cls = _UUID = uuid_class()
    # The same value as UUID(bytes=...), which converts its 16 bytes with int.from_bytes too; 10% faster without
    # the copy to bytes and the length check (the bounds are checked above).
    return cls(int=int.from_bytes(data[offset:end], "big")), end


# --- variable-width values ---------------------------------------------------------------------------------


def _dec_vbin8(data: Any, offset: int, depth: int) -> tuple[Any, int]:
    try:
        start = offset + 1
        end = start + data[offset]
    except IndexError:
        raise _truncated(offset, 1, data) from None
    if end > len(data):
        raise _truncated(start, end - start, data)
    return data[start:end], end


def _dec_vbin32(data: Any, offset: int, depth: int) -> tuple[Any, int]:
    start = offset + 4
    if start > len(data):
        raise _truncated(offset, 4, data)
    end = start + _unpack_I(data, offset)[0]
    if end > len(data):
        raise _truncated(start, end - start, data)
    return data[start:end], end


def _bad_utf8(exc: UnicodeDecodeError, start: int) -> DecodeError:
    return DecodeError(f"invalid UTF-8 in string: {exc.reason}", offset=start + exc.start)


def _dec_str8(data: Any, offset: int, depth: int) -> tuple[Any, int]:
    try:
        start = offset + 1
        end = start + data[offset]
        if end <= len(data):
            return data[start:end].decode(), end
    except IndexError:
        raise _truncated(offset, 1, data) from None
    except UnicodeDecodeError as exc:
        raise _bad_utf8(exc, offset + 1) from None
    raise _truncated(start, end - start, data)


def _dec_str32(data: Any, offset: int, depth: int) -> tuple[Any, int]:
    start = offset + 4
    if start > len(data):
        raise _truncated(offset, 4, data)
    end = start + _unpack_I(data, offset)[0]
    if end > len(data):
        raise _truncated(start, end - start, data)
    try:
        return data[start:end].decode(), end
    except UnicodeDecodeError as exc:
        raise _bad_utf8(exc, start) from None


# Symbols repeat endlessly on the wire (descriptors, capabilities, content types, annotation keys): a bounded
# cache returns the same object for the same bytes and skips the ASCII decode.
_SYMBOL_CACHE: dict[bytes, symbol] = {}
_SYMBOL_CACHE_LIMIT = 4096


def _symbol(data: Any, start: int, end: int) -> symbol:
    raw = data[start:end]
    cached = _SYMBOL_CACHE.get(raw)
    if cached is not None:
        return cached
    try:
        value = _new_str(symbol, str(raw, "ascii"))
    except UnicodeDecodeError as exc:
        raise DecodeError("symbol is not ASCII", offset=start + exc.start) from None
    if len(_SYMBOL_CACHE) < _SYMBOL_CACHE_LIMIT and len(raw) <= 256:
        _SYMBOL_CACHE[raw] = value
    return value


def _dec_sym8(data: Any, offset: int, depth: int) -> tuple[Any, int]:
    try:
        start = offset + 1
        end = start + data[offset]
    except IndexError:
        raise _truncated(offset, 1, data) from None
    if end > len(data):
        raise _truncated(start, end - start, data)
    cached = _SYMBOL_CACHE.get(data[start:end])
    if cached is not None:
        return cached, end
    return _symbol(data, start, end), end


def _dec_sym32(data: Any, offset: int, depth: int) -> tuple[Any, int]:
    start = offset + 4
    if start > len(data):
        raise _truncated(offset, 4, data)
    end = start + _unpack_I(data, offset)[0]
    if end > len(data):
        raise _truncated(start, end - start, data)
    return _symbol(data, start, end), end


# --- dispatch ----------------------------------------------------------------------------------------------


def _invalid(code: int) -> Decoder:
    def decode_invalid(data: Any, offset: int, depth: int) -> tuple[Any, int]:
        raise DecodeError(f"invalid format code {code:#04x}", offset=offset - 1)

    return decode_invalid


_SCALAR_DECODERS: list[Decoder] = [_invalid(code) for code in range(256)]
_SCALAR_DECODERS[0x40] = _dec_null
_SCALAR_DECODERS[0x41] = _dec_true
_SCALAR_DECODERS[0x42] = _dec_false
_SCALAR_DECODERS[0x56] = _dec_boolean
_SCALAR_DECODERS[0x50] = _one_byte(ubyte, signed=False)[0]
_SCALAR_DECODERS[0x60] = _fixed(_unpack_H, 2, ushort)
_SCALAR_DECODERS[0x70] = _fixed(_unpack_I, 4, uint)
_SCALAR_DECODERS[0x52] = _one_byte(uint, signed=False)[0]
_SCALAR_DECODERS[0x43] = _zero(uint)
_SCALAR_DECODERS[0x80] = _fixed(_unpack_Q, 8, ulong)
_SCALAR_DECODERS[0x53] = _one_byte(ulong, signed=False)[0]
_SCALAR_DECODERS[0x44] = _zero(ulong)
_SCALAR_DECODERS[0x51] = _one_byte(byte, signed=True)[0]
_SCALAR_DECODERS[0x61] = _fixed(_unpack_h, 2, short)
_SCALAR_DECODERS[0x71] = _fixed(_unpack_i, 4, int32)
_SCALAR_DECODERS[0x54], _SMALLINTS = _one_byte(int32, signed=True)
_SCALAR_DECODERS[0x81] = _fixed(_unpack_q, 8, None)
_SCALAR_DECODERS[0x55] = _fixed(_unpack_b, 1, None)
_SCALAR_DECODERS[0x72] = _fixed(_unpack_f, 4, float32)
_SCALAR_DECODERS[0x82] = _fixed(_unpack_d, 8, None)
_SCALAR_DECODERS[0x74] = _fixed(_unpack_I, 4, decimal32)
_SCALAR_DECODERS[0x84] = _fixed(_unpack_Q, 8, decimal64)
_SCALAR_DECODERS[0x94] = _dec_decimal128
_SCALAR_DECODERS[0x73] = _dec_char
_SCALAR_DECODERS[0x83] = _fixed(_unpack_q, 8, timestamp)
_SCALAR_DECODERS[0x98] = _dec_uuid
_SCALAR_DECODERS[0xA0] = _dec_vbin8
_SCALAR_DECODERS[0xB0] = _dec_vbin32
_SCALAR_DECODERS[0xA1] = _dec_str8
_SCALAR_DECODERS[0xB1] = _dec_str32
_SCALAR_DECODERS[0xA3] = _dec_sym8
_SCALAR_DECODERS[0xB3] = _dec_sym32
