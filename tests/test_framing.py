"""Protocol headers and frames (spec §2.2, §2.3, §5): encoding, incremental decoding, framing errors.

The oracle is python-qpid-proton's engine: ``proton.Transport`` bound to a ``proton.Connection`` produces real
wire bytes without sockets (``peek``/``pop``) and consumes ours (``push``).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from amqp_async.codec import DecodeError, EncodeError, encode
from amqp_async.codec.delivery_states import Accepted
from amqp_async.codec.framing import (
    AMQP_HEADER,
    EMPTY_FRAME,
    FRAME_AMQP,
    FRAME_SASL,
    PROTOCOL_AMQP,
    PROTOCOL_SASL,
    PROTOCOL_TLS,
    SASL_HEADER,
    TLS_HEADER,
    Frame,
    FrameDecoder,
    FramingError,
    ProtocolHeader,
    UnsupportedProtocolError,
    encode_frame,
    parse_protocol_header,
)
from amqp_async.codec.performatives import RECEIVER, SENDER, Attach, Begin, Close, Disposition, Flow, Open, Transfer
from amqp_async.codec.sasl_frames import SaslInit, SaslMechanisms, SaslOutcome
from amqp_async.codec.terminus import Source, Target
from amqp_async.types import symbol

proton = pytest.importorskip("proton")


def h(text: str) -> bytes:
    return bytes.fromhex(text)


def frames_of(decoder: FrameDecoder) -> list[tuple[int, int, Any, bytes]]:
    """Drain a decoder, with payloads as bytes so frames compare by value."""
    return [(f.type, f.channel, f.performative, bytes(f.payload)) for f in decoder]


def proton_client_bytes() -> bytes:
    """What proton's engine writes when a client opens a connection, a session and a sender link."""
    transport = proton.Transport()
    connection = proton.Connection()
    connection.container = "proton-container"
    connection.hostname = "broker.example"
    connection.offered_capabilities = proton.symbol("cap-1")
    connection.properties = {proton.symbol("product"): "proton-python"}
    transport.max_frame_size = 16384
    transport.bind(connection)
    connection.open()
    session = connection.session()
    session.open()
    sender = session.sender("link-name")
    sender.target.address = "queue-1"
    sender.source.address = "src-1"
    sender.open()
    pending = transport.pending()
    data = transport.peek(pending)
    transport.pop(pending)
    return bytes(data)


# --- protocol headers ---------------------------------------------------------------------------------------


def test_protocol_headers() -> None:
    assert parse_protocol_header(AMQP_HEADER) == ProtocolHeader(PROTOCOL_AMQP, 1, 0, 0)
    assert parse_protocol_header(SASL_HEADER).protocol_id == PROTOCOL_SASL
    assert parse_protocol_header(TLS_HEADER).protocol_id == PROTOCOL_TLS
    assert parse_protocol_header(bytearray(AMQP_HEADER)).version == (1, 0, 0)
    assert ProtocolHeader(3, 1, 0, 0).to_bytes() == SASL_HEADER


@pytest.mark.parametrize("raw", [b"AMQP\x00\x00\x09\x01", b"AMQP\x01\x01\x00\x00", b"AMQP\x00\x01\x00\x01"])
def test_unsupported_protocol_header(raw: bytes) -> None:
    with pytest.raises(UnsupportedProtocolError) as info:
        parse_protocol_header(raw)
    assert info.value.header.to_bytes() == raw
    assert info.value.condition == "amqp:connection:framing-error"


@pytest.mark.parametrize("raw", [b"GET / HT", b"\x16\x03\x01\x02\x00\x01\x00\x01", b"AMQP\x00\x01\x00"])
def test_not_a_protocol_header(raw: bytes) -> None:
    with pytest.raises(FramingError):
        parse_protocol_header(raw)


