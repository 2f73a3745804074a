"""proton's ``Data``: a navigable tree of AMQP values, over the amqp_async codec.

A :class:`Data` holds a sequence of top-level nodes; lists, maps, arrays and described values are nodes with
children. A cursor (the *parent* node and the *current* node among its children) moves with :meth:`Data.next`,
:meth:`Data.prev`, :meth:`Data.enter` and :meth:`Data.exit`; ``put_*`` writes after the current node (replacing
the next sibling when there is one) and makes the written node current; ``get_*`` reads the current node. These
rules are those of proton-c's ``pn_data_t``, which proton programs rely on.

Encoding writes the tree with the codec's smallest encodings (proton-c always writes the 32-bit forms of lists,
maps and arrays; both are valid and each side decodes the other's). Decoding reads the bytes into nodes without
mapping known descriptors to composite classes, so a performative or a message section decodes as the described
value it is on the wire.

Differences from proton 0.40, on purpose:

* a binary value reads back as ``bytes`` (proton gives a ``memoryview``);
* getters on a node of another type give the type's empty value (proton crashes on ``get_string`` there);
* a malformed tree (a described value without exactly two children, a map with an odd number of children, an
  array element that does not fit the array's type) raises :class:`DataException` on :meth:`Data.encode`
  (proton writes malformed bytes);
* a value out of its type's range raises :class:`DataException` that is also an ``OverflowError`` (proton raises
  ``OverflowError``); a value of the wrong type raises one that is also a ``TypeError``; an object that
  ``put_object`` cannot map raises one that is also a ``KeyError``, as proton's dictionary lookup does. Values of
  the codec's composite classes (performatives, sections, terminus...) are accepted by ``put_object``.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Iterable
from typing import Any, ClassVar, cast

from ..codec import encode_into
from ..codec._decoder import _DECODERS, _ELEMENT_TYPES, MAX_DEPTH, MAX_ZERO_WIDTH_ELEMENTS
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

__all__ = ["AnnotationDict", "Data", "PropertyDict", "SymbolList", "UnmappedType"]


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
_pack_BII = struct.Struct(">BII").pack


# --- decoding bytes into nodes ---------------------------------------------------------------------------------


def _read(data: bytes, offset: int, depth: int) -> tuple[_Node, int]:
    """Decode the value at ``offset`` (constructor included) into a node; return it and the offset past it."""
    if offset >= len(data):
        raise DecodeError("not enough data to decode", offset=offset)
    return _read_body(data[offset], data, offset + 1, depth)


def _compound_header(data: bytes, offset: int, wide: bool) -> tuple[int, int, int]:
    """(count, first item offset, end offset) of a list, map or array whose size field is at ``offset``."""
    if wide:
        if offset + 8 > len(data):
            raise DecodeError("not enough data for a compound header", offset=offset)
        size, count = _unpack_II(data, offset)
        end, start = offset + 4 + size, offset + 8
        if size < 4:
            raise DecodeError(f"compound size {size} is smaller than its count field", offset=offset)
    else:
        if offset + 2 > len(data):
            raise DecodeError("not enough data for a compound header", offset=offset)
        size, count = data[offset], data[offset + 1]
        end, start = offset + 1 + size, offset + 2
        if size < 1:
            raise DecodeError("compound size 0 is smaller than its count field", offset=offset)
    if end > len(data):
        raise DecodeError(f"compound of {size} bytes overruns the data", offset=offset)
    return count, start, end


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
        count, position, end = _compound_header(data, position, code >= 0xD0)
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
    count, position, end = _compound_header(data, offset, wide)
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
    if count > max(end - position, MAX_ZERO_WIDTH_ELEMENTS):
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


def _write(buf: bytearray, node: _Node) -> None:
    kind = node.type
    if kind == TypeCode.LIST or kind == TypeCode.MAP:
        if kind == TypeCode.LIST and not node.children:
            buf.append(0x45)  # list0
            return
        if kind == TypeCode.MAP and len(node.children) & 1:
            raise _malformed(f"a map node has an odd number of children ({len(node.children)})")
        start = len(buf)
        buf += b"\x00\x00\x00"
        for child in node.children:
            _write(buf, child)
        size, count = len(buf) - start - 2, len(node.children)
        code8 = 0xC0 if kind == TypeCode.LIST else 0xC1
        if size <= 0xFF and count <= 0xFF:
            buf[start : start + 3] = bytes((code8, size, count))
        else:
            buf[start : start + 3] = _pack_BII(code8 + 0x10, size + 3, count)
    elif kind == TypeCode.DESCRIBED:
        if len(node.children) != 2:
            raise _malformed(f"a described node needs a descriptor and a value, it has {len(node.children)} children")
        buf.append(0x00)
        _write(buf, node.children[0])
        _write(buf, node.children[1])
    elif kind == TypeCode.ARRAY:
        children = node.children
        descriptor: Any = UNDESCRIBED
        if node.described:
            if not children:
                raise _malformed("a described array node has no descriptor")
            descriptor = _to_object(children[0])
            children = children[1:]
        try:
            encode_into(buf, Array(descriptor, node.value, *(_to_object(child) for child in children)))
        except EncodeError as exc:
            raise _malformed(f"invalid array: {exc.description}") from None
    else:
        try:
            encode_into(buf, node.value)
        except EncodeError as exc:  # pragma: no cover - put_* checked the value
            raise _malformed(exc.description) from None


def _to_object(node: _Node) -> Any:
    """The Python value of a node, as :meth:`Data.get_object` gives it (used for array elements)."""
    kind = node.type
    if kind == TypeCode.LIST:
        return [_to_object(child) for child in node.children]
    if kind == TypeCode.MAP:
        items = node.children
        try:
            return {_to_object(items[i]): _to_object(items[i + 1]) for i in range(0, len(items) - 1, 2)}
        except TypeError as exc:
            raise _malformed(f"a map key is not hashable: {exc}") from None
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


class Data:
    """A tree of AMQP values with a cursor, as proton's ``Data`` (see the module documentation for the rules).

    Leaf nodes are scalars; lists, maps, arrays and described values have children, reached with :meth:`enter`
    and left with :meth:`exit`. ``put_*`` methods add a value after the current node (replacing the next
    sibling if there is one) and make it current; ``get_*`` methods read the current node and give the type's
    empty value (0, ``""``, ``False``...) when the node is of another type or there is none.

    Args:
        capacity: accepted for compatibility with proton (the initial node capacity); unused.
    """

    NULL = TypeCode.NULL  #: A null value.
    BOOL = TypeCode.BOOL  #: A boolean value.
    UBYTE = TypeCode.UBYTE  #: An unsigned byte value.
    BYTE = TypeCode.BYTE  #: A signed byte value.
    USHORT = TypeCode.USHORT  #: An unsigned short value.
    SHORT = TypeCode.SHORT  #: A short value.
    UINT = TypeCode.UINT  #: An unsigned int value.
    INT = TypeCode.INT  #: A signed int value.
    CHAR = TypeCode.CHAR  #: A character value.
    ULONG = TypeCode.ULONG  #: An unsigned long value.
    LONG = TypeCode.LONG  #: A signed long value.
    TIMESTAMP = TypeCode.TIMESTAMP  #: A timestamp value.
    FLOAT = TypeCode.FLOAT  #: A float value.
    DOUBLE = TypeCode.DOUBLE  #: A double value.
    DECIMAL32 = TypeCode.DECIMAL32  #: A DECIMAL32 value.
    DECIMAL64 = TypeCode.DECIMAL64  #: A DECIMAL64 value.
    DECIMAL128 = TypeCode.DECIMAL128  #: A DECIMAL128 value.
    UUID = TypeCode.UUID  #: A UUID value.
    BINARY = TypeCode.BINARY  #: A binary string.
    STRING = TypeCode.STRING  #: A unicode string.
    SYMBOL = TypeCode.SYMBOL  #: A symbolic string.
    DESCRIBED = TypeCode.DESCRIBED  #: A described value.
    ARRAY = TypeCode.ARRAY  #: An array value.
    LIST = TypeCode.LIST  #: A list value.
    MAP = TypeCode.MAP  #: A map value.

    #: The name of each type code, as proton gives it.
    type_names: ClassVar[dict[int, str]] = {
        NULL: "null",
        BOOL: "bool",
        BYTE: "byte",
        UBYTE: "ubyte",
        SHORT: "short",
        USHORT: "ushort",
        INT: "int",
        UINT: "uint",
        CHAR: "char",
        LONG: "long",
        ULONG: "ulong",
        TIMESTAMP: "timestamp",
        FLOAT: "float",
        DOUBLE: "double",
        DECIMAL32: "decimal32",
        DECIMAL64: "decimal64",
        DECIMAL128: "decimal128",
        UUID: "uuid",
        BINARY: "binary",
        STRING: "string",
        SYMBOL: "symbol",
        DESCRIBED: "described",
        ARRAY: "array",
        LIST: "list",
        MAP: "map",
    }

    @classmethod
    def type_name(cls, amqptype: int) -> str:
        """The name of a type code (``Data.type_name(Data.INT) == "int"``).

        Raises:
            KeyError: not a type code.
        """
        return cls.type_names[amqptype]

    def __init__(self, capacity: int = 16) -> None:
        self._root = _Node(_ROOT)
        self._parent = self._base_parent = self._root
        self._current: _Node | None = None
        self._base_current: _Node | None = None

    # -- navigation --

    def clear(self) -> None:
        """Remove every node and reset the cursor (and any :meth:`narrow`)."""
        self._root = _Node(_ROOT)
        self._parent = self._base_parent = self._root
        self._current = self._base_current = None

    def rewind(self) -> None:
        """Move the cursor back before the first node (of the narrowed subtree, after :meth:`narrow`)."""
        self._parent = self._base_parent
        self._current = self._base_current

    def next(self) -> int | None:
        """Move to the next sibling and return its type, or return None (and stay) when there is none."""
        current = self._current
        if current is not None:
            siblings = current.parent.children if current.parent is not None else []
            if current.index + 1 >= len(siblings):
                return None
            self._current = siblings[current.index + 1]
        elif self._parent.children:
            self._current = self._parent.children[0]
        else:
            return None
        return self._current.type

    def prev(self) -> int | None:
        """Move to the previous sibling and return its type, or return None (and stay) when there is none."""
        current = self._current
        if current is None or current.index == 0 or current.parent is None:
            return None
        self._current = current.parent.children[current.index - 1]
        return self._current.type

    def enter(self) -> bool:
        """Make the current node the parent, with the cursor before its first child; False if there is none."""
        if self._current is None:
            return False
        self._parent, self._current = self._current, None
        return True

    def exit(self) -> bool:
        """Make the parent the current node again; False (and no move) at the top level."""
        parent = self._parent
        if parent.parent is None:
            return False
        self._current, self._parent = parent, parent.parent
        return True

    def lookup(self, name: str) -> bool:
        """Among map items (after :meth:`enter` into a map), move to the value of the key ``name``.

        Keys are compared as strings or symbols; other keys are skipped. Returns False if no key matches.
        """
        while self.next() is not None:
            node = self._current
            if node is not None and node.type in (TypeCode.STRING, TypeCode.SYMBOL) and node.value == name:
                return self.next() is not None
            self.next()
        return False

    def narrow(self) -> None:
        """Make :meth:`rewind` return to the present cursor position, as if it were the start of the tree."""
        self._base_parent, self._base_current = self._parent, self._current

    def widen(self) -> None:
        """Undo :meth:`narrow`."""
        self._base_parent, self._base_current = self._root, None

    def type(self) -> int | None:
        """The type code of the current node, or None when there is none."""
        return self._current.type if self._current is not None else None

    # -- encoding and decoding --

    def encode(self) -> bytes:
        """The AMQP encoding of every top-level node, one after the other (``b""`` when empty).

        Raises:
            DataException: the tree is malformed (see the module documentation).
        """
        buf = bytearray()
        for node in self._root.children:
            _write(buf, node)
        return bytes(buf)

    def encoded_size(self) -> int:
        """The size in bytes of :meth:`encode`'s result."""
        return len(self.encode())

    def decode(self, encoded: bytes | bytearray | memoryview) -> int:
        """Decode the first AMQP value of ``encoded``, put it after the current node; return the bytes it took.

        Raises:
            DataException: the bytes are empty, truncated or malformed (condition ``amqp:decode-error``).
        """
        data = bytes(encoded)
        try:
            node, end = _read(data, 0, 0)
        except DecodeError as exc:
            raise _decode_error(exc) from None
        except (IndexError, struct.error, KeyError) as exc:
            raise DataException(f"invalid AMQP data: {exc}", condition="amqp:decode-error") from None
        self._put_node(node)
        return end

    def copy(self, src: Data) -> None:
        """Replace the contents of this object with a copy of ``src``'s nodes; the cursor is rewound."""
        self.clear()
        for node in src._root.children:
            _attach(self._root, node.copy())

    def format(self) -> str:  # noqa: A003 - proton's name
        """The contents in proton-c's human-readable notation, e.g. ``1, "abc", [:s, {"k"=b"\\x01"}]``."""
        return ", ".join(_format(node) for node in self._root.children)

    def dump(self) -> None:
        """Print the contents and the cursor, for debugging."""
        current = self._current
        where = "before the first node" if current is None else f"at node {current.index} ({_format(current)})"
        print(f"Data[{self.format()}], cursor {where}")

    def __repr__(self) -> str:
        return f"Data({self.format()})"

    # -- putting --

    def _put_node(self, node: _Node) -> None:
        """Write ``node`` after the current node (replacing the next sibling, if any) and make it current."""
        current = self._current
        parent = self._parent if current is None or current.parent is None else current.parent
        index = 0 if current is None else current.index + 1
        node.parent = parent
        node.index = index
        if index < len(parent.children):
            parent.children[index] = node
        else:
            parent.children.append(node)
        self._current = node

    def _put(self, type_code: int, value: Any) -> None:
        self._put_node(_Node(type_code, value))

    def put_null(self) -> None:
        """Put a null."""
        self._put(TypeCode.NULL, None)

    def put_bool(self, b: bool | int) -> None:
        """Put a boolean."""
        self._put(TypeCode.BOOL, bool(b))

    def put_ubyte(self, ub: int) -> None:
        """Put an unsigned byte (0 to 2**8 - 1). Raises DataException (an OverflowError) out of range."""
        self._put(TypeCode.UBYTE, _ranged(ubyte, ub, "ubyte"))

    def put_byte(self, b: int) -> None:
        """Put a signed byte (-2**7 to 2**7 - 1). Raises DataException (an OverflowError) out of range."""
        self._put(TypeCode.BYTE, _ranged(byte, b, "byte"))

    def put_ushort(self, us: int) -> None:
        """Put an unsigned short (0 to 2**16 - 1). Raises DataException (an OverflowError) out of range."""
        self._put(TypeCode.USHORT, _ranged(ushort, us, "ushort"))

    def put_short(self, s: int) -> None:
        """Put a signed short (-2**15 to 2**15 - 1). Raises DataException (an OverflowError) out of range."""
        self._put(TypeCode.SHORT, _ranged(short, s, "short"))

    def put_uint(self, ui: int) -> None:
        """Put an unsigned int (0 to 2**32 - 1). Raises DataException (an OverflowError) out of range."""
        self._put(TypeCode.UINT, _ranged(uint, ui, "uint"))

    def put_int(self, i: int) -> None:
        """Put a signed int (-2**31 to 2**31 - 1). Raises DataException (an OverflowError) out of range."""
        self._put(TypeCode.INT, _ranged(int32, i, "int"))

    def put_char(self, c: str) -> None:
        """Put a char (one Unicode code point). Raises DataException (a ValueError) for anything else."""
        try:
            self._put(TypeCode.CHAR, char(c))
        except EncodeError as exc:
            raise _DataValueError(exc.description) from None

    def put_ulong(self, ul: int) -> None:
        """Put an unsigned long (0 to 2**64 - 1). Raises DataException (an OverflowError) out of range."""
        self._put(TypeCode.ULONG, _ranged(ulong, ul, "ulong"))

    def put_long(self, i64: int) -> None:
        """Put a signed long (-2**63 to 2**63 - 1). Raises DataException (an OverflowError) out of range."""
        value = _ranged(int, i64, "long")
        if not -(1 << 63) <= value < (1 << 63):
            raise _DataOverflowError(f"long must be in [-2**63, 2**63 - 1], got {value}")
        self._put(TypeCode.LONG, value)

    def put_timestamp(self, t: int) -> None:
        """Put a timestamp (milliseconds since the Unix epoch, a signed 64-bit integer)."""
        self._put(TypeCode.TIMESTAMP, _ranged(timestamp, t, "timestamp"))

    def put_float(self, f: float) -> None:
        """Put a float (IEEE 754 binary32). Raises DataException (an OverflowError) beyond its range."""
        self._put(TypeCode.FLOAT, _ranged(float32, f, "float"))

    def put_double(self, d: float) -> None:
        """Put a double (IEEE 754 binary64)."""
        self._put(TypeCode.DOUBLE, _ranged(float, d, "double"))

    def put_decimal32(self, d: int) -> None:
        """Put a decimal32, given as the 32-bit integer of its IEEE 754-2008 encoding."""
        self._put(TypeCode.DECIMAL32, _ranged(decimal32, d, "decimal32"))

    def put_decimal64(self, d: int) -> None:
        """Put a decimal64, given as the 64-bit integer of its IEEE 754-2008 encoding."""
        self._put(TypeCode.DECIMAL64, _ranged(decimal64, d, "decimal64"))

    def put_decimal128(self, d: bytes) -> None:
        """Put a decimal128, given as the 16 bytes of its IEEE 754-2008 encoding."""
        try:
            self._put(TypeCode.DECIMAL128, decimal128(d))
        except (EncodeError, TypeError) as exc:
            raise _DataValueError(f"decimal128 needs 16 bytes: {exc}") from None

    def put_uuid(self, u: uuid.UUID) -> None:
        """Put a UUID. Raises DataException (a TypeError) for anything but a ``uuid.UUID``."""
        if not isinstance(u, uuid.UUID):
            raise _DataTypeError(f"put_uuid needs a uuid.UUID, got {u!r}")
        self._put(TypeCode.UUID, u)

    def put_binary(self, b: bytes | bytearray | memoryview | str) -> None:
        """Put a binary value (a ``str`` is taken as its UTF-8 bytes, as proton does)."""
        if isinstance(b, str):
            b = b.encode("utf-8")
        elif not isinstance(b, (bytes, bytearray, memoryview)):
            raise _DataTypeError(f"put_binary needs bytes, got {b!r}")
        self._put(TypeCode.BINARY, bytes(b))

    def put_memoryview(self, mv: memoryview) -> None:
        """Put a ``memoryview`` as a binary value."""
        self.put_binary(mv)

    def put_string(self, s: str) -> None:
        """Put a string. Raises DataException (a TypeError) for anything but a ``str``."""
        if not isinstance(s, str):
            raise _DataTypeError(f"put_string needs a str, got {s!r}")
        self._put(TypeCode.STRING, str.__str__(s))

    def put_symbol(self, s: str) -> None:
        """Put a symbol. Raises DataException (a ValueError) if it is not ASCII, (a TypeError) if not a str."""
        if not isinstance(s, str):
            raise _DataTypeError(f"put_symbol needs a str, got {s!r}")
        try:
            self._put(TypeCode.SYMBOL, symbol(s))
        except EncodeError as exc:
            raise _DataValueError(exc.description) from None

    def put_list(self) -> None:
        """Put an empty list; :meth:`enter` it to put its elements."""
        self._put(TypeCode.LIST, None)

    def put_map(self) -> None:
        """Put an empty map; :meth:`enter` it to put its keys and values, alternately."""
        self._put(TypeCode.MAP, None)

    def put_array(self, described: bool, element_type: int) -> None:
        """Put an empty array of ``element_type`` elements; :meth:`enter` it to put them.

        A described array's first child is the descriptor (of any type).

        Raises:
            DataException: ``element_type`` is not a type code (a ValueError).
        """
        try:
            kind = TypeCode(element_type)
        except ValueError:
            raise _DataValueError(f"unknown array element type {element_type!r}") from None
        self._put_node(_Node(TypeCode.ARRAY, kind, bool(described)))

    def put_described(self) -> None:
        """Put a described value; :meth:`enter` it to put the descriptor, then the value."""
        self._put(TypeCode.DESCRIBED, None)

    # -- getting --

    def _get(self, type_code: int, default: Any) -> Any:
        """The current node's value if it is of ``type_code``, else ``default``."""
        current = self._current
        if current is None or current.type != type_code:
            return default
        return current.value

    def _count(self, type_code: int) -> int:
        current = self._current
        return len(current.children) if current is not None and current.type == type_code else 0

    def get_list(self) -> int:
        """The number of elements of the current list node, 0 if it is not a list."""
        return self._count(TypeCode.LIST)

    def get_map(self) -> int:
        """The number of children (keys plus values) of the current map node, 0 if it is not a map."""
        return self._count(TypeCode.MAP)

    def get_array(self) -> tuple[int, bool, int | None]:
        """``(element count, described, element type)`` of the current array node, ``(0, False, None)`` otherwise.

        The count does not include the descriptor of a described array.
        """
        current = self._current
        if current is None or current.type != TypeCode.ARRAY:
            return 0, False, None
        return len(current.children) - current.described, current.described, current.value

    def is_described(self) -> bool:
        """True when the current node is a described value."""
        return self.type() == TypeCode.DESCRIBED

    def is_null(self) -> bool:
        """True when the current node is a null."""
        return self.type() == TypeCode.NULL

    def get_bool(self) -> bool:
        """The current boolean, False if the node is not one."""
        return bool(self._get(TypeCode.BOOL, False))

    def get_ubyte(self) -> ubyte:
        """The current ubyte, 0 if the node is not one."""
        return cast(ubyte, ubyte(self._get(TypeCode.UBYTE, 0)))

    def get_byte(self) -> byte:
        """The current byte, 0 if the node is not one."""
        return cast(byte, byte(self._get(TypeCode.BYTE, 0)))

    def get_ushort(self) -> ushort:
        """The current ushort, 0 if the node is not one."""
        return cast(ushort, ushort(self._get(TypeCode.USHORT, 0)))

    def get_short(self) -> short:
        """The current short, 0 if the node is not one."""
        return cast(short, short(self._get(TypeCode.SHORT, 0)))

    def get_uint(self) -> uint:
        """The current uint, 0 if the node is not one."""
        return cast(uint, uint(self._get(TypeCode.UINT, 0)))

    def get_int(self) -> int32:
        """The current int, 0 if the node is not one."""
        return cast(int32, int32(self._get(TypeCode.INT, 0)))

    def get_char(self) -> char:
        """The current char, ``char("\\x00")`` if the node is not one."""
        return char(self._get(TypeCode.CHAR, "\x00"))

    def get_ulong(self) -> ulong:
        """The current ulong, 0 if the node is not one."""
        return cast(ulong, ulong(self._get(TypeCode.ULONG, 0)))

    def get_long(self) -> int:
        """The current long, 0 if the node is not one."""
        return int(self._get(TypeCode.LONG, 0))

    def get_timestamp(self) -> timestamp:
        """The current timestamp (milliseconds), 0 if the node is not one."""
        return cast(timestamp, timestamp(self._get(TypeCode.TIMESTAMP, 0)))

    def get_float(self) -> float32:
        """The current float, 0.0 if the node is not one."""
        return float32(self._get(TypeCode.FLOAT, 0.0))

    def get_double(self) -> float:
        """The current double, 0.0 if the node is not one."""
        return float(self._get(TypeCode.DOUBLE, 0.0))

    def get_decimal32(self) -> decimal32:
        """The current decimal32 (its 32-bit encoding), 0 if the node is not one."""
        return cast(decimal32, decimal32(self._get(TypeCode.DECIMAL32, 0)))

    def get_decimal64(self) -> decimal64:
        """The current decimal64 (its 64-bit encoding), 0 if the node is not one."""
        return cast(decimal64, decimal64(self._get(TypeCode.DECIMAL64, 0)))

    def get_decimal128(self) -> decimal128:
        """The current decimal128 (its 16 bytes), 16 zero bytes if the node is not one."""
        return decimal128(self._get(TypeCode.DECIMAL128, bytes(16)))

    def get_uuid(self) -> uuid.UUID | None:
        """The current UUID, None if the node is not one."""
        value: uuid.UUID | None = self._get(TypeCode.UUID, None)
        return value

    def get_binary(self) -> bytes:
        """The current binary value (as ``bytes``), ``b""`` if the node is not one."""
        return bytes(self._get(TypeCode.BINARY, b""))

    def get_string(self) -> str:
        """The current string, ``""`` if the node is not one."""
        return str(self._get(TypeCode.STRING, ""))

    def get_symbol(self) -> symbol:
        """The current symbol, ``symbol("")`` if the node is not one."""
        return symbol(self._get(TypeCode.SYMBOL, ""))

    # -- Python objects --

    def put_dict(self, d: dict[Any, Any]) -> None:
        """Put a map holding the items of ``d`` (each key and value as by :meth:`put_object`)."""
        self.put_map()
        self.enter()
        try:
            for key, value in d.items():
                self.put_object(key)
                self.put_object(value)
        finally:
            self.exit()

    def get_dict(self) -> dict[Any, Any] | None:
        """The current map as a ``dict`` (a missing last value reads as None); None when there is no node."""
        if not self.enter():
            return None
        result: dict[Any, Any] = {}
        try:
            while self.next() is not None:
                key = self.get_object()
                result[key] = self.get_object() if self.next() is not None else None
        finally:
            self.exit()
        return result

    def put_sequence(self, s: Iterable[Any]) -> None:
        """Put a list holding the elements of ``s`` (each as by :meth:`put_object`)."""
        self.put_list()
        self.enter()
        try:
            for element in s:
                self.put_object(element)
        finally:
            self.exit()

    def get_sequence(self) -> list[Any] | None:
        """The children of the current node as a ``list``; None when there is no node."""
        if not self.enter():
            return None
        result = []
        try:
            while self.next() is not None:
                result.append(self.get_object())
        finally:
            self.exit()
        return result

    def put_py_described(self, d: Described) -> None:
        """Put a :class:`~amqp_async.types.Described` (its descriptor and value as by :meth:`put_object`)."""
        self.put_described()
        self.enter()
        try:
            self.put_object(d.descriptor)
            self.put_object(d.value)
        finally:
            self.exit()

    def get_py_described(self) -> Described | None:
        """The current described node as a :class:`~amqp_async.types.Described`; None when there is no node."""
        if not self.enter():
            return None
        try:
            self.next()
            descriptor = self.get_object()
            self.next()
            value = self.get_object()
        finally:
            self.exit()
        return Described(descriptor, value)

    def put_py_array(self, a: Array) -> None:
        """Put an :class:`~amqp_async.types.Array`: described unless its descriptor is ``UNDESCRIBED``."""
        described = a.descriptor is not UNDESCRIBED
        self.put_array(described, a.type)
        self.enter()
        try:
            if described:
                self.put_object(a.descriptor)
            for element in a.elements:
                self.put_object(element)
        finally:
            self.exit()

    def get_py_array(self) -> Array | None:
        """The current array node as an :class:`~amqp_async.types.Array`; None if it is not an array."""
        _count, described, element_type = self.get_array()
        if element_type is None:
            return None
        self.enter()
        try:
            descriptor: Any = UNDESCRIBED
            if described:
                self.next()
                descriptor = self.get_object()
            elements = []
            while self.next() is not None:
                elements.append(self.get_object())
        finally:
            self.exit()
        return Array(descriptor, element_type, *elements)

    def put_object(self, obj: Any) -> None:
        """Put any Python value, choosing the AMQP type by its class as proton does.

        ``None``, ``bool``, ``int`` (long), ``float`` (double), ``str`` (string), ``bytes``/``bytearray``/
        ``memoryview`` (binary), ``uuid.UUID``, ``list``/``tuple`` (list), ``dict`` (map), the amqp_async types
        (``symbol``, ``ulong``...), :class:`~amqp_async.types.Described` and :class:`~amqp_async.types.Array`;
        subclasses map as their nearest listed base, and the codec's composite classes (performatives, message
        sections, ...) as the described values they encode to.

        Raises:
            DataException: the value has no AMQP mapping (also a ``KeyError``, as proton raises), or is out of
                its type's range.
        """
        cls = obj.__class__
        putter = _PUTTERS.get(cls)
        if putter is None:
            putter = _find_putter(cls)
        putter(self, obj)

    def get_object(self) -> Any:
        """The current node as a Python value (the inverse of :meth:`put_object`); None when there is no node."""
        current = self._current
        if current is None:
            return None
        getter = _GETTERS.get(current.type)
        if getter is None:  # pragma: no cover - every node type has a getter
            return UnmappedType(str(current.type))
        return getter(self)


