"""Property tests of the AMQP codec against itself: round trip, incremental decoding, canonical form."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from amqp_async import codec
from amqp_async import types as T

try:
    from strategies import (
        amqp_values,
        assert_typed_equal,
        boundary_count_arrays,
        scalar_arrays,
        scalars,
    )
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.strategies import (
        amqp_values,
        assert_typed_equal,
        boundary_count_arrays,
        scalar_arrays,
        scalars,
    )


@given(scalars())
def test_scalar_round_trip(value: Any) -> None:
    assert_typed_equal(codec.decode(codec.encode(value)), value)


@given(scalar_arrays())
def test_array_round_trip(value: T.Array) -> None:
    assert_typed_equal(codec.decode(codec.encode(value)), value)


@settings(max_examples=10)
@given(boundary_count_arrays())
def test_boundary_arrays_round_trip(value: T.Array) -> None:
    assert_typed_equal(codec.decode(codec.encode(value)), value)


@given(amqp_values())
def test_nested_round_trip(value: Any) -> None:
    data = codec.encode(value)
    assert_typed_equal(codec.decode(data), value)
    assert_typed_equal(codec.decode(bytearray(data)), value)
    assert_typed_equal(codec.decode(memoryview(data)), value)
    assert_typed_equal(codec.decode(memoryview(b"\x00\x01" + data)[2:]), value)  # a view not at offset 0


@given(amqp_values())
def test_reencode_is_canonical(value: Any) -> None:
    data = codec.encode(value)
    assert codec.encode(codec.decode(data)) == data


@given(amqp_values())
def test_encode_into_matches_encode(value: Any) -> None:
    buf = bytearray(b"prefix")
    codec.encode_into(buf, value)
    assert bytes(buf) == b"prefix" + codec.encode(value)


@given(st.lists(amqp_values(max_leaves=4), min_size=1, max_size=6), st.binary(max_size=3))
def test_decode_at_walks_concatenated_values(values: list[Any], prefix: bytes) -> None:
    parts = [codec.encode(v) for v in values]
    data = prefix + b"".join(parts)
    offset = len(prefix)
    for value, part in zip(values, parts, strict=True):
        decoded, end = codec.decode_at(data, offset)
        assert end == offset + len(part)
        assert_typed_equal(decoded, value)
        offset = end
    assert offset == len(data)


@given(amqp_values(max_leaves=4))
def test_decode_at_on_memoryview_slice(value: Any) -> None:
    data = b"\xff\xff" + codec.encode(value) + b"\xee"
    decoded, end = codec.decode_at(memoryview(data), 2)
    assert end == len(data) - 1
    assert_typed_equal(decoded, value)


@given(amqp_values(max_leaves=6))
def test_encoding_is_deterministic_and_value_is_unchanged(value: Any) -> None:
    before = repr(value)
    first = codec.encode(value)
    assert codec.encode(value) == first
    assert repr(value) == before


@given(amqp_values(max_leaves=6))
def test_truncated_encoding_never_decodes_as_whole(value: Any) -> None:
    # every proper prefix of a valid encoding is incomplete: decode must refuse it with DecodeError
    from amqp_async.errors import DecodeError

    data = codec.encode(value)
    for cut in {0, 1, len(data) // 2, len(data) - 1}:
        if cut >= len(data):
            continue
        try:
            codec.decode(data[:cut])
        except DecodeError:
            continue
        raise AssertionError(f"prefix {data[:cut].hex()} of {data.hex()} decoded")
