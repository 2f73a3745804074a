"""AMQP 1.0 codec against the spec (§1.6 "Primitive Type Definitions", §1.2-1.5 "Type System"/"Encodings").

Every expected byte string here is written by hand from the spec's encoding tables, not taken from the codec or
another implementation. Encoding must pick the smallest form; decoding must accept every form, including the
non-minimal ones, and give values of the exact Python type the contract names.
"""

from __future__ import annotations

import math
import re
import struct
import uuid
from typing import Any

import pytest

from amqp_async import codec
from amqp_async import types as T
from amqp_async.errors import AMQPError, DecodeError, EncodeError

try:
    from strategies import assert_typed_equal
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.strategies import assert_typed_equal

TC = T.TypeCode
U = T.UNDESCRIBED


def h(text: str) -> bytes:
    """Hex with optional spaces -> bytes."""
    return bytes.fromhex(text.replace(" ", "").replace("\n", ""))


def u32(n: int) -> str:
    return f"{n:08x}"


# ---------------------------------------------------------------------------------------------------------------
# exact encodings of boundary values: (value, expected hex)

ENCODINGS: list[tuple[Any, str]] = [
    # null, boolean
    (None, "40"),
    (True, "41"),
    (False, "42"),
    # ubyte / ushort / byte / short: a single form each
    (T.ubyte(0), "50 00"),
    (T.ubyte(255), "50 ff"),
    (T.ushort(0), "60 0000"),
    (T.ushort(256), "60 0100"),
    (T.ushort(65535), "60 ffff"),
    (T.byte(0), "51 00"),
    (T.byte(127), "51 7f"),
    (T.byte(-1), "51 ff"),
    (T.byte(-128), "51 80"),
    (T.short(-1), "61 ffff"),
    (T.short(32767), "61 7fff"),
    (T.short(-32768), "61 8000"),
    # uint: uint0 / smalluint / uint
    (T.uint(0), "43"),
    (T.uint(1), "52 01"),
    (T.uint(255), "52 ff"),
    (T.uint(256), "70 00000100"),
    (T.uint(2**32 - 1), "70 ffffffff"),
    # ulong: ulong0 / smallulong / ulong
    (T.ulong(0), "44"),
    (T.ulong(1), "53 01"),
    (T.ulong(255), "53 ff"),
    (T.ulong(256), "80 0000000000000100"),
    (T.ulong(2**32), "80 0000000100000000"),
    (T.ulong(2**64 - 1), "80 ffffffffffffffff"),
    # int: smallint / int
    (T.int32(0), "54 00"),
    (T.int32(127), "54 7f"),
    (T.int32(-128), "54 80"),
    (T.int32(128), "71 00000080"),
    (T.int32(-129), "71 ffffff7f"),
    (T.int32(2**31 - 1), "71 7fffffff"),
    (T.int32(-(2**31)), "71 80000000"),
    # long (Python int): smalllong / long
    (0, "55 00"),
    (1, "55 01"),
    (-1, "55 ff"),
    (127, "55 7f"),
    (-128, "55 80"),
    (128, "81 0000000000000080"),
    (255, "81 00000000000000ff"),
    (256, "81 0000000000000100"),
    (-129, "81 ffffffffffffff7f"),
    (2**32 - 1, "81 00000000ffffffff"),
    (2**63 - 1, "81 7fffffffffffffff"),
    (-(2**63), "81 8000000000000000"),
    # float / double
    (T.float32(0.0), "72 00000000"),
    (T.float32(-0.0), "72 80000000"),
    (T.float32(1.5), "72 3fc00000"),
    (T.float32(math.inf), "72 7f800000"),
    (T.float32(-math.inf), "72 ff800000"),
    (T.float32(2.0**-149), "72 00000001"),
    (0.0, "82 0000000000000000"),
    (-0.0, "82 8000000000000000"),
    (1.5, "82 3ff8000000000000"),
    (math.inf, "82 7ff0000000000000"),
    (-2.0, "82 c000000000000000"),
    # decimals: the raw IEEE 754-2008 bits
    (T.decimal32(0), "74 00000000"),
    (T.decimal32(0x22500001), "74 22500001"),
    (T.decimal32(2**32 - 1), "74 ffffffff"),
    (T.decimal64(1), "84 0000000000000001"),
    (T.decimal64(2**64 - 1), "84 ffffffffffffffff"),
    (T.decimal128(bytes(range(16))), "94 000102030405060708090a0b0c0d0e0f"),
    # char: UTF-32BE
    (T.char("a"), "73 00000061"),
    (T.char("\x00"), "73 00000000"),
    (T.char("é"), "73 000000e9"),
    (T.char("\U0001f600"), "73 0001f600"),
    (T.char("\U0010ffff"), "73 0010ffff"),
    # timestamp: ms since the epoch, signed 64
    (T.timestamp(0), "83 0000000000000000"),
    (T.timestamp(1311704463521), "83 0000013167adb8a1"),
    (T.timestamp(-1), "83 ffffffffffffffff"),
    (T.timestamp(2**63 - 1), "83 7fffffffffffffff"),
    # uuid
    (uuid.UUID("00112233-4455-6677-8899-aabbccddeeff"), "98 00112233445566778899aabbccddeeff"),
    (uuid.UUID(int=0), "98 00000000000000000000000000000000"),
    # binary: vbin8 / vbin32
    (b"", "a0 00"),
    (b"\x00\xff", "a0 02 00ff"),
    (b"\xab" * 255, "a0 ff" + "ab" * 255),
    (b"\xab" * 256, "b0 00000100" + "ab" * 256),
    (bytearray(b"xy"), "a0 02 7879"),
    (memoryview(b"xy"), "a0 02 7879"),
    # string: str8-utf8 / str32-utf8 (the size counts UTF-8 octets, not characters)
    ("", "a1 00"),
    ("a", "a1 01 61"),
    ("é", "a1 02 c3a9"),
    ("\U0001f600", "a1 04 f09f9880"),
    ("a" * 255, "a1 ff" + "61" * 255),
    ("a" * 256, "b1 00000100" + "61" * 256),
    ("é" * 127 + "a", "a1 ff" + "c3a9" * 127 + "61"),
    ("é" * 128, "b1 00000100" + "c3a9" * 128),
    # symbol: sym8 / sym32
    (T.symbol(""), "a3 00"),
    (T.symbol("amqp:accepted:list"), "a3 12" + b"amqp:accepted:list".hex()),
    (T.symbol("s" * 255), "a3 ff" + "73" * 255),
    (T.symbol("s" * 256), "b3 00000100" + "73" * 256),
    # list: list0 / list8 / list32 (size counts the count field and the items)
    ([], "45"),
    ((), "45"),
    ([None], "c0 02 01 40"),
    ([1, "a"], "c0 06 02 5501 a10161"),
    ((True, False), "c0 03 02 41 42"),
    ([[]], "c0 02 01 45"),
    ([[None]], "c0 05 01 c00201 40"),
    # map: map8 / map32 (count is the number of keys plus values)
    ({}, "c1 01 00"),
    ({"a": 1}, "c1 06 02 a10161 5501"),
    ({T.symbol("k"): None, 1: T.uint(0)}, "c1 08 04 a3016b 40 5501 43"),
    ({None: {}}, "c1 05 02 40 c10100"),
    # described: 0x00 descriptor value
    (T.Described(T.ulong(0x100), "a"), "00 80 0000000000000100 a10161"),
    (T.Described(T.symbol("x"), None), "00 a30178 40"),
    (T.Described(T.symbol("example.org:t"), []), "00 a30d" + b"example.org:t".hex() + "45"),
    (
        T.Described(T.ulong(0x100), T.Described(T.symbol("y"), 1)),
        "00 80 0000000000000100 00 a30179 5501",
    ),
    ([T.Described(T.symbol("x"), T.uint(7))], "c0 07 01 00a30178 5207"),
]


