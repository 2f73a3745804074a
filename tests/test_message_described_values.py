"""Described values in a message's application sections (§3.2.2-§3.2.9), read by ``amqp_async.Message``.

What the application put in a message's body, annotations, application properties or footer is its own: a
described value there comes back as ``Described(descriptor, value)`` whatever its descriptor, in the form it came (a
symbolic descriptor stays a symbol), as python-qpid-proton 0.40 reads it. Descriptors AMQP defines for its own types
(an outcome, a source, an error, a message section) are no exception: the codec read those as its classes
(``Accepted()``, ``Source(...)``), and refused a value such a class cannot hold (``Described(ulong(0x1d), [1, 2])``:
no error has an int condition), which made the whole message undecodable (``amqp:decode-error``).

Checked with proton as the oracle (proton encodes, ours decodes, and the reverse), end to end (proton sends through
the embedded broker, the awaitable API receives), and that frames still decode to the codec's classes.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import amqp_async
from amqp_async import Message, codec
from amqp_async import types as T
from amqp_async.codec import decode_application_value
from amqp_async.codec.delivery_states import Accepted
from amqp_async.codec.performatives import Disposition
from amqp_async.codec.terminus import Source
from amqp_async.codec.transactions import Declare, Discharge, control_body

proton = pytest.importorskip("proton", reason="python-qpid-proton is the oracle; CI installs it")
from proton.utils import BlockingConnection  # noqa: E402

try:
    import strategies as S
    from broker_serving import serving
    from proton_values import from_proton
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests import strategies as S
    from tests.broker_serving import serving
    from tests.proton_values import from_proton

TIMEOUT = 20.0


def described_values(lib: Any) -> dict[str, Any]:
    """Described values under descriptors AMQP defines (numeric and symbolic, of fitting and unfitting shape) and
    one it does not, built with ``lib``'s types (proton's or ours)."""
    described, ulong, symbol = lib.Described, lib.ulong, lib.symbol
    return {
        "accepted": described(ulong(0x24), []),
        "accepted-symbolic": described(symbol("amqp:accepted:list"), []),
        "source": described(ulong(0x28), ["queue"]),
        "source-symbolic": described(symbol("amqp:source:list"), ["queue"]),
        "error-of-ints": described(ulong(0x1D), [1, 2]),
        "source-of-an-int": described(symbol("amqp:source:list"), [5]),
        "data-section": described(ulong(0x75), b"x"),
        "data-section-symbolic": described(symbol("amqp:data:binary"), b"x"),
        "attach-of-nothing": described(ulong(0x12), None),
        "unknown": described(ulong(0x1234), 1),
    }


NAMES = list(described_values(T))


def proton_message(value: Any, where: str) -> Any:
    """A proton message holding ``value`` in the section ``where`` names."""
    if where == "body":
        return proton.Message(body=value)
    if where == "list-body":
        return proton.Message(body=[1, value, "x"])
    if where == "sequence-body":
        message = proton.Message(body=[value])
        message.inferred = True
        return message
    if where == "map-body":
        return proton.Message(body={"key": value})
    if where == "annotations":
        return proton.Message(body="b", annotations={proton.symbol("x-opt-v"): value})
    if where == "instructions":
        return proton.Message(body="b", instructions={proton.symbol("x-opt-v"): value})
    return proton.Message(body="b", properties={"k": value})


WHERE = ["body", "list-body", "sequence-body", "map-body", "annotations", "instructions", "properties"]


def fields(message: Any) -> dict[str, Any]:
    """The application's fields of a message (proton's values converted to our classes)."""
    convert = from_proton if isinstance(message, proton.Message) else (lambda value: value)
    return {
        "body": convert(message.body),
        "annotations": convert(message.annotations),
        "instructions": convert(message.instructions),
        "properties": convert(message.properties),
        "inferred": message.inferred,
    }


def described_inside(value: Any) -> list[Any]:
    """Every described value (of whatever class) inside ``value``."""
    if isinstance(value, dict):
        return [found for pair in value.items() for item in pair for found in described_inside(item)]
    if isinstance(value, list):
        return [found for item in value for found in described_inside(item)]
    if isinstance(value, (str, bytes, int, float)) or value is None:
        return []
    return [value]


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("name", NAMES)
def test_a_described_value_proton_encoded_decodes_as_proton_reads_it(name: str, where: str) -> None:
    sent = proton_message(described_values(proton)[name], where)
    encoded = sent.encode()
    reference, decoded = proton.Message(), Message()
    reference.decode(encoded)
    decoded.decode(encoded)
    assert fields(decoded) == fields(reference)
    found = [item for section in fields(decoded).values() for item in described_inside(section)]
    assert found == [described_values(T)[name]]
    assert all(type(item) is T.Described for item in found)
    # encoded again, proton reads the same message
    again = proton.Message()
    again.decode(decoded.encode())
    assert fields(again) == fields(reference)


@pytest.mark.parametrize("name", NAMES)
def test_a_described_value_we_encode_decodes_to_itself_here_and_in_proton(name: str) -> None:
    value = described_values(T)[name]
    sent = Message(
        body=[value],
        annotations={"x-opt-v": value},
        instructions={"x-opt-v": value},
        properties={"k": value},
        footer={"x-opt-v": value},
    )
    encoded = sent.encode()
    decoded = Message()
    decoded.decode(encoded)
    assert decoded == sent
    assert type(decoded.footer[T.symbol("x-opt-v")]) is T.Described  # type: ignore[index]
    reference = proton.Message()
    reference.decode(encoded)
    assert fields(reference) == fields(decoded)


def test_a_described_value_in_a_footer_or_a_map_key_decodes_as_described() -> None:
    key = T.Described(T.ulong(0x1D), "x")  # an "error" no Error can hold (not a list), as a map key
    footer = {T.symbol("x-opt-sig"): T.Described(T.symbol("amqp:source:list"), [5])}
    encoded = Message(body={key: "v"}, annotations={T.ulong(7): key}, footer=footer).encode()
    # decoded again and again: the layout of a repeated message is learnt (_layouts.py) and must read it alike
    for _ in range(10):
        decoded = Message()
        decoded.decode(encoded)
        assert decoded.body == {key: "v"}
        assert decoded.annotations == {T.ulong(7): key}
        assert decoded.footer == footer


def test_a_repeated_message_with_a_described_map_key_decodes_every_time() -> None:
    """The layout of a message decoded again and again is learnt (_layouts.py): reading a described map key there
    too, it reads it as the application's, as the general decoder does (the codec's Error refused it)."""
    key = T.Described(T.ulong(0x1D), "x")
    encoded = Message(body={key: "v"}).encode()
    for _ in range(10):
        decoded = Message()
        decoded.decode(encoded)
        assert decoded.body == {key: "v"}


def test_an_amqp_value_holding_a_section_stays_described_with_its_descriptor() -> None:
    """An amqp-value holding what looks like another section (a data section, under its symbolic descriptor) is
    the application's value: it keeps its descriptor, and encodes again to the same bytes."""
    value = T.Described(T.symbol("amqp:data:binary"), b"x")
    encoded = Message(body=value).encode()
    decoded = Message()
    decoded.decode(encoded)
    assert decoded.body == value
    assert type(decoded.body.descriptor) is T.symbol  # type: ignore[union-attr]
    assert decoded.encode() == encoded