def test_decoder_reads_header_then_frames_then_header() -> None:
    buf = bytearray(SASL_HEADER)
    encode_frame(buf, FRAME_SASL, 0, SaslOutcome(code=0))
    buf += AMQP_HEADER
    buf += EMPTY_FRAME
    decoder = FrameDecoder()
    decoder.feed(bytes(buf[:5]))
    assert decoder.next_protocol_header() is None
    decoder.feed(bytes(buf[5:]))
    assert decoder.next_protocol_header() == ProtocolHeader(PROTOCOL_SASL, 1, 0, 0)
    assert decoder.next_frame() == Frame(FRAME_SASL, 0, SaslOutcome(code=0), b"")
    assert decoder.next_protocol_header() == ProtocolHeader(PROTOCOL_AMQP, 1, 0, 0)
    assert decoder.next_frame() == Frame(FRAME_AMQP, 0, None, b"")
    assert decoder.next_frame() is None
    assert decoder.buffered == 0


# --- encoding -----------------------------------------------------------------------------------------------


def test_empty_frame() -> None:
    buf = bytearray()
    assert encode_frame(buf, FRAME_AMQP, 0, None) == 8
    assert bytes(buf) == EMPTY_FRAME == h("00 00 00 08 02 00 00 00")


def test_frame_bytes_by_hand() -> None:
    buf = bytearray(b"prefix")
    size = encode_frame(buf, FRAME_AMQP, 0x0102, Close())
    assert size == 12
    assert bytes(buf) == b"prefix" + h("00 00 00 0c 02 00 01 02 00 53 18 45")


def test_transfer_frame_with_payload() -> None:
    buf = bytearray()
    transfer = Transfer(handle=0, delivery_id=1, delivery_tag=b"t", message_format=0, settled=True)
    payload = h("00 53 77 a1 02 68 69")
    encode_frame(buf, FRAME_AMQP, 5, transfer, payload)
    body = encode(transfer)
    assert bytes(buf) == (8 + len(body) + len(payload)).to_bytes(4, "big") + h("02 00 00 05") + body + payload
    decoder = FrameDecoder()
    decoder.feed(bytes(buf))
    frame = decoder.next_frame()
    assert frame is not None
    assert (frame.type, frame.channel, frame.performative) == (FRAME_AMQP, 5, transfer)
    assert isinstance(frame.payload, memoryview)
    assert bytes(frame.payload) == payload


def test_sasl_frame_type() -> None:
    buf = bytearray()
    encode_frame(buf, FRAME_SASL, 0, SaslMechanisms(sasl_server_mechanisms=["PLAIN"]))
    assert buf[5] == 0x01


def test_encode_frame_refuses_frames_over_the_maximum() -> None:
    buf = bytearray(b"keep")
    with pytest.raises(EncodeError, match="maximum frame size"):
        encode_frame(buf, FRAME_AMQP, 0, Transfer(handle=0), b"x" * 600, max_frame_size=512)
    assert buf == b"keep"
    encode_frame(buf, FRAME_AMQP, 0, Transfer(handle=0), b"x" * 400, max_frame_size=512)


def test_encode_frame_errors_leave_the_buffer_unchanged() -> None:
    buf = bytearray(b"keep")
    with pytest.raises(EncodeError):
        encode_frame(buf, FRAME_AMQP, 0, Transfer(handle="not a handle"))
    with pytest.raises(EncodeError):
        encode_frame(buf, FRAME_AMQP, 70000, Close())
    assert buf == b"keep"


# --- decoding proton's bytes ---------------------------------------------------------------------------------


def test_decode_proton_open_begin_attach() -> None:
    data = proton_client_bytes()
    decoder = FrameDecoder()
    decoder.feed(data)
    assert decoder.next_protocol_header() == ProtocolHeader(PROTOCOL_AMQP, 1, 0, 0)
    frames = list(decoder)
    assert [type(f.performative) for f in frames] == [Open, Begin, Attach]
    open_ = frames[0].performative
    assert open_.container_id == "proton-container"
    assert open_.hostname == "broker.example"
    assert open_.max_frame_size == 16384
    assert open_.offered_capabilities == (symbol("cap-1"),)
    assert open_.properties == {symbol("product"): "proton-python"}
    begin = frames[1].performative
    assert begin.remote_channel is None
    attach = frames[2].performative
    assert (attach.name, attach.handle, attach.role) == ("link-name", 0, SENDER)
    assert attach.source == Source(address="src-1")
    assert attach.target.address == "queue-1"
    assert all(f.type == FRAME_AMQP and f.payload == b"" for f in frames)