@pytest.mark.parametrize(("value", "expected"), ENCODINGS, ids=[f"{i}:{e[:14]}" for i, (_, e) in enumerate(ENCODINGS)])
def test_encode_exact(value: Any, expected: str) -> None:
    assert codec.encode(value).hex() == h(expected).hex()


def _expected_decoded(value: Any) -> Any:
    """What decoding the encoding of ``value`` gives back: tuples become lists, bytes-likes become bytes."""
    if isinstance(value, tuple):
        return [_expected_decoded(v) for v in value]
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, list):
        return [_expected_decoded(v) for v in value]
    if isinstance(value, dict):
        return {_expected_decoded(k): _expected_decoded(v) for k, v in value.items()}
    return value


@pytest.mark.parametrize(("value", "expected"), ENCODINGS, ids=[f"{i}:{e[:14]}" for i, (_, e) in enumerate(ENCODINGS)])
def test_decode_exact(value: Any, expected: str) -> None:
    assert_typed_equal(codec.decode(h(expected)), _expected_decoded(value))


# ---------------------------------------------------------------------------------------------------------------
# every form decodes, including the non-minimal ones

NON_MINIMAL: list[tuple[str, Any]] = [
    ("56 00", False),
    ("56 01", True),
    ("43", T.uint(0)),
    ("52 00", T.uint(0)),
    ("52 05", T.uint(5)),
    ("70 00000000", T.uint(0)),
    ("70 00000005", T.uint(5)),
    ("44", T.ulong(0)),
    ("53 00", T.ulong(0)),
    ("53 05", T.ulong(5)),
    ("80 0000000000000005", T.ulong(5)),
    ("54 fb", T.int32(-5)),
    ("71 00000005", T.int32(5)),
    ("71 fffffffb", T.int32(-5)),
    ("55 05", 5),
    ("81 0000000000000005", 5),
    ("81 ffffffffffffffff", -1),
    ("a0 00", b""),
    ("b0 00000000", b""),
    ("b0 00000002 0102", b"\x01\x02"),
    ("b1 00000000", ""),
    ("b1 00000001 61", "a"),
    ("b1 00000002 c3a9", "é"),
    ("b3 00000001 61", T.symbol("a")),
    ("b3 00000000", T.symbol("")),
    ("c0 01 00", []),
    ("d0 00000004 00000000", []),
    ("d0 00000006 00000001 5501", [1]),
    ("c0 04 02 43 52 01", [T.uint(0), T.uint(1)]),
    ("d0 00000008 00000002 a10161 41", ["a", True]),
    ("d1 00000004 00000000", {}),
    ("d1 00000009 00000002 a10161 5501", {"a": 1}),
    ("d1 0000000e 00000004 5301 40 b100000000 56 00", {T.ulong(1): None, "": False}),
    ("00 80 0000000000000100 40", T.Described(T.ulong(0x100), None)),
    ("00 b3 00000001 78 b1 00000001 61", T.Described(T.symbol("x"), "a")),
    # wide array forms and wide element constructors
    ("f0 00000005 00000000 70", T.Array(U, TC.UINT)),
    ("f0 0000000d 00000002 70 00000001 00000002", T.Array(U, TC.UINT, T.uint(1), T.uint(2))),
    ("e0 04 02 52 01 02", T.Array(U, TC.UINT, T.uint(1), T.uint(2))),
    ("f0 00000015 00000002 80 0000000000000000 0000000000000001", T.Array(U, TC.ULONG, T.ulong(0), T.ulong(1))),
    ("f0 0000000d 00000002 71 00000001 ffffffff", T.Array(U, TC.INT, T.int32(1), T.int32(-1))),
    ("f0 00000015 00000002 81 0000000000000001 ffffffffffffffff", T.Array(U, TC.LONG, 1, -1)),
    ("f0 00000007 00000002 56 01 00", T.Array(U, TC.BOOL, True, False)),
    ("f0 0000000a 00000001 b1 00000001 61", T.Array(U, TC.STRING, "a")),
    ("f0 0000000a 00000001 b3 00000001 61", T.Array(U, TC.SYMBOL, T.symbol("a"))),
    ("f0 0000000a 00000001 b0 00000001 61", T.Array(U, TC.BINARY, b"a")),
    ("f0 0000000f 00000001 d0 00000006 00000001 5501", T.Array(U, TC.LIST, [1])),
    ("f0 0000000d 00000001 d1 00000004 00000000", T.Array(U, TC.MAP, {})),
    (
        "f0 0000000e 00000001 f0 00000005 00000000 52",
        T.Array(U, TC.ARRAY, T.Array(U, TC.UINT)),
    ),
    (
        "f0 00000015 00000002 00 b3 00000001 78 b1 00000001 61 00000000",
        T.Array(T.symbol("x"), TC.STRING, "a", ""),
    ),
]


