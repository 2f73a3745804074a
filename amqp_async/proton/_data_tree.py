"""The node tree under proton's ``Data``: nodes, reading bytes into nodes, writing nodes as bytes, and formatting.

:class:`~amqp_async.proton._data.Data` (the cursor API proton programs use) is built on this module.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from typing import Any

from ..codec import encode_into
from ..codec._decoder import (
    _DECODERS,
    _ELEMENT_TYPES,
    _ZERO_WIDTH,
    MAX_DEPTH,
    MAX_KEYS_OF_ONE_HASH,
    _check_zero_width_count,
    _compound_bounds,
)
from ..codec._encoder import _ARRAY_PACKERS
from ..errors import DecodeError, EncodeError
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
from ._exceptions import DataException

# --- errors: DataException, plus the builtin class proton raises in the same place ----------------------------


class _DataOverflowError(DataException, OverflowError):
    """A value out of its AMQP type's range (proton raises ``OverflowError``)."""


class _DataTypeError(DataException, TypeError):
    """A value of the wrong Python type for the ``put_*`` method."""


class _DataValueError(DataException, ValueError):
    """A value of the right Python type that the AMQP type cannot hold (a non-ASCII symbol, ...)."""


class _DataKeyError(DataException, KeyError):
    """An object ``put_object`` cannot map to an AMQP type (proton raises ``KeyError``)."""

    def __str__(self) -> str:
        return Exception.__str__(self)


def _decode_error(exc: DecodeError) -> DataException:
    return DataException(f"invalid AMQP data: {exc.description}", condition="amqp:decode-error")


def _count_key_hash(hashes: dict[int, int] | None, key: Any) -> dict[int, int] | None:
    """Count the keys of one map by hash, as :meth:`Data.get_dict` and :meth:`Data.get_object` build it; refuse
    more than :data:`~amqp_async.codec._decoder.MAX_KEYS_OF_ONE_HASH` of one hash.

    The codec's bound (``_count_key_hash``), for the maps built from a ``Data`` tree, which the peer fills too (a
    terminus's ``filter`` and ``properties``, bytes given to :meth:`Data.decode`): a dict takes time in the square
    of the number of keys that share a hash, and a peer can send any number of uuid keys of one hash (a uuid
    hashes as its number modulo 2**61 - 1), described keys holding them, or doubles (``c * 2.0**61`` hashes as
    ``c``). 4,000 uuid keys took over a second. Strings, symbols and binaries are left out: they hash with a
    secret key. Keys alike in hash by chance are never that many.

    Raises:
        DataException: too many keys of one hash (condition ``amqp:decode-error``).
        TypeError: an unhashable key.
    """
    if isinstance(key, (str, bytes)):
        return hashes
    if hashes is None:
        hashes = {}
    key_hash = hash(key)
    seen = hashes.get(key_hash, 0) + 1
    if seen > MAX_KEYS_OF_ONE_HASH:
        raise DataException(
            f"invalid AMQP data: a map has more than {MAX_KEYS_OF_ONE_HASH} keys of one hash (hash flooding)",
            condition="amqp:decode-error",
        )
    hashes[key_hash] = seen
    return hashes


class UnmappedType:
    """What :meth:`Data.get_object` gives for a node of a type it has no Python mapping for (as proton)."""

    def __init__(self, msg: str) -> None:
        self.msg = msg

    def __repr__(self) -> str:
        return f"UnmappedType({self.msg})"


# --- the node tree ---------------------------------------------------------------------------------------------


class _Node:
    """One node: a scalar (``value`` holds it, in its amqp_async type) or a compound (``children``).

    For an array, ``value`` is the element type and ``described`` says whether the first child is the
    descriptor. ``index`` is the node's position among its parent's children; nodes are replaced in place or
    appended, never inserted, so it stays valid.
    """

    __slots__ = ("children", "described", "index", "parent", "type", "value")

    def __init__(self, type_code: int, value: Any = None, described: bool = False) -> None:
        self.type = type_code
        self.value = value
        self.described = described
        self.children: list[_Node] = []
        self.parent: _Node | None = None
        self.index = 0

    def copy(self) -> _Node:
        node = _Node(self.type, self.value, self.described)
        for child in self.children:
            _attach(node, child.copy())
        return node


def _attach(parent: _Node, node: _Node) -> None:
    node.parent = parent
    node.index = len(parent.children)
    parent.children.append(node)


_ROOT = 0  # the root node's type: not an AMQP type

