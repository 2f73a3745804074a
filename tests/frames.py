"""A hand-made frame factory and a byte-stream reader for engine tests.

The factory builds the bytes of a frame (§2.3.1) from its parts, so that a test can set the size, the data offset,
the type and the channel to any value, and corrupt the body: ``frame(Open(container_id="x"))`` is a well-formed
open frame, ``frame(Open(...), size=7)`` one whose size lies. The reader (:func:`parse_stream`) splits what an
engine wrote into protocol headers and decoded frames, to check what it said (e.g. the condition of its close).
"""

from __future__ import annotations

import socket
import struct
import time
from typing import Any, NamedTuple

from amqp_async.codec._decoder import decode_value
from amqp_async.codec._encoder import encode_value
from amqp_async.codec.framing import AMQP_HEADER, FRAME_AMQP, FRAME_SASL, SASL_HEADER, TLS_HEADER
from amqp_async.codec.performatives import Close, Detach, End, Error

__all__ = [
    "AMQP_HEADER",
    "FRAME_AMQP",
    "FRAME_SASL",
    "SASL_HEADER",
    "TLS_HEADER",
    "Header",
    "ParsedFrame",
    "body_bytes",
    "close_error",
    "detach_errors",
    "end_errors",
    "frame",
    "frames_only",
    "parse_stream",
    "raw_frame",
    "read_until_closed",
    "uint",
    "with_byte",
    "with_doff",
    "with_size",
]

_HEAD = struct.Struct(">IBBH")


def uint(value: int, encoding: str) -> bytes:
    """A uint field in one of its three encodings (§1.6.8: uint0 only for 0, smalluint only below 256)."""
    if encoding == "uint0" and value == 0:
        return b"\x43"
    if encoding in ("uint0", "smalluint") and value < 256:
        return bytes((0x52, value))
    return b"\x70" + struct.pack(">I", value)


def body_bytes(body: Any) -> bytes:
    """The AMQP encoding of a performative (or any value)."""
    out = bytearray()
    encode_value(out, body)
    return bytes(out)


def raw_frame(
    body: bytes = b"",
    *,
    channel: int = 0,
    frame_type: int = FRAME_AMQP,
    doff: int = 2,
    size: int | None = None,
    extended: bytes = b"",
) -> bytes:
    """A frame around already encoded ``body`` bytes; ``size`` and ``doff`` default to the truthful values.

    ``extended`` is the extended header (its length should be ``4 * (doff - 2)`` for a truthful frame).
    """
    head = 8 + len(extended)
    total = head + len(body) if size is None else size
    return _HEAD.pack(total, doff, frame_type, channel) + extended + body


def frame(
    body: Any = None,
    *,
    channel: int = 0,
    frame_type: int = FRAME_AMQP,
    payload: bytes = b"",
    doff: int = 2,
    size: int | None = None,
) -> bytes:
    """A frame carrying ``body`` (a performative, encoded here; None: an empty frame) and ``payload``."""
    encoded = b"" if body is None else body_bytes(body)
    return raw_frame(encoded + payload, channel=channel, frame_type=frame_type, doff=doff, size=size)


def with_size(data: bytes, size: int) -> bytes:
    """The frame with its SIZE field replaced (the bytes are unchanged otherwise)."""
    return struct.pack(">I", size) + data[4:]


def with_doff(data: bytes, doff: int) -> bytes:
    """The frame with its DOFF field replaced."""
    return data[:4] + bytes((doff,)) + data[5:]


def with_byte(data: bytes, index: int, value: int) -> bytes:
    """The bytes with one byte replaced (a negative index counts from the end)."""
    index %= len(data)
    return data[:index] + bytes((value,)) + data[index + 1 :]


class Header(NamedTuple):
    """A protocol header found in a byte stream."""

    raw: bytes


class ParsedFrame(NamedTuple):
    """A frame found in a byte stream: its body decoded (None for an empty frame), its payload as bytes."""

    frame_type: int
    channel: int
    body: Any
    payload: bytes


def parse_stream(data: bytes) -> list[Header | ParsedFrame]:
    """Split an engine's output into protocol headers and frames (the stream must be complete and well formed)."""
    items: list[Header | ParsedFrame] = []
    pos = 0
    while pos < len(data):
        if data[pos : pos + 4] == b"AMQP":
            items.append(Header(bytes(data[pos : pos + 8])))
            pos += 8
            continue
        size, doff, frame_type, channel = _HEAD.unpack_from(data, pos)
        if size < 8 or pos + size > len(data):
            raise ValueError(f"truncated or invalid frame at {pos}: size {size}")
        start, end = pos + 4 * doff, pos + size
        if start == end:
            items.append(ParsedFrame(frame_type, channel, None, b""))
        else:
            body, after = decode_value(bytes(data[:end]), start)
            items.append(ParsedFrame(frame_type, channel, body, bytes(data[after:end])))
        pos = end
    return items


def frames_only(data: bytes) -> list[ParsedFrame]:
    """The frames of :func:`parse_stream` (headers dropped)."""
    return [item for item in parse_stream(data) if isinstance(item, ParsedFrame)]


def take_complete_frames(buffer: bytearray) -> list[Any]:
    """The bodies of the whole frames at the head of ``buffer``, a socket's input so far (taken out of it; protocol
    headers are skipped, a partial frame stays for the next read)."""
    bodies = []
    while True:
        if buffer[:4] == b"AMQP":
            del buffer[:8]
            continue
        if len(buffer) < 8:
            return bodies
        size = int.from_bytes(buffer[:4], "big")
        if len(buffer) < size:
            return bodies
        bodies.extend(item.body for item in frames_only(bytes(buffer[:size])))
        del buffer[:size]


def close_error(data: bytes) -> Error | None:
    """The error of the (single) close frame in ``data``; AssertionError if there is none."""
    closes = [item.body for item in frames_only(data) if isinstance(item.body, Close)]
    assert len(closes) == 1, f"expected one close frame, got {closes}"
    return closes[0].error


def end_errors(data: bytes) -> list[Error | None]:
    """The errors of the end frames in ``data``."""
    return [item.body.error for item in frames_only(data) if isinstance(item.body, End)]


def detach_errors(data: bytes) -> list[Error | None]:
    """The errors of the detach frames in ``data``."""
    return [item.body.error for item in frames_only(data) if isinstance(item.body, Detach)]


def read_until_closed(peer: socket.socket, wait: float) -> bytes:
    """What comes on the raw socket ``peer`` until the other end closes the connection (or ``wait`` seconds pass)."""
    peer.settimeout(0.2)
    deadline = time.monotonic() + wait
    received = b""
    while time.monotonic() < deadline:
        try:
            chunk = peer.recv(65536)
        except TimeoutError:
            continue
        except OSError:
            break
        if not chunk:
            break
        received += chunk
    return received
