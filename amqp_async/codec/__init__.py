"""The AMQP 1.0 codec: types, composite types and framing (Sans-IO).

``encode(value) -> bytes`` and ``decode(data) -> value`` handle one AMQP value; ``encode_into`` and ``decode_at``
are the incremental forms the engine uses (append to a buffer; decode at an offset and learn where the value
ends). Nothing here does I/O or reads a clock.

``decode`` reads a described value whose descriptor AMQP defines as the codec's class for it (a performative, an
outcome, a terminus: what frames hold). An application's value (what a message's body, annotations, application
properties or footer hold) is read with ``decode_application_value``: every described value in it stays a
``Described``, whatever its descriptor, as proton reads it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import DecodeError, EncodeError

# Importing the composite modules registers their classes with the encoder and the decoder.
from . import delivery_states, performatives, sasl_frames, sections, terminus, transactions
from ._decoder import MAX_DEPTH, Buffer, decode_application_value, decode_value, register_described
from ._encoder import TYPE_ENCODERS, encode_array, encode_value, register_encoder

if TYPE_CHECKING:
    from .values import AMQPValue

__all__ = [
    "MAX_DEPTH",
    "TYPE_ENCODERS",
    "AMQPValue",
    "DecodeError",
    "EncodeError",
    "decode",
    "decode_application_value",
    "decode_at",
    "decode_value",
    "delivery_states",
    "encode",
    "encode_array",
    "encode_into",
    "encode_value",
    "performatives",
    "register_described",
    "register_encoder",
    "sasl_frames",
    "sections",
    "terminus",
    "transactions",
]


def encode(value: Any) -> bytes:
    """Return the AMQP encoding of one value, in its smallest form.

    Raises:
        EncodeError: the value has no AMQP type or is out of its type's range.
    """
    buf = bytearray()
    encode_value(buf, value)
    return bytes(buf)


def encode_into(buf: bytearray, value: Any) -> None:
    """Append the AMQP encoding of ``value`` to ``buf``."""
    encode_value(buf, value)


def decode(data: Buffer) -> Any:
    """Decode exactly one AMQP value that fills ``data``.

    Raises:
        DecodeError: the bytes are malformed, or bytes remain after the value.
    """
    value, end = decode_value(data, 0)
    if end != len(data):
        raise DecodeError(f"{len(data) - end} bytes remain after the value", offset=end)
    return value


def decode_at(data: Buffer, offset: int = 0) -> tuple[Any, int]:
    """Decode the value starting at ``offset``; return it and the offset just past it.

    Raises:
        DecodeError: the bytes at ``offset`` are not a valid AMQP value.
    """
    return decode_value(data, offset)


def __getattr__(name: str) -> Any:
    """``AMQPValue``, imported when first asked for: see :mod:`.values`."""
    if name == "AMQPValue":
        from .values import AMQPValue

        return AMQPValue
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
