"""Serial-number arithmetic on 32-bit sequence numbers (RFC 1982, as §2.8.10 "sequence-no" requires).

Delivery ids, transfer ids and delivery counts wrap at 2**32; comparing them as plain integers breaks at the
wrap. These helpers compare and subtract them the RFC 1982 way (SERIAL_BITS = 32).
"""

from __future__ import annotations

__all__ = ["MASK", "serial_add", "serial_diff", "serial_le", "serial_lt"]

#: All 32 bits of a sequence number.
MASK = 0xFFFFFFFF
_HALF = 1 << 31


def serial_add(number: int, increment: int) -> int:
    """``number + increment`` modulo 2**32."""
    return (number + increment) & MASK


def serial_diff(later: int, earlier: int) -> int:
    """The signed distance from ``earlier`` to ``later`` (in -2**31 .. 2**31-1), across the wrap."""
    difference = (later - earlier) & MASK
    return difference - (1 << 32) if difference >= _HALF else difference


def serial_lt(a: int, b: int) -> bool:
    """RFC 1982 ``a < b``."""
    return a != b and ((b - a) & MASK) < _HALF


def serial_le(a: int, b: int) -> bool:
    """RFC 1982 ``a <= b``."""
    return a == b or ((b - a) & MASK) < _HALF
