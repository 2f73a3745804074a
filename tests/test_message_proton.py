"""Differential tests of ``amqp_async.Message`` against python-qpid-proton 0.40's ``proton.Message``.

(a) proton builds and encodes a message; our ``Message.decode`` must read every field as proton's own decoder
    reads it, and as it was set.
(b) we build and encode a message; ``proton.Message.decode`` must read every field as our decoder reads it, and
    as it was set.

The encodings themselves need not be byte-identical (we leave out all-default sections, proton writes empty header
and properties lists and map32 application properties), so the tests compare what the two decoders make of each
other's bytes, field by field, after converting proton's classes to ours by name (``proton.symbol`` ->
``types.symbol`` ...; proton's ``memoryview`` binaries -> ``bytes``; ``AnnotationDict`` -> ``dict``; proton's plain
``int`` ulong message-ids -> ``types.ulong``).

Documented differences from proton (``amqp_async/message.py``) that the comparison normalises: unset ``user_id``
reads ``b''`` in proton and ``None`` here; unset ``content_type`` / ``content_encoding`` read ``symbol('None')`` in
proton (its getter wraps a NULL), so proton's raw C getter is used instead; a binary body is a ``memoryview`` in
proton. Limits of proton the generated values avoid: NUL characters in the fields proton passes as C strings
(address, subject, reply-to, group ids, content type / encoding), binary and described map keys, and described
values nested directly in described values (see ``test_codec_proton.py``).

Times: proton turns seconds into milliseconds with ``int(secs * 1000)`` (truncation) and back with ``ms / 1000.0``.
The strategies draw whole milliseconds and divide by 1000, and the expected wire value is computed the same way,
so every comparison is exact.
"""

from __future__ import annotations

import math
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amqp_async import EncodeError, Message, codec
from amqp_async import types as T
from amqp_async.protocol.payload import Gathered

proton = pytest.importorskip("proton", reason="python-qpid-proton is the oracle; CI installs it")
from proton import _message as _pm  # noqa: E402  (proton's raw C accessors, for NULL vs "" fields)

try:
    import strategies as S
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests import strategies as S

# ---------------------------------------------------------------------------------------------------------------
# converting between proton's classes and ours

try:
    from proton_values import from_proton, to_proton
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.proton_values import from_proton, to_proton


def proton_safe(value: Any) -> bool:
    """False for described-in-described values, which proton 0.40 cannot decode (test_codec_proton.py)."""
    if isinstance(value, T.Described):
        return not isinstance(value.value, T.Described) and proton_safe(value.value)
    if isinstance(value, list):
        return all(proton_safe(v) for v in value)
    if isinstance(value, dict):
        return all(proton_safe(k) and proton_safe(v) for k, v in value.items())
    if isinstance(value, T.Array):
        return all(proton_safe(v) for v in value.elements)
    return True


def _message_id_from_proton(value: Any) -> Any:
    if type(value) is int:  # proton's getter gives a ulong id as a plain int
        return T.ulong(value)
    if type(value) is memoryview:
        return bytes(value)
    return from_proton(value)


FIELDS = (
    "address",
    "annotations",
    "body",
    "content_encoding",
    "content_type",
    "correlation_id",
    "creation_time",
    "delivery_count",
    "durable",
    "expiry_time",
    "first_acquirer",
    "group_id",
    "group_sequence",
    "id",
    "inferred",
    "instructions",
    "priority",
    "properties",
    "reply_to",
    "reply_to_group_id",
    "subject",
    "ttl",
    "user_id",
)

_INTS = ("priority", "delivery_count", "group_sequence")
_BOOLS = ("durable", "first_acquirer", "inferred")
_FLOATS = ("ttl", "creation_time", "expiry_time")


def view_of_proton(message: Any) -> dict[str, Any]:
    """Every field of a proton.Message, in our classes and with our conventions for unset fields."""
    view: dict[str, Any] = {}
    for name in FIELDS:
        value = getattr(message, name)
        if name in ("id", "correlation_id"):
            value = _message_id_from_proton(value)
        elif name == "user_id":
            value = bytes(value) or None
        elif name == "content_type":
            raw = _pm.pn_message_get_content_type(message._msg)
            value = None if raw is None else T.symbol(raw)
        elif name == "content_encoding":
            raw = _pm.pn_message_get_content_encoding(message._msg)
            value = None if raw is None else T.symbol(raw)
        elif name in _INTS:
            value = int(value)
        elif name in _BOOLS:
            value = bool(value)
        else:
            value = from_proton(value)
        view[name] = value
    return view


