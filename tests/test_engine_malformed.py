"""Bad input to the Sans-IO engine: hand-made frames (`tests/frames.py`), one test per violation.

The engine's documented reaction (`amqp_async.protocol.connection`, "Errors"): a peer that breaks the protocol gets
the connection closed with the condition that names the breach, reported as a `ConnectionClosed` event with
``remote=False``, and the close frame the engine writes carries the same condition; session-scoped breaches end only
the session (`SessionEnded`, ``remote=False``, an end frame with the condition), link-scoped ones detach only the
link. A bad protocol header is answered with the engine's own header, and the engine stops. Never an exception out
of `receive_data`, never a hang; after the failure, further input is ignored.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amqp_async.codec import conditions
from amqp_async.codec.delivery_states import Accepted, Received
from amqp_async.codec.framing import EMPTY_FRAME
from amqp_async.codec.performatives import (
    RECEIVER,
    SENDER,
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
from amqp_async.codec.sasl_frames import SaslChallenge, SaslInit, SaslMechanisms, SaslOutcome, SaslResponse
from amqp_async.codec.terminus import Source, Target
from amqp_async.protocol.connection import Connection
from amqp_async.protocol.endpoint import CLOSED
from amqp_async.protocol.errors import LocalProtocolError
from amqp_async.protocol.events import (
    Authenticated,
    ConnectionClosed,
    ConnectionOpened,
    DeliveriesReceived,
    Event,
    LinkAttached,
    LinkDetached,
    SessionBegun,
    SessionEnded,
)
from amqp_async.protocol.link import ReceiverLink, SenderLink
from amqp_async.protocol.sasl import SaslClient, SaslServer
from amqp_async.protocol.sasl_scram import InMemoryCredentialStore
from amqp_async.protocol.session import Session
from amqp_async.types import Described, symbol, ulong

try:
    from frames import (
        AMQP_HEADER,
        FRAME_SASL,
        SASL_HEADER,
        TLS_HEADER,
        Header,
        ParsedFrame,
        body_bytes,
        close_error,
        detach_errors,
        end_errors,
        frame,
        frames_only,
        parse_stream,
        raw_frame,
        with_byte,
        with_doff,
        with_size,
    )
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.frames import (
        AMQP_HEADER,
        FRAME_SASL,
        SASL_HEADER,
        TLS_HEADER,
        Header,
        ParsedFrame,
        body_bytes,
        close_error,
        detach_errors,
        end_errors,
        frame,
        frames_only,
        parse_stream,
        raw_frame,
        with_byte,
        with_doff,
        with_size,
    )

PEER_OPEN = frame(Open(container_id="peer"))
PEER_BEGIN = frame(Begin(next_outgoing_id=0, incoming_window=100, outgoing_window=100))


# ----------------------------------------------------------------------------------------------------------------
# harness


def feed(conn: Connection, data: bytes, now: float = 0.0) -> tuple[list[Event], bytes]:
    """Give the engine bytes (anything but a clean return is a bug); return its events and its output."""
    conn.receive_data(data, now)
    # A copy: next_events() must hand over its list, but that is tested on its own (test_next_events_...).
    return list(conn.next_events()), conn.data_to_send()


def new_server(**options: Any) -> Connection:
    return Connection(role="server", container_id="server", **options)


def opened_server(**options: Any) -> Connection:
    """A server that has read the peer's header and open and answered them; its output is drained."""
    conn = new_server(**options)
    events, _ = feed(conn, AMQP_HEADER + PEER_OPEN)
    assert [type(e) for e in events] == [ConnectionOpened]
    conn.open()
    out = conn.data_to_send()
    assert [type(f.body) for f in frames_only(out)] == [Open]
    return conn


def with_session(**options: Any) -> tuple[Connection, Session]:
    """An opened server with a session the peer began on channel 0 (and we answered)."""
    conn = opened_server(**options)
    events, _ = feed(conn, PEER_BEGIN)
    [begun] = events
    assert isinstance(begun, SessionBegun)
    begun.session.begin()
    conn.data_to_send()
    return conn, begun.session


def sender_attach(handle: int = 0, name: str = "link", **fields: Any) -> Attach:
    """The peer's attach for a link on which it sends (we receive)."""
    fields.setdefault("initial_delivery_count", 0)
    return Attach(name=name, handle=handle, role=SENDER, source=Source(address="q"), target=Target(), **fields)


def receiver_attach(handle: int = 0, name: str = "link") -> Attach:
    """The peer's attach for a link on which it receives (we send)."""
    return Attach(name=name, handle=handle, role=RECEIVER, source=Source(), target=Target(address="q"))


def with_receiver(credit: int = 10, **options: Any) -> tuple[Connection, Session, ReceiverLink]:
    """A session with a link the peer attached as sender on handle 0; we answered and granted ``credit``."""
    conn, session = with_session(**options)
    events, _ = feed(conn, frame(sender_attach()))
    [attached] = events
    assert isinstance(attached, LinkAttached)
    link = attached.link
    assert isinstance(link, ReceiverLink)
    link.attach()
    if credit:
        link.grant_credit(credit)
    conn.data_to_send()
    return conn, session, link


def transfer(
    delivery_id: int | None, tag: bytes | None = b"t", handle: int = 0, payload: bytes = b"data", **kw: Any
) -> bytes:
    return frame(Transfer(handle=handle, delivery_id=delivery_id, delivery_tag=tag, **kw), payload=payload)


def assert_ignores_more_input(conn: Connection) -> None:
    """A connection that stopped takes no more input: no events, no output, no exception."""
    events, out = feed(conn, PEER_BEGIN + b"\x00garbage\xff" * 4)
    assert events == []
    assert out == b""
    events, out = feed(conn, b"")
    assert events == []
    assert out == b""


