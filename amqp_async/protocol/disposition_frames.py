"""Disposition frames (§2.7.6) in their common layouts, read by a hand parser.

A confirmed send learns its outcome from a disposition, and at low rates every message has one of its own: the
generic decoder spends on it (a described list whose state is another described list, each element through the
decoder's table, then the composite's checks) about as much as on the rest of the round trip's frame handling.
:func:`parse_disposition` reads the layouts peers write for the usual outcomes: the fields as a list8 or a list32,
each in an encoding of its type (role and settled as booleans, first and last as uints), and a state that is null,
accepted or released (§3.4: outcomes without fields). Anything else returns None and goes through the generic
decoder; both give the same :class:`Disposition`, whose own decoder (the composite's) checks the fields either way.
"""

from __future__ import annotations

import struct

from ..codec.delivery_states import Accepted, Released
from ..codec.performatives import Disposition
from .transfer_frames import uint_at

__all__ = ["parse_disposition"]

_unpack_II = struct.Struct(">II").unpack_from

#: The outcomes without fields, by descriptor code (§3.4.2, §3.4.4): one shared instance each (they hold nothing,
#: and have no attribute to change).
_EMPTY_OUTCOMES = {0x24: Accepted(), 0x26: Released()}
#: What null, true and false read as where a boolean may be null (the composite applies the field's default).
_BOOLEANS = {0x40: None, 0x41: True, 0x42: False}
#: What :func:`_boolean` returns for anything else.
_NOT_READ = object()


def parse_disposition(data: bytes, position: int, end: int) -> Disposition | None:
    """The disposition whose field list starts at ``position`` (after the descriptor ``00 53 15``) and fills the
    frame's body to ``end``; None when its layout is not one read here (the caller decodes it generically).

    Out-of-range reads raise IndexError (or struct.error for a uint cut short): the caller treats them as None.

    Raises:
        DecodeError: a field the composite refuses (as the generic path would).
    """
    code = data[position]
    if code == 0xC0:  # list8: size and count in a byte each
        count = data[position + 2]
        if position + 2 + data[position + 1] != end:
            return None
        position += 3
    elif code == 0xD0:  # list32 (python-qpid-proton's codec writes it for every list)
        size, count = _unpack_II(data, position + 1)
        if position + 5 + size != end:
            return None
        position += 9
    else:
        return None
    if count < 2 or count > 6:
        return None
    role = _BOOLEANS.get(data[position])
    if role is None:
        return None
    first, position = uint_at(data, position + 1)
    if first is None or first < 0:  # null (first is mandatory) or not a uint: the decoder's to say
        return None
    last: int | None = None
    settled: object = None
    state = None
    batchable: object = None
    if count > 2:
        last, position = uint_at(data, position)
        if last is not None and last < 0:
            return None
    if count > 3:
        settled, position = _boolean(data, position)
        if settled is _NOT_READ:
            return None
    if count > 4:
        if data[position] == 0x40:
            position += 1
        else:
            # A described list of no fields: 00 53 code, then list0 (0x45) or an empty list8 (C0 01 00).
            if data[position] != 0x00 or data[position + 1] != 0x53:
                return None
            state = _EMPTY_OUTCOMES.get(data[position + 2])
            if state is None:
                return None
            position += 3
            if data[position] == 0x45:
                position += 1
            elif data[position] == 0xC0 and data[position + 1] == 1 and data[position + 2] == 0:
                position += 3
            else:
                return None
    if count > 5:
        batchable, position = _boolean(data, position)
        if batchable is _NOT_READ:
            return None
    if position != end:
        return None
    return Disposition._decode([role, first, last, settled, state, batchable])  # type: ignore[no-any-return]


def _boolean(data: bytes, position: int) -> tuple[object, int]:
    """A boolean or null at ``position`` (§1.6.2: 0x41 true, 0x42 false, 0x40 null), and where it ends;
    :data:`_NOT_READ` for anything else (a boolean of another encoding, 0x56, is the decoder's)."""
    value = _BOOLEANS.get(data[position], _NOT_READ)
    return value, position + 1