def view_of_ours(message: Message) -> dict[str, Any]:
    view: dict[str, Any] = {}
    for name in FIELDS:
        value = getattr(message, name)
        if name in _INTS:
            assert isinstance(value, int) and not isinstance(value, bool), (name, value)
            value = int(value)
        elif name in _BOOLS:
            assert type(value) is bool, f"{name} reads {value!r}, not a bool"
        elif name in _FLOATS:
            assert type(value) is float, f"{name} reads {value!r}, not a float"
        view[name] = value
    return view


def assert_views_equal(actual: dict[str, Any], expected: dict[str, Any], what: str) -> None:
    problems = []
    for name in FIELDS:
        diff = S.first_difference(actual[name], expected[name], name)
        if diff:
            problems.append(diff)
    assert not problems, f"{what}:\n  " + "\n  ".join(problems)


def body_sections(raw: bytes) -> list[tuple[int, Any]]:
    """(descriptor code, value) of each body section (data, amqp-sequence, amqp-value) of an encoded message."""
    found = []
    position = 0
    while position < len(raw):
        start = position
        assert raw[position] == 0x00, raw.hex()
        descriptor, position = codec.decode_at(raw, position + 1)
        value, position = codec.decode_at(raw, position)
        assert type(descriptor) is T.ulong, raw[start:].hex()
        if descriptor in (0x75, 0x76, 0x77):
            found.append((int(descriptor), value))
    return found


def ours_decoding(raw: bytes) -> dict[str, Any]:
    message = Message()
    message.decode(raw)
    return view_of_ours(message)


def protons_decoding(raw: bytes) -> dict[str, Any]:
    message = proton.Message()
    message.decode(raw)
    return view_of_proton(message)


# ---------------------------------------------------------------------------------------------------------------
# what a message built from given fields must read as

DEFAULT_VIEW: dict[str, Any] = {
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
    "inferred": False,
    "instructions": None,
    "priority": 4,
    "properties": None,
    "reply_to": None,
    "reply_to_group_id": None,
    "subject": None,
    "ttl": 0.0,
    "user_id": None,
}


def secs_on_the_wire(seconds: float) -> float:
    """Seconds as proton (and we) carry them: int(secs * 1000) ms, read back as ms / 1000.0."""
    return int(seconds * 1000) / 1000.0


def expected_view(fields: dict[str, Any], body: Any, inferred: bool | None) -> dict[str, Any]:
    """The fields a decoder must report for a message built from ``fields``, ``body`` and ``inferred``."""
    view = dict(DEFAULT_VIEW)
    for name, value in fields.items():
        if name in ("id", "correlation_id") and type(value) is int:
            value = T.ulong(value)
        elif name == "user_id":
            value = bytes(value) or None
        elif name in ("content_type", "content_encoding"):
            value = T.symbol(value)
        elif name in _FLOATS:
            value = secs_on_the_wire(value)
        elif name in _INTS:
            value = int(value)
        elif name in ("annotations", "instructions"):
            value = {T.symbol(k) if type(k) is str else k: v for k, v in value.items()}
        view[name] = value
    if type(body) in (bytes, bytearray):  # not decimal128, a bytes subclass
        view["body"], view["inferred"] = bytes(body), inferred is not False
    elif isinstance(body, list) and inferred:
        view["body"], view["inferred"] = body, True
    else:
        view["body"], view["inferred"] = body, False
    return view


def build_ours(fields: dict[str, Any], body: Any, inferred: bool | None) -> Message:
    message = Message(body, **fields)
    if inferred is not None:
        message.inferred = inferred
    return message


def build_protons(fields: dict[str, Any], body: Any, inferred: bool | None) -> Any:
    """The same message built with proton.Message: inferred=None means proton's choice for our default."""
    message = proton.Message()
    for name, value in fields.items():
        if name in ("content_type", "content_encoding"):
            value = str(value)
        elif name in ("id", "correlation_id") and isinstance(value, T.ulong):
            value = proton.ulong(value)
        elif name in _INTS:
            value = int(value)
        else:
            value = to_proton(value)
        setattr(message, name, value)
    message.body = to_proton(body)
    if inferred is None:
        # our default: bytes in a data section (proton's inferred=True), everything else as amqp-value
        inferred = type(body) in (bytes, bytearray)  # not decimal128, a bytes subclass
    message.inferred = inferred
    return message