@pytest.mark.parametrize(("data", "expected"), NON_MINIMAL, ids=[d[:20] for d, _ in NON_MINIMAL])
def test_decode_every_form(data: str, expected: Any) -> None:
    assert_typed_equal(codec.decode(h(data)), expected)


def test_decoded_scalar_types_are_exact() -> None:
    cases = [
        (T.uint(5), T.uint),
        (T.ulong(5), T.ulong),
        (T.ubyte(5), T.ubyte),
        (T.ushort(5), T.ushort),
        (T.byte(5), T.byte),
        (T.short(5), T.short),
        (T.int32(5), T.int32),
        (5, int),
        (True, bool),
        (None, type(None)),
        (1.0, float),
        (T.float32(1.0), T.float32),
        (T.decimal32(5), T.decimal32),
        (T.decimal64(5), T.decimal64),
        (T.decimal128(b"\x01" * 16), T.decimal128),
        (T.char("x"), T.char),
        (T.timestamp(5), T.timestamp),
        (uuid.UUID(int=5), uuid.UUID),
        (b"x", bytes),
        ("x", str),
        (T.symbol("x"), T.symbol),
        ([1], list),
        ({1: 2}, dict),
        (T.Described(T.symbol("x"), 1), T.Described),
        (T.Array(U, TC.INT, T.int32(1)), T.Array),
    ]
    for value, cls in cases:
        decoded = codec.decode(codec.encode(value))
        assert type(decoded) is cls, (value, type(decoded))


