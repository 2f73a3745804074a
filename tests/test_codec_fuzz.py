"""Hostile input for the AMQP decoder: it returns a value or raises ``DecodeError``, at once, in bounded memory.

Never ``IndexError``, ``struct.error``, ``UnicodeDecodeError``, ``RecursionError``, ``MemoryError``,
``ValueError`` (``EncodeError`` included), ``TypeError`` or anything else: bad bytes from a peer must surface as
``amqp:decode-error``. Sizes and counts that claim more than the input holds must fail before anything is
allocated for them, so each input has a time bound (generous, so it cannot flake) and the worst ones a memory bound.
"""

from __future__ import annotations

import gc
import struct
import time
import tracemalloc
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amqp_async import codec
from amqp_async.errors import DecodeError

try:
    import strategies as S
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests import strategies as S

#: CPU seconds one hostile input may take to decode or fail (a correct decoder needs well under a millisecond).
#: CPU time of the decoding thread, with the garbage collector held off while it decodes: on a machine the whole
#: test command keeps busy, the wall-clock time of one decode also counts the time the worker waited for a core
#: (0.57 s once, for 10 bytes refused at the first one).
TIME_BOUND = 0.5


class DecodeTime:
    """A block's CPU time in this thread (``seconds``, set when it ends), the garbage collector held off during it:
    a collection of the whole worker's heap is not the decoder's time."""

    seconds = 0.0

    def __enter__(self) -> DecodeTime:
        self._collecting = gc.isenabled()
        gc.disable()
        self._start = time.thread_time()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.seconds = time.thread_time() - self._start
        if self._collecting:
            gc.enable()


def check_decode(data: bytes) -> tuple[bool, Any]:
    """Decode ``data``; fail the test unless it gives a value or a well-formed DecodeError, within TIME_BOUND.

    Returns (decoded, value_or_error).
    """
    error: DecodeError | None = None
    with DecodeTime() as spent:
        try:
            value = codec.decode(data)
        except DecodeError as err:
            error = err
        except Exception as err:  # the point of the test
            pytest.fail(f"{type(err).__name__}: {err!s:.200} decoding {data[:48].hex()}... ({len(data)} bytes)")
    verb = "decode" if error is None else "refuse"
    assert spent.seconds < TIME_BOUND, f"{spent.seconds:.3f} CPU-s to {verb} {data[:48].hex()}... ({len(data)} bytes)"
    if error is not None:
        check_error(error, data)
        return False, error
    return True, value


def check_error(err: DecodeError, data: bytes) -> None:
    assert type(err) is DecodeError or isinstance(err, DecodeError)
    assert err.condition == "amqp:decode-error"
    assert isinstance(err.offset, int) and 0 <= err.offset <= len(data), (err.offset, len(data))
    assert isinstance(err.reason, str) and err.reason
    assert not isinstance(err, ValueError)


def h(text: str) -> bytes:
    return bytes.fromhex(text.replace(" ", ""))


# ---------------------------------------------------------------------------------------------------------------
# random bytes

FORMAT_CODES = [
    0x00, 0x40, 0x41, 0x42, 0x43, 0x44, 0x45, 0x50, 0x51, 0x52, 0x53, 0x54, 0x55, 0x56, 0x60, 0x61, 0x70, 0x71,
    0x72, 0x73, 0x74, 0x80, 0x81, 0x82, 0x83, 0x84, 0x94, 0x98, 0xA0, 0xA1, 0xA3, 0xB0, 0xB1, 0xB3, 0xC0, 0xC1,
    0xD0, 0xD1, 0xE0, 0xF0,
]  # fmt: skip


@settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=64))
def test_random_bytes(data: bytes) -> None:
    check_decode(data)


@settings(max_examples=1000, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(st.sampled_from(FORMAT_CODES), st.integers(0, 255)), max_size=48).map(bytes))
def test_random_bytes_made_of_format_codes(data: bytes) -> None:
    check_decode(data)


@settings(max_examples=300)
@given(st.binary(max_size=40), st.integers(0, 45))
def test_decode_at_random_offsets(data: bytes, offset: int) -> None:
    offset = min(offset, len(data))
    with DecodeTime() as spent:
        try:
            value, end = codec.decode_at(data, offset)
        except DecodeError as err:
            error: DecodeError | None = err
        else:
            error = None
    assert spent.seconds < TIME_BOUND
    if error is not None:
        check_error(error, data)
    else:
        assert offset < end <= len(data)
        # what decode_at read is exactly one value
        S.assert_typed_equal(codec.decode(data[offset:end]), value)


def test_decode_at_end_of_data_raises() -> None:
    for data, offset in ((b"", 0), (b"\x40", 1), (b"\x40\x40", 2)):
        with pytest.raises(DecodeError) as info:
            codec.decode_at(data, offset)
        check_error(info.value, data)


