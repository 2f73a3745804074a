"""``Data.encode()`` writes the bytes python-qpid-proton writes, byte for byte.

Programs encode proton ``Data`` to hash it, compare it or store it, so the bytes themselves must be proton's, not
merely bytes proton reads back: proton-c writes scalars in their smallest form, an empty list as ``list0``, every
other list and every map with 32-bit size and count, and arrays as ``array32`` with a fixed-width element constructor
(``0x56`` booleans, ``0x71`` ints, ``0xb1`` strings...). The real proton is the oracle throughout: the same value
(hypothesis strategies of ``tests/strategies.py``), the same sequence of ``put_*`` calls, or the same bytes decoded
and encoded again, must give the same bytes on both.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import given, settings

import amqp_async.proton as ours_api
from amqp_async import codec
from amqp_async import types as T
from amqp_async.proton import Data

proton = pytest.importorskip("proton", reason="python-qpid-proton is the oracle (CI installs it)")

try:
    import strategies as S
    from test_codec_proton import proton_safe, to_proton
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests import strategies as S
    from tests.test_codec_proton import proton_safe, to_proton

# proton's Described is not hashable: no described map keys on its side.
VALUES = S.amqp_values(described_keys=False, binary_keys=True)


def ours(*values: Any) -> bytes:
    data = Data()
    for value in values:
        data.put_object(value)
    return data.encode()


def theirs(*values: Any) -> bytes:
    data = proton.Data()
    for value in values:
        data.put_object(to_proton(value))
    return bytes(data.encode())


@settings(max_examples=400)
@given(VALUES)
def test_put_object_encodes_proton_bytes(value: Any) -> None:
    raw = ours(value)
    assert raw.hex() == theirs(value).hex()
    data = Data()
    assert data.encoded_size() == 0
    data.put_object(value)
    assert data.encoded_size() == len(raw)


@settings(max_examples=200)
@given(VALUES, VALUES)
def test_several_top_level_values(first: Any, second: Any) -> None:
    assert ours(first, second, None).hex() == theirs(first, second, None).hex()


@settings(max_examples=300)
@given(VALUES.filter(proton_safe))
def test_decoded_bytes_are_encoded_again_as_proton_does(value: Any) -> None:
    # The codec writes the smallest forms (list8, map8, array8...): decoded and encoded again, each Data writes
    # proton's forms, the same bytes. (proton_safe: proton misreads a described value in a described value.)
    compact = codec.encode(value)
    mine = Data()
    mine.decode(compact)
    other = proton.Data()
    other.decode(compact)
    assert mine.encode().hex() == bytes(other.encode()).hex()


def _build(api: Any, data: Any) -> None:
    """The same sequence of put_* calls, on either implementation (``api`` has its classes)."""
    data.put_list()
    data.enter()
    data.put_int(7)
    data.put_string("x" * 300)
    data.put_map()
    data.enter()
    data.put_symbol(api.symbol("k"))
    data.put_list()
    data.exit()
    data.put_described()
    data.enter()
    data.put_ulong(api.ulong(0x70))
    data.put_list()
    data.enter()
    data.put_null()
    data.put_bool(True)
    data.exit()
    data.exit()
    data.put_array(True, api.Data.BOOL)
    data.enter()
    data.put_symbol(api.symbol("flags"))
    data.put_bool(True)
    data.put_bool(False)
    data.exit()
    data.put_array(False, api.Data.ARRAY)
    data.enter()
    data.put_array(False, api.Data.STRING)
    data.enter()
    data.put_string("a")
    data.exit()
    data.put_array(False, api.Data.STRING)
    data.exit()
    data.exit()
    data.put_array(False, api.Data.NULL)
    data.enter()
    data.put_null()
    data.put_null()
    data.exit()


def test_put_calls_encode_proton_bytes() -> None:
    mine, other = Data(), proton.Data()
    _build(ours_api, mine)
    _build(proton, other)
    assert mine.encode().hex() == bytes(other.encode()).hex()


EDGES = [
    [],
    [[]],
    {},
    [{}],
    {"k": []},
    T.Described(T.ulong(1), []),
    T.Described(T.symbol("d"), {}),
    "x" * 255,
    "x" * 256,
    b"\x00" * 256,
    T.symbol("s" * 256),
    list(range(300)),
    {i: None for i in range(200)},
    T.Array(T.UNDESCRIBED, T.TypeCode.NULL),
    T.Array(T.UNDESCRIBED, T.TypeCode.NULL, None, None, None),
    T.Array(T.symbol("d"), T.TypeCode.INT),
    T.Array(T.Described(T.symbol("a"), 1), T.TypeCode.INT, T.int32(1)),
    T.Array(T.UNDESCRIBED, T.TypeCode.LIST, [], [1]),
    T.Array(T.UNDESCRIBED, T.TypeCode.MAP, {}),
    T.Array(T.UNDESCRIBED, T.TypeCode.ARRAY, T.Array(T.UNDESCRIBED, T.TypeCode.BOOL)),
    *[
        T.Array(T.UNDESCRIBED, code, *values)
        for code, values in [
            (T.TypeCode.BOOL, [True, False]),
            (T.TypeCode.UBYTE, [T.ubyte(0), T.ubyte(255)]),
            (T.TypeCode.BYTE, [T.byte(-1)]),
            (T.TypeCode.USHORT, [T.ushort(0)]),
            (T.TypeCode.SHORT, [T.short(-2)]),
            (T.TypeCode.UINT, [T.uint(0), T.uint(1)]),
            (T.TypeCode.INT, [T.int32(0), T.int32(-1)]),
            (T.TypeCode.CHAR, [T.char("a")]),
            (T.TypeCode.ULONG, [T.ulong(0), T.ulong(2**64 - 1)]),
            (T.TypeCode.LONG, [0, -(2**63)]),
            (T.TypeCode.TIMESTAMP, [T.timestamp(0)]),
            (T.TypeCode.FLOAT, [T.float32(1.5)]),
            (T.TypeCode.DOUBLE, [0.5]),
            (T.TypeCode.DECIMAL32, [T.decimal32(1)]),
            (T.TypeCode.DECIMAL64, [T.decimal64(1)]),
            (T.TypeCode.DECIMAL128, [T.decimal128(b"\x01" * 16)]),
            (T.TypeCode.UUID, [uuid.UUID(int=1)]),
            (T.TypeCode.BINARY, [b"", b"ab"]),
            (T.TypeCode.STRING, ["", "é"]),
            (T.TypeCode.SYMBOL, [T.symbol("")]),
        ]
    ],
]


@pytest.mark.parametrize("value", EDGES, ids=lambda value: repr(value)[:40])
def test_edges(value: Any) -> None:
    assert ours(value).hex() == theirs(value).hex()


def test_hash_of_bytes_is_proton_s() -> None:
    # what a program that keys a cache by the encoded bytes sees
    import hashlib

    value = {T.symbol("a"): [1, "two", T.Array(T.UNDESCRIBED, T.TypeCode.INT, T.int32(3))]}
    assert hashlib.sha256(ours(value)).hexdigest() == hashlib.sha256(theirs(value)).hexdigest()
