"""JSON bodies: ``Message.from_json(value, **fields)`` (one data section of UTF-8 JSON, content-type
``application/json``) and ``message.json()`` (a data section, several joined, or an amqp-value string or binary),
whose error for a body that is not JSON is a ``MessageBodyError`` (an AMQPError and a ValueError).

Interop: python-qpid-proton decodes what ``from_json`` encodes (its content type and its bytes, in memory and
through its broker over TCP, on asyncio and trio), and ``json()`` reads the JSON messages proton makes.
"""

from __future__ import annotations

import functools
import json
import math
from typing import Any

import anyio
import anyio.to_thread
import pytest

import amqp_async
from amqp_async import AMQPError, Message, MessageBodyError
from amqp_async.codec.sections import AmqpSequence, Data
from amqp_async.types import symbol

proton = pytest.importorskip("proton", reason="python-qpid-proton is the independent peer; CI installs it")

try:
    from proton_broker import ProtonBroker
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.proton_broker import ProtonBroker

DOCUMENT = {"order": 17, "customer": "Zoë", "lines": [{"sku": "A-1", "qty": 2}], "paid": True, "note": None}
DOCUMENT_BYTES = b'{"order":17,"customer":"Zo\xc3\xab","lines":[{"sku":"A-1","qty":2}],"paid":true,"note":null}'


def test_from_json_writes_one_data_section_of_utf8_json() -> None:
    message = Message.from_json(DOCUMENT, subject="order", properties={"region": "eu"}, durable=True)
    assert message.body == DOCUMENT_BYTES
    assert message.content_type == symbol("application/json")
    assert type(message.content_type) is symbol
    assert (message.subject, message.properties, message.durable) == ("order", {"region": "eu"}, True)
    decoded = Message()
    decoded.decode(message.encode())
    assert decoded.body == DOCUMENT_BYTES
    assert decoded.inferred is True  # it came in a data section (§3.2.6)
    assert decoded.content_type == "application/json"
    assert decoded.json() == DOCUMENT
    assert b"\x00\x53\x75\xa0" + bytes([len(DOCUMENT_BYTES)]) + DOCUMENT_BYTES in message.encode()


def test_from_json_takes_any_json_value_and_a_content_type_of_ones_own() -> None:
    assert Message.from_json([1, "two", 3.5]).body == b'[1,"two",3.5]'
    assert Message.from_json("text").body == b'"text"'
    assert Message.from_json(None).body == b"null"
    custom = Message.from_json({"a": 1}, content_type="application/vnd.example+json")
    assert custom.content_type == "application/vnd.example+json"
    assert custom.json() == {"a": 1}


def test_from_json_refuses_what_json_cannot_carry() -> None:
    with pytest.raises(TypeError, match="Object of type set is not JSON serializable"):
        Message.from_json({"a": {1, 2}})
    with pytest.raises(ValueError, match="Out of range float values are not JSON compliant"):
        Message.from_json({"a": math.nan})


def test_from_json_on_a_subclass_makes_that_class() -> None:
    from amqp_async.proton import Message as ProtonStyleMessage

    message = ProtonStyleMessage.from_json({"a": 1})
    assert type(message) is ProtonStyleMessage
    assert message.json() == {"a": 1}


@pytest.mark.parametrize(
    "body",
    [
        DOCUMENT_BYTES,
        bytearray(DOCUMENT_BYTES),
        memoryview(DOCUMENT_BYTES),
        DOCUMENT_BYTES.decode("utf-8"),  # an amqp-value string
        [Data(DOCUMENT_BYTES[:10]), Data(DOCUMENT_BYTES[10:])],  # several data sections, joined
    ],
    ids=["bytes", "bytearray", "memoryview", "str", "data sections"],
)
def test_json_reads_the_body_forms_that_hold_json_text(body: Any) -> None:
    assert Message(body=body).json() == DOCUMENT


def test_json_reads_an_amqp_value_binary_through_the_codec() -> None:
    sent = Message(body=DOCUMENT_BYTES, inferred=False)  # an amqp-value section holding a binary
    received = Message()
    received.decode(sent.encode())
    assert received.inferred is False
    assert received.json() == DOCUMENT


@pytest.mark.parametrize(
    ("body", "text"),
    [
        ({"a": 1}, "the body is not JSON text: it holds dict {'a': 1}"),
        (None, "the body is not JSON text: it holds NoneType None"),
        (17, "the body is not JSON text: it holds int 17"),
        ([AmqpSequence([1])], "the body is not JSON text: it holds list [AmqpSequence([1])]"),
    ],
)
def test_json_of_a_body_that_is_not_text(body: Any, text: str) -> None:
    with pytest.raises(MessageBodyError) as raised:
        Message(body=body).json()
    error = raised.value
    assert error.description == f"{text} (message.json() reads a data section, or an amqp-value string or binary)"
    assert error.condition == "amqp:decode-error"
    assert isinstance(error, AMQPError)
    assert isinstance(error, ValueError)


def test_json_of_text_that_does_not_parse() -> None:
    with pytest.raises(MessageBodyError) as raised:
        Message(body=b'{"a": 1').json()
    assert raised.value.description == "the body is not JSON: Expecting ',' delimiter: line 1 column 8 (char 7)"
    assert isinstance(raised.value.__cause__, json.JSONDecodeError)
    with pytest.raises(MessageBodyError) as raised:
        Message(body=b'{"a": "\xff"}').json()
    assert raised.value.description.startswith("the body is not JSON: 'utf-8' codec can't decode byte 0xff")
    assert isinstance(raised.value.__cause__, UnicodeDecodeError)


# ---------------------------------------------------------------------------------------------------------------
# python-qpid-proton


def test_proton_decodes_what_from_json_encodes() -> None:
    theirs = proton.Message()
    theirs.decode(Message.from_json(DOCUMENT, subject="order").encode())
    assert theirs.content_type == "application/json"
    assert bytes(theirs.body) == DOCUMENT_BYTES
    assert theirs.subject == "order"
    assert json.loads(bytes(theirs.body)) == DOCUMENT


def test_json_reads_what_proton_encodes() -> None:
    for body in (DOCUMENT_BYTES, DOCUMENT_BYTES.decode("utf-8")):
        theirs = proton.Message(body=body, content_type="application/json")
        ours = Message()
        ours.decode(theirs.encode())
        assert ours.content_type == "application/json"
        assert ours.json() == DOCUMENT


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    if request.param == "trio":
        pytest.importorskip("trio", reason="trio is in the test dependency group")
    return str(request.param)


@pytest.mark.anyio
@pytest.mark.interop
async def test_json_messages_both_ways_through_protons_broker() -> None:
    with ProtonBroker(timeout=15) as broker:
        broker.put("from-proton", proton.Message(body=DOCUMENT_BYTES, content_type="application/json"))
        with anyio.fail_after(15):
            async with amqp_async.connect(broker.url, reconnect=False) as conn:
                async with conn.open_sender("to-proton") as sender:
                    await sender.send(Message.from_json(DOCUMENT, id=7))
                async with conn.open_receiver("from-proton") as receiver, await receiver.receive() as delivery:
                    assert delivery.message.content_type == "application/json"
                    assert delivery.message.json() == DOCUMENT
        [received] = await anyio.to_thread.run_sync(functools.partial(broker.wait_messages, 1, address="to-proton"))
        assert received.message.content_type == "application/json"
        assert bytes(received.body) == DOCUMENT_BYTES
        assert received.message.id == 7