# ---------------------------------------------------------------------------------------------------------------
# mutated valid encodings


def _mutate(data: bytes, kind: int, position: int, byte: int) -> bytes:
    if not data:
        return bytes([byte])
    i = position % len(data)
    if kind == 0:  # flip bits of one byte
        return data[:i] + bytes([data[i] ^ (byte or 0xFF)]) + data[i + 1 :]
    if kind == 1:  # truncate
        return data[:i]
    if kind == 2:  # insert a byte
        return data[:i] + bytes([byte]) + data[i:]
    if kind == 3:  # delete a byte
        return data[:i] + data[i + 1 :]
    if kind == 4:  # a 4-byte field to a huge value
        return data[:i] + b"\xff\xff\xff\xff" + data[i + 4 :]
    if kind == 5:  # a 4-byte field to 2**31 - 1
        return data[:i] + b"\x7f\xff\xff\xff" + data[i + 4 :]
    if kind == 6:  # a one-byte field to 0xff
        return data[:i] + b"\xff" + data[i + 1 :]
    # kind 7: a one-byte field to 0
    return data[:i] + b"\x00" + data[i + 1 :]


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(
    S.amqp_values(max_leaves=8),
    st.lists(st.tuples(st.integers(0, 7), st.integers(0, 2**16), st.integers(0, 255)), min_size=1, max_size=3),
)
def test_mutated_encodings(value: Any, mutations: list[tuple[int, int, int]]) -> None:
    data = codec.encode(value)
    for kind, position, byte in mutations:
        data = _mutate(data, kind, position, byte)
    check_decode(data)


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(S.amqp_values(max_leaves=8), st.integers(0, 2**16))
def test_every_size_and_count_field_set_huge(value: Any, seed: int) -> None:
    """Set every byte position in turn to 0xff (for 8-bit sizes/counts) and, from one seeded start, 4-byte runs."""
    data = codec.encode(value)
    for i in range(min(len(data), 64)):
        check_decode(data[:i] + b"\xff" + data[i + 1 :])
    if len(data) > 4:
        i = seed % (len(data) - 3)
        check_decode(data[:i] + b"\xff\xff\xff\xff" + data[i + 4 :])


# ---------------------------------------------------------------------------------------------------------------
# hand-made hostile inputs


def _wrap_nested(core: bytes, depth: int, header: Any) -> bytes:
    """``depth`` layers around ``core``, built in linear time: ``header(inner_length)`` gives the bytes that go
    before a layer's content, which is the next layer in."""
    heads = []
    length = len(core)
    for _ in range(depth):
        head = header(length)
        heads.append(head)
        length += len(head)
    return b"".join(reversed(heads)) + core


def _nested_list32(depth: int) -> bytes:
    # [[[...[[]]...]]]: list32 of one element, innermost list0
    return _wrap_nested(b"\x45", depth, lambda n: b"\xd0" + struct.pack(">II", 4 + n, 1))


def _nested_map32(depth: int) -> bytes:
    # {None: {None: ... {None: None}}}
    return _wrap_nested(b"\x40", depth, lambda n: b"\xd1" + struct.pack(">II", 4 + 1 + n, 2) + b"\x40")


def _nested_array32(depth: int) -> bytes:
    # an array of one array of one array ... of an empty array of nulls
    core = struct.pack(">II", 5, 0) + b"\x40"  # an array body: size, count, element constructor
    body = _wrap_nested(core, depth, lambda n: struct.pack(">II", 4 + 1 + n, 1) + b"\xf0")
    return b"\xf0" + body


def _described_descriptor_chain(depth: int) -> bytes:
    # 00 00 00 ... 40 40 40 ...: each descriptor is itself a described value
    return b"\x00" * depth + b"\x40" * (depth + 1)


def _described_value_chain(depth: int) -> bytes:
    return b"\x00\xa3\x01x" * depth + b"\x40"