def _put_encoded(data: Data, obj: Any) -> None:
    """Put a value the codec can encode but Data has no put_* for (composite classes): through its bytes."""
    buf = bytearray()
    try:
        encode_into(buf, obj)
    except EncodeError as exc:
        raise _DataKeyError(f"cannot put a {type(obj).__qualname__} into Data: {exc.description}") from None
    data.decode(buf)


def _find_putter(cls: type) -> Callable[[Data, Any], None]:
    for base in cls.__mro__[1:]:
        putter = _PUTTERS.get(base)
        if putter is not None:
            _PUTTERS[cls] = putter
            return putter
    return _put_encoded


_PUTTERS: dict[type, Callable[[Data, Any], None]] = {
    type(None): lambda data, _: data.put_null(),
    bool: Data.put_bool,
    ubyte: Data.put_ubyte,
    ushort: Data.put_ushort,
    uint: Data.put_uint,
    ulong: Data.put_ulong,
    byte: Data.put_byte,
    short: Data.put_short,
    int32: Data.put_int,
    int: Data.put_long,
    float32: Data.put_float,
    float: Data.put_double,
    decimal32: Data.put_decimal32,
    decimal64: Data.put_decimal64,
    decimal128: Data.put_decimal128,
    char: Data.put_char,
    timestamp: Data.put_timestamp,
    uuid.UUID: Data.put_uuid,
    bytes: Data.put_binary,
    bytearray: Data.put_binary,
    memoryview: Data.put_binary,
    str: Data.put_string,
    symbol: Data.put_symbol,
    list: Data.put_sequence,
    tuple: Data.put_sequence,
    dict: Data.put_dict,
    Described: Data.put_py_described,
    Array: Data.put_py_array,
}

