"""Deliveries in parts (§2.6.14), engine to engine in memory: a message sent as its parts are given
(``send(..., more=True)``, ``send_more``, ``abort``), and one handed over at its first frame on a streaming link,
whose unread frames keep their place in the session's incoming window (§2.5.6), so that a slow reader bounds what
the peer may send. Every count below is exact: frames, window, chunks."""

from __future__ import annotations

import pytest

from amqp_async.codec import conditions
from amqp_async.codec.delivery_states import Accepted
from amqp_async.codec.performatives import Flow, Transfer
from amqp_async.protocol import events as ev
from amqp_async.protocol.errors import LocalProtocolError
from amqp_async.protocol.streaming import StreamingDelivery

try:
    from engine_peer import pump
    from test_engine_pair import Peer, begun, connected, link_setup, sender_pair
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.engine_peer import pump
    from tests.test_engine_pair import Peer, begun, connected, link_setup, sender_pair

FRAME = 600  # the server's max-frame-size in these tests
#: What a transfer frame of delivery 0 (a 4-byte tag) carries with ``more`` set: its frame header and performative
#: take 25 bytes (each frame is as full as the peer's max-frame-size lets it be; a last frame, ``more`` left out,
#: holds 2 bytes more).
PAYLOAD = FRAME - 25


def streaming_setup(window: int, credit: int = 10, **server: int) -> tuple[Peer, Peer, object, object]:
    """A client sender and the server's receiver, made streaming before any transfer."""
    c, s = connected(server={"max_frame_size": FRAME, "incoming_window": window, **server}, credit=credit)
    session, _ = begun(c, s)
    sender, receiver = sender_pair(c, s, session)
    receiver.streaming = True
    return c, s, sender, receiver


def test_a_delivery_sent_in_parts_arrives_whole_on_an_ordinary_link() -> None:
    c, s, sender, _receiver = link_setup(server={"max_frame_size": FRAME})
    parts = [b"h" * 10, b"a" * 1000, b"b" * 5, b"c" * PAYLOAD]
    delivery = sender.send(parts[0], more=True)
    assert sender.streaming is delivery
    for part in parts[1:-1]:
        sender.send_more(delivery, part, more=True)
    sender.send_more(delivery, parts[-1], more=False)
    assert sender.streaming is None
    pump(c, s)
    assert [d.payload for d in s.received] == [b"".join(parts)]
    transfers = c.performatives(Transfer)
    # 10 | 575 425 | 5 | 575: each part in frames of at most PAYLOAD bytes, ``more`` on all but the last
    assert [t.more for t in transfers] == [True] * 4 + [False]
    assert {t.delivery_id for t in transfers} == {delivery.delivery_id}
    assert sender.credit == 9  # one delivery, one credit (§2.6.7)


def test_nothing_else_goes_out_on_the_link_while_a_delivery_is_open() -> None:
    c, s, sender, _ = link_setup()
    delivery = sender.send(b"first part", more=True)
    with pytest.raises(LocalProtocolError, match="still open"):
        sender.send(b"other")
    other = sender.send  # the next delivery goes once the open one is complete
    sender.send_more(delivery, b"", more=False)
    other(b"other")
    pump(c, s)
    assert [d.payload for d in s.received] == [b"first part", b"other"]


def test_send_more_refuses_a_delivery_that_is_not_open() -> None:
    _c, _s, sender, _ = link_setup()
    done = sender.send(b"whole")
    with pytest.raises(LocalProtocolError, match="not the one"):
        sender.send_more(done, b"more", more=False)


def test_parts_beyond_the_peers_max_message_size_are_refused_with_the_limit() -> None:
    c, s = connected(credit=5)
    session, _ = begun(c, s)
    sender, _receiver = sender_pair(c, s, session)
    # as if the server's attach had said 1000 (the auto-accepting test peer announces no limit of its own)
    sender.remote_attach.max_message_size = 1000
    delivery = sender.send(b"a" * 600, more=True)
    with pytest.raises(LocalProtocolError) as caught:
        sender.send_more(delivery, b"b" * 401, more=False)
    assert caught.value.condition == conditions.LINK_MESSAGE_SIZE_EXCEEDED
    assert "max-message-size 1000" in caught.value.description
    assert sender.streaming is delivery  # still open: the caller aborts it
    sender.abort(delivery)
    pump(c, s)
    assert [(d.aborted, d.payload) for d in s.received] == [(True, b"")]


