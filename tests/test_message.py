"""Unit tests of ``amqp_async.Message``: the proton-compatible AMQP message (spec §3.2).

What is checked, against the spec and python-qpid-proton 0.40's documented behaviour (the differential tests
against proton itself live in ``test_message_proton.py``):

* construction: the body and every keyword property, unknown keywords, proton's defaults;
* units: ``ttl``, ``creation_time`` and ``expiry_time`` are seconds (floats) in Python, milliseconds on the wire;
* the types fields take when set (symbol, ulong, uint, symbol-keyed annotations) and the application-property
  key rule (str only, refused with ``EncodeError`` at encode);
* which body section each body travels in (amqp-value 0x77, data 0x75, amqp-sequence 0x76), explicit sections;
* round trips of every field (hypothesis), ``clear``, ``decode`` replacing content, a 1 MiB body, ``repr``, ``==``;
* bad input: random, mutated and truncated bytes, and hand-made invalid messages, all giving ``DecodeError``
  (condition ``amqp:decode-error``) and nothing else;
* section descriptors in their symbolic and full-width ulong forms.

Messages are inspected on the wire with a small section splitter built on the codec (``codec.decode_at``), so the
checks do not depend on ``Message.decode``.

The module docstring of ``amqp_async/message.py`` lists deliberate differences from proton 0.40 (bytes bodies in a
data section unless ``inferred=False``, binary bodies decode to ``bytes``, unset ``user_id`` / ``content_type``
read ``None``, all-default sections omitted); these tests follow it.
"""

from __future__ import annotations

import math
import os
import re
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import amqp_async
from amqp_async import AMQPError, DecodeError, EncodeError, Message, codec
from amqp_async import types as T
from amqp_async.codec.sections import AmqpSequence, Data

try:
    import strategies as S
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests import strategies as S

HEADER, DELIVERY_ANNOTATIONS, MESSAGE_ANNOTATIONS, PROPERTIES = 0x70, 0x71, 0x72, 0x73
APPLICATION_PROPERTIES, DATA, AMQP_SEQUENCE, AMQP_VALUE, FOOTER = 0x74, 0x75, 0x76, 0x77, 0x78

SECTION_NAMES = {
    HEADER: "amqp:header:list",
    DELIVERY_ANNOTATIONS: "amqp:delivery-annotations:map",
    MESSAGE_ANNOTATIONS: "amqp:message-annotations:map",
    PROPERTIES: "amqp:properties:list",
    APPLICATION_PROPERTIES: "amqp:application-properties:map",
    DATA: "amqp:data:binary",
    AMQP_SEQUENCE: "amqp:amqp-sequence:list",
    AMQP_VALUE: "amqp:amqp-value:*",
    FOOTER: "amqp:footer:map",
}

PROPERTY_FIELDS = (
    "id",
    "user_id",
    "address",
    "subject",
    "reply_to",
    "correlation_id",
    "content_type",
    "content_encoding",
    "expiry_time",
    "creation_time",
    "group_id",
    "group_sequence",
    "reply_to_group_id",
)

# ---------------------------------------------------------------------------------------------------------------
# helpers


def split_sections(raw: bytes) -> list[tuple[int, Any, int, int]]:
    """Split an encoded message into ``(descriptor code, raw value, start, end)`` per section, with the codec only.

    The value is the section's content as the plain codec decodes it *without* its descriptor (a list for header
    and properties, a dict for maps, bytes for data ...).
    """
    result = []
    position = 0
    while position < len(raw):
        start = position
        assert raw[position] == 0x00, f"section at {position} is not a described value: {raw.hex()}"
        descriptor, position = codec.decode_at(raw, position + 1)
        assert type(descriptor) is T.ulong, f"descriptor {descriptor!r}"
        value, position = codec.decode_at(raw, position)
        result.append((int(descriptor), value, start, position))
    return result


def codes(raw: bytes) -> list[int]:
    return [code for code, _, _, _ in split_sections(raw)]


def section(raw: bytes, code: int) -> Any:
    found = [value for c, value, _, _ in split_sections(raw) if c == code]
    assert len(found) == 1, f"expected one section {code:#x} in {raw.hex()}, found {len(found)}"
    return found[0]


def sec(code: int, value: Any) -> bytes:
    """One section: the smallulong descriptor and the codec's encoding of ``value``."""
    return bytes((0x00, 0x53, code)) + codec.encode(value)


#: A message with nothing to write, as proton encodes it: an empty header and an empty properties section.
NO_SECTIONS = bytes.fromhex("0053704500537345")


def decoded(raw: bytes) -> Message:
    message = Message()
    message.decode(raw)
    return message


def roundtrip(message: Message) -> Message:
    return decoded(message.encode())


def assert_decode_error(raw: bytes) -> DecodeError:
    message = Message()
    with pytest.raises(DecodeError) as info:
        message.decode(raw)
    error = info.value
    assert isinstance(error, AMQPError)
    assert error.condition == "amqp:decode-error"
    return error


DEFAULTS: dict[str, Any] = {
    "address": None,
    "annotations": None,
    "body": None,
    "content_encoding": None,
    "content_type": None,
    "correlation_id": None,
    "creation_time": 0.0,
    "delivery_count": 0,
    "durable": False,
    "expiry_time": 0.0,
    "first_acquirer": False,
    "group_id": None,
    "group_sequence": 0,
    "id": None,
    "instructions": None,
    "priority": 4,
    "properties": None,
    "reply_to": None,
    "reply_to_group_id": None,
    "subject": None,
    "ttl": 0.0,
    "user_id": None,
    "inferred": False,
}


def assert_defaults(message: Message) -> None:
    for name, expected in DEFAULTS.items():
        actual = getattr(message, name)
        assert (actual == expected and type(actual) is type(expected)) or (expected is None and actual is None), (
            f"{name}: {actual!r} (expected {expected!r})"
        )


# every field set to a non-default value of the type it is given in
FULL: dict[str, Any] = {
    "address": "queue/a",
    "annotations": {T.symbol("x-opt-a"): 1, T.ulong(7): "seven"},
    "body": {"k": [1, 2.5, "three"]},
    "content_encoding": T.symbol("gzip"),
    "content_type": T.symbol("application/json"),
    "correlation_id": uuid.UUID("12345678-1234-5678-1234-567812345678"),
    "creation_time": 1700000000.123,
    "delivery_count": 3,
    "durable": True,
    "expiry_time": 1700000060.5,
    "first_acquirer": True,
    "group_id": "group-\u00e9",
    "group_sequence": 42,
    "id": "id-1",
    "instructions": {T.symbol("x-opt-i"): T.ubyte(1)},
    "priority": 9,
    "properties": {"p1": 1, "p2": "two", "p3": None},
    "reply_to": "reply/here",
    "reply_to_group_id": "rgroup",
    "subject": "subj \U0001f600",
    "ttl": 2.5,
    "user_id": b"guest",
}


