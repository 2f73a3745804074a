"""The engine's hooks for a layer above that runs its own model of AMQP's state (proton's engine API,
``amqp_async.proton``), on a pair of our engines in memory, each claim checked against the frames on the wire.

A delivery sent in parts as its bytes come (``send(more=True)``, ``send_more``, an abort in between); a sender's
unsettled disposition (``set_state``); a session whose incoming window the layer above sets; transfer frames filled
exactly to the peer's max-frame-size; frame counters; the protocol header written before open; an engine closed
by the layer above's own clock; an authorization identity a server accepts by its own policy.
"""

from __future__ import annotations

from typing import Any

import pytest
from test_engine_pair import Peer, begun, connected, last, link_setup, sender_pair

from amqp_async.codec import conditions
from amqp_async.codec.delivery_states import Accepted, Received
from amqp_async.codec.framing import AMQP_HEADER
from amqp_async.codec.performatives import RECEIVER, SENDER, Close, Disposition, Flow, Transfer
from amqp_async.protocol import events as ev
from amqp_async.protocol.errors import LocalProtocolError
from amqp_async.protocol.sasl import SaslClient, SaslServer
from amqp_async.protocol.sasl_mechanisms import SaslCode
from amqp_async.protocol.transfer_frames import transfer_head_size

try:
    from engine_peer import CLIENT, SERVER, pump
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.engine_peer import CLIENT, SERVER, pump


def _transfers(peer: Peer) -> list[Transfer]:
    return peer.performatives(Transfer)


# --- a delivery in parts ---------------------------------------------------------------------------------------


def test_a_delivery_sent_in_parts_goes_as_the_parts_come() -> None:
    c, s, sender, receiver = link_setup(credit=5)
    delivery = sender.send(b"first,", tag=b"parts", more=True)
    pump(c, s)
    assert receiver._current is not None and s.received == []  # the receiver holds a partial delivery
    sender.send_more(delivery, b"second,", more=True)
    sender.send_more(delivery, b"", more=True)  # an empty part writes nothing
    pump(c, s)
    sender.send_more(delivery, b"")  # the end: one empty frame with more unset
    pump(c, s)
    [got] = s.received
    assert (got.payload, got.tag) == (b"first,second,", b"parts")
    transfers = _transfers(c)
    assert [bool(t.more) for t in transfers] == [True, True, False]
    assert sender.credit == 4  # one credit, used when the delivery started
    with pytest.raises(LocalProtocolError):
        sender.send_more(delivery, b"too late")


def test_a_delivery_in_parts_fills_frames_to_the_peer_max_frame_size() -> None:
    c, s, sender, _ = link_setup(credit=5, server={"max_frame_size": 600})
    delivery = sender.send(b"a" * 1300, tag=b"big", more=True)
    sender.send_more(delivery, b"b" * 200)
    pump(c, s)
    frames = [frame for frame in c.frames(600) if isinstance(frame.performative, Transfer)]
    sizes = [len(frame.payload) + _head(frame) for frame in frames]
    # The first part fills two frames exactly (its rest goes in a third); the last part is one frame.
    assert sizes[:2] == [600, 600] and len(frames) == 4 and sum(len(f.payload) for f in frames) == 1500
    [got] = s.received
    assert got.payload == b"a" * 1300 + b"b" * 200


def _head(frame: Any) -> int:
    transfer = frame.performative
    return transfer_head_size(
        0, b"\x43", transfer.delivery_id, transfer.delivery_tag, 0, bool(transfer.settled), bool(transfer.more)
    )


def test_a_delivery_aborted_while_in_parts() -> None:
    c, s, sender, _ = link_setup(credit=5)
    delivery = sender.send(b"part", tag=b"gone", more=True)
    pump(c, s)
    sender.session.abort(delivery)
    pump(c, s)
    [got] = s.received
    assert got.aborted and delivery.aborted and delivery.settled
    last_transfer = _transfers(c)[-1]
    assert last_transfer.aborted and last_transfer.settled and not last_transfer.more
    assert not sender.session.unwritten(delivery)


def test_frames_beyond_the_window_wait_and_unwritten_says_so() -> None:
    c, s, sender, receiver = link_setup(credit=5)
    receiving_session = receiver.session
    receiving_session.set_incoming_window(1)
    pump(c, s)
    first = sender.send(b"one", tag=b"1")
    second = sender.send(b"two", tag=b"2")
    assert not sender.session.unwritten(first) and sender.session.unwritten(second)
    assert sender.session.outgoing_backlog == 3
    pump(c, s)
    assert [d.payload for d in s.received] == [b"one"]  # the window is the layer above's: not reopened
    receiving_session.set_incoming_window(4)
    pump(c, s)
    assert [d.payload for d in s.received] == [b"one", b"two"]
    assert not sender.session.unwritten(second)


# --- states, windows, counters ---------------------------------------------------------------------------------


