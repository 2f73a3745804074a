"""Hostile bytes that cost far more to decode than they weigh: each refused with ``DecodeError``
(``amqp:decode-error``) before the cost is paid.

- Arrays of zero-width elements (§1.6.24 with null, true, false, uint0, ulong0 or list0 as the element constructor):
  their count is not bounded by bytes the elements take. A cap of 65,536 per array did not bound a message: an array
  of such arrays, 9 bytes apiece, decoded a 9 KB message into 0.5 GB (58,000 times its size). Each is now bounded by
  its own bytes (64 elements a byte, 8 for list0), so a message costs at most some 600 times its size.
- Map keys that share a hash (hash flooding): a dict takes time in the square of their number. A uuid hashes as its
  128-bit number modulo 2**61 - 1, a described value as the tuple of its parts, so a peer can send any number of
  keys of one hash (8,000 uuid keys, 144 KB, took 3 s; a megabyte, minutes). More than 16 of one hash in a map are
  refused (keys alike by chance are never that many).
"""

from __future__ import annotations

import struct
import tracemalloc
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import pytest

import amqp_async
from amqp_async import DecodeError, Message, codec
from amqp_async import types as T
from amqp_async.codec import decode_application_value
from amqp_async.codec._decoder import EMPTY_LISTS_PER_BYTE, MAX_ZERO_WIDTH_ELEMENTS, ZERO_WIDTH_ELEMENTS_PER_BYTE

try:
    from broker_serving import serving
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.broker_serving import serving

TIMEOUT = 20.0
AMQP_VALUE = b"\x00\x53\x77"


def array32(count: int, constructor: bytes, elements: bytes = b"", *, descriptor: bytes = b"") -> bytes:
    """An array32 (§1.6.24): size, count, the descriptor if any, the element constructor, the elements."""
    content = struct.pack(">I", count) + descriptor + constructor + elements
    return b"\xf0" + struct.pack(">I", len(content)) + content


def array_of_zero_width_arrays(arrays: int, count: int, constructor: bytes = b"\x40") -> bytes:
    """An array32 of ``arrays`` array32 elements of ``count`` zero-width elements each (9 bytes apiece)."""
    inner = array32(count, constructor)[1:]  # an array's elements have no constructor of their own
    return array32(arrays, b"\xf0", inner * arrays)


@pytest.fixture
def peak_memory() -> Iterator[Callable[[], int]]:
    """The peak of the memory Python allocated since the test began (tracemalloc)."""
    tracemalloc.start()
    try:
        yield lambda: tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def message_body(value: bytes) -> Any:
    """The body of the message whose amqp-value section holds the encoded ``value``, as Message.decode reads it."""
    message = Message()
    message.decode(AMQP_VALUE + value)
    return message.body


#: Each way to decode a value, giving the value.
DECODERS: dict[str, Callable[[bytes], Any]] = {
    "codec.decode": codec.decode,
    "decode_application_value": lambda data: decode_application_value(data)[0],
    "Message.decode": message_body,
}


@pytest.mark.parametrize("decode", list(DECODERS.values()), ids=list(DECODERS))
@pytest.mark.parametrize(
    "constructor", [b"\x40", b"\x41", b"\x43", b"\x44", b"\x45"], ids=["null", "true", "uint0", "ulong0", "list0"]
)
def test_an_array_of_arrays_of_many_zero_width_elements_is_refused_at_once(
    decode: Callable[[bytes], Any], constructor: bytes, peak_memory: Callable[[], int]
) -> None:
    hostile = array_of_zero_width_arrays(1000, MAX_ZERO_WIDTH_ELEMENTS, constructor)  # 9 KB
    with pytest.raises(DecodeError, match="zero-width elements in 10 bytes exceeds the limit") as caught:
        decode(hostile)
    assert caught.value.condition == "amqp:decode-error"
    assert peak_memory() < 1 << 20  # before: 0.5 GB


@pytest.mark.parametrize("decode", list(DECODERS.values()), ids=list(DECODERS))
def test_arrays_of_arrays_at_the_limit_cost_a_bounded_multiple_of_their_bytes(
    decode: Callable[[bytes], Any], peak_memory: Callable[[], int]
) -> None:
    """The worst a message can do with zero-width elements now: arrays of the most nulls their bytes allow."""
    at_limit = array_of_zero_width_arrays(1000, 10 * ZERO_WIDTH_ELEMENTS_PER_BYTE)
    value = decode(at_limit)
    assert len(value) == 1000
    assert value.elements[0] == T.Array(T.UNDESCRIBED, T.TypeCode.NULL, *[None] * 640)
    assert peak_memory() < 1000 * len(at_limit)


def test_arrays_of_nulls_as_we_and_proton_write_them_decode() -> None:
    """Our encoder and proton's write an array of nulls with the zero-width null constructor: up to the limit of
    its bytes, it decodes (an array8 holds 255 in 4 bytes, an array32 640 in 10)."""
    for count in (0, 1, 255, 256, 10 * ZERO_WIDTH_ELEMENTS_PER_BYTE):
        array = T.Array(T.UNDESCRIBED, T.TypeCode.NULL, *[None] * count)
        assert codec.decode(codec.encode(array)) == array
    with pytest.raises(DecodeError, match="641 zero-width elements in 10 bytes exceeds the limit of 640"):
        codec.decode(array32(641, b"\x40"))
    # The descriptor's bytes count as the array's: a described array of nulls may hold more.
    descriptor = b"\x00\xa1\x40" + b"d" * 64
    array = codec.decode(array32(4000, b"\x40", descriptor=descriptor))
    assert array == T.Array("d" * 64, T.TypeCode.NULL, *[None] * 4000)