HOSTILE: dict[str, bytes] = {
    # sizes and counts far beyond the data
    "list32 size 4GiB": h("d0 ffffffff ffffffff"),
    "list32 count 2**32-1, 8-byte body": h("d0 0000000c ffffffff 4040404040404040"),
    "map32 count 2**32-1, 8-byte body": h("d1 0000000c ffffffff 4040404040404040"),
    "map32 size 4GiB": h("d1 ffffffff 00000002 4040"),
    "list8 count 255, 1-byte body": h("c0 02 ff 40"),
    "array32 count 2**32-1 of null": h("f0 00000005 ffffffff 40"),
    "array32 count 2**32-1 of true": h("f0 00000005 ffffffff 41"),
    "array32 count 2**32-1 of false": h("f0 00000005 ffffffff 42"),
    "array32 count 2**32-1 of uint0": h("f0 00000005 ffffffff 43"),
    "array32 count 2**32-1 of ulong0": h("f0 00000005 ffffffff 44"),
    "array32 count 2**32-1 of list0": h("f0 00000005 ffffffff 45"),
    "array32 count 2**32-1 of ubyte": h("f0 00000006 ffffffff 50 00"),
    "array32 count 2**32-1 of described null": h("f0 00000008 ffffffff 00 a30178 40"),
    "array32 count 2**32-1 of arrays": h("f0 0000000e ffffffff f0 00000005 00000000 40"),
    "array32 count 2**32-1 of list32": h("f0 0000000d ffffffff d0 00000004 00000000"),
    "array8 count 255 of uint0": h("e0 02 ff 43"),
    "array8 count 255 of list0": h("e0 02 ff 45"),
    "array32 size 4GiB": h("f0 ffffffff 00000001 40"),
    "str32 4GiB": h("b1 ffffffff 61"),
    "vbin32 4GiB": h("b0 ffffffff 61"),
    "sym32 4GiB": h("b3 ffffffff 61"),
    "str32 2**31-1": h("b1 7fffffff 61"),
    "str8 beyond data": h("a1 ff 61"),
    # sizes too small for their own fields
    "list8 size 0": h("c0 00"),
    "list32 size 0": h("d0 00000000 00000000"),
    "list32 size 2": h("d0 00000002 0000"),
    "map8 size 0": h("c1 00"),
    "array8 size 0": h("e0 00"),
    "array8 size 1 (no constructor)": h("e0 01 00"),
    "array32 size 4 (no constructor)": h("f0 00000004 00000000"),
    "list8 size shorter than items": h("c0 02 02 40 40"),
    "list8 items overrun size": h("c0 02 01 a1 05 6161616161"),
    "str8 in list8 overruns the data": h("c0 07 03 40 a1 fd 3030 40"),
    "str8 key in map8 overruns the data": h("c1 04 02 a1 80 40"),
    "vbin8 in array8 overruns the data": h("e0 05 01 a0 f0 6161"),
    # deep nesting
    "10000 nested list8 headers": b"\xc0\x02\x01" * 10000,
    "10000 nested list32 (valid sizes)": _nested_list32(10000),
    "2000 nested map32 (valid sizes)": _nested_map32(2000),
    "10000 nested array32 of arrays (valid sizes)": _nested_array32(10000),
    "100000 nested descriptors": _described_descriptor_chain(100000),
    "10000 nested described values": _described_value_chain(10000),
    "array whose descriptor nests 100000 deep": h("e0 ff 01") + b"\x00" * 100000 + b"\x40" * 3,
    "list8 of 100 nested list8": b"\xc0\xff\x01" * 100,
    # maps
    "map8 odd count": h("c1 02 01 40"),
    "map32 odd count": h("d1 00000005 00000001 40"),
    "map8 count 3": h("c1 04 03 40 40 40"),
    "map with list key": h("c1 03 02 45 40"),
    "map with map key": h("c1 05 02 c10100 40"),
    "map with array key": h("c1 06 02 e0020040 40"),
    "map with described list key": h("c1 07 02 00a30178 45 40"),
    "map with described map key": h("c1 09 02 00a30178 c10100 40"),
    # strings and symbols
    "str8 invalid utf-8": h("a1 01 ff"),
    "str8 truncated utf-8": h("a1 01 c3"),
    "str8 overlong utf-8": h("a1 02 c080"),
    "str8 encoded surrogate": h("a1 03 eda080"),
    "str32 invalid utf-8": h("b1 00000002 c328"),
    "sym8 non-ascii": h("a3 01 ff"),
    "sym32 non-ascii": h("b3 00000002 c3a9"),
    "array of str8 with invalid utf-8": h("e0 05 02 a1 00 01 ff"),
    # scalars
    "char beyond unicode": h("73 00110000"),
    "char surrogate": h("73 0000d800"),
    "char 0xffffffff": h("73 ffffffff"),
    "boolean 0x02": h("56 02"),
    "boolean 0xff": h("56 ff"),
    "truncated ulong": h("80 000000"),
    "truncated uuid": h("98 0011"),
    "truncated decimal128": h("94 00"),
    "truncated double": h("82 3ff0"),
    "reserved format code 0x01": h("01"),
    "reserved format code 0x9f": h("9f 00"),
    "unknown format code 0xff": h("ff"),
    # described
    "described alone": h("00"),
    "described with descriptor only": h("00 5305"),
    "described with symbol descriptor only": h("00 a30178"),
    "described whose descriptor is truncated": h("00 a305 78"),
    # arrays
    "array with bad element constructor": h("e0 02 01 ff"),
    "array with reserved element constructor": h("e0 03 01 01 00"),
    "array described, no element constructor": h("e0 03 01 00 40"),
    "array described, descriptor truncated": h("e0 03 01 00 a3"),
    "array element constructor 0x00 chain": h("e0 08 01") + b"\x00" * 6 + b"\x40",
    "array of list8 with bad inner size": h("e0 05 01 c0 ff 01 40"),
    "array of array8 with bad inner count": h("e0 05 01 e0 02 ff 50"),
    "array of maps with odd count": h("e0 05 01 c1 02 01 40"),
    "array count exceeds elements": h("e0 04 05 50 01 02"),
    "array of uint with trailing junk in size": h("e0 06 01 52 01 02 03 04"),
}