def test_a_sender_tells_its_state_before_it_settles() -> None:
    c, s, sender, _ = link_setup(credit=5)
    delivery = sender.send(b"m", tag=b"t")
    pump(c, s)
    sender.set_state(delivery, Received(section_number=1, section_offset=2))
    pump(c, s)
    disposition = c.performatives(Disposition)[-1]
    assert disposition.role is SENDER and not disposition.settled
    assert disposition.state == Received(section_number=1, section_offset=2)
    [got] = s.received
    assert got.remote_state == Received(section_number=1, section_offset=2)
    sender.settle(delivery, Accepted())
    pump(c, s)
    assert c.performatives(Disposition)[-1].settled
    sender.set_state(delivery, Accepted())  # settled: nothing more is said
    assert c.take() == b""


def test_a_session_window_set_above_is_sent_and_kept() -> None:
    c, s = connected()
    session = c.connection.begin_session(incoming_window=3, manual_window=True)
    pump(c, s)
    peer_session = last(s, ev.SessionBegun).session
    assert peer_session.remote_incoming_window == 3
    session.set_incoming_window(7)
    pump(c, s)
    flows = c.performatives(Flow)
    assert flows and flows[-1].incoming_window == 7 and flows[-1].handle is None
    assert peer_session.remote_incoming_window == 7
    with pytest.raises(LocalProtocolError):
        session.set_incoming_window(-1)


def test_frame_counters_count_every_frame_each_way() -> None:
    c, s, sender, _ = link_setup(credit=5)
    sender.send(b"x", tag=b"1")
    c.connection.write_empty_frame()
    pump(c, s)
    sent = [frame for frame in c.frames(1 << 20)]
    received = [frame for frame in s.frames(1 << 20)]
    assert c.connection.frames_sent == len(sent) == s.connection.frames_received
    assert s.connection.frames_sent == len(received) == c.connection.frames_received
    assert any(frame.performative is None for frame in sent)  # the empty frame counted too


def test_a_client_header_before_its_open() -> None:
    c = Peer(CLIENT)
    c.connection.send_header()
    assert c.take() == AMQP_HEADER
    c.connection.send_header()  # once only
    c.connection.open()
    assert not c.take().startswith(AMQP_HEADER)
    server = Peer(SERVER)
    server.connection.send_header()  # a server answers the client's header: nothing here
    assert server.take() == b""
    assert c.connection.header_sent and c.connection.awaiting_header and not c.connection.in_sasl


def test_closed_by_the_layer_above() -> None:
    c, s = connected()
    c.connection.fail(conditions.RESOURCE_LIMIT_EXCEEDED, "local-idle-timeout expired")
    c.process()
    closed = last(c, ev.ConnectionClosed)
    assert closed.remote is False and closed.error.condition == conditions.RESOURCE_LIMIT_EXCEEDED
    pump(c, s)
    assert s.connection.remote_error.condition == conditions.RESOURCE_LIMIT_EXCEEDED
    assert isinstance(c.performatives(Close)[-1], Close)
    c.connection.fail(conditions.RESOURCE_LIMIT_EXCEEDED, "again")  # closed already: nothing more
    assert c.take() == b""


# --- authorization ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("allowed", [True, False])
def test_an_authorization_identity_by_the_server_policy(allowed: bool) -> None:
    asked: list[tuple[str, str]] = []

    def authorize(user: str, authzid: str) -> bool:
        asked.append((user, authzid))
        return allowed

    server_sasl = SaslServer(["EXTERNAL"], external=lambda: "CN=client", authorize=authorize)
    c = Peer(CLIENT, sasl=SaslClient(allowed_mechs="EXTERNAL", authzid="acting-as", encrypted=True))
    s = Peer(SERVER, sasl=server_sasl)
    c.open()
    pump(c, s)
    assert asked == [("CN=client", "acting-as")]
    result = server_sasl.result
    assert result is not None and result.authorization == "acting-as"
    assert result.code == (SaslCode.OK if allowed else SaslCode.AUTH)
    if allowed:
        assert result.identity == "CN=client"


def test_without_a_policy_another_identity_is_refused() -> None:
    server_sasl = SaslServer(["EXTERNAL"], external=lambda: "CN=client")
    c = Peer(CLIENT, sasl=SaslClient(allowed_mechs="EXTERNAL", authzid="someone-else", encrypted=True))
    s = Peer(SERVER, sasl=server_sasl)
    c.open()
    pump(c, s)
    assert server_sasl.result is not None and server_sasl.result.code == SaslCode.AUTH


# --- the receiver's end of a streamed delivery (§2.7.5: more, then the last frame) ----------------------------


def test_the_receiver_side_of_parts() -> None:
    c, s = connected(credit=3)
    session, _ = begun(c, s)
    sender, receiver = sender_pair(c, s, session)
    delivery = sender.send(b"abc", tag=b"p", more=True)
    pump(c, s)
    assert receiver._current is not None and receiver._current_size == 3
    sender.send_more(delivery, b"def")
    pump(c, s)
    assert [d.payload for d in s.received] == [b"abcdef"]
    assert all(t.delivery_id == 0 for t in _transfers(c))
    assert receiver.role is RECEIVER