# The AMQP type of each scalar class the codec decodes to, or Data stores.
_SCALAR_TYPES: dict[type, TypeCode] = {
    type(None): TypeCode.NULL,
    bool: TypeCode.BOOL,
    ubyte: TypeCode.UBYTE,
    byte: TypeCode.BYTE,
    ushort: TypeCode.USHORT,
    short: TypeCode.SHORT,
    uint: TypeCode.UINT,
    int32: TypeCode.INT,
    char: TypeCode.CHAR,
    ulong: TypeCode.ULONG,
    int: TypeCode.LONG,
    timestamp: TypeCode.TIMESTAMP,
    float32: TypeCode.FLOAT,
    float: TypeCode.DOUBLE,
    decimal32: TypeCode.DECIMAL32,
    decimal64: TypeCode.DECIMAL64,
    decimal128: TypeCode.DECIMAL128,
    uuid.UUID: TypeCode.UUID,
    bytes: TypeCode.BINARY,
    str: TypeCode.STRING,
    symbol: TypeCode.SYMBOL,
}

_unpack_II = struct.Struct(">II").unpack_from


# --- decoding bytes into nodes ---------------------------------------------------------------------------------


def _read(data: bytes, offset: int, depth: int) -> tuple[_Node, int]:
    """Decode the value at ``offset`` (constructor included) into a node; return it and the offset past it."""
    if offset >= len(data):
        raise DecodeError("not enough data to decode", offset=offset)
    return _read_body(data[offset], data, offset + 1, depth)


def _read_body(code: int, data: bytes, position: int, depth: int) -> tuple[_Node, int]:
    if code == 0x00:
        if depth >= MAX_DEPTH:
            raise DecodeError(f"nesting deeper than {MAX_DEPTH}", offset=position)
        node = _Node(TypeCode.DESCRIBED)
        descriptor, position = _read(data, position, depth + 1)
        value, position = _read(data, position, depth + 1)
        _attach(node, descriptor)
        _attach(node, value)
        return node, position
    if code == 0x45:
        return _Node(TypeCode.LIST), position
    if code in (0xC0, 0xD0, 0xC1, 0xD1):
        if depth >= MAX_DEPTH:
            raise DecodeError(f"nesting deeper than {MAX_DEPTH}", offset=position)
        count, position, end = _compound_bounds(data, position, code >= 0xD0, check_count=False)
        is_map = code & 1
        if is_map and count & 1:
            raise DecodeError(f"map holds an odd number of items ({count})", offset=position)
        if count > end - position:
            raise DecodeError(f"count {count} exceeds the {end - position} bytes of the compound", offset=position)
        node = _Node(TypeCode.MAP if is_map else TypeCode.LIST)
        for _ in range(count):
            child, position = _read(data, position, depth + 1)
            _attach(node, child)
        if position != end:
            raise DecodeError(f"compound size says it ends at {end}, its items end at {position}", offset=position)
        return node, end
    if code in (0xE0, 0xF0):
        return _read_array(data, position, code == 0xF0, depth)
    value, end = _DECODERS[code](data, position, depth)
    return _Node(_SCALAR_TYPES[value.__class__], value), end


def _read_array(data: bytes, offset: int, wide: bool, depth: int) -> tuple[_Node, int]:
    if depth >= MAX_DEPTH:
        raise DecodeError(f"nesting deeper than {MAX_DEPTH}", offset=offset)
    count, position, end = _compound_bounds(data, offset, wide, check_count=False)
    if position >= end:
        raise DecodeError("array has no element constructor", offset=position)
    descriptor: _Node | None = None
    if data[position] == 0x00:
        descriptor, position = _read(data, position + 1, depth + 1)
        if position >= end:
            raise DecodeError("array has no element constructor after its descriptor", offset=position)
    code = data[position]
    element_type = _ELEMENT_TYPES.get(code)
    if element_type is None:
        raise DecodeError(f"invalid array element constructor {code:#04x}", offset=position)
    position += 1
    if code in _ZERO_WIDTH or code == 0x45:
        # Elements of no width (null, true, false, uint0, ulong0, list0): bounded by the array's own bytes, as the
        # codec bounds them (an array of such arrays made 190 bytes a tree of 226 MB).
        _check_zero_width_count(count, code, end - offset + 1, offset)
    elif count > end - position:
        raise DecodeError(f"array count {count} exceeds what its {end - position} bytes can hold", offset=offset)
    node = _Node(TypeCode.ARRAY, element_type, descriptor is not None)
    if descriptor is not None:
        _attach(node, descriptor)
    for _ in range(count):
        child, position = _read_body(code, data, position, depth + 1)
        if position > end:
            raise DecodeError("array elements overrun the array's size", offset=position)
        _attach(node, child)
    if position != end:
        raise DecodeError(f"array size says it ends at {end}, its elements end at {position}", offset=offset)
    return node, end


# --- encoding nodes --------------------------------------------------------------------------------------------


def _malformed(message: str) -> DataException:
    return DataException(message, condition="amqp:invalid-field")