_GETTERS: dict[int, Callable[[Data], Any]] = {
    TypeCode.NULL: lambda _: None,
    TypeCode.BOOL: Data.get_bool,
    TypeCode.BYTE: Data.get_byte,
    TypeCode.UBYTE: Data.get_ubyte,
    TypeCode.SHORT: Data.get_short,
    TypeCode.USHORT: Data.get_ushort,
    TypeCode.INT: Data.get_int,
    TypeCode.UINT: Data.get_uint,
    TypeCode.CHAR: Data.get_char,
    TypeCode.LONG: Data.get_long,
    TypeCode.ULONG: Data.get_ulong,
    TypeCode.TIMESTAMP: Data.get_timestamp,
    TypeCode.FLOAT: Data.get_float,
    TypeCode.DOUBLE: Data.get_double,
    TypeCode.DECIMAL32: Data.get_decimal32,
    TypeCode.DECIMAL64: Data.get_decimal64,
    TypeCode.DECIMAL128: Data.get_decimal128,
    TypeCode.UUID: Data.get_uuid,
    TypeCode.BINARY: Data.get_binary,
    TypeCode.STRING: Data.get_string,
    TypeCode.SYMBOL: Data.get_symbol,
    TypeCode.DESCRIBED: Data.get_py_described,
    TypeCode.ARRAY: Data.get_py_array,
    TypeCode.LIST: Data.get_sequence,
    TypeCode.MAP: Data.get_dict,
}

