"""Interoperability of the Sans-IO engine (`amqp_async.protocol`) with python-qpid-proton's engine, in memory.

Every scenario runs our engine against proton's, bytes pumped between the two (`proton_peer.pump`). Where the
scenario has a direction, it runs twice: ``ours-client`` (our client, proton's server) and ``ours-server`` (proton's
client, our server). Links are attached by the client side, so in ``ours-client`` our engine starts the links and
proton answers them, and in ``ours-server`` proton starts them and our engine (`EnginePeer` with ``auto_accept``)
answers: both the attaching and the answering code paths of the engine meet proton that way.

What each side saw is checked on the *other* side: proton's view through its API (`remote_*`), ours through the
engine's events and the frames it wrote (decoded with `frames.parse_stream`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

proton = pytest.importorskip("proton", reason="python-qpid-proton is the reference peer; CI installs it")

from proton import SASL, Data, Disposition, Terminus  # noqa: E402

import amqp_async.protocol.connection as connection_module  # noqa: E402
from amqp_async.codec import conditions  # noqa: E402
from amqp_async.codec.delivery_states import Accepted, Modified, Received, Rejected, Released  # noqa: E402
from amqp_async.codec.performatives import (  # noqa: E402
    RCV_FIRST,
    RCV_SECOND,
    SND_MIXED,
    SND_SETTLED,
    SND_UNSETTLED,
    Attach,
    Error,
    Flow,
)
from amqp_async.codec.performatives import Disposition as DispositionFrame  # noqa: E402
from amqp_async.codec.terminus import COPY, LINK_DETACH, UNSETTLED_STATE, DeleteOnClose, Source, Target  # noqa: E402
from amqp_async.protocol import events as ev  # noqa: E402
from amqp_async.protocol.disposition_frames import parse_disposition  # noqa: E402
from amqp_async.protocol.link import ReceiverLink, SenderLink  # noqa: E402
from amqp_async.protocol.payload import Gathered  # noqa: E402
from amqp_async.protocol.sasl import SaslClient, SaslServer  # noqa: E402
from amqp_async.protocol.sasl_scram import InMemoryCredentialStore  # noqa: E402
from amqp_async.protocol.session import Session  # noqa: E402
from amqp_async.types import symbol, ulong  # noqa: E402

try:
    from engine_peer import EnginePeer
    from frames import ParsedFrame, frames_only
    from proton_peer import ProtonPeer, pump
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.engine_peer import EnginePeer
    from tests.frames import ParsedFrame, frames_only
    from tests.proton_peer import ProtonPeer, pump

OURS_CLIENT = "ours-client"
OURS_SERVER = "ours-server"
DIRECTIONS = (OURS_CLIENT, OURS_SERVER)


# ----------------------------------------------------------------------------------------------------------------
# harness


class TapPeer(EnginePeer):
    """`EnginePeer` that also keeps every byte it wrote (``wire``) for frame-level checks, and a fake clock."""

    def __init__(self, role: str, **options: Any) -> None:
        super().__init__(role, **options)
        self.wire = bytearray()

    def take(self) -> bytes:
        data = super().take()
        self.wire += data
        return data

    def frames(self) -> list[ParsedFrame]:
        """Every frame we wrote so far."""
        return frames_only(bytes(self.wire))


class Pair:
    """Our engine and proton's, connected in memory; ``direction`` says which one is the client."""

    def __init__(
        self,
        direction: str,
        *,
        ours: dict[str, Any] | None = None,
        prot: dict[str, Any] | None = None,
    ) -> None:
        self.direction = direction
        self.ours_is_client = direction == OURS_CLIENT
        ours_options = {"auto_accept": True, **(ours or {})}
        prot_options = {"auto_accept": True, **(prot or {})}
        self.ours = TapPeer("client" if self.ours_is_client else "server", **ours_options)
        self.prot = ProtonPeer("server" if self.ours_is_client else "client", **prot_options)
        self.session: Session | None = None
        self.psession: Any = None

    def pump(self, rounds: int = 200) -> int:
        return pump(self.ours, self.prot, rounds)

    def open(self, **prot_open: Any) -> None:
        """The client opens; the server (either engine, auto-accepting) answers."""
        if self.ours_is_client:
            self.ours.open()
        else:
            self.prot.open(**prot_open)
        self.pump()

    def begin(self, **session_options: Any) -> tuple[Session, Any]:
        """The client begins a session; the server answers. Returns (our session, proton's session)."""
        if self.ours_is_client:
            session = self.ours.begin(**session_options)
            self.pump()
            psession = self.prot.session()
        else:
            psession = self.prot.begin_session()
            self.pump()
            [begun] = [e for e in self.ours.of_type(ev.SessionBegun) if e.session.remote_channel is not None]
            session = begun.session
        self.session, self.psession = session, psession
        return session, psession

    def our_link(self, name: str) -> Any:
        """Our link called ``name``, as the LinkAttached events reported it."""
        for event in self.ours.of_type(ev.LinkAttached):
            if event.link.name == name:
                return event.link
        raise LookupError(f"no link {name!r} attached; events {self.ours.events}")

    def our_sender(
        self,
        name: str,
        *,
        credit: int = 0,
        snd_settle_mode: int = SND_MIXED,
        rcv_settle_mode: int = RCV_FIRST,
    ) -> tuple[SenderLink, Any]:
        """A link from our sender to proton's receiver, attached by the client; proton grants ``credit``."""
        assert self.session is not None
        if self.ours_is_client:
            link = self.session.attach_sender(
                name,
                source=Source(address=None),
                target=Target(address=name),
                snd_settle_mode=snd_settle_mode,
                rcv_settle_mode=rcv_settle_mode,
            )
            self.pump()
            preceiver = self.prot.receiver(name)
            if credit:
                self.prot.flow(preceiver, credit)
        else:
            preceiver = self.prot.open_receiver(
                self.psession,
                name,
                name,
                snd_settle_mode=snd_settle_mode,
                rcv_settle_mode=rcv_settle_mode,
                credit=credit,
            )
            self.pump()
            link = self.our_link(name)
        self.pump()
        assert isinstance(link, SenderLink)
        assert link.is_open
        return link, preceiver

    def our_receiver(
        self,
        name: str,
        *,
        credit: int = 0,
        snd_settle_mode: int = SND_MIXED,
        rcv_settle_mode: int = RCV_FIRST,
    ) -> tuple[ReceiverLink, Any]:
        """A link from proton's sender to our receiver, attached by the client; we grant ``credit``."""
        assert self.session is not None
        if self.ours_is_client:
            link = self.session.attach_receiver(
                name,
                source=Source(address=name),
                target=Target(address=None),
                snd_settle_mode=snd_settle_mode,
                rcv_settle_mode=rcv_settle_mode,
            )
            self.pump()
            psender = self.prot.sender(name)
        else:
            psender = self.prot.open_sender(
                self.psession, name, name, snd_settle_mode=snd_settle_mode, rcv_settle_mode=rcv_settle_mode
            )
            self.pump()
            link = self.our_link(name)
        assert isinstance(link, ReceiverLink)
        if credit:
            link.grant_credit(credit)
        self.pump()
        assert link.is_open
        return link, psender


