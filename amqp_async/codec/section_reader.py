"""A message's sections (§3.2) read from its bytes as they come, without holding its body.

A message is a run of described sections: header, delivery-annotations, message-annotations, properties,
application-properties, then the body (one or more data sections, one or more amqp-sequence sections, or one
amqp-value), then a footer. :class:`SectionReader` takes the bytes in pieces of any size (the payloads of transfer
frames, as a streamed delivery hands them over) and:

- keeps the sections before the body (the *head*) whole: :attr:`~SectionReader.head` once the body starts (or the
  message ends), to decode with :meth:`~amqp_async.Message.decode`;
- passes the body's content through as it comes, never joined: the bytes of every data section (§3.2.6), or of an
  amqp-value holding a binary or a string (§3.2.8; a string's UTF-8 bytes);
- keeps the footer whole (:attr:`~SectionReader.footer`);
- stops at a body it does not pass through (amqp-sequence sections, an amqp-value of another type): it is read
  whole instead (:attr:`~SectionReader.stopped`, the bytes from that section on in :meth:`~SectionReader.leftover`).

The sections it keeps are bounded (``max_kept`` bytes together: a head larger than that is refused with
:class:`SectionsTooLarge`), so that the memory a streamed message takes does not grow with it. Order is checked as
``Message.decode`` checks it (§3.2: each section at most once and in order, only data and amqp-sequence repeat, the
body of one kind).

Sans-IO: bytes in, pieces out; :class:`~amqp_async.errors.DecodeError` for bytes that are not a message.
"""

from __future__ import annotations

import struct

from ..errors import DecodeError
from ..types import symbol
from .section_codes import AMQP_SEQUENCE as _AMQP_SEQUENCE
from .section_codes import AMQP_VALUE as _AMQP_VALUE
from .section_codes import DATA as _DATA
from .section_codes import FOOTER as _FOOTER
from .section_codes import HEADER as _HEADER

__all__ = ["DEFAULT_MAX_KEPT", "SectionReader", "SectionsTooLarge"]

#: The most bytes of head and footer sections a reader keeps by default.
DEFAULT_MAX_KEPT = 1 << 20

_BODY = (_DATA, _AMQP_SEQUENCE, _AMQP_VALUE)
_NAMES = {
    symbol("amqp:header:list"): 0x70,
    symbol("amqp:delivery-annotations:map"): 0x71,
    symbol("amqp:message-annotations:map"): 0x72,
    symbol("amqp:properties:list"): 0x73,
    symbol("amqp:application-properties:map"): 0x74,
    symbol("amqp:data:binary"): 0x75,
    symbol("amqp:amqp-sequence:list"): 0x76,
    symbol("amqp:amqp-value:*"): 0x77,
    symbol("amqp:footer:map"): 0x78,
}
#: Encodings whose content a reader passes through: binary and string, in their one- and four-octet size forms.
_PASSED = {0xA0: 1, 0xB0: 4, 0xA1: 1, 0xB1: 4}
_BINARY = (0xA0, 0xB0)
_unpack_I = struct.Struct(">I").unpack_from
_unpack_Q = struct.Struct(">Q").unpack_from

# Width of the fixed-size encodings (§1.6), by constructor.
_FIXED: dict[int, int] = {code: 0 for code in (0x40, 0x41, 0x42, 0x43, 0x44, 0x45)}
_FIXED.update({code: 1 for code in (0x50, 0x51, 0x52, 0x53, 0x54, 0x55, 0x56)})
_FIXED.update({0x60: 2, 0x61: 2})
_FIXED.update({code: 4 for code in (0x70, 0x71, 0x72, 0x73, 0x74)})
_FIXED.update({code: 8 for code in (0x80, 0x81, 0x82, 0x83, 0x84)})
_FIXED[0x94] = 16
_FIXED[0x98] = 16
# Variable-size encodings: the width of their size field.
_SIZED: dict[int, int] = {code: 1 for code in (0xA0, 0xA1, 0xA3, 0xC0, 0xC1, 0xE0)}
_SIZED.update({code: 4 for code in (0xB0, 0xB1, 0xB3, 0xD0, 0xD1, 0xF0)})


