"""Proof that the in-memory proton test peer (`tests/proton_peer.py`) works: two ProtonPeers, pumped together.

These tests exercise proton against proton only. They pin down the harness' behaviour and the proton API quirks the
module docstring lists, before the Sans-IO engine's interoperability scenarios rely on them.
"""

from __future__ import annotations

import struct

import pytest

proton = pytest.importorskip("proton", reason="python-qpid-proton is needed for the in-memory proton peer")

from proton import SASL, Condition, Delivery, Receiver, Sender, Transport  # noqa: E402

try:
    from proton_peer import (
        ACCEPTED,
        MODIFIED,
        RCV_FIRST,
        RCV_SECOND,
        RECEIVED,
        REJECTED,
        RELEASED,
        SND_SETTLED,
        ProtonPeer,
        Record,
        delivery_tag,
        pump,
    )
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.proton_peer import (
        ACCEPTED,
        MODIFIED,
        RCV_FIRST,
        RCV_SECOND,
        RECEIVED,
        REJECTED,
        RELEASED,
        SND_SETTLED,
        ProtonPeer,
        Record,
        delivery_tag,
        pump,
    )

SASL_HEADER = b"AMQP\x03\x01\x00\x00"
AMQP_HEADER = b"AMQP\x00\x01\x00\x00"


def connected(**server_options: object) -> tuple[ProtonPeer, ProtonPeer]:
    """A client and an auto-accepting server with an open connection."""
    client = ProtonPeer("client")
    server = ProtonPeer("server", auto_accept=True, **server_options)  # type: ignore[arg-type]
    client.open(container_id="client-1")
    pump(client, server)
    return client, server


def with_sender(
    *, sender_options: dict[str, object] | None = None, **server_options: object
) -> tuple[ProtonPeer, ProtonPeer, Sender, Receiver]:
    """Client sender "s1" -> server receiver (credit 10 unless `auto_credit` says otherwise)."""
    server_options.setdefault("auto_credit", 10)
    client, server = connected(**server_options)
    sender = client.open_sender(client.begin_session(), "s1", "queue", **(sender_options or {}))  # type: ignore[arg-type]
    pump(client, server)
    return client, server, sender, server.receiver("s1")


def send_one(
    client: ProtonPeer, server: ProtonPeer, sender: Sender, payload: bytes, tag: bytes
) -> tuple[Delivery, Delivery]:
    """Send one delivery; return it and the server's copy."""
    delivery = client.send(sender, payload, tag)
    pump(client, server)
    [incoming] = server.received()
    assert incoming.tag == tag
    assert incoming.data == payload
    return delivery, incoming.delivery


# -----------------------------------------------------------------------------------------------------------------
# connection


def test_open_exchanges_connection_fields() -> None:
    client = ProtonPeer("client")
    server = ProtonPeer("server", auto_accept=True, container_id="broker")
    client.open(
        container_id="client-1",
        hostname="example.com",
        max_frame_size=4096,
        channel_max=9,
        properties={"product": "test"},
        offered_capabilities=["ANONYMOUS-RELAY"],
        desired_capabilities=["DELAYED_DELIVERY"],
    )
    rounds = pump(client, server)
    assert rounds in (1, 2, 3)
    sc, cc = server.connection, client.connection
    assert sc.remote_container == "client-1"
    assert sc.remote_hostname == "example.com"
    assert sc.remote_properties == {proton.symbol("product"): "test"}
    assert list(sc.remote_offered_capabilities) == ["ANONYMOUS-RELAY"]
    assert list(sc.remote_desired_capabilities) == ["DELAYED_DELIVERY"]
    assert server.transport.remote_max_frame_size == 4096
    assert server.transport.remote_channel_max == 9
    assert cc.remote_container == "broker"
    active = proton.Endpoint.LOCAL_ACTIVE | proton.Endpoint.REMOTE_ACTIVE
    assert cc.state == active and sc.state == active
    assert server.recorder.saw("connection_remote_open", name="client-1")
    assert client.recorder.saw("connection_remote_open", name="broker")
    assert ("connection_remote_open", "connection LA|RA remote='broker'") in client.events
    # process() hands out the events drained during the pump, once.
    events = client.process()
    assert "PN_CONNECTION_REMOTE_OPEN" in [e.type.name for e in events]
    assert client.process() == []


