"""Composite types (performatives, delivery states, termini, SASL, transactions, sections): encode and decode.

Expected bytes are written by hand from the spec (§1.6 format codes, §1.4 trailing nulls omitted); python-qpid-
proton's ``Data`` codec is the independent oracle for the rest.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from amqp_async.codec import DecodeError, EncodeError, decode, encode
from amqp_async.codec.composite import Composite, F, composite_types
from amqp_async.codec.conditions import DECODE_ERROR, NOT_FOUND
from amqp_async.codec.delivery_states import Accepted, Modified, Received, Rejected, Released
from amqp_async.codec.performatives import (
    PERFORMATIVES,
    RCV_FIRST,
    RCV_SECOND,
    RECEIVER,
    SENDER,
    SND_MIXED,
    SND_SETTLED,
    Attach,
    Begin,
    Close,
    Detach,
    Disposition,
    End,
    Error,
    Flow,
    Open,
    Transfer,
)
from amqp_async.codec.sasl_frames import (
    SASL_AUTH,
    SASL_OK,
    SaslChallenge,
    SaslInit,
    SaslMechanisms,
    SaslOutcome,
    SaslResponse,
)
from amqp_async.codec.sections import (
    SECTIONS,
    AmqpSequence,
    AmqpValue,
    ApplicationProperties,
    Data,
    DeliveryAnnotations,
    Footer,
    Header,
    MessageAnnotations,
    Properties,
)
from amqp_async.codec.terminus import (
    CONFIGURATION,
    LINK_DETACH,
    SESSION_END,
    DeleteOnClose,
    DeleteOnNoLinks,
    DeleteOnNoLinksOrMessages,
    DeleteOnNoMessages,
    Source,
    Target,
)
from amqp_async.codec.transactions import (
    LOCAL_TRANSACTIONS,
    Coordinator,
    Declare,
    Declared,
    Discharge,
    TransactionalState,
)
from amqp_async.types import UNDESCRIBED, Array, Described, TypeCode, symbol, timestamp, ubyte, uint, ulong

proton = pytest.importorskip("proton")


def h(text: str) -> bytes:
    """Bytes from spaced hex, so that expected encodings can be read field by field."""
    return bytes.fromhex(text)


# One value of every composite type, with fields of every kind set.
SAMPLES: list[Any] = [
    Open(container_id="c1"),
    Open(
        "c2",
        "host.example",
        max_frame_size=65536,
        channel_max=255,
        idle_time_out=30000,
        outgoing_locales=["en-US"],
        incoming_locales=("en-US", "fr"),
        offered_capabilities=["ANONYMOUS-RELAY"],
        desired_capabilities=[symbol("DELAYED_DELIVERY"), symbol("SHARED-SUBS")],
        properties={"product": "amqp_async", symbol("version"): "0.1"},
    ),
    Begin(remote_channel=3, next_outgoing_id=1, incoming_window=100, outgoing_window=200, handle_max=7),
    Begin(next_outgoing_id=0, incoming_window=2048, outgoing_window=2048, properties={"k": [1, 2]}),
    Attach(
        name="link-1",
        handle=0,
        role=RECEIVER,
        snd_settle_mode=SND_SETTLED,
        rcv_settle_mode=RCV_SECOND,
        source=Source(
            address="queue-a",
            durable=CONFIGURATION,
            expiry_policy=LINK_DETACH,
            timeout=60,
            dynamic=False,
            distribution_mode=symbol("copy"),
            filter={symbol("selector"): Described(symbol("apache.org:selector-filter:string"), "a = 1")},
            default_outcome=Released(),
            outcomes=[Accepted.descriptor_name, Rejected.descriptor_name],
            capabilities=["queue"],
        ),
        target=Target(address="queue-b", capabilities=("topic",)),
        unsettled={b"tag-1": Accepted(), b"tag-2": None},
        incomplete_unsettled=True,
        initial_delivery_count=10,
        max_message_size=1 << 40,
        offered_capabilities=["x"],
        desired_capabilities=["y"],
        properties={"p": 1},
    ),
    Attach(
        name="s",
        handle=1,
        role=SENDER,
        target=Target(dynamic=True, dynamic_node_properties={"lifetime-policy": DeleteOnClose()}),
    ),
    Flow(incoming_window=10, next_outgoing_id=5, outgoing_window=10),
    Flow(
        next_incoming_id=1,
        incoming_window=2,
        next_outgoing_id=3,
        outgoing_window=4,
        handle=5,
        delivery_count=6,
        link_credit=7,
        available=8,
        drain=True,
        echo=True,
        properties={"a": None},
    ),
    Transfer(handle=0, delivery_id=0, delivery_tag=b"\x00", message_format=0, settled=True),
    Transfer(
        handle=1,
        delivery_id=2,
        delivery_tag=b"tag",
        message_format=0x80013700,
        settled=False,
        more=True,
        rcv_settle_mode=RCV_FIRST,
        state=TransactionalState(txn_id=b"txn", outcome=Accepted()),
        resume=True,
        aborted=True,
        batchable=True,
    ),
    Transfer(handle=3),
    Disposition(role=RECEIVER, first=1, last=5, settled=True, state=Accepted(), batchable=True),
    Disposition(role=SENDER, first=0),
    Detach(handle=2),
    Detach(handle=2, closed=True, error=Error(NOT_FOUND, "no such node", {"address": "q"})),
    End(),
    End(Error(condition=symbol("amqp:session:window-violation"))),
    Close(),
    Close(error=Error(symbol("amqp:connection:forced"), description="bye")),
    Error(DECODE_ERROR),
    Received(section_number=1, section_offset=1 << 33),
    Accepted(),
    Rejected(),
    Rejected(Error(symbol("amqp:invalid-field"))),
    Released(),
    Modified(),
    Modified(delivery_failed=True, undeliverable_here=False, message_annotations={"x-opt-retries": 3}),
    Source(),
    Target(address="t"),
    DeleteOnClose(),
    DeleteOnNoLinks(),
    DeleteOnNoMessages(),
    DeleteOnNoLinksOrMessages(),
    SaslMechanisms(sasl_server_mechanisms=["PLAIN", "ANONYMOUS"]),
    SaslInit(mechanism=symbol("PLAIN"), initial_response=b"\x00user\x00pass", hostname="h"),
    SaslChallenge(challenge=b"c"),
    SaslResponse(response=b""),
    SaslOutcome(code=SASL_OK),
    SaslOutcome(code=SASL_AUTH, additional_data=b"why"),
    Coordinator(),
    Coordinator(capabilities=[LOCAL_TRANSACTIONS]),
    Declare(),
    Declare(global_id=b"gid"),
    Discharge(txn_id=b"\x01\x02", fail=True),
    Declared(txn_id=b"\x01"),
    TransactionalState(txn_id=b"\x01"),
    Header(),
    Header(durable=True, priority=9, ttl=1000, first_acquirer=True, delivery_count=2),
    Properties(),
    Properties(
        message_id=uuid.UUID(int=7),
        user_id=b"guest",
        to="/queue/a",
        subject="subj",
        reply_to="/queue/b",
        correlation_id=ulong(42),
        content_type=symbol("text/plain"),
        content_encoding=symbol("utf-8"),
        absolute_expiry_time=timestamp(1700000000000),
        creation_time=timestamp(1600000000000),
        group_id="g",
        group_sequence=3,
        reply_to_group_id="rg",
    ),
    DeliveryAnnotations({symbol("x-opt-a"): 1}),
    MessageAnnotations({symbol("x-opt-b"): "v", ulong(5): None}),
    ApplicationProperties({"colour": "red", "n": 1}),
    Data(b"\x00\x01payload"),
    AmqpSequence([1, "two", None]),
    AmqpValue("hello"),
    AmqpValue(None),
    AmqpValue({"k": [1, 2.5]}),
    Footer({symbol("x-hash"): b"\xff"}),
]


@pytest.mark.parametrize("value", SAMPLES, ids=lambda v: type(v).__name__)
def test_round_trip(value: Any) -> None:
    data = encode(value)
    decoded = decode(data)
    assert type(decoded) is type(value)
    assert decoded == value
    # Re-encoding what was decoded gives the same bytes.
    assert encode(decoded) == data


def test_every_composite_type_has_a_sample() -> None:
    sampled = {type(value) for value in SAMPLES}
    missing = [name for name, cls in composite_types().items() if cls not in sampled and cls.__module__ != __name__]
    assert missing == []
    assert set(SECTIONS.values()) <= sampled


@pytest.mark.parametrize("value", SAMPLES, ids=lambda v: type(v).__name__)
def test_proton_reads_what_we_write_and_we_read_what_proton_writes(value: Any) -> None:
    """proton's codec decodes our bytes to the same described value, and its re-encoding decodes back to ours."""
    ours = encode(value)
    data = proton.Data()
    data.decode(ours)
    data.rewind()
    assert data.next() is not None
    try:
        described = data.get_object()
    except ValueError as exc:  # proton's Python binding cannot use binary (memoryview) as a dict key
        assert "memoryview" in str(exc)
        pytest.skip("proton cannot decode a map with binary keys into Python")
    assert isinstance(described, proton.Described)
    assert described.descriptor == value.descriptor_code
    theirs = data.encode()
    assert decode(theirs) == value


