"""AMQP 1.0 type encoding (spec §1.6): values appended to a ``bytearray``.

Each Python type has one encoder, found by exact class in ``_ENCODERS`` (a subclass is resolved once through its
MRO and cached). Every encoder picks the smallest encoding the spec offers for the value (§1.6: "uint0",
"smalluint", "list0", "list8", ...). Compound values are written in place: a list or map reserves the 8-bit
header, encodes its items after it, and widens the header only when the items turn out not to fit, so the
common small compound costs no extra copy.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import EncodeError
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
from ._uuid import loaded_uuid_class

__all__ = [
    "TYPE_ENCODERS",
    "Encoder",
    "encode_array",
    "encode_value",
    "register_encoder",
]

Encoder = Callable[[bytearray, Any], None]

_pack_Bb = struct.Struct(">Bb").pack
_pack_BB = struct.Struct(">BB").pack
_pack_BH = struct.Struct(">BH").pack
_pack_Bh = struct.Struct(">Bh").pack
_pack_BI = struct.Struct(">BI").pack
_pack_Bi = struct.Struct(">Bi").pack
_pack_BQ = struct.Struct(">BQ").pack
_pack_Bq = struct.Struct(">Bq").pack
_pack_Bf = struct.Struct(">Bf").pack
_pack_Bd = struct.Struct(">Bd").pack
_pack_BII = struct.Struct(">BII").pack
_pack_II = struct.Struct(">II").pack
_pack_I = struct.Struct(">I").pack

_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
_UINT64_MAX = (1 << 64) - 1
_UINT32_MAX = (1 << 32) - 1


def _range_error(type_name: str, value: Any) -> EncodeError:
    return EncodeError(f"{value!r} is out of range for AMQP {type_name}")


# --- scalars -----------------------------------------------------------------------------------------------


def _enc_null(buf: bytearray, value: Any) -> None:
    buf.append(0x40)


def _enc_bool(buf: bytearray, value: Any) -> None:
    buf.append(0x41 if value else 0x42)


def _enc_ubyte(buf: bytearray, value: Any) -> None:
    if not 0 <= value <= 0xFF:
        raise _range_error("ubyte", value)
    buf.append(0x50)
    buf.append(value)


def _enc_ushort(buf: bytearray, value: Any) -> None:
    if not 0 <= value <= 0xFFFF:
        raise _range_error("ushort", value)
    buf += _pack_BH(0x60, value)


def _enc_uint(buf: bytearray, value: Any) -> None:
    if value == 0:
        buf.append(0x43)
    elif 0 < value <= 0xFF:
        buf.append(0x52)
        buf.append(value)
    elif 0 < value <= _UINT32_MAX:
        buf += _pack_BI(0x70, value)
    else:
        raise _range_error("uint", value)


def _enc_ulong(buf: bytearray, value: Any) -> None:
    if value == 0:
        buf.append(0x44)
    elif 0 < value <= 0xFF:
        buf.append(0x53)
        buf.append(value)
    elif 0 < value <= _UINT64_MAX:
        buf += _pack_BQ(0x80, value)
    else:
        raise _range_error("ulong", value)


def _enc_byte(buf: bytearray, value: Any) -> None:
    if not -0x80 <= value <= 0x7F:
        raise _range_error("byte", value)
    buf += _pack_Bb(0x51, value)


def _enc_short(buf: bytearray, value: Any) -> None:
    if not -0x8000 <= value <= 0x7FFF:
        raise _range_error("short", value)
    buf += _pack_Bh(0x61, value)


def _enc_int(buf: bytearray, value: Any) -> None:
    if -0x80 <= value <= 0x7F:
        buf += _pack_Bb(0x54, value)
    elif -0x80000000 <= value <= 0x7FFFFFFF:
        buf += _pack_Bi(0x71, value)
    else:
        raise _range_error("int", value)


def _enc_long(buf: bytearray, value: Any) -> None:
    if -0x80 <= value <= 0x7F:
        buf += _pack_Bb(0x55, value)
    elif _INT64_MIN <= value <= _INT64_MAX:
        buf += _pack_Bq(0x81, value)
    else:
        raise _range_error("long", value)


def _enc_float(buf: bytearray, value: Any) -> None:
    try:
        buf += _pack_Bf(0x72, value)
    except (OverflowError, struct.error):
        raise _range_error("float", value) from None


def _enc_double(buf: bytearray, value: Any) -> None:
    buf += _pack_Bd(0x82, value)


def _enc_decimal32(buf: bytearray, value: Any) -> None:
    if not 0 <= value <= _UINT32_MAX:
        raise _range_error("decimal32", value)
    buf += _pack_BI(0x74, value)


def _enc_decimal64(buf: bytearray, value: Any) -> None:
    if not 0 <= value <= _UINT64_MAX:
        raise _range_error("decimal64", value)
    buf += _pack_BQ(0x84, value)


def _enc_decimal128(buf: bytearray, value: Any) -> None:
    if len(value) != 16:
        raise _range_error("decimal128", value)
    buf.append(0x94)
    buf += value


def _enc_char(buf: bytearray, value: Any) -> None:
    if len(value) != 1 or 0xD800 <= ord(value) <= 0xDFFF:  # §1.6.16: a UTF-32BE Unicode scalar value
        raise _range_error("char", value)
    buf += _pack_BI(0x73, ord(value))


def _enc_timestamp(buf: bytearray, value: Any) -> None:
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise _range_error("timestamp", value)
    buf += _pack_Bq(0x83, value)


def _enc_uuid(buf: bytearray, value: Any) -> None:
    # Reached through _ENCODERS (the value's class is uuid.UUID, or a subclass) or through TYPE_ENCODERS["uuid"]
    # (checked by _as_uuid): no check of its own.
    buf.append(0x98)
    buf += value.bytes


def _enc_binary(buf: bytearray, value: Any) -> None:
    size = len(value) if not isinstance(value, memoryview) else value.nbytes
    if size <= 0xFF:
        buf.append(0xA0)
        buf.append(size)
    elif size <= _UINT32_MAX:
        buf += _pack_BI(0xB0, size)
    else:
        raise _range_error("binary", f"<{size} bytes>")
    buf += value


def _enc_string(buf: bytearray, value: Any) -> None:
    try:
        data = value.encode("utf-8")
    except (UnicodeEncodeError, AttributeError):
        raise EncodeError(f"{value!r} is not a valid AMQP string") from None
    size = len(data)
    if size <= 0xFF:
        buf.append(0xA1)
        buf.append(size)
    elif size <= _UINT32_MAX:
        buf += _pack_BI(0xB1, size)
    else:
        raise _range_error("string", f"<{size} bytes>")
    buf += data


def _enc_symbol(buf: bytearray, value: Any) -> None:
    try:
        data = value.encode("ascii")
    except (UnicodeEncodeError, AttributeError):
        raise EncodeError(f"{value!r} is not a valid AMQP symbol (ASCII only)") from None
    size = len(data)
    if size <= 0xFF:
        buf.append(0xA3)
        buf.append(size)
    elif size <= _UINT32_MAX:
        buf += _pack_BI(0xB3, size)
    else:
        raise _range_error("symbol", f"<{size} bytes>")
    buf += data


# --- compounds ---------------------------------------------------------------------------------------------


def _finish_compound(buf: bytearray, start: int, count: int, code8: int, code32: int) -> None:
    """Fill in the header reserved at ``start`` (3 bytes: code, size8, count8), widening it if needed.

    §1.6.22/§1.6.23: the size counts the bytes after the size field (the count field included).
    """
    size8 = len(buf) - start - 2
    if size8 <= 0xFF and count <= 0xFF:
        buf[start] = code8
        buf[start + 1] = size8
        buf[start + 2] = count
    else:
        # list32/map32: 4-byte size and count; the items move 6 bytes to the right, once.
        buf[start : start + 3] = _pack_BII(code32, size8 + 3, count)


def _enc_list(buf: bytearray, value: Any) -> None:
    if not value:
        buf.append(0x45)
        return
    start = len(buf)
    buf += b"\xc0\x00\x00"
    get = _ENCODERS.get
    for item in value:
        # null and short strings inline: the commonest items of performatives and message sections.
        cls = item.__class__
        if item is None:
            buf.append(0x40)
        elif cls is str and len(item) < 64:
            try:
                data = item.encode()
            except UnicodeEncodeError:  # a lone surrogate: the codec's own error, as for every string
                _enc_string(buf, item)
            buf.append(0xA1)
            buf.append(len(data))
            buf += data
        else:
            encoder = get(cls)
            if encoder is None:
                encoder = _lookup_encoder(item)
            encoder(buf, item)
    _finish_compound(buf, start, len(value), 0xC0, 0xD0)


def _enc_map(buf: bytearray, value: Any) -> None:
    start = len(buf)
    buf += b"\xc1\x00\x00"
    get = _ENCODERS.get
    for key, item in value.items():
        if key.__class__ is str and len(key) < 64:  # application-property keys: inline, as in _enc_list
            try:
                data = key.encode()
            except UnicodeEncodeError:
                _enc_string(buf, key)
            buf.append(0xA1)
            buf.append(len(data))
            buf += data
        else:
            encoder = get(key.__class__)
            if encoder is None:
                encoder = _lookup_encoder(key)
            encoder(buf, key)
        encoder = get(item.__class__)
        if encoder is None:
            encoder = _lookup_encoder(item)
        encoder(buf, item)
    _finish_compound(buf, start, 2 * len(value), 0xC1, 0xD1)


def _enc_described(buf: bytearray, value: Any) -> None:
    buf.append(0x00)
    encode_value(buf, value.descriptor)
    encode_value(buf, value.value)


# --- arrays ------------------------------------------------------------------------------------------------
#
# An array (§1.6.24) writes one element constructor and then every element without one, so all elements must
# share a width. Each element type below returns (constructor byte, body bytes) for a run of elements, picking
# the smallest constructor that fits every element. Zero-width constructors (uint0, ulong0, list0, true/false)
# are not used inside arrays: peers handle them poorly and they cannot carry differing values.


def _fixed(code: int, fmt: str) -> Callable[[Sequence[Any]], tuple[int, bytes]]:
    def pack(elements: Sequence[Any]) -> tuple[int, bytes]:
        try:
            return code, struct.pack(f">{len(elements)}{fmt}", *elements)
        except (struct.error, OverflowError, TypeError) as exc:
            raise EncodeError(f"array element out of range for format {fmt!r}: {exc}") from None

    return pack


def _small_or_wide(
    small_code: int, small_fmt: str, low: int, high: int, wide_code: int, wide_fmt: str
) -> Callable[[Sequence[Any]], tuple[int, bytes]]:
    small = _fixed(small_code, small_fmt)
    wide = _fixed(wide_code, wide_fmt)

    def pack(elements: Sequence[Any]) -> tuple[int, bytes]:
        try:
            fits_small = all(low <= element <= high for element in elements)
        except TypeError:
            raise EncodeError(f"array elements must be integers, got {list(elements)!r}") from None
        return small(elements) if fits_small else wide(elements)

    return pack


def _variable(code8: int, code32: int, to_bytes: Callable[[Any], bytes]) -> Callable[..., tuple[int, bytes]]:
    def pack(elements: Sequence[Any]) -> tuple[int, bytes]:
        try:
            parts = [to_bytes(element) for element in elements]
        except (UnicodeEncodeError, AttributeError, TypeError) as exc:
            raise EncodeError(f"invalid array element: {exc}") from None
        out = bytearray()
        if all(len(part) <= 0xFF for part in parts):
            for part in parts:
                out.append(len(part))
                out += part
            return code8, bytes(out)
        for part in parts:
            out += _pack_I(len(part))
            out += part
        return code32, bytes(out)

    return pack


def _bools(elements: Sequence[Any]) -> tuple[int, bytes]:
    return 0x56, bytes(1 if element else 0 for element in elements)


def _nulls(elements: Sequence[Any]) -> tuple[int, bytes]:
    if any(element is not None for element in elements):
        raise EncodeError("an array of nulls may only hold None")
    return 0x40, b""


def _chars(elements: Sequence[Any]) -> tuple[int, bytes]:
    for element in elements:
        if not isinstance(element, str) or len(element) != 1 or 0xD800 <= ord(element) <= 0xDFFF:
            raise EncodeError(f"invalid char array element {element!r}")
    return 0x73, "".join(elements).encode("utf-32-be")


def _sixteen(code: int, get_bytes: Callable[[Any], bytes]) -> Callable[[Sequence[Any]], tuple[int, bytes]]:
    def pack(elements: Sequence[Any]) -> tuple[int, bytes]:
        try:
            parts = [get_bytes(element) for element in elements]
        except AttributeError as exc:
            raise EncodeError(f"invalid array element: {exc}") from None
        if any(len(part) != 16 for part in parts):
            raise EncodeError("array elements must be 16 bytes each")
        return code, b"".join(parts)

    return pack


def _compound_elements(code8: int, code32: int, header_len: int) -> Callable[[Sequence[Any]], tuple[int, bytes]]:
    """Arrays of lists, maps or arrays: encode each element alone, then strip its constructor.

    Each element is re-emitted in the shared width: the 8-bit form when every element fits it, else the
    32-bit form.
    """

    def pack(elements: Sequence[Any]) -> tuple[int, bytes]:
        bodies: list[tuple[int, bytes]] = []  # (count, items) of each element
        for element in elements:
            encoded = bytearray()
            if code8 == 0xE0:
                if not isinstance(element, Array):
                    raise EncodeError(f"array of arrays holds a non-Array {element!r}")
                _enc_array(encoded, element)
            elif code8 == 0xC0:
                if not isinstance(element, (list, tuple)):
                    raise EncodeError(f"array of lists holds a non-list {element!r}")
                _enc_list(encoded, element)
            else:
                if not isinstance(element, dict):
                    raise EncodeError(f"array of maps holds a non-dict {element!r}")
                _enc_map(encoded, element)
            head = encoded[0]
            if head == 0x45:  # list0
                bodies.append((0, b""))
            elif head == code8:
                bodies.append((encoded[2], bytes(encoded[3:])))
            else:
                count = struct.unpack_from(">I", encoded, 5)[0]
                bodies.append((count, bytes(encoded[9:])))
        out = bytearray()
        if all(len(items) + 1 <= 0xFF and count <= 0xFF for count, items in bodies):
            for count, items in bodies:
                out += _pack_BB(len(items) + 1, count)
                out += items
            return code8, bytes(out)
        for count, items in bodies:
            out += _pack_II(len(items) + 4, count)
            out += items
        return code32, bytes(out)

    return pack


def _described_elements(elements: Sequence[Any]) -> tuple[int, bytes]:
    raise EncodeError("an array's element type cannot be DESCRIBED; give the array a descriptor instead")


_ARRAY_PACKERS: dict[int, Callable[[Sequence[Any]], tuple[int, bytes]]] = {
    TypeCode.NULL: _nulls,
    TypeCode.BOOL: _bools,
    TypeCode.UBYTE: _fixed(0x50, "B"),
    TypeCode.USHORT: _fixed(0x60, "H"),
    TypeCode.UINT: _small_or_wide(0x52, "B", 0, 0xFF, 0x70, "I"),
    TypeCode.ULONG: _small_or_wide(0x53, "B", 0, 0xFF, 0x80, "Q"),
    TypeCode.BYTE: _fixed(0x51, "b"),
    TypeCode.SHORT: _fixed(0x61, "h"),
    TypeCode.INT: _small_or_wide(0x54, "b", -0x80, 0x7F, 0x71, "i"),
    TypeCode.LONG: _small_or_wide(0x55, "b", -0x80, 0x7F, 0x81, "q"),
    TypeCode.FLOAT: _fixed(0x72, "f"),
    TypeCode.DOUBLE: _fixed(0x82, "d"),
    TypeCode.DECIMAL32: _fixed(0x74, "I"),
    TypeCode.DECIMAL64: _fixed(0x84, "Q"),
    TypeCode.DECIMAL128: _sixteen(0x94, bytes),
    TypeCode.CHAR: _chars,
    TypeCode.TIMESTAMP: _fixed(0x83, "q"),
    TypeCode.UUID: _sixteen(0x98, lambda element: element.bytes),
    TypeCode.BINARY: _variable(0xA0, 0xB0, bytes),
    TypeCode.STRING: _variable(0xA1, 0xB1, lambda element: element.encode("utf-8")),
    TypeCode.SYMBOL: _variable(0xA3, 0xB3, lambda element: element.encode("ascii")),
    TypeCode.LIST: _compound_elements(0xC0, 0xD0, 3),
    TypeCode.MAP: _compound_elements(0xC1, 0xD1, 3),
    TypeCode.ARRAY: _compound_elements(0xE0, 0xF0, 3),
    TypeCode.DESCRIBED: _described_elements,
}

_TYPE_NAME_TO_CODE: dict[str, TypeCode] = {
    "null": TypeCode.NULL,
    "boolean": TypeCode.BOOL,
    "ubyte": TypeCode.UBYTE,
    "ushort": TypeCode.USHORT,
    "uint": TypeCode.UINT,
    "ulong": TypeCode.ULONG,
    "byte": TypeCode.BYTE,
    "short": TypeCode.SHORT,
    "int": TypeCode.INT,
    "long": TypeCode.LONG,
    "float": TypeCode.FLOAT,
    "double": TypeCode.DOUBLE,
    "decimal32": TypeCode.DECIMAL32,
    "decimal64": TypeCode.DECIMAL64,
    "decimal128": TypeCode.DECIMAL128,
    "char": TypeCode.CHAR,
    "timestamp": TypeCode.TIMESTAMP,
    "uuid": TypeCode.UUID,
    "binary": TypeCode.BINARY,
    "string": TypeCode.STRING,
    "symbol": TypeCode.SYMBOL,
    "list": TypeCode.LIST,
    "map": TypeCode.MAP,
    "array": TypeCode.ARRAY,
}


def _write_array(buf: bytearray, type_code: int, elements: Sequence[Any], descriptor: Any) -> None:
    packer = _ARRAY_PACKERS.get(type_code)
    if packer is None:
        raise EncodeError(f"unknown array element type {type_code!r}")
    constructor = bytearray()
    if descriptor is not UNDESCRIBED and descriptor is not None:
        constructor.append(0x00)
        encode_value(constructor, descriptor)
    element_code, body = packer(elements)
    constructor.append(element_code)
    count = len(elements)
    size8 = 1 + len(constructor) + len(body)  # count byte + constructor + elements
    if size8 <= 0xFF and count <= 0xFF:
        buf += _pack_BB(0xE0, size8)
        buf.append(count)
    else:
        size32 = size8 + 3
        if size32 > _UINT32_MAX:
            raise EncodeError("array too large for AMQP")
        buf += _pack_BII(0xF0, size32, count)
    buf += constructor
    buf += body


def _enc_array(buf: bytearray, value: Any) -> None:
    _write_array(buf, value.type, value.elements, value.descriptor)


def encode_array(buf: bytearray, type_name: str, elements: Sequence[Any], descriptor: Any = UNDESCRIBED) -> None:
    """Append an AMQP array of the primitive type ``type_name`` (e.g. ``"symbol"``) holding ``elements``."""
    try:
        type_code = _TYPE_NAME_TO_CODE[type_name]
    except KeyError:
        raise EncodeError(f"unknown AMQP type name {type_name!r}") from None
    _write_array(buf, type_code, elements, descriptor)


# --- dispatch ----------------------------------------------------------------------------------------------

_ENCODERS: dict[type, Encoder] = {
    type(None): _enc_null,
    bool: _enc_bool,
    int: _enc_long,
    float: _enc_double,
    str: _enc_string,
    bytes: _enc_binary,
    bytearray: _enc_binary,
    memoryview: _enc_binary,
    # uuid.UUID joins on its first value (see _lookup_encoder): importing uuid here would load subprocess on 3.10.
    list: _enc_list,
    tuple: _enc_list,
    dict: _enc_map,
    ubyte: _enc_ubyte,
    ushort: _enc_ushort,
    uint: _enc_uint,
    ulong: _enc_ulong,
    byte: _enc_byte,
    short: _enc_short,
    int32: _enc_int,
    timestamp: _enc_timestamp,
    float32: _enc_float,
    decimal32: _enc_decimal32,
    decimal64: _enc_decimal64,
    decimal128: _enc_decimal128,
    char: _enc_char,
    symbol: _enc_symbol,
    Described: _enc_described,
    Array: _enc_array,
}


def _lookup_encoder(value: Any) -> Encoder:
    """Find the encoder of a subclass through its MRO, and cache it for the next value of that class."""
    cls = value.__class__
    for base in cls.__mro__[1:]:
        encoder = _ENCODERS.get(base)
        if encoder is not None:
            _ENCODERS[cls] = encoder
            return encoder
    uuid_class = loaded_uuid_class()
    if uuid_class is not None and isinstance(value, uuid_class):
        _ENCODERS[cls] = _enc_uuid
        return _enc_uuid
    raise EncodeError(f"cannot encode a value of type {cls.__qualname__} as AMQP: {value!r}")


def encode_value(buf: bytearray, value: Any) -> None:
    """Append the AMQP encoding of ``value``, chosen by its Python type, to ``buf``.

    Raises:
        EncodeError: the value is of a type AMQP cannot carry, or out of its type's range.
    """
    encoder = _ENCODERS.get(value.__class__)
    if encoder is None:
        encoder = _lookup_encoder(value)
    encoder(buf, value)


def register_encoder(cls: type, encoder: Encoder) -> None:
    """Make ``encode_value`` use ``encoder`` for instances of ``cls`` (composite types register here)."""
    _ENCODERS[cls] = encoder


def _typed(encoder: Encoder, convert: Callable[[Any], Any]) -> Encoder:
    """An encoder for a field whose AMQP type is fixed, accepting any value ``convert`` maps to that type."""

    def encode_typed(buf: bytearray, value: Any) -> None:
        if value is None:
            buf.append(0x40)
            return
        try:
            converted = convert(value)
        except (TypeError, ValueError) as exc:
            raise EncodeError(f"{value!r} cannot be encoded as {encoder.__name__[5:]}: {exc}") from None
        encoder(buf, converted)

    return encode_typed


def _as_int(value: Any) -> int:
    if isinstance(value, (bool, float)):
        raise TypeError("not an integer")
    return int(value)


def _as_float(value: Any) -> float:
    if isinstance(value, bool):
        raise TypeError("not a number")
    return float(value)


def _as_list(value: Any) -> Any:
    if not isinstance(value, (list, tuple)):
        raise TypeError("not a list")
    return value


def _as_map(value: Any) -> Any:
    if not isinstance(value, dict):
        raise TypeError("not a dict")
    return value


def _as_array(value: Any) -> Any:
    if not isinstance(value, Array):
        raise TypeError("not an Array")
    return value


def _as_bytes(value: Any) -> Any:
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise TypeError("not bytes")
    return value


def _as_str(value: Any) -> Any:
    if not isinstance(value, str):
        raise TypeError("not a str")
    return value


def _as_uuid(value: Any) -> Any:
    uuid_class = loaded_uuid_class()
    if uuid_class is None or not isinstance(value, uuid_class):
        raise TypeError("not a uuid.UUID")
    return value


def _as_double(value: Any) -> float:
    number = _as_float(value)
    return number


def _as_float32(value: Any) -> float:
    number = _as_float(value)
    if math.isfinite(number) and abs(number) > 3.4028234663852886e38:
        raise ValueError("out of float32 range")
    return number


#: Encoders keyed by AMQP type name; each coerces its value to that type (None is always null).
TYPE_ENCODERS: dict[str, Encoder] = {
    "null": _enc_null,
    "boolean": _typed(_enc_bool, bool),
    "ubyte": _typed(_enc_ubyte, _as_int),
    "ushort": _typed(_enc_ushort, _as_int),
    "uint": _typed(_enc_uint, _as_int),
    "ulong": _typed(_enc_ulong, _as_int),
    "byte": _typed(_enc_byte, _as_int),
    "short": _typed(_enc_short, _as_int),
    "int": _typed(_enc_int, _as_int),
    "long": _typed(_enc_long, _as_int),
    "float": _typed(_enc_float, _as_float32),
    "double": _typed(_enc_double, _as_double),
    "decimal32": _typed(_enc_decimal32, _as_int),
    "decimal64": _typed(_enc_decimal64, _as_int),
    "decimal128": _typed(_enc_decimal128, _as_bytes),
    "char": _typed(_enc_char, _as_str),
    "timestamp": _typed(_enc_timestamp, _as_int),
    "uuid": _typed(_enc_uuid, _as_uuid),
    "binary": _typed(_enc_binary, _as_bytes),
    "string": _typed(_enc_string, _as_str),
    "symbol": _typed(_enc_symbol, _as_str),
    "list": _typed(_enc_list, _as_list),
    "map": _typed(_enc_map, _as_map),
    "array": _typed(_enc_array, _as_array),
    "*": encode_value,
}
