"""The AMQP message (spec §3.2), with python-qpid-proton's ``Message`` interface.

A message is a sequence of sections: header, delivery-annotations, message-annotations, properties,
application-properties, a body (one amqp-value, one or more data sections, or one or more amqp-sequence
sections) and a footer. ``Message`` holds them as proton's ``Message`` does (``durable``, ``subject``,
``properties``, ``body``, ...), with the same units (``ttl``, ``creation_time`` and ``expiry_time`` in seconds
as floats) and defaults.

Body mapping, as the product contract states it: ``bytes`` go in a data section, lists, strings, maps and
scalars in an amqp-value section. ``inferred`` refines that as proton defines it: set ``inferred = True`` and a
list body goes in an amqp-sequence section; set ``inferred = False`` and a ``bytes`` body goes in an amqp-value
section (proton 0.40's default). Explicit sections are available too: a body of :class:`~amqp_async.codec.
sections.Data` or :class:`~amqp_async.codec.sections.AmqpSequence` objects, alone or in a list, is written
section by section, and a received message with several body sections decodes to such a list.

A described value in the body, the annotations, the application properties or the footer is the application's:
it decodes to ``Described(descriptor, value)`` whatever its descriptor, as proton reads it, also under one AMQP
defines for its own types (``Described(ulong(0x24), [])`` is not an ``Accepted()``).

Differences from proton 0.40, on purpose: a binary body decodes to ``bytes`` (proton gives a ``memoryview``);
unset ``user_id`` and ``content_type`` read as ``None`` (proton gives ``b''`` and ``symbol('None')``); sections
whose fields are all defaults are left out of the encoding (proton writes empty header and properties lists), except
in a message that has nothing else: it is written as proton writes it (an empty header and properties), not as an
empty payload. A ``None`` body is no body section, as in proton (AMQP 1.0 §3.2 asks for one; PROTON-2574), and a
received message without one decodes to a ``None`` body.

Encoding and decoding take fast paths: each list section is written straight from the message's fields
(already held in their AMQP types), and decoded straight back into them, without intermediate objects.
"""

from __future__ import annotations

import json as _json
import uuid
from numbers import Real
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, TypedDict, TypeVar

from ..codec import sections as _sections
from ..codec._decoder import _APPLICATION_DECODERS, decode_value
from ..codec._encoder import _ENCODERS, _enc_list, _enc_map, _lookup_encoder, encode_value
from ..codec.section_codes import AMQP_SEQUENCE as _AMQP_SEQUENCE
from ..codec.section_codes import AMQP_VALUE as _AMQP_VALUE
from ..codec.section_codes import APPLICATION_PROPERTIES as _APPLICATION_PROPERTIES
from ..codec.section_codes import DATA as _DATA
from ..codec.section_codes import DELIVERY_ANNOTATIONS as _DELIVERY_ANNOTATIONS
from ..codec.section_codes import FOOTER as _FOOTER
from ..codec.section_codes import HEADER as _HEADER
from ..codec.section_codes import MESSAGE_ANNOTATIONS as _MESSAGE_ANNOTATIONS
from ..codec.section_codes import PROPERTIES as _PROPERTIES
from ..codec.values import AMQPValue
from ..errors import AMQPError, DecodeError, EncodeError
from ..protocol.payload import Gathered
from ..types import char, symbol, timestamp, ubyte, uint, ulong
from ._layouts import layouts_for as _layouts_for
from ._layouts import learn as _learn_layout

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["Message", "MessageBodyError", "MessageFields", "MessageId"]

MessageId: TypeAlias = ulong | uuid.UUID | bytes | str
"""A message-id or correlation-id as a message holds it (§3.2.11-3.2.15): a ulong, a UUID, bytes or a str."""

_M = TypeVar("_M", bound="Message")

#: The content type :meth:`Message.from_json` sets.
JSON_CONTENT_TYPE = symbol("application/json")


def _data_bytes(section: AMQPValue) -> bytes:
    value = section.value if isinstance(section, _sections.Data) else None
    return value if isinstance(value, bytes) else b""


