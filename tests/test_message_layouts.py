"""The layout fast path of ``Message.decode`` (amqp_async/message/_layouts.py) against the general decoder.

A layout, learnt from one message, must decode every message of that length exactly as the general decoder does
(the same attributes, of the same classes), or step aside: a message it does not fit, or a string that is not
UTF-8, goes to the general decoder, which raises what it raises. The tests learn layouts from generated messages
and decode variations of their bytes both ways; python-qpid-proton is the oracle for messages it builds.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amqp_async import DecodeError, Message
from amqp_async import types as T
from amqp_async.message import _layouts as layouts

try:
    import strategies as S
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests import strategies as S

proton = pytest.importorskip("proton", reason="python-qpid-proton is the oracle; CI installs it")


@pytest.fixture(autouse=True)
def fresh_layouts() -> Iterator[None]:
    layouts.forget()
    yield
    layouts.forget()


def _outcome(decode: Callable[[Message, bytes], None], data: bytes) -> Any:
    """What ``decode`` makes of ``data`` in a fresh message: its attributes, or the error's text."""
    message = Message.__new__(Message)
    try:
        decode(message, data)
    except DecodeError as exc:
        return f"DecodeError: {exc}"
    return message.__dict__


def general(data: bytes) -> Any:
    """What the general decoder makes of ``data``."""
    return _outcome(Message._decode_sections, data)


def decoded(data: bytes) -> Any:
    """What ``Message.decode`` (layouts first) makes of ``data``."""
    return _outcome(Message.decode, data)


def learnt(data: bytes) -> int:
    """Decode ``data`` twice (a length is learnt at its second message); the number of layouts for its length."""
    Message().decode(data)
    Message().decode(data)
    return len(layouts.layouts_for(len(data)) or ())


def same(left: Any, right: Any) -> bool:
    """The same error, or the same attributes (in any order) equal in value and type, all the way down (NaN equal
    to NaN, -0.0 not to 0.0)."""
    if isinstance(left, str) or isinstance(right, str):
        return left == right
    return left.keys() == right.keys() and all(S.typed_equal(value, right[name]) for name, value in left.items())


values = S.amqp_values(max_leaves=6)
fields = st.fixed_dictionaries(
    {},
    optional={
        "id": st.one_of(S.ulongs(), S.uuids(), S.binaries(), S.strings()),
        "correlation_id": st.one_of(S.ulongs(), S.strings()),
        "subject": S.strings(),
        "reply_to": S.strings(),
        "content_type": S.symbols(),
        "user_id": S.binaries().filter(bool),
        "creation_time": st.integers(0, 2**41).map(lambda ms: ms / 1000),
        "group_sequence": S.uints(),
        "durable": st.booleans(),
        "priority": S.ubytes(),
        "ttl": st.integers(1, 2**31).map(lambda ms: ms / 1000),
        "properties": st.dictionaries(S.strings(max_size=10), values, max_size=4),
        "annotations": st.dictionaries(S.symbols(max_size=10), values, max_size=3),
        "instructions": st.dictionaries(S.symbols(max_size=10), values, max_size=2),
    },
)
# Bodies around the length above which a hole is sliced rather than read with the fixed bytes (_SLICED_ABOVE).
long_bodies = st.one_of(st.binary(min_size=250, max_size=300), st.text(min_size=250, max_size=300))
bodies = st.one_of(values, S.binaries(max_size=64), long_bodies, st.none())
wide_int32s = S.int32s().filter(lambda value: not -128 <= value <= 127)  # the 4-byte int encoding, not smallint
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(fields, bodies, st.data())
def test_variations_of_a_learnt_message_decode_as_the_general_decoder(
    message_fields: dict[str, Any], body: Any, data: st.DataObject
) -> None:
    layouts.forget()  # per example (the fixture runs once per test)
    raw = Message(body, **message_fields).encode()
    learnt(raw)
    assert same(decoded(raw), general(raw))
    if not raw:
        return  # an empty message (no fields, no body) has no byte to vary
    for _ in range(8):
        mutated = bytearray(raw)
        for position in data.draw(st.lists(st.integers(0, len(raw) - 1), min_size=1, max_size=3)):
            mutated[position] = data.draw(st.integers(0, 255))
        variant = bytes(mutated)
        assert same(decoded(variant), general(variant)), variant.hex(" ")


