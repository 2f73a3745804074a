"""Our Sans-IO engine against itself, in memory: a client and a server :class:`Connection`, pumped together.

Every performative, state transition and error path a pair of well-behaved engines can reach: the open/close
handshakes (pipelined), the negotiation of open's fields, idle timeouts on a fake clock, SASL (ANONYMOUS, PLAIN,
SCRAM-SHA-256, failures), sessions and channels, links and handles, credit (grant, add, drain, echo), deliveries
(ids, tags, formats, multi-frame transfers, abort, settlement modes, every outcome, disposition ranges), serial
numbers across the 2**32 wrap and the session window.

Wire-level claims (frame sizes, how many disposition or flow frames went out) are checked by decoding the bytes
each side wrote, with :class:`amqp_async.codec.framing.FrameDecoder`.
"""

from __future__ import annotations

from typing import Any

import pytest

from amqp_async.codec import conditions
from amqp_async.codec.delivery_states import Accepted, Modified, Received, Rejected, Released
from amqp_async.codec.framing import (
    AMQP_HEADER,
    EMPTY_FRAME,
    FRAME_AMQP,
    SASL_HEADER,
    Frame,
    FrameDecoder,
    encode_frame,
)
from amqp_async.codec.performatives import (
    RCV_FIRST,
    RCV_SECOND,
    RECEIVER,
    SENDER,
    SND_SETTLED,
    SND_UNSETTLED,
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
from amqp_async.codec.terminus import COPY, LINK_DETACH, NEVER, UNSETTLED_STATE, DeleteOnClose, Source, Target
from amqp_async.protocol import events as ev
from amqp_async.protocol.connection import Connection
from amqp_async.protocol.delivery import Delivery
from amqp_async.protocol.endpoint import EndpointState
from amqp_async.protocol.errors import ConnectionClosedError, LocalProtocolError, NoCreditError
from amqp_async.protocol.link import ReceiverLink, SenderLink
from amqp_async.protocol.sasl import SaslClient, SaslServer
from amqp_async.protocol.sasl_mechanisms import SaslCode
from amqp_async.protocol.sasl_scram import InMemoryCredentialStore
from amqp_async.protocol.session import Session
from amqp_async.types import symbol

try:
    from engine_peer import CLIENT, SERVER, EnginePeer, pump
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.engine_peer import CLIENT, SERVER, EnginePeer, pump

TOP = (1 << 32) - 1
ACTIVE = EndpointState.ACTIVE
CLOSED = EndpointState.CLOSED
UNINIT = EndpointState.UNINIT


# --- harness -------------------------------------------------------------------------------------------------


class Peer(EnginePeer):
    """An :class:`EnginePeer` that keeps every byte it wrote (``wire``), so tests can decode the frames."""

    def __init__(self, role: str = CLIENT, **options: Any) -> None:
        super().__init__(role, **options)
        self.wire = bytearray()

    def take(self) -> bytes:
        data = super().take()
        self.wire += data
        return data

    def frames(self, max_frame_size: int | None = None) -> list[Frame]:
        """The frames in ``wire`` (protocol headers skipped), each decoded with a decoder that refuses frames
        larger than ``max_frame_size`` (default: the peer's max-frame-size)."""
        if max_frame_size is None:
            max_frame_size = self.connection.remote_max_frame_size
        return decode_frames(bytes(self.wire), max_frame_size)

    def performatives(self, kind: type | None = None) -> list[Any]:
        """The performatives in ``wire`` (empty frames skipped), optionally of one type."""
        found = [frame.performative for frame in self.frames(TOP) if frame.performative is not None]
        return found if kind is None else [p for p in found if isinstance(p, kind)]

    def events_of(self, kind: type) -> list[Any]:
        return self.of_type(kind)


def decode_frames(data: bytes, max_frame_size: int) -> list[Frame]:
    """Split a byte stream (protocol headers and frames) into decoded frames; a frame above ``max_frame_size``
    makes the decoder raise."""
    frames: list[Frame] = []
    position = 0
    while position < len(data):
        if data[position : position + 4] == b"AMQP":
            position += 8
            continue
        size = int.from_bytes(data[position : position + 4], "big")
        decoder = FrameDecoder(max_frame_size=max_frame_size)
        decoder.feed(data[position : position + size])
        frame = decoder.next_frame()
        assert frame is not None, f"truncated frame at offset {position}"
        frames.append(frame)
        position += size
    return frames


def connected(
    client: dict[str, Any] | None = None, server: dict[str, Any] | None = None, *, credit: int = 0
) -> tuple[Peer, Peer]:
    """A client and an auto-accepting server (granting ``credit`` to the links it answers), opened both ways."""
    c = Peer(CLIENT, auto_accept=True, **(client or {}))
    s = Peer(SERVER, auto_accept=True, auto_credit=credit, **(server or {}))
    c.open()
    pump(c, s)
    assert c.connection.is_open and s.connection.is_open
    return c, s


def last(peer: Peer, kind: type) -> Any:
    found = peer.of_type(kind)
    assert found, f"no {kind.__name__} event on the {peer.connection.role}"
    return found[-1]


def begun(c: Peer, s: Peer, **options: Any) -> tuple[Session, Session]:
    """A session begun by the client and answered by the server: (client's, server's)."""
    session = c.begin(**options)
    pump(c, s)
    return session, last(s, ev.SessionBegun).session


def sender_pair(c: Peer, s: Peer, session: Session, name: str = "link", **options: Any) -> tuple[SenderLink, Any]:
    """A client sender and the server's receiver answering it."""
    sender = c.sender(session, name, "queue", **options)
    pump(c, s)
    receiver = last(s, ev.LinkAttached).link
    assert isinstance(receiver, ReceiverLink) and receiver.name == name
    return sender, receiver


def receiver_pair(c: Peer, s: Peer, session: Session, name: str = "link", credit: int = 0) -> tuple[Any, Any]:
    """A client receiver and the server's sender answering it: (client receiver, server sender)."""
    receiver = c.receiver(session, name, "queue", credit=credit)
    pump(c, s)
    sender = last(s, ev.LinkAttached).link
    assert isinstance(sender, SenderLink) and sender.name == name
    return receiver, sender


def link_setup(
    credit: int = 10, client: dict[str, Any] | None = None, server: dict[str, Any] | None = None, **link_options: Any
) -> tuple[Peer, Peer, SenderLink, ReceiverLink]:
    c, s = connected(client, server, credit=credit)
    session, _ = begun(c, s)
    sender, receiver = sender_pair(c, s, session, **link_options)
    return c, s, sender, receiver


def condition_of(error: Error | None) -> Any:
    assert error is not None
    return error.condition


# --- open and close ------------------------------------------------------------------------------------------


def test_client_pipelines_header_and_open_before_the_server_speaks() -> None:
    c = Peer(CLIENT, container_id="the-client", hostname="broker.example")
    s = Peer(SERVER, container_id="the-server")
    c.open()
    first = c.take()
    assert first.startswith(AMQP_HEADER)
    frames = decode_frames(first, 512)
    assert len(frames) == 1 and isinstance(frames[0].performative, Open)
    assert frames[0].performative.container_id == "the-client"
    assert frames[0].performative.hostname == "broker.example"
    assert s.take() == b""  # the server waits for the client's header

    s.feed(first)
    opened = last(s, ev.ConnectionOpened)
    assert opened.open.container_id == "the-client"
    assert s.connection.remote_state is ACTIVE and s.connection.local_state is UNINIT
    reply = s.take()
    assert reply == AMQP_HEADER  # the header answers at once; open waits for the server's command
    c.feed(reply)
    assert not c.of_type(ev.ConnectionOpened)
    s.connection.open()
    reply = s.take()
    assert isinstance(decode_frames(reply, 1 << 20)[0].performative, Open)
    c.feed(reply)
    assert last(c, ev.ConnectionOpened).open.container_id == "the-server"
    assert c.connection.is_open and s.connection.is_open


def test_server_open_before_the_client_header_waits_for_it() -> None:
    c = Peer(CLIENT)
    s = Peer(SERVER)
    s.connection.open()
    assert s.take() == b""  # nothing before the client's header
    c.open()
    s.feed(c.take())
    out = s.take()
    assert out.startswith(AMQP_HEADER)
    assert isinstance(decode_frames(out, 1 << 20)[0].performative, Open)
    c.feed(out)
    assert c.connection.is_open and s.connection.is_open


def test_open_fields_are_negotiated() -> None:
    c, s = connected(
        {
            "container_id": "c-1",
            "hostname": "vhost-a",
            "max_frame_size": 1000,
            "channel_max": 3,
            "properties": {symbol("product"): "client-x"},
            "offered_capabilities": ["C1"],
            "desired_capabilities": ["D1", "D2"],
        },
        {"container_id": "s-1", "max_frame_size": 600, "channel_max": 7, "offered_capabilities": "D1"},
    )
    client, server = c.connection, s.connection
    assert server.remote_open is not None and client.remote_open is not None
    assert server.remote_open.container_id == "c-1"
    assert server.remote_open.hostname == "vhost-a"
    assert server.remote_open.max_frame_size == 1000
    assert server.remote_open.channel_max == 3
    assert server.remote_open.properties == {symbol("product"): "client-x"}
    assert server.remote_open.offered_capabilities == (symbol("C1"),)
    assert server.remote_open.desired_capabilities == (symbol("D1"), symbol("D2"))
    assert client.remote_open.container_id == "s-1"
    assert client.remote_open.offered_capabilities == (symbol("D1"),)
    assert client.remote_max_frame_size == 600
    assert server.remote_max_frame_size == 1000
    assert client.remote_open.channel_max == 7
    assert client.remote_idle_timeout == 0.0 and server.remote_idle_timeout == 0.0


def test_defaults_before_the_peers_open_is_seen() -> None:
    c = Peer(CLIENT)
    assert c.connection.remote_max_frame_size == 512  # §2.7.1: until open is exchanged
    assert c.connection.remote_open is None
    assert not c.connection.closed


@pytest.mark.parametrize(("client_max", "server_max"), [(512, 600), (600, 512), (4096, 1024)])
def test_no_frame_exceeds_the_peers_max_frame_size(client_max: int, server_max: int) -> None:
    c, s, sender, _receiver = link_setup(
        credit=20,
        client={"max_frame_size": client_max},
        server={"max_frame_size": server_max},
        source=Source(address="s" * 200, capabilities=("cap-a", "cap-b")),
    )
    payloads = [bytes([index]) * size for index, size in enumerate([0, 1, 300, 511, 512, 2000, 10_000])]
    for payload in payloads:
        sender.send(payload)
    pump(c, s)
    # and the other way: a server sender to the client
    session = c.connection.sessions[0]
    _client_receiver, server_sender = receiver_pair(c, s, session, "back", credit=10)
    for payload in payloads:
        server_sender.send(payload)
    pump(c, s)
    assert [d.payload for d in s.received] == payloads
    assert [d.payload for d in c.received] == payloads
    c_frames = c.frames(server_max)  # decoding raises if a frame exceeds the limit
    s_frames = s.frames(client_max)
    assert all(len(bytes(f.payload)) <= server_max for f in c_frames)
    transfers = [f for f in c_frames if isinstance(f.performative, Transfer)]
    assert len(transfers) > len(payloads)  # the large ones were split
    assert any(isinstance(f.performative, Transfer) for f in s_frames)


def test_transfers_are_split_at_600_byte_frames_and_reassembled() -> None:
    c, s, sender, _ = link_setup(server={"max_frame_size": 600})
    payload = bytes(range(256)) * 40  # 10240 bytes
    delivery = sender.send(payload)
    s.wire.clear()
    c.wire.clear()
    pump(c, s)
    frames = c.frames(600)
    transfers = [f for f in frames if isinstance(f.performative, Transfer)]
    assert len(transfers) >= len(payload) // 600 + 1
    assert all(t.performative.more for t in transfers[:-1]) and not transfers[-1].performative.more
    assert transfers[0].performative.delivery_id == delivery.delivery_id
    assert transfers[0].performative.delivery_tag == delivery.tag
    assert b"".join(bytes(t.payload) for t in transfers) == payload
    assert len(s.received) == 1 and s.received[0].payload == payload
    assert s.received[0].tag == delivery.tag


def test_close_handshake() -> None:
    c, s = connected()
    c.connection.close()
    pump(c, s)
    closed_s = last(s, ev.ConnectionClosed)
    closed_c = last(c, ev.ConnectionClosed)
    assert closed_s.remote and closed_s.error is None
    assert not closed_c.remote and closed_c.error is None  # we started it; this is the peer's answer
    assert c.connection.closed and s.connection.closed
    assert c.connection.local_state is CLOSED and c.connection.remote_state is CLOSED
    assert s.connection.local_state is CLOSED and s.connection.remote_state is CLOSED
    assert len(c.performatives(Close)) == 1 and len(s.performatives(Close)) == 1


@pytest.mark.parametrize("closer", ["client", "server"])
def test_close_with_an_error_is_seen_by_the_other_side(closer: str) -> None:
    c, s = connected()
    first, second = (c, s) if closer == "client" else (s, c)
    error = Error(condition=conditions.RESOURCE_LOCKED, description="going away", info={symbol("k"): "v"})
    first.connection.close(error)
    pump(c, s)
    seen = last(second, ev.ConnectionClosed)
    assert seen.remote and seen.error == error
    assert second.connection.remote_error == error
    assert first.connection.local_error == error
    answered = last(first, ev.ConnectionClosed)
    assert not answered.remote and answered.error == error  # the closer's own error, once the answer is in
    assert len(first.of_type(ev.ConnectionClosed)) == 1 and len(second.of_type(ev.ConnectionClosed)) == 1
    assert first.performatives(Close)[0].error == error and second.performatives(Close)[0].error is None
    assert c.connection.closed and s.connection.closed


def test_close_twice_and_commands_after_close() -> None:
    c, s = connected()
    c.connection.close()
    c.connection.close()  # idempotent
    pump(c, s)
    assert len(s.of_type(ev.ConnectionClosed)) == 1
    with pytest.raises(ConnectionClosedError):
        c.connection.begin_session()
    with pytest.raises(LocalProtocolError):
        c.connection.open()


def test_close_before_open_on_an_unused_connection_writes_nothing() -> None:
    s = Peer(SERVER)
    s.connection.close()
    assert s.take() == b""
    assert s.connection.closed


def test_close_before_open_after_the_header_writes_open_then_close() -> None:
    c = Peer(CLIENT)
    s = Peer(SERVER)
    c.open()
    s.feed(c.take())
    s.connection.close(Error(condition=conditions.NOT_ALLOWED, description="no"))  # §2.4.1: open, then close
    out = s.take()
    kinds = [type(f.performative) for f in decode_frames(out, 1 << 20)]
    assert kinds == [Open, Close]
    c.feed(out)
    assert condition_of(last(c, ev.ConnectionClosed).error) == conditions.NOT_ALLOWED


def test_commands_after_close_write_no_frames() -> None:
    """§2.4.3: nothing may follow close ("ending every session", says Connection.close). Once we closed, link
    commands must raise LocalProtocolError or stay silent; they must not write frames after our close."""
    c, s, sender, _receiver = link_setup()
    client_receiver, server_sender = receiver_pair(c, s, sender.session, "back", credit=5)
    server_sender.send(b"unsettled")
    pump(c, s)
    c.connection.close()
    assert isinstance(decode_frames(c.take(), TOP)[-1].performative, Close)
    for command in (
        lambda: sender.send(b"after close"),
        lambda: client_receiver.add_credit(5),
        lambda: client_receiver.settle(c.received[0], Accepted()),
        lambda: sender.detach(),
        lambda: sender.session.end(),
    ):
        try:
            command()
        except LocalProtocolError:
            pass
    written = decode_frames(c.take(), TOP)
    assert [type(f.performative).__name__ for f in written] == []


def test_transport_end_before_close() -> None:
    c, _s = connected()
    c.feed(b"")
    closed = last(c, ev.ConnectionClosed)
    assert closed.remote and condition_of(closed.error) == conditions.CONNECTION_FORCED
    assert c.connection.closed


def test_session_and_link_commands_need_an_open_connection() -> None:
    c = Peer(CLIENT)
    with pytest.raises(ConnectionClosedError):
        c.connection.begin_session()
    with pytest.raises(ValueError):
        Connection(role="peer", container_id="x")
    with pytest.raises(ValueError):
        Connection(container_id="x", max_frame_size=511)
    with pytest.raises(ValueError):
        Connection(role=CLIENT, container_id="x", sasl=SaslServer())


# --- idle timeout --------------------------------------------------------------------------------------------


def test_idle_timeouts_are_announced_and_heartbeats_keep_both_alive() -> None:
    c, s = connected({"idle_timeout": 4.0}, {"idle_timeout": 10.0})
    client, server = c.connection, s.connection
    assert server.remote_open is not None and server.remote_open.idle_time_out == 4000
    assert client.remote_idle_timeout == 10.0 and server.remote_idle_timeout == 4.0
    # At t=0: the client writes every 5 s (half the server's 10 s), the server every 2 s; each expires the other
    # after its own timeout without input.
    assert client.tick(0.0) == 4.0  # its own expiry (4 s) comes before its next heartbeat (5 s)
    assert server.tick(0.0) == 2.0
    c.wire.clear()
    s.wire.clear()
    now = 0.0
    deadlines = {"c": client.tick(now), "s": server.tick(now)}
    while now < 60.0:
        now = min(value for value in deadlines.values() if value is not None)
        c.now = s.now = now
        deadlines = {"c": client.tick(now), "s": server.tick(now)}
        pump(c, s)
        assert all(value is not None and value > now for value in deadlines.values())
    assert not c.of_type(ev.ConnectionClosed) and not s.of_type(ev.ConnectionClosed)
    client_beats = c.wire.count(EMPTY_FRAME)
    server_beats = s.wire.count(EMPTY_FRAME)
    assert bytes(c.wire) == EMPTY_FRAME * client_beats and bytes(s.wire) == EMPTY_FRAME * server_beats
    assert 11 <= client_beats <= 13  # every 5 s for 60 s
    assert 28 <= server_beats <= 31  # every 2 s


def test_heartbeat_is_written_at_half_the_peers_timeout() -> None:
    c, _s = connected(server={"idle_timeout": 10.0})
    client = c.connection
    assert client.tick(0.0) == 5.0
    assert c.take() == b""
    assert client.tick(4.99) == 5.0
    assert c.take() == b""
    assert client.tick(5.0) == 10.0
    c.now = 5.0
    assert c.take() == EMPTY_FRAME
    # traffic resets the clock: no heartbeat while we write anyway
    c.now = 8.0
    session = c.begin()
    assert session.channel == 0
    assert c.take() != b""
    assert client.tick(9.0) == 13.0
    assert c.take() == b""


def test_idle_timeout_expiry_closes_with_resource_limit_exceeded() -> None:
    c, s = connected({"idle_timeout": 10.0})
    client = c.connection
    assert client.tick(0.0) == 10.0
    assert client.tick(9.5) == 10.0
    assert not c.of_type(ev.ConnectionClosed)
    s.now = c.now = 6.0
    s.connection.tick(6.0)  # the server heartbeats at 5 s: the client hears from it at t=6
    pump(c, s)
    assert client.tick(15.9) == 16.0
    assert client.tick(16.0) is None
    c.process()
    closed = last(c, ev.ConnectionClosed)
    assert not closed.remote and condition_of(closed.error) == conditions.RESOURCE_LIMIT_EXCEEDED
    assert closed.idle_expired  # the layer above tells a silent peer (gone) from other closes by this, not by words
    assert client.local_state is CLOSED
    pump(c, s)
    seen = last(s, ev.ConnectionClosed)
    assert seen.remote and condition_of(seen.error) == conditions.RESOURCE_LIMIT_EXCEEDED
    assert not seen.idle_expired  # the peer's close: it read the words, its own clock expired nothing
    assert client.tick(100.0) is None
    assert s.connection.tick(100.0) is None


def test_no_idle_timeout_means_no_deadline() -> None:
    c, s = connected()
    assert c.connection.tick(1e9) is None
    assert s.connection.tick(1e9) is None
    assert c.take() == b"" and s.take() == b""


# --- SASL ----------------------------------------------------------------------------------------------------


def sasl_pair(client_sasl: SaslClient, server_sasl: SaslServer) -> tuple[Peer, Peer]:
    c = Peer(CLIENT, auto_accept=True, sasl=client_sasl)
    s = Peer(SERVER, auto_accept=True, sasl=server_sasl)
    c.open()  # pipelined: written once SASL succeeds
    pump(c, s)
    return c, s


def test_sasl_anonymous() -> None:
    c, s = sasl_pair(SaslClient(), SaslServer())
    assert c.wire.startswith(SASL_HEADER) and s.wire.startswith(SASL_HEADER)
    assert last(c, ev.Authenticated).mechanism == "ANONYMOUS"
    assert c.connection.is_open and s.connection.is_open
    assert c.connection.sasl_outcome.ok and s.connection.sasl_outcome.ok
    assert AMQP_HEADER in bytes(c.wire) and AMQP_HEADER in bytes(s.wire)
    # the open goes out after the AMQP header, which follows the outcome
    kinds = [type(e).__name__ for e in c.events]
    assert kinds.index("Authenticated") < kinds.index("ConnectionOpened")


def test_sasl_plain() -> None:
    store = InMemoryCredentialStore({"alice": "secret"})
    c, s = sasl_pair(
        SaslClient(user="alice", password="secret", allow_insecure_mechs=True), SaslServer(["PLAIN"], store=store)
    )
    assert last(s, ev.Authenticated) == ev.Authenticated(mechanism="PLAIN", identity="alice")
    assert last(c, ev.Authenticated).mechanism == "PLAIN"
    assert c.connection.is_open and s.connection.is_open


def test_sasl_scram_sha_256_is_preferred_over_plain() -> None:
    store = InMemoryCredentialStore({"alice": "secret"})
    c, s = sasl_pair(
        SaslClient(user="alice", password="secret", allow_insecure_mechs=True),
        SaslServer(["SCRAM-SHA-256", "PLAIN"], store=store),
    )
    assert last(s, ev.Authenticated) == ev.Authenticated(mechanism="SCRAM-SHA-256", identity="alice")
    assert last(c, ev.Authenticated).mechanism == "SCRAM-SHA-256"
    assert c.connection.is_open and s.connection.is_open
    session, _ = begun(c, s)
    assert session.is_open


@pytest.mark.parametrize("mechanisms", [["SCRAM-SHA-256", "PLAIN"], ["PLAIN"]])
def test_sasl_wrong_password(mechanisms: list[str]) -> None:
    store = InMemoryCredentialStore({"alice": "secret"})
    c, s = sasl_pair(
        SaslClient(user="alice", password="wrong", allow_insecure_mechs=True), SaslServer(mechanisms, store=store)
    )
    closed = last(c, ev.ConnectionClosed)
    assert closed.sasl_code == SaslCode.AUTH
    assert condition_of(closed.error) == conditions.UNAUTHORIZED_ACCESS
    server_closed = last(s, ev.ConnectionClosed)
    assert server_closed.sasl_code == SaslCode.AUTH and not server_closed.remote
    assert c.connection.closed and s.connection.closed
    assert not c.of_type(ev.ConnectionOpened) and not s.of_type(ev.ConnectionOpened)
    assert not c.of_type(ev.Authenticated) and not s.of_type(ev.Authenticated)
    assert AMQP_HEADER not in bytes(c.wire)  # no AMQP after a failed SASL exchange


def test_sasl_unknown_user() -> None:
    store = InMemoryCredentialStore({"alice": "secret"})
    c, _ = sasl_pair(SaslClient(user="bob", password="secret"), SaslServer(["SCRAM-SHA-256"], store=store))
    closed = last(c, ev.ConnectionClosed)
    assert closed.sasl_code == SaslCode.AUTH and condition_of(closed.error) == conditions.UNAUTHORIZED_ACCESS


def test_sasl_plain_refused_without_allow_insecure_mechs() -> None:
    store = InMemoryCredentialStore({"alice": "secret"})
    c, s = sasl_pair(SaslClient(user="alice", password="secret"), SaslServer(["PLAIN"], store=store))
    closed = last(c, ev.ConnectionClosed)
    assert not closed.remote
    assert condition_of(closed.error) == conditions.UNAUTHORIZED_ACCESS
    description = closed.error.description
    assert "PLAIN" in description and "allow_insecure_mechs" in description
    assert c.connection.closed
    assert not s.of_type(ev.Authenticated)


def test_sasl_client_against_a_server_without_sasl() -> None:
    c = Peer(CLIENT, sasl=SaslClient())
    s = Peer(SERVER)
    c.open()
    pump(c, s)
    assert condition_of(last(s, ev.ConnectionClosed).error) == conditions.NOT_ALLOWED
    assert condition_of(last(c, ev.ConnectionClosed).error) == conditions.NOT_ALLOWED
    assert c.connection.closed and s.connection.closed


def test_server_with_optional_sasl_accepts_a_plain_amqp_client() -> None:
    c = Peer(CLIENT, auto_accept=True)
    s = Peer(SERVER, auto_accept=True, sasl=SaslServer(), require_sasl=False)
    c.open()
    pump(c, s)
    assert c.connection.is_open and s.connection.is_open
    assert s.connection.sasl_outcome is None


# --- sessions ------------------------------------------------------------------------------------------------


def test_several_sessions_get_distinct_channels() -> None:
    c, s = connected()
    pairs = [begun(c, s, incoming_window=100 + index) for index in range(4)]
    assert [p[0].channel for p in pairs] == [0, 1, 2, 3]
    for client_session, server_session in pairs:
        assert server_session.remote_channel == client_session.channel
        assert client_session.remote_channel == server_session.channel
        assert client_session.is_open and server_session.is_open
        assert server_session.remote_begin is not None
        assert server_session.remote_incoming_window == client_session.incoming_window
        assert client_session.remote_incoming_window == server_session.incoming_window
    assert len(c.connection.sessions) == 4 and len(s.connection.sessions) == 4
    assert len(c.performatives(Begin)) == 4 and len(s.performatives(Begin)) == 4
    # the server's answers carry remote-channel; the client's begins do not
    assert all(b.remote_channel is None for b in c.performatives(Begin))
    assert sorted(b.remote_channel for b in s.performatives(Begin)) == [0, 1, 2, 3]


def test_client_ends_a_session_and_its_channel_is_reused() -> None:
    c, s = connected()
    first, _ = begun(c, s)
    second, server_second = begun(c, s)
    second.end()
    pump(c, s)
    ended = last(s, ev.SessionEnded)
    assert ended.session is server_second and ended.remote and ended.error is None
    answered = last(c, ev.SessionEnded)
    assert answered.session is second and not answered.remote
    assert len(c.of_type(ev.SessionEnded)) == 1 and len(s.of_type(ev.SessionEnded)) == 1
    assert second.local_state is CLOSED and second.remote_state is CLOSED
    assert server_second.local_state is CLOSED and server_second.remote_state is CLOSED
    assert c.connection.sessions == [first] and len(s.connection.sessions) == 1
    third, _ = begun(c, s)
    assert third.channel == 1
    assert len(c.performatives(End)) == 1 and len(s.performatives(End)) == 1


def test_server_ends_a_session() -> None:
    c, s = connected()
    session, server_session = begun(c, s)
    error = Error(condition=conditions.RESOURCE_LIMIT_EXCEEDED, description="too many")
    server_session.end(error)
    pump(c, s)
    ended = last(c, ev.SessionEnded)
    assert ended.session is session and ended.remote and ended.error == error
    assert session.remote_error == error
    assert session.local_state is CLOSED and session.remote_state is CLOSED
    assert server_session.local_state is CLOSED and server_session.remote_state is CLOSED
    assert c.connection.sessions == [] and s.connection.sessions == []
    again, _ = begun(c, s)
    assert again.channel == 0 and again.is_open


def test_session_end_with_error_from_the_client() -> None:
    c, s = connected()
    session, server_session = begun(c, s)
    error = Error(condition=conditions.INTERNAL_ERROR, description="bye")
    session.end(error)
    session.end()  # a second end is a no-op
    pump(c, s)
    assert last(s, ev.SessionEnded).error == error
    assert server_session.remote_error == error
    assert len(c.performatives(End)) == 1


def test_both_sides_end_at_once() -> None:
    c, s = connected()
    session, server_session = begun(c, s)
    session.end()
    server_session.end()
    pump(c, s)
    assert session.local_state is CLOSED and session.remote_state is CLOSED
    assert server_session.local_state is CLOSED and server_session.remote_state is CLOSED
    assert c.connection.sessions == [] and s.connection.sessions == []


def test_server_initiated_session() -> None:
    c, s = connected()
    server_session = s.begin()
    pump(c, s)
    client_session = last(c, ev.SessionBegun).session
    assert client_session.is_open and server_session.is_open
    assert client_session.remote_channel == server_session.channel


def test_channel_max_is_respected() -> None:
    c, s = connected(server={"channel_max": 1})
    begun(c, s)
    begun(c, s)
    with pytest.raises(LocalProtocolError) as raised:
        c.begin()
    assert raised.value.condition == conditions.RESOURCE_LIMIT_EXCEEDED
    assert len(c.connection.sessions) == 2


def test_handle_max_is_respected_both_ways() -> None:
    c, s = connected(credit=1)
    session, server_session = begun(c, s, handle_max=1)
    assert server_session.remote_handle_max == 1
    c.sender(session, "a", "q")
    c.sender(session, "b", "q")
    with pytest.raises(LocalProtocolError):
        c.sender(session, "c", "q")
    pump(c, s)
    assert sorted(link.handle for link in session.links) == [0, 1]
    # the server's answers took its handles 0 and 1: the client's handle-max leaves it no other
    assert sorted(link.handle for link in server_session.links) == [0, 1]
    with pytest.raises(LocalProtocolError):
        server_session.attach_sender("x", source=Source(address="q"), target=Target())
    pump(c, s)
    assert not c.of_type(ev.SessionEnded) and not s.of_type(ev.SessionEnded)
    assert len(c.of_type(ev.LinkAttached)) == 2
    # a detach frees a handle for the next link
    session.links[0].detach()
    pump(c, s)
    c.sender(session, "c", "q")
    pump(c, s)
    assert sorted(link.handle for link in session.links) == [0, 1]


# --- links ---------------------------------------------------------------------------------------------------


def test_termini_and_attach_fields_are_carried() -> None:
    c, s = connected()
    session, _ = begun(c, s)
    source = Source(
        address="src",
        durable=UNSETTLED_STATE,
        expiry_policy=NEVER,
        timeout=30,
        dynamic=False,
        dynamic_node_properties={symbol("lifetime-policy"): DeleteOnClose()},
        distribution_mode=COPY,
        filter={symbol("f"): "x = 1"},
        default_outcome=Released(),
        outcomes=(symbol("amqp:accepted:list"), symbol("amqp:released:list")),
        capabilities=(symbol("queue"),),
    )
    target = Target(address="dst", durable=1, expiry_policy=LINK_DETACH, timeout=5, capabilities=(symbol("topic"),))
    sender = session.attach_sender(
        "full",
        source=source,
        target=target,
        snd_settle_mode=SND_UNSETTLED,
        rcv_settle_mode=RCV_SECOND,
        properties={symbol("p"): 1},
        offered_capabilities=(symbol("o"),),
        desired_capabilities=(symbol("d"),),
        max_message_size=123456,
        initial_delivery_count=42,
    )
    pump(c, s)
    receiver = last(s, ev.LinkAttached).link
    attach = receiver.remote_attach
    assert isinstance(attach, Attach)
    assert attach.name == "full" and attach.role is SENDER and attach.handle == sender.handle
    assert receiver.remote_source == source and receiver.remote_target == target
    assert receiver.remote_snd_settle_mode == SND_UNSETTLED and receiver.remote_rcv_settle_mode == RCV_SECOND
    assert attach.properties == {symbol("p"): 1}
    assert attach.offered_capabilities == (symbol("o"),) and attach.desired_capabilities == (symbol("d"),)
    assert receiver.remote_max_message_size == 123456
    assert attach.initial_delivery_count == 42 and receiver.delivery_count == 42
    # the answer mirrors the termini (EnginePeer does) and carries the receiver role, no initial-delivery-count
    assert sender.remote_source == source and sender.remote_target == target
    assert sender.remote_attach is not None and sender.remote_attach.role is RECEIVER
    assert sender.remote_attach.initial_delivery_count is None
    assert sender.remote_rcv_settle_mode == RCV_SECOND
    assert sender.is_open and receiver.is_open


def test_receiver_attach_and_server_sender() -> None:
    c, s = connected()
    session, _ = begun(c, s)
    receiver, sender = receiver_pair(c, s, session, "in", credit=3)
    assert receiver.role is RECEIVER and sender.role is SENDER
    assert sender.remote_source == Source(address="queue")
    assert sender.credit == 3
    for index in range(3):
        sender.send(b"m%d" % index)
    with pytest.raises(NoCreditError):
        sender.send(b"no")
    pump(c, s)
    assert [d.payload for d in c.received] == [b"m0", b"m1", b"m2"]
    assert receiver.credit == 0


def test_dynamic_source_gets_an_address() -> None:
    c, s = connected()
    session, _ = begun(c, s)
    receiver = session.attach_receiver("dyn", source=Source(dynamic=True), target=Target())
    pump(c, s)
    assert receiver.remote_source is not None and receiver.remote_source.address == "dynamic-1"
    assert receiver.remote_source.dynamic


def test_peer_initiated_links_are_answered() -> None:
    c = Peer(CLIENT, auto_accept=True, auto_credit=5)
    s = Peer(SERVER, auto_accept=True)
    c.open()
    pump(c, s)
    server_session = s.begin()
    pump(c, s)
    server_sender = server_session.attach_sender("push", source=Source(address="q"), target=Target(address="t"))
    server_receiver = server_session.attach_receiver("pull", source=Source(address="x"), target=Target(address="q"))
    pump(c, s)
    attached = c.of_type(ev.LinkAttached)
    assert {event.link.name for event in attached} == {"push", "pull"}
    assert all(event.link.is_open for event in attached)
    assert server_sender.is_open and server_receiver.is_open
    assert server_sender.credit == 5  # the client's auto-credit
    server_sender.send(b"pushed")
    pump(c, s)
    assert [d.payload for d in c.received] == [b"pushed"]


def test_refusing_a_peer_initiated_link() -> None:
    c = Peer(CLIENT)
    s = Peer(SERVER, auto_accept=True)
    c.open()
    pump(c, s)
    c.connection.next_events()
    session = c.begin()
    pump(c, s)
    server_session = s.connection.sessions[0]
    server_session.attach_sender("unwanted", source=Source(address="q"), target=Target())
    pump(c, s)
    link = last(c, ev.LinkAttached).link
    assert not link.locally_attached
    link.detach(error=Error(condition=conditions.NOT_FOUND, description="no such node"))
    pump(c, s)
    attaches = c.performatives(Attach)
    assert len(attaches) == 1 and attaches[0].source is None and attaches[0].target is None
    detached = last(s, ev.LinkDetached)
    assert detached.remote and detached.closed and condition_of(detached.error) == conditions.NOT_FOUND
    assert session.links == [] and server_session.links == []


@pytest.mark.parametrize("closed", [True, False])
@pytest.mark.parametrize("detacher", ["client", "server"])
def test_detach_closing_and_not(closed: bool, detacher: str) -> None:
    c, s, sender, receiver = link_setup()
    error = Error(condition=conditions.LINK_DETACH_FORCED, description="admin") if detacher == "server" else None
    (sender if detacher == "client" else receiver).detach(closed=closed, error=error)
    pump(c, s)
    other = s if detacher == "client" else c
    first = c if detacher == "client" else s
    seen = last(other, ev.LinkDetached)
    assert seen.remote and seen.closed is closed and seen.error == error
    answer = last(first, ev.LinkDetached)
    assert not answer.remote and answer.closed is closed and answer.error == error
    assert len(first.of_type(ev.LinkDetached)) == 1 and len(other.of_type(ev.LinkDetached)) == 1
    for link in (sender, receiver):
        assert link.local_state is CLOSED and link.remote_state is CLOSED
    detaches = c.performatives(Detach) + s.performatives(Detach)
    assert len(detaches) == 2 and all(bool(d.closed) is closed for d in detaches)
    assert sender.session.links == [] and receiver.session.links == []


def test_reattach_the_same_name_after_detach() -> None:
    c, s, sender, receiver = link_setup(credit=2)
    session = sender.session
    handle = sender.handle
    sender.send(b"one")
    pump(c, s)
    sender.detach()
    pump(c, s)
    again = c.sender(session, "link", "queue")
    pump(c, s)
    answer = last(s, ev.LinkAttached).link
    assert again is not sender and answer is not receiver
    assert again.handle == handle  # the handle is free again
    assert again.is_open and answer.is_open
    assert again.credit == 2
    again.send(b"two")
    pump(c, s)
    assert [d.payload for d in s.received] == [b"one", b"two"]
    assert s.received[1].link is answer
    assert session.links == [again]


def test_a_receivers_answer_to_a_detach_follows_the_outcomes_given_for_what_came_with_it() -> None:
    """§2.6.4: the peer forgets a link's deliveries at our detach, so the outcomes the layer above gives the
    messages that came in the same input as the peer's detach go out first (answered at once, they came after it:
    the embedded broker's producers took messages it kept as in doubt)."""
    c, s, sender, receiver = link_setup(credit=10)
    for body in (b"one", b"two", b"three"):
        sender.send(body)
    sender.detach()
    s.feed(c.take())  # three transfers and the detach, in one input
    detached = last(s, ev.LinkDetached)
    assert detached.link is receiver and detached.remote
    assert receiver.local_state is ACTIVE  # answered when the output is taken
    for delivery in s.received:
        receiver.settle(delivery, Accepted())
    frames = s.take()
    written = [type(frame.performative) for frame in decode_frames(frames, TOP)]
    assert written == [Disposition, Detach]
    assert receiver.local_state is CLOSED
    c.feed(frames)
    updated = c.events_of(ev.DeliveriesUpdated)
    assert sum(len(event.deliveries) for event in updated) == 3
    assert all(isinstance(event.state, Accepted) for event in updated)
    assert sender.local_state is CLOSED and sender.remote_state is CLOSED


def test_the_layer_above_may_hold_the_answer_to_a_receivers_detach() -> None:
    c, s, sender, receiver = link_setup(credit=10)
    sender.send(b"one")
    sender.detach()
    s.feed(c.take())
    assert s.connection.hold_detach_answer(receiver)
    assert not s.connection.hold_detach_answer(receiver)  # held once
    assert not [f for f in decode_frames(s.take(), TOP) if isinstance(f.performative, Detach)]
    assert receiver.local_state is ACTIVE
    receiver.settle(s.received[0], Accepted())
    receiver.detach()
    assert [type(f.performative) for f in decode_frames(s.take(), TOP)] == [Disposition, Detach]
    # a sender's answer is not held: it went out at once
    c2, s2 = connected(credit=0)
    session, _ = begun(c2, s2)
    client_receiver, server_sender = receiver_pair(c2, s2, session)
    client_receiver.detach()
    s2.feed(c2.take())
    assert server_sender.local_state is CLOSED and not s2.connection.hold_detach_answer(server_sender)


def test_a_link_detached_and_attached_again_by_name_in_one_input() -> None:
    """The answer to the old link's detach waits for the output; the new link of the same name, attached in the
    same input, is a new link, answered on its own handle."""
    c, s, sender, receiver = link_setup(credit=2)
    channel = receiver.session.remote_channel
    sender.send(b"one")  # awaits our outcome: the answer to the detach waits
    wire = bytearray(c.take())
    encode_frame(wire, FRAME_AMQP, channel, Detach(handle=sender.handle, closed=True))
    encode_frame(
        wire,
        FRAME_AMQP,
        channel,
        Attach(
            name="link",
            handle=7,
            role=SENDER,
            source=Source(),
            target=Target(address="queue"),
            initial_delivery_count=0,
        ),
    )
    s.feed(bytes(wire))
    answer = last(s, ev.LinkAttached).link
    assert answer is not receiver and answer.is_open and receiver.local_state is ACTIVE
    written = [frame.performative for frame in decode_frames(s.take(), TOP)]
    attach, flow, detach = written  # the new link's answer and credit (auto_accept), then the old one's detach
    assert isinstance(attach, Attach) and attach.handle == answer.handle and isinstance(flow, Flow)
    assert isinstance(detach, Detach) and detach.handle == receiver.handle != answer.handle
    assert receiver.local_state is CLOSED and answer.is_open


def test_a_detach_with_no_delivery_awaiting_our_outcome_is_answered_at_once() -> None:
    c, s, sender, receiver = link_setup(credit=10)
    sender.send(b"one", settled=True)  # sent settled: no outcome to give
    sender.send(b"two")
    pump(c, s)
    receiver.settle(s.received[1], Accepted(), settled=False)  # an outcome given, not settled yet (mode second)
    sender.detach()
    s.feed(c.take())
    assert receiver.local_state is CLOSED and not s.connection.hold_detach_answer(receiver)


class _CountedHandles(dict[int, Any]):
    """A session's table of handles (or a connection's of channels), counting the lookups made in it."""

    lookups = 0

    def __contains__(self, key: object) -> bool:
        _CountedHandles.lookups += 1
        return super().__contains__(key)

    def get(self, key: int, default: Any = None) -> Any:
        _CountedHandles.lookups += 1
        return super().get(key, default)


def test_a_link_takes_the_lowest_free_handle_in_constant_time() -> None:
    """§2.7.2: a handle is free again once its link detached; ours are the lowest free. Found by a scan from 0, the
    n-th link of a session cost n lookups: 4,000 senders to one queue took a second of handle scans alone."""
    c, s = connected()
    session, _ = begun(c, s)
    links = [c.sender(session, f"first {i}", "q") for i in range(5)]
    pump(c, s)
    assert [link.handle for link in links] == [0, 1, 2, 3, 4]
    links[3].detach()
    links[1].detach()
    pump(c, s)
    again = [c.sender(session, f"again {i}", "q") for i in range(3)]
    pump(c, s)
    assert [link.handle for link in again] == [1, 3, 5]  # the freed ones, lowest first, then the next
    session._links_by_handle = _CountedHandles(session._links_by_handle)
    costs = []
    for i in range(2_000):
        _CountedHandles.lookups = 0
        c.sender(session, f"many {i}", "q")
        costs.append(_CountedHandles.lookups)
    assert max(costs[-100:]) <= max(costs[:100]) + 1, (costs[:3], costs[-3:])
    pump(c, s)
    assert len(s.of_type(ev.LinkAttached)) == 5 + 3 + 2_000 and not s.of_type(ev.SessionEnded)


def test_a_session_takes_the_lowest_free_channel_in_constant_time() -> None:
    """§2.5.1 (channel-max): a channel is free again once its session ended; ours are the lowest free. Found by a
    scan from 0, the n-th session cost n lookups: 20,000 sessions on one connection took 35 s."""
    c, s = connected()
    sessions = [begun(c, s)[0] for _ in range(5)]
    assert [session.channel for session in sessions] == [0, 1, 2, 3, 4]
    for ending in (sessions[3], sessions[1]):
        ending.end()
    pump(c, s)
    again = [begun(c, s)[0] for _ in range(3)]
    assert [session.channel for session in again] == [1, 3, 5]  # the freed ones, lowest first, then the next
    c.connection._sessions_by_channel = _CountedHandles(c.connection._sessions_by_channel)
    costs = []
    for _ in range(2_000):
        _CountedHandles.lookups = 0
        c.begin()
        costs.append(_CountedHandles.lookups)
    assert max(costs[-100:]) <= max(costs[:100]) + 1, (costs[:3], costs[-3:])
    pump(c, s)
    assert len(s.of_type(ev.SessionBegun)) == 5 + 3 + 2_000 and not s.of_type(ev.ConnectionClosed)


def test_attaching_a_name_twice_is_refused_but_roles_differ() -> None:
    c, s = connected()
    session, _ = begun(c, s)
    c.sender(session, "same", "q")
    with pytest.raises(LocalProtocolError):
        c.sender(session, "same", "q")
    c.receiver(session, "same", "q")  # (name, role) identifies a link
    pump(c, s)
    assert len(s.of_type(ev.LinkAttached)) == 2
    assert not s.of_type(ev.LinkDetached) and not s.of_type(ev.SessionEnded)


def test_attach_twice_and_bad_settle_modes_are_refused() -> None:
    _c, _s, sender, _ = link_setup()
    with pytest.raises(LocalProtocolError):
        sender.attach()
    session = sender.session
    with pytest.raises(LocalProtocolError):
        session.attach_sender("bad", snd_settle_mode=7)
    with pytest.raises(LocalProtocolError):
        session.attach_receiver("bad", rcv_settle_mode=3)
    assert all(link.name != "bad" for link in session.links)


def test_links_end_with_their_session() -> None:
    c, s, sender, receiver = link_setup()
    sender.send(b"x")
    pump(c, s)
    sender.session.end()
    pump(c, s)
    assert sender.local_state is CLOSED and receiver.remote_state is CLOSED
    assert sender.session.unsettled_outgoing == 0 and receiver.session.unsettled_incoming == 0
    with pytest.raises(LocalProtocolError):
        sender.session.attach_sender("late", target=Target(address="q"))


# --- credit --------------------------------------------------------------------------------------------------


def test_grant_and_add_credit() -> None:
    c, s, sender, receiver = link_setup(credit=0)
    assert sender.credit == 0
    with pytest.raises(NoCreditError):
        sender.send(b"no credit yet")
    receiver.grant_credit(3)
    pump(c, s)
    assert sender.credit == 3
    flow = last(c, ev.FlowReceived)
    assert flow.link is sender and not flow.drained
    sender.send(b"a")
    pump(c, s)
    assert receiver.credit == 2
    receiver.add_credit(4)
    pump(c, s)
    assert sender.credit == 6 and receiver.credit == 6
    receiver.grant_credit(1)  # lower it: the sender follows
    pump(c, s)
    assert sender.credit == 1
    sender.send(b"b")
    with pytest.raises(NoCreditError):
        sender.send(b"c")
    pump(c, s)
    assert [d.payload for d in s.received] == [b"a", b"b"]
    with pytest.raises(LocalProtocolError):
        receiver.grant_credit(-1)
    with pytest.raises(LocalProtocolError):
        receiver.grant_credit(1 << 32)


def test_drain() -> None:
    c, s, sender, receiver = link_setup(credit=0)
    receiver.grant_credit(5, drain=True)
    pump(c, s)
    assert sender.drain and sender.credit == 5
    sender.send(b"one")
    sender.send(b"two")
    sender.drained()
    assert sender.credit == 0
    pump(c, s)
    drained = [e for e in s.of_type(ev.FlowReceived) if e.drained]
    assert len(drained) == 1 and drained[0].link is receiver
    assert receiver.credit == 0 and not receiver.drain
    assert [d.payload for d in s.received] == [b"one", b"two"]
    # the delivery-count advanced by all 5 credits: the link is in step on both ends
    assert receiver.delivery_count == sender.delivery_count == 5
    receiver.grant_credit(2)
    pump(c, s)
    assert sender.credit == 2 and not sender.drain


def test_a_drain_answer_waits_for_the_transfers_queued_before_it() -> None:
    # §2.6.7: the answer to a drain counts every delivery sent; transfers still waiting for the receiver's session
    # window must reach it first, or they arrive beyond the credit the answer gave back.
    c, s, sender, receiver = link_setup(credit=0, server={"incoming_window": 2})
    receiver.grant_credit(5, drain=True)
    pump(c, s)
    for payload in (b"one", b"two", b"three"):
        sender.send(payload)
    assert sender.session._outgoing_queue  # the third waits for the receiver's window
    sender.drained()
    pump(c, s)
    assert not s.of_type(ev.LinkDetached) and receiver.local_state is ACTIVE
    assert [d.payload for d in s.received] == [b"one", b"two", b"three"]
    assert [e.drained for e in s.of_type(ev.FlowReceived) if e.link is receiver][-1]
    assert receiver.delivery_count == sender.delivery_count == 5 and receiver.credit == 0


def test_drained_without_a_drain_request_does_nothing() -> None:
    c, s, sender, _receiver = link_setup(credit=4)
    c.wire.clear()
    sender.drained()
    pump(c, s)
    assert c.wire == b"" and sender.credit == 4


def test_drain_with_no_credit_used() -> None:
    c, s, sender, receiver = link_setup(credit=0)
    receiver.grant_credit(3, drain=True)
    pump(c, s)
    sender.drained()
    pump(c, s)
    assert any(e.drained for e in s.of_type(ev.FlowReceived))
    assert receiver.credit == 0 and sender.credit == 0
    assert receiver.delivery_count == sender.delivery_count == 3


def _sender_flows(c: Peer, sender: SenderLink) -> list[Flow]:
    return [f for f in c.performatives(Flow) if f.handle == sender.handle]


def test_a_drain_answered_already_is_not_answered_again() -> None:
    """§2.6.7: a drain is answered with the flow state once it advances the delivery-count; called again (as for
    each flow of one read that finds the drain still set), drained() has nothing to give back and writes nothing,
    as proton's pn_link_drained."""
    c, s, sender, receiver = link_setup(credit=0)
    receiver.grant_credit(3, drain=True)
    pump(c, s)
    sender.drained()
    sender.drained()
    pump(c, s)
    sender.drained()
    pump(c, s)
    flows = _sender_flows(c, sender)
    assert [(f.delivery_count, f.link_credit, f.drain) for f in flows] == [(3, 0, True)]
    assert [e.drained for e in s.of_type(ev.FlowReceived) if e.link is receiver] == [True]
    assert receiver.delivery_count == sender.delivery_count == 3


def test_a_drain_whose_credit_the_transfers_used_is_answered_once_and_an_echo_too() -> None:
    """The transfers used the whole credit of the drain: drained() still answers the request once, with credit 0
    (rhea's receiver counts its drain done only when a flow with drain set comes back), and only once; a flow with
    echo set is answered as well (§2.7.4: the sender sends its flow state)."""
    c, s, sender, receiver = link_setup(credit=0)
    receiver.grant_credit(2, drain=True)
    pump(c, s)
    sender.send(b"one")
    sender.send(b"two")
    receiver._write_flow(echo=True)  # crosses the transfers: the sender finds the drain set and no credit left
    pump(c, s)
    assert sender.drain and sender.credit == 0
    before = len(_sender_flows(c, sender))
    assert before == 1 and not _sender_flows(c, sender)[0].echo  # the echo's answer
    sender.drained()
    sender.drained()
    pump(c, s)
    flows = _sender_flows(c, sender)[before:]
    assert [(f.delivery_count, f.link_credit, f.drain) for f in flows] == [(2, 0, True)]
    assert [d.payload for d in s.received] == [b"one", b"two"]
    assert receiver.credit == 0 and not receiver.drain
    assert receiver.delivery_count == sender.delivery_count == 2


@pytest.mark.parametrize("gone_by", ["detach", "end"])
def test_drained_on_a_link_that_is_gone_writes_nothing(gone_by: str) -> None:
    """A drain request stays pending on the sender (``sender.drain``) after the link is detached or its session
    ended; answering it then must not put a flow on the wire: the peer has no such link (or no session on that
    channel any more, or a new one that reuses the channel and the handle)."""
    c, s, sender, receiver = link_setup(credit=0)
    receiver.grant_credit(3, drain=True)
    pump(c, s)
    assert sender.drain
    if gone_by == "detach":
        receiver.detach()
    else:
        receiver.session.end()
    pump(c, s)
    assert sender.local_state is CLOSED and sender.remote_state is CLOSED
    try:
        sender.drained()
    except LocalProtocolError:
        pass
    assert decode_frames(c.take(), TOP) == []
    pump(c, s)
    assert not c.of_type(ev.ConnectionClosed) and not s.of_type(ev.ConnectionClosed)


def test_set_available_on_a_detached_link_writes_nothing() -> None:
    c, s, sender, _receiver = link_setup(credit=0)
    sender.detach()
    pump(c, s)
    try:
        sender.set_available(3)
    except LocalProtocolError:
        pass
    assert decode_frames(c.take(), TOP) == []


def test_echo_asks_the_peer_for_its_flow_state() -> None:
    c, s, sender, receiver = link_setup(credit=4)
    before = len(s.of_type(ev.FlowReceived))
    receiver._write_flow(echo=True)  # no public API asks for an echo; the wire behaviour is what we check
    pump(c, s)
    answers = s.of_type(ev.FlowReceived)[before:]
    assert len(answers) == 1 and answers[0].link is receiver
    flows = [f for f in c.performatives(Flow) if f.handle == sender.handle]
    assert flows and flows[-1].delivery_count == 0 and flows[-1].link_credit == 4 and not flows[-1].echo
    # a session-level echo is answered with a session flow
    before = len(c.of_type(ev.FlowReceived))
    sender.session._send_flow(None, None, None, None, False, True)
    pump(c, s)
    answers = c.of_type(ev.FlowReceived)[before:]
    assert len(answers) == 1 and answers[0].link is None


def test_available_is_reported_to_the_receiver() -> None:
    c, s, sender, receiver = link_setup(credit=1)
    sender.set_available(7)
    pump(c, s)
    assert receiver.available == 7
    sender.send(b"x")
    pump(c, s)
    assert sender.available == 6


def test_receiver_flow_before_the_senders_attach_carries_no_delivery_count() -> None:
    """§2.7.4: "In the event that the receiving link endpoint has not yet seen the initial attach frame from the
    sender [delivery-count] MUST NOT be set." A receiver that grants credit along with its attach says nothing
    about the sender's count yet."""
    c, s = connected()
    session, _ = begun(c, s)
    c.wire.clear()
    receiver = c.receiver(session, "early", "q", credit=10)
    pump(c, s)
    flows = [f for f in c.performatives(Flow) if f.handle == receiver.handle]
    assert flows[0].link_credit == 10
    assert flows[0].delivery_count is None


def test_early_credit_with_a_non_zero_initial_delivery_count() -> None:
    """A client receiver attaches and grants 10 credits in one write; the server's attach answer (with an
    initial-delivery-count near the wrap) happens between the two frames (the bytes arrived in two reads). The
    server's sender must have exactly 10 credits, and the receiver must accept all 10 transfers."""
    c = Peer(CLIENT, auto_accept=True)
    s = Peer(SERVER)
    c.open()
    s.connection.open()
    pump(c, s)
    session = c.begin()
    pump(c, s)
    last(s, ev.SessionBegun).session.begin()
    pump(c, s)
    receiver = session.attach_receiver("r", source=Source(address="q"), target=Target())
    receiver.grant_credit(10)
    out = c.take()
    attach_size = int.from_bytes(out[:4], "big")
    s.feed(out[:attach_size])  # the attach alone
    sender = last(s, ev.LinkAttached).link
    sender.attach(source=sender.remote_source, target=sender.remote_target, initial_delivery_count=TOP - 4)
    s.feed(out[attach_size:])  # then the flow
    pump(c, s)
    assert sender.credit == 10
    for index in range(10):
        sender.send(b"%d" % index)
    with pytest.raises(NoCreditError):
        sender.send(b"eleventh")
    pump(c, s)
    assert len(c.received) == 10
    assert not c.of_type(ev.LinkDetached) and not s.of_type(ev.LinkDetached)
    assert receiver.delivery_count == sender.delivery_count == 5


# --- deliveries ----------------------------------------------------------------------------------------------


def test_delivery_ids_tags_and_message_format() -> None:
    c, s = connected(credit=10)
    session, _ = begun(c, s)
    first, _ = sender_pair(c, s, session, "a")
    second, _ = sender_pair(c, s, session, "b")
    sent = [
        first.send(b"0"),
        second.send(b"1"),
        first.send(b"2", tag=b"custom-tag"),
        second.send(b"3", message_format=0x1234ABCD),
        first.send(b"4", tag=b"t" * 32, message_format=1),
    ]
    pump(c, s)
    assert [d.delivery_id for d in sent] == [0, 1, 2, 3, 4]  # session-scoped, consecutive across links
    assert sent[0].tag == b"\x00\x00\x00\x00" and sent[1].tag == b"\x00\x00\x00\x00"  # per-link counters
    assert sent[4].tag == b"t" * 32
    got = sorted(s.received, key=lambda delivery: delivery.delivery_id)
    assert [(d.delivery_id, d.tag, d.message_format, d.payload) for d in got] == [
        (d.delivery_id, d.tag, d.message_format, d.payload) for d in sent
    ]
    assert got[3].message_format == 0x1234ABCD
    assert [d.link.name for d in got] == ["a", "b", "a", "b", "a"]
    with pytest.raises(LocalProtocolError):
        first.send(b"x", tag=b"t" * 33)
    assert first.next_tag() == b"\x00\x00\x00\x01"  # explicit tags do not use the counter


def test_empty_payload_and_max_message_size() -> None:
    c, s = connected(credit=5)
    session, _ = begun(c, s)
    sender = c.sender(session, "m", "q")
    pump(c, s)
    receiver = last(s, ev.LinkAttached).link
    sender.send(b"")
    pump(c, s)
    assert s.received[0].payload == b""
    # a receiver that announces max-message-size: the sender refuses bigger messages before sending
    receiver_small = session.attach_receiver("small", source=Source(address="q"), target=Target(), max_message_size=100)
    pump(c, s)
    small_sender = last(s, ev.LinkAttached).link
    receiver_small.grant_credit(2)
    pump(c, s)
    with pytest.raises(LocalProtocolError) as raised:
        small_sender.send(b"x" * 101)
    assert raised.value.condition == conditions.LINK_MESSAGE_SIZE_EXCEEDED
    small_sender.send(b"x" * 100)
    pump(c, s)
    assert c.received[-1].payload == b"x" * 100
    assert receiver.is_open


def test_send_settle_mode_checks() -> None:
    c, s = connected(credit=5)
    session, _ = begun(c, s)
    settled_only, _ = sender_pair(c, s, session, "settled", snd_settle_mode=SND_SETTLED)
    unsettled_only, _ = sender_pair(c, s, session, "unsettled", snd_settle_mode=SND_UNSETTLED)
    assert settled_only.send(b"a").settled
    assert not unsettled_only.send(b"b").settled
    with pytest.raises(LocalProtocolError):
        settled_only.send(b"c", settled=False)
    with pytest.raises(LocalProtocolError):
        unsettled_only.send(b"d", settled=True)
    pump(c, s)
    assert [d.remote_settled for d in s.received] == [True, False]


def test_abort_of_a_multi_frame_delivery() -> None:
    c, s, sender, receiver = link_setup(server={"max_frame_size": 600, "incoming_window": 4})
    session = sender.session
    delivery = sender.send(b"a" * 10_000)  # about 22 frames; 4 go out, the rest wait for the window
    assert session.outgoing_backlog > 0
    session.abort(delivery)
    assert delivery.aborted and delivery.settled
    assert session.outgoing_backlog == 0
    assert session.unsettled_outgoing == 0
    pump(c, s)
    assert len(s.received) == 1
    aborted = s.received[0]
    assert aborted.aborted and aborted.payload == b"" and aborted.delivery_id == delivery.delivery_id
    assert receiver.session.unsettled_incoming == 0
    transfers = c.performatives(Transfer)
    assert transfers[-1].aborted and not transfers[-1].more
    # the link goes on
    after = sender.send(b"next")
    pump(c, s)
    assert s.received[-1].payload == b"next" and s.received[-1].delivery_id == after.delivery_id
    assert not s.of_type(ev.LinkDetached) and not s.of_type(ev.SessionEnded)
    with pytest.raises(LocalProtocolError):
        session.abort(after)  # fully written


def test_abort_respects_the_peers_incoming_window() -> None:
    """The aborted transfer is a transfer frame (§2.5.6 counts every one): it may not go out while the peer's
    incoming window is closed, which is always the case when a partly written delivery waits in the session."""
    c, s, sender, _ = link_setup(server={"max_frame_size": 600, "incoming_window": 4})
    session = sender.session
    delivery = sender.send(b"a" * 10_000)
    assert session.remote_incoming_window == 0
    written = len(c.take())
    s.feed(bytes(c.wire[-written:]))
    session.abort(delivery)
    assert session.remote_incoming_window >= 0
    pump(c, s)
    assert s.received and s.received[-1].aborted


def test_a_delivery_is_marked_written_at_its_first_frame() -> None:
    """``Delivery.written`` tells the layer above which deliveries never left (all of them waiting for the peer's
    incoming window, §2.5.6): exact for a delivery cut off by the window, and for one streamed in parts."""
    c, s, sender, _receiver = link_setup(server={"max_frame_size": 600, "incoming_window": 4})
    session = sender.session
    big = sender.send(b"a" * 10_000)  # 4 frames go out, the rest wait for the window
    waiting = sender.send(b"b" * 100)  # queued behind it: no frame of it is out
    assert big.written and not waiting.written
    assert session.backlogged_deliveries == [big, waiting]
    pump(c, s)  # the window reopens as the server reads
    assert waiting.written and not session.has_backlog
    streamed = sender.send(b"", more=True)  # a part with no bytes: no frame yet
    assert not streamed.written
    sender.send_more(streamed, b"c" * 10)
    assert streamed.written  # its first frame went at once (the window is open)
    assert [d.written for d in s.received] == [False] * len(s.received)  # (always False for incoming)


@pytest.mark.parametrize("ending", ["detach", "end", "close"])
def test_deliveries_dropped_by_the_peers_ending_stay_unwritten(ending: str) -> None:
    """The peer's detach, end or close drops what waits for its window before the layer above sees the event: the
    deliveries it dropped are still marked unwritten then (never sent), those cut off by the window written."""
    c, s, sender, receiver = link_setup(server={"max_frame_size": 600, "incoming_window": 4})
    big = sender.send(b"a" * 10_000)
    waiting = sender.send(b"b" * 100)
    c.take()  # the frames the window let out: lost on the way (the server never reads them)
    if ending == "detach":
        receiver.detach(closed=True, error=Error(condition=symbol("amqp:resource-limit-exceeded")))
    elif ending == "end":
        receiver.session.end(Error(condition=symbol("amqp:resource-limit-exceeded")))
    else:
        s.connection.close(Error(condition=symbol("amqp:resource-limit-exceeded")))
    c.feed(s.take())
    assert not sender.session.has_backlog  # dropped by the ending
    assert c.of_type({"detach": ev.LinkDetached, "end": ev.SessionEnded, "close": ev.ConnectionClosed}[ending])
    assert big.written and not waiting.written


def test_abort_of_a_delivery_not_yet_started() -> None:
    c, s, sender, _receiver = link_setup(server={"max_frame_size": 600, "incoming_window": 4})
    session = sender.session
    big = sender.send(b"a" * 10_000)
    waiting = sender.send(b"b" * 100)  # queued behind the big one: no frame of it is out
    session.abort(waiting)
    pump(c, s)
    # The aborted delivery used a credit and a delivery-count when it was sent: one aborted transfer (no payload)
    # tells the receiver, so both ends' counts stay in step (§2.6.7); the receiver sees it as aborted.
    assert [(d.payload, d.aborted) for d in s.received] == [(big.payload, False), (b"", True)]
    last = c.performatives(Transfer)[-1]
    assert last.aborted is True and last.delivery_id == waiting.delivery_id
    assert sender.credit == _receiver.credit


def test_presettled_deliveries() -> None:
    c, s, sender, receiver = link_setup()
    delivery = sender.send(b"fire and forget", settled=True)
    assert delivery.settled and sender.session.unsettled_outgoing == 0
    pump(c, s)
    got = s.received[0]
    assert got.remote_settled and receiver.session.unsettled_incoming == 0
    s.wire.clear()
    receiver.settle(got, Accepted())  # nothing to say to a sender that forgot it
    pump(c, s)
    assert s.performatives(Disposition) == []


def test_rcv_settle_mode_first() -> None:
    c, s, sender, receiver = link_setup(rcv_settle_mode=RCV_FIRST)
    delivery = sender.send(b"x")
    assert sender.session.unsettled_outgoing == 1
    pump(c, s)
    got = s.received[0]
    assert receiver.session.unsettled_incoming == 1
    receiver.settle(got, Accepted())
    assert got.settled and receiver.session.unsettled_incoming == 0
    pump(c, s)
    updated = last(c, ev.DeliveriesUpdated)
    assert updated.deliveries == [delivery] and updated.settled and updated.state == Accepted()
    assert delivery.remote_settled and delivery.settled and delivery.remote_state == Accepted()
    assert sender.session.unsettled_outgoing == 0
    dispositions = s.performatives(Disposition)
    assert len(dispositions) == 1 and dispositions[0].role is RECEIVER and dispositions[0].settled
    assert c.performatives(Disposition) == []  # the sender has nothing to add


def test_rcv_settle_mode_second() -> None:
    c, s, sender, receiver = link_setup(rcv_settle_mode=RCV_SECOND)
    assert receiver.remote_rcv_settle_mode == RCV_SECOND
    delivery = sender.send(b"x")
    pump(c, s)
    got = s.received[0]
    receiver.settle(got, Accepted(), settled=False)  # the outcome first, unsettled
    assert not got.settled
    pump(c, s)
    # the sender saw the outcome and settled; the receiver then saw the sender's settlement
    sender_update = c.of_type(ev.DeliveriesUpdated)[0]
    assert sender_update.deliveries == [delivery] and not sender_update.settled
    assert sender_update.state == Accepted()
    assert delivery.settled and delivery.remote_state == Accepted() and not delivery.remote_settled
    receiver_update = last(s, ev.DeliveriesUpdated)
    assert receiver_update.deliveries == [got] and receiver_update.settled
    assert got.remote_settled and got.settled
    assert sender.session.unsettled_outgoing == 0 and receiver.session.unsettled_incoming == 0
    receiver_dispositions = s.performatives(Disposition)
    sender_dispositions = c.performatives(Disposition)
    assert [(d.role, d.settled) for d in receiver_dispositions] == [(RECEIVER, False)]
    assert [(d.role, d.settled) for d in sender_dispositions] == [(SENDER, True)]
    receiver.settle(got)  # already settled: nothing more goes out
    s.wire.clear()
    pump(c, s)
    assert s.performatives(Disposition) == []


OUTCOMES = [
    Accepted(),
    Rejected(error=Error(condition=conditions.DECODE_ERROR, description="bad body", info={symbol("at"): 3})),
    Rejected(),
    Released(),
    Modified(),
    Modified(delivery_failed=True),
    Modified(undeliverable_here=True),
    Modified(delivery_failed=True, undeliverable_here=True, message_annotations={symbol("x-opt-reason"): "retry"}),
]


@pytest.mark.parametrize("outcome", OUTCOMES, ids=repr)
@pytest.mark.parametrize("settled", [True, False])
def test_every_outcome_reaches_the_sender(outcome: Any, settled: bool) -> None:
    c, s, sender, receiver = link_setup()
    delivery = sender.send(b"payload")
    pump(c, s)
    got = s.received[0]
    receiver.settle(got, outcome, settled=settled)
    pump(c, s)
    assert delivery.remote_state == outcome
    update = c.of_type(ev.DeliveriesUpdated)[0]
    assert update.state == outcome and update.settled is settled and update.deliveries == [delivery]
    assert delivery.settled  # a terminal outcome: the sender settles (at once if the receiver did not)
    assert sender.session.unsettled_outgoing == 0
    assert receiver.session.unsettled_incoming == 0


def test_received_state_is_not_terminal() -> None:
    c, s, sender, receiver = link_setup()
    delivery = sender.send(b"x" * 100)
    pump(c, s)
    got = s.received[0]
    receiver.settle(got, Received(section_number=2, section_offset=40), settled=False)
    pump(c, s)
    assert delivery.remote_state == Received(section_number=2, section_offset=40)
    assert not delivery.settled and not delivery.remote_settled
    assert sender.session.unsettled_outgoing == 1 and receiver.session.unsettled_incoming == 1
    assert c.performatives(Disposition) == []  # the sender waits for a terminal outcome
    receiver.settle(got, Accepted())
    pump(c, s)
    assert delivery.settled and delivery.remote_state == Accepted()
    assert sender.session.unsettled_outgoing == 0 and receiver.session.unsettled_incoming == 0


def test_one_hundred_accepts_make_one_disposition_frame() -> None:
    c, s, sender, receiver = link_setup(credit=100)
    sent = [sender.send(b"%d" % index) for index in range(100)]
    pump(c, s)
    assert len(s.received) == 100
    s.wire.clear()
    for delivery in s.received:
        receiver.settle(delivery, Accepted())
    pump(c, s)
    dispositions = s.performatives(Disposition)
    assert len(dispositions) == 1
    assert (dispositions[0].first, dispositions[0].last) == (0, 99)
    assert dispositions[0].settled and dispositions[0].state == Accepted()
    updates = c.of_type(ev.DeliveriesUpdated)
    assert len(updates) == 1 and updates[0].deliveries == sent
    assert all(d.settled and d.remote_settled for d in sent)
    assert sender.session.unsettled_outgoing == 0 and receiver.session.unsettled_incoming == 0


def test_dispositions_split_into_ranges() -> None:
    c, s, sender, receiver = link_setup(credit=10)
    sent = [sender.send(b"%d" % index) for index in range(10)]
    pump(c, s)
    got = s.received
    s.wire.clear()
    # 0-2 accepted, 3 rejected, 4-5 accepted, 6 released, 8-9 accepted, 7 left unsettled
    plan: list[tuple[int, Any]] = [
        (0, Accepted()),
        (1, Accepted()),
        (2, Accepted()),
        (3, Rejected()),
        (4, Accepted()),
        (5, Accepted()),
        (6, Released()),
        (8, Accepted()),
        (9, Accepted()),
    ]
    for index, outcome in plan:
        receiver.settle(got[index], outcome)
    pump(c, s)
    ranges = [(d.first, d.last, type(d.state).__name__) for d in s.performatives(Disposition)]
    assert ranges == [
        (0, 2, "Accepted"),
        (3, None, "Rejected"),
        (4, 5, "Accepted"),
        (6, None, "Released"),
        (8, 9, "Accepted"),
    ]
    assert [type(d.remote_state).__name__ if d.remote_state else None for d in sent] == [
        "Accepted",
        "Accepted",
        "Accepted",
        "Rejected",
        "Accepted",
        "Accepted",
        "Released",
        None,
        "Accepted",
        "Accepted",
    ]
    assert sender.session.unsettled_outgoing == 1 and receiver.session.unsettled_incoming == 1


def test_unsettled_maps_are_emptied_by_detach() -> None:
    c, s, sender, receiver = link_setup(credit=10)
    for index in range(5):
        sender.send(b"%d" % index)
    pump(c, s)
    assert sender.session.unsettled_outgoing == 5 and receiver.session.unsettled_incoming == 5
    sender.detach()
    pump(c, s)
    assert sender.session.unsettled_outgoing == 0 and receiver.session.unsettled_incoming == 0
    # a second link on the same session is unaffected by the first one's departure
    other, other_receiver = sender_pair(c, s, sender.session, "other")
    other.send(b"kept")
    pump(c, s)
    assert sender.session.unsettled_outgoing == 1 and other_receiver.session.unsettled_incoming == 1


def test_unsettled_maps_are_emptied_when_the_receiver_detaches() -> None:
    c, s, sender, receiver = link_setup(credit=10)
    for index in range(3):
        sender.send(b"%d" % index)
    pump(c, s)
    receiver.detach(closed=False)
    pump(c, s)
    assert sender.session.unsettled_outgoing == 0 and receiver.session.unsettled_incoming == 0


def test_settlement_after_detach_is_harmless() -> None:
    c, s, sender, receiver = link_setup(credit=10)
    sender.send(b"x")
    pump(c, s)
    got = s.received[0]
    sender.detach()
    pump(c, s)
    with pytest.raises(LocalProtocolError):
        ReceiverLink(receiver.session, "stranger").settle(got, Accepted())
    receiver.settle(got, Accepted())
    pump(c, s)
    assert not c.of_type(ev.SessionEnded) and not s.of_type(ev.SessionEnded)
    assert c.connection.is_open and s.connection.is_open


# --- serial numbers across the wrap --------------------------------------------------------------------------


def test_initial_delivery_count_near_the_wrap() -> None:
    c, s, sender, receiver = link_setup(credit=0, initial_delivery_count=TOP - 2)
    assert receiver.delivery_count == TOP - 2
    receiver.grant_credit(10)
    pump(c, s)
    assert sender.credit == 10
    for index in range(10):
        sender.send(b"%d" % index)
    with pytest.raises(NoCreditError):
        sender.send(b"no")
    pump(c, s)
    assert len(s.received) == 10
    assert sender.delivery_count == receiver.delivery_count == 7
    receiver.add_credit(3)
    pump(c, s)
    assert sender.credit == 3
    receiver.grant_credit(2, drain=True)
    pump(c, s)
    sender.drained()
    pump(c, s)
    assert sender.delivery_count == receiver.delivery_count == 9
    assert any(e.drained for e in s.of_type(ev.FlowReceived))
    assert not s.of_type(ev.LinkDetached)


def test_delivery_ids_wrap_and_dispositions_span_the_wrap() -> None:
    c, s, sender, receiver = link_setup(credit=10)
    session = sender.session
    session._next_delivery_id = TOP - 2  # internal: start near the wrap
    sent = [sender.send(b"%d" % index) for index in range(6)]
    assert [d.delivery_id for d in sent] == [TOP - 2, TOP - 1, TOP, 0, 1, 2]
    pump(c, s)
    assert [d.delivery_id for d in s.received] == [TOP - 2, TOP - 1, TOP, 0, 1, 2]
    s.wire.clear()
    for delivery in s.received:
        receiver.settle(delivery, Accepted())
    pump(c, s)
    dispositions = s.performatives(Disposition)
    assert [(d.first, d.last) for d in dispositions] == [(TOP - 2, 2)]
    assert all(d.settled and d.remote_state == Accepted() for d in sent)
    assert session.unsettled_outgoing == 0 and receiver.session.unsettled_incoming == 0


def test_delivery_ids_wrap_with_rcv_settle_mode_second() -> None:
    c, s, sender, receiver = link_setup(credit=10, rcv_settle_mode=RCV_SECOND)
    sender.session._next_delivery_id = TOP - 1
    sent = [sender.send(b"%d" % index) for index in range(4)]
    pump(c, s)
    for delivery in s.received:
        receiver.settle(delivery, Released(), settled=False)
    pump(c, s)
    assert all(d.settled and d.remote_state == Released() for d in sent)
    assert all(d.remote_settled for d in s.received)
    assert [(d.first, d.last) for d in c.performatives(Disposition)] == [(TOP - 1, 1)]


def test_transfer_ids_wrap() -> None:
    c, s = connected(credit=10, server={"incoming_window": 4})
    session = Session(c.connection, incoming_window=4)
    session.next_outgoing_id = TOP - 5  # internal: the first transfer-id, announced in begin
    session.begin()
    pump(c, s)
    server_session = last(s, ev.SessionBegun).session
    assert server_session.next_incoming_id == TOP - 5
    sender, _receiver = sender_pair(c, s, session)
    for index in range(10):
        sender.send(b"%d" % index)
    pump(c, s)
    assert [d.payload for d in s.received] == [b"%d" % index for index in range(10)]
    assert session.next_outgoing_id == 4 and server_session.next_incoming_id == 4
    assert session.remote_incoming_window >= 0
    assert not s.of_type(ev.SessionEnded)


# --- the session window --------------------------------------------------------------------------------------


@pytest.mark.parametrize("window", [4, 2, 1])
def test_small_incoming_window_holds_frames_back_and_replenishes(window: int) -> None:
    c, s, sender, receiver = link_setup(credit=50, server={"incoming_window": window})
    session = sender.session
    server_session = receiver.session
    assert session.remote_incoming_window == window
    s.wire.clear()
    c.wire.clear()
    for index in range(50):
        sender.send(b"message %d" % index)
    first = c.take()
    assert len([f for f in decode_frames(first, 1 << 20) if isinstance(f.performative, Transfer)]) == window
    assert session.remote_incoming_window == 0 and session.outgoing_backlog > 0
    s.feed(first)
    rounds = pump(c, s)
    assert rounds < 200
    assert [d.payload for d in s.received] == [b"message %d" % index for index in range(50)]
    assert session.outgoing_backlog == 0
    assert session.remote_incoming_window >= 0 and server_session.incoming_window >= 0
    # the documented policy: the window is reset to its initial size with a flow whenever it falls below half
    flows = s.performatives(Flow)
    assert flows, "the receiver never replenished its window"
    assert all(f.incoming_window <= window for f in flows)
    assert server_session.incoming_window >= window >> 1
    assert not s.of_type(ev.SessionEnded) and not c.of_type(ev.SessionEnded)


@pytest.mark.parametrize("window", [1, 2, 3, 4, 7])
def test_window_replenish_policy_step_by_step(window: int) -> None:
    """The documented policy (session.py): the incoming window is reset to its initial size, with a flow, whenever
    it falls to half of it or below; until then no flow goes out."""
    c, s, sender, receiver = link_setup(credit=50, server={"incoming_window": window})
    server_session = receiver.session
    s.wire.clear()
    frames_until_reset = window - (window >> 1)  # the window falls to half (rounded down) after this many frames
    for index in range(frames_until_reset - 1):
        sender.send(b"%d" % index)
        s.feed(c.take())
        assert s.take() == b""  # still above half: no flow
        assert server_session.incoming_window == window - index - 1
    sender.send(b"last")
    s.feed(c.take())
    c.feed(s.take())
    assert server_session.incoming_window == window
    flows = s.performatives(Flow)
    assert len(flows) == 1 and flows[0].handle is None
    assert flows[0].incoming_window == window and flows[0].next_incoming_id == frames_until_reset
    pump(c, s)
    assert sender.session.remote_incoming_window == window


def test_many_messages_through_a_small_window_and_small_frames() -> None:
    c, s, sender, _receiver = link_setup(credit=30, server={"incoming_window": 3, "max_frame_size": 512})
    payloads = [bytes([index]) * (index * 97) for index in range(30)]
    for payload in payloads:
        sender.send(payload)
    pump(c, s)
    assert [d.payload for d in s.received] == payloads
    c.frames(512)  # within the peer's max frame size
    assert sender.session.remote_incoming_window >= 0


def test_link_flow_carries_the_session_window() -> None:
    c, s, sender, receiver = link_setup(credit=0, server={"incoming_window": 8})
    s.wire.clear()
    receiver.grant_credit(5)
    pump(c, s)
    flows = s.performatives(Flow)
    assert len(flows) == 1
    flow = flows[0]
    assert flow.handle == receiver.handle and flow.link_credit == 5 and flow.delivery_count == 0
    assert flow.incoming_window == 8 and flow.next_incoming_id == 0 and flow.next_outgoing_id == 0
    assert sender.session.remote_incoming_window == 8


# --- a full conversation, checked frame by frame -------------------------------------------------------------


def test_every_performative_goes_over_the_wire() -> None:
    c, s, sender, receiver = link_setup(credit=2)
    delivery: Delivery = sender.send(b"hello")
    pump(c, s)
    receiver.settle(s.received[0], Accepted())
    pump(c, s)
    assert delivery.remote_settled
    sender.detach()
    pump(c, s)
    sender.session.end()
    pump(c, s)
    c.connection.close()
    pump(c, s)
    client_kinds = [type(p).__name__ for p in c.performatives()]
    server_kinds = [type(p).__name__ for p in s.performatives()]
    assert client_kinds == ["Open", "Begin", "Attach", "Transfer", "Detach", "End", "Close"]
    assert server_kinds == ["Open", "Begin", "Attach", "Flow", "Disposition", "Detach", "End", "Close"]
    assert c.wire.startswith(AMQP_HEADER) and s.wire.startswith(AMQP_HEADER)
    assert c.connection.closed and s.connection.closed
    assert not [e for e in c.events + s.events if getattr(e, "error", None) is not None]
    # each side reports each ending once: who started it says remote (the client started every one here)
    for kind in (ev.LinkDetached, ev.SessionEnded, ev.ConnectionClosed):
        assert [e.remote for e in c.of_type(kind)] == [False] and [e.remote for e in s.of_type(kind)] == [True]


def test_states_through_the_lifecycle() -> None:
    c = Peer(CLIENT, auto_accept=True)
    s = Peer(SERVER, auto_accept=True)
    conn = c.connection
    assert (conn.local_state, conn.remote_state) == (UNINIT, UNINIT)
    c.open()
    assert (conn.local_state, conn.remote_state) == (ACTIVE, UNINIT)
    pump(c, s)
    assert conn.is_open
    session = c.begin()
    assert (session.local_state, session.remote_state) == (ACTIVE, UNINIT) and session.locally_begun
    pump(c, s)
    assert session.is_open
    link = c.sender(session, "l", "q")
    assert (link.local_state, link.remote_state) == (ACTIVE, UNINIT) and link.locally_attached
    with pytest.raises(LocalProtocolError):
        link.send(b"not attached yet")
    pump(c, s)
    assert link.is_open
    link.detach()
    assert (link.local_state, link.remote_state) == (CLOSED, ACTIVE)
    link.detach()  # no-op
    pump(c, s)
    assert (link.local_state, link.remote_state) == (CLOSED, CLOSED)
    session.end()
    assert (session.local_state, session.remote_state) == (CLOSED, ACTIVE)
    pump(c, s)
    assert (session.local_state, session.remote_state) == (CLOSED, CLOSED)
    conn.close()
    assert (conn.local_state, conn.remote_state) == (CLOSED, ACTIVE)
    pump(c, s)
    assert (conn.local_state, conn.remote_state) == (CLOSED, CLOSED) and conn.closed