def test_clean_close_is_answered_and_closes_both_transports() -> None:
    client, server = connected()
    client.close()
    pump(client, server)
    closed = proton.Endpoint.LOCAL_CLOSED | proton.Endpoint.REMOTE_CLOSED
    assert client.connection.state == closed and server.connection.state == closed
    assert server.connection.remote_condition is None
    assert server.recorder.saw("connection_remote_close", condition=None)
    assert client.head_closed and server.head_closed
    assert client.take() == b"" and server.take() == b""


def test_close_with_error_shows_as_remote_condition() -> None:
    client, server = connected()
    server.close("amqp:connection:forced", "shutting down", {"retry-after": 5})
    pump(client, server)
    assert client.connection.remote_condition == Condition(
        "amqp:connection:forced", "shutting down", {proton.symbol("retry-after"): 5}
    )
    assert client.recorder.last("connection_remote_close").condition == "amqp:connection:forced"


def test_end_of_stream_is_a_framing_error() -> None:
    _, server = connected()
    server.feed(b"")
    assert server.transport.condition == Condition("amqp:connection:framing-error", "connection aborted")
    assert server.recorder.saw("transport_error", condition="amqp:connection:framing-error")
    assert server.tail_closed
    out = server.take()  # proton still writes a close frame carrying the error
    assert b"amqp:connection:framing-error" in out
    assert server.head_closed
    server.feed(b"more")
    assert server.dropped == 4


def test_idle_timeout_advertised_heartbeats_and_expiry() -> None:
    client = ProtonPeer("client")
    server = ProtonPeer("server", auto_accept=True, idle_timeout=2.0)
    client.open(idle_timeout=4.0)
    pump(client, server)
    # Proton advertises half its configured timeout.
    assert server.transport.remote_idle_timeout == 2.0
    assert client.transport.remote_idle_timeout == 1.0
    t0 = 1000.0
    assert client.tick(t0) == pytest.approx(t0 + 0.5)
    assert client.take() == b""
    # ... and sends an empty frame when half the remote's advertised timeout passed without output.
    client.tick(t0 + 0.6)
    assert client.take() == b"\x00\x00\x00\x08\x02\x00\x00\x00"
    # No input for its full configured timeout: proton closes the connection with an error.
    server.tick(t0)
    server.tick(t0 + 2.1)
    assert server.transport.condition == Condition("amqp:resource-limit-exceeded", "local-idle-timeout expired")
    assert b"local-idle-timeout expired" in server.take()
    client.feed(server.take())
    assert server.recorder.saw("transport_error", condition="amqp:resource-limit-exceeded")


# -----------------------------------------------------------------------------------------------------------------
# SASL


def test_sasl_anonymous() -> None:
    client = ProtonPeer("client", sasl=True)
    server = ProtonPeer("server", sasl=True, auto_accept=True)
    client.open()
    pump(client, server)
    assert not SASL.extended()
    assert server.sasl is not None and client.sasl is not None
    assert server.sasl.outcome == SASL.OK and client.sasl.outcome == SASL.OK
    assert server.sasl.mech == "ANONYMOUS"
    assert server.sasl.user == "anonymous"
    assert server.transport.authenticated
    assert server.connection.remote_container == "proton-client"
    assert client.connection.state & proton.Endpoint.REMOTE_ACTIVE


def test_sasl_server_offers_only_anonymous_without_cyrus() -> None:
    client = ProtonPeer("client", user="user", password="secret")  # PLAIN only
    server = ProtonPeer("server", sasl_mechs="ANONYMOUS PLAIN EXTERNAL", auto_accept=True)
    client.open()
    assert server.take() == b""  # a server writes nothing before it has seen the client's protocol header
    server.feed(client.take())
    offer = server.take()
    assert offer.startswith(SASL_HEADER)
    assert b"ANONYMOUS" in offer and b"PLAIN" not in offer and b"EXTERNAL" not in offer
    client.feed(offer)
    pump(client, server)
    assert client.sasl is not None and client.sasl.outcome == SASL.PERM
    assert client.transport.condition == Condition("amqp:unauthorized-access", "Authentication failed [mech=none]")
    assert not server.connection.state & proton.Endpoint.REMOTE_ACTIVE


def _sasl_frame(body: bytes) -> bytes:
    return struct.pack(">IBBH", 8 + len(body), 2, 1, 0) + body


