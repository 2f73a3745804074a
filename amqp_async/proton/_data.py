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
from typing import Any, ClassVar

from ..codec import encode_into
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
from ._data_tree import (
    _ROOT,
    UnmappedType,
    _attach,
    _count_key_hash,
    _DataKeyError,
    _DataOverflowError,
    _DataTypeError,
    _DataValueError,
    _decode_error,
    _format,
    _Node,
    _ranged,
    _read,
    _write,
)
from ._exceptions import DataException
from ._restricted import AnnotationDict, PropertyDict, SymbolList

__all__ = ["AnnotationDict", "Data", "PropertyDict", "SymbolList", "UnmappedType"]


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
        return ubyte(self._get(TypeCode.UBYTE, 0))

    def get_byte(self) -> byte:
        """The current byte, 0 if the node is not one."""
        return byte(self._get(TypeCode.BYTE, 0))

    def get_ushort(self) -> ushort:
        """The current ushort, 0 if the node is not one."""
        return ushort(self._get(TypeCode.USHORT, 0))

    def get_short(self) -> short:
        """The current short, 0 if the node is not one."""
        return short(self._get(TypeCode.SHORT, 0))

    def get_uint(self) -> uint:
        """The current uint, 0 if the node is not one."""
        return uint(self._get(TypeCode.UINT, 0))

    def get_int(self) -> int32:
        """The current int, 0 if the node is not one."""
        return int32(self._get(TypeCode.INT, 0))

    def get_char(self) -> char:
        """The current char, ``char("\\x00")`` if the node is not one."""
        return char(self._get(TypeCode.CHAR, "\x00"))

    def get_ulong(self) -> ulong:
        """The current ulong, 0 if the node is not one."""
        return ulong(self._get(TypeCode.ULONG, 0))

    def get_long(self) -> int:
        """The current long, 0 if the node is not one."""
        return int(self._get(TypeCode.LONG, 0))

    def get_timestamp(self) -> timestamp:
        """The current timestamp (milliseconds), 0 if the node is not one."""
        return timestamp(self._get(TypeCode.TIMESTAMP, 0))

    def get_float(self) -> float32:
        """The current float, 0.0 if the node is not one."""
        return float32(self._get(TypeCode.FLOAT, 0.0))

    def get_double(self) -> float:
        """The current double, 0.0 if the node is not one."""
        return float(self._get(TypeCode.DOUBLE, 0.0))

    def get_decimal32(self) -> decimal32:
        """The current decimal32 (its 32-bit encoding), 0 if the node is not one."""
        return decimal32(self._get(TypeCode.DECIMAL32, 0))

    def get_decimal64(self) -> decimal64:
        """The current decimal64 (its 64-bit encoding), 0 if the node is not one."""
        return decimal64(self._get(TypeCode.DECIMAL64, 0))

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
        hashes: dict[int, int] | None = None
        try:
            while self.next() is not None:
                key = self.get_object()
                hashes = _count_key_hash(hashes, key)
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