def assert_connection_error(conn: Connection, events: list[Event], out: bytes, condition: str) -> None:
    """The engine closed the connection with ``condition``: the event, the close frame, then silence."""
    closed = [e for e in events if isinstance(e, ConnectionClosed)]
    assert len(closed) == 1, events
    assert closed[0].remote is False
    assert closed[0].error is not None
    assert closed[0].error.condition == condition, closed[0].error
    error = close_error(out)
    assert error is not None
    assert error.condition == condition
    assert error.description == closed[0].error.description
    assert conn.closed
    assert_ignores_more_input(conn)


def assert_header_refused(conn: Connection, events: list[Event], out: bytes, answer: bytes | None) -> None:
    """A refused protocol header: our own header (``answer``, or nothing if ours was sent already), a local
    ConnectionClosed with an error, no frame at all, then silence."""
    assert out == (answer or b"")
    [closed] = events
    assert isinstance(closed, ConnectionClosed)
    assert closed.remote is False
    assert closed.error is not None
    assert conn.closed
    assert_ignores_more_input(conn)


def assert_session_error(conn: Connection, session: Session, events: list[Event], out: bytes, condition: str) -> None:
    """The engine ended only the session, with ``condition``; the connection stays open."""
    ended = [e for e in events if isinstance(e, SessionEnded)]
    assert len(ended) == 1, events
    assert ended[0].session is session
    assert ended[0].remote is False
    assert ended[0].error is not None
    assert ended[0].error.condition == condition
    assert [e.condition if e else None for e in end_errors(out)] == [condition]
    assert not [e for e in events if isinstance(e, ConnectionClosed)]
    assert not [f for f in frames_only(out) if isinstance(f.body, Close)]
    assert not conn.closed
    assert conn.is_open
    # Until the peer's end arrives, its frames for the session are dropped (§2.5.5 / §2.7.8).
    late_flow = frame(Flow(incoming_window=1, next_outgoing_id=0, outgoing_window=1))
    events, out = feed(conn, transfer(5, b"late") + late_flow)
    assert [e for e in events if isinstance(e, (ConnectionClosed, SessionEnded, LinkDetached))] == []
    assert not [f for f in frames_only(out) if isinstance(f.body, (Close, End))]
    # The peer's end completes it (SessionEnded was reported once, already); the channel is free again.
    events, out = feed(conn, frame(End()))
    assert events == []
    assert frames_only(out) == []
    assert session.remote_state.value == "closed"
    events, _ = feed(conn, PEER_BEGIN)
    assert [type(e) for e in events] == [SessionBegun]
    assert events[0].session is not session


# ----------------------------------------------------------------------------------------------------------------
# protocol headers