def _short_repr(value: object, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


class _CallbackSender(Protocol):
    """A sender of the callback API (:mod:`amqp_async.proton`), as :meth:`Message.send` uses it."""

    def send(self, message: Any, tag: bytes | str | None = None, /) -> Any: ...


class _CallbackReceiver(Protocol):
    """A receiver of the callback API (:mod:`amqp_async.proton`), as :meth:`Message.recv` uses it."""

    @property
    def current(self) -> Any: ...

    @property
    def remote_snd_settle_mode(self) -> int: ...

    def recv(self, limit: int, /) -> bytes | None: ...

    def advance(self) -> bool: ...


class MessageBodyError(AMQPError, ValueError):
    """A message body that is not what it was read as: :meth:`Message.json` on a body that does not hold JSON text.

    Condition ``amqp:decode-error``; it is also a :class:`ValueError`. Its description names what the body holds.
    The ``json`` or Unicode error that found it is chained (``__cause__``), with the position of the fault.
    """

    default_condition = "amqp:decode-error"


#: The list8 decoder of the application's values (a properties section is one, as most clients write it).
_decode_list8 = _APPLICATION_DECODERS[0xC0]

# A bytes body at least this large is sent by reference (see Message._encode_payload), not copied into the
# encoding: below it, one copy costs less than the extra buffer does on its way to the socket.
_GATHER_MIN = 65536

_SECTION_NAMES = {
    "amqp:header:list": _HEADER,
    "amqp:delivery-annotations:map": _DELIVERY_ANNOTATIONS,
    "amqp:message-annotations:map": _MESSAGE_ANNOTATIONS,
    "amqp:properties:list": _PROPERTIES,
    "amqp:application-properties:map": _APPLICATION_PROPERTIES,
    "amqp:data:binary": _DATA,
    "amqp:amqp-sequence:list": _AMQP_SEQUENCE,
    "amqp:amqp-value:*": _AMQP_VALUE,
    "amqp:footer:map": _FOOTER,
}

_DEFAULT_PRIORITY = 4

#: A message with no body and every field at its default, as proton encodes it (an empty header and an empty
#: properties section): the bytes of a message that has no section of its own to write.
_NO_SECTIONS = b"\x00\x53\x70\x45\x00\x53\x73\x45"

_new_int = int.__new__
_new_str = str.__new__

# The properties section's fields in spec order (§3.2.4), as held in ``Message._props``.
_ID, _USER_ID, _TO, _SUBJECT, _REPLY_TO, _CORRELATION_ID = range(6)
_CONTENT_TYPE, _CONTENT_ENCODING, _EXPIRY, _CREATION, _GROUP_ID, _GROUP_SEQUENCE, _REPLY_TO_GROUP_ID = range(6, 13)
_PROPERTY_FIELD_TYPES = (
    "message-id",
    "binary",
    "string",
    "string",
    "string",
    "message-id",
    "symbol",
    "symbol",
    "timestamp",
    "timestamp",
    "string",
    "uint",
    "string",
)

_Data = _sections.Data
_AmqpSequence = _sections.AmqpSequence


def _message_id(value: Any, name: str) -> Any:
    """§3.2.11-3.2.15: a message-id is a ulong, uuid, binary or string; proton maps a Python int to ulong."""
    if value is None or value.__class__ in (ulong, str, uuid.UUID):
        return value
    if isinstance(value, str):
        return str(value)  # a symbol or other str subclass travels as a string, as proton sends it
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            return ulong(value)
        except EncodeError:
            raise EncodeError(
                f"{name} must be a ulong, uuid, bytes or str; {value!r} is out of a ulong's range (0 to 2**64 - 1)"
            ) from None
    raise EncodeError(f"{name} must be a ulong, uuid, bytes or str, got {type(value).__name__}")


def _optional_str(value: Any, name: str) -> str | None:
    if value is None or type(value) is str:
        return value
    if isinstance(value, str):
        return str(value)
    raise EncodeError(f"{name} must be a str, got {type(value).__name__}")


def _optional_symbol(value: Any, name: str) -> symbol | None:
    if value is None or type(value) is symbol:
        return value
    if isinstance(value, str):
        return symbol(value)
    raise EncodeError(f"{name} must be a str or symbol, got {type(value).__name__}")


def _milliseconds(value: Any, name: str) -> int:
    """Seconds (an int or a float, as proton gives them) as the wire's milliseconds (§3.2.1, §3.2.4).

    A str or bytes is refused here: multiplied by 1000 it would repeat itself rather than fail.
    """
    if value.__class__ is not float and value.__class__ is not int and not isinstance(value, Real):
        raise EncodeError(f"{name} must be seconds as a number, got {type(value).__name__}")
    try:
        return int(value * 1000)  # type: ignore[no-any-return, call-overload]  # a Real times an int: a Real
    except (ValueError, OverflowError) as exc:  # nan, infinity
        raise EncodeError(f"{name} must be seconds as a finite number: {exc}") from None


def _seconds_to_timestamp(value: Any, name: str) -> timestamp | None:
    """Proton gives times in seconds (floats); the wire carries milliseconds (§3.2.4)."""
    if value is None or value == 0:
        return None
    stamp: timestamp = timestamp(_milliseconds(value, name))
    return stamp


def _annotation_keys(value: Any, name: str) -> dict[Any, Any] | None:
    """§3.2.10: annotation keys are symbols or ulongs; like proton's AnnotationDict, str keys become symbols."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise EncodeError(f"{name} must be a dict, got {type(value).__name__}")
    result: dict[Any, Any] = {}
    for key, item in value.items():
        if type(key) is symbol or type(key) is ulong:
            result[key] = item
        elif isinstance(key, str):
            result[symbol(key)] = item
        else:
            result[key] = item  # proton keeps such keys (raise_on_error=False); the peer decides.
    return result


#: What an application property key that is not a string raises: an EncodeError; amqp_async.proton makes it its
#: MessageException (still an EncodeError), which proton programs catch.
PROPERTY_KEY_ERROR: type[EncodeError] = EncodeError


def _check_property_keys(properties: dict[Any, Any]) -> dict[Any, Any]:
    """§3.2.5: application-properties keys are strings. As proton does, plain str subclasses are converted,
    while symbol, char and non-strings are refused."""
    for key in properties:
        if key.__class__ is not str:
            break
    else:
        return properties
    checked: dict[Any, Any] = {}
    for key, item in properties.items():
        if isinstance(key, str) and not isinstance(key, (symbol, char)):
            checked[str(key)] = item
        else:
            # proton's words; the class is MessageException once amqp_async.proton is imported (see there)
            raise PROPERTY_KEY_ERROR(f"Application property key is not string type: key={key} {type(key)}")
    return checked


class MessageFields(TypedDict, total=False):
    """The keyword arguments of :class:`Message` and :meth:`Message.from_json`: the message's fields, each typed
    as its attribute takes it (for a wrapper of your own: ``**fields: Unpack[MessageFields]``)."""

    durable: bool
    priority: int
    ttl: float
    first_acquirer: bool
    delivery_count: int
    instructions: dict[Any, Any] | None
    annotations: dict[Any, Any] | None
    id: int | uuid.UUID | bytes | str | None
    user_id: bytes | str | None
    address: str | None
    subject: str | None
    reply_to: str | None
    correlation_id: int | uuid.UUID | bytes | str | None
    content_type: str | None
    content_encoding: str | None
    expiry_time: float
    creation_time: float
    group_id: str | None
    group_sequence: int
    reply_to_group_id: str | None
    properties: dict[str, Any] | None
    footer: dict[Any, Any] | None
    inferred: bool


#: The properties section's 13 fields, none set (shared: replaced by a list on a message's first write).
_NO_PROPERTIES = (None,) * 13


class Message:
    """A mutable AMQP message, compatible with ``proton.Message``.

    Args:
        body: the message body (see the module documentation for how each type is carried).
        **fields: any of the message's attributes (``subject="x"``, ``durable=True``, ``ttl=1.5``, ...), typed
            as :class:`MessageFields` says; an unknown name raises AttributeError, as in proton.
    """

    DEFAULT_PRIORITY = _DEFAULT_PRIORITY

    # Defaults live on the class, so ``decode`` (and ``clear``) resets every field with one ``__dict__.clear()``;
    # ``__init__`` copies them onto a message made to be sent (see there). ``_props`` holds the properties
    # section's 13 fields in spec order; the shared default is an immutable tuple, replaced by a list on the first
    # write.
    if TYPE_CHECKING:
        # For type checkers, ``body``, ``properties`` and ``footer`` read as what a message can hold (what decoding
        # gives) and take anything a caller may put there (the encoder refuses what AMQP cannot carry, with an
        # EncodeError). At run time they stay plain attributes: nothing per message for the types.
        @property
        def body(self) -> AMQPValue:
            """The body: ``bytes`` for one data section, the value of an amqp-value section, a list for one
            amqp-sequence section, or a list of :class:`~amqp_async.codec.sections.Data` (or ``AmqpSequence``)
            sections for several."""

        @body.setter
        def body(self, value: object) -> None: ...

        @property
        def properties(self) -> dict[str, AMQPValue] | None:
            """The application properties (§3.2.5): a dict with str keys, or None."""

        @properties.setter
        def properties(self, value: dict[str, Any] | None) -> None: ...

        @property
        def footer(self) -> dict[AMQPValue, AMQPValue] | None:
            """The footer (§3.2.9): an annotations map (symbol or ulong keys; str keys are sent as symbols), or
            None."""

        @footer.setter
        def footer(self, value: dict[Any, Any] | None) -> None: ...

    else:
        body = None
        properties = None
        footer = None
    _durable: bool = False
    _priority: int = _DEFAULT_PRIORITY
    _ttl: uint | None = None
    _first_acquirer: bool = False
    _delivery_count: uint | None = None
    _instructions: dict[Any, Any] | None = None
    _annotations: dict[Any, Any] | None = None
    _props: Any = _NO_PROPERTIES
    _inferred: bool | None = None

    def __init__(self, body: object = None, **fields: Unpack[MessageFields]) -> None:
        # A message made to be sent has every field encode() reads set on it, the class's defaults copied: CPython
        # 3.11 reads a default left on the class through the generic lookup, about 13 ns more a read, and encode()
        # reads a dozen (a decoded message, reset by decode(), falls back on the class's: it is seldom encoded).
        self.body = body
        self.properties = None
        self.footer = None
        self._durable = False
        self._priority = _DEFAULT_PRIORITY
        self._ttl = None
        self._first_acquirer = False
        self._delivery_count = None
        self._instructions = None
        self._annotations = None
        self._props = _NO_PROPERTIES
        self._inferred = None
        for name, value in fields.items():
            if name.startswith("_") or not hasattr(Message, name):
                raise AttributeError(f"'Message' object has no attribute {name!r}")
            setattr(self, name, value)

    # --- JSON bodies ---------------------------------------------------------------------------------------

    @classmethod
    def from_json(cls: type[_M], value: object, **fields: Unpack[MessageFields]) -> _M:
        """A message whose body is ``value`` as JSON: one data section of UTF-8 JSON text, with the content type
        ``application/json`` (RFC 8259), as other AMQP clients read it.

        ``json.dumps`` writes it: compact (no spaces), non-ASCII characters as they are (UTF-8, not ``\\u``
        escapes). ``fields`` are the message's other fields, as for :class:`Message` (``subject=``,
        ``properties=``...); a ``content_type`` among them replaces ``application/json``.

        Raises:
            TypeError: ``value`` holds something JSON cannot carry (``json.dumps``'s error).
            ValueError: ``value`` holds a float that is not finite (NaN or infinity: not JSON), or a cycle.
        """
        text = _json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        message = cls(text.encode("utf-8"), **fields)
        if message.content_type is None:
            message.content_type = JSON_CONTENT_TYPE
        return message

    def json(self) -> Any:
        """The body read as JSON (``json.loads``): from a data section (or several, joined), or from an amqp-value
        section holding a string or binary.

        The content type is not looked at: JSON in a message some producer labelled otherwise (or not at all)
        reads as well.

        Returns:
            What the JSON text holds: a dict, list, str, int, float, bool or None.

        Raises:
            MessageBodyError: the body is not JSON text (another type, such as a map in an amqp-value section;
                bytes that are not UTF-8; text that does not parse); the ``json`` error is chained.
        """
        body = self.body
        if isinstance(body, list) and body and all(isinstance(section, _Data) for section in body):
            body = b"".join(_data_bytes(section) for section in body)  # several data sections: one text
        if not isinstance(body, (bytes, bytearray, memoryview, str)):
            raise MessageBodyError(
                f"the body is not JSON text: it holds {type(body).__name__} {_short_repr(body)} (message.json() "
                "reads a data section, or an amqp-value string or binary)"
            )
        try:
            return _json.loads(body if isinstance(body, str) else bytes(body))
        except (ValueError, UnicodeDecodeError) as exc:  # json.JSONDecodeError is a ValueError
            raise MessageBodyError(f"the body is not JSON: {exc}") from exc

    def clear(self) -> None:
        """Reset every field to its default."""
        self.__dict__.clear()

    def _set_property(self, index: int, value: Any) -> None:
        props = self._props
        if props.__class__ is tuple:
            props = self._props = [None] * 13
        props[index] = value

    # --- header (§3.2.1) ---------------------------------------------------------------------------------

    @property
    def durable(self) -> bool:
        """Whether intermediaries must keep the message safe across restarts."""
        return self._durable

    @durable.setter
    def durable(self, value: bool) -> None:
        self._durable = bool(value)

    @property
    def priority(self) -> int:
        """Relative message priority, 0-255 (default 4)."""
        return self._priority

    @priority.setter
    def priority(self, value: int) -> None:
        self._priority = ubyte(value)

    @property
    def ttl(self) -> float:
        """Time to live in seconds (0 for none)."""
        return 0.0 if self._ttl is None else self._ttl / 1000.0

    @ttl.setter
    def ttl(self, value: float) -> None:
        milliseconds = _milliseconds(value, "ttl") if value else 0
        self._ttl = uint(milliseconds) if milliseconds else None

    @property
    def first_acquirer(self) -> bool:
        """True if no earlier acquirer of this message exists."""
        return self._first_acquirer

    @first_acquirer.setter
    def first_acquirer(self, value: bool) -> None:
        self._first_acquirer = bool(value)

    @property
    def delivery_count(self) -> int:
        """The number of prior unsuccessful delivery attempts."""
        return 0 if self._delivery_count is None else self._delivery_count

    @delivery_count.setter
    def delivery_count(self, value: int) -> None:
        self._delivery_count = uint(value) if value else None

    # --- annotations (§3.2.2, §3.2.3) --------------------------------------------------------------------

    @property
    def instructions(self) -> dict[AMQPValue, AMQPValue] | None:
        """Delivery annotations: a dict with symbol (or ulong) keys; str keys are made symbols."""
        return self._instructions

    @instructions.setter
    def instructions(self, value: dict[Any, Any] | None) -> None:
        self._instructions = _annotation_keys(value, "instructions")

    @property
    def annotations(self) -> dict[AMQPValue, AMQPValue] | None:
        """Message annotations: a dict with symbol (or ulong) keys; str keys are made symbols."""
        return self._annotations

    @annotations.setter
    def annotations(self, value: dict[Any, Any] | None) -> None:
        self._annotations = _annotation_keys(value, "annotations")

    # --- properties (§3.2.4) -----------------------------------------------------------------------------

    @property
    def id(self) -> MessageId | None:
        """The message-id: a ulong, uuid.UUID, bytes or str (a Python int is stored as ulong)."""
        return self._props[_ID]  # type: ignore[no-any-return]

    @id.setter
    def id(self, value: int | uuid.UUID | bytes | str | None) -> None:
        self._set_property(_ID, _message_id(value, "id"))

    @property
    def user_id(self) -> bytes | None:
        """The identity of the user who produced the message, as bytes (a str is UTF-8 encoded)."""
        return self._props[_USER_ID]  # type: ignore[no-any-return]

    @user_id.setter
    def user_id(self, value: bytes | str | None) -> None:
        if isinstance(value, str):
            value = value.encode("utf-8")
        elif isinstance(value, (bytearray, memoryview)):
            value = bytes(value)
        elif value is not None and not isinstance(value, bytes):
            raise EncodeError(f"user_id must be bytes or str, got {type(value).__name__}")
        self._set_property(_USER_ID, value or None)

    @property
    def address(self) -> str | None:
        """The node the message is destined for (the properties section's ``to``)."""
        return self._props[_TO]  # type: ignore[no-any-return]

    @address.setter
    def address(self, value: str | None) -> None:
        self._set_property(_TO, _optional_str(value, "address"))

    @property
    def subject(self) -> str | None:
        """The message subject."""
        return self._props[_SUBJECT]  # type: ignore[no-any-return]

    @subject.setter
    def subject(self, value: str | None) -> None:
        self._set_property(_SUBJECT, _optional_str(value, "subject"))

    @property
    def reply_to(self) -> str | None:
        """The node to send replies to."""
        return self._props[_REPLY_TO]  # type: ignore[no-any-return]

    @reply_to.setter
    def reply_to(self, value: str | None) -> None:
        self._set_property(_REPLY_TO, _optional_str(value, "reply_to"))

    @property
    def correlation_id(self) -> MessageId | None:
        """The correlation-id: a ulong, uuid.UUID, bytes or str (a Python int is stored as ulong)."""
        return self._props[_CORRELATION_ID]  # type: ignore[no-any-return]

    @correlation_id.setter
    def correlation_id(self, value: int | uuid.UUID | bytes | str | None) -> None:
        self._set_property(_CORRELATION_ID, _message_id(value, "correlation_id"))

    @property
    def content_type(self) -> symbol | None:
        """The MIME type of the body (a symbol)."""
        return self._props[_CONTENT_TYPE]  # type: ignore[no-any-return]

    @content_type.setter
    def content_type(self, value: str | None) -> None:
        self._set_property(_CONTENT_TYPE, _optional_symbol(value, "content_type"))

    @property
    def content_encoding(self) -> symbol | None:
        """The content encoding of the body (a symbol)."""
        return self._props[_CONTENT_ENCODING]  # type: ignore[no-any-return]

    @content_encoding.setter
    def content_encoding(self, value: str | None) -> None:
        self._set_property(_CONTENT_ENCODING, _optional_symbol(value, "content_encoding"))

    @property
    def expiry_time(self) -> float:
        """The absolute expiry time, in seconds since the epoch (0 for none)."""
        value = self._props[_EXPIRY]
        return 0.0 if value is None else value / 1000.0

    @expiry_time.setter
    def expiry_time(self, value: float) -> None:
        self._set_property(_EXPIRY, _seconds_to_timestamp(value, "expiry_time"))

    @property
    def creation_time(self) -> float:
        """The creation time, in seconds since the epoch (0 for none)."""
        value = self._props[_CREATION]
        return 0.0 if value is None else value / 1000.0

    @creation_time.setter
    def creation_time(self, value: float) -> None:
        self._set_property(_CREATION, _seconds_to_timestamp(value, "creation_time"))

    @property
    def group_id(self) -> str | None:
        """The group this message belongs to."""
        return self._props[_GROUP_ID]  # type: ignore[no-any-return]

    @group_id.setter
    def group_id(self, value: str | None) -> None:
        self._set_property(_GROUP_ID, _optional_str(value, "group_id"))

    @property
    def group_sequence(self) -> int:
        """The position of this message within its group."""
        value = self._props[_GROUP_SEQUENCE]
        return 0 if value is None else int(value)

    @group_sequence.setter
    def group_sequence(self, value: int) -> None:
        self._set_property(_GROUP_SEQUENCE, uint(value) if value else None)

    @property
    def reply_to_group_id(self) -> str | None:
        """The group replies belong to."""
        return self._props[_REPLY_TO_GROUP_ID]  # type: ignore[no-any-return]

    @reply_to_group_id.setter
    def reply_to_group_id(self, value: str | None) -> None:
        self._set_property(_REPLY_TO_GROUP_ID, _optional_str(value, "reply_to_group_id"))

    # --- body --------------------------------------------------------------------------------------------

    @property
    def inferred(self) -> bool:
        """Whether ``bytes`` and list bodies travel as data and amqp-sequence sections (proton's flag).

        Left unset, ``bytes`` go in a data section and lists in an amqp-value section; set False, every body
        goes in an amqp-value section; set True, lists go in an amqp-sequence section. A decoded message
        reports True when its body came in data or amqp-sequence sections.
        """
        return bool(self._inferred)

    @inferred.setter
    def inferred(self, value: bool) -> None:
        self._inferred = bool(value)

    # --- encoding ----------------------------------------------------------------------------------------

    def encode(self) -> bytes:
        """Return the message's wire encoding (its sections, one after another; empty sections left out; a message
        with nothing to write gives proton's bytes for it, an empty header and properties, never an empty payload).

        ``amqp_async.proton.Message.encode`` writes proton's bytes instead (an empty header and properties too).

        Raises:
            EncodeError: a field holds a value AMQP cannot carry (e.g. an application property key that is
                not a str).
        """
        return bytes(self._encode(False))

    def _encode(self, gather: bool = True, empty_sections: bool = False) -> bytes | Gathered:
        """The sections; ``empty_sections``: an empty header and properties are written (as proton does).

        ``gather`` (the default: a sender's call, :meth:`_encode_payload`): a large ``bytes`` body in a data section
        stays out of the result (a :class:`Gathered` of the sections before it and the body itself), so the engine
        sends it uncopied.
        """
        buf = bytearray()
        if (
            self._durable
            or self._priority != _DEFAULT_PRIORITY
            or self._ttl is not None
            or self._first_acquirer
            or self._delivery_count is not None
        ):
            header = [
                True if self._durable else None,
                None if self._priority == _DEFAULT_PRIORITY else self._priority,
                self._ttl,
                True if self._first_acquirer else None,
                self._delivery_count,
            ]
            while header[-1] is None:
                header.pop()
            buf += b"\x00\x53\x70"
            _enc_list(buf, header)
        elif empty_sections:
            buf += b"\x00\x53\x70\x45"  # header, list0
        if self._instructions is not None:
            buf += b"\x00\x53\x71"
            _enc_map(buf, _symbol_keys(self._instructions))
        if self._annotations is not None:
            buf += b"\x00\x53\x72"
            _enc_map(buf, _symbol_keys(self._annotations))
        props = self._props
        last = -1
        if props.__class__ is list:  # else the class's tuple of nulls: no property was ever set
            last = 12
            while last >= 0 and props[last] is None:
                last -= 1
        if last >= 0:
            buf += b"\x00\x53\x73"
            _enc_list(buf, props[: last + 1])
        elif empty_sections:
            buf += b"\x00\x53\x73\x45"  # properties, list0
        properties = self.properties
        if properties is not None:
            buf += b"\x00\x53\x74"
            _enc_map(buf, _check_property_keys(properties))
        body: Any = self.body  # dispatched on its exact class below (faster than isinstance): not narrowed
        body_class = body.__class__
        if (body_class is bytes or body_class is bytearray or body_class is memoryview) and self._inferred is not False:
            # A data section (§3.2.6); the body is copied once, into the result.
            size = body.nbytes if body_class is memoryview else len(body)
            if size <= 0xFF:
                buf += b"\x00\x53\x75\xa0"
                buf.append(size)
            else:
                buf += b"\x00\x53\x75\xb0"
                buf += size.to_bytes(4, "big")
            if self.footer is None:
                if gather and size >= _GATHER_MIN and body_class is bytes:
                    return Gathered((bytes(buf), body))
                return b"".join((buf, body))
            buf += body
        elif body_class is _Data or body_class is _AmqpSequence:
            encode_value(buf, body)
        elif self._inferred and isinstance(body, (list, tuple)) and not _is_section_list(body):
            # any sequence, as proton's Data puts a tuple or a SymbolList as a list (an amqp-sequence when inferred)
            buf += b"\x00\x53\x76"
            _enc_list(buf, body)
        elif body_class is list and body and _is_section_list(body):
            for section in body:
                encode_value(buf, section)
        elif body is not None:
            buf += b"\x00\x53\x77"
            encoder = _ENCODERS.get(body_class)
            if encoder is None:
                encoder = _lookup_encoder(body)
            encoder(buf, body)
        elif not buf and self.footer is None:
            # Nothing to write: not an empty payload, which is no message at all (§3.2: a message is its sections;
            # python-qpid-proton's receivers fail on one), but proton's encoding of such a message.
            return _NO_SECTIONS
        if self.footer is not None:
            buf += b"\x00\x53\x78"
            _enc_map(buf, _annotation_keys(self.footer, "footer"))
        return bytes(buf)

    #: :meth:`encode`, for a sender (see ``gather``): the same function, not a call more per message sent.
    _encode_payload = _encode

    def send(self, sender: _CallbackSender, tag: bytes | str | None = None) -> Any:
        """Send this message on a callback-API sender (proton's ``Message.send``); returns the delivery.

        Not for the awaitable API's senders: ``await sender.send(message)`` sends there (and a type checker
        refuses an awaitable sender here)."""
        return sender.send(self, tag)

    def recv(self, link: _CallbackReceiver) -> Any:
        """Read the current delivery of a callback-API receiver into this message (proton's ``Message.recv``).

        Returns:
            The delivery, or None when the link has no complete current delivery.
        """
        delivery = link.current
        if delivery is None or delivery.partial:
            return None
        self.decode(link.recv(delivery.pending) or b"")
        link.advance()
        if link.remote_snd_settle_mode == 1:  # §2.8.2 settled: the sender has forgotten it already
            delivery.settle()
        return delivery

    def decode(self, data: bytes | bytearray | memoryview) -> None:
        """Replace this message's content with the message encoded in ``data``.

        Raises:
            DecodeError: the bytes are not a valid AMQP message.
        """
        if data.__class__ is not bytes:
            data = bytes(data)  # the decoders work on bytes (see codec._decoder)
        self.__dict__.clear()
        # A message laid out as one decoded before reads its varying values only (_layouts.py).
        layouts = _layouts_for(len(data))
        if layouts is not None:
            for layout in layouts:
                if layout(self, data):
                    return
        self._decode_sections(data)
        _learn_layout(self, data)

    def _decode_sections(self, data: bytes) -> None:
        """Decode ``data`` section by section, every byte read and checked (the general decoder).

        The sections' values are read with the codec's application decoders: a described value in the body, the
        annotations, the application properties or the footer is the application's, and stays a ``Described``
        whatever its descriptor (as proton reads it; see ``codec._decoder._APPLICATION_DECODERS``).
        """
        decoders = _APPLICATION_DECODERS
        end = len(data)
        position = 0
        previous = 0
        start = 0
        body_sections: list[Any] | None = None
        try:
            # The sections most messages have, in their order (§3.2) and each named by a smallulong descriptor as
            # every client writes them, read without the loop's bookkeeping: an empty header (list0, as proton
            # writes a default one), a properties list8, an amqp-value body. The loop reads what follows, or all
            # of a message that starts otherwise.
            if data[:4] == b"\x00\x53\x70\x45":
                position = 4
                previous = _HEADER
            if data[position : position + 4] == b"\x00\x53\x73\xc0":
                start = position
                value, position = _decode_list8(data, position + 4, 1)
                self._decode_properties(value, start)
                previous = _PROPERTIES
            if data[position : position + 3] == b"\x00\x53\x77" and position + 3 < end:
                start = position
                value, position = decoders[data[position + 3]](data, position + 4, 1)
                self.body = value
                self._inferred = False
                previous = _AMQP_VALUE
            while position < end:
                start = position
                if data[position] == 0 and data[position + 1] == 0x53:
                    code = data[position + 2]
                    position += 3
                else:
                    code, position = _section_code(data, position)
                # §3.2: sections come in order, each at most once, except repeated data or amqp-sequence sections.
                if code <= previous and not (code == previous and code in (_DATA, _AMQP_SEQUENCE)):
                    raise DecodeError(f"message section {code:#x} out of order or repeated", offset=start)
                previous = code
                if code == _HEADER and data[position] == 0x45:
                    position += 1  # an empty header (list0, as proton writes a default one) sets nothing
                    continue
                if code == _HEADER and data[position] == 0xC0:
                    # Headers repeat (durable, a priority, a ttl...): the fields a header's bytes set are kept by
                    # those bytes (the header comes first: what it set is all this message holds so far).
                    after = position + 2 + data[position + 1]
                    key = data[position:after]
                    header = _HEADERS.get(key)
                    if header is None:
                        value, position = decoders[0xC0](data, position + 1, 1)
                        self._decode_header(value, start)
                        if len(_HEADERS) < _HEADERS_LIMIT:
                            _HEADERS[key] = dict(self.__dict__)
                    else:
                        self.__dict__.update(header)
                        position = after
                    continue
                value, position = decoders[data[position]](data, position + 1, 1)
                if code == _AMQP_VALUE:
                    if body_sections is not None:
                        raise DecodeError("a message body is either amqp-value, data or amqp-sequence", offset=start)
                    self.body = value
                    self._inferred = False
                elif code == _PROPERTIES:
                    self._decode_properties(value, start)
                elif code == _APPLICATION_PROPERTIES:
                    if value.__class__ is not dict:
                        raise DecodeError("the application-properties section must be a map", offset=start)
                    self.properties = value
                elif code in (_DATA, _AMQP_SEQUENCE):
                    if code == _DATA and value.__class__ is not bytes:
                        raise DecodeError("a data section must hold binary", offset=start)
                    if code == _AMQP_SEQUENCE and value.__class__ is not list:
                        raise DecodeError("an amqp-sequence section must hold a list", offset=start)
                    if body_sections is None:
                        body_sections = []
                    elif body_sections[0].__class__ is not (_Data if code == _DATA else _AmqpSequence):
                        raise DecodeError("a message body mixes data and amqp-sequence sections", offset=start)
                    body_sections.append(_Data(value) if code == _DATA else _AmqpSequence(value))
                elif code == _HEADER:
                    self._decode_header(value, start)
                elif code == _MESSAGE_ANNOTATIONS:
                    self._annotations = _expect_map(value, "message-annotations", start)
                elif code == _DELIVERY_ANNOTATIONS:
                    self._instructions = _expect_map(value, "delivery-annotations", start)
                elif code == _FOOTER:
                    self.footer = _expect_map(value, "footer", start)
                else:
                    raise DecodeError(f"unknown message section {code:#x}", offset=start)
        except IndexError:
            raise DecodeError("message section is truncated", offset=start) from None
        if body_sections is not None:
            self._inferred = True
            self.body = body_sections[0].value if len(body_sections) == 1 else body_sections

    def _decode_header(self, fields: Any, offset: int) -> None:
        if fields.__class__ is not list:
            raise DecodeError("the header section must be a list", offset=offset)
        shape = tuple(map(type, fields))
        if shape not in _VALID_HEADER_SHAPES:
            for index, (value, allowed) in enumerate(zip(fields, _HEADER_CLASSES, strict=False)):
                if value is not None and value.__class__ is not allowed:
                    raise DecodeError(f"header field {_HEADER_FIELDS[index]} must be {allowed.__name__}", offset=offset)
            _remember_shape(_VALID_HEADER_SHAPES, shape)
        count = len(fields)
        if count > 0 and fields[0] is not None:
            self._durable = fields[0]
        if count > 1 and fields[1] is not None:
            self._priority = fields[1]
        if count > 2 and fields[2]:
            self._ttl = fields[2]
        if count > 3 and fields[3] is not None:
            self._first_acquirer = fields[3]
        if count > 4 and fields[4]:
            self._delivery_count = fields[4]

    def _decode_properties(self, fields: Any, offset: int) -> None:
        if fields.__class__ is not list:
            raise DecodeError("the properties section must be a list", offset=offset)
        count = len(fields)
        if count > 13:
            del fields[13:]  # §1.4: later versions may add fields; ignore them.
            count = 13
        # Every field's class is checked against §3.2.4, once per shape (the tuple of field classes): messages
        # of one producer share a shape, so the common case is one set lookup.
        shape = tuple(map(type, fields))
        if shape not in _VALID_PROPERTY_SHAPES:
            for index, (value, allowed) in enumerate(zip(fields, _PROPERTY_CLASSES, strict=False)):
                if value is not None and value.__class__ not in allowed:
                    raise DecodeError(
                        f"properties field {index} must be {_PROPERTY_FIELD_TYPES[index]}, got {value!r}",
                        offset=offset,
                    )
            _remember_shape(_VALID_PROPERTY_SHAPES, shape)
        if count < 13:
            fields += _PROPERTY_PADDING[count]
        self._props = fields

    def __repr__(self) -> str:
        shown = []
        for name in (
            "inferred",
            "address",
            "reply_to",
            "durable",
            "ttl",
            "priority",
            "first_acquirer",
            "delivery_count",
            "id",
            "correlation_id",
            "user_id",
            "group_id",
            "group_sequence",
            "reply_to_group_id",
            "instructions",
            "annotations",
            "properties",
            "body",
        ):
            value = getattr(self, name)
            if (
                name in ("priority", "delivery_count", "group_sequence", "id", "correlation_id")
                and type(value) is not bool
                and isinstance(value, int)
            ):
                value = int(value)  # proton shows these as plain numbers
            if value:
                shown.append(f"{name}={value!r}")
        return f"Message({', '.join(shown)})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Message):
            return NotImplemented
        return (
            all(getattr(self, name) == getattr(other, name) for name in _COMPARED)
            and tuple(self._props) == tuple(other._props)
            and self._body_section() == other._body_section()
        )

    def _body_section(self) -> int:
        """The section code the body is written in (part of equality: it is part of what is sent)."""
        body_class = self.body.__class__
        if body_class in (bytes, bytearray, memoryview):
            return _DATA if self._inferred is not False else _AMQP_VALUE
        if self._inferred and isinstance(self.body, (list, tuple)):
            return _AMQP_SEQUENCE
        return _AMQP_VALUE

    __hash__ = None  # type: ignore[assignment]


# Shapes (tuples of field classes) of header and of properties sections that passed the type checks (bounded).
_VALID_HEADER_SHAPES: set[tuple[Any, ...]] = set()
_VALID_PROPERTY_SHAPES: set[tuple[Any, ...]] = set()
_VALID_SHAPES_LIMIT = 1024
#: The nulls that complete a properties list of ``count`` fields to all thirteen (added, not built, per message).
_PROPERTY_PADDING = tuple((None,) * (13 - count) for count in range(14))


# Header sections (their list, from its constructor) that were decoded, and the fields they set (bounded).
_HEADERS: dict[bytes, dict[str, Any]] = {}
_HEADERS_LIMIT = 256


def _remember_shape(shapes: set[tuple[Any, ...]], shape: tuple[Any, ...]) -> None:
    if len(shapes) < _VALID_SHAPES_LIMIT:
        shapes.add(shape)


# §3.2.1: the header's fields and their types.
_HEADER_FIELDS = ("durable", "priority", "ttl", "first-acquirer", "delivery-count")
_HEADER_CLASSES: tuple[type, ...] = (bool, ubyte, uint, bool, uint)

# The classes a decoded properties field may hold (§3.2.4), by field position. String fields also take a
# symbol: it reads the same, and some peers send one.
_MESSAGE_ID_CLASSES = frozenset((ulong, uuid.UUID, bytes, str))
_STRING_CLASSES = frozenset((str, symbol))
_PROPERTY_CLASSES: tuple[frozenset[type], ...] = (
    _MESSAGE_ID_CLASSES,
    frozenset((bytes,)),
    _STRING_CLASSES,
    _STRING_CLASSES,
    _STRING_CLASSES,
    _MESSAGE_ID_CLASSES,
    frozenset((symbol,)),
    frozenset((symbol,)),
    frozenset((timestamp,)),
    frozenset((timestamp,)),
    _STRING_CLASSES,
    frozenset((uint,)),
    _STRING_CLASSES,
)


_COMPARED = (
    "body",
    "durable",
    "priority",
    "ttl",
    "first_acquirer",
    "delivery_count",
    "instructions",
    "annotations",
    "properties",
    "footer",
)


def _section_code(data: bytes, position: int) -> tuple[int, int]:
    """Read a section descriptor in its less common forms (a ulong other than smallulong, or a symbol)."""
    if data[position] != 0:
        raise DecodeError("expected a message section (a described value)", offset=position)
    descriptor, after = decode_value(data, position + 1, 1)
    if type(descriptor) is symbol:
        code = _SECTION_NAMES.get(descriptor)
    elif type(descriptor) is ulong:
        code = descriptor
    else:
        code = None
    if code is None:
        raise DecodeError(f"unknown message section descriptor {descriptor!r}", offset=position)
    if after >= len(data):
        raise DecodeError("message section has no value", offset=after)
    return code, after


def _expect_map(value: Any, name: str, offset: int) -> dict[Any, Any]:
    if value.__class__ is not dict:
        raise DecodeError(f"the {name} section must be a map", offset=offset)
    mapping: dict[Any, Any] = value
    return mapping


def _is_section_list(body: list[Any] | tuple[Any, ...]) -> bool:
    """A non-empty list of explicit body sections: all data, or all amqp-sequence (§3.2: never mixed)."""
    if not body:
        return False
    first = body[0].__class__
    if first is not _Data and first is not _AmqpSequence:
        return False
    if any(item.__class__ is not first for item in body):
        raise EncodeError("a message body of sections holds only data sections or only amqp-sequence sections")
    return True


def _symbol_keys(annotations: dict[Any, Any]) -> dict[Any, Any]:
    """§3.2.10: annotation keys are symbols (or ulongs); keys added as str since the dict was set are converted."""
    for key in annotations:
        cls = key.__class__
        if cls is not symbol and cls is not ulong:
            converted = _annotation_keys(annotations, "annotations")
            assert converted is not None
            return converted
    return annotations