def test_sasl_plain_client_against_scripted_server() -> None:
    client = ProtonPeer("client", user="user", password="secret")
    assert client.sasl is not None
    client.open(container_id="plain-client")
    assert client.take() == SASL_HEADER
    # sasl-mechanisms [PLAIN]: descriptor 0x40, list8 of one single symbol (a one-element array may be a scalar).
    client.feed(SASL_HEADER + _sasl_frame(b"\x00\x53\x40\xc0\x08\x01\xa3\x05PLAIN"))
    init = client.take()
    assert b"\x00\x53\x41" in init  # sasl-init
    assert b"\xa3\x05PLAIN" in init
    assert b"\x00user\x00secret" in init
    client.feed(_sasl_frame(b"\x00\x53\x44\xc0\x03\x01\x50\x00"))  # sasl-outcome code=ok
    out = client.take()
    assert out.startswith(AMQP_HEADER)
    assert b"plain-client" in out  # the open frame follows straight away
    assert client.sasl.outcome == SASL.OK


def test_server_without_sasl_config_still_answers_a_sasl_client() -> None:
    client = ProtonPeer("client", sasl=True)
    server = ProtonPeer("server", auto_accept=True)
    client.open()
    pump(client, server)
    assert server.transport.authenticated
    assert server.transport.sasl().user == "anonymous"
    assert client.connection.state & proton.Endpoint.REMOTE_ACTIVE


def test_server_with_sasl_accepts_a_client_without_sasl() -> None:
    client = ProtonPeer("client")
    server = ProtonPeer("server", sasl=True, auto_accept=True)
    client.open()
    pump(client, server)
    assert server.connection.state & proton.Endpoint.REMOTE_ACTIVE
    assert not server.transport.authenticated


# -----------------------------------------------------------------------------------------------------------------
# sessions and links


def test_begin_and_end_with_error() -> None:
    client, server = connected()
    session = client.begin_session()
    pump(client, server)
    assert server.recorder.saw("session_remote_open")
    remote = server.session()
    assert remote.state == proton.Endpoint.LOCAL_ACTIVE | proton.Endpoint.REMOTE_ACTIVE
    assert session.state == proton.Endpoint.LOCAL_ACTIVE | proton.Endpoint.REMOTE_ACTIVE
    client.end(session, "amqp:internal-error", "oops")
    pump(client, server)
    assert remote.remote_condition == Condition("amqp:internal-error", "oops")
    assert server.recorder.saw("session_remote_close", condition="amqp:internal-error")
    assert session.state == proton.Endpoint.LOCAL_CLOSED | proton.Endpoint.REMOTE_CLOSED  # auto_close answered


def test_attach_sender_and_receiver_with_credit_and_dynamic_source() -> None:
    client, server = connected(auto_credit=7)
    session = client.begin_session()
    sender = client.open_sender(session, "s1", "queue", properties={"p": 1})
    receiver = client.open_receiver(session, "r1", None, dynamic_source=True, credit=3)
    pump(client, server)
    s1, r1 = server.link("s1"), server.link("r1")
    assert s1.is_receiver and r1.is_sender
    assert s1.remote_target.address == "queue" and s1.target.address == "queue"
    assert s1.remote_properties == {proton.symbol("p"): 1}
    assert r1.remote_source.dynamic
    assert receiver.remote_source.address == "dynamic-1"
    assert sender.credit == 7  # auto_credit
    assert r1.credit == 3
    assert client.recorder.saw("link_remote_open", endpoint="sender", name="s1")
    assert client.recorder.saw("link_flow", endpoint="sender", name="s1", credit=7, drain=False)
    assert server.recorder.saw("link_remote_open", endpoint="sender", name="r1", credit=3)
    client.flow(receiver, 2)
    pump(client, server)
    assert r1.credit == 5
    assert server.recorder.last("link_flow", name="r1").credit == 5


def test_detach_with_error_is_not_a_close() -> None:
    client, server, sender, remote = with_sender()
    server.detach(remote, "amqp:link:stolen", "by another")
    pump(client, server)
    assert sender.remote_condition == Condition("amqp:link:stolen", "by another")
    assert client.recorder.saw("link_remote_detach", name="s1", condition="amqp:link:stolen")
    assert not client.recorder.saw("link_remote_close", name="s1")


def test_raw_proton_detach_drops_the_condition() -> None:
    client, server, sender, remote = with_sender()
    remote.condition = Condition("amqp:link:stolen")
    remote.detach()  # proton's Link.detach() does not copy .condition into the engine
    pump(client, server)
    assert client.recorder.saw("link_remote_detach", name="s1")
    assert sender.remote_condition is None


def test_close_link_with_error() -> None:
    client, server, sender, remote = with_sender()
    server.close_link(remote, "amqp:not-found", "no such queue")
    pump(client, server)
    assert sender.remote_condition == Condition("amqp:not-found", "no such queue")
    assert client.recorder.saw("link_remote_close", name="s1", condition="amqp:not-found")
    assert not client.recorder.saw("link_remote_detach", name="s1")


