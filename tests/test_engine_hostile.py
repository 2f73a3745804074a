"""A hostile peer against the Sans-IO engine (issue 15): each class of violation, and our answers to it.

`test_engine_malformed.py` covers one violation at a time on an engine that has answered everything so far; this
file covers what a hostile (or merely pipelining) peer adds: violations that arrive in the same input as the frames
they follow, before we answered those (the broker answers ``open``, ``begin`` and ``attach`` after the input is
handled), and the application's answers that come after the engine has already reacted.

The rules (`amqp_async.protocol.connection`, "Errors", and docs/engine.md "Error handling"):

- nothing the peer sends raises out of ``receive_data``; the engine closes the connection, ends the session or
  detaches the link with the condition that names the breach, and reports it as an event (``remote=False``);
- a link error on a session we have not begun ends the session; a session error before our ``open`` closes the
  connection (nothing can be written in the narrower scope yet);
- a session or link the peer started and we have not answered is begun (attached) and ended (detached) at once;
- answering the peer's ``open``, ``begin`` or ``attach`` after the engine ended that endpoint does nothing.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amqp_async.codec import conditions
from amqp_async.codec.delivery_states import Accepted
from amqp_async.codec.performatives import (
    RECEIVER,
    Attach,
    Begin,
    Close,
    Detach,
    Disposition,
    End,
    Flow,
    Open,
)
from amqp_async.codec.terminus import Source, Target
from amqp_async.protocol.connection import Connection
from amqp_async.protocol.events import (
    ConnectionClosed,
    ConnectionOpened,
    DeliveriesReceived,
    Event,
    FlowReceived,
    LinkAttached,
    LinkDetached,
    SessionBegun,
    SessionEnded,
)
from amqp_async.protocol.link import ReceiverLink

try:
    from frames import (
        AMQP_HEADER,
        Header,
        close_error,
        detach_errors,
        end_errors,
        frame,
        frames_only,
        parse_stream,
        raw_frame,
    )
    from test_engine_malformed import (
        PEER_BEGIN,
        PEER_OPEN,
        VALID_STREAM,
        assert_connection_error,
        assert_session_error,
        check_reaction,
        feed,
        new_server,
        opened_server,
        sender_attach,
        transfer,
        with_receiver,
        with_session,
    )
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.frames import (
        AMQP_HEADER,
        Header,
        close_error,
        detach_errors,
        end_errors,
        frame,
        frames_only,
        parse_stream,
        raw_frame,
    )
    from tests.test_engine_malformed import (
        PEER_BEGIN,
        PEER_OPEN,
        VALID_STREAM,
        assert_connection_error,
        assert_session_error,
        check_reaction,
        feed,
        new_server,
        opened_server,
        sender_attach,
        transfer,
        with_receiver,
        with_session,
    )

PEER_END = frame(End())


def answer_all(conn: Connection, events: list[Event]) -> None:
    """The application answers everything the peer started, unconditionally (none of it is ours here), the way a
    server does after handling the input: it must never raise, whatever the engine did meanwhile."""
    for event in events:
        if isinstance(event, ConnectionOpened):
            conn.open()
        elif isinstance(event, SessionBegun):
            event.session.begin()
        elif isinstance(event, LinkAttached):
            link = event.link
            link.attach()
            if isinstance(link, ReceiverLink) and link.local_state.value == "active":
                link.grant_credit(10)


def feed_and_answer(conn: Connection, data: bytes) -> tuple[list[Event], bytes]:
    events, out = feed(conn, data)
    answer_all(conn, events)
    return events, out + conn.data_to_send()


def kinds(out: bytes) -> list[str]:
    return [type(item.body).__name__ for item in frames_only(out)]


def condition_of(event: Any) -> Any:
    return None if event.error is None else event.error.condition


# ----------------------------------------------------------------------------------------------------------------
# a second open


def test_second_open_in_the_input_of_the_first() -> None:
    """The peer's second open comes with its first, before we answered: the connection is closed (framing-error,
    an open is not a frame after open); our answer to the first open then does nothing."""
    conn = new_server()
    events, out = feed_and_answer(conn, AMQP_HEADER + PEER_OPEN + PEER_OPEN)
    assert [type(e) for e in events] == [ConnectionOpened, ConnectionClosed]
    assert condition_of(events[1]) == conditions.CONNECTION_FRAMING_ERROR
    assert kinds(out) == ["Open", "Close"]
    assert conn.closed


def test_second_open_after_ours() -> None:
    conn = opened_server()
    events, out = feed_and_answer(conn, PEER_OPEN)
    assert_connection_error(conn, events, out, conditions.CONNECTION_FRAMING_ERROR)
    conn.open()  # answering again does nothing either


# ----------------------------------------------------------------------------------------------------------------
# transfers before attach, and the widening of scopes


def test_transfer_before_any_answer_closes_the_connection() -> None:
    """open, begin, attach and a transfer in one input: nothing of ours is written yet, so the link error (a
    transfer before our attach, so beyond credit 0) closes the connection; every answer afterwards is a no-op."""
    conn = new_server()
    data = AMQP_HEADER + PEER_OPEN + PEER_BEGIN + frame(sender_attach()) + transfer(0, b"early")
    events, out = feed_and_answer(conn, data)
    assert [type(e) for e in events] == [ConnectionOpened, SessionBegun, LinkAttached, ConnectionClosed]
    assert condition_of(events[-1]) == conditions.LINK_TRANSFER_LIMIT_EXCEEDED
    assert kinds(out) == ["Open", "Close"]
    error = close_error(out)
    assert error is not None and error.condition == conditions.LINK_TRANSFER_LIMIT_EXCEEDED


def test_transfer_before_we_began_the_session_ends_it() -> None:
    """begin, attach and a transfer before our begin: the session is begun and ended with the link's condition;
    our late answers do nothing; the connection stays open and the channel is reusable after the peer's end."""
    conn = opened_server()
    events, out = feed_and_answer(conn, PEER_BEGIN + frame(sender_attach()) + transfer(0, b"early"))
    assert [type(e) for e in events] == [SessionBegun, LinkAttached, SessionEnded]
    ended = events[-1]
    assert ended.remote is False and condition_of(ended) == conditions.LINK_TRANSFER_LIMIT_EXCEEDED
    assert kinds(out) == ["Begin", "End"]
    assert [e.condition if e else None for e in end_errors(out)] == [conditions.LINK_TRANSFER_LIMIT_EXCEEDED]
    assert conn.is_open
    events, out = feed_and_answer(conn, PEER_END)
    assert events == [] and out == b""
    events, out = feed_and_answer(conn, PEER_BEGIN)
    assert [type(e) for e in events] == [SessionBegun]
    assert kinds(out) == ["Begin"]