# ---------------------------------------------------------------------------------------------------------------
# strategies


def _no_nul(text: str) -> str:
    return text.replace("\x00", "\x01")


def _ms(low: int, high: int) -> st.SearchStrategy[float]:
    return st.integers(low, high).map(lambda ms: ms / 1000)


c_strings = S.strings().map(_no_nul)  # proton passes these fields as C strings
c_symbols = S.symbols().map(lambda s: T.symbol(_no_nul(s)))

message_ids = st.one_of(
    S.ulongs(),
    st.sampled_from([0, 1, 255, 256, 2**32, 2**63, 2**64 - 1]),
    st.integers(0, 2**64 - 1),
    S.uuids(),
    S.binaries(),
    S.strings(),
)


def _values(*, binary_keys: bool) -> st.SearchStrategy[Any]:
    return S.amqp_values(max_leaves=6, described_keys=False, binary_keys=binary_keys).filter(proton_safe)


def field_strategies(*, binary_keys: bool) -> dict[str, st.SearchStrategy[Any]]:
    values = _values(binary_keys=binary_keys)
    annotations = st.dictionaries(st.one_of(S.symbols(max_size=12), S.ulongs()), values, max_size=4)
    return {
        "address": c_strings,
        "annotations": annotations,
        "content_encoding": c_symbols,
        "content_type": c_symbols,
        "correlation_id": message_ids,
        "creation_time": _ms(-(2**43), 2**43),
        "delivery_count": S.uints(),
        "durable": st.booleans(),
        "expiry_time": _ms(-(2**43), 2**43),
        "first_acquirer": st.booleans(),
        "group_id": c_strings,
        "group_sequence": S.uints(),
        "id": message_ids,
        "instructions": annotations,
        "priority": S.ubytes(),
        "properties": st.dictionaries(S.strings(max_size=12), values, max_size=4),
        "reply_to": c_strings,
        "reply_to_group_id": c_strings,
        "subject": c_strings,
        "ttl": _ms(0, 2**32 - 1),
        "user_id": S.binaries().filter(bool),
    }


def bodies(*, binary_keys: bool, empty_sequences: bool) -> st.SearchStrategy[tuple[Any, bool | None]]:
    """(body, inferred) pairs covering every body kind; inferred None leaves our default."""
    values = _values(binary_keys=binary_keys)
    return st.one_of(
        st.tuples(st.none(), st.sampled_from([None, False, True])),
        st.tuples(values, st.sampled_from([None, False])),  # amqp-value (bytes: data unless inferred=False)
        st.tuples(st.one_of(S.strings(), S.doubles(), S.longs(), S.uuids(), S.scalar_arrays()), st.just(True)),
        st.tuples(S.binaries(), st.sampled_from([None, False, True])),
        st.tuples(st.lists(values, min_size=0 if empty_sequences else 1, max_size=4), st.sampled_from([False, True])),
        st.tuples(st.builds(T.Described, S.descriptors(), values).filter(proton_safe), st.none()),
    )


fields_a = st.fixed_dictionaries({}, optional=field_strategies(binary_keys=True))
fields_b = st.fixed_dictionaries({}, optional=field_strategies(binary_keys=False))

HEAVY = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# ---------------------------------------------------------------------------------------------------------------
# (a) proton encodes, we decode


@HEAVY
@given(fields_a, bodies(binary_keys=True, empty_sequences=True))
def test_proton_encodes_we_decode(fields: dict[str, Any], body_and_inferred: tuple[Any, bool | None]) -> None:
    body, inferred = body_and_inferred
    message = build_protons(fields, body, inferred)
    raw = message.encode()
    ours = ours_decoding(raw)
    want = expected_view(fields, body, message.inferred)
    assert_views_equal(ours, want, f"our decoding of proton's {raw.hex()}")


@HEAVY
@given(fields_b, bodies(binary_keys=False, empty_sequences=True))
def test_both_decoders_agree_on_protons_bytes(
    fields: dict[str, Any], body_and_inferred: tuple[Any, bool | None]
) -> None:
    body, inferred = body_and_inferred
    raw = build_protons(fields, body, inferred).encode()
    assert_views_equal(ours_decoding(raw), protons_decoding(raw), f"decoders disagree on proton's {raw.hex()}")