def test_auto_close_answers_link_close_and_detach() -> None:
    client, server, sender, remote = with_sender()
    client.close_link(sender)
    pump(client, server)
    assert remote.state == proton.Endpoint.LOCAL_CLOSED | proton.Endpoint.REMOTE_CLOSED
    assert sender.state == proton.Endpoint.LOCAL_CLOSED | proton.Endpoint.REMOTE_CLOSED
    assert server.recorder.saw("link_remote_close", name="s1", condition=None)


# -----------------------------------------------------------------------------------------------------------------
# transfers and outcomes


def test_small_transfer_accepted() -> None:
    client, server, sender, _ = with_sender()
    delivery, remote = send_one(client, server, sender, b"hello", b"t1")
    assert server.recorder.saw("delivery", endpoint="receiver", name="s1", tag=b"t1", partial=False, settled=False)
    server.settle(remote, "accepted")
    pump(client, server)
    assert delivery.remote_state == ACCEPTED and delivery.settled
    assert client.recorder.saw("delivery", endpoint="sender", tag=b"t1", outcome="ACCEPTED", settled=True)
    assert sender.credit == 9
    # process() returns proton Events that stay usable after the collector moved on.
    [event] = [e for e in client.process() if e.type == proton.Event.DELIVERY]
    assert event.delivery.link.name == "s1" and delivery_tag(event.delivery) == b"t1"
    assert server.received() == []


@pytest.mark.parametrize("direction", ["client-to-server", "server-to-client"])
def test_multi_frame_transfer(direction: str) -> None:
    client = ProtonPeer("client", auto_accept=True, auto_credit=5, max_frame_size=4096)
    server = ProtonPeer("server", auto_accept=True, auto_credit=5, max_frame_size=4096)
    client.open()
    session = client.begin_session()
    if direction == "client-to-server":
        src, dst, link = client, server, client.open_sender(session, "big", "queue")
    else:
        client.open_receiver(session, "big", "queue", credit=5)
        pump(client, server)
        src, dst, link = server, client, server.sender("big")
    pump(client, server)
    payload = bytes(range(256)) * 400  # 100 KiB
    frames_before = dst.transport.frames_input
    src.send(link, payload, b"\x00\x00\x00\x01")
    src.send(link, b"small", b"\x00\x00\x00\x02")
    pump(client, server)
    assert dst.transport.frames_input - frames_before >= len(payload) // 4096
    big, small = dst.received()
    assert (big.tag, big.data) == (b"\x00\x00\x00\x01", payload)
    assert (small.tag, small.data) == (b"\x00\x00\x00\x02", b"small")
    assert dst.recorder.saw("delivery", tag=b"\x00\x00\x00\x01", partial=True)


def test_multi_frame_transfer_through_a_small_session_window() -> None:
    client = ProtonPeer("client")
    server = ProtonPeer("server", auto_accept=True, auto_credit=1, max_frame_size=512, session_capacity=2048)
    client.open()
    sender = client.open_sender(client.begin_session(), "s1", "queue")
    pump(client, server)
    payload = b"z" * 20_000
    client.send(sender, payload, b"big")
    # A 4-frame incoming window: the sender waits for the window to reopen as the receiver reads.
    assert pump(client, server, rounds=200) > 5
    [incoming] = server.received()
    assert incoming.data == payload


def test_empty_payload() -> None:
    client, server, sender, _ = with_sender()
    send_one(client, server, sender, b"", b"empty")


def test_binary_tag_breaks_proton_delivery_tag() -> None:
    client, server, sender, _ = with_sender()
    _, remote = send_one(client, server, sender, b"x", b"\xff\xfe")
    with pytest.raises(UnicodeDecodeError):
        _ = remote.tag
    assert delivery_tag(remote) == b"\xff\xfe"


def test_rejected_with_condition() -> None:
    client, server, sender, _ = with_sender()
    delivery, remote = send_one(client, server, sender, b"bad", b"t1")
    server.settle(remote, "rejected", condition="amqp:decode-error", description="garbled", info={"at": 3})
    pump(client, server)
    assert delivery.remote_state == REJECTED and delivery.settled
    assert delivery.remote.condition == Condition("amqp:decode-error", "garbled", {proton.symbol("at"): 3})
    # A Record is a NamedTuple: compare with a tuple, or a Record with the inapplicable fields left out.
    assert client.recorder.last("delivery", tag=b"t1") == Record(
        "delivery", "sender", "s1", b"t1", "REJECTED", True, "amqp:decode-error"
    )