# proton-c's encoder, which Data.encode follows byte for byte (programs hash and compare these bytes): scalars in
# their smallest form (as our codec writes them), an empty list as list0, every other list and every map in the
# 32-bit form (list32, map32), and arrays as array32 with one fixed-width constructor per element type. Array
# elements are written without their constructor, in that type's widest form (§1.6.23).

_LIST32, _MAP32, _ARRAY32 = 0xD0, 0xD1, 0xF0

# The element types whose arrays the codec may write in a smaller form than proton's (smalluint, str8...): proton's
# constructor, and how one element is packed in it. Every other scalar type has one form, the codec's.
_WIDEST: dict[int, tuple[int, Callable[[Any], bytes]]] = {
    TypeCode.UINT: (0x70, struct.Struct(">I").pack),
    TypeCode.INT: (0x71, struct.Struct(">i").pack),
    TypeCode.ULONG: (0x80, struct.Struct(">Q").pack),
    TypeCode.LONG: (0x81, struct.Struct(">q").pack),
    TypeCode.BINARY: (0xB0, lambda value: _sized(bytes(value))),
    TypeCode.STRING: (0xB1, lambda value: _sized(value.encode("utf-8"))),
    TypeCode.SYMBOL: (0xB3, lambda value: _sized(value.encode("ascii"))),
}
_COMPOUND_CONSTRUCTORS = {TypeCode.LIST: _LIST32, TypeCode.MAP: _MAP32, TypeCode.ARRAY: _ARRAY32}
_pack_I = struct.Struct(">I").pack
_pack_II = struct.Struct(">II").pack


def _sized(raw: bytes) -> bytes:
    return _pack_I(len(raw)) + raw


def _write(buf: bytearray, node: _Node) -> None:
    """Append ``node``'s encoding, constructor included, as proton-c writes it."""
    kind = node.type
    if kind == TypeCode.LIST:
        if not node.children:
            buf.append(0x45)  # list0
            return
        buf.append(_LIST32)
        _write_compound_body(buf, node)
    elif kind == TypeCode.MAP:
        buf.append(_MAP32)
        _write_compound_body(buf, node)
    elif kind == TypeCode.DESCRIBED:
        if len(node.children) != 2:
            raise _malformed(f"a described node needs a descriptor and a value, it has {len(node.children)} children")
        buf.append(0x00)
        _write(buf, node.children[0])
        _write(buf, node.children[1])
    elif kind == TypeCode.ARRAY:
        buf.append(_ARRAY32)
        _write_array_body(buf, node)
    else:
        try:
            encode_into(buf, node.value)
        except EncodeError as exc:  # pragma: no cover - put_* checked the value
            raise _malformed(exc.description) from None


def _write_compound_body(buf: bytearray, node: _Node) -> None:
    """A list32 or map32 body: size, count, then each item with its constructor."""
    children = node.children
    if node.type == TypeCode.MAP and len(children) & 1:
        raise _malformed(f"a map node has an odd number of children ({len(children)})")
    start = len(buf)
    buf += _pack_II(0, len(children))
    for child in children:
        _write(buf, child)
    buf[start : start + 4] = _pack_I(len(buf) - start - 4)


def _write_array_body(buf: bytearray, node: _Node) -> None:
    """An array32 body: size, count, the descriptor if any, the element constructor, then the element bodies."""
    children = node.children
    element_type = node.value
    start = len(buf)
    if node.described:
        if not children:
            raise _malformed("a described array node has no descriptor")
        buf += _pack_II(0, len(children) - 1)
        buf.append(0x00)
        _write(buf, children[0])
        children = children[1:]
    else:
        buf += _pack_II(0, len(children))
    if element_type in _COMPOUND_CONSTRUCTORS:
        for child in children:
            if child.type != element_type:
                raise _malformed(
                    f"invalid array: an element of type {_type_name(child.type)} in an array of "
                    f"{_type_name(element_type)}"
                )
        buf.append(_COMPOUND_CONSTRUCTORS[element_type])
        write_body = _write_array_body if element_type == TypeCode.ARRAY else _write_compound_body
        for child in children:
            write_body(buf, child)
    else:
        _write_scalar_elements(buf, element_type, children)
    buf[start : start + 4] = _pack_I(len(buf) - start - 4)


def _write_scalar_elements(buf: bytearray, element_type: int, children: list[_Node]) -> None:
    """The constructor and element bodies of an array of scalars. The codec checks (and converts, as proton does:
    a Python int in an array of ints) each element; its small forms are widened to proton's."""
    packer = _ARRAY_PACKERS.get(element_type)
    if packer is None:
        raise _malformed(f"invalid array: unknown element type {element_type!r}")
    for child in children:
        if child.type in _COMPOUND_CONSTRUCTORS or child.type == TypeCode.DESCRIBED:
            raise _malformed(
                f"invalid array: an element of type {_type_name(child.type)} in an array of {_type_name(element_type)}"
            )
    values = [child.value for child in children]
    try:
        code, body = packer(values)
    except EncodeError as exc:
        raise _malformed(f"invalid array: {exc.description}") from None
    widest = _WIDEST.get(element_type)
    if widest is None or code == widest[0]:
        buf.append(code)
        buf += body
    else:
        constructor, pack = widest
        buf.append(constructor)
        for value in values:
            buf += pack(value)