# ---------------------------------------------------------------------------------------------------------------
# compound size boundaries: list8/list32, map8/map32, array8/array32


def test_list8_list32_size_boundary() -> None:
    # [str of k bytes]: items = a1 kk + k bytes; list8 size field = 1 (count) + 2 + k
    at_255 = ["x" * 252]
    assert codec.encode(at_255) == h("c0 ff 01 a1 fc") + b"x" * 252
    at_256 = ["x" * 253]
    assert codec.encode(at_256) == h("d0 00000103 00000001 a1 fd") + b"x" * 253
    assert codec.decode(codec.encode(at_255)) == at_255
    assert codec.decode(codec.encode(at_256)) == at_256


def test_list8_list32_count_boundary() -> None:
    # 254 nulls: size 255 (list8); 255 nulls: size 256 (list32); 256 nulls: count 256 (list32)
    assert codec.encode([None] * 254) == h("c0 ff fe") + b"\x40" * 254
    assert codec.encode([None] * 255) == h("d0 00000103 000000ff") + b"\x40" * 255
    assert codec.encode([None] * 256) == h("d0 00000104 00000100") + b"\x40" * 256
    for n in (254, 255, 256):
        assert codec.decode(codec.encode([None] * n)) == [None] * n


def test_map8_map32_size_boundary() -> None:
    # {None: str of k bytes}: pairs = 40 a1 kk + k; map8 size field = 1 (count) + 3 + k
    at_255 = {None: "y" * 251}
    assert codec.encode(at_255) == h("c1 ff 02 40 a1 fb") + b"y" * 251
    at_256 = {None: "y" * 252}
    assert codec.encode(at_256) == h("d1 00000103 00000002 40 a1 fc") + b"y" * 252
    assert codec.decode(codec.encode(at_255)) == at_255
    assert codec.decode(codec.encode(at_256)) == at_256


def test_map8_map32_count_boundary() -> None:
    # 127 pairs -> count 254; 128 pairs -> count 256 (needs map32 whatever the size)
    m127 = {T.ubyte(i): None for i in range(127)}  # 3 bytes a pair: 381 bytes -> map32 anyway
    body = b"".join(b"\x50" + bytes([i]) + b"\x40" for i in range(127))
    assert codec.encode(m127) == h("d1") + struct.pack(">II", 4 + len(body), 254) + body
    m128 = {T.ubyte(i): None for i in range(128)}
    body = b"".join(b"\x50" + bytes([i]) + b"\x40" for i in range(128))
    assert codec.encode(m128) == h("d1") + struct.pack(">II", 4 + len(body), 256) + body
    assert codec.decode(codec.encode(m128)) == m128