def test_arrays_of_empty_lists_are_bounded_by_their_bytes_too() -> None:
    """list0 elements (no encoder we know writes them in an array) are each a new list: 8 a byte."""
    limit = 10 * EMPTY_LISTS_PER_BYTE
    decoded = codec.decode(array32(limit, b"\x45"))
    assert decoded == T.Array(T.UNDESCRIBED, T.TypeCode.LIST, *[[] for _ in range(limit)])
    assert len({id(element) for element in decoded.elements}) == limit  # each its own list
    with pytest.raises(DecodeError, match=f"{limit + 1} zero-width elements in 10 bytes"):
        codec.decode(array32(limit + 1, b"\x45"))


# --- hash flooding ---------------------------------------------------------------------------------------------

#: Python's int hash modulus: ints that differ by a multiple of it hash alike, and a uuid hashes as its int.
HASH_MODULUS = (1 << 61) - 1


def uuid_key(number: int) -> bytes:
    return b"\x98" + number.to_bytes(16, "big")


def map32(pairs: list[tuple[bytes, bytes]]) -> bytes:
    content = struct.pack(">I", 2 * len(pairs)) + b"".join(key + value for key, value in pairs)
    return b"\xd1" + struct.pack(">I", len(content)) + content


def colliding_uuid_keys(count: int) -> list[bytes]:
    return [uuid_key(index * HASH_MODULUS + 7) for index in range(count)]


HASH_FLOODS = {
    "uuid-keys": map32([(key, b"\x40") for key in colliding_uuid_keys(2000)]),
    "described-keys": map32([(b"\x00\x53\x01" + key, b"\x40") for key in colliding_uuid_keys(2000)]),
}


@pytest.mark.parametrize("decode", list(DECODERS.values()), ids=list(DECODERS))
@pytest.mark.parametrize("flood", list(HASH_FLOODS.values()), ids=list(HASH_FLOODS))
def test_a_map_of_keys_of_one_hash_is_refused(decode: Callable[[bytes], Any], flood: bytes) -> None:
    with pytest.raises(DecodeError, match="more than 16 keys of one hash") as caught:
        decode(flood)
    assert caught.value.condition == "amqp:decode-error"


FLOOD = HASH_FLOODS["uuid-keys"]
NULL_BODY = AMQP_VALUE + b"\x40"
FLOODED_SECTIONS = {
    "delivery-annotations": b"\x00\x53\x71" + FLOOD + NULL_BODY,
    "message-annotations": b"\x00\x53\x72" + FLOOD + NULL_BODY,
    "application-properties": b"\x00\x53\x74" + FLOOD + NULL_BODY,
    "footer": NULL_BODY + b"\x00\x53\x78" + FLOOD,
}


@pytest.mark.parametrize("data", list(FLOODED_SECTIONS.values()), ids=list(FLOODED_SECTIONS))
def test_a_hash_flood_in_any_map_section_is_refused(data: bytes) -> None:
    with pytest.raises(DecodeError, match="keys of one hash"):
        Message().decode(data)


def test_maps_of_many_uuid_or_described_keys_decode() -> None:
    """Keys of distinct hashes, however many, and up to 16 of one hash, decode as before."""
    many = map32([(uuid_key(index * 7919), b"\x40") for index in range(20000)])
    assert len(codec.decode(many)) == 20000
    described = map32([(b"\x00\x53\x01" + uuid_key(index), b"\x40") for index in range(5000)])
    assert len(codec.decode(described)) == 5000
    alike = codec.decode(map32([(key, b"\x40") for key in colliding_uuid_keys(16)]))
    assert len(alike) == 16
    with pytest.raises(DecodeError, match="more than 16 keys of one hash"):
        codec.decode(map32([(key, b"\x40") for key in colliding_uuid_keys(17)]))


# --- end to end ------------------------------------------------------------------------------------------------

HOSTILE_MESSAGES = {
    "zero-width-arrays": (array_of_zero_width_arrays(1000, MAX_ZERO_WIDTH_ELEMENTS), "zero-width elements"),
    "hash-flood": (HASH_FLOODS["uuid-keys"], "keys of one hash"),
}


@pytest.mark.anyio
@pytest.mark.parametrize("value, error", list(HOSTILE_MESSAGES.values()), ids=list(HOSTILE_MESSAGES))
async def test_a_hostile_message_through_the_broker_is_refused_with_decode_error(value: bytes, error: str) -> None:
    """Sent as encoded bytes through the embedded broker, a hostile message is refused by the receiver that reads
    it (before: half a gigabyte and a second of the receiver's time, or time in the square of its keys)."""
    hostile = AMQP_VALUE + value
    async with serving() as broker, amqp_async.connect(broker.url, reconnect=False) as connection:
        sender = await connection.open_sender("q")
        await sender.send(hostile)
        receiver = await connection.open_receiver("q")
        with anyio.fail_after(TIMEOUT):
            delivery = await receiver.receive()
        assert delivery.payload == hostile
        with pytest.raises(DecodeError, match=error) as caught:
            _ = delivery.message
        assert caught.value.condition == "amqp:decode-error"
        await delivery.reject()