@pytest.mark.parametrize(
    "header",
    [
        pytest.param(b"GET / HTTP/1.1\r\nHost: example\r\n\r\n", id="http"),
        pytest.param(b"AMQP\x00\x02\x00\x00", id="amqp-2.0"),
        pytest.param(b"AMQP\x00\x01\x00\x01", id="amqp-1.0.1"),
        pytest.param(b"AMQP\x01\x01\x00\x00", id="protocol-id-1"),
        pytest.param(TLS_HEADER, id="tls"),
        pytest.param(SASL_HEADER, id="sasl-to-server-without-sasl"),
        pytest.param(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", id="tls-client-hello"),
    ],
)
def test_bad_header_to_amqp_server(header: bytes) -> None:
    conn = new_server()
    events, out = feed(conn, header)
    assert_header_refused(conn, events, out, AMQP_HEADER)


def test_bad_header_byte_by_byte() -> None:
    """A header that begins ``AMQP`` is judged once its 8 bytes are in, whatever the chunking."""
    conn = new_server()
    data = b"AMQP\x01\x01\x0a\x00"
    for index in range(7):
        events, out = feed(conn, data[index : index + 1])
        assert events == [] and out == b""
    events, out = feed(conn, data[7:8])
    assert_header_refused(conn, events, out, AMQP_HEADER)


def test_non_amqp_first_byte_is_refused_at_once() -> None:
    """Bytes that cannot begin ``AMQP`` are refused as they come (proton does too): a peer that sends three bytes
    of garbage and waits is not waited for."""
    conn = new_server()
    events, out = feed(conn, b"H")
    assert_header_refused(conn, events, out, AMQP_HEADER)
    assert events[0].protocol_header == b""


@pytest.mark.parametrize(
    "header",
    [
        pytest.param(AMQP_HEADER, id="amqp-to-sasl-server"),
        pytest.param(TLS_HEADER, id="tls"),
        pytest.param(b"AMQP\x03\x02\x00\x00", id="sasl-2.0"),
    ],
)
def test_bad_header_to_sasl_server(header: bytes) -> None:
    conn = new_server(sasl=SaslServer())
    events, out = feed(conn, header + PEER_OPEN)
    assert_header_refused(conn, events, out, SASL_HEADER)


def test_amqp_header_to_optional_sasl_server_is_accepted() -> None:
    """Control: a server with ``require_sasl=False`` takes a client that skips SASL."""
    conn = new_server(sasl=SaslServer(), require_sasl=False)
    events, out = feed(conn, AMQP_HEADER + PEER_OPEN)
    assert [type(e) for e in events] == [ConnectionOpened]
    assert out == AMQP_HEADER


@pytest.mark.parametrize(
    ("sasl", "answer"),
    [
        pytest.param(None, SASL_HEADER, id="client-without-sasl-gets-sasl"),
        pytest.param(SaslClient(), AMQP_HEADER, id="sasl-client-gets-amqp"),
        pytest.param(None, b"AMQP\x00\x01\x00\x01", id="client-gets-other-version"),
        pytest.param(None, b"HTTP/1.1 400 Bad Request\r\n\r\n", id="client-gets-http"),
    ],
)
def test_bad_header_to_client(sasl: SaslClient | None, answer: bytes) -> None:
    """A client has sent its header already: it writes nothing more and stops."""
    conn = Connection(role="client", container_id="client", sasl=sasl)
    conn.open()
    conn.data_to_send()
    events, out = feed(conn, answer)
    assert_header_refused(conn, events, out, None)


def _proton_answer(role: str, sasl: bool, answer: bytes) -> tuple[bytes, Error]:
    """What proton's engine writes once ``answer`` came as the peer's first bytes (a client: after its header and
    open), and the error it reports."""
    import proton

    transport = proton.Transport(proton.Transport.SERVER if role == "server" else proton.Transport.CLIENT)
    if sasl:
        transport.sasl()
    connection = proton.Connection()
    transport.bind(connection)

    def output() -> bytes:
        pending = transport.pending()
        if pending <= 0:
            return b""
        data = transport.peek(pending)
        transport.pop(pending)
        return bytes(data)

    if role == "client":
        connection.open()
        output()
    transport.push(answer)
    condition = transport.condition
    return output(), Error(symbol(condition.name), condition.description)


@pytest.mark.parametrize(
    ("role", "sasl", "answer"),
    [
        pytest.param("server", False, b"HTTP/1.1 400 Bad Request\r\n\r\n", id="server-http"),
        pytest.param("server", False, b"AMQP\x01\x01\x00\x0a", id="server-old-amqp"),
        pytest.param("client", False, SASL_HEADER, id="client-gets-sasl"),
        pytest.param("client", False, b"HTTP/1.1 400 Bad Request\r\n\r\n", id="client-gets-http"),
        pytest.param("client", True, AMQP_HEADER, id="sasl-client-gets-amqp"),
    ],
)
def test_close_after_refused_header_writes_protons_frames(role: str, sasl: bool, answer: bytes) -> None:
    """Given proton's error, close_after_refused_header() writes what proton's engine writes after the same first
    bytes: a server's AMQP header, an open with an empty container-id and the close; a client's close after its
    open; a client awaiting SASL's header nothing. Called again, nothing more."""
    theirs, error = _proton_answer(role, sasl, answer)
    assert error.condition == conditions.CONNECTION_FRAMING_ERROR  # the test's premise
    sasl_layer = (SaslServer() if role == "server" else SaslClient()) if sasl else None
    conn = Connection(role=role, container_id=role, sasl=sasl_layer)
    if role == "client":
        conn.open()
        conn.data_to_send()
    events, out = feed(conn, answer)
    assert isinstance(events[-1], ConnectionClosed) and events[-1].protocol_header is not None
    conn.close_after_refused_header(error)
    written = out + conn.data_to_send()
    conn.close_after_refused_header(error)
    assert written == theirs
    assert conn.data_to_send() == b""
    if any(isinstance(f.body, Close) for f in frames_only(written)):
        assert conn.local_state is CLOSED and conn.local_error == error


# ----------------------------------------------------------------------------------------------------------------
# frame headers


@pytest.mark.parametrize("size", [0, 1, 4, 7])
def test_frame_size_below_header(size: int) -> None:
    conn = opened_server()
    events, out = feed(conn, with_size(EMPTY_FRAME, size) + b"\x00" * 16)
    assert_connection_error(conn, events, out, conditions.CONNECTION_FRAMING_ERROR)


def test_frame_size_below_header_before_open() -> None:
    """Before the peer's open, a framing error still gets our open then our close (§2.4.1, §2.4.3)."""
    conn = new_server()
    events, out = feed(conn, AMQP_HEADER + with_size(EMPTY_FRAME, 3))
    assert parse_stream(out)[0] == Header(AMQP_HEADER)
    assert [type(f.body) for f in frames_only(out)] == [Open, Close]
    assert_connection_error(conn, events, out, conditions.CONNECTION_FRAMING_ERROR)


def test_frame_beyond_max_frame_size() -> None:
    """A size beyond our max-frame-size is refused from the frame header alone: no waiting for the body."""
    conn = opened_server(max_frame_size=512)
    header_only = raw_frame(b"", size=513)
    events, out = feed(conn, header_only)
    assert_connection_error(conn, events, out, conditions.CONNECTION_FRAMING_ERROR)


def test_frame_at_max_frame_size_is_accepted() -> None:
    """Control: exactly max-frame-size is fine (an attach padded through its properties)."""
    conn, _session = with_session(max_frame_size=512)
    short = len(frame(sender_attach(properties={symbol("pad"): "x" * 300})))
    padded = frame(sender_attach(properties={symbol("pad"): "x" * (300 + 512 - short)}))
    assert len(padded) == 512
    events, out = feed(conn, padded)
    assert [type(e) for e in events] == [LinkAttached]
    assert out == b""


@pytest.mark.parametrize("doff", [0, 1])
def test_data_offset_below_two(doff: int) -> None:
    conn = opened_server()
    events, out = feed(conn, with_doff(PEER_BEGIN, doff))
    assert_connection_error(conn, events, out, conditions.CONNECTION_FRAMING_ERROR)


def test_data_offset_beyond_frame() -> None:
    conn = opened_server()
    events, out = feed(conn, with_doff(PEER_BEGIN, 200))
    assert_connection_error(conn, events, out, conditions.CONNECTION_FRAMING_ERROR)


def test_extended_header_is_skipped() -> None:
    """Control: doff 3 with a 4-byte extended header is a valid frame."""
    conn = opened_server()
    begin = body_bytes(Begin(next_outgoing_id=0, incoming_window=5, outgoing_window=5))
    events, out = feed(conn, raw_frame(begin, doff=3, extended=b"\xde\xad\xbe\xef"))
    assert [type(e) for e in events] == [SessionBegun]
    assert out == b""


@pytest.mark.parametrize("frame_type", [FRAME_SASL, 2, 0xFF])
def test_frame_type_not_amqp_after_open(frame_type: int) -> None:
    conn = opened_server()
    events, out = feed(conn, frame(SaslOutcome(code=0), frame_type=frame_type))
    assert_connection_error(conn, events, out, conditions.CONNECTION_FRAMING_ERROR)


# ----------------------------------------------------------------------------------------------------------------
# frame bodies


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b"\xff", id="bad-format-code"),
        pytest.param(b"\x00\x53\x11\xc0\x10\x05\x40", id="list-size-overruns"),
        pytest.param(b"\x00\x53\x11\xc0\x03\x05\x43", id="count-beyond-size"),
        pytest.param(b"\x00\x53\x11\xc0\x05\x03\xa1\x09ab", id="string-overruns-list"),
        pytest.param(b"\x00\xa3\xffopen", id="symbol-descriptor-overruns"),
        pytest.param(b"\x00\x53\x11\xc0\x04\x03\x43\x43\x43\x00", id="performative-then-junk"),
        pytest.param(b"\x00\x53\x11\xc0\x03\x02\xa1\x01\xff", id="invalid-utf8"),
    ],
)
def test_garbage_body(body: bytes) -> None:
    conn = opened_server()
    events, out = feed(conn, raw_frame(body))
    assert_connection_error(conn, events, out, conditions.DECODE_ERROR)


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b"\x00\x53\x14\xc0\xff\x05\x43", id="fields-overrun-frame"),
        pytest.param(b"\x00\x53\x14\xc0\x02\x01\xff", id="bad-field-code"),
        pytest.param(b"\x00\x53\x14\x45", id="list0"),
        pytest.param(b"\x00\x53\x14\xa1\x01x", id="not-a-list"),
        # a uint (0x70) cut short by the end of the received bytes: the parser must not read past them
        pytest.param(b"\x00\x53\x14\xc0\x02\x01\x70", id="handle-uint-truncated"),
        pytest.param(b"\x00\x53\x14\xc0\x03\x02\x43\x70", id="delivery-id-uint-truncated"),
        pytest.param(b"\x00\x53\x14\xc0\x06\x04\x43\x43\xa0\x00\x70", id="message-format-uint-truncated"),
    ],
)
def test_garbage_transfer_fast_path(body: bytes) -> None:
    """The transfer fast path decodes the field list itself: bad fields are decode errors too."""
    conn, _session, _link = with_receiver()
    events, out = feed(conn, raw_frame(body))
    assert_connection_error(conn, events, out, conditions.DECODE_ERROR)


