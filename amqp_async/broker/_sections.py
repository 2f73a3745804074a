"""Reading and rewriting the leading sections of an encoded message without decoding the rest (§3.2).

The broker carries messages as the bytes their producer sent. What it must read or change lives in the first
sections only: the header (§3.2.1: ttl, delivery-count), the message annotations (§3.2.3: where dead-lettering
says why) and the properties (§3.2.4: absolute-expiry-time). These functions find those sections by their format
codes and sizes (§1.6: every encoding says how long it is), decode and re-encode only the section that changes, and
copy every other byte as it came: the application's properties, body and footer are never re-encoded.

A payload that is not a message (the broker takes any bytes) raises :class:`~amqp_async.errors.DecodeError` from
the rewriting functions, and reads as "no expiry" from :func:`expiry`.
"""

from __future__ import annotations

from typing import Any

from ..codec import decode_application_value, decode_value, encode
from ..codec.section_codes import DELIVERY_ANNOTATIONS as _DELIVERY_ANNOTATIONS
from ..codec.section_codes import FOOTER as _FOOTER
from ..codec.section_codes import HEADER as _HEADER
from ..codec.section_codes import MESSAGE_ANNOTATIONS as _MESSAGE_ANNOTATIONS
from ..codec.section_codes import PROPERTIES as _PROPERTIES
from ..errors import DecodeError
from ..types import symbol, uint

__all__ = [
    "HEADER_TTL",
    "NO_TTL",
    "TTL_ELSEWHERE",
    "annotations_of",
    "cannot_expire",
    "delivery_failed",
    "expiry",
    "merge_annotations",
    "rewrite_header",
    "with_ttl",
    "with_ttl_at",
]

_SECTION_NAMES = {
    "amqp:header:list": _HEADER,
    "amqp:delivery-annotations:map": _DELIVERY_ANNOTATIONS,
    "amqp:message-annotations:map": _MESSAGE_ANNOTATIONS,
    "amqp:properties:list": _PROPERTIES,
}
#: The index of ttl in the header's fields (§3.2.1: durable, priority, ttl, first-acquirer, delivery-count).
HEADER_TTL = 2
#: :func:`expiry`'s answer for a header without a ttl.
NO_TTL = 0
#: :func:`expiry`'s answer for a ttl encoded other than as a four-octet uint (rewritten by :func:`with_ttl`).
TTL_ELSEWHERE = -1
_HEADER_DELIVERY_COUNT = 4
_HEADER_FIRST_ACQUIRER = 3
#: The index of absolute-expiry-time in the properties' fields (§3.2.4).
_ABSOLUTE_EXPIRY_TIME = 8
#: Bytes of a fixed-width value after its format code, by the code's high nibble (§1.6: 0x4_ to 0x9_).
_FIXED_WIDTH = {0x4: 0, 0x5: 1, 0x6: 2, 0x7: 4, 0x8: 8, 0x9: 16}


def _value_end(data: bytes, offset: int) -> int:
    """The offset just past the encoded value at ``offset``, from its format code and size alone (§1.6.1)."""
    code = data[offset]
    if code == 0x00:  # a described value: its descriptor, then the value
        return _value_end(data, _value_end(data, offset + 1))
    category = code >> 4
    width = _FIXED_WIDTH.get(category)
    if width is not None:
        end = offset + 1 + width
    elif category in (0xA, 0xC, 0xE):  # variable-width, compound and array with a one-octet size
        end = offset + 2 + data[offset + 1]
    elif category in (0xB, 0xD, 0xF):  # the same with a four-octet size
        end = offset + 5 + int.from_bytes(data[offset + 1 : offset + 5], "big")
    else:
        raise DecodeError(f"invalid format code {code:#04x}", offset=offset)
    if end > len(data):
        raise DecodeError("a value runs past the end of the message", offset=offset)
    return end


def _section_at(data: bytes, offset: int) -> tuple[int, int]:
    """The section code of the section at ``offset`` and the offset of its value (0 for an unknown section)."""
    if data[offset] != 0x00:
        raise DecodeError("expected a message section (a described value)", offset=offset)
    if data[offset + 1] == 0x53:  # smallulong: the usual form
        return data[offset + 2], offset + 3
    descriptor, value = decode_value(data, offset + 1, 1)
    if isinstance(descriptor, str):
        return _SECTION_NAMES.get(descriptor, 0), value
    return (descriptor if isinstance(descriptor, int) else 0), value