@SETTINGS
@given(
    st.lists(
        st.tuples(S.ulongs(), wide_int32s, S.timestamps(), S.uuids(), S.binaries(max_size=16)), min_size=2, max_size=8
    )
)
def test_a_producers_messages_decode_through_one_layout(rows: list[tuple[Any, ...]]) -> None:
    """Messages alike but for their fixed-width values: each decodes right, the general decoder runs twice."""
    counted = []
    general_decoder = Message._decode_sections

    def counting(message: Message, data: bytes) -> None:
        counted.append(len(data))
        general_decoder(message, data)

    def build(row: tuple[Any, ...]) -> Message:
        identifier, number, stamp, correlation, blob = row
        return Message(
            {"sequence": number, "at": stamp, "blob": blob.ljust(16, b"\0")[:16]},
            id=T.ulong(identifier | 2**63),  # the 8-byte ulong encoding, whatever the value
            correlation_id=correlation,
            properties={"n": T.int32(number), "tag": "abcd"},
        )

    layouts.forget()  # per example (the fixture runs once per test)
    messages = [build(row) for row in rows]
    encodings = [message.encode() for message in messages]
    assert len({len(raw) for raw in encodings}) == 1
    expected = [general(raw) for raw in encodings]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Message, "_decode_sections", counting)
        for _ in range(2):
            for message, raw, attributes in zip(messages, encodings, expected, strict=True):
                received = Message()
                received.decode(raw)
                assert received == message
                assert same(received.__dict__, attributes)
    assert len(counted) == 2


def test_protons_messages_decode_through_a_layout_as_proton_reads_them() -> None:
    """The C ``direct`` example's messages (an id and a map body), built by python-qpid-proton."""
    for sequence in (1000, 1001, 70000, 2**31 - 1, -5000):
        sent = proton.Message(id=proton.ulong(2**40 + sequence), body={"sequence": proton.int32(sequence)})
        sent.subject = "same-length"
        raw = sent.encode()
        received = Message()
        received.decode(raw)
        assert received.id == 2**40 + sequence and type(received.id) is T.ulong
        assert received.body == {"sequence": sequence} and type(received.body["sequence"]) is T.int32
        assert received.subject == "same-length"
        assert same(received.__dict__, general(raw))
    assert len(layouts.layouts_for(len(raw)) or ()) == 1


def test_a_length_is_learnt_at_its_second_message() -> None:
    raw = Message(b"0123456789", id=T.ulong(7)).encode()
    Message().decode(raw)
    assert layouts.layouts_for(len(raw)) is None
    Message().decode(raw)
    assert len(layouts.layouts_for(len(raw)) or ()) == 1


def test_a_string_that_is_not_utf8_goes_to_the_general_decoder_which_names_the_error() -> None:
    raw = Message("body", subject="abcd").encode()
    assert learnt(raw) == 1
    broken = raw.replace(b"abcd", b"ab\xff\xfe")
    with pytest.raises(DecodeError, match="invalid UTF-8"):
        Message().decode(broken)


def test_bytes_outside_the_holes_that_differ_miss_the_layout() -> None:
    raw = Message({"key": 1}, content_type="text/plain").encode()
    assert learnt(raw) == 1
    other = raw.replace(b"text/plain", b"text/xhtml")  # a symbol is part of the layout, not a hole
    assert decoded(other)["_props"][6] == "text/xhtml"
    renamed = raw.replace(b"key", b"kez")  # and so is a map key
    assert decoded(renamed)["body"] == {"kez": 1}