@pytest.mark.parametrize(
    "first",
    [
        pytest.param(PEER_BEGIN, id="begin"),
        pytest.param(frame(sender_attach()), id="attach"),
        pytest.param(frame(Close()), id="close"),
        pytest.param(transfer(0), id="transfer"),
        pytest.param(frame(Flow(incoming_window=1, next_outgoing_id=0, outgoing_window=1)), id="flow"),
    ],
)
def test_first_frame_not_open(first: bytes) -> None:
    conn = new_server()
    events, out = feed(conn, AMQP_HEADER + first)
    assert [type(f.body) for f in frames_only(out)] == [Open, Close]
    assert_connection_error(conn, events, out, conditions.NOT_ALLOWED)


@pytest.mark.parametrize("size", [0, 100, 511])
def test_open_max_frame_size_too_small(size: int) -> None:
    conn = new_server()
    events, out = feed(conn, AMQP_HEADER + frame(Open(container_id="peer", max_frame_size=size)))
    assert_connection_error(conn, events, out, conditions.FRAME_SIZE_TOO_SMALL)


def test_open_with_corrupted_descriptor() -> None:
    """An open whose descriptor code is changed to 0x7f (no such composite): a described value, not a
    performative."""
    data = AMQP_HEADER + with_byte(PEER_OPEN, 10, 0x7F)
    conn = new_server()
    events, out = feed(conn, data)
    assert_connection_error(conn, events, out, conditions.NOT_ALLOWED)


def test_open_twice() -> None:
    conn = opened_server()
    events, out = feed(conn, PEER_OPEN)
    assert_connection_error(conn, events, out, conditions.CONNECTION_FRAMING_ERROR)


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(Received(section_number=0, section_offset=ulong(0)), id="received-0x23"),
        pytest.param(Accepted(), id="accepted-0x24"),
        pytest.param(Source(address="x"), id="source"),
        pytest.param([1, 2, 3], id="plain-list"),
        pytest.param(Described(symbol("com.example:not-a-performative"), [1]), id="unknown-descriptor"),
        pytest.param(SaslInit(mechanism=symbol("PLAIN")), id="sasl-init"),
        pytest.param("text", id="string"),
    ],
)
def test_body_not_a_performative(body: Any) -> None:
    conn = opened_server()
    events, out = feed(conn, frame(body))
    assert_connection_error(conn, events, out, conditions.CONNECTION_FRAMING_ERROR)


# ----------------------------------------------------------------------------------------------------------------
# sessions and channels


def test_begin_on_channel_in_use() -> None:
    conn, _session = with_session()
    events, out = feed(conn, PEER_BEGIN)
    assert_connection_error(conn, events, out, conditions.NOT_ALLOWED)


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(Begin(next_outgoing_id=0, incoming_window=5, outgoing_window=5), id="begin"),
        pytest.param(Flow(incoming_window=1, next_outgoing_id=0, outgoing_window=1), id="flow"),
    ],
)
def test_channel_beyond_channel_max(body: Any) -> None:
    """§2.7.1 channel-max: "A peer that receives a channel number outside the supported range MUST close the
    connection with the framing-error error-code"."""
    conn = opened_server(channel_max=3)
    events, out = feed(conn, frame(body, channel=4))
    assert_connection_error(conn, events, out, conditions.CONNECTION_FRAMING_ERROR)