def test_array8_array32_size_boundary() -> None:
    # ubyte array of n: array8 size field = 1 (count) + 1 (constructor 50) + n
    a253 = T.Array(U, TC.UBYTE, *[T.ubyte(7)] * 253)
    assert codec.encode(a253) == h("e0 ff fd 50") + b"\x07" * 253
    a254 = T.Array(U, TC.UBYTE, *[T.ubyte(7)] * 254)
    assert codec.encode(a254) == h("f0 00000103 000000fe 50") + b"\x07" * 254
    assert_typed_equal(codec.decode(codec.encode(a253)), a253)
    assert_typed_equal(codec.decode(codec.encode(a254)), a254)


def test_array8_array32_count_boundary_zero_width_null() -> None:
    # null elements take no bytes: 255 nulls fit array8, 256 need array32 for the count alone
    a255 = T.Array(U, TC.NULL, *[None] * 255)
    assert codec.encode(a255) == h("e0 02 ff 40")
    a256 = T.Array(U, TC.NULL, *[None] * 256)
    assert codec.encode(a256) == h("f0 00000005 00000100 40")
    assert_typed_equal(codec.decode(h("e0 02 ff 40")), a255)
    assert_typed_equal(codec.decode(h("f0 00000005 00000100 40")), a256)


# ---------------------------------------------------------------------------------------------------------------
# arrays: every element type, smallest uniform element constructor, described arrays, arrays of arrays