def connected(direction: str, **options: Any) -> Pair:
    """An open connection with one session."""
    pair = Pair(direction, **options)
    pair.open()
    pair.begin()
    return pair


def records(peer: ProtonPeer, kind: str) -> list[Any]:
    return [record for record in peer.recorder.records if record.type == kind]


def data_value(data: Data) -> Any:
    """The Python value held by a proton `Data` (None when empty)."""
    data.rewind()
    if not data.next():
        return None
    return data.get_object()


def sym_text(values: Any) -> list[str]:
    return [str(value) for value in values or ()]


def cond(name: str, description: str | None = None, info: dict[Any, Any] | None = None) -> Error:
    return Error(condition=symbol(name), description=description, info=info)


@pytest.fixture(params=DIRECTIONS)
def direction(request: pytest.FixtureRequest) -> Iterator[str]:
    yield request.param


# ----------------------------------------------------------------------------------------------------------------
# connection: open, close, SASL


def test_open_carries_every_field(direction: str) -> None:
    options = {
        "container_id": "ours-container",
        "max_frame_size": 8192,
        "channel_max": 7,
        "properties": {symbol("product"): "amqp-async", symbol("n"): 3},
        "offered_capabilities": ["ours-offered"],
        "desired_capabilities": ["ours-desired", "ours-desired-2"],
    }
    if direction == OURS_CLIENT:
        options["hostname"] = "broker.example"
    pair = Pair(direction, ours=options, prot={"container_id": "proton-container"})
    if direction == OURS_SERVER:
        prot_open = {
            "hostname": "broker.example",
            "max_frame_size": 16384,
            "channel_max": 5,
            "properties": {"client": "proton"},
            "offered_capabilities": ["proton-offered"],
            "desired_capabilities": ["proton-desired"],
        }
    else:
        pair.prot.transport.max_frame_size = 16384
        pair.prot.transport.channel_max = 5  # proton answers min(its own, ours)
        pair.prot.connection.properties = {symbol("client"): "proton"}
        pair.prot.connection.offered_capabilities = ["proton-offered"]
        pair.prot.connection.desired_capabilities = ["proton-desired"]
        prot_open = {}
    pair.open(**prot_open)
    conn = pair.prot.connection
    transport = pair.prot.transport

    # What proton saw of us.
    assert conn.remote_container == "ours-container"
    if direction == OURS_CLIENT:
        assert conn.remote_hostname == "broker.example"
    assert transport.remote_max_frame_size == 8192
    assert transport.remote_channel_max == 7
    assert dict(conn.remote_properties) == {"product": "amqp-async", "n": 3}
    assert sym_text(conn.remote_offered_capabilities) == ["ours-offered"]
    assert sym_text(conn.remote_desired_capabilities) == ["ours-desired", "ours-desired-2"]

    # What we saw of proton.
    [opened] = pair.ours.of_type(ev.ConnectionOpened)
    remote = opened.open
    assert remote.container_id == "proton-container"
    if direction == OURS_SERVER:
        assert remote.hostname == "broker.example"
    assert remote.max_frame_size == 16384
    assert remote.channel_max == 5
    assert remote.properties == {symbol("client"): "proton"}
    assert sym_text(remote.offered_capabilities) == ["proton-offered"]
    assert sym_text(remote.desired_capabilities) == ["proton-desired"]
    assert pair.ours.connection.remote_max_frame_size == 16384
    assert pair.ours.connection.is_open


@pytest.mark.parametrize("closer", ["ours", "proton"])
def test_clean_close(direction: str, closer: str) -> None:
    pair = Pair(direction)
    pair.open()
    if closer == "ours":
        pair.ours.connection.close()
    else:
        pair.prot.close()
    pair.pump()
    # One event either way, when the peer's close arrives; ``remote`` says who started the close.
    [closed] = pair.ours.of_type(ev.ConnectionClosed)
    assert closed.error is None
    assert closed.remote is (closer == "proton")
    assert pair.ours.connection.closed
    assert pair.prot.recorder.saw("connection_remote_close", condition=None)
    assert pair.prot.head_closed