NUMERIC = ("priority", "delivery_count", "group_sequence", "ttl", "creation_time", "expiry_time")


def assert_fields(actual: Message, expected: dict[str, Any]) -> None:
    for name, value in expected.items():
        got = getattr(actual, name)
        if name in NUMERIC:
            # proton gives plain numbers; an int subclass (ubyte, uint) reads the same
            assert isinstance(got, type(value)) and got == value, f"{name}: {got!r} != {value!r}"
        else:
            S.assert_typed_equal(got, value)


# ---------------------------------------------------------------------------------------------------------------
# construction and defaults


def test_public_names() -> None:
    assert amqp_async.Message is Message
    assert issubclass(DecodeError, AMQPError)
    assert issubclass(EncodeError, AMQPError)
    assert Message.DEFAULT_PRIORITY == 4


def test_defaults_are_protons() -> None:
    assert_defaults(Message())


def test_default_message_encodes_as_protons_and_decodes_back() -> None:
    # all-default sections are left out (module docstring), but a message is not an empty payload: one with
    # nothing to write is proton's empty header and properties
    assert Message().encode() == NO_SECTIONS
    assert_defaults(decoded(NO_SECTIONS))
    assert_defaults(decoded(b""))  # an empty payload, as some peers may send, reads as the default message


def test_constructor_takes_body_positionally() -> None:
    message = Message("hello")
    assert message.body == "hello"
    assert Message(body="hello").body == "hello"


@pytest.mark.parametrize("name", sorted(FULL))
def test_constructor_sets_each_keyword(name: str) -> None:
    message = Message(**{name: FULL[name]})
    assert_fields(message, {name: FULL[name]})
    # every other field keeps its default
    for other, default in DEFAULTS.items():
        if other != name:
            assert getattr(message, other) == default, other


def test_constructor_sets_every_keyword_at_once() -> None:
    message = Message(**FULL, inferred=True)
    assert_fields(message, FULL)
    assert message.inferred is True


def test_constructor_equals_attribute_assignment() -> None:
    by_keywords = Message(**FULL)
    by_attributes = Message()
    for name, value in FULL.items():
        setattr(by_attributes, name, value)
    assert by_keywords == by_attributes
    assert by_keywords.encode() == by_attributes.encode()


@pytest.mark.parametrize("name", ["colour", "to", "message_id", "absolute_expiry_time", "_props", "_ttl"])
def test_unknown_keyword_raises_attribute_error(name: str) -> None:
    with pytest.raises(AttributeError):
        Message(**{name: 1})


def test_inferred_keyword() -> None:
    assert Message(inferred=True).inferred is True
    assert Message(inferred=False).inferred is False
    assert Message(inferred=1).inferred is True


def test_bool_fields_read_as_bool() -> None:
    # proton stores durable and first_acquirer as C booleans: whatever truthy value is set reads back as True
    message = Message(durable=1, first_acquirer=1)
    assert message.durable is True
    assert message.first_acquirer is True
    message.durable = 0
    assert message.durable is False


# ---------------------------------------------------------------------------------------------------------------
# units: seconds in Python, milliseconds on the wire


def test_ttl_wire_bytes() -> None:
    # header [durable=null, priority=null, ttl=uint 1500]: list8, 3 fields, uint (0x70) 0x000005dc
    assert Message(ttl=1.5).encode() == bytes.fromhex("005370c00803404070000005dc")


def test_creation_time_wire_bytes() -> None:
    # properties with 10 fields, creation-time (field 9) a timestamp (0x83) of 1500 ms
    expected = bytes.fromhex("005373c0130a" + "40" * 9 + "8300000000000005dc")
    assert Message(creation_time=1.5).encode() == expected


def test_expiry_time_wire_bytes() -> None:
    expected = bytes.fromhex("005373c01209" + "40" * 8 + "8300000000000007d0")
    assert Message(expiry_time=2).encode() == expected


@pytest.mark.parametrize(
    ("seconds", "millis"), [(1.5, 1500), (0.001, 1), (2, 2000), (86400.25, 86400250), (4294967.295, 4294967295)]
)
def test_ttl_seconds_to_milliseconds(seconds: float, millis: int) -> None:
    raw = Message(ttl=seconds).encode()
    header = section(raw, HEADER)
    assert header[2] == millis and type(header[2]) is T.uint
    assert decoded(raw).ttl == millis / 1000.0


@pytest.mark.parametrize("field, index", [("creation_time", 9), ("expiry_time", 8)])
@pytest.mark.parametrize("seconds, millis", [(1.5, 1500), (1700000000.123, 1700000000123), (-1.25, -1250), (3, 3000)])
def test_times_seconds_to_timestamp(field: str, index: int, seconds: float, millis: int) -> None:
    raw = Message(**{field: seconds}).encode()
    props = section(raw, PROPERTIES)
    assert props[index] == millis and type(props[index]) is T.timestamp
    assert getattr(decoded(raw), field) == millis / 1000.0


def test_times_read_back_from_wire_milliseconds() -> None:
    props: list[Any] = [None] * 10
    props[8] = T.timestamp(1234)
    props[9] = T.timestamp(-5)
    message = decoded(sec(HEADER, [None, None, T.uint(250)]) + sec(PROPERTIES, props))
    assert message.expiry_time == 1.234
    assert message.creation_time == -0.005
    assert message.ttl == 0.25


def test_ttl_rejects_values_a_uint_cannot_hold() -> None:
    with pytest.raises(EncodeError):
        Message(ttl=-1)
    with pytest.raises(EncodeError):
        Message(ttl=2**32 / 1000)


def test_sub_millisecond_ttl_is_no_ttl() -> None:
    # proton: int(0.0004 * 1000) == 0 ms, i.e. no ttl, and no ttl field is written
    message = Message(ttl=0.0004)
    assert message.ttl == 0.0
    assert message.encode() == Message().encode()


# ---------------------------------------------------------------------------------------------------------------
# types after set


def test_content_type_and_encoding_become_symbols() -> None:
    message = Message(content_type="text/plain", content_encoding="utf-8")
    assert type(message.content_type) is T.symbol and message.content_type == "text/plain"
    assert type(message.content_encoding) is T.symbol and message.content_encoding == "utf-8"
    props = section(message.encode(), PROPERTIES)
    assert type(props[6]) is T.symbol and type(props[7]) is T.symbol


