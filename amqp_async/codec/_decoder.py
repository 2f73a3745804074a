"""AMQP 1.0 type decoding (spec §1.6): a dispatch table indexed by format code.

``decode_value(data, offset, depth)`` reads one value and returns it with the offset just past it. Every entry of
``_DECODERS`` checks that the bytes it needs are there before reading them, so malformed or hostile input raises
:class:`DecodeError` (with the offset and the reason) and nothing else:

- a size or count larger than what remains fails at once, before anything is allocated for it;
- every element of a list, map or array takes at least one byte, so a count beyond the size fails too;
- nesting deeper than :data:`MAX_DEPTH` fails before Python's own recursion limit is near.

Values come back as the types ``amqp_async.types`` defines (``uint``, ``symbol``, ...), built with
``int.__new__``/``str.__new__`` to skip the range checks that the bytes already guarantee.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from ..errors import DecodeError
from ..types import (
    UNDESCRIBED,
    Array,
    Described,
    TypeCode,
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

__all__ = ["MAX_DEPTH", "MAX_ZERO_WIDTH_ELEMENTS", "Buffer", "decode_value", "register_described"]

Buffer = bytes | bytearray | memoryview
Decoder = Callable[[Any, int, int], tuple[Any, int]]

#: Deepest nesting of lists, maps, arrays and described values that decoding accepts.
MAX_DEPTH = 64

#: Most elements an array of zero-width elements (nulls, true, false, uint0, ulong0, list0) may claim: their
#: count is not bounded by the bytes they take, so it is bounded here.
MAX_ZERO_WIDTH_ELEMENTS = 1 << 16

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


# --- compound values ---------------------------------------------------------------------------------------


def _compound_bounds(data: Any, offset: int, wide: bool, check_count: bool = True) -> tuple[int, int, int]:
    """Read a compound header at ``offset``: return (count, first item offset, end offset).

    §1.6.22: the size counts the bytes after the size field, the count field included. Each item takes at
    least one byte, so a count beyond the remaining size is malformed and refused before any allocation.
    """
    length = len(data)
    if wide:
        if offset + 8 > length:
            raise _truncated(offset, 8, data)
        size, count = _unpack_II(data, offset)
        first = offset + 8
        end = offset + 4 + size
        if size < 4:
            raise DecodeError(f"compound size {size} cannot hold its 4-byte count", offset=offset)
    else:
        if offset + 2 > length:
            raise _truncated(offset, 2, data)
        size, count = _unpack_BB(data, offset)
        first = offset + 2
        end = offset + 1 + size
        if size < 1:
            raise DecodeError("compound size 0 cannot hold its count", offset=offset)
    if end > length:
        raise _truncated(offset, end - offset, data)
    if check_count and count > end - first:
        raise DecodeError(f"count {count} exceeds the {end - first} bytes of the compound", offset=offset)
    return count, first, end


def _compound_error(data: Any, offset: int, wide: bool, depth: int) -> DecodeError:
    """Explain why the compound header at ``offset`` is unacceptable (the slow path of the decoders below)."""
    if depth >= MAX_DEPTH:
        return DecodeError(f"nesting deeper than {MAX_DEPTH}", offset=offset)
    try:
        _compound_bounds(data, offset, wide)
    except DecodeError as exc:
        return exc
    return DecodeError("invalid compound header", offset=offset)  # pragma: no cover - bounds accepted it


def _dec_list8(data: Any, offset: int, depth: int) -> tuple[Any, int]:
    # The common case inline: §1.6.22 list8 = size (1 byte, counting the count byte) + count (1 byte) + items.
    try:
        end = offset + 1 + data[offset]
        count = data[offset + 1]
    except IndexError:
        raise _truncated(offset, 2, data) from None
    position = offset + 2
    if end > len(data) or count > end - position or depth >= MAX_DEPTH:
        raise _compound_error(data, offset, False, depth)
    # _list_items inlined: lists are the most common compound (every performative and section is one).
    depth += 1
    decoders = _DECODERS
    items: list[Any] = []
    start = position
    try:
        while count:
            code = data[position]
            # The commonest items skip the call to their decoder: null (performatives are full of them) and
            # str8. A str8 running past the list's end is caught by the size check below.
            if code == 0x40:
                items.append(None)
                position += 1
            elif code == 0xA1:
                start = position + 2
                position = start + data[position + 1]
                if position > end:
                    raise _overrun(start - 2, "string", "list")
                items.append(data[start:position].decode())
            elif code == 0xA3:  # sym8: content types, capabilities
                start = position + 2
                position = start + data[position + 1]
                if position > end:
                    raise _overrun(start - 2, "symbol", "list")
                items.append(_SYMBOL_CACHE.get(data[start:position]) or _symbol(data, start, position))
            elif code == 0x41 or code == 0x42:  # true / false: header and performative flags
                items.append(code == 0x41)
                position += 1
            elif code == 0x80:  # ulong: message ids (proton's C clients number their messages so)
                if position + 9 > len(data):
                    raise _truncated(position + 1, 8, data)
                items.append(_new_int(ulong, _unpack_Q(data, position + 1)[0]))
                position += 9
            else:
                value, position = decoders[code](data, position + 1, depth)
                items.append(value)
            count -= 1
    except IndexError:
        raise _truncated(position, 1, data) from None
    except UnicodeDecodeError as exc:
        raise _bad_utf8(exc, start) from None
    if position != end:
        raise DecodeError(f"list size says it ends at {end}, its items end at {position}", offset=offset)
    return items, end


def _dec_list32(data: Any, offset: int, depth: int) -> tuple[Any, int]:
    if depth >= MAX_DEPTH:
        raise DecodeError(f"nesting deeper than {MAX_DEPTH}", offset=offset)
    count, position, end = _compound_bounds(data, offset, True)
    return _list_items(data, position, end, count, depth + 1, offset)


def _list_items(data: Any, position: int, end: int, count: int, depth: int, offset: int) -> tuple[Any, int]:
    decoders = _DECODERS
    items: list[Any] = []
    append = items.append
    # An item that runs past the list's end is caught by the size check below; one that runs past the data's
    # end raises IndexError (or a truncation error) in its decoder.
    try:
        while count:
            value, position = decoders[data[position]](data, position + 1, depth)
            append(value)
            count -= 1
    except IndexError:
        raise _truncated(position, 1, data) from None
    if position != end:
        raise DecodeError(f"list size says it ends at {end}, its items end at {position}", offset=offset)
    return items, end


def _dec_list0(data: Any, offset: int, depth: int) -> tuple[Any, int]:
    return [], offset


def _dec_map8(data: Any, offset: int, depth: int) -> tuple[Any, int]:
    try:
        end = offset + 1 + data[offset]
        count = data[offset + 1]
    except IndexError:
        raise _truncated(offset, 2, data) from None
    position = offset + 2
    if end > len(data) or count > end - position or depth >= MAX_DEPTH:
        raise _compound_error(data, offset, False, depth)
    return _map_items(data, position, end, count, depth + 1, offset)


def _dec_map32(data: Any, offset: int, depth: int) -> tuple[Any, int]:
    # The common case inline (proton writes every message's map body as a map32): size and count, 4 bytes each.
    position = offset + 8
    if position <= len(data):
        size, count = _unpack_II(data, offset)
        end = offset + 4 + size
        if size >= 4 and end <= len(data) and count <= end - position and depth < MAX_DEPTH:
            return _map_items(data, position, end, count, depth + 1, offset)
    raise _compound_error(data, offset, True, depth)


def _map_items(data: Any, position: int, end: int, count: int, depth: int, offset: int) -> tuple[Any, int]:
    if count & 1:
        raise DecodeError(f"map holds an odd number of items ({count})", offset=offset)
    result: dict[Any, Any] = {}
    decoders = _DECODERS
    key_offset = start = position
    count >>= 1
    try:
        while count:
            key_offset = position
            code = data[position]
            # Keys are nearly always str8 (application properties) or sym8 (annotations): decode them inline.
            if code == 0xA1:
                start = position + 2
                position = start + data[position + 1]
                if position > end:
                    raise _overrun(start - 2, "string", "map")
                key = data[start:position].decode()
            elif code == 0xA3:
                start = position + 2
                position = start + data[position + 1]
                if position > end:
                    raise _overrun(start - 2, "symbol", "map")
                key = _SYMBOL_CACHE.get(data[start:position]) or _symbol(data, start, position)
            else:
                key, position = decoders[code](data, position + 1, depth)
            code = data[position]
            if code == 0xA1:
                start = position + 2
                position = start + data[position + 1]
                if position > end:
                    raise _overrun(start - 2, "string", "map")
                value = data[start:position].decode()
            elif code == 0x55:  # smalllong: small integer property values
                value = data[position + 1]
                if value > 0x7F:
                    value -= 0x100
                position += 2
            elif code == 0x54:  # smallint: small int values (proton's int, as in its examples' map bodies)
                value = _SMALLINTS[data[position + 1]]
                position += 2
            elif code == 0x71:  # int: larger ones
                if position + 5 > len(data):
                    raise _truncated(position + 1, 4, data)
                value = _new_int(int32, _unpack_i(data, position + 1)[0])
                position += 5
            else:
                value, position = decoders[code](data, position + 1, depth)
            result[key] = value
            count -= 1
    except UnicodeDecodeError as exc:
        raise _bad_utf8(exc, start) from None
    except IndexError:
        raise _truncated(position, 1, data) from None
    except TypeError:
        raise DecodeError("map key cannot be a Python dict key (unhashable)", offset=key_offset) from None
    if position != end:
        raise DecodeError(f"map size says it ends at {end}, its items end at {position}", offset=offset)
    return result, end


# Described values whose descriptor names a registered composite type decode to that type (§1.3).
_DESCRIBED_FACTORIES: dict[Any, Callable[[Any], Any]] = {}


def _dec_described(data: Any, offset: int, depth: int) -> tuple[Any, int]:
    if depth >= MAX_DEPTH:
        raise DecodeError(f"nesting deeper than {MAX_DEPTH}", offset=offset)
    if offset >= len(data):
        raise _truncated(offset, 1, data)
    depth += 1
    descriptor, position = _DECODERS[data[offset]](data, offset + 1, depth)
    if position >= len(data):
        raise DecodeError("described value has a descriptor but no value", offset=position)
    value, end = _DECODERS[data[position]](data, position + 1, depth)
    descriptor_type = descriptor.__class__
    if descriptor_type is ulong or descriptor_type is symbol:
        factory = _DESCRIBED_FACTORIES.get(descriptor)
        if factory is not None:
            try:
                return factory(value), end
            except DecodeError as exc:
                raise DecodeError(exc.reason, offset=offset - 1) from None
            except (TypeError, ValueError) as exc:
                raise DecodeError(f"invalid {descriptor!r}: {exc}", offset=offset - 1) from None
    try:
        return Described(descriptor, value), end
    except TypeError as exc:  # pragma: no cover - Described accepts anything
        raise DecodeError(str(exc), offset=offset) from None


def register_described(code: int, name: str, factory: Callable[[Any], Any]) -> None:
    """Decode values described by ``ulong(code)`` or ``symbol(name)`` as ``factory(value)``.

    The factory may raise :class:`DecodeError` (or TypeError/ValueError) for a value it cannot accept; the
    decoder re-raises it as a :class:`DecodeError` at the described value's offset.
    """
    _DESCRIBED_FACTORIES[_new_int(ulong, code)] = factory
    _DESCRIBED_FACTORIES[_new_str(symbol, name)] = factory


# --- arrays ------------------------------------------------------------------------------------------------
#
# §1.6.24: one constructor, then ``count`` elements without constructors. Element runs of fixed width unpack
# in one struct call; the rest loop over the element decoder of the shared constructor.

_ELEMENT_TYPES: dict[int, TypeCode] = {
    0x40: TypeCode.NULL,
    0x41: TypeCode.BOOL,
    0x42: TypeCode.BOOL,
    0x56: TypeCode.BOOL,
    0x50: TypeCode.UBYTE,
    0x60: TypeCode.USHORT,
    0x70: TypeCode.UINT,
    0x52: TypeCode.UINT,
    0x43: TypeCode.UINT,
    0x80: TypeCode.ULONG,
    0x53: TypeCode.ULONG,
    0x44: TypeCode.ULONG,
    0x51: TypeCode.BYTE,
    0x61: TypeCode.SHORT,
    0x71: TypeCode.INT,
    0x54: TypeCode.INT,
    0x81: TypeCode.LONG,
    0x55: TypeCode.LONG,
    0x72: TypeCode.FLOAT,
    0x82: TypeCode.DOUBLE,
    0x74: TypeCode.DECIMAL32,
    0x84: TypeCode.DECIMAL64,
    0x94: TypeCode.DECIMAL128,
    0x73: TypeCode.CHAR,
    0x83: TypeCode.TIMESTAMP,
    0x98: TypeCode.UUID,
    0xA0: TypeCode.BINARY,
    0xB0: TypeCode.BINARY,
    0xA1: TypeCode.STRING,
    0xB1: TypeCode.STRING,
    0xA3: TypeCode.SYMBOL,
    0xB3: TypeCode.SYMBOL,
    0x45: TypeCode.LIST,
    0xC0: TypeCode.LIST,
    0xD0: TypeCode.LIST,
    0xC1: TypeCode.MAP,
    0xD1: TypeCode.MAP,
    0xE0: TypeCode.ARRAY,
    0xF0: TypeCode.ARRAY,
}

# Fixed-width element runs: format code -> (struct letter, width, result class or None for builtins).
_FIXED_RUNS: dict[int, tuple[str, int, type | None]] = {
    0x50: ("B", 1, ubyte),
    0x60: ("H", 2, ushort),
    0x70: ("I", 4, uint),
    0x52: ("B", 1, uint),
    0x80: ("Q", 8, ulong),
    0x53: ("B", 1, ulong),
    0x51: ("b", 1, byte),
    0x61: ("h", 2, short),
    0x71: ("i", 4, int32),
    0x54: ("b", 1, int32),
    0x81: ("q", 8, None),
    0x55: ("b", 1, None),
    0x72: ("f", 4, float32),
    0x82: ("d", 8, None),
    0x74: ("I", 4, decimal32),
    0x84: ("Q", 8, decimal64),
    0x83: ("q", 8, timestamp),
}

_ZERO_WIDTH: dict[int, Any] = {
    0x40: None,
    0x41: True,
    0x42: False,
    0x43: _new_int(uint, 0),
    0x44: _new_int(ulong, 0),
}


def _decode_elements(data: Any, code: int, position: int, end: int, count: int, depth: int) -> tuple[list[Any], int]:
    if code in _ZERO_WIDTH:
        return [_ZERO_WIDTH[code]] * count, position
    if code == 0x45:
        return [[] for _ in range(count)], position
    run = _FIXED_RUNS.get(code)
    if run is not None:
        letter, width, cls = run
        stop = position + width * count
        if stop > end:
            raise _truncated(position, width * count, data)
        values = struct.unpack_from(f">{count}{letter}", data, position)
        if cls is None:
            return list(values), stop
        new = _new_float if cls is float32 else _new_int
        return [new(cls, value) for value in values], stop
    element_decoder = _DECODERS[code]
    elements = []
    for _ in range(count):
        if position >= end and code not in _ZERO_WIDTH:
            raise DecodeError("array elements overrun the array's size", offset=position)
        value, position = element_decoder(data, position, depth)
        elements.append(value)
    return elements, position


def _array(wide: bool) -> Decoder:
    def decode_array(data: Any, offset: int, depth: int) -> tuple[Any, int]:
        if depth >= MAX_DEPTH:
            raise DecodeError(f"nesting deeper than {MAX_DEPTH}", offset=offset)
        # The count is checked below, once the element width is known.
        count, position, end = _compound_bounds(data, offset, wide, check_count=False)
        depth += 1
        if position >= end:
            raise DecodeError("array has no element constructor", offset=position)
        descriptor: Any = UNDESCRIBED
        code = data[position]
        if code == 0x00:
            if position + 1 >= end:
                raise DecodeError("array descriptor is missing", offset=position)
            descriptor, position = _DECODERS[data[position + 1]](data, position + 2, depth)
            if position >= end:
                raise DecodeError("array has no element constructor after its descriptor", offset=position)
            code = data[position]
        type_code = _ELEMENT_TYPES.get(code)
        if type_code is None:
            raise DecodeError(f"invalid array element constructor {code:#04x}", offset=position)
        # Elements take at least one byte each, except for zero-width constructors (null, true, false, uint0,
        # ulong0, list0), whose count alone would size the result: those are capped.
        if code in _ZERO_WIDTH or code == 0x45:
            if count > MAX_ZERO_WIDTH_ELEMENTS:
                raise DecodeError(
                    f"array of {count} zero-width elements exceeds the limit of {MAX_ZERO_WIDTH_ELEMENTS}",
                    offset=offset,
                )
        elif count > end - position - 1:
            raise DecodeError(f"count {count} exceeds the {end - position - 1} bytes of the array", offset=offset)
        elements, position = _decode_elements(data, code, position + 1, end, count, depth)
        if position != end:
            raise DecodeError(f"array size says it ends at {end}, its elements end at {position}", offset=offset)
        return Array(descriptor, type_code, *elements), end

    return decode_array


# --- dispatch ----------------------------------------------------------------------------------------------


def _invalid(code: int) -> Decoder:
    def decode_invalid(data: Any, offset: int, depth: int) -> tuple[Any, int]:
        raise DecodeError(f"invalid format code {code:#04x}", offset=offset - 1)

    return decode_invalid


_DECODERS: list[Decoder] = [_invalid(code) for code in range(256)]
_DECODERS[0x00] = _dec_described
_DECODERS[0x40] = _dec_null
_DECODERS[0x41] = _dec_true
_DECODERS[0x42] = _dec_false
_DECODERS[0x56] = _dec_boolean
_DECODERS[0x50] = _one_byte(ubyte, signed=False)[0]
_DECODERS[0x60] = _fixed(_unpack_H, 2, ushort)
_DECODERS[0x70] = _fixed(_unpack_I, 4, uint)
_DECODERS[0x52] = _one_byte(uint, signed=False)[0]
_DECODERS[0x43] = _zero(uint)
_DECODERS[0x80] = _fixed(_unpack_Q, 8, ulong)
_DECODERS[0x53] = _one_byte(ulong, signed=False)[0]
_DECODERS[0x44] = _zero(ulong)
_DECODERS[0x51] = _one_byte(byte, signed=True)[0]
_DECODERS[0x61] = _fixed(_unpack_h, 2, short)
_DECODERS[0x71] = _fixed(_unpack_i, 4, int32)
_DECODERS[0x54], _SMALLINTS = _one_byte(int32, signed=True)
_DECODERS[0x81] = _fixed(_unpack_q, 8, None)
_DECODERS[0x55] = _fixed(_unpack_b, 1, None)
_DECODERS[0x72] = _fixed(_unpack_f, 4, float32)
_DECODERS[0x82] = _fixed(_unpack_d, 8, None)
_DECODERS[0x74] = _fixed(_unpack_I, 4, decimal32)
_DECODERS[0x84] = _fixed(_unpack_Q, 8, decimal64)
_DECODERS[0x94] = _dec_decimal128
_DECODERS[0x73] = _dec_char
_DECODERS[0x83] = _fixed(_unpack_q, 8, timestamp)
_DECODERS[0x98] = _dec_uuid
_DECODERS[0xA0] = _dec_vbin8
_DECODERS[0xB0] = _dec_vbin32
_DECODERS[0xA1] = _dec_str8
_DECODERS[0xB1] = _dec_str32
_DECODERS[0xA3] = _dec_sym8
_DECODERS[0xB3] = _dec_sym32
_DECODERS[0x45] = _dec_list0
_DECODERS[0xC0] = _dec_list8
_DECODERS[0xD0] = _dec_list32
_DECODERS[0xC1] = _dec_map8
_DECODERS[0xD1] = _dec_map32
_DECODERS[0xE0] = _array(False)
_DECODERS[0xF0] = _array(True)


def decode_value(data: Buffer, offset: int = 0, depth: int = 0) -> tuple[Any, int]:
    """Decode the value at ``offset`` of ``data``; return it and the offset just past it.

    Raises:
        DecodeError: the bytes are not a valid AMQP encoding (truncated, bad format code, sizes that lie,
            invalid UTF-8, nesting deeper than :data:`MAX_DEPTH`, ...).
    """
    if data.__class__ is not bytes:
        # The decoders slice ``bytes`` so that binary values come out as ``bytes`` with one copy, and strings
        # decode without a conversion; other buffers are copied once here.
        data = bytes(data)
    if offset >= len(data) or offset < 0:
        raise DecodeError("no value: the data ends here", offset=offset)
    return _DECODERS[data[offset]](data, offset + 1, depth)