class _Layout:
    """Where a message's leading sections are: (start, value, end) of each one present, and where the rest begins
    (the properties, or what comes after the annotations)."""

    __slots__ = ("annotations", "header", "rest")

    def __init__(self, data: bytes) -> None:
        self.header: tuple[int, int, int] | None = None
        self.annotations: tuple[int, int, int] | None = None
        position = 0
        end = len(data)
        try:
            while position < end:
                code, value = _section_at(data, position)
                if code not in (_HEADER, _DELIVERY_ANNOTATIONS, _MESSAGE_ANNOTATIONS):
                    if not _PROPERTIES <= code <= _FOOTER:
                        raise DecodeError(f"unknown message section {code:#x}", offset=position)
                    break
                after = _value_end(data, value)
                if code == _HEADER:
                    self.header = (position, value, after)
                elif code == _MESSAGE_ANNOTATIONS:
                    self.annotations = (position, value, after)
                position = after
        except IndexError:
            raise DecodeError("message section is truncated", offset=position) from None
        self.rest = position

    def insertion_point(self) -> int:
        """Where new message annotations go: after the header and the delivery annotations (§3.2: in order)."""
        return self.rest


def _fields_start(data: bytes, value: int) -> tuple[int, int]:
    """The count of a list's fields and where the first one starts (list0, list8, list32)."""
    code = data[value]
    if code == 0x45:
        return 0, value + 1
    if code == 0xC0:
        return data[value + 2], value + 3
    if code == 0xD0:
        return int.from_bytes(data[value + 5 : value + 9], "big"), value + 9
    raise DecodeError(f"a section that must be a list has format code {code:#04x}", offset=value)


def _uint_at(data: bytes, offset: int) -> int | None:
    """A uint field (§1.6.8: uint, smalluint, uint0) or null."""
    code = data[offset]
    if code == 0x70:
        return int.from_bytes(data[offset + 1 : offset + 5], "big")
    if code == 0x52:
        return data[offset + 1]
    if code == 0x43:
        return 0
    if code == 0x40:
        return None
    raise DecodeError(f"expected a uint, found format code {code:#04x}", offset=offset)


def cannot_expire(data: bytes) -> bool:
    """True when the usual encodings (smallulong descriptors, list8 and map8/map32 sections) show neither a ttl nor
    an absolute-expiry-time, read byte by byte without a call: most messages have no header, or one without a
    ttl (durable, priority), and properties of at most eight fields. False: :func:`expiry` looks closer."""
    try:
        if data[0] != 0 or data[1] != 0x53:
            return False
        code = data[2]
        position = 3
        end = len(data)
        if code == _HEADER:
            form = data[3]
            if form == 0xC0 and data[5] <= HEADER_TTL:  # list8: size, count; durable and priority at most
                position = 5 + data[4]
            elif form == 0x45:  # list0
                position = 4
            else:
                return False
            if position >= end:
                return True
            if data[position] != 0 or data[position + 1] != 0x53:
                return False
            code = data[position + 2]
            position += 3
        while code in (_DELIVERY_ANNOTATIONS, _MESSAGE_ANNOTATIONS):
            form = data[position]
            if form == 0xC1:  # map8
                position += 2 + data[position + 1]
            elif form == 0xD1:  # map32
                position += 5 + int.from_bytes(data[position + 1 : position + 5], "big")
            else:
                return False
            if position >= end:
                return True
            if data[position] != 0 or data[position + 1] != 0x53:
                return False
            code = data[position + 2]
            position += 3
        if code != _PROPERTIES:
            return code > _PROPERTIES  # no properties (they would come here, §3.2)
        form = data[position]
        if form == 0xC0:
            return data[position + 2] <= _ABSOLUTE_EXPIRY_TIME
        if form == 0xD0:
            return int.from_bytes(data[position + 5 : position + 9], "big") <= _ABSOLUTE_EXPIRY_TIME
        return form == 0x45
    except IndexError:
        return False