def test_transfer_before_we_attached_refuses_the_link() -> None:
    """With our begin written, the link alone is refused (attach and detach, §2.6.3); our late attach does
    nothing."""
    conn, session = with_session()
    events, out = feed_and_answer(conn, frame(sender_attach()) + transfer(0, b"early"))
    assert [type(e) for e in events] == [LinkAttached, LinkDetached]
    assert condition_of(events[1]) == conditions.LINK_TRANSFER_LIMIT_EXCEEDED
    assert kinds(out) == ["Attach", "Detach"]
    assert [e.condition if e else None for e in detach_errors(out)] == [conditions.LINK_TRANSFER_LIMIT_EXCEEDED]
    assert session.is_open and conn.is_open


def test_session_error_before_our_open_closes_the_connection() -> None:
    """A session-scoped breach (a flow naming a handle that is not attached) before our open: the connection."""
    conn = new_server()
    flow = Flow(incoming_window=1, next_outgoing_id=0, outgoing_window=1, handle=3, delivery_count=0, link_credit=1)
    events, out = feed_and_answer(conn, AMQP_HEADER + PEER_OPEN + PEER_BEGIN + frame(flow))
    assert [type(e) for e in events] == [ConnectionOpened, SessionBegun, ConnectionClosed]
    assert condition_of(events[-1]) == conditions.SESSION_UNATTACHED_HANDLE
    assert kinds(out) == ["Open", "Close"]


# ----------------------------------------------------------------------------------------------------------------
# flows and dispositions in the wrong state


def test_flow_for_an_unattached_handle_before_our_begin() -> None:
    conn = opened_server()
    flow = Flow(incoming_window=1, next_outgoing_id=0, outgoing_window=1, handle=3, delivery_count=0, link_credit=1)
    events, out = feed_and_answer(conn, PEER_BEGIN + frame(flow))
    assert [type(e) for e in events] == [SessionBegun, SessionEnded]
    assert condition_of(events[1]) == conditions.SESSION_UNATTACHED_HANDLE
    assert kinds(out) == ["Begin", "End"]


