"""Differential tests of the AMQP codec against python-qpid-proton's ``Data`` (the C engine's codec).

(a) proton encodes, we decode: a value built in proton's classes is put into ``proton.Data`` and encoded; our
    ``decode`` must give the same value with the same types.
(b) we encode, proton decodes: our ``encode`` output is read by ``Data.decode`` + ``get_object`` and must give the
    same value back.
(c) byte-identical output for values where both pick the same form.

proton's classes (``proton.symbol``, ``proton.ulong``, ``proton.Described``, ``proton.Array`` ...) are distinct from
ours, so values are converted class by class (``to_proton`` / ``from_proton``), and binary comes back from proton as
a ``memoryview``. Known limits of proton that the generated values avoid, all on proton's side:

* map keys of type binary: proton decodes them to ``memoryview``, which it then cannot hash (direction b only);
* map keys that are described: ``proton.Described`` is not hashable;
* ``Array(..., DESCRIBED, ...)``: proton's element type DESCRIBED is not an AMQP array encoding (we refuse it);
* a described value whose value is itself described, followed by a sibling (``[Described(d, Described(d, None)),
  None]``): proton 0.40's decoder loses the sibling (it returns ``[Described(d, Described(d, None))]``, even for
  bytes it encoded itself), so such nesting is filtered out of the values sent through proton.
"""

from __future__ import annotations

import math
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amqp_async import codec
from amqp_async import types as T

proton = pytest.importorskip("proton", reason="python-qpid-proton is the codec oracle (CI installs it)")

try:
    import strategies as S
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests import strategies as S

try:
    from proton_values import from_proton, to_proton
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.proton_values import from_proton, to_proton


def proton_encode(value: Any) -> bytes:
    data = proton.Data()
    data.put_object(to_proton(value))
    return data.encode()


def proton_decode(raw: bytes) -> Any:
    data = proton.Data()
    consumed = data.decode(raw)
    assert consumed == len(raw), f"proton read {consumed} of {len(raw)} bytes of {raw.hex()}"
    data.rewind()
    assert data.next() is not None
    value = data.get_object()
    assert data.next() is None
    return from_proton(value)


def proton_safe(value: Any) -> bool:
    """False for values that hit proton's described-in-described decoding bug (see the module docstring)."""
    if isinstance(value, T.Described):
        return not isinstance(value.value, T.Described) and proton_safe(value.value)
    if isinstance(value, list):
        return all(proton_safe(v) for v in value)
    if isinstance(value, dict):
        return all(proton_safe(k) and proton_safe(v) for k, v in value.items())
    if isinstance(value, T.Array):
        return all(proton_safe(v) for v in value.elements)
    return True


def test_described_in_described_from_proton() -> None:
    # the case proton cannot read back itself (module docstring): proton's bytes are right, and we read them
    value = [T.Described(T.ulong(0x100), T.Described(T.ulong(0x100), None)), None]
    assert not proton_safe(value)
    S.assert_typed_equal(codec.decode(proton_encode(value)), value)
    S.assert_typed_equal(codec.decode(codec.encode(value)), value)


# values proton can carry in both directions
values_a = S.amqp_values(described_keys=False, binary_keys=True).filter(proton_safe)
values_b = S.amqp_values(described_keys=False, binary_keys=False).filter(proton_safe)


@given(S.scalars())
def test_proton_encodes_scalars_we_decode(value: Any) -> None:
    S.assert_typed_equal(codec.decode(proton_encode(value)), value)


@given(S.scalars())
def test_we_encode_scalars_proton_decodes(value: Any) -> None:
    S.assert_typed_equal(proton_decode(codec.encode(value)), value)


@given(S.scalar_arrays())
def test_proton_encodes_arrays_we_decode(value: T.Array) -> None:
    S.assert_typed_equal(codec.decode(proton_encode(value)), value)


@given(S.scalar_arrays())
def test_we_encode_arrays_proton_decodes(value: T.Array) -> None:
    S.assert_typed_equal(proton_decode(codec.encode(value)), value)


@given(values_a)
def test_proton_encodes_values_we_decode(value: Any) -> None:
    S.assert_typed_equal(codec.decode(proton_encode(value)), value)


@given(values_b)
def test_we_encode_values_proton_decodes(value: Any) -> None:
    S.assert_typed_equal(proton_decode(codec.encode(value)), value)


@given(values_b)
def test_proton_reencodes_our_decoding_of_its_bytes(value: Any) -> None:
    # proton -> bytes -> ours -> proton again gives the same bytes (proton's encoding is canonical for proton)
    raw = proton_encode(value)
    assert proton_encode(codec.decode(raw)) == raw