@pytest.mark.parametrize("field, index", [("id", 0), ("correlation_id", 5)])
@pytest.mark.parametrize(
    "value, expected",
    [
        (0, T.ulong(0)),
        (5, T.ulong(5)),
        (2**64 - 1, T.ulong(2**64 - 1)),
        (T.ulong(300), T.ulong(300)),
        (uuid.UUID(int=1), uuid.UUID(int=1)),
        (b"\x00bin", b"\x00bin"),
        (bytearray(b"ba"), b"ba"),
        ("str-\u00e9", "str-\u00e9"),
        ("", ""),
    ],
)
def test_message_ids_types(field: str, index: int, value: Any, expected: Any) -> None:
    message = Message(**{field: value})
    S.assert_typed_equal(getattr(message, field), expected)
    raw = message.encode()
    S.assert_typed_equal(section(raw, PROPERTIES)[index], expected)
    S.assert_typed_equal(getattr(decoded(raw), field), expected)


@pytest.mark.parametrize("field", ["id", "correlation_id"])
@pytest.mark.parametrize("value", [-1, 2**64, 1.5, True, [1], {"a": 1}, 1j])
def test_message_ids_refuse_other_types(field: str, value: Any) -> None:
    # a message-id is a ulong, uuid, binary or string (§3.2.11-3.2.14)
    with pytest.raises(EncodeError):
        Message(**{field: value}).encode()


@pytest.mark.parametrize("field, index", [("id", 0), ("correlation_id", 5)])
def test_symbol_message_id_is_sent_as_a_string(field: str, index: int) -> None:
    # proton sends any str (a symbol too) as a string message-id; a symbol is not a valid message-id (§3.2.11),
    # and our own decoder refuses one, so it must not reach the wire as a symbol
    raw = Message(**{field: T.symbol("sym-id")}).encode()
    S.assert_typed_equal(section(raw, PROPERTIES)[index], "sym-id")
    assert getattr(decoded(raw), field) == "sym-id"


def test_group_sequence_is_a_uint_on_the_wire() -> None:
    message = Message(group_sequence=7)
    assert message.group_sequence == 7
    props = section(message.encode(), PROPERTIES)
    assert props[11] == 7 and type(props[11]) is T.uint
    assert decoded(message.encode()).group_sequence == 7
    message.group_sequence = 2**32 - 1
    assert section(message.encode(), PROPERTIES)[11] == 2**32 - 1
    with pytest.raises(EncodeError):
        Message(group_sequence=2**32)
    with pytest.raises(EncodeError):
        Message(group_sequence=-1)


def test_header_field_types_on_the_wire() -> None:
    raw = Message(durable=True, priority=200, ttl=1, first_acquirer=True, delivery_count=70000).encode()
    header = section(raw, HEADER)
    S.assert_typed_equal(header, [True, T.ubyte(200), T.uint(1000), True, T.uint(70000)])


@pytest.mark.parametrize("priority", [-1, 256])
def test_priority_range(priority: int) -> None:
    with pytest.raises(EncodeError):
        Message(priority=priority)


def test_priority_bounds_roundtrip() -> None:
    for priority in (0, 3, 4, 5, 255):
        message = roundtrip(Message(priority=priority, body="x"))
        assert message.priority == priority


def test_user_id_is_bytes() -> None:
    assert Message(user_id=b"u").user_id == b"u"
    assert Message(user_id="\u00e9").user_id == "\u00e9".encode()
    props = section(Message(user_id=b"u").encode(), PROPERTIES)
    S.assert_typed_equal(props[1], b"u")


@pytest.mark.parametrize("value", [5, 1.5, [1, 2], {"a": 1}])
def test_user_id_refuses_non_binary(value: Any) -> None:
    # a user-id is binary; proton refuses an int (TypeError) instead of sending bytes(5) == b"\\x00" * 5
    with pytest.raises((EncodeError, TypeError)):
        Message(user_id=value).encode()


def test_string_fields_on_the_wire() -> None:
    message = Message(address="a", subject="s", reply_to="r", group_id="g", reply_to_group_id="rg")
    props = section(message.encode(), PROPERTIES)
    S.assert_typed_equal([props[i] for i in (2, 3, 4, 10, 12)], ["a", "s", "r", "g", "rg"])


@pytest.mark.parametrize("field", ["annotations", "instructions"])
def test_annotation_str_keys_become_symbols_ulong_keys_kept(field: str) -> None:
    message = Message(**{field: {"a": 1, T.symbol("b"): 2, T.ulong(3): 3}})
    value = getattr(message, field)
    S.assert_typed_equal(value, {T.symbol("a"): 1, T.symbol("b"): 2, T.ulong(3): 3})
    code = MESSAGE_ANNOTATIONS if field == "annotations" else DELIVERY_ANNOTATIONS
    S.assert_typed_equal(section(message.encode(), code), {T.symbol("a"): 1, T.symbol("b"): 2, T.ulong(3): 3})


@pytest.mark.parametrize("field, code", [("annotations", MESSAGE_ANNOTATIONS), ("instructions", DELIVERY_ANNOTATIONS)])
def test_annotation_str_keys_added_after_set_are_sent_as_symbols(field: str, code: int) -> None:
    # §3.2.10: annotation keys are symbols or ulongs. proton's AnnotationDict converts a str key added later too
    message = Message(**{field: {}})
    getattr(message, field)["late"] = 1
    S.assert_typed_equal(section(message.encode(), code), {T.symbol("late"): 1})


def test_footer_str_keys_are_sent_as_symbols() -> None:
    message = Message(body="b")
    message.footer = {"sig": b"\x01", T.ulong(9): None}
    raw = message.encode()
    assert codes(raw) == [AMQP_VALUE, FOOTER]
    S.assert_typed_equal(section(raw, FOOTER), {T.symbol("sig"): b"\x01", T.ulong(9): None})
    S.assert_typed_equal(decoded(raw).footer, {T.symbol("sig"): b"\x01", T.ulong(9): None})


def test_application_property_str_keys() -> None:
    class Key(str):
        pass

    message = Message(properties={"a": 1, Key("b"): T.ubyte(2)})
    props = section(message.encode(), APPLICATION_PROPERTIES)
    S.assert_typed_equal(props, {"a": 1, "b": T.ubyte(2)})