def test_flow_on_a_link_we_detached_is_taken_quietly() -> None:
    """Until the peer's detach arrives, its flows for the link are in flight, not a breach (§2.6.4); an echo is not
    answered on a detached link."""
    conn, session, link = with_receiver()
    link.detach()
    conn.data_to_send()
    flow = Flow(
        incoming_window=10, next_outgoing_id=0, outgoing_window=10, handle=0, delivery_count=0, link_credit=5, echo=True
    )
    events, out = feed_and_answer(conn, frame(flow))
    assert [type(e) for e in events] == [FlowReceived]
    assert out == b""
    assert session.is_open and conn.is_open


@pytest.mark.parametrize(
    "disposition",
    [
        pytest.param(Disposition(role=RECEIVER, first=7, settled=True, state=Accepted()), id="ids-never-sent"),
        pytest.param(Disposition(role=RECEIVER, first=5, last=9, settled=False, state=Accepted()), id="range"),
        pytest.param(Disposition(role=False, first=3, settled=False), id="sender-role-nothing-received"),
    ],
)
def test_disposition_for_nothing_is_ignored(disposition: Disposition) -> None:
    conn, session = with_session()
    events, out = feed_and_answer(conn, frame(disposition))
    assert events == [] and out == b""
    assert session.is_open and conn.is_open


def test_disposition_after_we_ended_the_session_is_ignored() -> None:
    conn, session = with_session()
    session.end()
    conn.data_to_send()
    events, out = feed_and_answer(conn, frame(Disposition(role=RECEIVER, first=0, settled=True)))
    assert events == [] and out == b""


# ----------------------------------------------------------------------------------------------------------------
# frame sizes


@pytest.mark.parametrize(
    ("size", "condition"),
    [
        pytest.param(0, conditions.CONNECTION_FRAMING_ERROR, id="size-0"),
        pytest.param(7, conditions.CONNECTION_FRAMING_ERROR, id="size-7"),
        pytest.param(70000, conditions.CONNECTION_FRAMING_ERROR, id="beyond-max-frame-size"),
        pytest.param(0xFFFFFFFF, conditions.CONNECTION_FRAMING_ERROR, id="size-2**32-1"),
    ],
)
def test_frame_size_lies_right_after_the_header(size: int, condition: str) -> None:
    """A size field that cannot be (below the 8-byte header, beyond our max-frame-size) in the first frame."""
    conn = new_server()
    events, out = feed_and_answer(conn, AMQP_HEADER + raw_frame(b"\x00\x53\x10\x45", size=size) + b"\x00" * 64)
    [closed] = [e for e in events if isinstance(e, ConnectionClosed)]
    assert closed.remote is False and condition_of(closed) == condition
    assert kinds(out) == ["Open", "Close"]
    error = close_error(out)
    assert error is not None and error.condition == condition
    assert conn.closed


@pytest.mark.parametrize("body", [b"\x00", b"\x00\x53", b"\x00\x53\x14", b"\x40"], ids=lambda b: b.hex())
def test_undersized_frame_body(body: bytes) -> None:
    """A body too short for any performative (one byte once reached past the end of the frame)."""
    conn, _session = with_session()
    events, out = feed(conn, raw_frame(body))
    [closed] = [e for e in events if isinstance(e, ConnectionClosed)]
    assert closed.remote is False
    assert condition_of(closed) in (conditions.DECODE_ERROR, conditions.CONNECTION_FRAMING_ERROR)
    assert_connection_error(conn, events, out, condition_of(closed))


# ----------------------------------------------------------------------------------------------------------------
# lying size and count fields in the encoding