@pytest.mark.parametrize(
    "message",
    [
        pytest.param(Message(list(range(1000, 1000 + layouts.MAX_VALUES))), id="too many values"),
        pytest.param(Message(None, annotations={"x" * (layouts.MAX_FIXED_BYTES + 1): 1}), id="too many fixed bytes"),
        pytest.param(Message(T.Described(T.ulong(0x1234), 5)), id="a described value"),
        pytest.param(Message(T.Array(T.UNDESCRIBED, T.TypeCode.INT, 1, 2)), id="an array"),
        pytest.param(Message([b"a", b"b"], inferred=True), id="a list body (amqp-sequence)"),
    ],
)
def test_messages_a_layout_does_not_cover_are_not_learnt_and_decode_right(message: Message) -> None:
    raw = message.encode()
    assert learnt(raw) == 0
    assert same(decoded(raw), general(raw))


def test_a_length_that_does_not_fit_a_layout_is_traced_ever_more_rarely(monkeypatch: pytest.MonkeyPatch) -> None:
    traced = []
    generate = layouts._generate

    def counting(data: bytes, reference: dict[str, Any]) -> Any:
        traced.append(len(data))
        return generate(data, reference)

    monkeypatch.setattr(layouts, "_generate", counting)
    raw = Message(T.Described(T.ulong(0x1234), 5)).encode()
    for _ in range(1000):
        assert decoded(raw)["body"] == T.Described(T.ulong(0x1234), 5)
    assert len(traced) == 9  # at the 2nd, 4th, ... 512th


def test_a_footer_is_not_learnt() -> None:
    raw = Message("body").encode() + b"\x00\x53\x78\xc1\x05\x02\xa1\x01k\x40"  # footer {"k": None}
    assert learnt(raw) == 0
    assert decoded(raw)["footer"] == {"k": None}


def test_layouts_per_length_are_bounded() -> None:
    lengths = set()
    for index in range(layouts.LAYOUTS_PER_LENGTH + 4):
        raw = Message("body", content_type=f"type/{index:03}").encode()
        lengths.add(len(raw))
        learnt(raw)
        assert decoded(raw)["_props"][6] == f"type/{index:03}"
    assert len(lengths) == 1
    assert len(layouts.layouts_for(lengths.pop()) or ()) == layouts.LAYOUTS_PER_LENGTH


def test_lengths_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(layouts, "MAX_LENGTHS", 3)
    for size in range(10):
        learnt(Message(b"x" * size).encode())
    assert len(layouts._layouts) == 3
    assert decoded(Message(b"y" * 9).encode())["body"] == b"y" * 9


def test_the_values_of_all_layouts_together_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(layouts, "MAX_TOTAL_VALUES", 12)
    for size in range(10):  # five values each: the body map's two keys and two values, its own
        learnt(Message({"a": T.uint(size + 1000), "b": b"x" * size}).encode())
    assert len(layouts._layouts) == 2
    assert decoded(Message({"a": T.uint(7), "b": b"y" * 9}).encode())["body"] == {"a": 7, "b": b"y" * 9}


def test_a_layout_that_misreads_its_own_message_is_not_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    real_sections = layouts._Generator.sections

    def wrong(generator: Any, reference: dict[str, Any]) -> list[str]:
        return [*real_sections(generator, reference), "d['body'] = 'not what the bytes say'"]

    monkeypatch.setattr(layouts._Generator, "sections", wrong)
    raw = Message("body").encode()
    assert learnt(raw) == 0
    assert decoded(raw)["body"] == "body"


def test_number_holes_cover_every_fixed_width_type() -> None:
    """One struct call reads them all; each comes back in the class the general decoder gives it."""
    body = [
        T.ubyte(200),
        T.byte(-3),
        T.ushort(60000),
        T.short(-30000),
        T.uint(4_000_000_000),
        T.int32(-2_000_000_000),
        T.float32(1.5),
        T.ulong(2**63),
        -(2**60),
        2.25,
        T.timestamp(1_700_000_000_000),
        T.char("x"),
        T.decimal32(0x01020304),
    ]
    raw = Message(body).encode()
    assert learnt(raw) == 1
    changed = bytearray(raw)
    struct.pack_into(">Q", changed, raw.index(struct.pack(">Q", 2**63)), 12345)
    assert same(decoded(bytes(changed)), general(bytes(changed)))
    assert decoded(bytes(changed))["body"][7] == 12345