def test_aborting_a_delivery_whose_parts_are_all_written() -> None:
    c, s, sender, _receiver = link_setup(server={"max_frame_size": FRAME})
    delivery = sender.send(b"x" * 100, more=True)
    sender.send_more(delivery, b"y" * 1000, more=True)
    pump(c, s)
    assert s.received == []  # an ordinary link waits for the whole message
    sender.abort(delivery)
    assert delivery.aborted and delivery.settled and sender.streaming is None
    assert sender.session.unsettled_outgoing == 0
    pump(c, s)
    assert [(d.aborted, d.payload) for d in s.received] == [(True, b"")]
    transfers = c.performatives(Transfer)
    assert transfers[-1].aborted is True and transfers[-1].delivery_id == delivery.delivery_id
    assert len(transfers) == 1 + 2 + 1  # the first part, two frames of the second, the aborted one
    after = sender.send(b"next")
    pump(c, s)
    assert s.received[-1].payload == b"next" and s.received[-1].delivery_id == after.delivery_id
    assert not s.of_type(ev.LinkDetached)


def test_aborting_a_streamed_delivery_whose_frames_wait_for_the_window() -> None:
    c, s, sender, _receiver = link_setup(server={"max_frame_size": FRAME, "incoming_window": 2})
    session = sender.session
    delivery = sender.send(b"x" * 100, more=True)
    sender.send_more(delivery, b"y" * 5000, more=True)
    sender.send_more(delivery, b"z" * 5000, more=True)
    assert session.outgoing_backlog > 0
    sender.abort(delivery)
    assert session.outgoing_backlog == 0  # the queued parts are dropped, one aborted frame waits in their place
    pump(c, s)
    assert [(d.aborted, d.payload) for d in s.received] == [(True, b"")]
    assert c.performatives(Transfer)[-1].aborted is True


def test_a_streaming_link_hands_the_delivery_over_at_its_first_frame() -> None:
    c, s, sender, receiver = streaming_setup(window=100)
    delivery = sender.send(b"head", more=True)
    pump(c, s)
    assert len(s.received) == 1
    incoming = s.received[0]
    assert isinstance(incoming, StreamingDelivery)
    assert incoming.take() == [b"head"] and not incoming.complete
    sender.send_more(delivery, b"a" * 1000, more=True)
    pump(c, s)
    assert incoming.take() == [b"a" * PAYLOAD, b"a" * (1000 - PAYLOAD)]
    sender.send_more(delivery, b"end", more=False)
    pump(c, s)
    assert incoming.take() == [b"end"] and incoming.complete and not incoming.aborted
    assert incoming.received == 4 + 1000 + 3
    assert len(s.received) == 1  # announced again at each frame, handed over once
    receiver.settle(incoming, Accepted())
    pump(c, s)
    assert delivery.remote_settled and isinstance(delivery.remote_state, Accepted)


def test_a_one_frame_delivery_arrives_complete_on_a_streaming_link() -> None:
    c, s, sender, _receiver = streaming_setup(window=100)
    sender.send(b"small")
    pump(c, s)
    assert [type(d).__name__ for d in s.received] == ["Delivery"] and s.received[0].payload == b"small"


def test_unread_frames_keep_their_place_in_the_incoming_window() -> None:
    """A reader that takes nothing holds the peer at the window: it sends 8 frames, no more, whatever the
    message's size; each take reopens the window once half of it is free again (§2.5.6)."""
    c, s, sender, receiver = streaming_setup(window=8)
    session = sender.session
    delivery = sender.send(b"h", more=True)
    sender.send_more(delivery, b"a" * (PAYLOAD * 40), more=False)
    pump(c, s)
    incoming = s.received[0]
    assert len(incoming.chunks) == 8 and receiver.session.held_frames == 8
    assert session.remote_incoming_window == 0 and session.outgoing_backlog == PAYLOAD * 33
    flows_before = len(s.performatives(Flow))
    assert len(incoming.take()) == 8
    pump(c, s)
    assert len(s.performatives(Flow)) == flows_before + 1  # one flow reopened the window
    assert len(incoming.chunks) == 8  # the next 8 frames, and again no more
    received = 8  # taken so far
    while not incoming.complete:
        received += len(incoming.take())
        pump(c, s)
        assert len(incoming.chunks) <= 8
    received += len(incoming.take())
    assert received == 41 and incoming.received == 1 + PAYLOAD * 40
    assert receiver.session.held_frames == 0 and session.outgoing_backlog == 0


