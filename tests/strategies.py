"""Shared hypothesis strategies for AMQP 1.0 values, and a typed equality for comparing decoded values.

Every strategy produces values in the Python mapping of the codec contract (docs/architecture.md): ``None``,
``bool``, ``int`` (AMQP long), ``float`` (double), ``str``, ``bytes``, ``uuid.UUID``, ``list``, ``dict`` and the
``amqp_async.types`` classes for everything else. Integer strategies mix boundary values (sampled) with uniform
draws so that every encoding's edge (smallulong vs ulong, str8 vs str32, ...) is hit often.

Described values use descriptors the codec does not register (ulong codes >= 0x100 below the AMQP-reserved
domains, symbols in a private namespace), so they decode back to ``types.Described``.

Import as ``from strategies import ...`` (pytest puts tests/ on sys.path) or ``from tests.strategies import ...``.
"""

from __future__ import annotations

import math
import struct
import sys
import uuid
from typing import Any

from hypothesis import strategies as st

from amqp_async import types as T

TypeCode = T.TypeCode

# ---------------------------------------------------------------------------------------------------------------
# boundaries

#: Interesting integers across every AMQP integer width; each strategy keeps those inside its own range.
INT_BOUNDARIES: tuple[int, ...] = tuple(
    sorted(
        {
            0,
            1,
            -1,
            2,
            127,
            128,
            -128,
            -129,
            255,
            256,
            -256,
            32767,
            32768,
            -32768,
            -32769,
            65535,
            65536,
            2**31 - 1,
            2**31,
            -(2**31),
            -(2**31) - 1,
            2**32 - 1,
            2**32,
            2**63 - 1,
            2**63,
            -(2**63),
            2**64 - 1,
        }
    )
)

FLT_MAX = struct.unpack(">f", b"\x7f\x7f\xff\xff")[0]
FLT_MIN_NORMAL = 2.0**-126
FLT_MIN_SUBNORMAL = 2.0**-149

FLOAT32_BOUNDARIES: tuple[float, ...] = (
    0.0,
    -0.0,
    1.0,
    -1.0,
    math.inf,
    -math.inf,
    math.nan,
    FLT_MAX,
    -FLT_MAX,
    FLT_MIN_NORMAL,
    FLT_MIN_SUBNORMAL,
    -FLT_MIN_SUBNORMAL,
)

DOUBLE_BOUNDARIES: tuple[float, ...] = (
    0.0,
    -0.0,
    1.0,
    -1.0,
    0.1,
    math.inf,
    -math.inf,
    math.nan,
    sys.float_info.max,
    -sys.float_info.max,
    sys.float_info.min,
    5e-324,
    float(2**53 + 2),
)

#: (low, high) of every AMQP integer type, by the Python class that carries it.
INT_RANGES: dict[type, tuple[int, int]] = {
    T.ubyte: (0, 2**8 - 1),
    T.ushort: (0, 2**16 - 1),
    T.uint: (0, 2**32 - 1),
    T.ulong: (0, 2**64 - 1),
    T.byte: (-(2**7), 2**7 - 1),
    T.short: (-(2**15), 2**15 - 1),
    T.int32: (-(2**31), 2**31 - 1),
    int: (-(2**63), 2**63 - 1),
    T.timestamp: (-(2**63), 2**63 - 1),
    T.decimal32: (0, 2**32 - 1),
    T.decimal64: (0, 2**64 - 1),
}


def ranged_ints(cls: type, low: int | None = None, high: int | None = None) -> st.SearchStrategy[Any]:
    """Integers of ``cls`` (an AMQP integer class or ``int`` for long): boundary values and uniform draws."""
    lo, hi = INT_RANGES[cls]
    if low is not None:
        lo = max(lo, low)
    if high is not None:
        hi = min(hi, high)
    edges = [v for v in INT_BOUNDARIES if lo <= v <= hi] + [lo, hi]
    base = st.one_of(st.sampled_from(sorted(set(edges))), st.integers(lo, hi))
    if cls is int:
        return base
    return base.map(cls)


def ubytes() -> st.SearchStrategy[T.ubyte]:
    return ranged_ints(T.ubyte)


def ushorts() -> st.SearchStrategy[T.ushort]:
    return ranged_ints(T.ushort)


def uints() -> st.SearchStrategy[T.uint]:
    return ranged_ints(T.uint)