def test_frames_still_decode_to_the_codecs_classes() -> None:
    """Only the application's values change: a described value in a frame (a performative, its state, a terminus)
    is the codec's class, as before."""
    assert codec.decode(b"\x00\x53\x24\x45") == Accepted()
    disposition = codec.decode(codec.encode(Disposition(role=True, first=1, settled=True, state=Accepted())))
    assert type(disposition) is Disposition
    assert type(disposition.state) is Accepted
    assert type(codec.decode(codec.encode(Source(address="q")))) is Source
    assert decode_application_value(b"\x00\x53\x24\x45") == (T.Described(T.ulong(0x24), []), 4)
    nested = codec.encode([T.Described(T.ulong(0x1D), [1, 2]), {"k": T.Described(T.ulong(0x28), ["q"])}])
    assert decode_application_value(nested)[0] == [
        T.Described(T.ulong(0x1D), [1, 2]),
        {"k": T.Described(T.ulong(0x28), ["q"])},
    ]


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(S.amqp_values())
def test_the_application_decoder_reads_values_without_composites_as_the_frames_decoder(value: Any) -> None:
    """Values whose descriptors no composite registers (the strategies' own) decode alike with both tables."""
    encoded = codec.encode(value)
    decoded, end = decode_application_value(encoded)
    assert end == len(encoded)
    assert S.first_difference(decoded, codec.decode(encoded)) is None
    assert S.first_difference(decoded, value) is None


@settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from([0x00, 0x40, 0x45, 0x53, 0x24, 0x1D, 0xC0, 0xD0, 0xC1, 0xE0, 0xA1, 0xA3]), max_size=40))
def test_the_application_decoder_gives_a_value_or_a_decode_error(codes: list[int]) -> None:
    data = bytes(codes)
    try:
        decode_application_value(data)
    except codec.DecodeError as error:
        assert error.condition == "amqp:decode-error"


def test_a_coordinator_reads_declare_and_discharge_bodies_with_control_body() -> None:
    """A transaction's control messages (§4.5.2, §4.5.3) decode as any message (their body a Described, as proton
    reads it); the coordinator reads them as its types with control_body."""
    for sent, expected in (
        (Message(body=Declare()), Declare()),
        (Message(body=Discharge(txn_id=b"t1", fail=True)), Discharge(txn_id=b"t1", fail=True)),
        (proton.Message(body=proton.Described(proton.symbol("amqp:declare:list"), [None])), Declare()),
    ):
        decoded = Message()
        decoded.decode(sent.encode())
        assert type(decoded.body) is T.Described
        assert control_body(decoded.body) == expected
    assert control_body(T.Described(T.ulong(0x24), [])) is None
    assert control_body("declare") is None
    with pytest.raises(codec.DecodeError):
        control_body(T.Described(T.ulong(0x32), [None]))  # a discharge without its mandatory txn-id


def send_with_proton(url: str, bodies: list[Any]) -> None:
    connection = BlockingConnection(url, timeout=TIMEOUT)
    try:
        sender = connection.create_sender("q")
        for body in bodies:
            sender.send(proton.Message(body=body, annotations={proton.symbol("x-opt-v"): body}), timeout=TIMEOUT)
    finally:
        connection.close()


@pytest.mark.anyio
async def test_messages_proton_sent_with_described_values_are_received_as_sent() -> None:
    """proton sends through the embedded broker; the awaitable API receives every message (none is refused as
    undecodable) with its described values as they were sent."""
    bodies = list(described_values(proton).values())
    async with serving() as broker:
        await anyio.to_thread.run_sync(send_with_proton, broker.url, bodies)
        async with amqp_async.connect(broker.url, reconnect=False) as connection:
            receiver = await connection.open_receiver("q")
            for expected in described_values(T).values():
                with anyio.fail_after(TIMEOUT):
                    delivery = await receiver.receive()
                assert type(delivery.message.body) is T.Described
                assert delivery.message.body == expected
                assert delivery.message.annotations == {T.symbol("x-opt-v"): expected}
                await delivery.accept()