# ---------------------------------------------------------------------------------------------------------------
# (b) we encode, proton decodes


@HEAVY
@given(fields_b, bodies(binary_keys=False, empty_sequences=False))
def test_we_encode_proton_decodes(fields: dict[str, Any], body_and_inferred: tuple[Any, bool | None]) -> None:
    body, inferred = body_and_inferred
    raw = build_ours(fields, body, inferred).encode()
    theirs = protons_decoding(raw)
    assert_views_equal(theirs, expected_view(fields, body, inferred), f"proton's decoding of our {raw.hex()}")
    assert_views_equal(ours_decoding(raw), theirs, f"decoders disagree on our {raw.hex()}")


@HEAVY
@given(fields_b, bodies(binary_keys=False, empty_sequences=False))
def test_proton_reencodes_what_we_decoded_from_it(
    fields: dict[str, Any], body_and_inferred: tuple[Any, bool | None]
) -> None:
    # proton -> bytes -> ours -> bytes -> proton: proton reads back what it wrote
    body, inferred = body_and_inferred
    raw = build_protons(fields, body, inferred).encode()
    message = Message()
    message.decode(raw)
    assert_views_equal(protons_decoding(message.encode()), protons_decoding(raw), "proton -> ours -> proton")


@settings(max_examples=80, deadline=None)
@given(fields_b)
def test_same_fields_set_the_same_way(fields: dict[str, Any]) -> None:
    # setting a field reads back the same value in both libraries (before any encoding)
    ours = view_of_ours(build_ours(fields, None, None))
    theirs = view_of_proton(build_protons(fields, None, False))
    assert_views_equal(ours, theirs, "after set")


# ---------------------------------------------------------------------------------------------------------------
# hand cases


BENCHMARK_FIELDS: dict[str, Any] = {
    "id": "message-id-0001",
    "subject": "benchmark",
    "content_type": "text/plain",
    "durable": True,
    "properties": {"key1": "value1", "key2": 42},
}
BENCHMARK_BODY = "0123456789abcdef" * 3  # 48 characters


def test_benchmark_message_both_ways() -> None:
    assert len(BENCHMARK_BODY) == 48
    ours = Message(BENCHMARK_BODY, **BENCHMARK_FIELDS)
    theirs = proton.Message(BENCHMARK_BODY, **BENCHMARK_FIELDS)
    want = expected_view(BENCHMARK_FIELDS, BENCHMARK_BODY, None)
    assert_views_equal(view_of_ours(ours), view_of_proton(theirs), "as built")
    for raw in (ours.encode(), theirs.encode()):
        assert_views_equal(ours_decoding(raw), want, f"ours on {raw.hex()}")
        assert_views_equal(protons_decoding(raw), want, f"proton on {raw.hex()}")
    # same body section bytes, and proton's encoding is ours plus its empty header/properties habits only
    assert ours.encode().endswith(b"\x00\x53\x77\xa1\x30" + BENCHMARK_BODY.encode())
    assert theirs.encode().endswith(b"\x00\x53\x77\xa1\x30" + BENCHMARK_BODY.encode())


def test_defaults_match_protons() -> None:
    ours, theirs = Message(), proton.Message()
    assert_views_equal(view_of_ours(ours), view_of_proton(theirs), "defaults")
    assert Message.DEFAULT_PRIORITY == proton.Message.DEFAULT_PRIORITY
    # the documented differences: proton reads unset user_id as b'' and content_type as symbol('None')
    assert theirs.user_id == b"" and ours.user_id is None
    assert ours.content_type is None


def test_empty_messages_both_ways() -> None:
    assert_views_equal(ours_decoding(proton.Message().encode()), DEFAULT_VIEW, "proton's empty message")
    assert_views_equal(protons_decoding(Message().encode()), DEFAULT_VIEW, "our empty message")


_TRICKY_SECONDS = [0.001, 0.29, 0.3, 1.005, 1.1, 4.35, 0.57, 1234567.891, 4294967.295]
_TIME_CASES = [(name, secs) for name in ("ttl", "creation_time", "expiry_time") for secs in _TRICKY_SECONDS] + [
    (name, secs)
    for name in ("creation_time", "expiry_time")
    for secs in (1700000000.123, 2**40 / 1000 + 0.001, -0.29, -1.005, -1700000000.001)
]


