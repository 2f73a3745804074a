"""Messages as JSON objects, for ``receive --output json`` and ``send --format message``.

JSON has no binary, so ``bytes`` is written ``{"$binary": "<base64>"}``; a described value ``{"$described":
[descriptor, value]}``. AMQP's other scalars (symbol, ulong, timestamp, uuid...) become their JSON counterpart
(string or number) and map keys become strings: the output is for reading and re-sending, not a lossless codec.
"""

from __future__ import annotations

import base64
import binascii
import uuid
from collections.abc import Mapping
from typing import Any

from ..codec.sections import AmqpSequence, Data
from ..message import Message
from ..types import Array, Described

__all__ = ["MESSAGE_FIELDS", "from_json", "message_from_json", "message_to_json", "to_json"]

#: The message attributes ``message_to_json`` writes (when they differ from a new message's) and
#: ``message_from_json`` reads, besides ``body``.
MESSAGE_FIELDS = (
    "id",
    "user_id",
    "address",
    "subject",
    "reply_to",
    "correlation_id",
    "content_type",
    "content_encoding",
    "group_id",
    "group_sequence",
    "reply_to_group_id",
    "creation_time",
    "expiry_time",
    "durable",
    "priority",
    "ttl",
    "first_acquirer",
    "delivery_count",
    "properties",
    "annotations",
    "instructions",
)
_DEFAULTS = Message()


def to_json(value: Any) -> Any:
    """``value`` made of JSON types only (see the module documentation for the mapping)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"$binary": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, Mapping):
        return {str(key): to_json(item) for key, item in value.items()}
    if isinstance(value, Data):
        return to_json(value.value)
    if isinstance(value, AmqpSequence):
        return to_json(list(value.value))
    if isinstance(value, (list, tuple, Array)):
        return [to_json(item) for item in value]
    if isinstance(value, Described):
        return {"$described": [to_json(value.descriptor), to_json(value.value)]}
    return str(value)


def from_json(value: Any) -> Any:
    """The inverse of :func:`to_json` for what JSON can say: ``{"$binary": ...}`` becomes ``bytes`` again."""
    if isinstance(value, dict):
        if set(value) == {"$binary"} and isinstance(value["$binary"], str):
            try:
                return base64.b64decode(value["$binary"], validate=True)
            except binascii.Error as exc:
                raise ValueError(f"bad $binary value: {exc}") from None
        if set(value) == {"$described"} and isinstance(value["$described"], list) and len(value["$described"]) == 2:
            return Described(from_json(value["$described"][0]), from_json(value["$described"][1]))
        return {key: from_json(item) for key, item in value.items()}
    if isinstance(value, list):
        return [from_json(item) for item in value]
    return value


def message_to_json(message: Message) -> dict[str, Any]:
    """``message`` as a JSON object: ``body`` and every attribute of :data:`MESSAGE_FIELDS` not at its default."""
    result: dict[str, Any] = {"body": to_json(message.body)}
    for name in MESSAGE_FIELDS:
        value = getattr(message, name)
        if value != getattr(_DEFAULTS, name):
            result[name] = to_json(value)
    return result


def message_from_json(value: Any) -> Message:
    """A message from a JSON object as :func:`message_to_json` writes it.

    Raises:
        ValueError: when ``value`` is not such an object (not a JSON object, an unknown key, a bad value).
    """
    if not isinstance(value, dict):
        raise ValueError(f"a message must be a JSON object, not {type(value).__name__}")
    unknown = sorted(set(value) - {"body", *MESSAGE_FIELDS})
    if unknown:
        raise ValueError(f"unknown message field(s): {', '.join(unknown)}")
    fields = {name: from_json(item) for name, item in value.items() if name != "body"}
    try:
        return Message(from_json(value.get("body")), **fields)
    except (TypeError, AttributeError) as exc:
        raise ValueError(str(exc)) from None
