"""Decoding a message by the layout its producer repeats: the fast path of :meth:`Message.decode`.

A producer builds its messages one way: the same sections, the same fields and keys in the same order, values of
the same types. From one message to the next, what changes is the content of a few values: an id, a sequence
number, a timestamp, a body of the same length. So once a message has been decoded the general way (every byte
read and checked by the codec), its *layout* is learnt: which byte ranges hold the content of a value that may
vary (a number, a timestamp, a uuid, a string's or a binary's bytes: the *holes*), and that every other byte
(constructors, sizes, counts, descriptors, map keys, symbols, nulls, booleans) is what it was. A later message of
the same length whose bytes outside the holes are all equal has the same structure, byte for byte, so it decodes
by reading its holes only: one struct call for the numbers and a slice for each string or binary, in a function
generated for the layout (as ``attrs`` and ``dataclasses`` generate theirs) that builds its lists and maps
directly. A message that differs anywhere outside its holes is decoded the general way.

Why this is sound: the general decoder reads a hole's bytes only as the content of its value, never as a
constructor, a size or a count, so a message equal outside the holes walks the same path through the decoder; and
any bytes are a valid fixed-width number, timestamp, uuid or binary. A string's bytes are checked as UTF-8 (when
they are not, the message goes to the general decoder, which names the error). Section order and the types of the
header's and the properties' fields were checked on the message the layout was learnt from, and they are in its
fixed bytes. And each layout, once generated, is checked against the general decoder's result on that message,
value for value and type for type; one that differs is not kept.

Bounds: a length is learnt only when a message of that length was decoded the general way once before (messages of
ever-new lengths do not compile layouts they never reuse), and then at the 4th, 8th, 16th... such message (one whose
layout cannot be learnt is not traced each time); at most :data:`LAYOUTS_PER_LENGTH` layouts per length and
:data:`MAX_LENGTHS` lengths, each of at most :data:`MAX_VALUES` values and :data:`MAX_FIXED_BYTES` fixed bytes, and
:data:`MAX_TOTAL_VALUES` values in all (some 6 MiB at worst; kilobytes for an application's usual few layouts);
past them, messages are decoded the general way, at the cost of a dictionary lookup. The layouts are the process's,
shared by its connections: a peer sending ever-new layouts can use them up, which costs the others this fast path,
never a wrong decoding.
"""

from __future__ import annotations

import functools
import struct
import threading
from collections.abc import Callable
from typing import Any

from ..codec._decoder import _APPLICATION_DECODERS
from ..codec._uuid import uuid_class
from ..codec.section_codes import AMQP_VALUE as _AMQP_VALUE
from ..codec.section_codes import APPLICATION_PROPERTIES as _APPLICATION_PROPERTIES
from ..codec.section_codes import DATA as _DATA
from ..codec.section_codes import DELIVERY_ANNOTATIONS as _DELIVERY_ANNOTATIONS
from ..codec.section_codes import HEADER as _HEADER
from ..codec.section_codes import MESSAGE_ANNOTATIONS as _MESSAGE_ANNOTATIONS
from ..codec.section_codes import PROPERTIES as _PROPERTIES

__all__ = [
    "LAYOUTS_PER_LENGTH",
    "MAX_FIXED_BYTES",
    "MAX_LENGTHS",
    "MAX_TOTAL_VALUES",
    "MAX_VALUES",
    "Layout",
    "forget",
    "layouts_for",
    "learn",
]

#: A generated decoder: fills the (empty) message's attributes from the bytes and returns True, or returns False,
#: having set nothing, when the bytes do not have its layout.
Layout = Callable[[Any, bytes], bool]

#: Most layouts kept for one message length (a producer rarely has more than one or two per length).
LAYOUTS_PER_LENGTH = 4
#: Most message lengths with layouts.
MAX_LENGTHS = 128
#: Most lengths whose general decodes are counted (then the counts start again).
_MAX_COUNTED = 8192
#: Most values (items of lists and maps included) and most fixed bytes in one layout: a message with more is
#: decoded the general way (what bounds the memory the layouts hold, whatever the messages).
MAX_VALUES = 128
MAX_FIXED_BYTES = 2048
#: Strings and binaries longer than this are sliced after the fixed bytes are compared, not read with them.
_SLICED_ABOVE = 256
#: Most values in all layouts together (a layout holds some 400 bytes of code per value, 2 KiB besides).
MAX_TOTAL_VALUES = 8192

_layouts: dict[int, tuple[Layout, ...]] = {}
_general_decodes: dict[int, int] = {}
_values_held = 0  # in _layouts
_learning = threading.Lock()  # the proton API's threads decode too; two learning the same length keep one each