def test_chunks_split_at_every_offset() -> None:
    stream = bytearray(proton_client_bytes())
    encode_frame(stream, FRAME_AMQP, 1, Transfer(handle=0, delivery_id=0, delivery_tag=b"a"), b"payload-1" * 30)
    stream += EMPTY_FRAME
    encode_frame(stream, FRAME_AMQP, 1, Disposition(role=RECEIVER, first=0, settled=True, state=Accepted()))
    # a frame with an extended header (doff 3): the 4 extra bytes are skipped
    stream += h("00 00 00 10 03 00 00 02 de ad be ef 00 53 18 45")
    data = bytes(stream)

    def run(pieces: list[Any]) -> tuple[ProtocolHeader | None, list[tuple[int, int, Any, bytes]]]:
        decoder = FrameDecoder()
        header = None
        frames: list[tuple[int, int, Any, bytes]] = []
        for piece in pieces:
            decoder.feed(piece)
            if header is None:
                header = decoder.next_protocol_header()
                if header is None:
                    continue
            frames.extend(frames_of(decoder))
        assert decoder.buffered == 0
        return header, frames

    expected = run([data])
    assert len(expected[1]) == 7
    assert expected[1][-1] == (FRAME_AMQP, 2, Close(), b"")
    assert expected[1][3][3] == b"payload-1" * 30
    for cut in range(len(data) + 1):
        assert run([data[:cut], data[cut:]]) == expected, cut
    for cut in range(0, len(data), 7):
        assert run([data[:cut], data[cut : cut + 50], data[cut + 50 :]]) == expected, cut
    assert run([data[i : i + 1] for i in range(len(data))]) == expected
    assert run([bytearray(data[i : i + 3]) for i in range(0, len(data), 3)]) == expected


def test_many_frames_from_one_read() -> None:
    buf = bytearray()
    transfers = [Transfer(handle=0, delivery_id=i, delivery_tag=i.to_bytes(4, "big"), settled=True) for i in range(500)]
    for transfer in transfers:
        encode_frame(buf, FRAME_AMQP, 0, transfer, b"m" * 16)
    decoder = FrameDecoder()
    decoder.feed(bytes(buf))
    frames = list(decoder)
    assert [f.performative for f in frames] == transfers
    assert all(bytes(f.payload) == b"m" * 16 for f in frames)


def test_large_frame_in_small_chunks() -> None:
    buf = bytearray()
    encode_frame(buf, FRAME_AMQP, 0, Transfer(handle=0), b"z" * (1 << 20))
    encode_frame(buf, FRAME_AMQP, 0, Transfer(handle=1), b"y")
    data = bytes(buf)
    decoder = FrameDecoder()
    frames: list[Frame] = []
    for offset in range(0, len(data), 1000):
        decoder.feed(data[offset : offset + 1000])
        frames.extend(decoder)
    assert [f.performative.handle for f in frames] == [0, 1]
    assert len(frames[0].payload) == 1 << 20
    assert bytes(frames[1].payload) == b"y"


def test_truncated_frame_waits_for_more_bytes() -> None:
    buf = bytearray()
    encode_frame(buf, FRAME_AMQP, 0, Open(container_id="c"))
    decoder = FrameDecoder()
    decoder.feed(bytes(buf[:-1]))
    assert decoder.next_frame() is None
    assert decoder.next_frame() is None
    assert decoder.buffered == len(buf) - 1
    decoder.feed(bytes(buf[-1:]))
    frame = decoder.next_frame()
    assert frame is not None and frame.performative == Open(container_id="c")


# --- framing errors -----------------------------------------------------------------------------------------