@settings(max_examples=10)
@given(S.boundary_count_arrays())
def test_count_boundary_arrays_both_ways(value: T.Array) -> None:
    S.assert_typed_equal(codec.decode(proton_encode(value)), value)
    S.assert_typed_equal(proton_decode(codec.encode(value)), value)


def test_nan_payloads_survive_both_ways() -> None:
    for value in (math.nan, -math.nan, T.float32(math.nan)):
        ours = codec.decode(proton_encode(value))
        assert type(ours) is type(value) and math.isnan(ours)
        theirs = proton_decode(codec.encode(value))
        assert type(theirs) is type(value) and math.isnan(theirs)


# ---------------------------------------------------------------------------------------------------------------
# byte-identical output where both pick the same form
#
# They legitimately differ for compound values: proton always writes list32 / map32 / array32 and the widest
# element constructor inside arrays (0x70 for uint, 0x80 for ulong, 0xb1 for strings, ...), where we write the
# smallest form (list8, map8, array8, smalluint...). Both are valid; the differential tests above check that
# each side reads the other's choice. The empty list is list0 (0x45) for both.

IDENTICAL: list[Any] = [
    None,
    True,
    False,
    T.ubyte(0),
    T.ubyte(255),
    T.byte(-128),
    T.ushort(65535),
    T.short(-32768),
    T.uint(0),
    T.uint(255),
    T.uint(256),
    T.uint(2**32 - 1),
    T.ulong(0),
    T.ulong(255),
    T.ulong(256),
    T.ulong(2**64 - 1),
    T.int32(0),
    T.int32(-128),
    T.int32(128),
    T.int32(-(2**31)),
    0,
    127,
    -128,
    128,
    -129,
    2**63 - 1,
    -(2**63),
    T.float32(1.5),
    T.float32(-0.0),
    1.5,
    -0.0,
    math.inf,
    T.decimal32(7),
    T.decimal64(7),
    T.decimal128(bytes(range(16))),
    T.char("a"),
    T.char("\U0001f600"),
    T.timestamp(1311704463521),
    T.timestamp(-1),
    uuid.UUID("00112233-4455-6677-8899-aabbccddeeff"),
    b"",
    b"\x00" * 255,
    b"\x00" * 256,
    "",
    "é",
    "a" * 255,
    "a" * 256,
    T.symbol(""),
    T.symbol("s" * 255),
    T.symbol("s" * 256),
    [],
    T.Described(T.ulong(0x100), "a"),
    T.Described(T.symbol("x"), T.uint(1)),
    T.Described(T.symbol("example.org:t"), []),
]


@pytest.mark.parametrize("value", IDENTICAL, ids=lambda v: repr(v)[:30])
def test_byte_identical_with_proton(value: Any) -> None:
    assert codec.encode(value).hex() == proton_encode(value).hex()


@given(
    st.one_of(
        *[
            strategy
            for code, strategy in S.scalar_strategies().items()
            if code not in (T.TypeCode.DOUBLE, T.TypeCode.FLOAT)  # NaN payloads may differ in their bits
        ]
    )
)
def test_scalars_byte_identical_with_proton(value: Any) -> None:
    assert codec.encode(value).hex() == proton_encode(value).hex()


@given(st.one_of(S.float32s(), S.doubles()).filter(lambda f: not math.isnan(f)))
def test_floats_byte_identical_with_proton(value: float) -> None:
    assert codec.encode(value).hex() == proton_encode(value).hex()


DIFFERENT_FORMS: list[tuple[Any, str, str]] = [
    # value, our smallest form, proton's form
    ([1], "c0 03 01 5501", "d0 00000006 00000001 5501"),
    ({1: 2}, "c1 05 02 5501 5502", "d1 00000008 00000002 5501 5502"),
    (T.Array(T.UNDESCRIBED, T.TypeCode.UINT, T.uint(1)), "e0 03 01 52 01", "f0 00000009 00000001 70 00000001"),
    (T.Array(T.UNDESCRIBED, T.TypeCode.STRING, "a"), "e0 04 01 a1 01 61", "f0 0000000a 00000001 b1 00000001 61"),
]


@pytest.mark.parametrize(("value", "ours", "theirs"), DIFFERENT_FORMS, ids=lambda v: repr(v)[:24])
def test_documented_form_differences(value: Any, ours: str, theirs: str) -> None:
    ours_bytes = bytes.fromhex(ours.replace(" ", ""))
    theirs_bytes = bytes.fromhex(theirs.replace(" ", ""))
    assert codec.encode(value) == ours_bytes
    assert proton_encode(value) == theirs_bytes
    S.assert_typed_equal(codec.decode(theirs_bytes), value)
    S.assert_typed_equal(proton_decode(ours_bytes), value)