@pytest.mark.parametrize("key", [T.symbol("sym"), T.char("c"), 1, T.ulong(1), b"bin", None, 1.5, uuid.UUID(int=3)])
def test_application_property_non_str_keys_refused_at_encode(key: Any) -> None:
    message = Message(properties={"ok": 1, key: 2})
    with pytest.raises(EncodeError) as info:
        message.encode()
    assert isinstance(info.value, AMQPError)


# ---------------------------------------------------------------------------------------------------------------
# body sections


AMQP_VALUE_BODIES = [
    "text",
    "",
    {"a": 1, T.symbol("b"): [None]},
    [1, "two", 3.0],
    [],
    0,
    -(2**63),
    1.25,
    True,
    uuid.UUID(int=99),
    T.Described(T.ulong(0x1234), "described"),
    T.Described(T.symbol("example.org:x"), [1]),
    T.Array(T.UNDESCRIBED, T.TypeCode.INT, T.int32(1), T.int32(2)),
    T.symbol("sym"),
    T.ubyte(7),
    T.timestamp(5),
    T.char("c"),
]


@pytest.mark.parametrize("body", AMQP_VALUE_BODIES, ids=repr)
def test_amqp_value_bodies(body: Any) -> None:
    raw = Message(body=body).encode()
    assert codes(raw) == [AMQP_VALUE]
    assert raw[:3] == b"\x00\x53\x77"
    S.assert_typed_equal(section(raw, AMQP_VALUE), body)
    message = decoded(raw)
    S.assert_typed_equal(message.body, body)
    assert message.inferred is False


def test_none_body_has_no_body_section() -> None:
    # as proton: a None body writes no body section at all, and decodes back to None
    raw = Message(body=None, subject="s").encode()
    assert codes(raw) == [PROPERTIES]
    assert decoded(raw).body is None


def repr_without_address(value: object) -> str:
    """A test id that is the same in every process (pytest-xdist compares them): repr() less any " at 0x..."."""
    return re.sub(r" at 0x[0-9a-fA-F]+", "", repr(value))


@pytest.mark.parametrize(
    "body", [b"bytes", b"", bytearray(b"ba"), memoryview(b"mv"), b"\x00" * 256], ids=repr_without_address
)
def test_binary_bodies_go_in_a_data_section(body: Any) -> None:
    raw = Message(body=body).encode()
    assert codes(raw) == [DATA]
    S.assert_typed_equal(section(raw, DATA), bytes(body))
    message = decoded(raw)
    S.assert_typed_equal(message.body, bytes(body))
    assert message.inferred is True


def test_inferred_true_binary_body_is_data() -> None:
    raw = Message(body=b"x", inferred=True).encode()
    assert codes(raw) == [DATA]


def test_inferred_false_binary_body_is_amqp_value() -> None:
    raw = Message(body=b"x", inferred=False).encode()
    assert codes(raw) == [AMQP_VALUE]
    S.assert_typed_equal(section(raw, AMQP_VALUE), b"x")
    message = decoded(raw)
    S.assert_typed_equal(message.body, b"x")
    assert message.inferred is False


@pytest.mark.parametrize("body", [[1, 2], ["a"], [None], [[1], {"k": "v"}]], ids=repr)
def test_inferred_true_list_body_is_amqp_sequence(body: list[Any]) -> None:
    raw = Message(body=body, inferred=True).encode()
    assert codes(raw) == [AMQP_SEQUENCE]
    S.assert_typed_equal(section(raw, AMQP_SEQUENCE), body)
    message = decoded(raw)
    S.assert_typed_equal(message.body, body)
    assert message.inferred is True


def test_inferred_true_empty_list_body_is_amqp_sequence() -> None:
    # proton 0.40 writes 00 53 76 45 for Message(body=[], inferred=True)
    raw = Message(body=[], inferred=True).encode()
    assert raw == bytes.fromhex("00537645")
    message = decoded(raw)
    assert message.body == [] and message.inferred is True


def test_decoded_empty_amqp_sequence_reencodes_as_amqp_sequence() -> None:
    raw = bytes.fromhex("00537645")
    assert roundtrip(decoded(raw)).encode() == raw


@pytest.mark.parametrize("body", ["s", {"a": 1}, 5, uuid.UUID(int=1)], ids=repr)
def test_inferred_true_other_bodies_are_amqp_value(body: Any) -> None:
    assert codes(Message(body=body, inferred=True).encode()) == [AMQP_VALUE]


def test_inferred_false_list_is_amqp_value() -> None:
    assert codes(Message(body=[1], inferred=False).encode()) == [AMQP_VALUE]


def test_explicit_data_section_body() -> None:
    raw = Message(body=Data(b"payload")).encode()
    assert raw == b"\x00\x53\x75\xa0\x07payload"
    message = decoded(raw)
    S.assert_typed_equal(message.body, b"payload")
    assert message.inferred is True


def test_explicit_amqp_sequence_body() -> None:
    raw = Message(body=AmqpSequence([1, "x"])).encode()
    assert codes(raw) == [AMQP_SEQUENCE]
    message = decoded(raw)
    S.assert_typed_equal(message.body, [1, "x"])
    assert message.inferred is True


def test_several_data_sections_roundtrip() -> None:
    body = [Data(b"one"), Data(b""), Data(b"three" * 100)]
    message = Message(body=body, subject="multi")
    raw = message.encode()
    assert codes(raw) == [PROPERTIES, DATA, DATA, DATA]
    back = decoded(raw)
    assert back.body == body
    assert all(type(part) is Data for part in back.body)
    assert back.inferred is True
    assert back.encode() == raw


def test_several_amqp_sequence_sections_roundtrip() -> None:
    body = [AmqpSequence([1]), AmqpSequence([]), AmqpSequence(["x", None])]
    raw = Message(body=body).encode()
    assert codes(raw) == [AMQP_SEQUENCE] * 3
    back = decoded(raw)
    assert back.body == body
    assert all(type(part) is AmqpSequence for part in back.body)
    assert back.encode() == raw


def test_decode_several_data_sections_written_by_hand() -> None:
    raw = sec(PROPERTIES, ["id"]) + sec(DATA, b"ab") + sec(DATA, b"cd") + sec(FOOTER, {T.symbol("f"): 1})
    message = decoded(raw)
    assert message.id == "id"
    assert message.body == [Data(b"ab"), Data(b"cd")]
    assert message.footer == {T.symbol("f"): 1}


def test_single_data_section_list_body() -> None:
    raw = Message(body=[Data(b"x")]).encode()
    assert raw == sec(DATA, b"x")


def test_mixed_section_list_body_is_refused() -> None:
    # data and amqp-sequence sections cannot be mixed in one message (§3.2); the decoder refuses such a message,
    # so the encoder must not produce one
    with pytest.raises(EncodeError):
        Message(body=[Data(b"a"), AmqpSequence([1])]).encode()