@pytest.mark.parametrize("name, seconds", _TIME_CASES)
def test_seconds_truncate_to_milliseconds_as_protons(name: str, seconds: float) -> None:
    theirs_raw = proton.Message(**{name: seconds}).encode()
    ours_raw = Message(**{name: seconds}).encode()
    ours_value = getattr(Message(**{name: seconds}), name)
    assert ours_value == getattr(proton.Message(**{name: seconds}), name)
    assert ours_decoding(theirs_raw)[name] == ours_value
    assert protons_decoding(ours_raw)[name] == ours_value


@pytest.mark.parametrize(
    "body, inferred",
    [
        (b"bytes", True),
        (b"bytes", False),
        (b"", True),
        ([1, "two"], True),
        ([1, "two"], False),
        ([], True),
        ([], False),
        ("text", True),
        ({"k": 1}, False),
        (None, True),
        (uuid.UUID(int=5), False),
        (T.Described(T.ulong(0x1234), "v"), False),
        (T.Array(T.UNDESCRIBED, T.TypeCode.SYMBOL, T.symbol("a"), T.symbol("b")), False),
    ],
    ids=repr,
)
def test_body_sections_match_protons(body: Any, inferred: bool) -> None:
    # with the same inferred flag set, both libraries put the body in the same section, holding the same value
    # (proton picks the wide list32/map32/array32 forms, so the bytes differ)
    theirs = proton.Message(body=to_proton(body), inferred=inferred).encode()
    ours = Message(body=body, inferred=inferred).encode()
    diff = S.first_difference(body_sections(ours), body_sections(theirs))
    assert diff is None, f"{diff}: ours {ours.hex()} proton {theirs.hex()}"
    assert_views_equal(ours_decoding(theirs), protons_decoding(theirs), "proton's bytes")
    assert_views_equal(protons_decoding(ours), protons_decoding(theirs), "our bytes")


def test_binary_body_default_is_a_data_section_proton_reads() -> None:
    # our documented default: bytes go in a data section; proton reads it as a memoryview with inferred set
    raw = Message(body=b"\x00\x01payload").encode()
    theirs = proton.Message()
    theirs.decode(raw)
    assert type(theirs.body) is memoryview and bytes(theirs.body) == b"\x00\x01payload"
    assert theirs.inferred is True