# The message's attribute that each section sets (the general decoder, in __init__.py, sets the same ones).
_MAP_ATTRIBUTES = {
    _DELIVERY_ANNOTATIONS: "_instructions",
    _MESSAGE_ANNOTATIONS: "_annotations",
    _APPLICATION_PROPERTIES: "properties",
}
_HEADER_ATTRIBUTES = ("_durable", "_priority", "_ttl", "_first_acquirer", "_delivery_count")
_PROPERTY_COUNT = 13  # §3.2.4: the properties list's fields; later ones are ignored (§1.4)

# Fixed-width values whose content is a hole: their struct format (big-endian, §1.6) by format code.
_NUMBER_FORMATS = {
    0x50: "B", 0x51: "b", 0x52: "B", 0x53: "B", 0x54: "b", 0x55: "b",  # one byte: ubyte, byte, small*
    0x60: "H", 0x61: "h",  # ushort, short
    0x70: "I", 0x71: "i", 0x72: "f",  # uint, int, float
    0x80: "Q", 0x81: "q", 0x82: "d", 0x83: "q",  # ulong, long, double, timestamp
    0x98: "16s",  # uuid
}  # fmt: skip
# Values that are constants of a layout: what the general decoder returns for them is immutable, so the layout
# keeps and returns that very object. char, decimals and booleans are rare enough not to be holes.
_CONSTANT_CODES = frozenset((0x43, 0x44, 0x56, 0x73, 0x74, 0x84, 0x94, 0xA3, 0xB3))
#: null, true and false, written as Python's literals.
_LITERALS = {0x40: "None", 0x41: "True", 0x42: "False"}


class _NotLearnable(Exception):
    """The message holds something a layout does not cover (arrays, described values, a footer...)."""


#: ``layouts_for(length)``: the layouts learnt for messages of ``length`` bytes, or None. The dictionary's own
#: ``get`` (it is cleared, never replaced): the lookup every decode makes costs no call of a Python function.
layouts_for: Callable[[int], tuple[Layout, ...] | None] = _layouts.get


def learn(message: Any, data: bytes) -> None:
    """Learn the layout of ``data``, which the general decoder has just decoded into ``message`` (whose attributes
    are the reference the layout must reproduce), if the bounds allow it and ``data`` is of a learnable form."""
    length = len(data)
    layouts = _layouts.get(length, ())
    if len(layouts) >= LAYOUTS_PER_LENGTH or (not layouts and len(_layouts) >= MAX_LENGTHS):
        return
    # The general decodes of this length, counted: learning is tried at the 2nd, 4th, 8th... so that a length whose
    # messages will not fit a layout (or a new one each time) is traced ever more rarely.
    count = _general_decodes.get(length, 0) + 1
    if count == 1 and len(_general_decodes) >= _MAX_COUNTED:
        _general_decodes.clear()
    _general_decodes[length] = count
    if count & (count - 1) or count == 1:
        return
    global _values_held
    if _values_held >= MAX_TOTAL_VALUES:
        return
    try:
        layout, values = _generate(data, message.__dict__)
    except (_NotLearnable, IndexError, KeyError, UnicodeDecodeError):
        return
    probe = message.__class__.__new__(message.__class__)
    if not layout(probe, data) or not _same_attributes(probe.__dict__, message.__dict__):
        return  # a layout that misreads the message it came from is a bug (tested); decoding stays right
    with _learning:
        current = _layouts.get(length, ())
        if len(current) < LAYOUTS_PER_LENGTH and _values_held + values <= MAX_TOTAL_VALUES:
            _layouts[length] = (*current, layout)
            _values_held += values


def forget() -> None:
    """Drop every learnt layout (tests; the module's state is otherwise kept for the process's life)."""
    global _values_held
    with _learning:
        _layouts.clear()
        _general_decodes.clear()
        _values_held = 0


# --- generating a layout ----------------------------------------------------------------------------------------