def test_begin_answering_no_session_of_ours() -> None:
    conn = opened_server()
    events, out = feed(conn, frame(Begin(remote_channel=3, next_outgoing_id=0, incoming_window=5, outgoing_window=5)))
    assert_connection_error(conn, events, out, conditions.NOT_ALLOWED)


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(frame(sender_attach(), channel=5), id="attach"),
        pytest.param(frame(Flow(incoming_window=1, next_outgoing_id=0, outgoing_window=1), channel=5), id="flow"),
        pytest.param(
            frame(Transfer(handle=0, delivery_id=0, delivery_tag=b"t"), channel=5, payload=b"x"), id="transfer"
        ),
        pytest.param(frame(Disposition(role=RECEIVER, first=0, settled=True), channel=5), id="disposition"),
        pytest.param(frame(Detach(handle=0), channel=5), id="detach"),
        pytest.param(frame(End(), channel=5), id="end"),
    ],
)
def test_frame_on_channel_without_session(data: bytes) -> None:
    conn, _session = with_session()
    events, out = feed(conn, data)
    assert_connection_error(conn, events, out, conditions.NOT_ALLOWED)


def test_frames_on_ended_channel() -> None:
    """After the session ended both ways, its channel has no session any more."""
    conn, session = with_session()
    session.end()
    conn.data_to_send()
    events, out = feed(conn, frame(End()))
    assert [type(e) for e in events] == [SessionEnded]
    events, out = feed(conn, frame(sender_attach()))
    assert_connection_error(conn, events, out, conditions.NOT_ALLOWED)


def test_attach_on_handle_in_use() -> None:
    conn, session, _link = with_receiver()
    events, out = feed(conn, frame(sender_attach(handle=0, name="other")))
    assert_session_error(conn, session, events, out, conditions.SESSION_HANDLE_IN_USE)


def test_attach_beyond_handle_max() -> None:
    """§2.7.2 handle-max: a handle outside the supported range closes the connection with framing-error."""
    conn = opened_server()
    events, _ = feed(conn, PEER_BEGIN)
    session = events[0].session
    session.handle_max = 3
    session.begin()
    conn.data_to_send()
    events, out = feed(conn, frame(sender_attach(handle=4)))
    assert_connection_error(conn, events, out, conditions.CONNECTION_FRAMING_ERROR)


def test_attach_sender_without_initial_delivery_count() -> None:
    conn, session = with_session()
    attach = Attach(name="l", handle=0, role=SENDER, source=Source(address="q"), target=Target())
    events, out = feed(conn, frame(attach))
    assert_session_error(conn, session, events, out, conditions.INVALID_FIELD)


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(transfer(0, handle=7), id="transfer"),
        pytest.param(
            frame(
                Flow(
                    incoming_window=1, next_outgoing_id=0, outgoing_window=1, handle=7, delivery_count=0, link_credit=1
                )
            ),
            id="flow",
        ),
        pytest.param(frame(Detach(handle=7, closed=True)), id="detach"),
    ],
)
def test_unattached_handle(data: bytes) -> None:
    conn, session, _link = with_receiver()
    events, out = feed(conn, data)
    assert_session_error(conn, session, events, out, conditions.SESSION_UNATTACHED_HANDLE)


def test_transfer_on_link_where_peer_receives() -> None:
    conn, session = with_session()
    events, _ = feed(conn, frame(receiver_attach()))
    link = events[0].link
    assert isinstance(link, SenderLink)
    link.attach()
    conn.data_to_send()
    events, out = feed(conn, transfer(0))
    assert_session_error(conn, session, events, out, conditions.INVALID_FIELD)


def test_transfer_beyond_credit() -> None:
    conn, session, link = with_receiver(credit=2)
    events, out = feed(conn, transfer(0, b"a") + transfer(1, b"b"))
    assert [type(e) for e in events] == [DeliveriesReceived]
    assert link.credit == 0
    events, out = feed(conn, transfer(2, b"c"))
    detached = [e for e in events if isinstance(e, LinkDetached)]
    assert len(detached) == 1
    assert detached[0].link is link
    assert detached[0].remote is False
    assert detached[0].closed is True
    assert detached[0].error is not None
    assert detached[0].error.condition == conditions.LINK_TRANSFER_LIMIT_EXCEEDED
    assert [e.condition if e else None for e in detach_errors(out)] == [conditions.LINK_TRANSFER_LIMIT_EXCEEDED]
    assert not [e for e in events if isinstance(e, (SessionEnded, ConnectionClosed))]
    assert [d.tag for d in link.incoming] == [b"a", b"b"]
    assert session.is_open and conn.is_open
    # More transfers in flight on the detached link are dropped; the peer's detach completes it (the detach was
    # reported once, already).
    events, out = feed(conn, transfer(3, b"d") + frame(Detach(handle=0, closed=True)))
    assert events == []
    assert frames_only(out) == []
    assert link.remote_state.value == "closed"
    assert session.is_open and conn.is_open


