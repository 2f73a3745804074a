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

__all__ = [
    "encode_handle",
    "parse_transfer_fields",
    "transfer_head_size",
    "uint_at",
    "write_transfer",
    "write_transfer_head",
]

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


#: delivery-id 0..255 (uint0 or smalluint), and the bin8 constructor of a tag of each size: looked up, not built.
_SMALL_UINTS = [b"\x43"] + [bytes((0x52, n)) for n in range(1, 256)]
_BIN8_HEADS = [bytes((0xA0, n)) for n in range(256)]
#: settled, more and aborted (indexed ``4 * settled + 2 * more + aborted``) as the fields after message-format
#: that they need, and the list's field count with them. Trailing default fields are left out (§1.4).
_FLAG_FIELDS = [
    (b"", 4),  # none set: the list ends at message-format
    # aborted: settled, more, rcv-settle-mode, state, resume (null when not set, as proton writes them); aborted true
    (b"\x40\x40\x40\x40\x40\x41", 10),
    (b"\x42\x41", 6),  # more
    (b"\x40\x41\x40\x40\x40\x41", 10),
    (b"\x41", 5),  # settled
    (b"\x41\x40\x40\x40\x40\x41", 10),
    (b"\x41\x41", 6),
    (b"\x41\x41\x40\x40\x40\x41", 10),
]


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
    empty for none. ``tag`` is at most 32 bytes (§2.8.7, checked by the link)."""
    delivery = _SMALL_UINTS[delivery_id] if delivery_id < 256 else _pack_BI(0x70, delivery_id)
    message = b"\x43" if message_format == 0 else _pack_BI(0x70, message_format)
    if not state:
        # Every message's frame: the fields joined from pieces looked up or computed once, with one header pack.
        flags, count = _FLAG_FIELDS[4 * settled + 2 * more + aborted]
        fields = b"".join((handle, delivery, _BIN8_HEADS[len(tag)], tag, message, flags))
        size = len(fields) + 1  # list8 size counts the count byte
        out += _pack_frame_head(13 + size + payload_size, 2, 0, channel, 0x00, 0x53, 0x14, 0xC0, size, count)
        out += fields
        return
    # With a state: settled, more, rcv-settle-mode (null), state; then resume (null) and aborted only when aborted.
    state_fields = bytearray(b"".join((handle, delivery, _BIN8_HEADS[len(tag)], tag, message)))
    state_fields += b"\x41" if settled else b"\x42"
    state_fields += b"\x41" if more else b"\x42"
    state_fields.append(0x40)
    state_fields += state
    count = 8
    if aborted:
        state_fields += b"\x40\x41"
        count = 10
    size = len(state_fields) + 1
    if size > 255:  # a long tag and state: list32
        size += 3
        out += _pack_list32_head(16 + size + payload_size, 2, 0, channel, 0x00, 0x53, 0x14, 0xD0, size, count)
    else:
        out += _pack_frame_head(13 + size + payload_size, 2, 0, channel, 0x00, 0x53, 0x14, 0xC0, size, count)
    out += state_fields


def uint_at(data: bytes, position: int) -> tuple[int | None, int]:
    """A uint (or null) at ``position`` in its usual encodings (§1.6.8) and where it ends; ``(-1, position)`` for
    anything else. The hand parsers of performatives on the hot path share it (transfers, dispositions)."""
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


def parse_transfer_fields(data: bytes, position: int, end: int) -> list[Any] | None:
    """Read a transfer's field list at ``position`` (its list constructor) in the common layouts.

    Returns:
        The fields (the list is a list8: it ends ``2 + data[position + 1]`` bytes after ``position``, where the
        payload starts; no pair is made per frame to say so), or None when the layout is not one handled here (the
        caller then decodes the list generically). Out-of-range reads raise IndexError (or struct.error for a uint cut
        short), which the caller treats as None too.
    """
    if data[position] != 0xC0:
        return None
    list_end = position + 2 + data[position + 1]
    count = data[position + 2]
    if count > 6 or count < 1 or list_end > end:
        return None
    position += 3
    # Handle and delivery-id: a smalluint (or uint0) inline, as almost every frame has them (one call less each
    # per message); any other encoding through uint_at.
    code = data[position]
    if code == 0x52:
        handle: int | None = data[position + 1]
        position += 2
    elif code == 0x43:
        handle = 0
        position += 1
    else:
        handle, position = uint_at(data, position)
        if handle is None or handle < 0:
            return None
    fields: list[Any] = [handle]
    if count > 1:
        code = data[position]
        if code == 0x52:
            delivery_id: int | None = data[position + 1]
            position += 2
        elif code == 0x70:
            delivery_id = _unpack_I(data, position + 1)[0]
            position += 5
        else:
            delivery_id, position = uint_at(data, position)
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
        if data[position] == 0x43:  # the AMQP message format (0), as nearly every message has it
            message_format: int | None = 0
            position += 1
        else:
            message_format, position = uint_at(data, position)
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
    return fields


def transfer_head_size(
    channel: int,
    handle: bytes,
    delivery_id: int,
    tag: bytes,
    message_format: int,
    settled: bool,
    more: bool,
    state: bytes = b"",
) -> int:
    """The size of what :func:`write_transfer_head` writes before the payload (frame header and performative): a
    frame of the peer's max-frame-size holds that much less payload."""
    scratch = bytearray()
    write_transfer_head(scratch, channel, handle, delivery_id, tag, message_format, settled, more, False, 0, state)
    return len(scratch)
