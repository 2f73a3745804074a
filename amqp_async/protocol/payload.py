"""An encoded message handed to the engine in parts, so that a large body is sent without being copied.

A message with a 1 MiB body encodes to a few bytes of sections, the body, and perhaps a footer. Joining them
into one ``bytes`` copies the megabyte, into fresh memory, once per message: about as much work as the kernel's
own copy into the socket. :class:`Gathered` keeps the parts as they are; the engine writes each one to its
output in turn (a large immutable part by reference), and splits the whole across transfer frames by offset,
as it does a ``bytes`` payload.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["BY_REFERENCE", "Gathered", "Payload", "payload_slice"]

#: payloads at least this large are written to the engine's output by reference rather than copied into it.
BY_REFERENCE = 16384


class Gathered:
    """Consecutive buffers that together are one encoded message.

    The parts must not change until the delivery is written (``bytes`` are never changed; that is why the
    message encoder gathers only ``bytes`` bodies).
    """

    __slots__ = ("_size", "parts")

    def __init__(self, parts: Iterable[bytes | memoryview]) -> None:
        self.parts = tuple(part for part in parts if len(part))
        self._size = sum(len(part) for part in self.parts)

    def __len__(self) -> int:
        return self._size

    def __bytes__(self) -> bytes:
        return b"".join(self.parts)

    def __repr__(self) -> str:
        return f"Gathered({len(self.parts)} parts, {self._size} bytes)"

    def slice(self, start: int, end: int) -> Gathered:
        """The bytes from ``start`` to ``end`` (offsets into the whole), as views of the parts: no copy."""
        pieces: list[memoryview] = []
        offset = 0
        for part in self.parts:
            length = len(part)
            if offset + length > start and offset < end:
                pieces.append(memoryview(part)[max(start - offset, 0) : min(end - offset, length)])
            offset += length
            if offset >= end:
                break
        return Gathered(pieces)


#: What the engine sends as a transfer's payload.
Payload = bytes | bytearray | memoryview | Gathered


def payload_slice(payload: Payload, start: int, end: int | None = None) -> Payload:
    """``payload[start:end]`` without copying: a view, or a :class:`Gathered` of views."""
    if end is None:
        end = len(payload)
    if isinstance(payload, Gathered):
        return payload.slice(start, end)
    return memoryview(payload)[start:end]