def test_a_slow_reader_that_takes_one_frame_at_a_time_gets_no_flow_per_frame() -> None:
    c, s, sender, receiver = streaming_setup(window=8)
    delivery = sender.send(b"h", more=True)
    sender.send_more(delivery, b"a" * (PAYLOAD * 20), more=False)
    pump(c, s)
    incoming = s.received[0]
    flows = len(s.performatives(Flow))
    taken = 0
    while not (incoming.complete and not incoming.chunks):
        chunk = incoming.chunks.popleft()  # one at a time, as a reader that writes each chunk to a file
        receiver.session.release_frames(1)
        taken += len(chunk)
        pump(c, s)
    assert taken == 1 + PAYLOAD * 20
    # 21 frames through a window of 8 read one by one: the window reopens each time half of it (4 frames) is
    # free, at frames 8, 12, 16 and 20, and once more as the last frames are read: 5 flows, not one per frame
    assert [(f.next_incoming_id, f.incoming_window) for f in s.performatives(Flow)[flows:]] == [
        (8, 4),
        (12, 4),
        (16, 4),
        (20, 4),
        (21, 7),
    ]


def test_discarded_frames_are_dropped_as_they_come() -> None:
    c, s, sender, receiver = streaming_setup(window=4)
    delivery = sender.send(b"h", more=True)
    sender.send_more(delivery, b"a" * (PAYLOAD * 30), more=False)
    pump(c, s)
    incoming = s.received[0]
    assert len(incoming.chunks) == 4
    incoming.discard()
    pump(c, s)
    assert incoming.complete and not incoming.chunks and incoming.received == 1 + PAYLOAD * 30
    assert receiver.session.held_frames == 0


def test_a_delivery_settled_before_its_last_frame_drops_the_rest() -> None:
    c, s, sender, receiver = streaming_setup(window=4)
    delivery = sender.send(b"h", more=True)
    sender.send_more(delivery, b"a" * (PAYLOAD * 10), more=True)
    pump(c, s)
    incoming = s.received[0]
    incoming.take()
    receiver.settle(incoming, Accepted())  # early: the outcome goes out now (§2.6.12)
    sender.send_more(delivery, b"end", more=False)
    pump(c, s)
    assert delivery.remote_settled and isinstance(delivery.remote_state, Accepted)
    assert incoming.complete and not incoming.chunks and receiver.session.held_frames == 0


def test_an_aborted_streamed_delivery_is_reported_and_its_frames_released() -> None:
    c, s, sender, receiver = streaming_setup(window=4)
    delivery = sender.send(b"h", more=True)
    sender.send_more(delivery, b"a" * (PAYLOAD * 2), more=True)
    pump(c, s)
    incoming = s.received[0]
    assert len(incoming.chunks) == 3 and receiver.session.held_frames == 3
    sender.abort(delivery)
    pump(c, s)
    assert incoming.aborted and incoming.complete and not incoming.chunks
    assert receiver.session.held_frames == 0 and receiver.session.unsettled_incoming == 0
    after = sender.send(b"next")
    pump(c, s)
    assert s.received[-1].payload == b"next" and s.received[-1].delivery_id == after.delivery_id


def test_a_streamed_delivery_beyond_max_message_size_detaches_the_link_naming_the_limit() -> None:
    c, s, sender, receiver = streaming_setup(window=100)
    receiver.max_message_size = 1000
    delivery = sender.send(b"h" * 400, more=True)
    sender.send_more(delivery, b"a" * 700, more=True)
    pump(c, s)
    detached = s.of_type(ev.LinkDetached)[-1]
    assert detached.error.condition == conditions.LINK_MESSAGE_SIZE_EXCEEDED
    assert "exceeds max-message-size 1000" in detached.error.description
    incoming = s.received[0]
    assert incoming.interrupted and incoming.complete and not incoming.chunks
    assert receiver.session.held_frames == 0
    client_detached = c.of_type(ev.LinkDetached)[-1]
    assert client_detached.error.condition == conditions.LINK_MESSAGE_SIZE_EXCEEDED


def test_a_link_detached_mid_delivery_interrupts_it() -> None:
    c, s, sender, receiver = streaming_setup(window=100)
    delivery = sender.send(b"h", more=True)
    sender.send_more(delivery, b"a" * 100, more=True)
    pump(c, s)
    incoming = s.received[0]
    sender.detach()
    pump(c, s)
    assert incoming.interrupted and incoming.complete and not incoming.aborted
    assert receiver.session.held_frames == 0