def test_frame_larger_than_max_frame_size() -> None:
    buf = bytearray()
    encode_frame(buf, FRAME_AMQP, 0, Transfer(handle=0), b"x" * 1000)
    decoder = FrameDecoder(max_frame_size=512)
    decoder.feed(bytes(buf[:8]))  # refused from its header alone, before the body arrives
    with pytest.raises(FramingError) as info:
        decoder.next_frame()
    assert info.value.condition == "amqp:connection:framing-error"
    decoder = FrameDecoder()
    decoder.max_frame_size = len(buf)
    decoder.feed(bytes(buf))
    assert decoder.next_frame() is not None


@pytest.mark.parametrize(
    "raw",
    [
        h("00 00 00 07 02 00 00 00"),  # size below the 8-byte header
        h("00 00 00 00 02 00 00 00"),
        h("00 00 00 08 01 00 00 00"),  # doff 1
        h("00 00 00 08 00 00 00 00"),  # doff 0
        h("00 00 00 0c 04 00 00 00 00 53 18 45"),  # doff 4 points past the end of a 12-byte frame
    ],
)
def test_bad_frame_headers(raw: bytes) -> None:
    decoder = FrameDecoder()
    decoder.feed(raw)
    with pytest.raises(FramingError) as info:
        decoder.next_frame()
    assert info.value.condition == "amqp:connection:framing-error"


@pytest.mark.parametrize(
    "raw",
    [
        h("00 00 00 0c 02 00 00 00 ff 53 18 45"),  # invalid format code
        h("00 00 00 0c 02 00 00 00 00 53 10 45"),  # open without its mandatory container-id
        h("00 00 00 0b 02 00 00 00 00 53 18 45 00 00 00 08"),  # body overruns into the next frame's bytes
        h("00 00 00 0d 02 00 00 00 00 53 18 c0 05"),  # list size beyond the frame
    ],
)
def test_bodies_that_do_not_decode(raw: bytes) -> None:
    decoder = FrameDecoder()
    decoder.feed(raw)
    with pytest.raises(DecodeError) as info:
        decoder.next_frame()
    assert not isinstance(info.value, FramingError)
    assert info.value.condition == "amqp:decode-error"


# --- against proton's engine, both directions ---------------------------------------------------------------


def pump(transport: Any) -> list[Frame]:
    """Take everything proton's transport has to write and decode it (frames only)."""
    pending = transport.pending()
    if pending <= 0:
        return []
    data = bytes(transport.peek(pending))
    transport.pop(pending)
    decoder = FrameDecoder()
    if data.startswith(b"AMQP"):
        decoder.feed(data)
        assert decoder.next_protocol_header() is not None
    else:
        decoder.feed(data)
    return list(decoder)


def test_proton_engine_accepts_our_frames_and_we_read_its_answers() -> None:
    server = proton.Transport(proton.Transport.SERVER)
    connection = proton.Connection()
    collector = proton.Collector()
    connection.collect(collector)
    server.bind(connection)

    out = bytearray(AMQP_HEADER)
    encode_frame(out, FRAME_AMQP, 0, Open(container_id="ours", hostname="peer.example", max_frame_size=65536))
    encode_frame(out, FRAME_AMQP, 0, Begin(next_outgoing_id=0, incoming_window=100, outgoing_window=100))
    attach = Attach(
        name="our-link",
        handle=0,
        role=SENDER,
        source=Source(address="here"),
        target=Target(address="there"),
        initial_delivery_count=0,
    )
    encode_frame(out, FRAME_AMQP, 0, attach)
    server.push(bytes(out))
    assert connection.remote_container == "ours"
    assert connection.remote_hostname == "peer.example"

    receiver = None
    while collector.peek():
        event = collector.peek()
        if event.type == proton.Event.CONNECTION_REMOTE_OPEN:
            event.connection.open()
        elif event.type == proton.Event.SESSION_REMOTE_OPEN:
            event.session.open()
        elif event.type == proton.Event.LINK_REMOTE_OPEN:
            receiver = event.link
            receiver.target.copy(receiver.remote_target)
            receiver.open()
            receiver.flow(10)
        collector.pop()
    assert receiver is not None and receiver.remote_target.address == "there"

    answers = [f.performative for f in pump(server)]
    assert [type(p) for p in answers] == [Open, Begin, Attach, Flow]
    assert answers[1].remote_channel == 0
    assert answers[2].role is RECEIVER and answers[2].name == "our-link"
    assert answers[3].link_credit == 10 and answers[3].handle == 0

    message = proton.Message(body="hello", subject="s")
    out = bytearray()
    transfer = Transfer(handle=0, delivery_id=0, delivery_tag=b"tag-0", message_format=0, settled=False)
    encode_frame(out, FRAME_AMQP, 0, transfer, message.encode())
    server.push(bytes(out))
    delivery = receiver.current
    assert delivery is not None and delivery.tag in ("tag-0", b"tag-0") and not delivery.partial
    received = proton.Message()
    received.decode(receiver.recv(delivery.pending))
    assert (received.body, received.subject) == ("hello", "s")
    delivery.update(proton.Delivery.ACCEPTED)
    delivery.settle()

    dispositions = [f.performative for f in pump(server) if isinstance(f.performative, Disposition)]
    assert dispositions == [Disposition(role=RECEIVER, first=0, last=0, settled=True, state=Accepted())] or (
        dispositions == [Disposition(role=RECEIVER, first=0, settled=True, state=Accepted())]
    )


