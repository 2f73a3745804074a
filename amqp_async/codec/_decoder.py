"""AMQP 1.0 type decoding (spec §1.6): a dispatch table indexed by format code.

``decode_value(data, offset, depth)`` reads one value and returns it with the offset just past it. Every entry of
``_DECODERS`` (the scalars' are in ``_scalars.py``) checks that the bytes it needs are there before reading them, so
malformed or hostile input raises :class:`DecodeError` (with the offset and the reason) and nothing else:

- a size or count larger than what remains fails at once, before anything is allocated for it;
- every element of a list, map or array takes at least one byte, so a count beyond the size fails too; the
  elements that take none (an array of nulls) are bounded by the array's bytes (64 a byte);
- nesting deeper than :data:`MAX_DEPTH` fails before Python's own recursion limit is near.

Values come back as the types ``amqp_async.types`` defines (``uint``, ``symbol``, ...), built with
``int.__new__``/``str.__new__`` to skip the range checks that the bytes already guarantee.

Two tables share the scalar decoders: ``_DECODERS`` (frames: a described value whose descriptor a composite type
registered decodes to that type, an ``Attach``, an ``Accepted()``) and ``_APPLICATION_DECODERS`` (the application's
values in a message, :func:`decode_application_value`: every described value stays ``Described``). Each table's
lists, maps, arrays and described values read their items through that same table.
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
    decimal32,
    decimal64,
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
from ._scalars import (
    _SCALAR_DECODERS,
    _SMALLINTS,
    _SYMBOL_CACHE,
    Decoder,
    _bad_utf8,
    _new_float,
    _new_int,
    _new_str,
    _overrun,
    _symbol,
    _truncated,
    _unpack_BB,
    _unpack_i,
    _unpack_II,
    _unpack_Q,
)

__all__ = [
    "EMPTY_LISTS_PER_BYTE",
    "MAX_DEPTH",
    "MAX_KEYS_OF_ONE_HASH",
    "MAX_ZERO_WIDTH_ELEMENTS",
    "ZERO_WIDTH_ELEMENTS_PER_BYTE",
    "Buffer",
    "decode_application_value",
    "decode_value",
    "register_described",
]

Buffer = bytes | bytearray | memoryview

#: Deepest nesting of lists, maps, arrays and described values that decoding accepts.
MAX_DEPTH = 64

#: Most elements an array of zero-width elements (nulls, true, false, uint0, ulong0, list0) may claim: their
#: count is not bounded by the bytes they take, so it is bounded here, and by the array's bytes (below).
MAX_ZERO_WIDTH_ELEMENTS = 1 << 16

#: Most zero-width elements (null, true, false, uint0, ulong0) an array may hold per byte of its encoding
#: (constructor, size, count and descriptor included): each is a pointer to one shared object, 8 bytes, so an array
#: takes at most 512 bytes of memory per byte received. 64 lets an array8 hold its most, 255 nulls in 4 bytes (our
#: encoder and proton's write an array of nulls so; they write no other zero-width element in an array).
ZERO_WIDTH_ELEMENTS_PER_BYTE = 64

#: The same for list0 elements, each a new empty list (64 bytes with its pointer): 512 bytes per byte too.
EMPTY_LISTS_PER_BYTE = 8

#: Most uuid or described keys of one map that may share a hash (see ``_count_key_hash``).
MAX_KEYS_OF_ONE_HASH = 16

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


def _list8_decoder(table: list[Decoder]) -> Decoder:
    """The list8 decoder reading its items through ``table``."""

    def decode_list8(data: Any, offset: int, depth: int) -> tuple[Any, int]:
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
        decoders = table
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

    return decode_list8


def _list32_decoder(table: list[Decoder]) -> Decoder:
    """The list32 decoder reading its items through ``table``."""

    def decode_list32(data: Any, offset: int, depth: int) -> tuple[Any, int]:
        if depth >= MAX_DEPTH:
            raise DecodeError(f"nesting deeper than {MAX_DEPTH}", offset=offset)
        count, position, end = _compound_bounds(data, offset, True)
        return _list_items(table, data, position, end, count, depth + 1, offset)

    return decode_list32


def _list_items(
    decoders: list[Decoder], data: Any, position: int, end: int, count: int, depth: int, offset: int
) -> tuple[Any, int]:
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


def _map8_decoder(table: list[Decoder]) -> Decoder:
    """The map8 decoder reading its keys and values through ``table``."""

    def decode_map8(data: Any, offset: int, depth: int) -> tuple[Any, int]:
        try:
            end = offset + 1 + data[offset]
            count = data[offset + 1]
        except IndexError:
            raise _truncated(offset, 2, data) from None
        position = offset + 2
        if end > len(data) or count > end - position or depth >= MAX_DEPTH:
            raise _compound_error(data, offset, False, depth)
        return _map_items(table, data, position, end, count, depth + 1, offset)

    return decode_map8


def _map32_decoder(table: list[Decoder]) -> Decoder:
    """The map32 decoder reading its keys and values through ``table``."""

    def decode_map32(data: Any, offset: int, depth: int) -> tuple[Any, int]:
        # The common case inline (proton writes every message's map body as a map32): size and count, 4 bytes each.
        position = offset + 8
        if position <= len(data):
            size, count = _unpack_II(data, offset)
            end = offset + 4 + size
            if size >= 4 and end <= len(data) and count <= end - position and depth < MAX_DEPTH:
                return _map_items(table, data, position, end, count, depth + 1, offset)
        raise _compound_error(data, offset, True, depth)

    return decode_map32


def _map_items(
    decoders: list[Decoder], data: Any, position: int, end: int, count: int, depth: int, offset: int
) -> tuple[Any, int]:
    if count & 1:
        raise DecodeError(f"map holds an odd number of items ({count})", offset=offset)
    result: dict[Any, Any] = {}
    key_offset = start = position
    count >>= 1
    key_hashes: dict[int, int] | None = None  # of uuid and described keys (see _count_key_hash)
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
                if code == 0x98 or code == 0x00:
                    key_hashes = _count_key_hash(key_hashes, key, key_offset)
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


def _count_key_hash(hashes: dict[int, int] | None, key: Any, offset: int) -> dict[int, int]:
    """Count the map keys of each hash among a map's uuid and described keys; refuse more than
    :data:`MAX_KEYS_OF_ONE_HASH` of one.

    Python's dict takes time in the square of the number of keys that share a hash. Strings hash with a secret
    key, and a 64-bit number shares its hash with at most 8 others (an int hashes as itself modulo 2**61 - 1), but
    a uuid hashes as its 128-bit number, and a described value as the tuple of its parts: a peer can send as many
    keys of one hash as it likes (8,000 such uuid keys, a 144 KB message, took 3 s to decode; a megabyte would
    take minutes). Keys whose hashes are alike by chance are never that many.

    Raises:
        TypeError: an unhashable key (the caller makes it a DecodeError).
    """
    if hashes is None:
        hashes = {}
    key_hash = hash(key)
    seen = hashes.get(key_hash, 0) + 1
    if seen > MAX_KEYS_OF_ONE_HASH:
        raise DecodeError(f"map has more than {MAX_KEYS_OF_ONE_HASH} keys of one hash (hash flooding)", offset=offset)
    hashes[key_hash] = seen
    return hashes


# Described values whose descriptor names a registered composite type decode to that type (§1.3), in the values
# :data:`_DECODERS` reads (frames); the application's values (:data:`_APPLICATION_DECODERS`) never do.
_DESCRIBED_FACTORIES: dict[Any, Callable[[Any], Any]] = {}


def _described_decoder(table: list[Decoder], factories: dict[Any, Callable[[Any], Any]] | None) -> Decoder:
    """The decoder of a described value (§1.3) reading its descriptor and value through ``table``: a value whose
    descriptor is in ``factories`` becomes ``factory(value)``, any other ``Described(descriptor, value)``."""

    def decode_described(data: Any, offset: int, depth: int) -> tuple[Any, int]:
        if depth >= MAX_DEPTH:
            raise DecodeError(f"nesting deeper than {MAX_DEPTH}", offset=offset)
        if offset >= len(data):
            raise _truncated(offset, 1, data)
        depth += 1
        descriptor, position = table[data[offset]](data, offset + 1, depth)
        if position >= len(data):
            raise DecodeError("described value has a descriptor but no value", offset=position)
        value, end = table[data[position]](data, position + 1, depth)
        descriptor_type = descriptor.__class__
        if factories is not None and (descriptor_type is ulong or descriptor_type is symbol):
            factory = factories.get(descriptor)
            if factory is not None:
                try:
                    return factory(value), end
                except DecodeError as exc:
                    raise DecodeError(exc.reason, offset=offset - 1) from None
                except (TypeError, ValueError) as exc:
                    raise DecodeError(f"invalid {descriptor!r}: {exc}", offset=offset - 1) from None
        return Described(descriptor, value), end

    return decode_described


def register_described(
    code: int,
    name: str,
    factory: Callable[[Any], Any],
    name_factory: Callable[[Any], Any] | None = None,
) -> None:
    """Decode values described by ``ulong(code)`` or ``symbol(name)`` as ``factory(value)`` (in frames: not in the
    application's values, see :func:`decode_application_value`).

    ``name_factory``, when given, decodes the values described by ``symbol(name)`` instead, for a type that keeps
    the form of the descriptor it was read with. The factory may raise :class:`DecodeError` (or
    TypeError/ValueError) for a value it cannot accept; the decoder re-raises it as a :class:`DecodeError` at the
    described value's offset.
    """
    _DESCRIBED_FACTORIES[_new_int(ulong, code)] = factory
    _DESCRIBED_FACTORIES[_new_str(symbol, name)] = factory if name_factory is None else name_factory


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


def _decode_elements(
    decoders: list[Decoder], data: Any, code: int, position: int, end: int, count: int, depth: int
) -> tuple[list[Any], int]:
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
    element_decoder = decoders[code]
    elements = []
    for _ in range(count):
        if position >= end and code not in _ZERO_WIDTH:
            raise DecodeError("array elements overrun the array's size", offset=position)
        value, position = element_decoder(data, position, depth)
        elements.append(value)
    return elements, position


def _check_zero_width_count(count: int, code: int, size: int, offset: int) -> None:
    """Refuse an array of ``count`` zero-width elements (constructor ``code``) whose encoding takes ``size`` bytes,
    if they are more than its bytes allow (:data:`ZERO_WIDTH_ELEMENTS_PER_BYTE`, :data:`EMPTY_LISTS_PER_BYTE`) or
    than :data:`MAX_ZERO_WIDTH_ELEMENTS`.

    A cap per array alone does not bound a message: an array of such arrays, 9 bytes apiece, made 58,000 times
    its size in memory (a 9 KB message, 0.5 GB). Bounded by its bytes, each costs its share of the message.
    """
    per_byte = EMPTY_LISTS_PER_BYTE if code == 0x45 else ZERO_WIDTH_ELEMENTS_PER_BYTE
    limit = min(size * per_byte, MAX_ZERO_WIDTH_ELEMENTS)
    if count > limit:
        raise DecodeError(
            f"array of {count} zero-width elements in {size} bytes exceeds the limit of {limit} "
            f"({per_byte} a byte, {MAX_ZERO_WIDTH_ELEMENTS} at most)",
            offset=offset,
        )


def _array_decoder(wide: bool, table: list[Decoder]) -> Decoder:
    """The array8 (or, ``wide``, array32) decoder reading its descriptor and elements through ``table``."""

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
            descriptor, position = table[data[position + 1]](data, position + 2, depth)
            if position >= end:
                raise DecodeError("array has no element constructor after its descriptor", offset=position)
            code = data[position]
        type_code = _ELEMENT_TYPES.get(code)
        if type_code is None:
            raise DecodeError(f"invalid array element constructor {code:#04x}", offset=position)
        # Elements take at least one byte each, except for zero-width constructors (null, true, false, uint0,
        # ulong0, list0), whose count alone would size the result: those are bounded by the array's own bytes.
        if code in _ZERO_WIDTH or code == 0x45:
            _check_zero_width_count(count, code, end - offset + 1, offset)
        elif count > end - position - 1:
            raise DecodeError(f"count {count} exceeds the {end - position - 1} bytes of the array", offset=offset)
        elements, position = _decode_elements(table, data, code, position + 1, end, count, depth)
        if position != end:
            raise DecodeError(f"array size says it ends at {end}, its elements end at {position}", offset=offset)
        return Array(descriptor, type_code, *elements), end

    return decode_array


# --- dispatch ----------------------------------------------------------------------------------------------


def _decoder_table(factories: dict[Any, Callable[[Any], Any]] | None) -> list[Decoder]:
    """A dispatch table by format code whose compound and described values read their items through itself, and
    whose described values become ``factories``' types (None: every one a :class:`Described`)."""
    table = list(_SCALAR_DECODERS)
    table[0x00] = _described_decoder(table, factories)
    table[0x45] = _dec_list0
    table[0xC0] = _list8_decoder(table)
    table[0xD0] = _list32_decoder(table)
    table[0xC1] = _map8_decoder(table)
    table[0xD1] = _map32_decoder(table)
    table[0xE0] = _array_decoder(False, table)
    table[0xF0] = _array_decoder(True, table)
    return table


#: The decoders of frames (performatives, delivery states, terminus...): a described value whose descriptor is
#: registered (:func:`register_described`) decodes to that type.
_DECODERS = _decoder_table(_DESCRIBED_FACTORIES)

#: The decoders of the application's values: a message's annotations, application properties, body and footer
#: (§3.2.2-§3.2.9). What the application put there is its own: a described value in them stays a
#: ``Described(descriptor, value)`` whatever its descriptor, as python-qpid-proton reads it, even one AMQP defines
#: for its own types (``0x24``, accepted; ``amqp:source:list``), which would otherwise come back as that type (or,
#: holding what that type does not, make the whole message undecodable).
_APPLICATION_DECODERS = _decoder_table(None)


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


def decode_application_value(data: Buffer, offset: int = 0, depth: int = 0) -> tuple[Any, int]:
    """Decode the application's value at ``offset`` of ``data`` (a message's body, annotations, application
    properties or footer); return it and the offset just past it.

    As :func:`decode_value`, except that every described value comes back as a :class:`Described`, whatever its
    descriptor (see :data:`_APPLICATION_DECODERS`).

    Raises:
        DecodeError: the bytes are not a valid AMQP encoding.
    """
    if data.__class__ is not bytes:
        data = bytes(data)  # as in decode_value
    if offset >= len(data) or offset < 0:
        raise DecodeError("no value: the data ends here", offset=offset)
    return _APPLICATION_DECODERS[data[offset]](data, offset + 1, depth)