@pytest.mark.parametrize("closer", ["ours", "proton"])
def test_close_with_error(direction: str, closer: str) -> None:
    pair = Pair(direction)
    pair.open()
    if closer == "ours":
        pair.ours.connection.close(cond("amqp:internal-error", "it broke", {symbol("where"): "here"}))
        pair.pump()
        remote = pair.prot.connection.remote_condition
        assert remote is not None
        assert remote.name == "amqp:internal-error"
        assert remote.description == "it broke"
        assert dict(remote.info) == {"where": "here"}
        # The event comes with proton's answer; it reports that we started the close, and our error.
        [closed] = pair.ours.of_type(ev.ConnectionClosed)
        assert closed.remote is False
        assert closed.error is not None
        assert closed.error.condition == "amqp:internal-error"
        assert closed.error.description == "it broke"
    else:
        pair.prot.close("amqp:connection:forced", "going away", {"why": "maintenance"})
        pair.pump()
        [closed] = pair.ours.of_type(ev.ConnectionClosed)
        assert closed.remote is True
        assert closed.error is not None
        assert closed.error.condition == "amqp:connection:forced"
        assert closed.error.description == "going away"
        assert {str(k): v for k, v in (closed.error.info or {}).items()} == {"why": "maintenance"}
        # We answered the close (§2.4.3), without an error.
        assert pair.prot.recorder.saw("connection_remote_close", condition=None)
    assert pair.ours.connection.closed


def test_sasl_anonymous(direction: str) -> None:
    if direction == OURS_CLIENT:
        pair = Pair(direction, ours={"sasl": SaslClient()}, prot={"sasl": True})
    else:
        pair = Pair(direction, ours={"sasl": SaslServer()}, prot={"sasl": True, "sasl_mechs": "ANONYMOUS"})
    pair.open()
    [authenticated] = pair.ours.of_type(ev.Authenticated)
    assert authenticated.mechanism == "ANONYMOUS"
    assert pair.ours.of_type(ev.ConnectionOpened)
    assert pair.ours.connection.is_open
    assert pair.prot.transport.authenticated
    assert pair.prot.sasl is not None
    assert pair.prot.sasl.outcome == SASL.OK
    assert pair.prot.connection.remote_container == pair.ours.connection.container_id
    # The connection works after SASL.
    pair.begin()
    assert pair.session is not None and pair.session.is_open


@pytest.mark.parametrize(("password", "ok"), [("pass", True), ("wrong", False)])
def test_sasl_plain_proton_client(password: str, ok: bool) -> None:
    store = InMemoryCredentialStore({"user": "pass"})
    pair = Pair(
        OURS_SERVER,
        ours={"sasl": SaslServer(["PLAIN"], store=store)},
        prot={"user": "user", "password": password},
    )
    pair.open()
    sasl = pair.prot.sasl
    assert sasl is not None
    if ok:
        [authenticated] = pair.ours.of_type(ev.Authenticated)
        assert authenticated.mechanism == "PLAIN"
        assert authenticated.identity == "user"
        assert pair.ours.connection.is_open
        assert pair.prot.transport.authenticated
        assert sasl.outcome == SASL.OK
        assert sasl.user == "user"
        return
    assert not pair.ours.of_type(ev.Authenticated)
    [closed] = pair.ours.of_type(ev.ConnectionClosed)
    assert closed.remote is False
    assert closed.sasl_code == 1
    assert closed.error is not None
    assert closed.error.condition == conditions.UNAUTHORIZED_ACCESS
    assert not pair.ours.of_type(ev.ConnectionOpened)
    assert sasl.outcome == SASL.AUTH
    assert not pair.prot.transport.authenticated
    pair.prot.feed(b"")  # we hang up after the outcome
    condition = pair.prot.transport.condition
    assert condition is not None and condition.name == "amqp:unauthorized-access"


# ----------------------------------------------------------------------------------------------------------------
# sessions


@pytest.mark.parametrize("ender", ["ours", "proton"])
def test_session_begin_end_with_error(direction: str, ender: str) -> None:
    pair = connected(direction)
    session, psession = pair.session, pair.psession
    assert session is not None
    assert session.is_open
    assert psession.state & proton.Endpoint.REMOTE_ACTIVE
    # A second session, begun by the other side, gets its own channel.
    if direction == OURS_CLIENT:
        second = pair.prot.begin_session()
    else:
        our_second = pair.ours.begin()
    pair.pump()
    if direction == OURS_CLIENT:
        our_second = [e.session for e in pair.ours.of_type(ev.SessionBegun)][-1]
        assert second.state & proton.Endpoint.REMOTE_ACTIVE
    assert our_second.is_open and our_second is not session
    assert our_second.channel != session.channel

    if ender == "ours":
        session.end(cond("amqp:resource-limit-exceeded", "too many sessions", {symbol("limit"): 1}))
        pair.pump()
        remote = psession.remote_condition
        assert remote is not None
        assert remote.name == "amqp:resource-limit-exceeded"
        assert remote.description == "too many sessions"
        assert dict(remote.info) == {"limit": 1}
        [ended] = pair.ours.of_type(ev.SessionEnded)  # with proton's answer: we started it, with our error
        assert ended.session is session and ended.remote is False
        assert ended.error is not None and ended.error.condition == "amqp:resource-limit-exceeded"
    else:
        pair.prot.end(psession, "amqp:internal-error", "session broke", {"k": "v"})
        pair.pump()
        [ended] = pair.ours.of_type(ev.SessionEnded)
        assert ended.session is session
        assert ended.remote is True
        assert ended.error is not None
        assert ended.error.condition == "amqp:internal-error"
        assert ended.error.description == "session broke"
        assert pair.prot.recorder.saw("session_remote_close", condition=None)  # our answer
    assert session.local_state.value == "closed" and session.remote_state.value == "closed"
    assert our_second.is_open  # the other session is untouched
    assert pair.ours.connection.is_open