def test_released() -> None:
    client, server, sender, _ = with_sender()
    delivery, remote = send_one(client, server, sender, b"x", b"t1")
    server.settle(remote, RELEASED)
    pump(client, server)
    assert delivery.remote_state == RELEASED and delivery.settled
    assert client.recorder.saw("delivery", tag=b"t1", outcome="RELEASED", settled=True)


def test_modified_with_fields() -> None:
    client, server, sender, _ = with_sender()
    delivery, remote = send_one(client, server, sender, b"x", b"t1")
    server.settle(remote, "modified", delivery_failed=True, undeliverable_here=True, annotations={"x-reason": "busy"})
    pump(client, server)
    assert delivery.remote_state == MODIFIED and delivery.settled
    assert delivery.remote.failed and delivery.remote.undeliverable
    assert delivery.remote.annotations == {proton.symbol("x-reason"): "busy"}
    assert client.recorder.saw("delivery", tag=b"t1", outcome="MODIFIED")


def test_received_state_is_not_terminal() -> None:
    client, server, sender, _ = with_sender()
    delivery, remote = send_one(client, server, sender, b"x" * 100, b"t1")
    server.disposition(remote, "received", section_number=0, section_offset=50)
    pump(client, server)
    assert delivery.remote_state == RECEIVED and not delivery.settled
    assert (delivery.remote.section_number, delivery.remote.section_offset) == (0, 50)
    assert client.recorder.saw("delivery", tag=b"t1", outcome="RECEIVED", settled=False)
    server.settle(remote, "accepted")
    pump(client, server)
    assert delivery.remote_state == ACCEPTED and delivery.settled


def test_unsettled_outcome_then_sender_settles() -> None:
    client, server, sender, _ = with_sender()
    delivery, remote = send_one(client, server, sender, b"x", b"t1")
    server.disposition(remote, "accepted")  # not settled
    pump(client, server)
    assert delivery.remote_state == ACCEPTED and not delivery.settled
    client.settle(delivery)
    pump(client, server)
    assert remote.settled  # the remote (sender) settled
    assert server.recorder.saw("delivery", endpoint="receiver", tag=b"t1", settled=True)


def test_no_disposition_for_a_delivery_the_remote_already_settled() -> None:
    client, server, sender, _ = with_sender()
    delivery, remote = send_one(client, server, sender, b"x", b"t1")
    client.settle(delivery)  # sender settles before any outcome
    pump(client, server)
    assert remote.settled
    server.settle(remote, "accepted")
    assert server.take() == b""


def test_presettled_transfer_with_snd_settle_mode_settled() -> None:
    client, server, sender, remote_link = with_sender(sender_options={"snd_settle_mode": SND_SETTLED})
    assert remote_link.remote_snd_settle_mode == SND_SETTLED
    assert remote_link.snd_settle_mode == SND_SETTLED  # auto_accept echoes the settle modes
    assert sender.remote_snd_settle_mode == SND_SETTLED
    client.send(sender, b"fire and forget", b"t1", settled=True)
    pump(client, server)
    [incoming] = server.received()
    assert incoming.settled and incoming.data == b"fire and forget"
    assert server.recorder.saw("delivery", tag=b"t1", settled=True)
    assert sender.unsettled == 0


def test_rcv_settle_mode_second_with_automatic_answers() -> None:
    client, server, sender, remote_link = with_sender(
        sender_options={"rcv_settle_mode": RCV_SECOND}, auto_outcome="accepted"
    )
    client.auto_settle_outgoing = True
    assert remote_link.rcv_settle_mode == RCV_SECOND and sender.remote_rcv_settle_mode == RCV_SECOND
    delivery = client.send(sender, b"x", b"t1")
    pump(client, server)
    # receiver: accepted, unsettled -> sender: settles -> receiver: settles once it sees the sender settled
    assert client.recorder.saw("delivery", tag=b"t1", outcome="ACCEPTED", settled=False)
    assert server.recorder.saw("delivery", endpoint="receiver", tag=b"t1", settled=True)
    assert delivery.remote_state == ACCEPTED
    assert sender.unsettled == 0 and remote_link.unsettled == 0