# --- exact bytes -------------------------------------------------------------------------------------------


def test_begin_trailing_nulls_omitted() -> None:
    begin = Begin(remote_channel=None, next_outgoing_id=0, incoming_window=2048, outgoing_window=2048)
    assert encode(begin) == h(
        "00 53 11"  # descriptor: smallulong 0x11 (amqp:begin:list)
        " c0 0d 04"  # list8, 13 bytes, 4 fields (handle-max and the rest are omitted)
        " 40"  # remote-channel: null
        " 43"  # next-outgoing-id: uint0
        " 70 00 00 08 00"  # incoming-window: uint 2048
        " 70 00 00 08 00"  # outgoing-window: uint 2048
    )


def test_transfer_bytes() -> None:
    transfer = Transfer(handle=0, delivery_id=5, delivery_tag=b"\x01", message_format=0, settled=False)
    assert encode(transfer) == h("00 53 14 c0 09 05 43 52 05 a0 01 01 43 42")


def test_disposition_bytes_with_nested_outcome() -> None:
    disposition = Disposition(role=RECEIVER, first=3, settled=True, state=Accepted())
    assert encode(disposition) == h("00 53 15 c0 0a 05 41 52 03 40 41 00 53 24 45")


def test_empty_composites_are_list0() -> None:
    assert encode(Accepted()) == h("00 53 24 45")
    assert encode(Close()) == h("00 53 18 45")
    assert encode(Header()) == h("00 53 70 45")
    assert encode(Source()) == h("00 53 28 45")