ARRAYS: list[tuple[T.Array, str]] = [
    (T.Array(U, TC.NULL, None), "e0 02 01 40"),
    (T.Array(U, TC.BOOL, True, False, True), "e0 05 03 56 01 00 01"),
    (T.Array(U, TC.BOOL, True), "e0 03 01 56 01"),
    (T.Array(U, TC.UBYTE, T.ubyte(0), T.ubyte(255)), "e0 04 02 50 00 ff"),
    (T.Array(U, TC.BYTE, T.byte(-1), T.byte(1)), "e0 04 02 51 ff 01"),
    (T.Array(U, TC.USHORT, T.ushort(1)), "e0 04 01 60 0001"),
    (T.Array(U, TC.SHORT, T.short(-2)), "e0 04 01 61 fffe"),
    (T.Array(U, TC.UINT, T.uint(0), T.uint(1)), "e0 04 02 52 00 01"),
    (T.Array(U, TC.UINT, T.uint(0), T.uint(256)), "e0 0a 02 70 00000000 00000100"),
    (T.Array(U, TC.UINT, T.uint(0)), "e0 03 01 52 00"),  # never uint0 inside an array
    (T.Array(U, TC.INT, T.int32(-128), T.int32(127)), "e0 04 02 54 80 7f"),
    (T.Array(U, TC.INT, T.int32(-129), T.int32(0)), "e0 0a 02 71 ffffff7f 00000000"),
    (T.Array(U, TC.CHAR, T.char("a"), T.char("\U0001f600")), "e0 0a 02 73 00000061 0001f600"),
    (T.Array(U, TC.ULONG, T.ulong(0), T.ulong(255)), "e0 04 02 53 00 ff"),
    (T.Array(U, TC.ULONG, T.ulong(256)), "e0 0a 01 80 0000000000000100"),
    (T.Array(U, TC.LONG, 0, -1), "e0 04 02 55 00 ff"),
    (T.Array(U, TC.LONG, 128, 0), "e0 12 02 81 0000000000000080 0000000000000000"),
    (T.Array(U, TC.TIMESTAMP, T.timestamp(1)), "e0 0a 01 83 0000000000000001"),
    (T.Array(U, TC.FLOAT, T.float32(1.5)), "e0 06 01 72 3fc00000"),
    (T.Array(U, TC.DOUBLE, 1.5, -0.0), "e0 12 02 82 3ff8000000000000 8000000000000000"),
    (T.Array(U, TC.DECIMAL32, T.decimal32(1)), "e0 06 01 74 00000001"),
    (T.Array(U, TC.DECIMAL64, T.decimal64(1)), "e0 0a 01 84 0000000000000001"),
    (T.Array(U, TC.DECIMAL128, T.decimal128(b"\x11" * 16)), "e0 12 01 94" + "11" * 16),
    (T.Array(U, TC.UUID, uuid.UUID(int=1)), "e0 12 01 98 00000000000000000000000000000001"),
    (T.Array(U, TC.BINARY, b"", b"ab"), "e0 06 02 a0 00 02 6162"),
    (T.Array(U, TC.BINARY, b"a", b"\x00" * 256), "f0 0000010e 00000002 b0 00000001 61 00000100" + "00" * 256),
    (T.Array(U, TC.STRING, "a", "bc"), "e0 07 02 a1 01 61 02 6263"),
    (T.Array(U, TC.SYMBOL, T.symbol("a"), T.symbol("")), "e0 05 02 a3 01 61 00"),
    (T.Array(U, TC.SYMBOL, T.symbol("s" * 256)), "f0 00000109 00000001 b3 00000100" + "73" * 256),
    # arrays of lists / maps (list0 is never used inside an array: the empty list is list8 01 00)
    (T.Array(U, TC.LIST, [1], []), "e0 08 02 c0 03 01 5501 01 00"),
    (T.Array(U, TC.LIST, []), "e0 04 01 c0 01 00"),
    (T.Array(U, TC.MAP, {1: None}), "e0 07 01 c1 04 02 5501 40"),
    (T.Array(U, TC.MAP, {}, {}), "e0 06 02 c1 01 00 01 00"),
    # arrays of arrays: each element is size, count, its own element constructor, data
    (
        T.Array(U, TC.ARRAY, T.Array(U, TC.INT, T.int32(1)), T.Array(U, TC.STRING, "ab")),
        "e0 0c 02 e0 03 01 54 01 05 01 a1 02 6162",
    ),
    (
        T.Array(U, TC.ARRAY, T.Array(T.symbol("x"), TC.NULL, None, None)),
        "e0 09 01 e0 06 02 00 a3 01 78 40",
    ),
    # described arrays: 0x00 descriptor element-constructor after the count
    (
        T.Array(T.ulong(0x100), TC.INT, T.int32(1), T.int32(2)),
        "e0 0e 02 00 80 0000000000000100 54 01 02",
    ),
    (T.Array(T.symbol("x:y"), TC.STRING, "a"), "e0 0a 01 00 a3 03 783a79 a1 01 61"),
    (T.Array(T.symbol("x"), TC.LIST, [None]), "e0 09 01 00 a3 01 78 c0 02 01 40"),
    (
        T.Array(T.ulong(0x100), TC.ARRAY, T.Array(U, TC.BOOL, True)),
        "e0 10 01 00 80 0000000000000100 e0 03 01 56 01",
    ),
    # arrays inside lists and maps
    ([T.Array(U, TC.UBYTE, T.ubyte(1))], "c0 06 01 e0 03 01 50 01"),
    ({T.symbol("a"): T.Array(U, TC.SYMBOL, T.symbol("b"))}, "c1 0a 02 a3 01 61 e0 04 01 a3 01 62"),
]


@pytest.mark.parametrize(("array", "expected"), ARRAYS, ids=[f"{i}:{e[:20]}" for i, (_, e) in enumerate(ARRAYS)])
def test_array_encode_exact(array: Any, expected: str) -> None:
    assert codec.encode(array).hex() == h(expected).hex()


@pytest.mark.parametrize(("array", "expected"), ARRAYS, ids=[f"{i}:{e[:20]}" for i, (_, e) in enumerate(ARRAYS)])
def test_array_decode_exact(array: Any, expected: str) -> None:
    assert_typed_equal(codec.decode(h(expected)), array)