@pytest.mark.parametrize("data", list(HOSTILE.values()), ids=list(HOSTILE))
def test_hostile_input(data: bytes) -> None:
    check_decode(data)


# these can only be refused: they claim more than the input holds, or are malformed on their face
MUST_REFUSE = [
    name
    for name in HOSTILE
    if any(
        word in name
        for word in (
            "4GiB",
            "2**32-1",
            "2**31-1",
            "beyond data",
            "size 0",
            "size 2",
            "size 1 ",
            "size 4 ",
            "shorter",
            "overrun",
            "odd count",
            "count 3",
            "invalid utf-8",
            "truncated",
            "overlong",
            "encoded surrogate",
            "reserved",
            "unknown format",
            "alone",
            "descriptor only",
            "bad element",
            "no element",
            "bad inner",
            "exceeds",
            "trailing junk",
            "list8 count 255",
            "10000 nested list8 headers",
            "list key",
            "map key",
            "array key",
        )
    )
]


@pytest.mark.parametrize("name", MUST_REFUSE)
def test_malformed_input_is_refused(name: str) -> None:
    decoded, value = check_decode(HOSTILE[name])
    assert not decoded, f"{name}: decoded to {value!r}"


@pytest.mark.parametrize(
    "data",
    [
        h("d0 0000000c ffffffff 4040404040404040"),
        h("d1 0000000c ffffffff 4040404040404040"),
        h("f0 00000005 ffffffff 40"),
        h("f0 00000005 ffffffff 43"),
        h("f0 00000005 ffffffff 45"),
        h("f0 00000008 ffffffff 00 a30178 40"),
        h("b1 ffffffff 61"),
        h("d0 ffffffff ffffffff"),
    ],
    ids=lambda d: d.hex()[:24],
)
def test_huge_claims_fail_without_allocating(data: bytes) -> None:
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        with pytest.raises(DecodeError):
            codec.decode(data)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000, f"peak {peak} bytes decoding {data.hex()}"


@pytest.mark.parametrize("depth", [10, 100, 1000, 100000])
def test_deep_nesting_is_refused_or_decoded_never_recursion_error(depth: int) -> None:
    for data in (_nested_list32(depth), _described_value_chain(depth), _described_descriptor_chain(depth)):
        decoded, value = check_decode(data)
        if depth <= 10:
            assert decoded, f"depth {depth} refused: {value!r}"
    if depth >= 100000:
        # nothing needs a hundred thousand levels: MAX_DEPTH must refuse these (the stack could not hold them)
        for data in (_nested_list32(depth), _nested_map32(depth), _nested_array32(depth)):
            decoded, value = check_decode(data)
            assert not decoded


@pytest.mark.parametrize(
    "code",
    [*range(0x10, 0x19), 0x1D, *range(0x23, 0x2F), *range(0x30, 0x35), *range(0x40, 0x45), *range(0x70, 0x79)],
    ids=hex,
)
def test_registered_descriptors_with_junk_bodies(code: int) -> None:
    """Registered composites (performatives, sections, outcomes...) fed wrong bodies: value or DecodeError."""
    descriptor = bytes([0x00, 0x53, code])
    bodies = [
        h("40"),
        h("45"),
        h("5501"),
        h("a10161"),
        h("c10100"),
        h("c0 01 00"),
        h("c0 02 01 45"),
        h("c0 03 02 45 45"),
        h("c0 05 01 c1 02 01 40"),
        codec.encode([[]] * 12),
        codec.encode([{}] * 12),
        codec.encode(["x"] * 12),
        codec.encode([None] * 40),
        codec.encode([True, 2**40, -1, "a", b"b", [], {}, None, 1.5, None, None, None]),
        h("e0 02 00 40"),
    ]
    for body in bodies:
        check_decode(descriptor + body)
        # inside a list too, as a field of something else
        inner = descriptor + body
        check_decode(b"\xc0" + bytes([len(inner) + 1, 1]) + inner)