@pytest.mark.parametrize("size", [65535, 65536, 1 << 20])
@pytest.mark.parametrize("footer", [None, {"f": 1}], ids=["no-footer", "footer"])
def test_large_binary_body_is_sent_uncopied_and_proton_reads_the_whole(size: int, footer: Any) -> None:
    """What a sender hands the engine for a large ``bytes`` body: the body itself, by reference, after the encoded
    sections before it (no copy of the body); joined, the parts are exactly ``encode()``, which proton reads."""
    body = bytes(range(256)) * (size // 256) + bytes(size % 256)
    message = Message(body=body, id="big", properties={"k": "v"}, footer=footer)
    payload = message._encode_payload()
    assert bytes(payload) == message.encode()
    gathered = size >= 65536 and footer is None
    assert isinstance(payload, Gathered) is gathered
    if isinstance(payload, Gathered):
        assert payload.parts[-1] is body  # the caller's object itself: not copied
    theirs = proton.Message()
    theirs.decode(bytes(payload))
    assert bytes(theirs.body) == body and theirs.id == "big" and theirs.properties == {"k": "v"}


def test_a_bytearray_body_is_copied_since_the_caller_may_change_it() -> None:
    body = bytearray(1 << 17)
    payload = Message(body=body)._encode_payload()
    assert type(payload) is bytes
    body[0] = 1
    assert payload[-len(body)] == 0


@pytest.mark.parametrize("field", ["annotations", "instructions"])
def test_annotation_keys_as_protons(field: str) -> None:
    value = {"str-key": 1, T.symbol("sym"): 2, T.ulong(3): "three"}
    ours = Message(**{field: value})
    theirs = proton.Message(**{field: to_proton(value)})
    S.assert_typed_equal(getattr(ours, field), from_proton(getattr(theirs, field)))
    S.assert_typed_equal(ours_decoding(theirs.encode())[field], protons_decoding(ours.encode())[field])


@pytest.mark.parametrize("field", ["annotations", "instructions"])
def test_annotation_key_added_after_set_as_protons(field: str) -> None:
    # proton's AnnotationDict turns a str key added after the dict was set into a symbol
    ours, theirs = Message(**{field: {}}), proton.Message(**{field: {}})
    getattr(ours, field)["late"] = 1
    getattr(theirs, field)["late"] = 1
    S.assert_typed_equal(ours_decoding(ours.encode())[field], ours_decoding(theirs.encode())[field])
    S.assert_typed_equal(protons_decoding(ours.encode())[field], {T.symbol("late"): 1})


@pytest.mark.parametrize("key", [T.symbol("sym"), T.char("c"), 7, T.ulong(1), None])
def test_property_keys_refused_as_by_proton(key: Any) -> None:
    with pytest.raises(proton.MessageException):
        proton.Message(properties={to_proton(key): 1}).encode()
    with pytest.raises(EncodeError):
        Message(properties={key: 1}).encode()


def test_property_key_str_subclass_accepted_as_by_proton() -> None:
    class Key(str):
        pass

    raw = Message(properties={Key("k"): 1}).encode()
    theirs = proton.Message(properties={Key("k"): 1}).encode()
    assert protons_decoding(raw)["properties"] == {"k": 1}
    S.assert_typed_equal(ours_decoding(theirs)["properties"], {"k": 1})


@pytest.mark.parametrize("name", ["colour", "message_id", "to", "absolute_expiry_time"])
def test_unknown_keyword_as_protons(name: str) -> None:
    with pytest.raises(AttributeError):
        proton.Message(**{name: 1})
    with pytest.raises(AttributeError):
        Message(**{name: 1})


@pytest.mark.parametrize(
    "value",
    [0, 1, 2**32, 2**63, 2**64 - 1, T.ulong(9), uuid.UUID(int=2**128 - 1), b"", b"\x00\xff", "", "id \U0001f600"],
    ids=repr,
)
@pytest.mark.parametrize("field", ["id", "correlation_id"])
def test_message_ids_both_ways(field: str, value: Any) -> None:
    expected = T.ulong(value) if isinstance(value, int) else value
    theirs = proton.Message(**{field: value}).encode()
    ours = Message(**{field: value}).encode()
    S.assert_typed_equal(ours_decoding(theirs)[field], expected)
    S.assert_typed_equal(protons_decoding(ours)[field], expected)


def test_symbol_message_id_as_protons() -> None:
    # proton sends a symbol id as a string (any str is a string message-id to proton)
    theirs = proton.Message(id=proton.symbol("sym")).encode()
    S.assert_typed_equal(ours_decoding(theirs)["id"], "sym")
    S.assert_typed_equal(protons_decoding(Message(id=T.symbol("sym")).encode())["id"], "sym")


@pytest.mark.parametrize(
    "fields",
    [
        {"group_sequence": 0},
        {"ttl": 0.0004},
        {"priority": 4, "durable": False, "delivery_count": 0},
        {"creation_time": 0, "expiry_time": 0.0},
    ],
    ids=repr,
)
def test_default_valued_fields_are_not_written(fields: dict[str, Any]) -> None:
    # proton writes none of these fields when they hold their defaults (it writes only empty header and
    # properties lists); with nothing else to write, so do we (never an empty payload)
    theirs = proton.Message(**fields).encode()
    assert theirs == bytes.fromhex("0053704500537345"), theirs.hex()
    assert Message(**fields).encode() == theirs


def test_several_data_sections_we_decode() -> None:
    # proton 0.40 cannot hold more than one data section; ours keeps them all, and proton's single ones round-trip
    raw = bytes.fromhex("005375a00161005375a00162")
    message = Message()
    message.decode(raw)
    assert [part.value for part in message.body] == [b"a", b"b"]
    single = proton.Message(body=b"a", inferred=True).encode()
    assert ours_decoding(single)["body"] == b"a"


def test_nan_and_special_floats_in_properties_both_ways() -> None:
    props = {"nan": math.nan, "inf": -math.inf, "neg0": -0.0, "f32": T.float32(1.5)}
    theirs = proton.Message(properties=to_proton(props)).encode()
    S.assert_typed_equal(ours_decoding(theirs)["properties"], props)
    S.assert_typed_equal(protons_decoding(Message(properties=props).encode())["properties"], props)