# ----------------------------------------------------------------------------------------------------------------
# links: termini, attach/detach


def _full_source() -> Source:
    return Source(
        address="queue/a",
        durable=UNSETTLED_STATE,
        expiry_policy=LINK_DETACH,
        timeout=42,
        dynamic=False,
        distribution_mode=COPY,
        filter={symbol("apache.org:selector-filter:string"): "color = 'red'"},
        default_outcome=Released(),
        outcomes=(symbol("amqp:accepted:list"), symbol("amqp:released:list")),
        capabilities=(symbol("queue"), symbol("shared")),
    )


def _full_target() -> Target:
    return Target(
        address="topic/b",
        durable=UNSETTLED_STATE,
        expiry_policy=symbol("never"),
        timeout=7,
        dynamic=False,
        capabilities=(symbol("topic"),),
    )


@pytest.mark.parametrize("role", ["sender", "receiver"])
def test_terminus_fields_carried(direction: str, role: str) -> None:
    """Our attach carries every source and target field; proton reads them and copies them into its answer."""
    pair = connected(direction)
    assert pair.session is not None
    source, target = _full_source(), _full_target()
    if role == "sender":
        link: Any = pair.session.attach_sender("full", source=source, target=target)
    else:
        link = pair.session.attach_receiver("full", source=source, target=target)
    pair.pump()
    plink = pair.prot.link("full")
    psrc, ptgt = plink.remote_source, plink.remote_target
    assert psrc.type == Terminus.SOURCE
    assert psrc.address == "queue/a"
    assert psrc.durability == Terminus.DELIVERIES  # unsettled-state (2)
    assert psrc.expiry_policy == Terminus.EXPIRE_WITH_LINK
    assert psrc.timeout == 42
    assert psrc.dynamic is False
    assert psrc.distribution_mode == Terminus.DIST_MODE_COPY
    assert data_value(psrc.filter) == {symbol("apache.org:selector-filter:string"): "color = 'red'"}
    assert sym_text(data_value(psrc.outcomes)) == ["amqp:accepted:list", "amqp:released:list"]
    assert sym_text(data_value(psrc.capabilities)) == ["queue", "shared"]
    assert ptgt.type == Terminus.TARGET
    assert ptgt.address == "topic/b"
    assert ptgt.durability == Terminus.DELIVERIES
    assert ptgt.expiry_policy == Terminus.EXPIRE_NEVER
    assert ptgt.timeout == 7
    assert sym_text(data_value(ptgt.capabilities)) == ["topic"]
    # Proton's API has no default-outcome: check it on the wire instead.
    [attach] = [f.body for f in pair.ours.frames() if isinstance(f.body, Attach) and f.body.name == "full"]
    assert attach.source.default_outcome == Released()
    # Proton's answer (a copy of our termini) comes back intact.
    assert link.is_open
    back = link.remote_source
    assert back.address == "queue/a"
    assert back.durable == UNSETTLED_STATE
    assert back.expiry_policy == LINK_DETACH
    assert back.timeout == 42
    assert back.distribution_mode == COPY
    assert back.filter == {symbol("apache.org:selector-filter:string"): "color = 'red'"}
    assert sym_text(back.outcomes) == ["amqp:accepted:list", "amqp:released:list"]
    assert sym_text(back.capabilities) == ["queue", "shared"]
    assert link.remote_target.address == "topic/b"
    assert link.remote_target.timeout == 7


def test_dynamic_terminus(direction: str) -> None:
    """A dynamic source (receiver) and dynamic target (sender) with node properties: proton sees the request and
    answers with the address it made up."""
    pair = connected(direction)
    assert pair.session is not None
    node_properties = {symbol("lifetime-policy"): DeleteOnClose()}
    receiver = pair.session.attach_receiver(
        "dyn-r", source=Source(address=None, dynamic=True, dynamic_node_properties=node_properties), target=Target()
    )
    sender = pair.session.attach_sender(
        "dyn-s",
        source=Source(),
        target=Target(address=None, dynamic=True, dynamic_node_properties={symbol("x-opt"): "y"}),
    )
    pair.pump()
    prcv_src = pair.prot.link("dyn-r").remote_source
    assert prcv_src.dynamic is True
    assert prcv_src.address is None
    assert symbol("lifetime-policy") in data_value(prcv_src.properties)
    psnd_tgt = pair.prot.link("dyn-s").remote_target
    assert psnd_tgt.dynamic is True
    assert data_value(psnd_tgt.properties) == {symbol("x-opt"): "y"}
    assert receiver.remote_source.dynamic is True
    assert receiver.remote_source.address.startswith("dynamic-")
    assert sender.remote_target.dynamic is True
    assert sender.remote_target.address.startswith("dynamic-")