def test_proton_sasl_client_bytes() -> None:
    transport = proton.Transport()
    sasl = transport.sasl()
    sasl.allowed_mechs("PLAIN")
    sasl.allow_insecure_mechs = True
    connection = proton.Connection()
    connection.user = "guest"
    connection.password = "secret"
    transport.bind(connection)
    connection.open()
    pending = transport.pending()
    data = bytes(transport.peek(pending))
    transport.pop(pending)
    decoder = FrameDecoder()
    decoder.feed(data)
    assert decoder.next_protocol_header() == ProtocolHeader(PROTOCOL_SASL, 1, 0, 0)
    assert list(decoder) == []  # the client waits for the server's mechanisms
    server = bytearray(SASL_HEADER)
    encode_frame(server, FRAME_SASL, 0, SaslMechanisms(sasl_server_mechanisms=["PLAIN", "ANONYMOUS"]))
    transport.push(bytes(server))
    pending = transport.pending()
    decoder.feed(bytes(transport.peek(pending)))
    transport.pop(pending)
    frame = decoder.next_frame()
    assert frame is not None and frame.type == FRAME_SASL
    init = frame.performative
    assert isinstance(init, SaslInit)
    assert init.mechanism == "PLAIN"
    assert init.initial_response == b"\x00guest\x00secret"


# --- hostile input: frames, None, or DecodeError, and nothing else --------------------------------------------


def _valid_stream() -> bytes:
    buf = bytearray()
    encode_frame(buf, FRAME_AMQP, 0, Open(container_id="c", offered_capabilities=["A"], properties={"k": [1]}))
    encode_frame(buf, FRAME_AMQP, 1, Attach(name="l", handle=0, role=SENDER, source=Source(address="s")))
    encode_frame(buf, FRAME_AMQP, 1, Transfer(handle=0, delivery_id=1, delivery_tag=b"t"), b"body")
    encode_frame(buf, FRAME_AMQP, 1, Disposition(role=RECEIVER, first=1, settled=True, state=Accepted()))
    return bytes(buf)


VALID_STREAM = _valid_stream()


def _drain(data: bytes) -> None:
    decoder = FrameDecoder(max_frame_size=4096)
    decoder.feed(data)
    try:
        while decoder.next_frame() is not None:
            pass
    except DecodeError:
        pass


@given(st.binary(max_size=300))
def test_arbitrary_bytes_give_frames_or_decode_errors(data: bytes) -> None:
    _drain(data)
    _drain(h("00 00 00 40 02 00 00 00") + data)


@given(st.data())
def test_corrupted_stream_gives_frames_or_decode_errors(data: st.DataObject) -> None:
    stream = bytearray(VALID_STREAM)
    for _ in range(data.draw(st.integers(1, 4))):
        index = data.draw(st.integers(0, len(stream) - 1))
        stream[index] = data.draw(st.integers(0, 255))
    _drain(bytes(stream))
