"""The section reader (amqp_async.codec.section_reader) against Message.decode and python-qpid-proton's encoder:
whatever the pieces a message's bytes come in, the head decodes to the same fields, the body's pieces join to the
same content, the footer is the same; bad bytes give a DecodeError naming what is wrong."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from amqp_async import DecodeError, Message
from amqp_async.codec.section_reader import SectionReader
from amqp_async.codec.sections import AmqpSequence, Data
from amqp_async.types import symbol, ulong

try:
    from strategies import strings
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.strategies import strings


def read(data: bytes, cuts: list[int], max_kept: int = 1 << 20) -> tuple[SectionReader, bytes]:
    """Feed ``data`` cut at ``cuts``; the reader and the body content it passed through."""
    reader = SectionReader(max_kept=max_kept)
    pieces: list[bytes] = []
    previous = 0
    for cut in [*sorted(set(cuts)), len(data)]:
        pieces.extend(reader.feed(data[previous:cut]))
        previous = cut
    reader.finish()
    return reader, b"".join(pieces)


def head_fields(message: Message) -> tuple[Any, ...]:
    return (
        message.durable,
        message.priority,
        message.ttl,
        message.id,
        message.subject,
        message.content_type,
        message.properties,
        message.annotations,
        message.instructions,
    )


_SYMBOLS = st.text(alphabet="abcxyz-:", min_size=1, max_size=10).map(symbol)
_CODES = {"data": 0x75, "sections": 0x75, "value-binary": 0x77, "value-string": 0x77, "none": None}

messages = st.builds(
    lambda body_kind, body, subject, props, durable, annotations, footer: _message(
        body_kind, body, subject, props, durable, annotations, footer
    ),
    st.sampled_from(["data", "sections", "value-binary", "value-string", "none"]),
    st.binary(max_size=3000),
    st.none() | strings(),
    st.none() | st.dictionaries(strings(10), st.integers(-5, 5), max_size=3),
    st.booleans(),
    st.none() | st.dictionaries(_SYMBOLS, st.integers(0, 9), max_size=2),
    st.none() | st.dictionaries(_SYMBOLS, st.integers(0, 9), min_size=1, max_size=2),
)


def _message(
    body_kind: str,
    body: bytes,
    subject: str | None,
    props: dict[str, int] | None,
    durable: bool,
    annotations: dict[Any, int] | None,
    footer: dict[Any, int] | None,
) -> tuple[Message, bytes, int | None]:
    message = Message(subject=subject, durable=durable, id=uuid.UUID(int=7))
    if props:
        message.properties = props
    if annotations:
        message.annotations = annotations
    if footer:
        message.footer = footer
    if body_kind == "data":
        message.body = body
    elif body_kind == "sections":
        third = len(body) // 3
        message.body = [Data(body[:third]), Data(body[third : 2 * third]), Data(body[2 * third :])]
    elif body_kind == "value-binary":
        message.body = body
        message.inferred = False
    elif body_kind == "value-string":
        text = body.decode("latin-1")
        message.body = text
        body = text.encode()
    else:
        body = b""
    return message, body, _CODES[body_kind]


@given(messages, st.lists(st.integers(0, 4000), max_size=12))
def test_any_cut_gives_the_head_the_body_and_the_footer(
    case: tuple[Message, bytes, int | None], cuts: list[int]
) -> None:
    message, content, body_code = case
    data = message.encode()
    reader, passed = read(data, [cut for cut in cuts if cut < len(data)])
    assert not reader.stopped
    assert passed == content
    head = Message()
    assert reader.head is not None
    if reader.head:
        head.decode(reader.head)
    assert head_fields(head) == head_fields(message)
    if message.footer:
        footer = Message()
        footer.decode(reader.footer)
        assert footer.footer == message.footer
    else:
        assert reader.footer is None
    assert reader.body_code == body_code
    assert reader.body_is_text is (type(message.body) is str)


def test_a_large_data_section_passes_through_uncopied() -> None:
    body = bytes(range(256)) * 4096
    data = Message(body=body, subject="big").encode()
    reader = SectionReader()
    head_size = len(data) - len(body)
    first = reader.feed(data[: head_size + 100])
    middle_piece = data[head_size + 100 : head_size + 70000]
    middle = reader.feed(middle_piece)
    assert middle == [middle_piece] and middle[0] is middle_piece  # the piece itself, no copy
    rest = reader.feed(data[head_size + 70000 :])
    reader.finish()
    assert b"".join(first + middle + rest) == body
    head = Message()
    head.decode(reader.head)
    assert head.subject == "big" and head.body is None


def test_proton_encoded_messages_are_read_alike() -> None:
    proton = pytest.importorskip("proton")
    message = proton.Message(body=b"\x00\x01" * 5000, subject="s", properties={"k": 1}, durable=True, inferred=True)
    message.annotations = {symbol("x-opt-a"): "b"}
    data = message.encode()
    reader, passed = read(data, list(range(1, len(data), 997)))
    assert passed == b"\x00\x01" * 5000 and reader.body_code == 0x75
    head = Message()
    head.decode(reader.head)
    assert (head.subject, head.properties, head.durable, head.annotations) == ("s", {"k": 1}, True, {"x-opt-a": "b"})
    text = proton.Message(body="héllo" * 1000)
    reader, passed = read(text.encode(), [3, 50, 51, 2000])
    assert passed == ("héllo" * 1000).encode() and reader.body_is_text and reader.body_code == 0x77


def test_a_body_it_does_not_pass_through_stops_it_with_the_bytes_from_there() -> None:
    message = Message(body=[1, 2, 3], subject="seq")
    message.inferred = True  # an amqp-sequence section
    data = message.encode()
    reader, passed = read(data, [5, 12])
    assert reader.stopped and passed == b"" and reader.body_code == 0x76
    whole = Message()
    whole.decode(reader.head + reader.leftover())
    assert whole.body == [1, 2, 3] and whole.subject == "seq"
    value = Message(body={"a": 1}, subject="map").encode()
    reader, _ = read(value, [len(value) - 1])
    assert reader.stopped and reader.body_code == 0x77
    assert reader.leftover() == value[len(reader.head) :]


def test_descriptors_in_their_long_forms() -> None:
    section = b"\x00\x80" + (0x75).to_bytes(8, "big") + b"\xa0\x03abc"
    named = b"\x00\xa3\x10amqp:data:binary\xa0\x02de"
    reader, passed = read(section + named, [4, 11, 20])
    assert passed == b"abcde" and reader.head == b""
    sequence = Message()
    sequence.body = [AmqpSequence([1])]
    assert sequence.encode().startswith(b"\x00\x53\x76")


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"\x00\x53\x73\x45\x00\x53\x70\x45", "out of order"),
        (b"\x00\x53\x75\xa0\x01a\x00\x53\x77\xa0\x01b", "either amqp-value, data or amqp-sequence"),
        (b"\x00\x53\x75\x45", "a data section must hold binary"),
        (b"\x53\x75", "expected a message section"),
        (b"\x00\x53\x75\xb0\x00\x00\x00\x09abc", "ends inside a section"),
        (b"\x00\x53\x73\xff", "invalid constructor 0xff"),
        (b"\x00\x53\x7a\x45", "unknown message section 0x7a"),
        (b"\x00\xa3\x05nopes\x45", "unknown message section descriptor"),
        (b"\x00\x55\x75", "descriptor is a ulong or a symbol"),
        (b"", "no sections"),
    ],
)
def test_bad_bytes_are_a_decode_error_naming_the_fault(data: bytes, reason: str) -> None:
    with pytest.raises(DecodeError, match=reason):
        read(data, [1, 3])


def test_a_head_larger_than_the_limit_is_refused_before_it_is_all_held() -> None:
    message = Message(body=b"x", properties={"big": "v" * 5000})
    data = message.encode()
    reader = SectionReader(max_kept=1000)
    with pytest.raises(DecodeError, match="take more than 1000 bytes"):
        reader.feed(data[:100])  # the application-properties map's size says 5000 already


def test_bytes_after_the_end_are_refused() -> None:
    reader = SectionReader()
    reader.feed(Message(body=b"a").encode())
    reader.finish()
    with pytest.raises(DecodeError, match="after the end"):
        reader.feed(b"\x00")


def test_ulong_descriptor_code_outside_the_sections() -> None:
    data = b"\x00\x80" + int(ulong(0x99)).to_bytes(8, "big") + b"\x45"
    with pytest.raises(DecodeError, match="unknown message section 0x99"):
        read(data, [])