OPEN_DESCRIPTOR = b"\x00\x53\x10"
TRANSFER_DESCRIPTOR = b"\x00\x53\x14"


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(OPEN_DESCRIPTOR + b"\xc0\x03\x05\xa1\x01x", id="list8-count-beyond-items"),
        pytest.param(OPEN_DESCRIPTOR + b"\xc0\xff\x01\xa1\x01x", id="list8-size-beyond-frame"),
        pytest.param(OPEN_DESCRIPTOR + b"\xd0\xff\xff\xff\xff\x00\x00\x00\x01\xa1\x01x", id="list32-size-2**32-1"),
        pytest.param(OPEN_DESCRIPTOR + b"\xd0\x00\x00\x00\x07\xff\xff\xff\xff\xa1\x01x", id="list32-count-huge"),
        pytest.param(OPEN_DESCRIPTOR + b"\xc0\x04\x01\xa1\x20x", id="str8-size-beyond-frame"),
        pytest.param(OPEN_DESCRIPTOR + b"\xc0\x07\x01\xb1\x7f\xff\xff\xffx", id="str32-size-huge"),
        pytest.param(OPEN_DESCRIPTOR + b"\xc0\x06\x02\xa1\x01x\xc1\x01\x03", id="map8-odd-count"),
        pytest.param(OPEN_DESCRIPTOR + b"\xc0\x08\x02\xa1\x01x\xe0\x03\x09\xa3", id="array8-count-beyond-items"),
        pytest.param(TRANSFER_DESCRIPTOR + b"\xc0\x06\x09\x43\x43\xa0\x01t", id="transfer-count-beyond-items"),
        pytest.param(TRANSFER_DESCRIPTOR + b"\xc0\x06\x03\x43\x43\xa0\x30t", id="transfer-tag-size-beyond-list"),
        pytest.param(TRANSFER_DESCRIPTOR + b"\xc0\x05\x03\x45\x43\xa0\x00", id="transfer-handle-is-a-list"),
        pytest.param(TRANSFER_DESCRIPTOR + b"\xc0\x06\x03\x43\xa1\x01x\x40", id="transfer-delivery-id-is-a-string"),
        pytest.param(TRANSFER_DESCRIPTOR + b"\xc0\x05\x03\x43\x43\x52\x07", id="transfer-tag-is-a-ubyte"),
    ],
)
def test_lying_sizes_and_counts(body: bytes) -> None:
    """Each closes the connection with decode-error (or framing-error: not a performative), and nothing escapes."""
    conn, _session, _link = with_receiver()
    events, out = feed(conn, raw_frame(body))
    [closed] = [e for e in events if isinstance(e, ConnectionClosed)]
    assert closed.remote is False
    assert condition_of(closed) in (conditions.DECODE_ERROR, conditions.CONNECTION_FRAMING_ERROR), closed.error
    assert_connection_error(conn, events, out, condition_of(closed))


# ----------------------------------------------------------------------------------------------------------------
# channels and handles in use, unknown ends and detaches


def test_begin_on_a_used_channel_before_we_answered() -> None:
    conn = opened_server()
    events, out = feed_and_answer(conn, PEER_BEGIN + PEER_BEGIN)
    assert [type(e) for e in events] == [SessionBegun, ConnectionClosed]
    assert condition_of(events[1]) == conditions.NOT_ALLOWED
    assert kinds(out) == ["Close"]


def test_attach_with_a_used_handle_before_we_began() -> None:
    conn = opened_server()
    data = PEER_BEGIN + frame(sender_attach(handle=0)) + frame(sender_attach(handle=0, name="other"))
    events, out = feed_and_answer(conn, data)
    assert [type(e) for e in events] == [SessionBegun, LinkAttached, SessionEnded]
    assert condition_of(events[-1]) == conditions.SESSION_HANDLE_IN_USE
    assert kinds(out) == ["Begin", "End"]


def test_attach_with_a_used_handle_ends_the_session() -> None:
    conn, session, _link = with_receiver()
    events, out = feed(conn, frame(sender_attach(handle=0, name="other")))
    assert_session_error(conn, session, events, out, conditions.SESSION_HANDLE_IN_USE)


@pytest.mark.parametrize(
    "fields",
    [pytest.param({"snd_settle_mode": 32}, id="snd-settle-mode-32"), pytest.param({"rcv_settle_mode": 2}, id="rcv-2")],
)
def test_attach_with_settle_modes_out_of_range(fields: dict[str, int]) -> None:
    """§2.8.2/§2.8.3 enumerations: found by the broker's network fuzz (a broker mirrors the modes in its answer)."""
    conn, session = with_session()
    events, out = feed(conn, frame(sender_attach(**fields)))
    assert_session_error(conn, session, events, out, conditions.INVALID_FIELD)