def test_described_section_inside_amqp_value_keeps_its_section() -> None:
    # an amqp-value whose value is described with the data descriptor 0x75 is still an amqp-value body:
    # decoding then re-encoding must give the same bytes (proton keeps it as an amqp-value)
    raw = bytes.fromhex("005377005375a00141")
    message = decoded(raw)
    assert message.inferred is False
    assert codes(message.encode()) == [AMQP_VALUE]
    assert message.encode() == raw


def test_body_after_all_other_sections_in_order() -> None:
    message = Message(**FULL)
    message.footer = {T.symbol("f"): 1}
    assert codes(message.encode()) == [
        HEADER,
        DELIVERY_ANNOTATIONS,
        MESSAGE_ANNOTATIONS,
        PROPERTIES,
        APPLICATION_PROPERTIES,
        AMQP_VALUE,
        FOOTER,
    ]


def test_one_mib_body_roundtrips() -> None:
    body = os.urandom(1 << 20)
    raw = Message(body=body, durable=True).encode()
    assert raw[-(1 << 20) - 5 : -(1 << 20)] == b"\xb0" + (1 << 20).to_bytes(4, "big")
    message = decoded(raw)
    assert type(message.body) is bytes and message.body == body
    assert message.durable is True


def test_one_mib_amqp_value_string_roundtrips() -> None:
    body = "x" * (1 << 20)
    assert decoded(Message(body=body).encode()).body == body


# ---------------------------------------------------------------------------------------------------------------
# round trips of every field


def test_full_message_roundtrip() -> None:
    message = Message(**FULL)
    message.footer = {T.symbol("f"): b"sig"}
    back = roundtrip(message)
    assert_fields(back, FULL)
    assert back.footer == {T.symbol("f"): b"sig"}
    assert back == message
    assert back.encode() == message.encode()


def _ms(low: int, high: int) -> st.SearchStrategy[float]:
    """Seconds as floats made from whole milliseconds (what proton's int(secs * 1000) maps back exactly)."""
    return st.integers(low, high).map(lambda ms: ms / 1000)


message_ids = st.one_of(
    S.ulongs(),
    st.integers(0, 2**64 - 1),
    S.uuids(),
    S.binaries(),
    S.strings(),
)
annotation_keys = st.one_of(S.symbols(max_size=10), S.ulongs())
small_values = S.amqp_values(max_leaves=6)
annotation_maps = st.dictionaries(annotation_keys, small_values, max_size=4)

FIELD_STRATEGIES: dict[str, st.SearchStrategy[Any]] = {
    "address": S.strings(),
    "annotations": annotation_maps,
    "content_encoding": S.symbols(),
    "content_type": S.symbols(),
    "correlation_id": message_ids,
    "creation_time": _ms(-(2**43), 2**43),
    "delivery_count": S.uints(),
    "durable": st.booleans(),
    "expiry_time": _ms(-(2**43), 2**43),
    "first_acquirer": st.booleans(),
    "group_id": S.strings(),
    "group_sequence": S.uints(),
    "id": message_ids,
    "instructions": annotation_maps,
    "priority": S.ubytes(),
    "properties": st.dictionaries(S.strings(max_size=10), small_values, max_size=4),
    "reply_to": S.strings(),
    "reply_to_group_id": S.strings(),
    "subject": S.strings(),
    "ttl": _ms(0, 2**32 - 1),
    "user_id": S.binaries(),
}

bodies = st.one_of(
    st.tuples(small_values, st.none()),  # inferred left unset
    st.tuples(S.binaries(), st.sampled_from([None, True, False])),
    st.tuples(st.lists(small_values, min_size=1, max_size=4), st.just(True)),
    st.tuples(st.lists(S.binaries(max_size=5).map(Data), min_size=2, max_size=3), st.none()),
    st.tuples(st.lists(st.lists(small_values, max_size=3).map(AmqpSequence), min_size=2, max_size=3), st.none()),
)


def expected_field(name: str, value: Any) -> Any:
    """What the getter reads after ``name = value`` (and after a round trip)."""
    if name in ("id", "correlation_id") and type(value) is int:
        return T.ulong(value)
    if name == "user_id":
        return value or None
    if name in ("ttl", "creation_time", "expiry_time"):
        return int(value * 1000) / 1000.0
    if name in ("priority", "delivery_count", "group_sequence"):
        return int(value)
    return value


def expected_body(body: Any, inferred: bool | None) -> tuple[Any, bool]:
    """The body and inferred flag a decoded message reports."""
    if type(body) in (bytes, bytearray):  # not decimal128, a bytes subclass
        return bytes(body), inferred is not False
    if isinstance(body, list) and body and all(type(part) in (Data, AmqpSequence) for part in body):
        return body, True
    if isinstance(body, list) and inferred:
        return body, True
    return body, False


def body_difference(actual: Any, expected: Any) -> str | None:
    """Typed difference of two bodies; section objects compare class and value."""
    if isinstance(expected, list) and expected and type(expected[0]) in (Data, AmqpSequence):
        if not isinstance(actual, list) or len(actual) != len(expected):
            return f"{actual!r} != {expected!r}"
        for i, (got, want) in enumerate(zip(actual, expected, strict=True)):
            if type(got) is not type(want):
                return f"[{i}]: {got!r} is not a {type(want).__name__}"
            diff = S.first_difference(got.value, want.value, f"[{i}].value")
            if diff:
                return diff
        return None
    return S.first_difference(actual, expected)


def fields_match(actual: Message, fields: dict[str, Any]) -> None:
    for name, value in fields.items():
        expected = expected_field(name, value)
        got = getattr(actual, name)
        if name in NUMERIC:
            assert got == expected, f"{name}: {got!r} != {expected!r}"
        else:
            diff = S.first_difference(got, expected)
            assert diff is None, f"{name}: {diff}"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.fixed_dictionaries({}, optional=FIELD_STRATEGIES), bodies)
def test_every_field_roundtrips(fields: dict[str, Any], body_and_inferred: tuple[Any, bool | None]) -> None:
    body, inferred = body_and_inferred
    message = Message(body, **fields)
    if inferred is not None:
        message.inferred = inferred
    fields_match(message, fields)
    raw = message.encode()
    back = Message()
    back.decode(raw)
    fields_match(back, fields)
    want_body, want_inferred = expected_body(body, inferred)
    diff = body_difference(back.body, want_body)
    assert diff is None, f"body: {diff}"
    assert back.inferred is want_inferred
    for name, default in DEFAULTS.items():
        if name not in fields and name not in ("body", "inferred"):
            assert getattr(back, name) == default, name
    # a decoded message encodes to the same bytes again
    assert back.encode() == raw


