"""A tour of the AMQP 1.0 codec: encode a message and a few values to wire bytes and decode them back.

Run it with ``python examples/codec_tour.py``; it needs no network and no broker.
"""

from __future__ import annotations

import uuid

import amqp_async
from amqp_async import codec, types


def hexdump(data: bytes, width: int = 32) -> str:
    """Format ``data`` as lines of hex pairs, ``width`` bytes a line."""
    return "\n".join(f"    {data[i : i + width].hex(' ')}" for i in range(0, len(data), width))


def tour_message() -> None:
    message = amqp_async.Message(
        body="Hello, AMQP 1.0!",
        subject="greetings",
        properties={"lang": "en", "attempt": 1},
    )
    message.id = uuid.UUID("6ba7b810-9dad-11d1-80b4-00c04fd430c8")
    message.content_type = "text/plain"
    message.durable = True

    data = message.encode()
    decoded = amqp_async.Message()
    decoded.decode(data)

    print("message:", message)
    print(f"encoded ({len(data)} bytes):")
    print(hexdump(data))
    print("decoded:", decoded)
    assert (decoded.id, decoded.subject, decoded.content_type, decoded.durable) == (
        message.id,
        message.subject,
        message.content_type,
        message.durable,
    )
    assert decoded.properties == message.properties
    assert decoded.body == message.body
    print()


def tour_values() -> None:
    values: list[object] = [
        None,
        True,
        -7,  # Python int -> AMQP long
        2.5,  # Python float -> AMQP double
        "text",  # str -> string
        b"\x00\x01\x02",  # bytes -> binary
        types.symbol("amqp:accepted:list"),
        types.ulong(2**64 - 1),
        types.timestamp(1_700_000_000_000),  # milliseconds since the Unix epoch
        types.Described(types.symbol("example:point"), [types.int32(3), types.int32(4)]),
        types.Array(types.UNDESCRIBED, types.TypeCode.INT, 1, 2, 3, -4),
        {types.symbol("x-opt-key"): types.ushort(42), "nested": [1, "two", None]},
    ]
    width = max(len(repr(value)) for value in values)
    for value in values:
        data = codec.encode(value)
        back = codec.decode(data)
        assert back == value, (value, back)
        print(f"{value!r:<{width}}  {data.hex(' ')}")
        print(f"{'':<{width}}  -> {back!r}")


def main() -> None:
    tour_message()
    tour_values()


if __name__ == "__main__":
    main()