def test_end_twice() -> None:
    """The second end names a channel that has no session any more: not-allowed, the connection."""
    conn, _session = with_session()
    events, out = feed_and_answer(conn, PEER_END)
    assert [type(e) for e in events] == [SessionEnded]
    assert kinds(out) == ["End"]
    events, out = feed_and_answer(conn, PEER_END)
    assert_connection_error(conn, events, out, conditions.NOT_ALLOWED)


def test_detach_twice() -> None:
    """The second detach names a handle that is not attached any more: unattached-handle, the session."""
    conn, session, _link = with_receiver()
    events, out = feed_and_answer(conn, frame(Detach(handle=0, closed=True)))
    assert [type(e) for e in events] == [LinkDetached]
    assert kinds(out) == ["Detach"]
    events, out = feed(conn, frame(Detach(handle=0, closed=True)))
    assert_session_error(conn, session, events, out, conditions.SESSION_UNATTACHED_HANDLE)


def test_detach_of_an_unknown_handle_before_we_began() -> None:
    conn = opened_server()
    events, out = feed_and_answer(conn, PEER_BEGIN + frame(Detach(handle=9, closed=True)))
    assert [type(e) for e in events] == [SessionBegun, SessionEnded]
    assert condition_of(events[1]) == conditions.SESSION_UNATTACHED_HANDLE
    assert kinds(out) == ["Begin", "End"]


def test_peer_begins_and_ends_before_we_answer() -> None:
    """No breach, but the same race: the engine answers the end (a begin, then an end), our begin does nothing."""
    conn = opened_server()
    events, out = feed_and_answer(conn, PEER_BEGIN + PEER_END)
    assert [type(e) for e in events] == [SessionBegun, SessionEnded]
    assert events[1].remote is True
    assert kinds(out) == ["Begin", "End"]
    events, out = feed_and_answer(conn, PEER_BEGIN)
    assert [type(e) for e in events] == [SessionBegun]
    assert kinds(out) == ["Begin"]


def test_peer_attaches_and_detaches_before_we_answer() -> None:
    conn, session = with_session()
    events, out = feed_and_answer(conn, frame(sender_attach()) + frame(Detach(handle=0, closed=True)))
    assert [type(e) for e in events] == [LinkAttached, LinkDetached]
    assert events[1].remote is True
    assert kinds(out) == ["Attach", "Detach"]
    assert session.links == []
    events, out = feed_and_answer(conn, frame(sender_attach()))  # the name and handle are free again
    assert [type(e) for e in events] == [LinkAttached]
    assert kinds(out) == ["Attach", "Flow"]


def test_peer_closes_in_the_input_of_its_open() -> None:
    conn = new_server()
    events, out = feed_and_answer(conn, AMQP_HEADER + PEER_OPEN + PEER_BEGIN + frame(Close()))
    assert [type(e) for e in events] == [ConnectionOpened, SessionBegun, ConnectionClosed]
    assert events[-1].remote is True
    assert kinds(out) == ["Open", "Close"]


# ----------------------------------------------------------------------------------------------------------------
# pipelined fuzzing: the whole conversation in one input, answered afterwards


PIPELINED_STREAM = AMQP_HEADER + PEER_OPEN + VALID_STREAM + frame(Close())


def test_pipelined_stream_control() -> None:
    """Control: the valid stream pipelined behind the open (the peer does not wait for us): its transfers come
    before our attach, so the connection is closed for them, and every answer is a no-op."""
    conn = new_server()
    events, out = feed_and_answer(conn, PIPELINED_STREAM)
    assert isinstance(events[0], ConnectionOpened)
    [closed] = [e for e in events if isinstance(e, ConnectionClosed)]
    assert condition_of(closed) == conditions.LINK_TRANSFER_LIMIT_EXCEEDED
    assert isinstance(parse_stream(out)[0], Header)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    edits=st.lists(
        st.tuples(
            st.integers(min_value=8, max_value=len(PIPELINED_STREAM) - 1),
            st.integers(min_value=0, max_value=255),
            st.sampled_from(["replace", "insert", "delete"]),
        ),
        min_size=0,
        max_size=4,
    ),
    cuts=st.lists(st.integers(min_value=0, max_value=len(PIPELINED_STREAM)), max_size=4),
)
def test_mutated_pipelined_stream_is_answered_without_errors(
    edits: list[tuple[int, int, str]], cuts: list[int]
) -> None:
    """Whatever the mutation and however the input is cut, the engine never raises, and an application that
    answers every event without looking (as a server does, after the input) never trips a state check."""
    data = bytearray(PIPELINED_STREAM)
    for index, value, kind in edits:
        index = 8 + index % max(len(data) - 8, 1)  # the protocol header stays (its refusal is tested elsewhere)
        if kind == "insert":
            data.insert(index, value)
        elif index < len(data):
            if kind == "replace":
                data[index] = value
            else:
                del data[index]
    conn = new_server()
    events: list[Event] = []
    out = b""
    start = 0
    for cut in [*sorted(cuts), len(data)]:
        if cut < start:
            continue
        new_events, new_out = feed_and_answer(conn, bytes(data[start:cut]))
        events += new_events
        out += new_out
        start = cut
    check_reaction(conn, events, out)
    feed_and_answer(conn, b"")
    assert conn.closed or conn.is_open
    assert len([e for e in events if isinstance(e, DeliveriesReceived)]) <= 2