def ulongs() -> st.SearchStrategy[T.ulong]:
    return ranged_ints(T.ulong)


def bytes_() -> st.SearchStrategy[T.byte]:
    return ranged_ints(T.byte)


def shorts() -> st.SearchStrategy[T.short]:
    return ranged_ints(T.short)


def int32s() -> st.SearchStrategy[T.int32]:
    return ranged_ints(T.int32)


def longs() -> st.SearchStrategy[int]:
    return ranged_ints(int)


def timestamps() -> st.SearchStrategy[T.timestamp]:
    return ranged_ints(T.timestamp)


def decimal32s() -> st.SearchStrategy[T.decimal32]:
    return ranged_ints(T.decimal32)


def decimal64s() -> st.SearchStrategy[T.decimal64]:
    return ranged_ints(T.decimal64)


def decimal128s() -> st.SearchStrategy[T.decimal128]:
    return st.one_of(
        st.sampled_from([b"\x00" * 16, b"\xff" * 16, b"\x00" * 15 + b"\x01"]), st.binary(min_size=16, max_size=16)
    ).map(T.decimal128)


def doubles() -> st.SearchStrategy[float]:
    return st.one_of(st.sampled_from(DOUBLE_BOUNDARIES), st.floats())


def float32s() -> st.SearchStrategy[T.float32]:
    """Values exactly representable as IEEE binary32 (so they survive the 4-byte encoding unchanged)."""
    return st.one_of(st.sampled_from(FLOAT32_BOUNDARIES), st.floats(width=32)).map(T.float32)


def chars() -> st.SearchStrategy[T.char]:
    """Single code points, BMP and astral, no surrogates (which UTF-32 cannot carry)."""
    return st.one_of(
        st.sampled_from(["\x00", "a", "\x7f", "\x80", "é", "\uffff", "\U0001f600", "\U0010ffff"]),
        st.characters(exclude_categories=("Cs",)),
    ).map(T.char)


_LENGTH_EDGES = (0, 1, 254, 255, 256)


def _sized(unit: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    """Strings of a boundary length built from one repeated unit (length in characters)."""
    return st.builds(lambda n, c: c * n, st.sampled_from(_LENGTH_EDGES), unit)


def strings(max_size: int = 30) -> st.SearchStrategy[str]:
    """Unicode text incl. astral characters, plus str8/str32 boundary lengths in bytes."""
    return st.one_of(
        st.text(max_size=max_size),
        st.text(alphabet=st.characters(min_codepoint=0x10000, max_codepoint=0x10FFFF), max_size=5),
        _sized(st.sampled_from(["a", "é", "\u20ac", "\U0001f600"])),
        # exactly 255 / 256 bytes of UTF-8 made of multi-byte characters
        st.sampled_from(["é" * 127 + "a", "é" * 128, "\U0001f600" * 63 + "abc", "\U0001f600" * 64]),
    )


def symbols(max_size: int = 30) -> st.SearchStrategy[T.symbol]:
    return st.one_of(
        st.text(alphabet=st.characters(max_codepoint=0x7F), max_size=max_size),
        _sized(st.just("s")),
    ).map(T.symbol)


def binaries(max_size: int = 30) -> st.SearchStrategy[bytes]:
    return st.one_of(
        st.binary(max_size=max_size),
        st.builds(lambda n, c: c * n, st.sampled_from(_LENGTH_EDGES), st.sampled_from([b"\x00", b"\xff"])),
    )


def uuids() -> st.SearchStrategy[uuid.UUID]:
    return st.one_of(st.sampled_from([uuid.UUID(int=0), uuid.UUID(int=2**128 - 1)]), st.uuids())


#: Element strategy for every AMQP primitive that can be an array element, keyed by proton's type code.
def scalar_strategies() -> dict[TypeCode, st.SearchStrategy[Any]]:
    return {
        TypeCode.NULL: st.none(),
        TypeCode.BOOL: st.booleans(),
        TypeCode.UBYTE: ubytes(),
        TypeCode.BYTE: bytes_(),
        TypeCode.USHORT: ushorts(),
        TypeCode.SHORT: shorts(),
        TypeCode.UINT: uints(),
        TypeCode.INT: int32s(),
        TypeCode.CHAR: chars(),
        TypeCode.ULONG: ulongs(),
        TypeCode.LONG: longs(),
        TypeCode.TIMESTAMP: timestamps(),
        TypeCode.FLOAT: float32s(),
        TypeCode.DOUBLE: doubles(),
        TypeCode.DECIMAL32: decimal32s(),
        TypeCode.DECIMAL64: decimal64s(),
        TypeCode.DECIMAL128: decimal128s(),
        TypeCode.UUID: uuids(),
        TypeCode.BINARY: binaries(),
        TypeCode.STRING: strings(),
        TypeCode.SYMBOL: symbols(),
    }


def scalars() -> st.SearchStrategy[Any]:
    """Any AMQP primitive scalar (not list, map, array or described)."""
    return st.one_of(*scalar_strategies().values())


def hashable_scalars(*, binary: bool = True) -> st.SearchStrategy[Any]:
    """Scalars usable as map keys. ``binary=False`` leaves out bytes (proton decodes binary keys to memoryview,
    which it then cannot hash)."""
    strategies = scalar_strategies()
    if not binary:
        del strategies[TypeCode.BINARY]
    return st.one_of(*strategies.values())


# ---------------------------------------------------------------------------------------------------------------
# descriptors and compound values


def descriptors() -> st.SearchStrategy[Any]:
    """Descriptors that no composite type registers: ulong codes from 0x100 up to 2**32 - 1 (the AMQP domain,
    beyond its 0x00-0xff codes) plus a few in a made-up domain, and symbols in a private namespace."""
    return st.one_of(
        st.sampled_from([0x100, 0x1234, 2**32 - 1, 0xDEADBEEF_00000001, 2**64 - 1]).map(T.ulong),
        st.integers(0x100, 2**32 - 1).map(T.ulong),
        st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-.:", max_size=20).map(
            lambda s: T.symbol("example.org:" + s)
        ),
        st.sampled_from([T.symbol("x"), T.symbol("x" * 256)]),
    )


