"""Message sections (spec §3.2): the described values a bare or annotated message is made of.

``header`` (§3.2.1) and ``properties`` (§3.2.4) are composite lists, defined from their field tables. The other
sections restrict a map, binary, list or any value; each is a small wrapper class with one ``value`` attribute:
``delivery-annotations``, ``message-annotations`` and ``footer`` hold an annotations map (symbol or ulong keys,
``str`` keys are sent as symbols), ``application-properties`` a map with string keys, ``data`` a binary,
``amqp-sequence`` a list and ``amqp-value`` any AMQP value.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from ..errors import DecodeError, EncodeError
from ..types import symbol
from ._decoder import register_described
from ._encoder import TYPE_ENCODERS, encode_value, register_encoder
from .composite import Composite, F, encode_annotations

if TYPE_CHECKING:
    from .values import AMQPValue

__all__ = [
    "SECTIONS",
    "AmqpSequence",
    "AmqpValue",
    "ApplicationProperties",
    "Data",
    "DeliveryAnnotations",
    "Footer",
    "Header",
    "MessageAnnotations",
    "Properties",
    "ValueSection",
]


class Header(Composite, code=0x70, name="amqp:header:list"):
    """§3.2.1 header: transport headers for a message."""

    durable: bool = F("boolean", default=False)
    priority: int = F("ubyte", default=4)
    ttl: int | None = F("milliseconds")
    first_acquirer: bool = F("boolean", default=False)
    delivery_count: int = F("uint", default=0)


class Properties(Composite, code=0x73, name="amqp:properties:list"):
    """§3.2.4 properties: immutable properties of the message.

    ``message_id`` and ``correlation_id`` are a message-id (ulong, uuid, binary or string, §3.2.11-§3.2.14);
    ``to`` and ``reply_to`` an address (a string, §3.2.15).
    """

    message_id: Any = F("*", requires="message-id")
    user_id: bytes | None = F("binary")
    to: Any = F("*", requires="address")
    subject: str | None = F("string")
    reply_to: Any = F("*", requires="address")
    correlation_id: Any = F("*", requires="message-id")
    content_type: symbol | None = F("symbol")
    content_encoding: symbol | None = F("symbol")
    absolute_expiry_time: int | None = F("timestamp")
    creation_time: int | None = F("timestamp")
    group_id: str | None = F("string")
    group_sequence: int | None = F("sequence-no")
    reply_to_group_id: str | None = F("string")


class ValueSection:
    """Base of the sections that restrict a map, binary, list or any value (one ``value`` attribute).

    Class keywords (for subclasses): ``code`` and ``name`` (the descriptors), ``content`` (the AMQP type of the
    value: ``"annotations"``, ``"map"``, ``"binary"``, ``"list"`` or ``"*"``).
    """

    __slots__ = ("value",)

    descriptor_code: ClassVar[int] = -1
    descriptor_name: ClassVar[str] = ""
    content: ClassVar[str] = "*"
    _encode: ClassVar[Callable[[bytearray, Any], None]]

    def __init_subclass__(cls, *, code: int, name: str, content: str, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.descriptor_code = code
        cls.descriptor_name = name
        cls.content = content
        encoder, decoder = _section_codec(cls, code, content)
        cls._encode = staticmethod(encoder)
        register_encoder(cls, encoder)
        register_described(code, name, decoder)

    def __init__(self, value: Any = None) -> None:
        self.value = value

    def encode_into(self, buf: bytearray) -> None:
        """Append this section's AMQP encoding to ``buf``."""
        type(self)._encode(buf, self)

    def encode(self) -> bytes:
        """Return this section's AMQP encoding."""
        buf = bytearray()
        type(self)._encode(buf, self)
        return bytes(buf)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return bool(self.value == other.value)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.value!r})"


# The Python classes a decoded value of each content type may have (the decoder builds exactly these).
_CONTENT_CLASSES: dict[str, tuple[type, ...] | None] = {
    "annotations": (dict,),
    "map": (dict,),
    "binary": (bytes,),
    "list": (list,),
    "*": None,
}


def _section_codec(
    cls: type[ValueSection], code: int, content: str
) -> tuple[Callable[[bytearray, Any], None], Callable[[Any], Any]]:
    """Build the encoder and the decoder factory of a value section."""
    if code > 0xFF:
        raise TypeError("section descriptor codes fit a smallulong")
    head = bytes((0x00, 0x53, code))
    value_encoder: Callable[[bytearray, Any], None]
    if content == "annotations":
        value_encoder = encode_annotations
    elif content == "*":
        value_encoder = encode_value
    else:
        value_encoder = TYPE_ENCODERS[content]
    type_name = cls.descriptor_name.split(":")[1]

    def encode(buf: bytearray, section: Any) -> None:
        value = section.value
        if value is None and content != "*":
            raise EncodeError(f"{type_name} section needs a value")
        buf += head
        value_encoder(buf, value)

    accepted = _CONTENT_CLASSES[content]
    new = object.__new__

    def decode(value: Any) -> Any:
        if accepted is not None and value.__class__ not in accepted:
            raise DecodeError(f"{type_name} section holds a {type(value).__name__}, not a {content}")
        section = new(cls)
        section.value = value
        return section

    return encode, decode


class DeliveryAnnotations(ValueSection, code=0x71, name="amqp:delivery-annotations:map", content="annotations"):
    """§3.2.2 delivery-annotations: annotations for the next hop only (an annotations map)."""

    __slots__ = ()


class MessageAnnotations(ValueSection, code=0x72, name="amqp:message-annotations:map", content="annotations"):
    """§3.2.3 message-annotations: annotations that travel with the message (an annotations map)."""

    __slots__ = ()


class ApplicationProperties(ValueSection, code=0x74, name="amqp:application-properties:map", content="map"):
    """§3.2.5 application-properties: application data, a map with string keys and simple values."""

    __slots__ = ()


class Data(ValueSection, code=0x75, name="amqp:data:binary", content="binary"):
    """§3.2.6 data: opaque binary application data."""

    __slots__ = ()
    value: bytes


class AmqpSequence(ValueSection, code=0x76, name="amqp:amqp-sequence:list", content="list"):
    """§3.2.7 amqp-sequence: a list of AMQP values as application data."""

    __slots__ = ()
    value: list[AMQPValue]


class AmqpValue(ValueSection, code=0x77, name="amqp:amqp-value:*", content="*"):
    """§3.2.8 amqp-value: a single AMQP value as application data."""

    __slots__ = ()
    value: AMQPValue


class Footer(ValueSection, code=0x78, name="amqp:footer:map", content="annotations"):
    """§3.2.9 footer: transport footers (hashes, signatures...), an annotations map."""

    __slots__ = ()


#: Every section class by descriptor code, in the order a message carries them (§3.2).
SECTIONS: dict[int, type[Composite] | type[ValueSection]] = {
    0x70: Header,
    0x71: DeliveryAnnotations,
    0x72: MessageAnnotations,
    0x73: Properties,
    0x74: ApplicationProperties,
    0x75: Data,
    0x76: AmqpSequence,
    0x77: AmqpValue,
    0x78: Footer,
}