@pytest.mark.parametrize("detacher", ["ours", "proton"])
@pytest.mark.parametrize("closed", [True, False])
def test_detach_with_error(direction: str, detacher: str, closed: bool) -> None:
    pair = connected(direction)
    link, plink = pair.our_sender("d1", credit=1)
    if detacher == "ours":
        link.detach(closed=closed, error=cond("amqp:link:detach-forced", "admin", {symbol("by"): "op"}))
        pair.pump()
        kind = "link_remote_close" if closed else "link_remote_detach"
        assert pair.prot.recorder.saw(kind, name="d1", condition="amqp:link:detach-forced")
        remote = plink.remote_condition
        assert remote.description == "admin"
        assert dict(remote.info) == {"by": "op"}
        [detached] = pair.ours.of_type(ev.LinkDetached)  # with proton's answer: we started it, with our error
        assert detached.link is link
        assert detached.remote is False and detached.closed is closed
        assert detached.error is not None and detached.error.condition == conditions.LINK_DETACH_FORCED
    else:
        if closed:
            pair.prot.close_link(plink, "amqp:link:stolen", "another took it", {"who": "x"})
        else:
            pair.prot.detach(plink, "amqp:link:stolen", "another took it", {"who": "x"})
        pair.pump()
        [detached] = pair.ours.of_type(ev.LinkDetached)
        assert detached.link is link
        assert detached.remote is True
        assert detached.closed is closed
        assert detached.error is not None
        assert detached.error.condition == conditions.LINK_STOLEN
        assert detached.error.description == "another took it"
        assert pair.prot.recorder.saw("link_remote_close" if closed else "link_remote_detach", name="d1")
    assert link.local_state.value == "closed" and link.remote_state.value == "closed"
    assert pair.session is not None and pair.session.is_open


# ----------------------------------------------------------------------------------------------------------------
# credit, drain, transfers


def test_our_sender_proton_receiver(direction: str) -> None:
    pair = connected(direction)
    link, preceiver = pair.our_sender("s", credit=3)
    assert link.credit == 3
    for index in range(3):
        link.send(b"payload-%d" % index, tag=b"t%d" % index)
    assert link.credit == 0
    pair.pump()
    got = pair.prot.received("s")
    assert [(g.tag, g.data, g.settled) for g in got] == [(b"t%d" % i, b"payload-%d" % i, False) for i in range(3)]
    assert preceiver.credit == 0


def test_proton_sender_our_receiver(direction: str) -> None:
    pair = connected(direction)
    link, psender = pair.our_receiver("r", credit=2)
    assert psender.credit == 2
    for index in range(3):
        pair.prot.send(psender, b"m%d" % index, b"tag-%d" % index)
    pair.pump()
    # Credit 2: only two arrive; the third waits in proton.
    assert [(d.tag, d.payload) for d in pair.ours.received] == [(b"tag-0", b"m0"), (b"tag-1", b"m1")]
    assert link.credit == 0
    link.grant_credit(1)
    pair.pump()
    assert [d.payload for d in pair.ours.received] == [b"m0", b"m1", b"m2"]


def test_our_receiver_drains_proton_sender(direction: str) -> None:
    pair = connected(direction)
    link, psender = pair.our_receiver("r", credit=0)
    pair.prot.send(psender, b"queued", b"q1")
    link.grant_credit(5, drain=True)
    pair.pump()
    assert [d.payload for d in pair.ours.received] == [b"queued"]
    flows = [e for e in pair.ours.of_type(ev.FlowReceived) if e.link is link]
    assert flows and flows[-1].drained is True
    assert [e.drained for e in flows].count(True) == 1
    assert link.credit == 0
    assert link.drain is False
    assert link.delivery_count == 5  # one transfer, four given back
    assert psender.credit == 0


def test_proton_receiver_drains_our_sender(direction: str) -> None:
    pair = connected(direction)
    link, preceiver = pair.our_sender("s", credit=0)
    pair.prot.drain(preceiver, 4)
    pair.pump()
    assert link.drain is True
    assert link.credit == 4
    assert preceiver.draining()
    link.send(b"one", tag=b"1")
    link.drained()
    pair.pump()
    assert link.credit == 0
    assert [g.data for g in pair.prot.received("s")] == [b"one"]
    assert preceiver.credit == 0
    assert not preceiver.draining()
    assert preceiver.drained() == 3


@pytest.mark.parametrize("sent", [0, 2], ids=["credit-left", "credit-used"])
def test_drained_twice_writes_one_answer_as_protons_sender_while_credit_is_left(direction: str, sent: int) -> None:
    """A drain of 2 credits, ``sent`` of them used by transfers, then drained() called twice (as for two flows of
    one read): proton's sender (pn_link_drained) writes one flow while credit is left to give back, none once the
    transfers used it, and never a second. Ours writes one in both cases, never a second: a drain whose credit the
    transfers used is answered with credit 0 (rhea's receiver waits for that flow; a deliberate difference)."""
    pair = connected(direction, prot={"auto_drain": False})
    receiver, psender = pair.our_receiver("r", credit=0)
    receiver.grant_credit(2, drain=True)
    pair.pump()
    for index in range(sent):
        pair.prot.send(psender, b"m%d" % index, b"t%d" % index)
    pair.pump()
    before = len([e for e in pair.ours.of_type(ev.FlowReceived) if e.link is receiver])
    psender.drained()
    psender.drained()
    pair.pump()
    protons = len([e for e in pair.ours.of_type(ev.FlowReceived) if e.link is receiver]) - before

    sender, preceiver = pair.our_sender("s", credit=0)
    pair.prot.drain(preceiver, 2)
    pair.pump()
    for index in range(sent):
        sender.send(b"m%d" % index, tag=b"t%d" % index)
    pair.pump()
    mark = len(pair.ours.wire)
    sender.drained()
    sender.drained()
    pair.pump()
    ours = len([f for f in frames_only(bytes(pair.ours.wire[mark:])) if isinstance(f.body, Flow)])
    assert (ours, protons) == (1, 0 if sent else 1)
    assert receiver.delivery_count == sender.delivery_count == 2 and not preceiver.draining()