class _Generator:
    """Walks a message's bytes (already decoded once, so well-formed) and writes the source of its layout."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        # The holes in order: (start, end, the struct format reading the hole or None to skip it, its local).
        self.holes: list[tuple[int, int, str | None, str]] = []
        self.slices: list[str] = []  # statements slicing long holes
        self.decodes: list[str] = []  # statements decoding string holes (they may fail as UTF-8)
        self.constants: dict[str, Any] = {}
        self.values = 0

    def constant(self, value: Any) -> str:
        name = f"k{len(self.constants)}"
        self.constants[name] = value
        return name

    def number(self, code: int, start: int) -> tuple[str, int]:
        """A hole for the content of the fixed-width value at ``start``, read by the layout's one struct call: the
        expression building the value, and the position after it."""
        fmt = _NUMBER_FORMATS[code]
        end = start + struct.calcsize(">" + fmt)
        local = f"n{len(self.holes)}"
        self.holes.append((start, end, fmt, local))
        if code == 0x98:
            return f"{self.constant(uuid_class())}(bytes={local})", end
        if end - start == 1:
            return f"{self.constant(_one_byte_values(code))}[{local}]", end
        sample = _APPLICATION_DECODERS[code](bytes(end - start), 0, 1)[0]
        if sample.__class__ in (int, float):
            return local, end
        new = int.__new__ if isinstance(sample, int) else float.__new__
        return f"{self.constant(new)}({self.constant(sample.__class__)}, {local})", end

    def value(self, position: int, key: bool = False) -> tuple[str, int]:
        """The expression building the value encoded at ``position`` and the position after it. A map key is a
        constant (a key that changes is a different layout), and so is every value of a code in
        _CONSTANT_CODES."""
        data = self.data
        code = data[position]
        self.values += 1
        if self.values > MAX_VALUES:
            raise _NotLearnable("too many values")
        literal = _LITERALS.get(code)
        if literal is not None:
            return literal, position + 1
        if key or code in _CONSTANT_CODES:
            value, end = _APPLICATION_DECODERS[code](data, position + 1, 1)
            if value.__class__ in (list, dict) or code in (0x00, 0xE0, 0xF0):
                raise _NotLearnable("a key that is a compound or described value")
            return self.constant(value), end
        if code in _NUMBER_FORMATS:
            return self.number(code, position + 1)
        if code in (0xA0, 0xA1):  # vbin8, str8
            return self.blob(code == 0xA1, position + 2, position + 2 + data[position + 1])
        if code in (0xB0, 0xB1):  # vbin32, str32
            start = position + 5
            return self.blob(code == 0xB1, start, start + int.from_bytes(data[position + 1 : start], "big"))
        if code in (0x45, 0xC0, 0xC1, 0xD0, 0xD1):
            is_map, items, end = self.items(position)
            if is_map:
                pairs = (f"{items[index]}: {items[index + 1]}" for index in range(0, len(items), 2))
                return "{" + ", ".join(pairs) + "}", end
            return "[" + ", ".join(items) + "]", end
        raise _NotLearnable(f"format code {code:#04x}")  # described values, arrays

    def blob(self, text: bool, start: int, end: int) -> tuple[str, int]:
        """A hole for a string's or a binary's bytes: read by the struct call when short, sliced once the fixed
        bytes are found equal when long (a message that misses its layout then costs no copy of a large body)."""
        local = f"b{len(self.holes)}"
        if end - start <= _SLICED_ABOVE:
            self.holes.append((start, end, f"{end - start}s", local))
        else:
            self.holes.append((start, end, None, local))
            self.slices.append(f"{local} = data[{start}:{end}]")
        if not text:
            return local, end
        text_local = f"s{len(self.holes) - 1}"
        self.decodes.append(f"{text_local} = {local}.decode()")
        return text_local, end

    def items(self, position: int) -> tuple[bool, list[str], int]:
        """Whether the list or map at ``position`` is a map, its items' expressions, and the position after it."""
        data = self.data
        code = data[position]
        if code == 0x45:  # list0
            return False, [], position + 1
        if code in (0xC0, 0xC1):  # list8, map8: one byte of size, one of count
            count, position = data[position + 2], position + 3
        else:  # list32, map32: four bytes each
            count, position = int.from_bytes(data[position + 5 : position + 9], "big"), position + 9
        is_map = code in (0xC1, 0xD1)
        items = []
        for index in range(count):
            item, position = self.value(position, key=is_map and index % 2 == 0)
            items.append(item)
        return is_map, items, position

    def sections(self, reference: dict[str, Any]) -> list[str]:
        """The statements setting the message's attributes, section by section (as the general decoder does)."""
        data = self.data
        position = 0
        statements: list[str] = []
        body_seen = False
        while position < len(data):
            if data[position] != 0 or data[position + 1] != 0x53:
                raise _NotLearnable("a section descriptor other than a smallulong")
            code = data[position + 2]
            position += 3
            if body_seen:
                raise _NotLearnable("a section after the body (a footer, or a second data section)")
            if code == _HEADER:
                # Constant as a whole: its fields set what they set on the reference (immutable values).
                position = _APPLICATION_DECODERS[data[position]](data, position + 1, 1)[1]
                for name in _HEADER_ATTRIBUTES:
                    if name in reference:
                        statements.append(f"d[{name!r}] = {self.constant(reference[name])}")
            elif code in _MAP_ATTRIBUTES:
                if data[position] not in (0xC1, 0xD1):
                    raise _NotLearnable("an annotations or application-properties section that is not a map")
                expression, position = self.value(position)
                statements.append(f"d[{_MAP_ATTRIBUTES[code]!r}] = {expression}")
            elif code == _PROPERTIES:
                if data[position] not in (0x45, 0xC0, 0xD0):
                    raise _NotLearnable("a properties section that is not a list")
                _, fields, position = self.items(position)
                fields = (fields + ["None"] * _PROPERTY_COUNT)[:_PROPERTY_COUNT]
                statements.append(f"d['_props'] = [{', '.join(fields)}]")
            elif code == _DATA:
                if data[position] not in (0xA0, 0xB0):
                    raise _NotLearnable("a data section that is not a binary")
                expression, position = self.value(position)
                statements += [f"d['body'] = {expression}", "d['_inferred'] = True"]
                body_seen = True
            elif code == _AMQP_VALUE:
                expression, position = self.value(position)
                statements += [f"d['body'] = {expression}", "d['_inferred'] = False"]
                body_seen = True
            else:
                raise _NotLearnable(f"section {code:#x}")
        return statements

    def source(self, statements: list[str]) -> str:
        """The layout's function: one struct call reads the fixed bytes and the holes, the fixed bytes are
        compared, the strings decoded, then the attributes set."""
        data = self.data
        formats: list[str] = []
        locals_: list[str] = []
        checks: list[str] = []
        fixed = 0
        position = 0
        for start, end, fmt, local in [*self.holes, (len(data), len(data), "", "")]:
            if start > position:  # fixed bytes before this hole
                fixed += start - position
                formats.append(f"{start - position}s")
                locals_.append(f"f{len(checks)}")
                checks.append(f"f{len(checks)} != {self.constant(data[position:start])}")
            if fmt is None:
                formats.append(f"{end - start}x")
            elif fmt:
                formats.append(fmt)
                locals_.append(local)
            position = end
        if fixed > MAX_FIXED_BYTES:
            raise _NotLearnable("too many fixed bytes")
        lines = ["def layout(message, data):"]
        if locals_:
            unpack = self.constant(struct.Struct(">" + "".join(formats)).unpack_from)
            lines.append(f"    {', '.join(locals_)}, = {unpack}(data)")
        if checks:
            lines.append(f"    if {' or '.join(checks)}:")
            lines.append("        return False")
        lines += [f"    {statement}" for statement in self.slices]
        if self.decodes:
            lines.append("    try:")
            lines += [f"        {statement}" for statement in self.decodes]
            lines.append("    except UnicodeDecodeError:")
            lines.append("        return False  # the general decoder names the error")
        lines.append("    d = message.__dict__")
        lines += [f"    {statement}" for statement in statements]
        lines.append("    return True")
        return "\n".join(lines) + "\n"