#: proton's class attributes, for programs that consult them: Python class -> putter, type code -> getter.
Data.put_mappings = _PUTTERS  # type: ignore[attr-defined]
Data.get_mappings = _GETTERS  # type: ignore[attr-defined]


# --- restricted collections (message properties, annotations, capabilities) ------------------------------------


def _as_symbol(key: Any, allow_ulong: bool) -> Any:
    """``key`` as a symbol (a ``str`` is converted), or unchanged if it is a ulong and ``allow_ulong``.

    Raises:
        TypeError: any other key, or a ``str`` that is not ASCII (a symbol cannot hold it).
    """
    if isinstance(key, symbol) or (allow_ulong and isinstance(key, ulong)):
        return key
    if isinstance(key, str):
        try:
            return symbol(key)
        except EncodeError as exc:
            raise TypeError(exc.description) from None
    raise TypeError(f"Non-symbol type {type(key)}: {key}")


class _RestrictedKeyDict(dict[Any, Any]):
    """A ``dict`` whose keys must be symbols (``str`` keys are converted), proton's ``RestrictedKeyDict``."""

    _allow_ulong: ClassVar[bool] = False

    def __init__(self, e: Any = None, raise_on_error: bool = True, **kwargs: Any) -> None:
        super().__init__()
        self.raise_on_error = raise_on_error
        self.update(e, **kwargs)

    def _key(self, key: Any) -> Any:
        try:
            return _as_symbol(key, self._allow_ulong)
        except TypeError:
            if self.raise_on_error:
                # __setitem__ raises KeyError for a bad key, as proton's does.
                raise KeyError(f"invalid non-symbol key: {type(key)}: {key}") from None
            return key

    def __setitem__(self, key: Any, value: Any) -> None:
        """Set ``self[key]``, converting a ``str`` key to a symbol. Raises KeyError for any other key type."""
        super().__setitem__(self._key(key), value)

    def update(self, e: Any = None, **kwargs: Any) -> None:  # type: ignore[override]
        """As ``dict.update`` (a mapping or an iterable of pairs, then keywords), checking every key."""
        if e:
            if hasattr(e, "keys"):
                for key in list(e):
                    self[key] = e[key]
            else:
                for key, value in e:
                    self[key] = value
        for key, value in kwargs.items():
            self[key] = value

    def setdefault(self, key: Any, default: Any = None) -> Any:
        """As ``dict.setdefault``, checking the key."""
        return super().setdefault(self._key(key), default)