def array_descriptors() -> st.SearchStrategy[Any]:
    return st.one_of(st.just(T.UNDESCRIBED), descriptors())


def make_array(descriptor: Any, code: TypeCode, elements: list[Any]) -> T.Array:
    return T.Array(descriptor, code, *elements)


def scalar_arrays(max_size: int = 6, *, described: bool = True) -> st.SearchStrategy[T.Array]:
    """Arrays of every scalar element type, undescribed and (if ``described``) described."""
    desc = array_descriptors() if described else st.just(T.UNDESCRIBED)
    return st.one_of(
        *[
            st.builds(make_array, desc, st.just(code), st.lists(elem, max_size=max_size))
            for code, elem in scalar_strategies().items()
        ]
    )


def boundary_count_arrays() -> st.SearchStrategy[T.Array]:
    """Arrays around the array8/array32 boundary: count 255/256 of nulls (zero-width) and ubytes."""
    return st.one_of(
        st.builds(lambda n: T.Array(T.UNDESCRIBED, TypeCode.NULL, *([None] * n)), st.sampled_from([255, 256])),
        st.builds(lambda n: T.Array(T.UNDESCRIBED, TypeCode.UBYTE, *([T.ubyte(7)] * n)), st.sampled_from([253, 254])),
    )


def compound(
    children: st.SearchStrategy[Any],
    keys: st.SearchStrategy[Any],
    *,
    described_arrays: bool = True,
    max_size: int = 4,
) -> st.SearchStrategy[Any]:
    """One level of AMQP compound values over ``children``: list, map, described, arrays of list/map/array."""
    desc = array_descriptors() if described_arrays else st.just(T.UNDESCRIBED)
    lists = st.lists(children, max_size=max_size)
    maps = st.dictionaries(keys, children, max_size=max_size)
    inner_arrays = st.one_of(
        scalar_arrays(max_size=3, described=described_arrays),
        st.builds(make_array, desc, st.just(TypeCode.LIST), st.lists(lists, max_size=3)),
    )
    return st.one_of(
        lists,
        maps,
        st.builds(T.Described, descriptors(), children),
        st.builds(make_array, desc, st.just(TypeCode.LIST), st.lists(lists, max_size=3)),
        st.builds(make_array, desc, st.just(TypeCode.MAP), st.lists(maps, max_size=3)),
        st.builds(make_array, desc, st.just(TypeCode.ARRAY), st.lists(inner_arrays, max_size=3)),
    )