def test_fields_equal_to_their_default_are_sent_as_null() -> None:
    # more/aborted/batchable False and the settle modes at their defaults are all omitted.
    assert encode(Transfer(handle=7, more=False, aborted=False, batchable=False)) == h("00 53 14 c0 03 01 52 07")
    attach = Attach(name="a", handle=0, role=SENDER, snd_settle_mode=SND_MIXED, rcv_settle_mode=RCV_FIRST)
    assert encode(attach) == h("00 53 12 c0 06 03 a1 01 61 43 42")
    # A default in the middle becomes a null that is still sent.
    assert encode(Source(address="q", durable=0, timeout=0, dynamic=True)) == h(
        "00 53 28 c0 08 05 a1 01 71 40 40 40 41"
    )


def test_list8_to_list32_boundary() -> None:
    # Items of container-id "x" * n take 2 + n bytes; list8's size (count byte + items) must fit one byte.
    fits = encode(Open("x" * 252))
    assert fits[3:6] == h("c0 ff 01")
    wide = encode(Open("x" * 253))
    assert wide[3:12] == h("d0 00 00 01 03 00 00 00 01")
    assert decode(fits) == Open("x" * 252)
    assert decode(wide) == Open("x" * 253)


def test_multiple_field_is_an_array() -> None:
    data = encode(Open("c", offered_capabilities=["A", "BC"]))
    assert data == h("00 53 10 c0 13 08 a1 01 63 40 40 40 40 40 40 e0 07 02 a3 01 41 02 42 43")