def expiry(data: bytes, now: float) -> tuple[float | None, int]:
    """When a message arriving at ``now`` (seconds since the epoch) expires, and where its header's ttl is.

    §3.2.1 ttl: "Duration in milliseconds for which the message is to be considered 'live'. If this is set then a
    message expiration time will be computed based on the time of arrival at an intermediary." §3.2.4
    absolute-expiry-time: "An absolute time when this message is considered to be expired." With both, the
    earlier one. A ttl of 0 and an absolute-expiry-time of 0 mean none (as proton and our Message read them).

    Returns:
        (the expiry time in seconds since the epoch, or None; where the header's ttl is: :data:`NO_TTL`, the
        offset of its format code when it is a four-octet uint that :func:`with_ttl_at` can overwrite in place, or
        :data:`TTL_ELSEWHERE` for another encoding). A payload that does not parse has no expiry.
    """
    if cannot_expire(data):
        return None, NO_TTL
    expires: float | None = None
    ttl_at = NO_TTL
    try:
        position = 0
        end = len(data)
        while position < end:
            code, value = _section_at(data, position)
            if code == _HEADER:
                count, field = _fields_start(data, value)
                if count > HEADER_TTL:
                    field = _value_end(data, _value_end(data, field))  # past durable and priority
                    ttl = _uint_at(data, field)
                    if ttl:
                        expires = now + ttl / 1000.0
                        ttl_at = field if data[field] == 0x70 else TTL_ELSEWHERE
            elif code == _PROPERTIES:
                count, field = _fields_start(data, value)
                if count > _ABSOLUTE_EXPIRY_TIME:
                    for _ in range(_ABSOLUTE_EXPIRY_TIME):
                        field = _value_end(data, field)
                    if data[field] == 0x83:  # timestamp: milliseconds since the epoch, signed
                        absolute = int.from_bytes(data[field + 1 : field + 9], "big", signed=True)
                        if absolute and (expires is None or absolute / 1000.0 < expires):
                            expires = absolute / 1000.0
                break
            elif code not in (_DELIVERY_ANNOTATIONS, _MESSAGE_ANNOTATIONS):
                break  # the properties come before anything else (§3.2): there are none
            position = _value_end(data, value)
    except (DecodeError, IndexError, ValueError):
        return None, NO_TTL  # not a message: the broker carries it, and cannot say when it expires
    return expires, ttl_at


def rewrite_header(data: bytes, changes: dict[int, Any]) -> bytes:
    """The message with its header's fields changed (index to value; None removes it), every other section's
    bytes as they came. A message without a header gets one.

    Raises:
        DecodeError: the payload is not a message.
    """
    layout = _Layout(data)
    if layout.header is None:
        fields: list[Any] = []
        start = end = 0
    else:
        start, value, end = layout.header
        fields, _ = decode_value(data, value, 1)
        if not isinstance(fields, list):
            raise DecodeError("the header section must be a list", offset=value)
    for index, change in changes.items():
        while len(fields) <= index:
            fields.append(None)
        fields[index] = change
    while fields and fields[-1] is None:
        fields.pop()
    section = b"\x00\x53\x70" + encode(fields) if fields else b""
    return b"".join((data[:start], section, data[end:]))


def with_ttl(data: bytes, milliseconds: int) -> bytes:
    """The message with its header's ttl set to ``milliseconds`` (the rest unchanged)."""
    return rewrite_header(data, {HEADER_TTL: uint(milliseconds)})


def with_ttl_at(data: bytes, offset: int, milliseconds: int) -> bytes:
    """The message with the four-octet uint ttl at ``offset`` (from :func:`expiry`) overwritten in place."""
    return b"".join((data[: offset + 1], milliseconds.to_bytes(4, "big"), data[offset + 5 :]))


def delivery_failed(data: bytes) -> tuple[bytes, int]:
    """The message after a failed delivery attempt: header delivery-count + 1, first-acquirer false (§3.2.1,
    §3.4.5); returns the new bytes and the new count.

    Raises:
        DecodeError: the payload is not a message.
    """
    layout = _Layout(data)
    count = 0
    if layout.header is not None:
        fields, _ = decode_value(data, layout.header[1], 1)
        if isinstance(fields, list) and len(fields) > _HEADER_DELIVERY_COUNT:
            count = int(fields[_HEADER_DELIVERY_COUNT] or 0)
    count += 1
    return rewrite_header(data, {_HEADER_DELIVERY_COUNT: uint(count), _HEADER_FIRST_ACQUIRER: None}), count


def annotations_of(data: bytes) -> dict[Any, Any]:
    """The message annotations (§3.2.3), or an empty dict.

    Raises:
        DecodeError: the payload is not a message.
    """
    layout = _Layout(data)
    if layout.annotations is None:
        return {}
    value, _ = decode_application_value(data, layout.annotations[1], 1)  # the application's: Described kept
    if not isinstance(value, dict):
        raise DecodeError("the message-annotations section must be a map", offset=layout.annotations[1])
    return value


def merge_annotations(data: bytes, annotations: dict[Any, Any]) -> bytes:
    """The message with ``annotations`` combined into its message annotations (§3.2.3; str keys become symbols),
    every other section's bytes as they came.

    Raises:
        DecodeError: the payload is not a message.
    """
    layout = _Layout(data)
    if not annotations:
        return data
    merged: dict[Any, Any] = {}
    if layout.annotations is not None:
        start, value, end = layout.annotations
        existing, _ = decode_application_value(data, value, 1)  # re-encoded as they came (Described kept)
        if not isinstance(existing, dict):
            raise DecodeError("the message-annotations section must be a map", offset=value)
        merged.update(existing)
    else:
        start = end = layout.insertion_point()
    for key, item in annotations.items():
        merged[symbol(key) if isinstance(key, str) and not isinstance(key, symbol) else key] = item
    return b"".join((data[:start], b"\x00\x53\x72", encode(merged), data[end:]))