def map_keys(*, described: bool = True, binary: bool = True) -> st.SearchStrategy[Any]:
    """Hashable map keys of mixed types; described keys carry a hashable scalar."""
    base = hashable_scalars(binary=binary)
    if not described:
        return base
    return st.one_of(base, st.builds(T.Described, descriptors(), base))


def amqp_values(
    *,
    max_leaves: int = 12,
    described_keys: bool = True,
    binary_keys: bool = True,
    described_arrays: bool = True,
) -> st.SearchStrategy[Any]:
    """Any AMQP value: scalars, arrays of every element type, and nested lists, maps, described values."""
    keys = map_keys(described=described_keys, binary=binary_keys)
    leaves = st.one_of(scalars(), scalar_arrays(described=described_arrays))
    return st.recursive(
        leaves,
        lambda children: compound(children, keys, described_arrays=described_arrays),
        max_leaves=max_leaves,
    )


# ---------------------------------------------------------------------------------------------------------------
# typed equality


def first_difference(a: Any, b: Any, path: str = "$") -> str | None:
    """Where ``a`` and ``b`` differ in type or value (recursively), or ``None`` if they are typed-equal.

    Floats compare bitwise-ish: NaN equals NaN, and -0.0 differs from 0.0. Maps compare pair by pair in order.
    Arrays compare descriptor, element type (as an int) and elements.
    """
    if type(a) is not type(b):
        return f"{path}: type {type(a).__name__} != {type(b).__name__} ({a!r} vs {b!r})"
    if isinstance(a, float):
        if math.isnan(a) and math.isnan(b):
            return None
        if a == b and math.copysign(1.0, a) == math.copysign(1.0, b):
            return None
        return f"{path}: {a!r} != {b!r}"
    if isinstance(a, (list, tuple)):
        if len(a) != len(b):
            return f"{path}: length {len(a)} != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            diff = first_difference(x, y, f"{path}[{i}]")
            if diff:
                return diff
        return None
    if isinstance(a, dict):
        if len(a) != len(b):
            return f"{path}: map size {len(a)} != {len(b)}"
        for i, ((ka, va), (kb, vb)) in enumerate(zip(a.items(), b.items(), strict=True)):
            diff = first_difference(ka, kb, f"{path}.key{i}") or first_difference(va, vb, f"{path}[{ka!r}]")
            if diff:
                return diff
        return None
    if isinstance(a, T.Described):
        return first_difference(a.descriptor, b.descriptor, f"{path}.descriptor") or first_difference(
            a.value, b.value, f"{path}.value"
        )
    if isinstance(a, T.Array):
        if (a.descriptor is T.UNDESCRIBED) != (b.descriptor is T.UNDESCRIBED):
            return f"{path}.descriptor: {a.descriptor!r} != {b.descriptor!r}"
        if a.descriptor is not T.UNDESCRIBED:
            diff = first_difference(a.descriptor, b.descriptor, f"{path}.descriptor")
            if diff:
                return diff
        if int(a.type) != int(b.type):
            return f"{path}.type: {a.type!r} != {b.type!r}"
        return first_difference(list(a.elements), list(b.elements), f"{path}.elements")
    if a != b:
        return f"{path}: {a!r} != {b!r}"
    return None


def typed_equal(a: Any, b: Any) -> bool:
    """True when ``a`` and ``b`` are equal in value and in type, all the way down."""
    return first_difference(a, b) is None


def assert_typed_equal(actual: Any, expected: Any) -> None:
    diff = first_difference(actual, expected)
    assert diff is None, f"{diff}\n  actual:   {actual!r}\n  expected: {expected!r}"


__all__ = [
    "DOUBLE_BOUNDARIES",
    "FLOAT32_BOUNDARIES",
    "INT_BOUNDARIES",
    "INT_RANGES",
    "amqp_values",
    "array_descriptors",
    "assert_typed_equal",
    "binaries",
    "boundary_count_arrays",
    "bytes_",
    "chars",
    "compound",
    "decimal32s",
    "decimal64s",
    "decimal128s",
    "descriptors",
    "doubles",
    "first_difference",
    "float32s",
    "hashable_scalars",
    "int32s",
    "longs",
    "make_array",
    "map_keys",
    "ranged_ints",
    "scalar_arrays",
    "scalar_strategies",
    "scalars",
    "shorts",
    "strings",
    "symbols",
    "timestamps",
    "typed_equal",
    "ubytes",
    "uints",
    "ulongs",
    "ushorts",
    "uuids",
]
