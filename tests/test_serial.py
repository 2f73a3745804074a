"""Serial-number arithmetic on 32-bit sequence numbers (RFC 1982 with SERIAL_BITS = 32, as §2.8.10 requires).

Delivery ids, transfer ids and delivery counts wrap at 2**32; these tests pin down ``serial_add``, ``serial_diff``,
``serial_lt`` and ``serial_le`` on both sides of the wrap, on RFC 1982's own examples (scaled to 32 bits), and as
properties over the whole number space.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from amqp_async.protocol.serial import MASK, serial_add, serial_diff, serial_le, serial_lt

HALF = 1 << 31
TOP = (1 << 32) - 1

numbers = st.integers(min_value=0, max_value=TOP)
# Distances RFC 1982 defines a comparison for: 1 .. 2**31 - 1.
distances = st.integers(min_value=1, max_value=HALF - 1)


def test_mask_is_32_bits() -> None:
    assert MASK == TOP


@pytest.mark.parametrize(
    ("number", "increment", "expected"),
    [
        (0, 0, 0),
        (0, 1, 1),
        (TOP, 1, 0),
        (TOP, 2, 1),
        (TOP - 4, 10, 5),
        (5, -10, TOP - 4),
        (0, -1, TOP),
        (123, HALF - 1, 123 + HALF - 1),
        (HALF, HALF, 0),
        (TOP, TOP, TOP - 1),
    ],
)
def test_serial_add(number: int, increment: int, expected: int) -> None:
    assert serial_add(number, increment) == expected


@pytest.mark.parametrize(
    ("later", "earlier", "expected"),
    [
        (0, 0, 0),
        (1, 0, 1),
        (0, 1, -1),
        (0, TOP, 1),
        (TOP, 0, -1),
        (5, TOP - 4, 10),
        (TOP - 4, 5, -10),
        (HALF - 1, 0, HALF - 1),
        (0, HALF - 1, -(HALF - 1)),
        # Exactly half-way round: RFC 1982 leaves it undefined; the signed result is the most negative value.
        (HALF, 0, -HALF),
        (0, HALF, -HALF),
    ],
)
def test_serial_diff(later: int, earlier: int, expected: int) -> None:
    assert serial_diff(later, earlier) == expected


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (0, 1),
        (TOP, 0),  # across the wrap
        (TOP - 1, TOP),
        (TOP, 1),
        (TOP - 10, 10),
        (0, HALF - 1),  # the farthest b still "after" a
        (HALF, TOP),
        (HALF + 1, 0),
        (TOP, HALF - 2),
    ],
)
def test_serial_lt_and_le_hold_and_reverse_does_not(a: int, b: int) -> None:
    assert serial_lt(a, b)
    assert serial_le(a, b)
    assert not serial_lt(b, a)
    assert not serial_le(b, a)


@pytest.mark.parametrize("a", [0, 1, HALF - 1, HALF, TOP])
def test_equal_numbers(a: int) -> None:
    assert not serial_lt(a, a)
    assert serial_le(a, a)
    assert serial_diff(a, a) == 0


@pytest.mark.parametrize(("a", "b"), [(0, HALF), (HALF, 0), (1, HALF + 1), (TOP, HALF - 1)])
def test_half_way_pairs_are_incomparable(a: int, b: int) -> None:
    """RFC 1982 §3.2: for i1 and i2 exactly 2**(SERIAL_BITS-1) apart the comparison is undefined: neither is
    less than the other."""
    assert not serial_lt(a, b)
    assert not serial_lt(b, a)
    assert not serial_le(a, b)
    assert not serial_le(b, a)


def test_rfc1982_examples_scaled_to_32_bits() -> None:
    """RFC 1982 §5.2's examples (SERIAL_BITS = 8: 255 < 0, 100 < 200, 200 < 255, 255 < 100, 0 < 100, 200 < 0, and
    not 100 < 255) hold for the same points of the 32-bit space (each scaled by 2**24, 255 standing for 2**32-1)."""
    scale = 1 << 24
    for small_a, small_b in [(255, 0), (100, 200), (200, 255), (255, 100), (0, 100), (200, 0)]:
        a = small_a * scale + (scale - 1 if small_a == 255 else 0)
        b = small_b * scale
        assert serial_lt(a, b), (small_a, small_b)
        assert not serial_lt(b, a), (small_a, small_b)
    # 100 and 255 are 155 apart (more than half of 256): 255 is before 100, not after it.
    assert not serial_lt(100 * scale, TOP)


@given(numbers, st.integers(min_value=-HALF, max_value=HALF - 1))
def test_diff_inverts_add(a: int, n: int) -> None:
    b = serial_add(a, n)
    assert 0 <= b <= TOP
    assert serial_diff(b, a) == n


@given(numbers, distances)
def test_adding_a_positive_distance_moves_forward(a: int, n: int) -> None:
    b = serial_add(a, n)
    assert serial_lt(a, b)
    assert serial_le(a, b)
    assert not serial_lt(b, a)
    assert not serial_le(b, a)
    assert serial_diff(b, a) == n
    assert serial_diff(a, b) == -n


@given(numbers, numbers)
def test_lt_is_antisymmetric_and_le_is_lt_or_equal(a: int, b: int) -> None:
    assert not (serial_lt(a, b) and serial_lt(b, a))
    assert serial_le(a, b) == (a == b or serial_lt(a, b))
    assert serial_lt(a, b) == (serial_diff(b, a) > 0 and serial_diff(b, a) != -HALF)


@given(numbers, numbers)
def test_diff_is_signed_32_bit_and_consistent_with_add(a: int, b: int) -> None:
    difference = serial_diff(a, b)
    assert -HALF <= difference < HALF
    assert serial_add(b, difference) == a


@given(numbers, distances, distances)
def test_add_is_associative_modulo_wrap(a: int, m: int, n: int) -> None:
    assert serial_add(serial_add(a, m), n) == serial_add(a, m + n)
