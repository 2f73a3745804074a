"""Seeded, reproducible mutations of recorded AMQP byte streams, for network fuzz tests.

A stream is a list of chunks (what one side wrote at a time). :func:`mutate_chunks` applies a few mutations, each
chosen by the given :class:`random.Random`, so that a seed always gives the same input:

- ``flip``: one bit flipped;
- ``truncate``: the stream cut at a byte (the chunks after it are dropped);
- ``inflate``: a frame's SIZE field replaced by a lie (larger, much larger, smaller, below the 8-byte minimum);
- ``garbage``: random bytes inserted;
- ``duplicate``: a frame written twice;
- ``delete``: a few bytes removed;
- ``doff``: a frame's data offset replaced.

Frames are found with :func:`frame_spans`, which reads protocol headers and frames (§2.2, §2.3.1) as far as the
bytes allow and stops at the first thing that is neither.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Sequence

__all__ = ["MUTATIONS", "frame_spans", "mutate", "mutate_chunks"]

MUTATIONS = ("flip", "truncate", "inflate", "garbage", "duplicate", "delete", "doff")


def frame_spans(data: bytes | bytearray) -> list[tuple[int, int, bool]]:
    """``(offset, length, is_header)`` of each protocol header and frame at the start of ``data``, in order."""
    spans: list[tuple[int, int, bool]] = []
    pos = 0
    while pos + 8 <= len(data):
        if data[pos : pos + 4] == b"AMQP":
            spans.append((pos, 8, True))
            pos += 8
            continue
        (size,) = struct.unpack_from(">I", data, pos)
        if size < 8 or pos + size > len(data):
            break
        spans.append((pos, size, False))
        pos += size
    return spans


def _frames(data: bytearray) -> list[tuple[int, int]]:
    return [(offset, length) for offset, length, header in frame_spans(data) if not header]


def mutate(data: bytes, rng: random.Random, kind: str) -> bytes:
    """``data`` with one mutation of ``kind`` (one of :data:`MUTATIONS`); unchanged when it does not apply."""
    out = bytearray(data)
    if not out:
        return bytes(out)
    if kind == "flip":
        index = rng.randrange(len(out))
        out[index] ^= 1 << rng.randrange(8)
    elif kind == "truncate":
        del out[rng.randrange(len(out)) :]
    elif kind == "inflate":
        frames = _frames(out)
        if frames:
            offset, size = rng.choice(frames)
            lie = rng.choice([size + 1, size * 2, size + 65536, 0xFFFFFFFF, size - 1, 7, 0])
            out[offset : offset + 4] = struct.pack(">I", lie & 0xFFFFFFFF)
    elif kind == "garbage":
        index = rng.randrange(len(out) + 1)
        out[index:index] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
    elif kind == "duplicate":
        frames = _frames(out)
        if frames:
            offset, size = rng.choice(frames)
            out[offset + size : offset + size] = out[offset : offset + size]
    elif kind == "delete":
        index = rng.randrange(len(out))
        del out[index : index + rng.randint(1, 8)]
    elif kind == "doff":
        frames = _frames(out)
        if frames:
            offset, _ = rng.choice(frames)
            out[offset + 4] = rng.choice([0, 1, 3, 255])
    else:
        raise ValueError(f"unknown mutation {kind!r}")
    return bytes(out)


def mutate_chunks(
    chunks: Sequence[bytes], rng: random.Random, *, count: tuple[int, int] = (1, 3)
) -> tuple[list[bytes], list[str]]:
    """A mutated copy of ``chunks`` and the mutations applied (``"kind@chunk"``), from ``count[0]`` to
    ``count[1]`` of them on chunks chosen by ``rng``. A truncation also drops every later chunk."""
    out = [bytes(chunk) for chunk in chunks]
    applied: list[str] = []
    for _ in range(rng.randint(*count)):
        if not out:
            break
        index = rng.randrange(len(out))
        kind = rng.choice(MUTATIONS)
        out[index] = mutate(out[index], rng, kind)
        if kind == "truncate":
            del out[index + 1 :]
        applied.append(f"{kind}@{index}")
    return out, applied