def test_open_with_nothing_else_is_answered() -> None:
    """Control for the helpers: a lone open is answered with our open."""
    conn = new_server()
    events, out = feed_and_answer(conn, AMQP_HEADER + frame(Open(container_id="peer")))
    assert [type(e) for e in events] == [ConnectionOpened]
    assert kinds(out) == ["Open"]
    assert not [f for f in frames_only(out) if isinstance(f.body, (Begin, Attach))]


# --- limits the peer set itself ----------------------------------------------------------------------------------


def test_a_second_link_beyond_the_peers_own_handle_max_ends_the_session_naming_it() -> None:
    """The peer begins with handle-max 0 and attaches two links: our answer to the second would need a handle
    above 0, which the peer said it cannot take (§2.7.2). The session ends with resource-limit-exceeded, the
    connection stands (before, answering raised out of the application's attach: the broker closed the connection
    with internal-error)."""
    conn = opened_server()
    begin = frame(Begin(next_outgoing_id=0, incoming_window=100, outgoing_window=100, handle_max=0))
    first = frame(Attach(name="a", handle=0, role=True, source=Source(address="q1"), target=Target()))
    second = frame(Attach(name="b", handle=1, role=True, source=Source(address="q2"), target=Target()))
    events, out = feed_and_answer(conn, begin + first + second)
    assert [type(e) for e in events] == [SessionBegun, LinkAttached, SessionEnded]
    assert condition_of(events[-1]) == conditions.RESOURCE_LIMIT_EXCEEDED
    assert kinds(out) == ["Begin", "End"]  # the first link's late answer does nothing: its session ended
    [error] = end_errors(out)
    assert error is not None and "no handle is left to answer on within handle-max 0" in str(error.description)
    assert conn.is_open


def test_a_second_session_beyond_the_peers_own_channel_max_closes_the_connection_naming_it() -> None:
    """The peer opens with channel-max 0 and begins two sessions: no channel is left for our answer to the second
    (§2.7.1), and nothing of it can be written: the connection is closed with resource-limit-exceeded."""
    conn = new_server()
    data = AMQP_HEADER + frame(Open(container_id="eager", channel_max=0)) + PEER_BEGIN
    data += frame(Begin(next_outgoing_id=0, incoming_window=100, outgoing_window=100), channel=1)
    events, out = feed_and_answer(conn, data)
    assert [type(e) for e in events] == [ConnectionOpened, SessionBegun, ConnectionClosed]
    error = close_error(out)
    assert error is not None and error.condition == conditions.RESOURCE_LIMIT_EXCEEDED
    assert "no channel is left to answer on within channel-max 0" in str(error.description)


def test_within_the_peers_limits_every_link_and_session_is_answered() -> None:
    """handle-max 1 and channel-max 1: two links and two sessions are answered, nothing refused."""
    conn = new_server()
    data = AMQP_HEADER + frame(Open(container_id="exact", channel_max=1))
    for channel in (0, 1):
        data += frame(
            Begin(next_outgoing_id=0, incoming_window=100, outgoing_window=100, handle_max=1), channel=channel
        )
        for handle in (0, 1):
            attach = Attach(
                name=f"l{channel}{handle}", handle=handle, role=True, source=Source(address="q"), target=Target()
            )
            data += frame(attach, channel=channel)
    _events, out = feed_and_answer(conn, data)
    assert kinds(out) == ["Open", "Begin", "Attach", "Attach", "Begin", "Attach", "Attach"]
    assert conn.is_open