def test_error_field_bytes() -> None:
    assert encode(Close(Error(symbol("a:b"), "d"))) == h("00 53 18 c0 0f 01 00 53 1d c0 09 02 a3 03 61 3a 62 a1 01 64")


# --- decoding rules -----------------------------------------------------------------------------------------


def test_defaults_applied_for_missing_fields() -> None:
    source = decode(h("00 53 28 45"))
    assert source.durable == 0
    assert source.expiry_policy == SESSION_END
    assert type(source.expiry_policy) is symbol
    assert source.timeout == 0
    assert source.dynamic is False
    assert source.address is None
    open_ = decode(h("00 53 10 c0 03 01 a1 00"))
    assert open_.container_id == ""
    assert open_.max_frame_size == 4294967295
    assert open_.channel_max == 65535
    header = decode(h("00 53 70 45"))
    assert (header.durable, header.priority, header.first_acquirer, header.delivery_count) == (False, 4, False, 0)
    assert type(header.priority) is ubyte


def test_defaults_applied_for_explicit_nulls() -> None:
    # attach with every optional field an explicit null
    data = h("00 53 12 c0 11 0e a1 01 6c 43 41") + b"\x40" * 11
    attach = decode(data)
    assert attach.snd_settle_mode == SND_MIXED
    assert attach.rcv_settle_mode == RCV_FIRST
    assert attach.incomplete_unsettled is False
    assert attach.source is None
    assert attach.role is RECEIVER
    flow = decode(encode(Flow(incoming_window=1, next_outgoing_id=2, outgoing_window=3)))
    assert flow.drain is False and flow.echo is False and flow.handle is None


@pytest.mark.parametrize(
    ("data", "field"),
    [
        (h("00 53 10 45"), "open.container_id"),
        (h("00 53 10 c0 02 01 40"), "open.container_id"),
        (h("00 53 11 c0 03 02 40 43"), "begin.incoming_window"),
        (h("00 53 12 c0 05 02 a1 01 61 43"), "attach.role"),
        (h("00 53 14 45"), "transfer.handle"),
        (h("00 53 15 c0 02 01 41"), "disposition.first"),
        (h("00 53 1d 45"), "error.condition"),
        (h("00 53 40 45"), "sasl-mechanisms.sasl_server_mechanisms"),
        (h("00 53 23 c0 02 01 43"), "received.section_offset"),
        (h("00 53 33 45"), "declared.txn_id"),
    ],
)
def test_missing_mandatory_field_is_a_decode_error(data: bytes, field: str) -> None:
    with pytest.raises(DecodeError) as info:
        decode(data)
    assert field in str(info.value)
    assert info.value.condition == "amqp:decode-error"


def test_mandatory_none_is_refused_on_encode() -> None:
    with pytest.raises(EncodeError, match=r"attach\.handle"):
        encode(Attach(name="x", role=SENDER))


def test_described_value_that_is_not_a_list() -> None:
    with pytest.raises(DecodeError, match="not a list"):
        decode(h("00 53 10 a1 01 78"))
    with pytest.raises(DecodeError, match="not a map"):
        decode(h("00 53 74 45"))
    with pytest.raises(DecodeError, match="not a binary"):
        decode(h("00 53 75 a1 01 78"))


def test_field_of_the_wrong_type_is_a_decode_error() -> None:
    with pytest.raises(DecodeError, match=r"transfer\.handle"):
        decode(h("00 53 14 c0 03 01 a1 00"))  # handle is a string
    with pytest.raises(DecodeError, match=r"detach\.error"):
        decode(h("00 53 16 c0 04 03 43 42 43"))  # error is a uint
    with pytest.raises(DecodeError, match=r"open\.offered_capabilities"):
        decode(h("00 53 10 c0 0b 08 a1 01 63 40 40 40 40 40 40 43"))
    with pytest.raises(DecodeError, match=r"attach\.role"):
        decode(h("00 53 12 c0 06 03 a1 01 61 43 43"))  # role is a uint, not a boolean