def test_rcv_settle_mode_first_auto_outcome_settles_at_once() -> None:
    client, server, sender, remote_link = with_sender(auto_outcome="released")
    assert remote_link.rcv_settle_mode == RCV_FIRST
    delivery = client.send(sender, b"x", b"t1")
    pump(client, server)
    assert delivery.remote_state == RELEASED and delivery.settled


def test_aborted_delivery() -> None:
    client, server, sender, _ = with_sender(max_frame_size=512)
    delivery = client.send(sender, b"a" * 2000, b"t1", more=True)
    pump(client, server)
    assert server.recorder.saw("delivery", tag=b"t1", partial=True)
    client.abort(delivery)
    pump(client, server)
    [incoming] = server.received()
    assert incoming.aborted and incoming.tag == b"t1" and incoming.data == b""
    client.send(sender, b"next", b"t2")
    pump(client, server)
    assert [(i.tag, i.data, i.aborted) for i in server.received()] == [(b"t2", b"next", False)]


def test_delivery_sent_in_pieces() -> None:
    client, server, sender, _ = with_sender(max_frame_size=512)
    client.send(sender, b"a" * 1000, b"t1", more=True)
    pump(client, server)
    assert server.received() == []
    client.send_more(sender, b"b" * 1000, more=True)
    client.send_more(sender, b"c")
    pump(client, server)
    [incoming] = server.received()
    assert incoming.data == b"a" * 1000 + b"b" * 1000 + b"c"


# -----------------------------------------------------------------------------------------------------------------
# drain


def test_drain_with_nothing_to_send_returns_the_credit() -> None:
    client, server = connected()
    receiver = client.open_receiver(client.begin_session(), "r1", "queue")
    pump(client, server)
    client.drain(receiver, 5)
    assert receiver.draining()
    pump(client, server)
    # The server (auto_drain) answered with Sender.drained(): the flow completing the drain.
    assert server.recorder.saw("link_flow", endpoint="sender", name="r1", credit=5, drain=True)
    assert client.recorder.last("link_flow", endpoint="receiver", name="r1").credit == 0
    assert receiver.credit == 0 and not receiver.draining()
    assert receiver.drained() == 5
    assert receiver.drained() == 0  # read-and-reset


def test_drain_sends_what_is_queued_then_returns_the_rest() -> None:
    client = ProtonPeer("client")
    server = ProtonPeer("server", auto_accept=True, auto_drain=False)
    client.open()
    receiver = client.open_receiver(client.begin_session(), "r1", "queue")
    pump(client, server)
    remote = server.sender("r1")
    client.drain(receiver, 3)
    pump(client, server)
    assert remote.drain_mode and remote.credit == 3
    assert receiver.draining()  # nobody answered yet
    server.send(remote, b"one", b"t1")
    pump(client, server)
    assert [i.data for i in client.received()] == [b"one"]
    assert receiver.draining() and receiver.credit == 2
    assert server.drained(remote) == 2
    pump(client, server)
    assert not receiver.draining() and receiver.credit == 0 and receiver.drained() == 2


# -----------------------------------------------------------------------------------------------------------------
# the helpers themselves


def test_pump_gives_up_on_endless_chatter() -> None:
    class Chatty:
        def take(self) -> bytes:
            return b"x"

        def feed(self, data: bytes) -> None:
            pass

    with pytest.raises(RuntimeError, match="after 5 rounds"):
        pump(Chatty(), Chatty(), rounds=5)


def test_feed_respects_transport_capacity() -> None:
    client = ProtonPeer("client")
    server = ProtonPeer("server", auto_accept=True, auto_credit=1)
    client.open()
    sender = client.open_sender(client.begin_session(), "s1", "queue")
    pump(client, server)
    client.send(sender, b"q" * 300_000, b"t1")
    data = client.take()
    assert len(data) > server.transport.capacity()  # one push() would raise OverflowError
    server.feed(data)
    [incoming] = server.received()
    assert len(incoming.data) == 300_000


def test_recorder_and_mode_validation() -> None:
    client, server = connected()
    types = server.recorder.types()
    assert types.index("connection_remote_open") < types.index("connection_local_open")
    assert len(server.recorder) == len(server.events) == len(list(server.recorder))
    with pytest.raises(LookupError):
        server.recorder.last("delivery")
    server.recorder.clear()
    assert len(server.recorder) == 0
    with pytest.raises(ValueError):
        ProtonPeer("peer")
    with pytest.raises(ValueError):
        server.settle(server.connection, "maybe")  # type: ignore[arg-type]
    assert ProtonPeer(Transport.CLIENT).is_server is False
    assert repr(client) == "<ProtonPeer client LA|RA>"
