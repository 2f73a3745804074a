"""Protocol headers (spec §2.2, §5.1, §5.2) and frames (§2.3): encoding, and an incremental decoder.

A connection's byte stream is a protocol header (8 bytes), then frames; after a SASL exchange (or a TLS
handshake) a second header starts the AMQP layer. Each frame (§2.3.1) is::

    SIZE (4 bytes) | DOFF (1 byte) | TYPE (1 byte) | CHANNEL (2 bytes) | extended header | body

``SIZE`` counts the whole frame; ``DOFF`` is the body's offset in 4-byte words (at least 2); ``TYPE`` is 0x00
for AMQP frames and 0x01 for SASL frames; the extended header is skipped. An empty body is a heartbeat (§2.4.5).
The body is one performative (a described list) followed, for a transfer, by the message bytes: the payload.

Sans-IO: :class:`FrameDecoder` is fed bytes and hands back frames; :func:`encode_frame` appends a frame to a
buffer. Neither does I/O.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any, NamedTuple

from ..errors import DecodeError, EncodeError
from ._decoder import Buffer, decode_value
from ._encoder import encode_value

__all__ = [
    "AMQP_HEADER",
    "EMPTY_FRAME",
    "FRAME_AMQP",
    "FRAME_HEADER_SIZE",
    "FRAME_SASL",
    "MAX_FRAME_SIZE",
    "MIN_MAX_FRAME_SIZE",
    "PROTOCOL_AMQP",
    "PROTOCOL_SASL",
    "PROTOCOL_TLS",
    "SASL_HEADER",
    "TLS_HEADER",
    "Frame",
    "FrameDecoder",
    "FramingError",
    "NotAProtocolHeader",
    "ProtocolHeader",
    "UnsupportedProtocolError",
    "encode_frame",
    "parse_protocol_header",
]

#: §2.2: the header that starts an AMQP 1.0.0 connection (protocol id 0).
AMQP_HEADER = b"AMQP\x00\x01\x00\x00"
#: §5.1: the header that starts a TLS layer (protocol id 2).
TLS_HEADER = b"AMQP\x02\x01\x00\x00"
#: §5.3.1: the header that starts a SASL layer (protocol id 3).
SASL_HEADER = b"AMQP\x03\x01\x00\x00"

#: Protocol ids of the headers (the fifth byte).
PROTOCOL_AMQP = 0
PROTOCOL_TLS = 2
PROTOCOL_SASL = 3

#: §2.3.1 frame types.
FRAME_AMQP = 0x00
FRAME_SASL = 0x01

#: Size of the fixed frame header (§2.3.1).
FRAME_HEADER_SIZE = 8
#: §2.7.1: the smallest max-frame-size a peer may set, and the limit that holds until open is exchanged.
MIN_MAX_FRAME_SIZE = 512
#: The largest frame size that can be expressed (the default max-frame-size of open).
MAX_FRAME_SIZE = 0xFFFFFFFF
#: §2.4.5: an empty AMQP frame on channel 0, as sent to keep a connection alive.
EMPTY_FRAME = b"\x00\x00\x00\x08\x02\x00\x00\x00"

_HEADER = struct.Struct(">IBBH")
_unpack_header = _HEADER.unpack_from
_pack_header = _HEADER.pack
_pack_into_size = struct.Struct(">I").pack_into


class FramingError(DecodeError):
    """A valid frame header cannot be formed from the incoming bytes (§2.8.16 ``amqp:connection:framing-error``).

    Raised for a frame whose size is below 8 or above the negotiated maximum, a data offset below 2 or beyond
    the frame, and for a protocol header that is not an AMQP one.
    """

    default_condition = "amqp:connection:framing-error"


class ProtocolHeader(NamedTuple):
    """A parsed protocol header: protocol id (0 AMQP, 2 TLS, 3 SASL) and version."""

    protocol_id: int
    major: int
    minor: int
    revision: int

    @property
    def version(self) -> tuple[int, int, int]:
        """The version as ``(major, minor, revision)``."""
        return (self.major, self.minor, self.revision)

    def to_bytes(self) -> bytes:
        """The 8 bytes of this header."""
        return b"AMQP" + bytes((self.protocol_id, self.major, self.minor, self.revision))


class UnsupportedProtocolError(FramingError):
    """A well-formed AMQP protocol header for a protocol id or version this library does not speak.

    §2.2: the receiver should answer with the header it does support, then close the socket.

    Attributes:
        header: the header the peer sent.
    """

    def __init__(self, header: ProtocolHeader) -> None:
        self.header = header
        super().__init__(
            f"unsupported protocol header: protocol id {header.protocol_id}, version "
            f"{header.major}.{header.minor}.{header.revision}"
        )


class NotAProtocolHeader(FramingError):
    """The peer's first bytes are no AMQP protocol header at all (an HTTP response, a TLS record...).

    Attributes:
        received: those bytes (up to 8), to say what the peer speaks.
    """

    def __init__(self, received: bytes) -> None:
        self.received = received
        super().__init__(f"not an AMQP protocol header: {received!r}")


_SUPPORTED_PROTOCOLS = frozenset({PROTOCOL_AMQP, PROTOCOL_TLS, PROTOCOL_SASL})


def parse_protocol_header(data: Buffer) -> ProtocolHeader:
    """Parse an 8-byte protocol header (§2.2).

    Returns:
        The protocol id and version: AMQP (0), TLS (2) or SASL (3), version 1.0.0.

    Raises:
        NotAProtocolHeader: the bytes are not an AMQP protocol header at all (e.g. an HTTP request or a TLS record).
        UnsupportedProtocolError: an AMQP header with another protocol id or version (carries the header).
    """
    raw = bytes(data)
    if len(raw) != 8 or raw[:4] != b"AMQP":
        raise NotAProtocolHeader(raw[:8])
    header = ProtocolHeader(raw[4], raw[5], raw[6], raw[7])
    if header.protocol_id not in _SUPPORTED_PROTOCOLS or header.version != (1, 0, 0):
        raise UnsupportedProtocolError(header)
    return header


class Frame(NamedTuple):
    """One decoded frame.

    Attributes:
        type: :data:`FRAME_AMQP` or :data:`FRAME_SASL` (other values are passed through for the engine to refuse).
        channel: the channel number (ignored by SASL frames).
        performative: the decoded body (a performative or SASL frame body), or ``None`` for an empty frame.
        payload: the bytes after the performative (a transfer's message bytes), ``b""`` when there are none.
            A ``memoryview`` into the received bytes: take ``bytes(payload)`` to keep it beyond the frame.
    """

    type: int
    channel: int
    performative: Any
    payload: Buffer


def encode_frame(
    buf: bytearray,
    frame_type: int,
    channel: int,
    performative: Any,
    payload: Buffer = b"",
    *,
    max_frame_size: int = MAX_FRAME_SIZE,
) -> int:
    """Append one frame to ``buf``: header, ``performative`` (``None`` for an empty frame), then ``payload``.

    The performative is encoded in place after a header whose size is patched afterwards, so nothing is copied.

    Args:
        buf: the output buffer.
        frame_type: :data:`FRAME_AMQP` or :data:`FRAME_SASL`.
        channel: the channel number, 0 to 65535.
        performative: a performative or SASL frame body (any encodable value), or ``None``.
        payload: bytes to follow the performative (a transfer's message bytes).
        max_frame_size: the peer's maximum frame size; a larger frame is refused (and nothing is appended).

    Returns:
        The size of the frame.

    Raises:
        EncodeError: the frame would exceed ``max_frame_size`` (the transfer must be split), a field cannot be
            encoded, or the type or channel is out of range.
    """
    start = len(buf)
    try:
        buf += _pack_header(0, 2, frame_type, channel)
    except struct.error:
        raise EncodeError(f"frame type {frame_type!r} or channel {channel!r} out of range") from None
    try:
        if performative is not None:
            encode_value(buf, performative)
        if payload:
            buf += payload
    except BaseException:
        del buf[start:]
        raise
    size = len(buf) - start
    if size > max_frame_size:
        del buf[start:]
        raise EncodeError(f"frame of {size} bytes exceeds the maximum frame size {max_frame_size}")
    _pack_into_size(buf, start, size)
    return size


class FrameDecoder:
    """Incremental decoder of protocol headers and frames from a byte stream split at any offsets.

    Feed it bytes with :meth:`feed`; pull a protocol header with :meth:`next_protocol_header` where the stream
    has one (at the start, and after the SASL outcome), and frames with :meth:`next_frame` or by iterating.
    Nothing is decoded ahead of the caller's request, so the caller can switch between frames and headers.

    Bytes are kept as the ``bytes`` objects received: frames are decoded straight from them, and payloads are
    ``memoryview`` slices of them (no copy). A frame that spans several pieces is copied out of them once all of
    its bytes are there (that frame only, not the rest of the last piece), so a byte is copied at most once
    whatever the chunking. Nothing is kept once every buffered byte is consumed.

    Args:
        max_frame_size: the largest frame accepted (our max-frame-size as announced in open; §2.7.1 says it is
            :data:`MIN_MAX_FRAME_SIZE` until open has been exchanged: the engine sets it). The attribute may be
            changed at any time.
    """

    __slots__ = ("_avail", "_chunks", "_data", "_pos", "max_frame_size")

    def __init__(self, max_frame_size: int = MAX_FRAME_SIZE) -> None:
        self.max_frame_size = max_frame_size
        self._data = b""
        self._pos = 0
        self._chunks: list[bytes] = []
        self._avail = 0

    @property
    def buffered(self) -> int:
        """The number of bytes received and not yet consumed."""
        return self._avail

    def feed(self, data: Buffer) -> None:
        """Add received bytes (a ``bytearray`` or ``memoryview`` is copied, as its owner may reuse it)."""
        if not data:
            return
        if data.__class__ is not bytes:
            data = bytes(data)
        if self._avail == 0:
            self._data = data
            self._pos = 0
        else:
            self._chunks.append(data)
        self._avail += len(data)

    def _join(self) -> bytes:
        """Make every buffered byte contiguous in ``_data`` (from offset 0), and return it."""
        data = b"".join([memoryview(self._data)[self._pos :], *self._chunks])
        self._data = data
        self._pos = 0
        self._chunks = []
        return data

    def _peek(self, size: int) -> bytes:
        """The next ``size`` buffered bytes (at least that many are buffered), copied out of the pieces, unconsumed."""
        peeked = bytes(memoryview(self._data)[self._pos : self._pos + size])
        for chunk in self._chunks:
            if len(peeked) >= size:
                break
            peeked += chunk[: size - len(peeked)]
        return peeked

    def _take(self, size: int) -> bytes:
        """Consume the next ``size`` bytes (more than ``_data`` holds; at least that many are buffered) as one new
        bytes object: the frame is copied out of its pieces, and the last piece stays, from where the frame ends."""
        pieces: list[Buffer] = [memoryview(self._data)[self._pos :]]
        need = size - len(pieces[0])
        chunks = self._chunks
        while need > 0:
            chunk = chunks.pop(0)
            if len(chunk) > need:
                pieces.append(memoryview(chunk)[:need])
                chunks.insert(0, chunk)
                self._pos = need
                break
            pieces.append(chunk)
            need -= len(chunk)
        else:
            self._pos = 0
        self._avail -= size
        if self._avail == 0:
            self._data = b""  # drop our reference: payload views keep what they need alive
            self._pos = 0
        else:
            self._data = chunks.pop(0)
        return b"".join(pieces)

    def piece(self) -> tuple[bytes, int]:
        """The buffered bytes as they came, for a caller that reads whole frames in place (see
        :mod:`amqp_async.protocol.transfer_intake`): ``(data, position)``, the unread bytes being ``data[position:]``
        (more may follow in later pieces). Nothing is consumed: :meth:`consume_to` does that."""
        return self._data, self._pos

    def consume_to(self, end: int) -> None:
        """Consume the bytes of the current :meth:`piece` up to offset ``end`` (whole frames the caller has read)."""
        if end > self._pos:
            self._consume(end, end - self._pos)

    def _consume(self, end: int, size: int) -> None:
        self._avail -= size
        if self._avail == 0:
            self._data = b""  # drop our reference: payload views keep what they need alive
            self._pos = 0
        else:
            self._pos = end
            if end == len(self._data):
                self._data = self._chunks.pop(0)
                self._pos = 0

    def peek_protocol_header(self) -> bool:
        """True when the buffered bytes start with ``AMQP`` (a protocol header rather than a frame)."""
        if self._avail < 4:
            return False
        data, pos = self._data, self._pos
        if len(data) - pos < 4:
            data, pos = self._join(), 0
        return bytes(data[pos : pos + 4]) == b"AMQP"

    def next_protocol_header(self) -> ProtocolHeader | None:
        """Consume and parse the 8-byte protocol header, or return ``None`` if fewer than 8 bytes are buffered
        (and those could still begin one).

        Raises:
            NotAProtocolHeader / UnsupportedProtocolError: as :func:`parse_protocol_header`; NotAProtocolHeader also
                as soon as the first bytes cannot begin ``AMQP`` (a peer that sends three bytes of garbage is not
                waited for).
        """
        avail = self._avail
        if avail < 8:
            if avail:
                start = self._peek(min(avail, 4))
                if start != b"AMQP"[: len(start)]:
                    raise NotAProtocolHeader(self._peek(avail))
            return None
        data, pos = self._data, self._pos
        if len(data) - pos < 8:
            data, pos = self._join(), 0
        raw = data[pos : pos + 8]
        self._consume(pos + 8, 8)
        return parse_protocol_header(raw)

    def next_raw_frame(self) -> tuple[int, int, bytes, int, int] | None:
        """Consume the next complete frame without decoding its body, or return ``None`` if it is incomplete.

        Returns:
            ``(frame_type, channel, data, body, end)``: the frame's body is ``data[body:end]`` (empty for an
            empty frame). The engine decodes the body itself, so that it can take fast paths for transfers.

        Raises:
            FramingError: the frame's size is below 8 or above :attr:`max_frame_size`, or its data offset is
                below 2 or beyond the frame (condition ``amqp:connection:framing-error``).
        """
        avail = self._avail
        if avail < 8:
            return None
        data = self._data
        pos = self._pos
        held = len(data) - pos
        size, doff, frame_type, channel = _unpack_header(data, pos) if held >= 8 else _unpack_header(self._peek(8))
        if size > self.max_frame_size:
            raise FramingError(f"frame of {size} bytes exceeds the maximum frame size {self.max_frame_size}")
        if size < 8:
            raise FramingError(f"frame size {size} is smaller than the frame header")
        if avail < size:
            return None
        if doff < 2 or 4 * doff > size:
            raise FramingError(f"frame data offset {doff} is invalid for a frame of {size} bytes")
        # consume the frame before the caller decodes it, so that a decode error cannot make it loop on it
        if held < size:
            # The frame spans pieces: copy it (only it) out of them.
            return frame_type, channel, self._take(size), 4 * doff, size
        end = pos + size
        avail -= size
        self._avail = avail
        if avail == 0:
            self._data = b""  # drop our reference: payload views keep what they need alive
            self._pos = 0
        elif end == pos + held:  # the end of this piece: the next one
            self._data = self._chunks.pop(0)
            self._pos = 0
        else:
            self._pos = end
        return frame_type, channel, data, pos + 4 * doff, end

    def next_frame(self) -> Frame | None:
        """Consume and return the next complete frame, or ``None`` if its bytes have not all arrived.

        Raises:
            FramingError: as :meth:`next_raw_frame`.
            DecodeError: the frame body is not a valid AMQP encoding or its performative overruns the frame.
        """
        raw = self.next_raw_frame()
        if raw is None:
            return None
        frame_type, channel, data, body, end = raw
        if body == end:
            return Frame(frame_type, channel, None, b"")
        performative, after = decode_value(data, body)
        if after == end:
            return Frame(frame_type, channel, performative, b"")
        if after > end:
            raise DecodeError("the frame body overruns its frame", offset=body)
        return Frame(frame_type, channel, performative, memoryview(data)[after:end])

    def __iter__(self) -> Iterator[Frame]:
        """Yield complete frames until the buffered bytes run out (lazily: one frame per step)."""
        next_frame = self.next_frame
        while True:
            frame = next_frame()
            if frame is None:
                return
            yield frame