class PropertyDict(_RestrictedKeyDict):
    """A ``dict`` with symbol keys; ``str`` keys become symbols (proton's ``PropertyDict``).

    Args:
        e: initial items: a mapping, or an iterable of ``(key, value)`` pairs.
        raise_on_error: when True (the default), a key that is neither a symbol nor a ``str`` raises
            ``KeyError``; when False it is kept as it is.
        **kwargs: more initial items.
    """

    def __repr__(self) -> str:
        return f"PropertyDict({dict.__repr__(self)})"


class AnnotationDict(_RestrictedKeyDict):
    """A ``dict`` with symbol or ulong keys; ``str`` keys become symbols (proton's ``AnnotationDict``).

    Args:
        e: initial items: a mapping, or an iterable of ``(key, value)`` pairs.
        raise_on_error: when True (the default), a key that is neither a symbol, a ulong nor a ``str`` raises
            ``KeyError``; when False it is kept as it is.
        **kwargs: more initial items.
    """

    _allow_ulong = True

    def __repr__(self) -> str:
        return f"AnnotationDict({dict.__repr__(self)})"


class SymbolList(list[Any]):
    """A ``list`` of symbols; ``str`` elements become symbols (proton's ``SymbolList``).

    Args:
        t: initial elements (an iterable), or one ``str``, which is the single element.
        raise_on_error: when True (the default), an element that is neither a symbol nor a ``str`` raises
            ``TypeError``; when False it is kept as it is.
    """

    def __init__(self, t: Any = None, raise_on_error: bool = True) -> None:
        super().__init__()
        self.raise_on_error = raise_on_error
        if isinstance(t, str):
            self.append(t)
        elif t is not None:
            self.extend(t)

    def _check(self, value: Any) -> Any:
        try:
            return _as_symbol(value, False)
        except TypeError:
            if self.raise_on_error:
                raise
            return value

    def _check_all(self, values: Iterable[Any] | None) -> list[Any]:
        return [self._check(value) for value in values] if values else []

    def to_array(self) -> Array:
        """The elements as an AMQP array of symbols (how capabilities are sent)."""
        return Array(UNDESCRIBED, TypeCode.SYMBOL, *self)

    def append(self, v: Any) -> None:
        """Append ``v``, as a symbol."""
        super().append(self._check(v))

    def extend(self, t: Iterable[Any]) -> None:
        """Append every element of ``t``, as symbols."""
        super().extend(self._check_all(t))

    def insert(self, i: Any, v: Any) -> None:
        """Insert ``v``, as a symbol, before index ``i``."""
        super().insert(i, self._check(v))

    def __add__(self, t: Iterable[Any]) -> SymbolList:
        return SymbolList(list(self) + self._check_all(t), raise_on_error=self.raise_on_error)

    def __iadd__(self, t: Iterable[Any]) -> SymbolList:
        super().extend(self._check_all(t))
        return self

    def __setitem__(self, i: Any, t: Any) -> None:
        if isinstance(i, slice):
            super().__setitem__(i, self._check_all(t))
        else:
            super().__setitem__(i, self._check(t))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, (list, tuple)):
            return NotImplemented
        return list.__eq__(self, SymbolList(other, raise_on_error=False))

    __hash__ = None

    def __repr__(self) -> str:
        return f"SymbolList({list.__repr__(self)})"