EMPTY_ARRAY_CONSTRUCTORS = {
    TC.NULL: {0x40},
    TC.BOOL: {0x56},
    TC.UBYTE: {0x50},
    TC.BYTE: {0x51},
    TC.USHORT: {0x60},
    TC.SHORT: {0x61},
    TC.UINT: {0x52, 0x70},
    TC.INT: {0x54, 0x71},
    TC.CHAR: {0x73},
    TC.ULONG: {0x53, 0x80},
    TC.LONG: {0x55, 0x81},
    TC.TIMESTAMP: {0x83},
    TC.FLOAT: {0x72},
    TC.DOUBLE: {0x82},
    TC.DECIMAL32: {0x74},
    TC.DECIMAL64: {0x84},
    TC.DECIMAL128: {0x94},
    TC.UUID: {0x98},
    TC.BINARY: {0xA0, 0xB0},
    TC.STRING: {0xA1, 0xB1},
    TC.SYMBOL: {0xA3, 0xB3},
    TC.LIST: {0xC0, 0xD0},
    TC.MAP: {0xC1, 0xD1},
    TC.ARRAY: {0xE0, 0xF0},
}


@pytest.mark.parametrize("code", list(EMPTY_ARRAY_CONSTRUCTORS), ids=lambda c: c.name)
def test_empty_array_every_type(code: T.TypeCode) -> None:
    # with no element the spec does not say which width is "smallest": any non-zero-width form of the type
    data = codec.encode(T.Array(U, code))
    assert data[:3] == h("e0 02 00"), data.hex()
    assert len(data) == 4
    assert data[3] in EMPTY_ARRAY_CONSTRUCTORS[code], data.hex()
    assert_typed_equal(codec.decode(data), T.Array(U, code))


def test_empty_described_array() -> None:
    data = codec.encode(T.Array(T.symbol("x"), TC.BOOL))
    assert data == h("e0 06 00 00 a30178 56")
    assert_typed_equal(codec.decode(data), T.Array(T.symbol("x"), TC.BOOL))


def test_array_elements_are_coerced_to_the_array_type() -> None:
    # as proton: plain ints in an INT array are AMQP ints, and decode as int32
    assert codec.encode(T.Array(U, TC.INT, 1, 2)) == h("e0 04 02 54 01 02")
    assert codec.encode(T.Array(U, TC.UINT, 300)) == h("e0 06 01 70 0000012c")
    assert codec.encode(T.Array(U, TC.SYMBOL, "a")) == h("e0 04 01 a3 01 61")
    assert_typed_equal(codec.decode(h("e0 04 02 54 01 02")), T.Array(U, TC.INT, T.int32(1), T.int32(2)))


# ---------------------------------------------------------------------------------------------------------------
# encode_into / decode_at / input buffer types


def test_encode_into_appends() -> None:
    buf = bytearray(b"\xaa\xbb")
    codec.encode_into(buf, [T.uint(1), "a"])
    assert bytes(buf) == h("aabb c0 06 02 5201 a10161")
    codec.encode_into(buf, None)
    assert bytes(buf) == h("aabb c0 06 02 5201 a10161 40")


def test_decode_at_offsets() -> None:
    data = h("ff 40 5201 a10161 c00201 40")
    assert codec.decode_at(data, 1) == (None, 2)
    value, end = codec.decode_at(data, 2)
    assert type(value) is T.uint and value == 1 and end == 4
    assert codec.decode_at(data, 4) == ("a", 7)
    assert codec.decode_at(data, 7) == ([None], 11)


@pytest.mark.parametrize("wrap", [bytes, bytearray, memoryview], ids=["bytes", "bytearray", "memoryview"])
def test_decode_accepts_buffer_types(wrap: Any) -> None:
    data = h("c0 0b 03 a0 02 6162 a1 01 61 a3 01 62")
    decoded = codec.decode(wrap(data))
    assert_typed_equal(decoded, [b"ab", "a", T.symbol("b")])
    assert type(decoded[0]) is bytes  # never a memoryview into the caller's buffer


def test_binary_from_memoryview_input_is_a_copy() -> None:
    source = bytearray(h("a0 02 6162"))
    decoded = codec.decode(memoryview(source))
    source[2:4] = b"zz"
    assert decoded == b"ab"


# ---------------------------------------------------------------------------------------------------------------
# errors