def _type_name(type_code: int) -> str:
    try:
        return TypeCode(type_code).name
    except ValueError:
        return repr(type_code)


def _to_object(node: _Node) -> Any:
    """The Python value of a node, as :meth:`Data.get_object` gives it (used for array elements)."""
    kind = node.type
    if kind == TypeCode.LIST:
        return [_to_object(child) for child in node.children]
    if kind == TypeCode.MAP:
        return _map_to_dict(node.children)
    if kind == TypeCode.DESCRIBED:
        parts = [_to_object(child) for child in node.children[:2]] + [None, None]
        return Described(parts[0], parts[1])
    if kind == TypeCode.ARRAY:
        children = node.children
        descriptor: Any = UNDESCRIBED
        if node.described and children:
            descriptor, children = _to_object(children[0]), children[1:]
        return Array(descriptor, node.value, *(_to_object(child) for child in children))
    return node.value


def _map_to_dict(items: list[_Node]) -> dict[Any, Any]:
    result: dict[Any, Any] = {}
    hashes: dict[int, int] | None = None
    try:
        for i in range(0, len(items) - 1, 2):
            key = _to_object(items[i])
            hashes = _count_key_hash(hashes, key)
            result[key] = _to_object(items[i + 1])
    except TypeError as exc:
        raise _malformed(f"a map key is not hashable: {exc}") from None
    return result


# --- formatting (proton-c's pn_data_format) --------------------------------------------------------------------


def _quote(data: bytes) -> str:
    out = []
    for octet in data:
        if 0x20 <= octet < 0x7F and octet not in (0x22, 0x5C):
            out.append(chr(octet))
        else:
            out.append(f"\\x{octet:02x}")
    return '"' + "".join(out) + '"'


def _format(node: _Node) -> str:
    kind, value = node.type, node.value
    if kind == TypeCode.NULL:
        return "null"
    if kind == TypeCode.BOOL:
        return "true" if value else "false"
    if kind in (TypeCode.FLOAT, TypeCode.DOUBLE):
        return format(value, "g")
    if kind == TypeCode.DECIMAL32:
        return f"D32({int(value)})"
    if kind == TypeCode.DECIMAL64:
        return f"D64({int(value)})"
    if kind == TypeCode.DECIMAL128:
        return f"D128({bytes(value).hex()})"
    if kind == TypeCode.UUID:
        return f"UUID({value})"
    if kind == TypeCode.BINARY:
        return "b" + _quote(value)
    if kind == TypeCode.STRING:
        return _quote(value.encode("utf-8"))
    if kind == TypeCode.SYMBOL:
        bare = value and all(c.isalnum() or c in "_-." for c in value) and not value[0].isdigit()
        return ":" + (str(value) if bare else _quote(value.encode("ascii")))
    if kind == TypeCode.CHAR:
        return str(value)
    if kind == TypeCode.LIST:
        return "[" + ", ".join(_format(child) for child in node.children) + "]"
    if kind == TypeCode.MAP:
        items = node.children
        pairs = [_format(items[i]) + "=" + _format(items[i + 1]) for i in range(0, len(items) - 1, 2)]
        if len(items) & 1:
            pairs.append(_format(items[-1]) + "=null")  # a key without its value reads as null (get_dict's None)
        return "{" + ", ".join(pairs) + "}"
    if kind == TypeCode.DESCRIBED:
        parts = [_format(child) for child in node.children]
        return "@" + " ".join(parts)
    if kind == TypeCode.ARRAY:
        return f"@PN_{TypeCode(value).name}[" + ", ".join(_format(child) for child in node.children) + "]"
    return str(int(value))


# --- Data ------------------------------------------------------------------------------------------------------


def _ranged(cls: Callable[[Any], Any], value: Any, what: str) -> Any:
    """``cls(value)``, with the errors proton's put_* methods raise (overflow for ranges, type for types)."""
    if isinstance(value, (str, bytes, bytearray)) or (isinstance(value, float) and cls not in (float32, float)):
        raise _DataTypeError(f"{what} needs a number, got {value!r}")
    try:
        return cls(value)
    except EncodeError as exc:
        raise _DataOverflowError(exc.description) from None
    except (TypeError, ValueError) as exc:
        raise _DataTypeError(f"{what} cannot hold {value!r}: {exc}") from None