def test_transfers_in_flight_when_we_lowered_the_credit_are_taken_and_no_more() -> None:
    """§2.6.7: "If the link-credit is reduced by the receiver when transfers are in-flight, the receiver MAY either
    handle the excess messages normally or detach the link": handled, as many as the credit taken back (the broker
    lowers a producer's credit to what its memory limit leaves; a cancelled receive_many lowers it to the
    prefetch). Beyond them, detached as before."""
    conn, session, link = with_receiver(credit=5)
    link.grant_credit(2)  # three taken back; the sender may have used them already
    conn.data_to_send()
    events, _ = feed(conn, b"".join(transfer(n, bytes([97 + n])) for n in range(5)))
    assert not [e for e in events if isinstance(e, LinkDetached)]  # before: detached at the third
    assert [d.tag for d in link.incoming] == [b"a", b"b", b"c", b"d", b"e"] and link.credit == 0
    events, _ = feed(conn, transfer(5, b"f"))
    detached = [e for e in events if isinstance(e, LinkDetached)]
    assert len(detached) == 1 and detached[0].error is not None
    assert detached[0].error.condition == conditions.LINK_TRANSFER_LIMIT_EXCEEDED
    assert session.is_open and conn.is_open


@pytest.mark.parametrize("streaming", [False, True], ids=["whole", "streaming"])
@pytest.mark.parametrize(
    "continuation",
    [
        pytest.param({"tag": b"other"}, id="another-delivery-tag"),
        pytest.param({"tag": None, "message_format": 77}, id="another-message-format"),
    ],
)
def test_a_continuation_transfer_must_keep_the_first_frames_tag_and_format(
    continuation: dict[str, Any], streaming: bool
) -> None:
    """§2.7.5: "it is an error if the delivery-tag on a continuation transfer differs from the delivery-tag on the
    first transfer of a delivery" (the same for the message-format): the link is detached, nothing is handed over as
    a message made of two deliveries' parts, and the session and connection go on."""
    conn, session, link = with_receiver()
    link.streaming = streaming
    events, _ = feed(conn, transfer(0, b"t0", payload=b"part-one", more=True, message_format=0))
    events, out = feed(conn, transfer(None, payload=b"part-two", **continuation))
    detached = [e for e in events if isinstance(e, LinkDetached)]
    assert len(detached) == 1, events
    assert detached[0].error is not None and detached[0].error.condition == conditions.INVALID_FIELD
    assert "continuation transfer" in detached[0].error.description
    assert [e.condition if e else None for e in detach_errors(out)] == [conditions.INVALID_FIELD]
    if streaming:  # handed over at its first frame: now cut off, never complete
        [streamed] = link.incoming
        assert streamed.interrupted and not streamed.chunks
    else:
        assert not link.incoming
    assert session.is_open and conn.is_open


def test_a_continuation_transfer_may_repeat_the_first_frames_tag_and_format() -> None:
    conn, _session, link = with_receiver()
    feed(conn, transfer(0, b"t0", payload=b"one-", more=True, message_format=0))
    events, _ = feed(conn, transfer(0, b"t0", payload=b"two", message_format=0))
    assert [type(e) for e in events] == [DeliveriesReceived]
    [received] = link.incoming
    assert (received.tag, received.payload) == (b"t0", b"one-two")


def test_transfer_before_we_attached() -> None:
    """The peer attached as sender and transfers before our attach (so before any credit, §2.6.7): that is a
    transfer beyond the link credit (0), not something to drop silently."""
    conn, session = with_session()
    events, out = feed(conn, frame(sender_attach()) + transfer(0, b"early"))
    detached = [e for e in events if isinstance(e, LinkDetached)]
    assert len(detached) == 1, events
    assert detached[0].remote is False
    assert detached[0].error is not None
    assert detached[0].error.condition == conditions.LINK_TRANSFER_LIMIT_EXCEEDED
    assert [e.condition if e else None for e in detach_errors(out)] == [conditions.LINK_TRANSFER_LIMIT_EXCEEDED]
    assert session.is_open and conn.is_open


def test_transfer_without_delivery_id() -> None:
    conn, _session, _link = with_receiver()
    events, out = feed(conn, transfer(None, b"t"))
    assert_connection_error(conn, events, out, conditions.INVALID_FIELD)


def test_transfer_beyond_session_window() -> None:
    """Our incoming window is 1 frame: a second transfer before our flow reopens it is a window violation."""
    conn, session, _link = with_receiver(incoming_window=1)
    events, out = feed(conn, transfer(0, b"a") + transfer(1, b"b"))
    assert isinstance(events[0], DeliveriesReceived)
    assert_session_error(conn, session, events[1:], out, conditions.SESSION_WINDOW_VIOLATION)


def test_disposition_backwards_range() -> None:
    conn, _session = with_session()
    events, out = feed(conn, frame(Disposition(role=RECEIVER, first=5, last=2, settled=True, state=Accepted())))
    assert_connection_error(conn, events, out, conditions.INVALID_FIELD)


def test_disposition_huge_range_is_cheap() -> None:
    """Control: first=0, last=2**31-1 over nothing unsettled is fine (and bounded work)."""
    conn, _session = with_session()
    events, out = feed(conn, frame(Disposition(role=RECEIVER, first=0, last=(1 << 31) - 1, settled=True)))
    assert events == [] and out == b""
    assert conn.is_open


def test_close_then_more_frames_ignored() -> None:
    conn, _session = with_session()
    events, out = feed(conn, frame(Close()) + PEER_BEGIN + b"\xff" * 20)
    assert [type(e) for e in events] == [ConnectionClosed]
    assert events[0].remote is True
    assert [type(f.body) for f in frames_only(out)] == [Close]
    assert conn.closed


def test_peer_ends_session_before_we_answer() -> None:
    """The peer begins a session and ends it with an error before we answered: the peer started the end, so the
    event says ``remote=True`` and carries the peer's error (events.SessionEnded)."""
    conn = opened_server()
    error = Error(condition=symbol("amqp:internal-error"), description="changed my mind")
    events, _ = feed(conn, PEER_BEGIN + frame(End(error=error)))
    assert [type(e) for e in events] == [SessionBegun, SessionEnded]
    ended = events[1]
    assert ended.remote is True
    assert ended.error == error
    assert conn.is_open