def test_extra_fields_are_ignored() -> None:
    close = decode(h("00 53 18 c0 05 03 40 a1 00 43"))
    assert close == Close()
    accepted = decode(h("00 53 24 c0 02 01 41"))
    assert accepted == Accepted()


def test_symbolic_descriptor_decodes_to_the_same_class() -> None:
    for value in SAMPLES:
        name = value.descriptor_name.encode()
        numeric = encode(value)
        symbolic = b"\x00\xa3" + bytes([len(name)]) + name + numeric[3:]
        assert decode(symbolic) == value


def test_unknown_descriptor_stays_described() -> None:
    assert decode(h("00 53 7f 45")) == Described(ulong(0x7F), [])
    assert decode(h("00 a3 03 61 3a 62 c0 02 01 43")) == Described(symbol("a:b"), [uint(0)])


def test_multiple_field_single_value_or_array() -> None:
    single = decode(h("00 53 10 c0 0d 08 a1 01 63 40 40 40 40 40 40 a3 01 41"))
    assert single.offered_capabilities == (symbol("A"),)
    array = decode(h("00 53 10 c0 13 08 a1 01 63 40 40 40 40 40 40 e0 07 02 a3 01 41 02 42 43"))
    assert array.offered_capabilities == (symbol("A"), symbol("BC"))
    empty = decode(encode(Open("c", offered_capabilities=[])))
    assert empty.offered_capabilities == ()
    # Constructor normalises lists, arrays and single values to tuples.
    assert Open("c", offered_capabilities=["A"]).offered_capabilities == ("A",)
    assert Open("c", offered_capabilities="A").offered_capabilities == ("A",)
    assert Open("c", offered_capabilities=Array(UNDESCRIBED, TypeCode.SYMBOL, symbol("A"))).offered_capabilities == (
        "A",
    )
    # A single value set after construction is sent as a single value.
    open_ = Open("c")
    open_.offered_capabilities = symbol("A")  # type: ignore[assignment]
    assert decode(encode(open_)).offered_capabilities == (symbol("A"),)


def test_typed_fields_coerce_on_encode() -> None:
    # handle is a uint: a plain int is sent as uint, strings are refused.
    assert encode(Transfer(handle=300))[6:11] == h("70 00 00 01 2c")
    assert encode(Transfer(handle=uint(0xFFFFFFFF)))[6:11] == h("70 ff ff ff ff")
    assert encode(Transfer(handle=uint(255)))[6:8] == h("52 ff")
    assert encode(Transfer(handle=ubyte(0)))[6:7] == h("43")
    assert encode(Transfer(handle=0, settled=1)) == h("00 53 14 c0 06 05 43 40 40 40 41")
    with pytest.raises(EncodeError):
        encode(Transfer(handle=True))
    with pytest.raises(EncodeError):
        encode(Transfer(handle=1 << 32))
    with pytest.raises(EncodeError):
        encode(Transfer(handle="x"))
    with pytest.raises(EncodeError):
        encode(Begin(next_outgoing_id=-1, incoming_window=0, outgoing_window=0))
    with pytest.raises(EncodeError):
        encode(Flow(incoming_window=1 << 32, next_outgoing_id=0, outgoing_window=0))
    # fields: str keys become symbols
    decoded = decode(encode(Open("c", properties={"k": "v"})))
    assert type(next(iter(decoded.properties))) is symbol


def test_annotation_sections_send_str_keys_as_symbols() -> None:
    data = encode(MessageAnnotations({"x-opt-k": 1}))
    assert data == h("00 53 72 c1 0c 02 a3 07 78 2d 6f 70 74 2d 6b 55 01")
    assert type(next(iter(decode(data).value))) is symbol
    with pytest.raises(EncodeError):
        encode(Data(None))


