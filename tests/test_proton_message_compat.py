"""``amqp_async.proton``'s ``Message`` and unsigned types beside python-qpid-proton, as the oracle.

* ``Message.encode()`` writes proton's bytes: a header section and a properties section always (empty lists when
  nothing is set in them), the header fields as proton writes them; both read each other's bytes back.
* An application property key that is not a string: ``MessageException``, with proton's message.
* ``ubyte(-1)`` and the other unsigned types: proton's ``AssertionError`` and message (also an ``EncodeError``).
* The deliberate differences of docs/proton.md: an unset ``content_type`` reads None (proton:
  ``symbol('None')``); a binary body reads back as ``bytes`` (proton: a ``memoryview`` of its buffer); an unsigned
  value too large for its type is refused (proton keeps it and fails, or truncates, later).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import amqp_async
import amqp_async.proton as ours

proton = pytest.importorskip("proton", reason="python-qpid-proton is the oracle (CI installs it)")

MESSAGES: list[dict[str, Any]] = [
    {},
    {"body": "x"},
    {"body": b"\x00\x01", "inferred": True},
    {"body": b"\x00\x01", "inferred": False},
    {"body": None, "id": 7},
    {"durable": True},
    {"priority": 4},
    {"priority": 5},
    {"ttl": 2},
    {"ttl": 1.5, "body": "x"},
    {"first_acquirer": True},
    {"delivery_count": 1},
    {"durable": True, "priority": 7, "ttl": 1.5, "first_acquirer": True, "delivery_count": 3, "body": "x"},
    {"durable": False, "priority": 4, "ttl": 0, "first_acquirer": False, "delivery_count": 0},
    {"subject": "s", "properties": {"k": 1}, "body": [1, 2]},
    {"body": [1, 2], "inferred": True},
    {"body": (1, 2), "inferred": True},  # any sequence is an amqp-sequence when inferred, as proton puts a tuple
    {"body": (1, 2)},
    {"address": "q", "reply_to": "r", "correlation_id": "c", "annotations": {"x-opt": 1}},
]


def both(fields: dict[str, Any]) -> tuple[bytes, bytes]:
    return ours.Message(**fields).encode(), bytes(proton.Message(**fields).encode())


def test_a_symbol_list_body_inferred_is_an_amqp_sequence_as_in_proton() -> None:
    mine = ours.Message(body=ours.SymbolList([ours.symbol("a")]), inferred=True).encode()
    theirs = bytes(proton.Message(body=proton.SymbolList([proton.symbol("a")]), inferred=True).encode())
    assert mine.hex() == theirs.hex()


@pytest.mark.parametrize("fields", MESSAGES, ids=lambda fields: ",".join(fields) or "default")
def test_encode_writes_proton_bytes(fields: dict[str, Any]) -> None:
    mine, theirs = both(fields)
    assert mine.hex() == theirs.hex()
    # each reads the other's bytes back
    back = ours.Message()
    back.decode(theirs)
    assert back.encode() == mine
    other = proton.Message()
    other.decode(mine)
    assert bytes(other.encode()) == theirs


def test_default_message_starts_with_an_empty_header_and_properties() -> None:
    # what programs that skip proton's header to reach the bare message rely on
    assert ours.Message().encode() == b"\x00\x53\x70\x45\x00\x53\x73\x45"


def test_sending_leaves_the_empty_sections_out() -> None:
    # the wire form (and the awaitable API's Message.encode) is unchanged: empty sections carry nothing
    assert ours.Message(body="x")._encode_payload() == amqp_async.Message(body="x").encode() == b"\x00\x53\x77\xa1\x01x"


# proton-c cuts the string fields of the properties section at a NUL (test_nul_in_a_string_field_is_kept); a lone
# surrogate is no string either side can encode (test_a_lone_surrogate_is_refused_by_both)
TEXT = st.text(alphabet=st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), max_size=5)


@settings(max_examples=200)
@given(
    st.fixed_dictionaries(
        {},
        optional={
            "durable": st.booleans(),
            "priority": st.integers(0, 255),
            "ttl": st.integers(0, 2**32 - 1).map(lambda ms: ms / 1000),
            "first_acquirer": st.booleans(),
            "delivery_count": st.integers(0, 2**32 - 1),
            "id": st.one_of(st.integers(0, 2**64 - 1), TEXT),
            "subject": TEXT,
            "body": st.one_of(st.none(), TEXT, st.integers(-(2**63), 2**63 - 1), st.lists(st.none())),
        },
    )
)
def test_header_and_properties_fields_encode_as_proton(fields: dict[str, Any]) -> None:
    mine, theirs = both(fields)
    assert mine.hex() == theirs.hex()


@pytest.mark.parametrize(
    "fields", [{"subject": "\ud800"}, {"body": "\udfff"}, {"properties": {"k\ud800": 1}}, {"body": ["\ud800" * 70]}]
)
def test_a_lone_surrogate_is_refused_by_both(fields: dict[str, Any]) -> None:
    """A str holding a lone surrogate has no UTF-8 form: proton raises UnicodeEncodeError, we raise the codec's
    EncodeError (amqp:invalid-field); both are ValueErrors, and neither writes anything."""
    with pytest.raises(ValueError):
        proton.Message(**fields).encode()
    with pytest.raises(amqp_async.EncodeError, match="not a valid AMQP string") as mine:
        ours.Message(**fields).encode()
    assert isinstance(mine.value, ValueError)


@pytest.mark.parametrize("key", [1, ours.symbol("s"), None, (1, 2)])
def test_non_string_property_key_raises_message_exception(key: Any) -> None:
    theirs_key = proton.symbol(key) if isinstance(key, ours.symbol) else key
    with pytest.raises(proton.MessageException) as theirs:
        proton.Message(properties={theirs_key: "v"}).encode()
    with pytest.raises(ours.MessageException) as mine:
        ours.Message(properties={key: "v"}).encode()
    assert str(mine.value) == str(theirs.value).replace("proton._data.symbol", "amqp_async.types.symbol")
    assert isinstance(mine.value, amqp_async.EncodeError)  # the awaitable API's error too


@pytest.mark.parametrize("name", ["ubyte", "ushort", "uint", "ulong"])
@pytest.mark.parametrize("value", [-1, -(2**70), -1.5])
def test_unsigned_types_refuse_negative_values_as_proton(name: str, value: Any) -> None:
    with pytest.raises(AssertionError) as theirs:
        getattr(proton, name)(value)
    with pytest.raises(AssertionError) as mine:
        getattr(ours, name)(value)
    assert type(mine.value).__mro__[-4:] == (AssertionError, *type(theirs.value).__mro__[1:])
    assert str(mine.value) == str(theirs.value)
    assert isinstance(mine.value, amqp_async.EncodeError)


@pytest.mark.parametrize("name", ["byte", "short", "int32", "timestamp"])
def test_signed_types_take_negative_values_as_proton(name: str) -> None:
    assert int(getattr(ours, name)(-1)) == int(getattr(proton, name)(-1)) == -1


@pytest.mark.parametrize("name", ["ubyte", "ushort", "uint", "ulong", "byte", "short", "int32"])
def test_too_large_values_are_refused_where_proton_keeps_them(name: str) -> None:
    # deliberate difference (docs/proton.md): proton keeps ubyte(2**70) and fails when it is encoded, or
    # truncates it; ours refuses it at once
    assert int(getattr(proton, name)(2**70)) == 2**70
    with pytest.raises(amqp_async.EncodeError):
        getattr(ours, name)(2**70)


def test_binary_body_is_a_data_section_unless_inferred_is_false() -> None:
    # deliberate difference (docs/proton.md): a bytes body with ``inferred`` not set goes in a data section (what
    # other AMQP clients send and expect), where proton puts it in an amqp-value section
    mine, theirs = both({"body": b"ab"})
    assert mine == b"\x00\x53\x70\x45\x00\x53\x73\x45\x00\x53\x75\xa0\x02ab"
    assert theirs == b"\x00\x53\x70\x45\x00\x53\x73\x45\x00\x53\x77\xa0\x02ab"


def test_nul_in_a_string_field_is_kept() -> None:
    # deliberate difference (docs/proton.md): proton-c writes the properties' strings as C strings, cut at a NUL
    mine, theirs = both({"subject": "a\x00b"})
    assert mine.endswith(b"\xa1\x03a\x00b") and theirs.endswith(b"\xa1\x01a")


def test_unset_content_type_is_none() -> None:
    # deliberate difference (docs/proton.md): proton reads an unset content type as symbol('None')
    assert proton.Message().content_type == proton.symbol("None")
    assert ours.Message().content_type is None
    decoded = ours.Message()
    decoded.decode(bytes(proton.Message(body="x").encode()))
    assert decoded.content_type is None


def test_binary_body_reads_back_as_bytes() -> None:
    # deliberate difference (docs/proton.md): proton's decoded binary body is a memoryview of its buffer
    raw = bytes(proton.Message(body=b"ab").encode())
    theirs = proton.Message()
    theirs.decode(raw)
    assert isinstance(theirs.body, memoryview)
    mine = ours.Message()
    mine.decode(raw)
    assert type(mine.body) is bytes and mine.body == b"ab"


@pytest.mark.parametrize(
    "fields",
    [
        {"id": 7, "correlation_id": 42, "priority": 9, "delivery_count": 2},
        {"id": "a", "correlation_id": "b"},  # (a binary one reads as a memoryview in proton: docs/proton.md)
        {},
    ],
)
def test_decoded_numbers_read_as_plain_ints_as_protons(fields: dict[str, Any]) -> None:
    """proton's Data reads a ulong id, a ubyte priority, a uint delivery-count as plain ints (ours read ulong,
    ubyte, uint: ``repr`` and ``type(x) is int`` differed); set again, an int id still goes as a ulong."""
    names = ("id", "correlation_id", "priority", "delivery_count")
    read = {}
    for module in (proton, ours):
        message = module.Message(**fields)
        message.decode(message.encode())
        read[module] = [(repr(getattr(message, name)), type(getattr(message, name)).__name__) for name in names]
    assert read[ours] == read[proton]
    reply = ours.Message(correlation_id=ours.Message(id=7).id)
    assert proton.Message(correlation_id=7).encode() == reply.encode()  # a ulong on the wire, as proton's
