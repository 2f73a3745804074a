"""The broker's reading and rewriting of a message's leading sections (amqp_async/broker/_sections.py), checked
against whole-message decoding: ours (property tests over many shapes of message) and python-qpid-proton's
encodings (an independent encoder: its own choice of list and map widths, empty sections).

- ``expiry`` gives what the decoded ttl and absolute-expiry-time say (the earlier of the two), and its quick check
  ``cannot_expire`` never says "no expiry" for a message that has one;
- ``merge_annotations``, ``delivery_failed`` and ``with_ttl`` change what they say and leave every other section
  byte for byte as it was;
- junk is not a message: no expiry, and the rewriting functions raise DecodeError.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amqp_async import DecodeError, Message
from amqp_async.broker._sections import (
    NO_TTL,
    annotations_of,
    cannot_expire,
    delivery_failed,
    expiry,
    merge_annotations,
    with_ttl,
    with_ttl_at,
)
from amqp_async.types import symbol

try:
    from message_sections import sections, without
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.message_sections import sections, without

NOW = 1_800_000_000.0
LONGS = st.integers(-(2**63), 2**63 - 1)


@st.composite
def messages(draw: st.DrawFn) -> Message:
    """Messages with any mix of header fields, annotations (small and over 255 bytes: map8 and map32), properties
    (up to all thirteen), application properties, bodies and footers."""
    message = Message()
    if draw(st.booleans()):
        message.durable = draw(st.booleans())
        message.priority = draw(st.integers(0, 9))
        message.ttl = draw(st.sampled_from([0, 0.001, 0.5, 30, 4_000_000]))
        message.first_acquirer = draw(st.booleans())
        message.delivery_count = draw(st.integers(0, 300))
    if draw(st.booleans()):
        message.instructions = {"x-opt-hint": draw(st.text(max_size=300))}
    if draw(st.booleans()):
        message.annotations = {"x-opt-a": draw(st.text(max_size=300)), "x-opt-n": draw(st.integers(0, 1000))}
    if draw(st.booleans()):
        message.id = draw(st.one_of(st.integers(0, 2**64 - 1), st.text(max_size=20)))
        message.subject = draw(st.none() | st.text(max_size=10))
        message.expiry_time = draw(st.sampled_from([0, NOW + 0.25, NOW + 3600, 1.0]))
        message.creation_time = draw(st.sampled_from([0, NOW - 5]))
        message.group_id = draw(st.none() | st.just("g"))
        message.reply_to_group_id = draw(st.none() | st.text(max_size=300))
    if draw(st.booleans()):
        message.properties = {"k": draw(LONGS), "s": draw(st.text(max_size=300))}
    message.body = draw(st.one_of(st.none(), st.text(max_size=300), st.binary(max_size=300), LONGS))
    if draw(st.booleans()):
        message.footer = {symbol("f"): 1}
    return message


def expected_expiry(message: Message, now: float) -> tuple[float | None, bool]:
    ttl = now + message.ttl if message.ttl else None
    absolute = message.expiry_time or None
    candidates = [value for value in (ttl, absolute) if value is not None]
    return (min(candidates) if candidates else None), ttl is not None


@settings(max_examples=300)
@given(messages())
def test_expiry_is_what_the_decoded_message_says(message: Message) -> None:
    payload = message.encode()
    expires, ttl_at = expiry(payload, NOW)
    expected, expected_ttl = expected_expiry(message, NOW)
    assert (ttl_at != NO_TTL) == expected_ttl
    if ttl_at > 0:  # a four-octet uint, overwritten in place: the same as a rewrite of the header
        assert with_ttl_at(payload, ttl_at, 1234) == with_ttl(payload, 1234)
    assert expires == pytest.approx(expected) if expected is not None else expires is None
    if cannot_expire(payload):
        assert expected is None


@settings(max_examples=200)
@given(messages(), st.dictionaries(st.sampled_from(["x-opt-dead", "x-opt-a", "x-opt-z"]), LONGS, max_size=3))
def test_merged_annotations_leave_every_other_section_byte_for_byte(message: Message, extra: dict[str, Any]) -> None:
    payload = message.encode()
    merged = merge_annotations(payload, extra)
    decoded = Message()
    decoded.decode(merged)
    assert decoded.annotations == ({**(message.annotations or {}), **extra} or None)
    assert annotations_of(merged) == (decoded.annotations or {})
    assert without(merged, "message-annotations") == without(payload, "message-annotations")


@settings(max_examples=200)
@given(messages())
def test_a_failed_delivery_counts_in_the_header_and_changes_nothing_else(message: Message) -> None:
    payload = message.encode()
    changed, count = delivery_failed(payload)
    decoded = Message()
    decoded.decode(changed)
    assert count == message.delivery_count + 1 == decoded.delivery_count
    assert decoded.first_acquirer is False
    assert (decoded.durable, decoded.priority, decoded.ttl) == (message.durable, message.priority, message.ttl)
    assert without(changed, "header") == without(payload, "header")


@settings(max_examples=200)
@given(messages(), st.integers(1, 2**32 - 1))
def test_the_reduced_ttl_is_written_in_the_header_alone(message: Message, milliseconds: int) -> None:
    payload = message.encode()
    changed = with_ttl(payload, milliseconds)
    decoded = Message()
    decoded.decode(changed)
    assert decoded.ttl == milliseconds / 1000
    assert decoded.delivery_count == message.delivery_count and decoded.durable == message.durable
    assert without(changed, "header") == without(payload, "header")


def test_python_qpid_protons_encodings() -> None:
    """proton writes an empty header and properties, and widths of its own choosing."""
    proton = pytest.importorskip("proton", reason="python-qpid-proton is the independent encoder")
    cases = [
        (proton.Message(body="plain"), None, False),
        (proton.Message(body="ttl", ttl=2.5), NOW + 2.5, True),
        (proton.Message(body="absolute", expiry_time=NOW + 9), NOW + 9, False),
        (proton.Message(body="both", ttl=60, expiry_time=NOW + 9, durable=True, id=7), NOW + 9, True),
        (proton.Message(body="wide", ttl=1, annotations={"x-opt-big": "a" * 400}, subject="s" * 300), NOW + 1, True),
    ]
    for message, expected, has_ttl in cases:
        payload = message.encode()
        expires, ttl_at = expiry(payload, NOW)
        assert (ttl_at != NO_TTL) == has_ttl, message.body
        assert expires == pytest.approx(expected) if expected is not None else expires is None, message.body
        merged = merge_annotations(payload, {"x-opt-dead-letter-reason": symbol("expired")})
        back = proton.Message()
        back.decode(merged)
        assert back.annotations["x-opt-dead-letter-reason"] == "expired"
        assert back.body == message.body
        assert without(merged, "message-annotations") == without(payload, "message-annotations")
        assert set(sections(merged)) >= {"header", "message-annotations", "properties"}


@pytest.mark.parametrize("descriptor", [0x24, 0x1D, 0x28, 0x7777])
def test_an_applications_described_annotation_is_kept_as_it_came(descriptor: int) -> None:
    """A described value in the message's own annotations is the application's (§3.2.3), whatever its descriptor:
    read (``annotations_of``) and merged into (``merge_annotations``, a modified outcome's annotations, a dead
    letter's reason) as proton wrote it, not as the frames' type of that descriptor (0x24 accepted, 0x1d error,
    0x28 source), which read it as another thing or refused it."""
    proton = pytest.importorskip("proton", reason="python-qpid-proton is the independent encoder")
    value = proton.Described(proton.ulong(descriptor), [1, 2])
    payload = proton.Message(body="b", annotations={proton.symbol("x-opt-v"): value}).encode()
    (read,) = annotations_of(payload).values()
    assert (read.descriptor, read.value) == (descriptor, [1, 2])
    merged = merge_annotations(payload, {"x-opt-added": "yes"})
    back = proton.Message()
    back.decode(merged)
    assert back.annotations == {"x-opt-v": value, "x-opt-added": "yes"}


@pytest.mark.parametrize("junk", [b"", b"\x00", b"\x00\x53", b"junk bytes", b"\x00\x53\x70\xc0\xff\x05", b"\xff" * 40])
def test_junk_has_no_expiry_and_is_not_rewritten(junk: bytes) -> None:
    assert expiry(junk, NOW) == (None, False)
    with pytest.raises(DecodeError):
        merge_annotations(junk + b"\x00\x53\x70\xc0\x10", {"x-opt-a": 1})
    with pytest.raises(DecodeError):
        delivery_failed(b"\x00\x53\x70\xd0\x00\x00\x00\x09" + junk)