def test_peer_detaches_link_before_we_answer() -> None:
    """The peer attaches a link and detaches it with an error before we answered: ``remote=True`` and the peer's
    error (events.LinkDetached)."""
    conn, _session = with_session()
    error = Error(condition=symbol("amqp:link:detach-forced"), description="gone")
    events, _ = feed(conn, frame(sender_attach()) + frame(Detach(handle=0, closed=True, error=error)))
    assert [type(e) for e in events] == [LinkAttached, LinkDetached]
    detached = events[1]
    assert detached.remote is True
    assert detached.error == error


def test_next_events_returns_a_fresh_list() -> None:
    """The list next_events() returned must not change afterwards (it is the caller's)."""
    conn = opened_server()
    first = conn.next_events()
    assert first == []
    feed(conn, PEER_BEGIN)
    assert first == []


# ----------------------------------------------------------------------------------------------------------------
# SASL


def sasl_server(**options: Any) -> Connection:
    """A server requiring SASL that has read the client's SASL header; its output is drained."""
    conn = new_server(sasl=SaslServer(**options))
    events, out = feed(conn, SASL_HEADER)
    assert events == []
    assert out.startswith(SASL_HEADER)
    return conn


def assert_sasl_failure(conn: Connection, events: list[Event], out: bytes, condition: str) -> None:
    """During SASL no AMQP close can be written: a local ConnectionClosed with the condition, no AMQP frame."""
    closed = [e for e in events if isinstance(e, ConnectionClosed)]
    assert len(closed) == 1, events
    assert closed[0].remote is False
    assert closed[0].error is not None
    assert closed[0].error.condition == condition
    assert not [f for f in frames_only(out) if f.frame_type != FRAME_SASL]
    assert not [e for e in events if isinstance(e, Authenticated)]
    assert conn.closed
    assert_ignores_more_input(conn)


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(SaslResponse(response=b"x"), id="response-before-init"),
        pytest.param(SaslOutcome(code=0), id="outcome-from-client"),
        pytest.param(SaslMechanisms(sasl_server_mechanisms=(symbol("PLAIN"),)), id="mechanisms-from-client"),
        pytest.param(Open(container_id="x"), id="open-as-sasl-frame"),
    ],
)
def test_sasl_server_frame_out_of_turn(body: Any) -> None:
    conn = sasl_server()
    events, out = feed(conn, frame(body, frame_type=FRAME_SASL))
    assert_sasl_failure(conn, events, out, conditions.NOT_ALLOWED)


def test_sasl_init_twice() -> None:
    """SCRAM takes several steps: a second sasl-init in the middle is out of turn."""
    conn = sasl_server(mechanisms=["SCRAM-SHA-256"], store=InMemoryCredentialStore({"user": "pass"}))
    init = SaslInit(mechanism=symbol("SCRAM-SHA-256"), initial_response=b"n,,n=user,r=abcdefghijklmnop")
    events, out = feed(conn, frame(init, frame_type=FRAME_SASL))
    assert events == []
    events, out = feed(conn, frame(init, frame_type=FRAME_SASL))
    assert_sasl_failure(conn, events, out, conditions.NOT_ALLOWED)


def test_amqp_frame_during_sasl() -> None:
    conn = sasl_server()
    events, out = feed(conn, PEER_OPEN)
    assert_sasl_failure(conn, events, out, conditions.CONNECTION_FRAMING_ERROR)


def test_garbage_sasl_body() -> None:
    conn = sasl_server()
    events, out = feed(conn, raw_frame(b"\x00\x53\x41\xc0\x10\x05", frame_type=FRAME_SASL))
    assert_sasl_failure(conn, events, out, conditions.DECODE_ERROR)


def sasl_client() -> Connection:
    conn = Connection(role="client", container_id="client", sasl=SaslClient())
    conn.open()
    assert conn.data_to_send() == SASL_HEADER
    return conn


@pytest.mark.parametrize(
    "bodies",
    [
        pytest.param([SaslOutcome(code=0)], id="outcome-before-mechanisms"),
        pytest.param([SaslChallenge(challenge=b"x")], id="challenge-before-mechanisms"),
        pytest.param([SaslResponse(response=b"x")], id="response-to-client"),
        pytest.param([SaslMechanisms(sasl_server_mechanisms=(symbol("ANONYMOUS"),))] * 2, id="mechanisms-twice"),
        pytest.param([SaslInit(mechanism=symbol("ANONYMOUS"))], id="init-to-client"),
    ],
)
def test_sasl_client_frame_out_of_turn(bodies: list[Any]) -> None:
    conn = sasl_client()
    data = SASL_HEADER + b"".join(frame(body, frame_type=FRAME_SASL) for body in bodies)
    events, out = feed(conn, data)
    assert_sasl_failure(conn, events, out, conditions.NOT_ALLOWED)


def test_sasl_client_no_common_mechanism() -> None:
    conn = sasl_client()
    mechanisms = SaslMechanisms(sasl_server_mechanisms=(symbol("GSSAPI"),))
    events, out = feed(conn, SASL_HEADER + frame(mechanisms, frame_type=FRAME_SASL))
    closed = [e for e in events if isinstance(e, ConnectionClosed)]
    assert len(closed) == 1 and closed[0].remote is False and closed[0].error is not None
    assert not [f for f in frames_only(out) if f.frame_type != FRAME_SASL]
    assert conn.closed


# ----------------------------------------------------------------------------------------------------------------
# end of stream