def test_sections_bytes() -> None:
    assert encode(Data(b"ab")) == h("00 53 75 a0 02 61 62")
    assert encode(AmqpValue("hi")) == h("00 53 77 a1 02 68 69")
    assert encode(AmqpSequence([])) == h("00 53 76 45")
    assert encode(ApplicationProperties({})) == h("00 53 74 c1 01 00")


def test_proton_message_sections_decode() -> None:
    message = proton.Message(
        id=5, subject="s", body="b", durable=True, priority=7, properties={"a": 1}, annotations={"x-opt-z": "q"}
    )
    data = message.encode()
    offset = 0
    from amqp_async.codec import decode_at

    sections = []
    while offset < len(data):
        section, offset = decode_at(data, offset)
        sections.append(section)
    assert [type(s) for s in sections] == [Header, MessageAnnotations, Properties, ApplicationProperties, AmqpValue]
    header, annotations, properties, app, body = sections
    assert header.durable is True and header.priority == 7
    assert annotations.value == {symbol("x-opt-z"): "q"}
    assert properties.message_id == 5 and properties.subject == "s"
    assert app.value == {"a": 1}
    assert body.value == "b"
    # And our re-encoding is a message proton reads back the same.
    again = proton.Message()
    again.decode(b"".join(encode(s) for s in sections))
    assert (again.id, again.subject, again.body, again.durable, again.priority) == (5, "s", "b", True, 7)
    assert again.properties == {"a": 1}


# --- the class machinery ------------------------------------------------------------------------------------


def test_constructor_positional_order_and_keywords() -> None:
    assert Open("x").container_id == "x"
    begin = Begin(1, 2, 3, 4)
    assert (begin.remote_channel, begin.next_outgoing_id, begin.incoming_window, begin.outgoing_window) == (1, 2, 3, 4)
    assert begin.handle_max == 4294967295
    with pytest.raises(TypeError):
        Open(nonexistent=1)
    assert [f.name for f in Open.fields][:3] == ["container_id", "hostname", "max_frame_size"]
    assert Open.descriptor_code == 0x10 and Open.descriptor_name == "amqp:open:list" and Open.amqp_type == "open"


def test_slots_eq_repr() -> None:
    transfer = Transfer(handle=1, delivery_id=2)
    assert not hasattr(transfer, "__dict__")
    with pytest.raises(AttributeError):
        transfer.nonexistent = 1  # type: ignore[attr-defined]
    assert transfer == Transfer(handle=1, delivery_id=2)
    assert transfer != Transfer(handle=1, delivery_id=3)
    assert transfer != Disposition(role=False, first=1)
    assert repr(transfer) == "Transfer(handle=1, delivery_id=2)"
    assert "secret" not in repr(SaslInit(mechanism=symbol("PLAIN"), initial_response=b"\x00u\x00secret"))
    assert "secret" not in repr(SaslResponse(response=b"secret"))
    with pytest.raises(TypeError):
        hash(transfer)


def test_performatives_table() -> None:
    assert sorted(PERFORMATIVES) == list(range(0x10, 0x19))


def test_a_new_composite_from_a_table() -> None:
    class Thing(Composite, code=0x7E01, name="test:thing:list"):
        """A composite defined in a test, with a descriptor code wider than a smallulong."""

        a: int = F("uint", mandatory=True)
        b: str = F("symbol", default="dflt")
        c: Any = F("*")

    data = encode(Thing(a=1, c=[1]))
    assert data.startswith(h("00 80 00 00 00 00 00 00 7e 01 c0"))
    assert decode(data) == Thing(1, "dflt", [1])
    assert decode(data).b == "dflt"


def test_not_a_list_source_from_bad_peer_inside_attach() -> None:
    # attach whose source is described as a source but holds a string: the nested error surfaces.
    data = h("00 53 12 c0 0e 06 a1 01 61 43 42 40 40 00 53 28 a1 01 78")
    with pytest.raises(DecodeError, match="source"):
        decode(data)
