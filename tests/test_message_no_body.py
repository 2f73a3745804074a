"""A message without a body: what we send, what proton reads of it, and what we read of proton's.

A message is its sections (AMQP 1.0 §3.2). One with no body and every field at its default used to encode to an
empty payload, which is no message: python-qpid-proton's receivers fail on it (``recv_msg``: TypeError). It is now
encoded as proton encodes it, an empty header and an empty properties section. A ``None`` body is no body section,
as in proton 0.40 (§3.2 asks for one; PROTON-2574); ``amqp_async.proton.Message.encode`` gives proton's bytes, and
we read proton's bodiless messages as a ``None`` body.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

import amqp_async
import amqp_async.proton
import amqp_async.proton.utils
from amqp_async import Message, codec
from amqp_async.broker import BrokerThread

proton = pytest.importorskip("proton", reason="python-qpid-proton is the oracle; CI installs it")
proton_utils = pytest.importorskip("proton.utils", reason="python-qpid-proton's BlockingConnection is the peer")

BODY_SECTIONS = (0x75, 0x76, 0x77)

# Messages without a body: all defaults, and with each kind of section that may come before a body.
SHAPES: list[dict[str, Any]] = [
    {},
    {"subject": "s"},
    {"durable": True},
    {"priority": 9, "ttl": 1.5},
    {"properties": {"k": 1}},
    {"annotations": {"x-opt-a": "v"}},
    {"inferred": True},
    {
        "durable": True,
        "id": "m-1",
        "address": "q",
        "correlation_id": 7,
        "content_type": "text/plain",
        "properties": {"k": "v", "n": 2},
        "annotations": {"x-opt-a": 1},
    },
]

# The fields compared between the libraries (none is delivery-annotations, which the broker drops, or the ttl,
# which it counts down while it holds a message).
COMPARED = ("durable", "priority", "id", "address", "subject", "correlation_id", "properties", "annotations")


def shape_id(shape: dict[str, Any]) -> str:
    return ",".join(sorted(shape)) or "defaults"


def body_sections(raw: bytes) -> list[tuple[int, Any]]:
    """(descriptor code, value) of each body section of an encoded message, read with the plain codec."""
    found = []
    position = 0
    while position < len(raw):
        assert raw[position] == 0x00, raw.hex()
        descriptor, position = codec.decode_at(raw, position + 1)
        value, position = codec.decode_at(raw, position)
        if descriptor in BODY_SECTIONS:
            found.append((int(descriptor), value))
    return found


def protons_reading(raw: bytes) -> proton.Message:
    message = proton.Message()
    message.decode(raw)
    return message


def plain(value: Any) -> Any:
    """A field as the two libraries compare: ints as int, maps with str keys (proton's symbol and ulong are
    subclasses of str and int)."""
    if isinstance(value, dict):
        return {str(key): plain(item) for key, item in value.items()}
    if isinstance(value, int) and not isinstance(value, bool):
        return int(value)
    if isinstance(value, str):
        return str(value)
    return value


def assert_same_fields(ours: Any, theirs: Any) -> None:
    for name in COMPARED:
        assert plain(getattr(ours, name)) == plain(getattr(theirs, name)), name


def cleared() -> Message:
    message = Message("body", subject="s", durable=True, properties={"k": 1})
    message.clear()
    return message


def decoded_default() -> Message:
    message = Message()
    message.decode(bytes.fromhex("0053704500537345"))
    return message


# Messages that have nothing to write: every field at its default, set so or reset so.
NOTHING_TO_WRITE = {
    "Message()": Message,
    "body=None": lambda: Message(body=None),
    "inferred": lambda: Message(inferred=True),
    "defaults given": lambda: Message(durable=False, priority=4, ttl=0, group_sequence=0, subject=None),
    "cleared": cleared,
    "decoded": decoded_default,
    "callback API": amqp_async.proton.Message,
}


@pytest.mark.parametrize("make", NOTHING_TO_WRITE.values(), ids=NOTHING_TO_WRITE.keys())
def test_a_message_with_nothing_to_write_is_protons_bytes(make: Any) -> None:
    # byte for byte proton's proton.Message().encode(): an empty header and properties, never an empty payload
    theirs = proton.Message().encode()
    assert theirs == bytes.fromhex("0053704500537345")
    message = make()
    assert message.encode() == theirs
    assert bytes(message._encode_payload()) == theirs  # what a sender sends


@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
def test_no_body_is_no_body_section_as_in_proton(shape: dict[str, Any]) -> None:
    # proton writes no body section for a None body (PROTON-2574); neither do we, and the payload is never empty
    raw = Message(**shape).encode()
    assert raw
    assert body_sections(raw) == body_sections(proton.Message(**shape).encode()) == []
    assert Message(body=None, **shape).encode() == raw


@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
def test_proton_reads_our_bodiless_message_as_its_own(shape: dict[str, Any]) -> None:
    # proton reads our bytes as the message it would have sent: re-encoded, byte for byte proton's encoding
    theirs = proton.Message(**shape)
    read = protons_reading(Message(**shape).encode())
    assert read.body is None
    assert read.encode() == theirs.encode()


@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
def test_we_read_protons_bodiless_message(shape: dict[str, Any]) -> None:
    # proton writes no body section (PROTON-2574): we read a None body, and the other fields as proton set them
    theirs = proton.Message(**shape)
    assert body_sections(theirs.encode()) == []
    ours = Message()
    ours.decode(theirs.encode())
    assert ours.body is None
    assert ours == Message(**shape)
    assert_same_fields(ours, theirs)
    assert ours.ttl == theirs.ttl


@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
def test_callback_api_encode_is_protons_bytes(shape: dict[str, Any]) -> None:
    # amqp_async.proton.Message.encode is byte for byte proton's, bodiless messages included
    assert amqp_async.proton.Message(**shape).encode() == proton.Message(**shape).encode()
    assert amqp_async.proton.Message(body=None, **shape).encode() == proton.Message(body=None, **shape).encode()


def test_an_empty_payload_reads_as_a_default_message() -> None:
    # no section at all (what we sent before, and what a peer may still send): a None body, every field default
    message = Message(subject="previous", body="previous")
    message.decode(b"")
    assert message == Message()


def receive_with_proton(url: str, count: int) -> list[proton.Message]:
    """Receive ``count`` messages from queue "q" with python-qpid-proton's BlockingReceiver, accepting each."""
    connection = proton_utils.BlockingConnection(url, timeout=60)
    try:
        receiver = connection.create_receiver("q")
        received = []
        for _ in range(count):
            received.append(receiver.receive(timeout=60))
            receiver.accept()
        return received
    finally:
        connection.close()