def test_truncated_frame_then_eof() -> None:
    conn, _session = with_session()
    data = frame(sender_attach())
    events, out = feed(conn, data[: len(data) // 2])
    assert events == [] and out == b""
    events, out = feed(conn, b"")
    [closed] = events
    assert isinstance(closed, ConnectionClosed)
    assert closed.remote is True
    assert closed.error is not None
    assert closed.error.condition == conditions.CONNECTION_FORCED
    assert out == b""
    assert conn.closed
    assert_ignores_more_input(conn)


def test_truncated_header_then_eof() -> None:
    conn = new_server()
    events, out = feed(conn, AMQP_HEADER[:5])
    assert events == [] and out == b""
    events, out = feed(conn, b"")
    [closed] = events
    assert isinstance(closed, ConnectionClosed)
    assert closed.remote is True
    assert closed.error is not None and closed.error.condition == conditions.CONNECTION_FORCED
    assert out == b""


def test_eof_after_close_is_quiet() -> None:
    conn = opened_server()
    feed(conn, frame(Close()))
    events, out = feed(conn, b"")
    assert events == [] and out == b""


# ----------------------------------------------------------------------------------------------------------------
# fuzzing


def check_reaction(conn: Connection, events: list[Event], out: bytes) -> None:
    """Whatever the input: the output parses; a local close carries the event's condition."""
    items = parse_stream(out)
    closes = [item.body for item in items if isinstance(item, ParsedFrame) and isinstance(item.body, Close)]
    local = [e for e in events if isinstance(e, ConnectionClosed) and not e.remote]
    assert len(local) <= 1
    if local:
        error = local[0].error
        assert error is not None and error.condition
        assert len(closes) == 1
        assert closes[0].error == error
        assert conn.closed
    for event in events:
        if isinstance(event, SessionEnded) and not event.remote:
            assert event.error is not None and event.error.condition


def exercise_commands(conn: Connection) -> None:
    """Our own commands after arbitrary input: they work or raise LocalProtocolError, nothing else."""
    try:
        session = conn.begin_session()
        link = session.attach_sender("fuzz-sender", source=Source(), target=Target(address="q"))
        link.send(b"payload")
    except LocalProtocolError:
        pass
    conn.tick(100.0)
    conn.data_to_send()
    conn.next_events()


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(garbage=st.binary(min_size=1, max_size=300), split=st.integers(min_value=0, max_value=300))
def test_random_bytes_after_open(garbage: bytes, split: int) -> None:
    conn = opened_server()
    events, out = feed(conn, garbage[:split])
    more_events, more_out = feed(conn, garbage[split:])
    check_reaction(conn, events + more_events, out + more_out)
    exercise_commands(conn)
    feed(conn, b"")


def _valid_stream() -> bytes:
    """Begin, attach (the peer sends), flow, two transfers (one split in two frames), a disposition, detach, end."""
    return b"".join(
        [
            PEER_BEGIN,
            frame(sender_attach()),
            frame(
                Flow(
                    incoming_window=100,
                    next_outgoing_id=0,
                    outgoing_window=100,
                    handle=0,
                    delivery_count=0,
                    link_credit=0,
                    available=3,
                )
            ),
            transfer(0, b"t0", payload=b"hello"),
            transfer(1, b"t1", payload=b"part-one", more=True),
            transfer(None, None, payload=b"part-two"),
            frame(Disposition(role=SENDER, first=0, last=1, settled=True, state=Accepted())),
            frame(Detach(handle=0, closed=True)),
            frame(End()),
        ]
    )


VALID_STREAM = _valid_stream()


def _answering_feed(conn: Connection, data: bytes) -> tuple[list[Event], bytes]:
    """Feed ``data``, answering sessions and links the peer starts (so the stream goes deep into the engine)."""
    conn.receive_data(data, 0.0)
    events = list(conn.next_events())
    for event in events:
        try:
            if isinstance(event, SessionBegun) and not event.session.locally_begun:
                event.session.begin()
            elif isinstance(event, LinkAttached) and not event.link.locally_attached:
                event.link.attach()
                if isinstance(event.link, ReceiverLink):
                    event.link.grant_credit(10)
        except LocalProtocolError:
            pass
    return events, conn.data_to_send()


def test_valid_stream_control() -> None:
    """Control for the mutation test: the stream, fed frame by frame and answered, is fine."""
    conn = opened_server()
    events: list[Event] = []
    for item in parse_stream(VALID_STREAM):
        assert isinstance(item, ParsedFrame)
        events += _answering_feed(conn, frame(item.body, payload=item.payload))[0]
    assert [type(e).__name__ for e in events].count("SessionEnded") == 1
    assert not [e for e in events if isinstance(e, ConnectionClosed)]
    received = [e for e in events if isinstance(e, DeliveriesReceived)]
    assert received
    link = received[0].link
    assert isinstance(link, ReceiverLink)
    assert [(d.tag, d.payload) for d in link.incoming] == [(b"t0", b"hello"), (b"t1", b"part-onepart-two")]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    edits=st.lists(
        st.tuples(
            st.integers(min_value=0, max_value=len(VALID_STREAM) - 1),
            st.integers(min_value=0, max_value=255),
            st.sampled_from(["replace", "insert", "delete"]),
        ),
        min_size=1,
        max_size=4,
    ),
    chunk=st.integers(min_value=1, max_value=64),
)
def test_mutated_valid_stream(edits: list[tuple[int, int, str]], chunk: int) -> None:
    data = bytearray(VALID_STREAM)
    for index, value, kind in edits:
        index %= max(len(data), 1)
        if kind == "replace" and data:
            data[index] = value
        elif kind == "insert":
            data.insert(index, value)
        elif data:
            del data[index]
    conn = opened_server()
    events: list[Event] = []
    out = b""
    for start in range(0, len(data), chunk):
        new_events, new_out = _answering_feed(conn, bytes(data[start : start + chunk]))
        events += new_events
        out += new_out
    check_reaction(conn, events, out)
    exercise_commands(conn)
    feed(conn, b"")
    # The engine ended up either still open or closed, never half-way.
    assert conn.closed or conn.is_open