@settings(max_examples=60, deadline=None)
@given(st.fixed_dictionaries({}, optional=FIELD_STRATEGIES))
def test_sections_present_only_when_needed(fields: dict[str, Any]) -> None:
    raw = Message(**fields).encode()
    if raw == NO_SECTIONS:
        raw = b""  # a message with nothing to write is proton's empty header and properties (no payload is empty)
    present = set(codes(raw))
    header_fields = {"durable", "priority", "ttl", "first_acquirer", "delivery_count"}
    header_needed = (
        fields.get("durable", False)
        or fields.get("priority", 4) != 4
        or int(fields.get("ttl", 0) * 1000) != 0
        or fields.get("first_acquirer", False)
        or fields.get("delivery_count", 0) != 0
    )
    assert (HEADER in present) == bool(header_needed), (fields.keys() & header_fields, raw.hex())
    assert (DELIVERY_ANNOTATIONS in present) == ("instructions" in fields)
    assert (MESSAGE_ANNOTATIONS in present) == ("annotations" in fields)
    assert (APPLICATION_PROPERTIES in present) == ("properties" in fields)


# ---------------------------------------------------------------------------------------------------------------
# clear, decode replacing content, repr, equality


def test_clear_resets_everything() -> None:
    message = Message(**FULL, inferred=True)
    message.footer = {T.symbol("f"): 1}
    message.clear()
    assert_defaults(message)
    assert message.footer is None
    assert message == Message()
    assert message.encode() == NO_SECTIONS


def test_decode_replaces_previous_content() -> None:
    message = Message(**FULL, inferred=True)
    message.footer = {T.symbol("f"): 1}
    message.decode(sec(AMQP_VALUE, "only a body"))
    for name, value in DEFAULTS.items():
        if name != "body":
            assert getattr(message, name) == value, name
    assert message.body == "only a body"
    assert message.footer is None


def test_decode_twice_gives_the_second_message() -> None:
    first = Message(subject="first", body=b"1", priority=9).encode()
    second = Message(address="second", properties={"k": 1}).encode()
    message = decoded(first)
    message.decode(second)
    assert message.subject is None and message.body is None and message.priority == 4
    assert message.address == "second" and message.properties == {"k": 1}
    assert message.inferred is False


def test_repeated_headers_decode_to_their_own_fields_every_time() -> None:
    # Decoded header fields are kept by the header's bytes (headers repeat): each message must still get exactly
    # its own header's fields, whatever was decoded before, and a header that fails its type checks must fail
    # every time (nothing invalid is kept).
    headers = [
        {"durable": True},
        {"durable": True, "priority": 9, "ttl": 1.5},
        {"first_acquirer": True, "delivery_count": 3},
        {},
        {"durable": True},
    ]
    for _ in range(2):
        for fields in headers:
            message = decoded(Message(body="x", **fields).encode())
            expected = {**{name: DEFAULTS[name] for name in ("durable", "priority", "ttl")}, **fields}
            assert {name: getattr(message, name) for name in expected} == expected
            assert message.first_acquirer == fields.get("first_acquirer", False)
            assert message.delivery_count == fields.get("delivery_count", 0)
            assert message.body == "x"
    bad_header = b"\x00\x53\x70\xc0\x02\x01\xa1"  # durable as a str8 with no length: no valid header
    wrong_type = b"\x00\x53\x70\xc0\x03\x01\x52\x01"  # durable as a uint
    for raw in (bad_header, wrong_type, bad_header, wrong_type):
        with pytest.raises(DecodeError):
            decoded(raw)


def test_decode_accepts_bytearray_and_memoryview() -> None:
    raw = Message(**FULL).encode()
    assert decoded(bytearray(raw)) == decoded(raw)
    assert decoded(memoryview(raw)) == decoded(raw)


def test_repr_is_protons() -> None:
    """Programs print messages (proton's examples do): the text is proton's, field for field."""
    proton = pytest.importorskip("proton", reason="python-qpid-proton is the oracle for the repr")
    cases: list[dict[str, Any]] = [
        {},
        {"body": "x", "priority": 4},
        {"body": "payload", "subject": "subj", "durable": True, "priority": 7, "id": 5},
        {"reply_to": "r", "body": "Twas brillig", "correlation_id": "c", "ttl": 1.5, "group_id": "g"},
        {"address": "q", "properties": {"k": 1}, "body": [1, 2]},
    ]
    for fields in cases:
        assert repr(Message(**fields)) == repr(proton.Message(**fields)), fields


def test_equality() -> None:
    assert Message() == Message()
    assert Message(**FULL) == Message(**FULL)
    assert Message(body="a") != Message(body="b")
    for name, value in FULL.items():
        assert Message(**{name: value}) != Message(), name
        changed = dict(FULL)
        del changed[name]
        assert Message(**changed) != Message(**FULL), name
    assert Message() != "Message()"
    assert (Message() == object()) is False
    with pytest.raises(TypeError):
        hash(Message())


def test_equality_follows_the_body_section() -> None:
    # the same body in different sections is a different message on the wire
    assert Message(body=[1], inferred=True) != Message(body=[1])
    assert Message(body=b"x", inferred=False) != Message(body=b"x")
    # ... while a decoded message equals the one it was encoded from
    for message in (Message(body=b"x"), Message(body=[1], inferred=True), Message(body=b"x", inferred=False)):
        assert roundtrip(message) == message


def test_equality_after_unsetting_a_field() -> None:
    # a field set and then unset (or set to its default) is the same message as one never set
    message = Message(subject="s")
    message.subject = None
    assert message == Message()
    assert Message(subject=None) == Message()
    assert Message(id=None, group_id=None) == Message()
    assert Message(durable=False, priority=4, ttl=0) == Message()


def test_group_sequence_zero_is_the_default() -> None:
    # group-sequence 0 is the default (as proton): no properties section is needed for it
    assert Message(group_sequence=0).encode() == NO_SECTIONS
    assert Message(group_sequence=0) == Message()


# ---------------------------------------------------------------------------------------------------------------
# bad input: DecodeError and nothing else


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64))
def test_random_bytes_give_decode_error_or_a_message(raw: bytes) -> None:
    message = Message()
    try:
        message.decode(raw)
    except DecodeError as exc:
        assert exc.condition == "amqp:decode-error"


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=40))
def test_random_bytes_after_a_section_prefix(tail: bytes) -> None:
    # bytes that start like a section, so the fuzz reaches the section decoders
    for code in (HEADER, PROPERTIES, APPLICATION_PROPERTIES, DATA, AMQP_VALUE, FOOTER):
        raw = bytes((0x00, 0x53, code)) + tail
        try:
            Message().decode(raw)
        except DecodeError as exc:
            assert exc.condition == "amqp:decode-error"