def test_bodiless_messages_reach_a_proton_blocking_receiver() -> None:
    # sent with the awaitable API through the embedded broker; proton's receiver failed on the empty payload
    # the all-default message was (TypeError in recv_msg)
    async def send(url: str) -> None:
        with anyio.fail_after(60):
            async with await amqp_async.connect(url) as connection:
                sender = await connection.open_sender("q")
                for shape in SHAPES:
                    await sender.send(Message(**shape))

    with BrokerThread() as broker:
        anyio.run(send, broker.url)
        received = receive_with_proton(broker.url, len(SHAPES))
    for shape, message in zip(SHAPES, received, strict=True):
        assert message.body is None
        assert_same_fields(message, proton.Message(**shape))
        assert 0 <= message.ttl <= shape.get("ttl", 0)


def test_callback_api_bodiless_messages_reach_a_proton_blocking_receiver() -> None:
    # sent with the callback API (amqp_async.proton.utils), which sends the same payload as Message.encode
    with BrokerThread() as broker:
        connection = amqp_async.proton.utils.BlockingConnection(broker.url, timeout=60)
        try:
            sender = connection.create_sender("q")
            for shape in SHAPES:
                sender.send(amqp_async.proton.Message(**shape), timeout=60)
        finally:
            connection.close()
        received = receive_with_proton(broker.url, len(SHAPES))
    for shape, message in zip(SHAPES, received, strict=True):
        assert message.body is None
        assert_same_fields(message, proton.Message(**shape))
