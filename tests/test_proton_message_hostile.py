"""Hostile messages given to the callback API's ``Message.decode`` (what ``MessagingHandler`` calls for every message
received): refused with ``MessageException`` (condition ``amqp:decode-error``) before they cost their price.

The callback API read a message holding a described value a second time, into a tree of proton ``Data`` nodes (to
give the application's described values as proton does): a node for each element of an array of nulls, whose count
costs no bytes. A 190-byte message (a described value beside an array of 20 arrays of 65,536 nulls) took 226 MB and
12 s to decode. The codec now reads those values itself, and bounds zero-width elements by their array's bytes.
"""

from __future__ import annotations

import struct
import tracemalloc

import pytest

import amqp_async.proton as ours

AMQP_VALUE = b"\x00\x53\x77"


def array_of_arrays_of_nulls(arrays: int, nulls: int) -> bytes:
    inner = struct.pack(">II", 5, nulls) + b"\x40"  # an array32 element: size, count, the null constructor
    content = struct.pack(">I", arrays) + b"\xf0" + inner * arrays
    return b"\xf0" + struct.pack(">I", len(content)) + content


def list32(*items: bytes) -> bytes:
    content = struct.pack(">I", len(items)) + b"".join(items)
    return b"\xd0" + struct.pack(">I", len(content)) + content


def test_a_described_value_beside_nested_arrays_of_nulls_is_refused_at_once() -> None:
    described = b"\x00\x80" + (0x1234).to_bytes(8, "big") + b"\x54\x01"  # Described(ulong(0x1234), 1)
    hostile = AMQP_VALUE + list32(described, array_of_arrays_of_nulls(20, 65536))
    assert len(hostile) < 256
    tracemalloc.start()
    try:
        with pytest.raises(ours.MessageException, match="zero-width elements") as caught:
            ours.Message().decode(hostile)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert caught.value.condition == "amqp:decode-error"
    assert peak < 1 << 20  # before: 226 MB


def test_a_described_value_beside_arrays_of_nulls_within_bounds_decodes() -> None:
    described = b"\x00\x80" + (0x1234).to_bytes(8, "big") + b"\x54\x01"
    message = ours.Message()
    message.decode(AMQP_VALUE + list32(described, array_of_arrays_of_nulls(3, 640)))
    body = message.body
    assert isinstance(body, list)
    assert body[0] == ours.Described(ours.ulong(0x1234), 1)
    assert [len(array) for array in body[1].elements] == [640, 640, 640]


def test_data_decode_bounds_arrays_of_nulls_by_their_bytes() -> None:
    """``Data.decode`` (proton's value tree, read by programs for any AMQP encoding) bounds an array of zero-width
    elements by its bytes as the codec does: an array of 20 arrays of 65,536 nulls (190 bytes) made a tree of
    226 MB in 12 s; it is refused with ``amqp:decode-error`` at once. One within the bound still decodes."""
    hostile = array_of_arrays_of_nulls(20, 65536)
    tracemalloc.start()
    try:
        with pytest.raises(ours.DataException, match="zero-width elements") as caught:
            ours.Data().decode(hostile)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert caught.value.condition == "amqp:decode-error"
    assert peak < 1 << 20
    data = ours.Data()
    data.decode(array_of_arrays_of_nulls(3, 640))
    assert [len(array) for array in data.get_object().elements] == [640, 640, 640]