@pytest.mark.parametrize("gathered", [False, True], ids=["bytes", "gathered"])
def test_large_message_our_sender(direction: str, gathered: bool) -> None:
    """1 MiB through proton's max-frame-size 4096 and an incoming window of 4 frames: the transfer has to wait for
    proton's flows. Gathered: the payload given in parts (as a message's sections and its uncopied body), whose
    boundaries fall inside frames."""
    payload = os.urandom(1 << 20)
    parts = (payload[:100], payload[100:-37], payload[-37:])
    prot_options: dict[str, Any] = {"max_frame_size": 4096, "session_capacity": 4 * 4096}
    pair = Pair(direction, prot=prot_options)
    pair.open(max_frame_size=4096)
    if direction == OURS_CLIENT:
        pair.begin()
    else:
        pair.psession = pair.prot.begin_session(incoming_capacity=4 * 4096)
        pair.pump()
        pair.session = pair.ours.of_type(ev.SessionBegun)[0].session
    assert pair.ours.connection.remote_max_frame_size == 4096
    assert pair.session is not None
    assert pair.session.remote_begin is not None
    assert pair.session.remote_begin.incoming_window <= 4
    link, _preceiver = pair.our_sender("big", credit=1)
    link.send(Gathered(parts) if gathered else payload, tag=b"big")
    assert pair.session.outgoing_backlog > 0  # waiting for the window
    pair.pump(rounds=2000)
    [got] = pair.prot.received("big")
    assert got.tag == b"big"
    assert got.data == payload
    frames = [f for f in pair.ours.frames() if f.payload]
    assert len(frames) >= (1 << 20) // 4096
    assert max(8 + len(f.payload) for f in frames) <= 4096
    assert pair.session.outgoing_backlog == 0


def test_large_message_proton_sender(direction: str) -> None:
    """1 MiB from proton through our max-frame-size 4096 and our incoming window of 4 frames."""
    payload = os.urandom(1 << 20)
    pair = Pair(direction, ours={"max_frame_size": 4096, "incoming_window": 4})
    pair.open()
    pair.begin()
    assert pair.prot.transport.remote_max_frame_size == 4096
    link, psender = pair.our_receiver("big", credit=1)
    pair.prot.send(psender, payload, b"big")
    pair.pump(rounds=5000)
    [delivery] = pair.ours.received
    assert delivery.tag == b"big"
    assert delivery.payload == payload
    assert link.credit == 0


@pytest.mark.parametrize("window", [1, 2, 3])
def test_small_incoming_window_keeps_flowing(direction: str, window: int) -> None:
    """Our session's incoming window of 1-3 frames: proton must wait for our flows, and they must come (the
    window is replenished, §2.5.6), so all ten messages arrive."""
    pair = Pair(direction, ours={"incoming_window": window})
    pair.open()
    pair.begin()
    assert pair.session is not None
    _link, psender = pair.our_receiver("w", credit=10)
    for index in range(10):
        pair.prot.send(psender, b"m%d" % index, b"t%d" % index)
    pair.pump()
    assert [d.payload for d in pair.ours.received] == [b"m%d" % i for i in range(10)]
    assert not pair.ours.of_type(ev.SessionEnded)


_OUTCOME_CASES: list[tuple[str, Any]] = [
    ("accepted", Accepted()),
    ("rejected", Rejected(error=cond("amqp:precondition-failed", "bad message", {symbol("field"): "ttl"}))),
    ("released", Released()),
    (
        "modified",
        Modified(delivery_failed=True, undeliverable_here=True, message_annotations={symbol("x-opt-hop"): 3}),
    ),
    ("received", Received(section_number=2, section_offset=ulong(17))),
]


@pytest.mark.parametrize(("name", "state"), _OUTCOME_CASES, ids=[case[0] for case in _OUTCOME_CASES])
def test_our_outcome_seen_by_proton(direction: str, name: str, state: Any) -> None:
    pair = connected(direction)
    link, psender = pair.our_receiver("r", credit=1)
    sent = pair.prot.send(psender, b"body", b"t")
    pair.pump()
    [delivery] = pair.ours.received
    terminal = name != "received"
    link.settle(delivery, state, settled=terminal)
    pair.pump()
    assert sent.remote_state == getattr(Disposition, name.upper())
    assert sent.settled is terminal  # the remote (our) settlement
    remote = sent.remote
    if name == "rejected":
        assert remote.condition is not None
        assert remote.condition.name == "amqp:precondition-failed"
        assert remote.condition.description == "bad message"
        assert dict(remote.condition.info) == {"field": "ttl"}
    elif name == "modified":
        assert remote.failed is True
        assert remote.undeliverable is True
        assert dict(remote.annotations) == {symbol("x-opt-hop"): 3}
    elif name == "received":
        assert remote.section_number == 2
        assert remote.section_offset == 17