def _generate(data: bytes, reference: dict[str, Any]) -> tuple[Layout, int]:
    """The layout of ``data`` (``reference``: the attributes the general decoder set) and the values it builds."""
    generator = _Generator(data)
    source = generator.source(generator.sections(reference))
    namespace = dict(generator.constants)
    # Our own source: offsets, local names and the constants' names; the message's values reach it as constants.
    exec(compile(source, f"<message layout of {len(data)} bytes>", "exec"), namespace)
    layout: Layout = namespace["layout"]
    return layout, generator.values


@functools.cache
def _one_byte_values(code: int) -> tuple[Any, ...]:
    """The general decoder's own 256 values of a one-byte encoding (it returns shared instances of most)."""
    return tuple(_APPLICATION_DECODERS[code](bytes((byte,)), 0, 1)[0] for byte in range(256))


def _same_attributes(left: dict[str, Any], right: dict[str, Any]) -> bool:
    """The same attributes (in any order) with the same values (see :func:`_same`)."""
    return left.keys() == right.keys() and all(_same(value, right[name]) for name, value in left.items())


def _same(left: Any, right: Any) -> bool:
    """Equal in value and in type, all the way down (``ulong(1) == 1``, but a layout must return a ulong)."""
    if left.__class__ is not right.__class__:
        return False
    if left.__class__ is dict:
        return list(left) == list(right) and all(
            _same(key, other) and _same(left[key], right[other]) for key, other in zip(left, right, strict=True)
        )
    if left.__class__ is list:
        return len(left) == len(right) and all(_same(a, b) for a, b in zip(left, right, strict=True))
    return bool(left == right)