@pytest.mark.parametrize(
    "make",
    [
        lambda: T.ulong(-1),
        lambda: T.ulong(2**64),
        lambda: T.ubyte(256),
        lambda: T.ubyte(-1),
        lambda: T.ushort(65536),
        lambda: T.uint(2**32),
        lambda: T.byte(128),
        lambda: T.byte(-129),
        lambda: T.short(32768),
        lambda: T.int32(2**31),
        lambda: T.int32(-(2**31) - 1),
        lambda: T.timestamp(2**63),
        lambda: T.decimal32(-1),
        lambda: T.decimal64(2**64),
        lambda: T.symbol("é"),
        lambda: T.char("ab"),
        lambda: T.char(""),
        lambda: T.char("\ud800"),
        lambda: T.decimal128(b"x" * 17),
        lambda: T.float32(1e39),
    ],
)
def test_out_of_range_construction_raises_encode_error(make: Any) -> None:
    with pytest.raises(EncodeError):
        make()


def test_short_decimal128_is_padded_as_proton_pads_it() -> None:
    """Fewer than 16 bytes are padded with zero bytes at the end (python-qpid-proton's ``put_decimal128`` does the
    same: ``tests/test_proton_data.py`` compares the bytes)."""
    assert T.decimal128(b"12345") == b"12345" + b"\x00" * 11
    assert codec.encode(T.decimal128(b"12345")) == b"\x94" + b"12345" + b"\x00" * 11


def repr_without_address(value: object) -> str:
    """A test id that is the same in every process (pytest-xdist compares them): repr() less any " at 0x..."."""
    return re.sub(r" at 0x[0-9a-fA-F]+", "", repr(value))


@pytest.mark.parametrize(
    "value",
    [
        object(),
        {1, 2},
        frozenset(),
        2**63,
        -(2**63) - 1,
        2**100,
        [1, object()],
        {"k": object()},
        T.Described(T.symbol("x"), object()),
        "\ud800",  # a lone surrogate has no UTF-8 form
        str.__new__(T.char, "\ud800"),  # bypasses the constructor check: the encoder must refuse it too
        T.Array(U, TC.INT, "x"),
        T.Array(U, TC.UBYTE, 256),
        T.Array(U, TC.INT, 2**31),
        T.Array(U, TC.LONG, 2**63),
        T.Array(U, TC.LONG, None),
        T.Array(U, TC.STRING, 1),
        T.Array(U, TC.NULL, 1),
        T.Array(U, TC.DECIMAL128, b"x"),
        T.Array(U, TC.LIST, 1),
        [2**64],
        {2**63: None},
        1j,
    ],
    ids=repr_without_address,
)
def test_encode_unsupported_raises_encode_error(value: Any) -> None:
    with pytest.raises(EncodeError) as info:
        codec.encode(value)
    assert isinstance(info.value, AMQPError)


def test_encode_error_leaves_encode_into_usable() -> None:
    buf = bytearray()
    with pytest.raises(EncodeError):
        codec.encode_into(buf, object())
    codec.encode_into(buf, None)
    assert buf.endswith(b"\x40")


def test_decode_trailing_bytes_raise() -> None:
    with pytest.raises(DecodeError) as info:
        codec.decode(h("40 40"))
    err = info.value
    assert err.condition == "amqp:decode-error"
    assert err.offset == 1
    assert isinstance(err.reason, str) and err.reason


def test_decode_trailing_after_compound_raise() -> None:
    with pytest.raises(DecodeError) as info:
        codec.decode(h("c0 02 01 40 00"))
    assert info.value.offset == 4


@pytest.mark.parametrize(
    "data",
    [
        "",
        "ff",
        "01",
        "a1",  # no size
        "a1 05 61",  # shorter than its size
        "70 0000",  # truncated uint
        "00",  # described with nothing
        "00 a30178",  # described with no value
        "c1 02 01 40",  # map with an odd count
        "a1 01 ff",  # invalid UTF-8
        "a1 02 c3",  # size beyond data
        "c0 03 02 40",  # count beyond data
        "d0 ffffffff ffffffff",  # a list claiming 4 GiB
    ],
)
def test_decode_malformed_raises_decode_error(data: str) -> None:
    raw = h(data)
    with pytest.raises(DecodeError) as info:
        codec.decode(raw)
    err = info.value
    assert err.condition == "amqp:decode-error"
    assert 0 <= err.offset <= len(raw)
    assert isinstance(err.reason, str) and err.reason