valid_messages = st.builds(
    lambda fields, body: Message(body, **fields),
    st.fixed_dictionaries({}, optional=FIELD_STRATEGIES),
    st.one_of(small_values, S.binaries()),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(valid_messages, st.data())
def test_mutated_messages_give_decode_error_or_a_message(message: Message, data: st.DataObject) -> None:
    raw = bytearray(message.encode())
    assume(raw)
    for _ in range(data.draw(st.integers(1, 4), label="mutations")):
        kind = data.draw(st.sampled_from(["flip", "set", "insert", "delete"]), label="kind")
        index = data.draw(st.integers(0, max(len(raw) - 1, 0)), label="index")
        if kind == "flip" and raw:
            raw[index] ^= 1 << data.draw(st.integers(0, 7))
        elif kind == "set" and raw:
            raw[index] = data.draw(st.integers(0, 255))
        elif kind == "insert":
            raw.insert(index, data.draw(st.integers(0, 255)))
        elif kind == "delete" and raw:
            del raw[index]
    try:
        Message().decode(bytes(raw))
    except DecodeError as exc:
        assert exc.condition == "amqp:decode-error"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(valid_messages)
def test_truncated_messages_give_decode_error(message: Message) -> None:
    raw = message.encode()
    boundaries = {end for _, _, _, end in split_sections(raw)} | {0}
    # every cut in short messages; in long ones an even spread plus the bytes around each section boundary
    cuts = set(range(0, len(raw), max(1, len(raw) // 150)))
    cuts |= {b + d for b in boundaries for d in (-1, 1, 2, 3, 4) if 0 <= b + d < len(raw)}
    for cut in sorted(cuts):
        if cut in boundaries:
            decoded(raw[:cut])  # a shorter, valid message
        else:
            assert_decode_error(raw[:cut])


def _props(index: int, value: Any) -> bytes:
    fields: list[Any] = [None] * (index + 1)
    fields[index] = value
    return sec(PROPERTIES, fields)


BAD_MESSAGES: dict[str, bytes] = {
    "properties before header": sec(PROPERTIES, ["id"]) + sec(HEADER, [True]),
    "repeated header": sec(HEADER, [True]) + sec(HEADER, [True]),
    "repeated properties": sec(PROPERTIES, ["a"]) + sec(PROPERTIES, ["b"]),
    "repeated application-properties": sec(APPLICATION_PROPERTIES, {}) + sec(APPLICATION_PROPERTIES, {}),
    "amqp-value twice": sec(AMQP_VALUE, "a") + sec(AMQP_VALUE, "b"),
    "footer twice": sec(FOOTER, {}) + sec(FOOTER, {}),
    "footer before body": sec(FOOTER, {}) + sec(AMQP_VALUE, 1),
    "body before application-properties": sec(AMQP_VALUE, 1) + sec(APPLICATION_PROPERTIES, {}),
    "data then amqp-sequence": sec(DATA, b"a") + sec(AMQP_SEQUENCE, [1]),
    "amqp-sequence then data": sec(AMQP_SEQUENCE, [1]) + sec(DATA, b"a"),
    "data then amqp-value": sec(DATA, b"a") + sec(AMQP_VALUE, 1),
    "amqp-sequence then amqp-value": sec(AMQP_SEQUENCE, [1]) + sec(AMQP_VALUE, 1),
    "amqp-value then data": sec(AMQP_VALUE, 1) + sec(DATA, b"a"),
    "data holding a string": sec(DATA, "text"),
    "data holding a symbol": sec(DATA, T.symbol("s")),
    "data holding null": sec(DATA, None),
    "amqp-sequence holding a map": sec(AMQP_SEQUENCE, {"a": 1}),
    "amqp-sequence holding binary": sec(AMQP_SEQUENCE, b"x"),
    "application-properties a list": sec(APPLICATION_PROPERTIES, ["a", 1]),
    "application-properties a string": sec(APPLICATION_PROPERTIES, "a"),
    "message-annotations a list": sec(MESSAGE_ANNOTATIONS, [1]),
    "delivery-annotations a string": sec(DELIVERY_ANNOTATIONS, "x"),
    "footer a list": sec(FOOTER, []),
    "header a map": sec(HEADER, {"durable": True}),
    "header a string": sec(HEADER, "h"),
    "properties a map": sec(PROPERTIES, {"id": 1}),
    "properties null": sec(PROPERTIES, None),
    "header ttl a string": sec(HEADER, [None, None, "x"]),
    "header priority a string": sec(HEADER, [None, "7"]),
    "header durable a string": sec(HEADER, ["yes"]),
    "header priority a list": sec(HEADER, [None, [1]]),
    "header delivery-count negative long": sec(HEADER, [None, None, None, None, -1]),
    "group-sequence a string": _props(11, "7"),
    "group-sequence a long": _props(11, 7),
    "creation-time a long": _props(9, 1500),
    "creation-time a uint": _props(9, T.uint(1500)),
    "expiry-time a string": _props(8, "tomorrow"),
    "message-id a bool": _props(0, True),
    "message-id a long": _props(0, 5),
    "message-id a list": _props(0, [1]),
    "message-id a symbol": _props(0, T.symbol("id")),
    "correlation-id a map": _props(5, {}),
    "user-id a string": _props(1, "user"),
    "to a long": _props(2, 1),
    "subject binary": _props(3, b"subject"),
    "content-type a string": _props(6, "text/plain"),
    "content-encoding binary": _props(7, b"gzip"),
    "group-id a uint": _props(10, T.uint(1)),
    "reply-to-group-id a list": _props(12, []),
    "unknown section descriptor 0x79": bytes.fromhex("00537945"),
    "unknown section 0x79 after a body": sec(AMQP_VALUE, 1) + bytes.fromhex("00537945"),
    "descriptor of a performative 0x10": bytes.fromhex("00531045"),
    "descriptor 0x6f": bytes.fromhex("00536f45"),
    "descriptor ulong 2**32 + 0x70": bytes.fromhex("00800000000100000070") + codec.encode([]),
    "unknown symbolic descriptor": b"\x00\xa3\x0famqp:other:list" + codec.encode([]),
    "symbolic descriptor of a performative": b"\x00\xa3\x0eamqp:open:list" + codec.encode(["c"]),
    "descriptor a string": b"\x00\xa1\x10amqp:header:list" + codec.encode([]),
    "descriptor a long": bytes.fromhex("00810000000000000070") + codec.encode([]),
    "descriptor described": bytes.fromhex("0000537053704545"),
    "descriptor null": bytes.fromhex("004045"),
    "non-described value at top level": codec.encode([True]),
    "string at top level": codec.encode("body"),
    "null at top level": b"\x40",
    "valid section then a bare value": sec(AMQP_VALUE, 1) + b"\x45",
    "invalid constructor 0x01": b"\x01",
    "invalid constructor in value": bytes.fromhex("005377ff"),
    "section without value": bytes.fromhex("005377"),
    "lone 0x00": b"\x00",
    "lone 0x00 0x53": b"\x00\x53",
    "truncated header": bytes.fromhex("005370c00503"),
    "truncated data length": bytes.fromhex("005375b00000"),
    "data longer than message": bytes.fromhex("005375a00a616263"),
    "list count beyond size": bytes.fromhex("005370c00105"),
    "vbin32 claims 4 GiB": bytes.fromhex("005375b0ffffffff00"),
    "list32 claims 4 GiB": bytes.fromhex("005377d0ffffffffffffffff"),
    "map with odd count": bytes.fromhex("005374c1030141"),
    "string with invalid UTF-8": bytes.fromhex("005377a102c328"),
    # The sections Message.decode reads before its loop (an empty header, properties, an amqp-value body), broken:
    "empty header, properties cut short": bytes.fromhex("00537045005373c00501"),
    "empty header, properties with message-id a long": bytes.fromhex("00537045") + _props(0, 5),
    "empty header, section without value": bytes.fromhex("00537045005377"),
    "properties twice": sec(PROPERTIES, ["a"]) + sec(PROPERTIES, ["b"]),
    "empty header, properties, amqp-value twice": bytes.fromhex("00537045")
    + sec(PROPERTIES, ["id"])
    + sec(AMQP_VALUE, 1)
    + sec(AMQP_VALUE, 2),
    "amqp-value, then a data section": sec(AMQP_VALUE, 1) + sec(DATA, b"x"),
    "amqp-value, then a header": sec(AMQP_VALUE, 1) + bytes.fromhex("00537045"),
}


@pytest.mark.parametrize("raw", list(BAD_MESSAGES.values()), ids=list(BAD_MESSAGES))
def test_invalid_messages_give_decode_error(raw: bytes) -> None:
    assert_decode_error(raw)


def test_decode_error_names_the_wrong_properties_field() -> None:
    # the subject "7" is valid; group-sequence "7" (field 11) is the wrong field
    raw = sec(PROPERTIES, [None, None, None, "7", None, None, None, None, None, None, None, "7"])
    error = assert_decode_error(raw)
    assert "field 11" in str(error), str(error)


def test_decode_error_carries_the_offset_of_the_bad_section() -> None:
    good = sec(HEADER, [True]) + sec(PROPERTIES, ["id"])
    error = assert_decode_error(good + sec(APPLICATION_PROPERTIES, [1]))
    assert error.offset >= len(good)


def test_properties_with_more_than_13_fields_decode() -> None:
    # §1.4: fields added by a later version are ignored
    fields: list[Any] = ["id"] + [None] * 12 + ["future", 1]
    message = decoded(sec(PROPERTIES, fields))
    assert message.id == "id"
    assert message.encode() == sec(PROPERTIES, ["id"])


def test_string_fields_accept_symbols_on_the_wire() -> None:
    message = decoded(_props(2, T.symbol("addr")))
    assert message.address == "addr"


# ---------------------------------------------------------------------------------------------------------------
# descriptor forms


def _symbolic(code: int, value: Any) -> bytes:
    return b"\x00" + codec.encode(T.symbol(SECTION_NAMES[code])) + codec.encode(value)


def _wide(code: int, value: Any) -> bytes:
    return b"\x00\x80" + code.to_bytes(8, "big") + codec.encode(value)


SAMPLE_SECTIONS: list[tuple[int, Any]] = [
    (HEADER, [True, T.ubyte(7), T.uint(1000)]),
    (DELIVERY_ANNOTATIONS, {T.symbol("d"): 1}),
    (MESSAGE_ANNOTATIONS, {T.symbol("m"): "v", T.ulong(5): None}),
    (PROPERTIES, ["id", b"user", "to", "subj", None, T.ulong(9), T.symbol("text/plain")]),
    (APPLICATION_PROPERTIES, {"k": 1}),
    (DATA, b"one"),
    (DATA, b"two"),
    (FOOTER, {T.symbol("f"): b"\x00"}),
]


@pytest.mark.parametrize("form", [_symbolic, _wide], ids=["symbolic", "ulong"])
def test_descriptor_forms_decode_as_smallulong(form: Any) -> None:
    small = b"".join(sec(code, value) for code, value in SAMPLE_SECTIONS)
    other = b"".join(form(code, value) for code, value in SAMPLE_SECTIONS)
    expected = decoded(small)
    got = decoded(other)
    assert got == expected
    assert got.body == [Data(b"one"), Data(b"two")]
    assert got.durable is True and got.priority == 7 and got.ttl == 1.0
    assert got.content_type == "text/plain" and got.correlation_id == 9
    assert got.encode() == small


@pytest.mark.parametrize("code, value", [(AMQP_VALUE, [1, "x"]), (AMQP_SEQUENCE, [1]), (DATA, b"z")])
@pytest.mark.parametrize("form", [_symbolic, _wide], ids=["symbolic", "ulong"])
def test_body_descriptor_forms(form: Any, code: int, value: Any) -> None:
    got = decoded(form(code, value))
    expected = decoded(sec(code, value))
    assert got == expected
    assert got.inferred is expected.inferred


def test_mixed_descriptor_forms_in_one_message() -> None:
    raw = _symbolic(HEADER, [True]) + _wide(PROPERTIES, ["id"]) + sec(AMQP_VALUE, "b")
    message = decoded(raw)
    assert message.durable is True and message.id == "id" and message.body == "b"


def test_descriptor_forms_keep_section_order_rules() -> None:
    assert_decode_error(_symbolic(PROPERTIES, []) + _wide(HEADER, []))
    assert_decode_error(_wide(AMQP_VALUE, 1) + _symbolic(AMQP_VALUE, 2))


def test_nan_body_roundtrips() -> None:
    body = math.nan
    back = roundtrip(Message(body=body))
    assert math.isnan(back.body)