@pytest.mark.parametrize(("name", "state"), _OUTCOME_CASES, ids=[case[0] for case in _OUTCOME_CASES])
def test_proton_outcome_seen_by_us(direction: str, name: str, state: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    pair = connected(direction)
    link, _preceiver = pair.our_sender("s", credit=1)
    delivery = link.send(b"body", tag=b"t")
    pair.pump()
    # Which way proton's disposition is read: the hand parser for the outcomes without fields, the decoder else.
    parsed: list[Any] = []

    def spy(data: bytes, position: int, end: int) -> Any:
        parsed.append(parse_disposition(data, position, end))
        return parsed[-1]

    monkeypatch.setattr(connection_module, "parse_disposition", spy)
    [incoming] = pair.prot.received("s")
    terminal = name != "received"
    fields: dict[str, Any] = {}
    if name == "rejected":
        fields = {"condition": "amqp:precondition-failed", "description": "bad message", "info": {"field": "ttl"}}
    elif name == "modified":
        fields = {"delivery_failed": True, "undeliverable_here": True, "annotations": {proton.symbol("x-opt-hop"): 3}}
    elif name == "received":
        fields = {"section_number": 2, "section_offset": 17}
    pair.prot.disposition(incoming.delivery, name, settle=terminal, **fields)
    pair.pump()
    updates = [e for e in pair.ours.of_type(ev.DeliveriesUpdated) if delivery in e.deliveries]
    assert len(updates) == 1
    assert updates[0].settled is terminal
    got = delivery.remote_state
    assert type(got) is type(state)
    if name == "rejected":
        assert got.error.condition == "amqp:precondition-failed"
        assert got.error.description == "bad message"
        assert {str(k): v for k, v in got.error.info.items()} == {"field": "ttl"}
    else:
        assert got == state
    assert delivery.remote_settled is terminal
    assert pair.session is not None
    assert pair.session.unsettled_outgoing == (0 if terminal else 1)
    fast = name in ("accepted", "released")
    assert [value is not None for value in parsed] == [fast]


def test_presettled_our_sender(direction: str) -> None:
    """snd-settle-mode settled (at most once): proton sees settled transfers and writes no disposition."""
    pair = connected(direction)
    link, preceiver = pair.our_sender("s", credit=3, snd_settle_mode=SND_SETTLED)
    assert preceiver.remote_snd_settle_mode == SND_SETTLED
    deliveries = [link.send(b"m%d" % i) for i in range(3)]
    assert all(d.settled for d in deliveries)
    pair.pump()
    got = pair.prot.received("s")
    assert [(g.data, g.settled) for g in got] == [(b"m0", True), (b"m1", True), (b"m2", True)]
    for incoming in got:
        pair.prot.settle(incoming.delivery, "accepted")
    pair.pump()
    assert not pair.ours.of_type(ev.DeliveriesUpdated)
    assert pair.session is not None and pair.session.unsettled_outgoing == 0


def test_presettled_proton_sender(direction: str) -> None:
    pair = connected(direction)
    link, _psender = pair.our_receiver("r", credit=3, snd_settle_mode=SND_SETTLED)
    assert link.remote_snd_settle_mode == SND_SETTLED
    for index in range(3):
        pair.prot.send(_psender, b"m%d" % index, b"t%d" % index, settled=True)
    pair.pump()
    assert [(d.payload, d.remote_settled) for d in pair.ours.received] == [(b"m0", True), (b"m1", True), (b"m2", True)]
    for delivery in pair.ours.received:
        link.settle(delivery, Accepted())
    mark = len(pair.ours.wire)
    pair.pump()
    assert not [f for f in frames_only(bytes(pair.ours.wire[mark:])) if isinstance(f.body, DispositionFrame)]
    assert pair.session is not None and pair.session.unsettled_incoming == 0


def test_rcv_settle_second_our_sender(direction: str) -> None:
    """Receiver settles second: proton's receiver gives an unsettled outcome, our sender settles, proton's receiver
    sees the settlement and settles in turn."""
    pair = connected(direction)
    link, preceiver = pair.our_sender("s", credit=1, snd_settle_mode=SND_UNSETTLED, rcv_settle_mode=RCV_SECOND)
    assert preceiver.remote_rcv_settle_mode == RCV_SECOND
    delivery = link.send(b"twice", tag=b"t")
    pair.pump()
    [incoming] = pair.prot.received("s")
    pair.prot.disposition(incoming.delivery, "accepted", settle=False)
    pair.pump()
    [update] = pair.ours.of_type(ev.DeliveriesUpdated)
    assert update.settled is False
    assert isinstance(update.state, Accepted)
    assert delivery.settled is True  # we settled once the outcome arrived
    assert incoming.delivery.settled is True  # proton saw our settlement
    pair.prot.settle(incoming.delivery)
    pair.pump()
    assert pair.session is not None and pair.session.unsettled_outgoing == 0


def test_rcv_settle_second_our_receiver(direction: str) -> None:
    pair = connected(direction)
    link, psender = pair.our_receiver("r", credit=1, rcv_settle_mode=RCV_SECOND)
    assert link.remote_rcv_settle_mode == RCV_SECOND
    sent = pair.prot.send(psender, b"twice", b"t")
    pair.pump()
    [delivery] = pair.ours.received
    link.settle(delivery, Accepted(), settled=False)
    pair.pump()
    assert sent.remote_state == Disposition.ACCEPTED
    assert sent.settled is False  # we have not settled yet
    pair.prot.settle(sent)
    pair.pump()
    [update] = pair.ours.of_type(ev.DeliveriesUpdated)
    assert update.settled is True
    assert delivery.remote_settled is True
    link.settle(delivery)  # the peer settled first: nothing more need be said
    pair.pump()
    assert pair.session is not None and pair.session.unsettled_incoming == 0


# ----------------------------------------------------------------------------------------------------------------
# idle timeout


def _empty_frames(data: bytes) -> int:
    return sum(1 for f in frames_only(data) if f.body is None)


def test_idle_timeout_heartbeats_both_ways(direction: str) -> None:
    """Ours 2 s, proton 4 s (advertised as 2000 ms): with both ticking on a fake clock, heartbeats keep the
    connection up for a minute although no other frame moves."""
    pair = Pair(direction, ours={"idle_timeout": 2.0}, prot={"idle_timeout": 4.0})
    pair.open(idle_timeout=4.0)
    assert pair.prot.transport.remote_idle_timeout == 2.0  # ours, as advertised
    assert pair.ours.connection.remote_idle_timeout == 2.0  # proton advertises half its 4 s
    mark = len(pair.ours.wire)
    proton_frames = pair.prot.transport.frames_output
    now = 0.0
    while now < 60.0:
        now += 0.25
        pair.ours.now = now
        pair.ours.connection.tick(now)
        pair.prot.tick(now)
        pair.pump()
    assert pair.ours.connection.is_open
    assert not pair.ours.of_type(ev.ConnectionClosed)
    assert not pair.prot.recorder.saw("transport_error")
    assert pair.prot.connection.state & proton.Endpoint.REMOTE_ACTIVE
    # We write at half proton's 2 s; proton writes at half our 2 s.
    ours_heartbeats = _empty_frames(bytes(pair.ours.wire[mark:]))
    assert 50 <= ours_heartbeats <= 70
    assert pair.prot.transport.frames_output - proton_frames >= 50


def test_our_idle_timeout_expires(direction: str) -> None:
    """Proton goes silent (no ticks): our engine closes with amqp:resource-limit-exceeded after 2 s."""
    pair = Pair(direction, ours={"idle_timeout": 2.0})
    pair.open()
    pair.ours.now = 1.0
    assert pair.ours.connection.tick(1.0) == 2.0
    assert not pair.ours.of_type(ev.ConnectionClosed)
    pair.ours.now = 2.5
    assert pair.ours.connection.tick(2.5) is None
    pair.ours.process()
    [closed] = pair.ours.of_type(ev.ConnectionClosed)
    assert closed.remote is False
    assert closed.error is not None
    assert closed.error.condition == conditions.RESOURCE_LIMIT_EXCEEDED
    pair.pump()
    assert pair.prot.recorder.saw("connection_remote_close", condition="amqp:resource-limit-exceeded")


def test_proton_idle_timeout_expires(direction: str) -> None:
    """We do not tick (no heartbeats): proton closes with amqp:resource-limit-exceeded; we see its close."""
    pair = Pair(direction, prot={"idle_timeout": 2.0})
    pair.open(idle_timeout=2.0)
    pair.prot.tick(0.0)
    pair.prot.tick(1.0)
    pair.pump()
    pair.prot.tick(3.0)
    pair.pump()
    [closed] = pair.ours.of_type(ev.ConnectionClosed)
    assert closed.remote is True
    assert closed.error is not None
    assert closed.error.condition == conditions.RESOURCE_LIMIT_EXCEEDED


# ----------------------------------------------------------------------------------------------------------------
# volume


def test_thousand_messages_our_sender(direction: str) -> None:
    pair = connected(direction, prot={"auto_outcome": "accepted"})
    link, preceiver = pair.our_sender("bulk", credit=100)
    expected = [(b"%08d" % i, b"message %d" % i * 3) for i in range(1000)]
    sent = []
    pending = list(expected)
    while pending:
        while pending and link.credit > 0:
            tag, body = pending.pop(0)
            sent.append(link.send(body, tag=tag))
        pair.pump()
        if preceiver.credit == 0 and pending:
            pair.prot.flow(preceiver, 100)
            pair.pump()
    got = pair.prot.all_received
    assert [(g.tag, g.data) for g in got] == expected
    assert all(d.remote_settled and isinstance(d.remote_state, Accepted) for d in sent)
    assert pair.session is not None and pair.session.unsettled_outgoing == 0


def test_thousand_messages_proton_sender(direction: str) -> None:
    pair = connected(direction, prot={"auto_settle_outgoing": True})
    link, psender = pair.our_receiver("bulk", credit=100)
    expected = [(b"%08d" % i, b"message %d" % i * 3) for i in range(1000)]
    sent = [pair.prot.send(psender, body, tag) for tag, body in expected]
    seen: list[tuple[bytes, bytes]] = []
    for _ in range(100):
        pair.pump()
        for delivery in pair.ours.received[len(seen) :]:
            seen.append((delivery.tag, delivery.payload))
            link.settle(delivery, Accepted())
        if len(seen) == len(expected):
            break
        if link.credit < 50:
            link.grant_credit(100)
    pair.pump()
    assert seen == expected
    assert all(d.remote_state == Disposition.ACCEPTED for d in sent)
    assert pair.session is not None and pair.session.unsettled_incoming == 0


def test_flow_frames_are_well_formed(direction: str) -> None:
    """Every flow we wrote during a credit exchange decodes as a Flow with the link's handle (a sanity check on
    the hand-written fast paths)."""
    pair = connected(direction)
    link, _psender = pair.our_receiver("r", credit=10)
    link.grant_credit(20)
    pair.pump()
    flows = [f.body for f in pair.ours.frames() if isinstance(f.body, Flow)]
    assert flows
    assert all(flow.handle == link.handle for flow in flows if flow.handle is not None)
    assert flows[-1].link_credit == 20