class SectionsTooLarge(DecodeError):
    """The sections a reader keeps (the head, the footer) take more than its ``max_kept`` bytes.

    A :class:`~amqp_async.errors.DecodeError` (what the reader raised for it before), of its own class because the
    message may well be valid: what reads it can keep it another way (the broker keeps it whole in memory)."""


def value_end(data: bytes | bytearray, position: int, depth: int = 0) -> int | None:
    """Where the encoded value starting at ``position`` ends, from its constructor and size alone (None: the bytes
    stop before its size is known).

    Raises:
        DecodeError: an invalid constructor.
    """
    if position >= len(data):
        return None
    code = data[position]
    if code == 0x00:
        if depth > 8:
            raise DecodeError("described values nested too deep", offset=position)
        descriptor_end = value_end(data, position + 1, depth + 1)
        return None if descriptor_end is None else value_end(data, descriptor_end, depth + 1)
    width = _FIXED.get(code)
    if width is not None:
        return position + 1 + width
    width = _SIZED.get(code)
    if width is None:
        raise DecodeError(f"invalid constructor {code:#04x}", offset=position)
    if position + 1 + width > len(data):
        return None
    size = data[position + 1] if width == 1 else _unpack_I(data, position + 1)[0]
    return position + 1 + width + size


class SectionReader:
    """Reads one message's sections from its bytes in pieces (see the module's description).

    Args:
        max_kept: the most bytes of head and footer sections kept (a larger head is refused with
            :class:`SectionsTooLarge`).

    Attributes:
        head: the encoded sections before the body, once the body started or the message ended (None before).
        body_code: the body's section code once it started: 0x75 (data), 0x76 (amqp-sequence) or 0x77 (amqp-value).
        body_is_text: an amqp-value body holding a string (its pieces are its UTF-8 bytes).
        footer: the encoded footer section, once read whole (None without one).
        stopped: the reader met a body it does not pass through (see :meth:`leftover`).
    """

    __slots__ = (
        "_buffer",
        "_content_left",
        "_finished",
        "_head",
        "_max_kept",
        "_offset",
        "_previous",
        "body_code",
        "body_is_text",
        "footer",
        "head",
        "stopped",
    )

    def __init__(self, *, max_kept: int = DEFAULT_MAX_KEPT) -> None:
        self._max_kept = max_kept
        self._buffer = bytearray()  # bytes of a section not yet read whole (or, stopped, everything from it on)
        self._content_left = 0  # bytes of passed-through content still to come
        self._head = bytearray()
        self._previous = 0
        self._offset = 0  # the message offset of the first byte of _buffer (for errors)
        self._finished = False
        self.head: bytes | None = None
        self.body_code: int | None = None
        self.body_is_text = False
        self.footer: bytes | None = None
        self.stopped = False

    def feed(self, data: bytes) -> list[bytes]:
        """Take the next bytes of the message; return the pieces of body content they complete (possibly none).

        Raises:
            DecodeError: the bytes are not a message (sections out of order, a bad constructor...);
                :class:`SectionsTooLarge` (a DecodeError) for a head or footer larger than ``max_kept``.
        """
        if self._finished:
            raise DecodeError("bytes after the end of the message", offset=self._offset)
        if self.stopped:
            self._buffer += data
            return []
        pieces: list[bytes] = []
        left = self._content_left
        if left:
            size = len(data)
            if left >= size:  # the usual case: the whole piece is body content
                self._content_left = left - size
                self._offset += size
                if size:
                    pieces.append(data)
                return pieces
            pieces.append(data[:left])
            self._content_left = 0
            self._offset += left
            data = data[left:]
        if data:
            self._buffer += data
            self._read_sections(pieces)
        return pieces

    def finish(self) -> None:
        """The message ended (its last frame came).

        Raises:
            DecodeError: it ended inside a section, or held no section at all.
        """
        if self._finished:
            return
        self._finished = True
        if self.stopped:
            return
        if self._content_left or self._buffer:
            raise DecodeError("the message ends inside a section", offset=self._offset)
        if self._previous == 0:
            raise DecodeError("the message has no sections", offset=0)
        if self.head is None:
            self.head = bytes(self._head)

    def leftover(self) -> bytes:
        """After :attr:`stopped`: the bytes from the body section it stopped at on (fed so far)."""
        return bytes(self._buffer)

    # --- internals ---------------------------------------------------------------------------------------

    def _read_sections(self, pieces: list[bytes]) -> None:
        """Read the sections that start in the buffer, as far as its bytes go."""
        buffer = self._buffer
        while buffer:
            start = self._section_start(buffer)
            if start is None:
                self._check_kept(len(buffer))
                return
            code, value_at = start
            self._check_order(code)
            constructor = buffer[value_at] if value_at < len(buffer) else None
            if constructor is None:
                return
            if code in _BODY:
                self._start_body(code)
                width = _PASSED.get(constructor) if code != _AMQP_SEQUENCE else None
                if code == _DATA and width is None:
                    raise DecodeError("a data section must hold binary", offset=self._offset)
                if width is None:
                    self.stopped = True  # read whole by the caller: buffer holds it from its first byte
                    return
                if value_at + 1 + width > len(buffer):
                    return
                size = buffer[value_at + 1] if width == 1 else _unpack_I(buffer, value_at + 1)[0]
                if code == _AMQP_VALUE:
                    self.body_is_text = constructor not in _BINARY
                content_at = value_at + 1 + width
                available = min(size, len(buffer) - content_at)
                if available:
                    pieces.append(bytes(buffer[content_at : content_at + available]))
                self._previous = code
                consumed = content_at + available
                self._content_left = size - available
                self._offset += consumed
                del buffer[:consumed]
                if self._content_left:
                    return  # the rest of the content passes through as it comes
                continue
            end = value_end(buffer, value_at)
            if end is None or end > len(buffer):
                self._check_kept(len(buffer) if end is None else end)
                return
            section = bytes(buffer[:end])
            if code == _FOOTER:
                self._start_body(code)
                self.footer = section
            else:
                self._check_kept(len(self._head) + end)
                self._head += section
            self._previous = code
            self._offset += end
            del buffer[:end]

    def _section_start(self, buffer: bytearray) -> tuple[int, int] | None:
        """The section code at the start of the buffer and where its value starts (None: too few bytes yet)."""
        if buffer[0] != 0x00:
            raise DecodeError("expected a message section (a described value)", offset=self._offset)
        if len(buffer) < 3:
            return None
        kind = buffer[1]
        if kind == 0x53:  # smallulong: the usual descriptor
            return buffer[2], 3
        if kind == 0x80:  # ulong
            if len(buffer) < 10:
                return None
            code = _unpack_Q(buffer, 2)[0]
            return self._known(code), 10
        if kind in (0xA3, 0xB3):  # symbol
            end = value_end(buffer, 1)
            if end is None or end > len(buffer):
                return None
            at = 3 if kind == 0xA3 else 6
            name = symbol(bytes(buffer[at:end]).decode("ascii", "replace"))
            code = _NAMES.get(name)
            if code is None:
                raise DecodeError(f"unknown message section descriptor {name!r}", offset=self._offset)
            return code, end
        raise DecodeError("a message section's descriptor is a ulong or a symbol", offset=self._offset)

    def _known(self, code: int) -> int:
        if not _HEADER <= code <= _FOOTER:
            raise DecodeError(f"unknown message section {code:#x}", offset=self._offset)
        return code

    def _check_order(self, code: int) -> None:
        """§3.2: in order, each once, only data and amqp-sequence repeat; the body of one kind."""
        previous = self._previous
        if code <= previous and not (code == previous and code in (_DATA, _AMQP_SEQUENCE)):
            raise DecodeError(f"message section {code:#x} out of order or repeated", offset=self._offset)
        if code in _BODY and previous in _BODY and code != previous:
            raise DecodeError("a message body is either amqp-value, data or amqp-sequence", offset=self._offset)
        if not _HEADER <= code <= _FOOTER:
            raise DecodeError(f"unknown message section {code:#x}", offset=self._offset)

    def _start_body(self, code: int) -> None:
        """The head is complete once a body section (or the footer) begins."""
        if self.head is None:
            self.head = bytes(self._head)
            self._head = bytearray()
        if code != _FOOTER and self.body_code is None:
            self.body_code = code

    def _check_kept(self, size: int) -> None:
        if size > self._max_kept:
            raise SectionsTooLarge(
                f"the message's sections other than its body take more than {self._max_kept} bytes",
                offset=self._offset,
            )
