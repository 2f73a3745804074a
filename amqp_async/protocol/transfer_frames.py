"""Transfer frames (§2.7.5) on the hot path: written from a template, read by a hand parser.

Every message costs one transfer frame each way, so neither direction goes through the generic composite codec:

- :func:`write_transfer` appends a transfer frame built from the link's encoded handle, the delivery id, the tag,
  the message format and the flags, in the smallest encodings, with one header pack (:func:`write_transfer_head`
  writes all but the payload, for an engine that hands large payloads to the socket without copying them).
- :func:`parse_transfer_fields` reads the field list of the common layouts (handle, delivery-id, delivery-tag,
  message-format, settled, more: what every client writes for an ordinary message) straight into a list of plain
  values. Anything else (more fields, unusual encodings) returns None, and the caller decodes generically; both
  give the same list, indexed in the spec's field order.
"""

from __future__ import annotations

import struct
from typing import Any

__all__ = ["encode_handle", "parse_transfer_fields", "write_transfer", "write_transfer_head"]

_pack_frame_head = struct.Struct(">IBBHBBBBBB").pack
_pack_list32_head = struct.Struct(">IBBHBBBBII").pack
_pack_BI = struct.Struct(">BI").pack
_unpack_I = struct.Struct(">I").unpack_from


def encode_handle(handle: int) -> bytes:
    """The smallest uint encoding of a link handle, computed once per link."""
    if handle == 0:
        return b"\x43"
    if handle < 256:
        return bytes((0x52, handle))
    return _pack_BI(0x70, handle)


def write_transfer(
    out: bytearray,
    channel: int,
    handle: bytes,
    delivery_id: int,
    tag: bytes,
    message_format: int,
    settled: bool,
    more: bool,
    aborted: bool,
    payload: Any,
) -> None:
    """Append one transfer frame (header, performative, payload) to ``out``.

    Trailing default fields are left out (§1.4): settled and more appear only when set (or when a later field
    is), aborted only when true.
    """
    write_transfer_head(out, channel, handle, delivery_id, tag, message_format, settled, more, aborted, len(payload))
    out += payload


def write_transfer_head(
    out: bytearray,
    channel: int,
    handle: bytes,
    delivery_id: int,
    tag: bytes,
    message_format: int,
    settled: bool,
    more: bool,
    aborted: bool,
    payload_size: int,
    state: bytes = b"",
) -> None:
    """Append a transfer frame's header and performative to ``out``, for a payload of ``payload_size`` bytes that
    the caller writes after them (so that a large payload can go out without being copied into ``out``).

    ``state`` is the encoded delivery state to carry (§2.7.5 ``state``, e.g. a transactional-state, §4.5.6), or
    empty for none."""
    fields = bytearray(handle)
    if delivery_id == 0:
        fields.append(0x43)
    elif delivery_id < 256:
        fields.append(0x52)
        fields.append(delivery_id)
    else:
        fields += _pack_BI(0x70, delivery_id)
    fields.append(0xA0)
    fields.append(len(tag))
    fields += tag
    if message_format == 0:
        fields.append(0x43)
    else:
        fields += _pack_BI(0x70, message_format)
    count = 4
    if state:
        # settled, more, rcv-settle-mode (null), state; then resume (null) and aborted only when aborted
        fields += b"\x41" if settled else b"\x42"
        fields += b"\x41" if more else b"\x42"
        fields.append(0x40)
        fields += state
        count = 8
        if aborted:
            fields += b"\x40\x41"
            count = 10
        if len(fields) + 1 > 255:  # a long tag and state: list32
            size = len(fields) + 4
            out += _pack_list32_head(16 + size + payload_size, 2, 0, channel, 0x00, 0x53, 0x14, 0xD0, size, count)
            out += fields
            return
    elif settled or more or aborted:
        fields.append(0x41 if settled else 0x42)
        count = 5
        if more or aborted:
            fields.append(0x41 if more else 0x42)
            count = 6
            if aborted:
                fields += b"\x40\x40\x40\x41"  # rcv-settle-mode, state, resume: null; aborted: true
                count = 10
    size = len(fields) + 1  # list8 size counts the count byte
    out += _pack_frame_head(13 + size + payload_size, 2, 0, channel, 0x00, 0x53, 0x14, 0xC0, size, count)
    out += fields


def _uint_at(data: bytes, position: int) -> tuple[int | None, int]:
    """A uint (or null) at ``position`` in its usual encodings; ``(-1, position)`` for anything else."""
    code = data[position]
    if code == 0x43:
        return 0, position + 1
    if code == 0x52:
        return data[position + 1], position + 2
    if code == 0x70:
        return _unpack_I(data, position + 1)[0], position + 5
    if code == 0x40:
        return None, position + 1
    return -1, position


def parse_transfer_fields(data: bytes, position: int, end: int) -> tuple[list[Any], int] | None:
    """Read a transfer's field list at ``position`` (its list constructor) in the common layouts.

    Returns:
        ``(fields, offset after the list)``, or None when the layout is not one handled here (the caller then
        decodes the list generically). Out-of-range reads raise IndexError (or struct.error for a uint cut
        short), which the caller treats as None too.
    """
    if data[position] != 0xC0:
        return None
    list_end = position + 2 + data[position + 1]
    count = data[position + 2]
    if count > 6 or count < 1 or list_end > end:
        return None
    position += 3
    handle, position = _uint_at(data, position)
    if handle is None or handle < 0:
        return None
    fields: list[Any] = [handle]
    if count > 1:
        delivery_id, position = _uint_at(data, position)
        if delivery_id is not None and delivery_id < 0:
            return None
        fields.append(delivery_id)
    if count > 2:
        code = data[position]
        if code == 0xA0:
            start = position + 2
            position = start + data[position + 1]
            fields.append(data[start:position])
        elif code == 0x40:
            fields.append(None)
            position += 1
        else:
            return None
    if count > 3:
        message_format, position = _uint_at(data, position)
        if message_format is not None and message_format < 0:
            return None
        fields.append(message_format)
    for _ in range(count - 4):  # settled, more: booleans or null
        code = data[position]
        if code == 0x41:
            fields.append(True)
        elif code == 0x42:
            fields.append(False)
        elif code == 0x40:
            fields.append(None)
        else:
            return None
        position += 1
    if position != list_end:
        return None
    return fields, list_end
