"""A Hypothesis state machine over a pair of our engines (client and server), pumped in memory.

Rules open sessions, attach links in both directions, grant credit, send, settle, drain, detach, end, close, and
move the bytes in pieces cut at random offsets. After every step the invariants are checked:

- no transfer beyond credit: a receiver never sees more deliveries than the credit it granted, and a sender never
  believes it has more credit than is left of what was granted;
- windows are never negative (``remote_incoming_window`` and ``incoming_window`` of every session);
- every unsettled delivery is accounted for: each session's unsettled maps hold exactly the deliveries sent (or
  received) and not settled yet, on links that are not gone;
- what arrives is what was sent, in order;
- no unexpected exception, and no error in any event other than those the test itself passed to close, end or
  detach (an engine that detected a protocol violation in its own peer would report one).

A second test runs one fixed scenario with whole writes and with writes cut at random offsets, and compares the
events (and delivery payloads) both ways.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from amqp_async.codec.delivery_states import Accepted, Modified, Received, Rejected, Released
from amqp_async.codec.performatives import RCV_FIRST, RCV_SECOND, SND_MIXED, SND_SETTLED, SND_UNSETTLED, Error
from amqp_async.codec.terminus import Source, Target
from amqp_async.protocol import events as ev
from amqp_async.protocol.delivery import Delivery
from amqp_async.protocol.endpoint import EndpointState
from amqp_async.protocol.errors import LocalProtocolError, NoCreditError
from amqp_async.protocol.link import Link, ReceiverLink, SenderLink
from amqp_async.protocol.session import Session
from amqp_async.types import symbol

try:
    from engine_peer import CLIENT, SERVER, EnginePeer, pump
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.engine_peer import CLIENT, SERVER, EnginePeer, pump

ACTIVE = EndpointState.ACTIVE

#: Delivery ids and delivery counts to start from: zero, just below the 2**32 wrap, or anywhere.
SEQUENCE_NUMBERS = st.one_of(st.just(0), st.integers((1 << 32) - 6, (1 << 32) - 1), st.integers(0, (1 << 32) - 1))

#: Conditions the test itself puts in close, end and detach; any other error in an event is a finding.
TEST_CONDITION = symbol("test:requested")

OUTCOMES = [
    Accepted(),
    Rejected(error=Error(condition=symbol("test:bad-message"), description="no")),
    Released(),
    Modified(delivery_failed=True, undeliverable_here=False, message_annotations={symbol("x-opt-n"): 1}),
]


# --- moving bytes ---------------------------------------------------------------------------------------------


def pieces(data: bytes, rnd: random.Random) -> list[bytes]:
    """``data`` cut at up to 8 random offsets (never an empty piece: ``b""`` means the transport ended)."""
    if len(data) < 2:
        return [data] if data else []
    cuts = sorted(rnd.sample(range(1, len(data)), min(len(data) - 1, rnd.randint(0, 8))))
    bounds = [0, *cuts, len(data)]
    return [data[start:end] for start, end in itertools.pairwise(bounds)]


def chunked_pump(a: EnginePeer, b: EnginePeer, rnd: random.Random, rounds: int = 500) -> None:
    """Like ``pump``, but each write reaches the other side in pieces cut at random offsets."""
    for _ in range(rounds):
        out_a = a.take()
        out_b = b.take()
        if not out_a and not out_b:
            return
        for piece in pieces(out_a, rnd):
            b.feed(piece)
        for piece in pieces(out_b, rnd):
            a.feed(piece)
    raise AssertionError(f"still talking after {rounds} rounds")


# --- the state machine ----------------------------------------------------------------------------------------


class LinkPair:
    """One link seen from both ends."""

    def __init__(self, sender: SenderLink, receiver: ReceiverLink, sender_peer: EnginePeer, receiver_peer: EnginePeer):
        self.sender = sender
        self.receiver = receiver
        self.sender_peer = sender_peer
        self.receiver_peer = receiver_peer
        #: the credit the receiver granted in all (the sum of every increase).
        self.granted = 0
        self.sent: list[Delivery] = []

    def received(self) -> list[Delivery]:
        return [d for d in self.receiver_peer.received if d.link is self.receiver]


def gone(link: Link) -> bool:
    """Both ends detached (or the session ended): the engine forgets the link and its unsettled deliveries."""
    return link.local_state is not ACTIVE and link.remote_state is not ACTIVE


def usable(session: Session) -> bool:
    return session.local_state is ACTIVE and session.remote_state is ACTIVE


class EnginePairMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.c = EnginePeer(CLIENT, container_id="client")
        self.s = EnginePeer(SERVER, container_id="server")
        self.sessions: list[tuple[Session, Session]] = []
        self.pairs: list[LinkPair] = []
        self.closed = False
        self.names = 0

    # --- setup ----------------------------------------------------------------------------------------------

    @initialize(
        client_window=st.integers(2, 8),
        server_window=st.integers(2, 8),
        client_frame=st.sampled_from([512, 700, 4096]),
        server_frame=st.sampled_from([512, 700, 4096]),
        modes=st.lists(
            st.tuples(
                st.sampled_from([SND_MIXED, SND_SETTLED, SND_UNSETTLED]), st.sampled_from([RCV_FIRST, RCV_SECOND])
            ),
            min_size=2,
            max_size=2,
        ),
    )
    def connect(
        self, client_window: int, server_window: int, client_frame: int, server_frame: int, modes: list[Any]
    ) -> None:
        """An open connection with one session and a link each way, so that every run has something to send."""
        self.c = EnginePeer(
            CLIENT, auto_accept=True, incoming_window=client_window, max_frame_size=client_frame, container_id="c"
        )
        self.s = EnginePeer(
            SERVER, auto_accept=True, incoming_window=server_window, max_frame_size=server_frame, container_id="s"
        )
        self.c.open()
        pump(self.c, self.s)
        assert self.c.connection.is_open and self.s.connection.is_open
        self.begin(True, random.Random(0), 0)
        session_pair = self.sessions[0]
        self._attach(session_pair, True, True, *modes[0], random.Random(1))
        self._attach(session_pair, True, False, *modes[1], random.Random(2))
        for pair in self.pairs:
            pair.receiver.grant_credit(3)
            pair.granted += 3
        pump(self.c, self.s)

    def peers(self, client_side: bool) -> tuple[EnginePeer, EnginePeer]:
        return (self.c, self.s) if client_side else (self.s, self.c)

    def live_sessions(self) -> list[tuple[Session, Session]]:
        return [pair for pair in self.sessions if usable(pair[0]) and usable(pair[1])]

    # --- rules ----------------------------------------------------------------------------------------------

    @rule(client_side=st.booleans(), rnd=st.randoms(use_true_random=False), first_ids=SEQUENCE_NUMBERS)
    def begin(self, client_side: bool, rnd: random.Random, first_ids: int) -> None:
        """One side begins a session, the other answers; its delivery ids start at ``first_ids`` (often near the
        2**32 wrap; set through an internal attribute, before any delivery)."""
        if self.closed or len(self.sessions) >= 4:
            return  # not applicable now: a no-op step rather than a rejected example
        starter, answerer = self.peers(client_side)
        session = starter.begin()
        chunked_pump(self.c, self.s, rnd)
        answer = answerer.of_type(ev.SessionBegun)[-1].session
        assert answer.is_open and session.is_open
        session._next_delivery_id = answer._next_delivery_id = first_ids
        self.sessions.append((session, answer) if client_side else (answer, session))

    @rule(
        data=st.data(),
        client_side=st.booleans(),
        client_sends=st.booleans(),
        snd_settle_mode=st.sampled_from([SND_MIXED, SND_SETTLED, SND_UNSETTLED]),
        rcv_settle_mode=st.sampled_from([RCV_FIRST, RCV_SECOND]),
        rnd=st.randoms(use_true_random=False),
        initial_count=SEQUENCE_NUMBERS,
    )
    def attach(
        self,
        data: st.DataObject,
        client_side: bool,
        client_sends: bool,
        snd_settle_mode: int,
        rcv_settle_mode: int,
        rnd: random.Random,
        initial_count: int,
    ) -> None:
        """One side attaches a sender or a receiver; the other answers (EnginePeer's auto_accept)."""
        if self.closed or not self.live_sessions() or len(self.pairs) >= 8:
            return  # not applicable now: a no-op step rather than a rejected example
        session_pair = data.draw(st.sampled_from(self.live_sessions()))
        self._attach(session_pair, client_side, client_sends, snd_settle_mode, rcv_settle_mode, rnd, initial_count)

    def _attach(
        self,
        session_pair: tuple[Session, Session],
        client_side: bool,
        client_sends: bool,
        snd_settle_mode: int,
        rcv_settle_mode: int,
        rnd: random.Random,
        initial_count: int = 0,
    ) -> None:
        """Attach a link; a sender that starts it begins its delivery-count at ``initial_count``."""
        client_session, server_session = session_pair
        starter, answerer = self.peers(client_side)
        session = client_session if client_side else server_session
        self.names += 1
        name = f"link-{self.names}"
        options: dict[str, Any] = {"snd_settle_mode": snd_settle_mode, "rcv_settle_mode": rcv_settle_mode}
        starter_sends = client_sends == client_side
        if starter_sends:
            link: Link = session.attach_sender(
                name,
                source=Source(address="here"),
                target=Target(address="q"),
                initial_delivery_count=initial_count,
                **options,
            )
        else:
            link = session.attach_receiver(name, source=Source(address="q"), target=Target(address="here"), **options)
        chunked_pump(self.c, self.s, rnd)
        answer = answerer.of_type(ev.LinkAttached)[-1].link
        assert answer.name == name and answer.is_open and link.is_open
        if starter_sends:
            assert isinstance(link, SenderLink) and isinstance(answer, ReceiverLink)
            self.pairs.append(LinkPair(link, answer, starter, answerer))
        else:
            assert isinstance(link, ReceiverLink) and isinstance(answer, SenderLink)
            self.pairs.append(LinkPair(answer, link, answerer, starter))

    @rule(
        data=st.data(),
        credit=st.integers(0, 6),
        drain=st.booleans(),
        then_pump=st.booleans(),
        rnd=st.randoms(use_true_random=False),
    )
    def grant(self, data: st.DataObject, credit: int, drain: bool, then_pump: bool, rnd: random.Random) -> None:
        """The receiver raises its credit by ``credit`` (never lowers it), possibly asking for a drain."""
        if self.closed or not any(p.receiver.local_state is ACTIVE for p in self.pairs):
            return  # not applicable now: a no-op step rather than a rejected example
        pair = data.draw(st.sampled_from([p for p in self.pairs if p.receiver.local_state is ACTIVE]))
        receiver = pair.receiver
        receiver.grant_credit(receiver.credit + credit, drain=drain)
        pair.granted += credit
        if then_pump:
            chunked_pump(self.c, self.s, rnd)

    @rule(
        data=st.data(),
        sizes=st.lists(st.one_of(st.integers(0, 100), st.integers(0, 2500)), min_size=1, max_size=5),
        settled=st.sampled_from([None, True, False]),
    )
    def send(self, data: st.DataObject, sizes: list[int], settled: bool | None) -> None:
        """The sender sends a few messages: each must go, or fail with NoCreditError (no credit) or
        LocalProtocolError (the link is not attached both ways)."""
        if self.closed or not self.pairs:
            return  # not applicable now: a no-op step rather than a rejected example
        pair = data.draw(st.sampled_from(self.pairs))
        sender = pair.sender
        mode = sender.snd_settle_mode
        if (settled is True and mode == SND_UNSETTLED) or (settled is False and mode == SND_SETTLED):
            settled = None
        for size in sizes:
            payload = bytes([len(pair.sent) % 256]) * size
            attached = sender.is_open and sender.session.local_state is ACTIVE
            if sender.credit <= 0:
                try:
                    sender.send(payload, settled=settled)
                except NoCreditError:
                    return
                raise AssertionError("send without credit did not raise NoCreditError")
            if not attached:
                try:
                    sender.send(payload, settled=settled)
                except LocalProtocolError as exc:
                    assert not isinstance(exc, NoCreditError)
                    return
                raise AssertionError("send on a detached link did not raise LocalProtocolError")
            credit = sender.credit
            delivery = sender.send(payload, settled=settled)
            assert sender.credit == credit - 1
            assert delivery.payload == payload
            pair.sent.append(delivery)

    @rule(
        data=st.data(),
        outcome=st.sampled_from([*OUTCOMES, None]),
        settled=st.booleans(),
        count=st.integers(1, 6),
        then_pump=st.booleans(),
        rnd=st.randoms(use_true_random=False),
    )
    def settle(
        self, data: st.DataObject, outcome: Any, settled: bool, count: int, then_pump: bool, rnd: random.Random
    ) -> None:
        """Receivers settle, or give an outcome to, up to ``count`` of the deliveries they hold, oldest first or
        at random (``None``: a received state, unsettled)."""
        if self.closed:
            return
        candidates = [(pair, d) for pair in self.pairs for d in pair.received() if not d.settled]
        if not candidates:
            return
        if data.draw(st.booleans(), label="at random"):
            candidates = data.draw(st.permutations(candidates))
        for pair, delivery in candidates[:count]:
            if outcome is None:
                pair.receiver.settle(
                    delivery, Received(section_number=0, section_offset=len(delivery.payload)), settled=False
                )
            else:
                pair.receiver.settle(delivery, outcome, settled=settled)
        if then_pump:
            chunked_pump(self.c, self.s, rnd)

    @rule(data=st.data())
    def drained(self, data: st.DataObject) -> None:
        """The sender answers a drain request: it gives back the credit it has not used."""
        if self.closed or not any(p.sender.drain for p in self.pairs):
            return  # not applicable now: a no-op step rather than a rejected example
        pair = data.draw(st.sampled_from([p for p in self.pairs if p.sender.drain]))
        pair.sender.drained()
        assert pair.sender.credit == 0

    @rule(
        data=st.data(), by_sender=st.booleans(), closed=st.booleans(), with_error=st.booleans(), dice=st.integers(0, 2)
    )
    def detach(self, data: st.DataObject, by_sender: bool, closed: bool, with_error: bool, dice: int) -> None:
        """One end detaches a link (one time in three)."""
        if self.closed or dice or not any(not gone(p.sender) for p in self.pairs):
            return  # not applicable now: a no-op step rather than a rejected example
        pair = data.draw(st.sampled_from([p for p in self.pairs if not gone(p.sender)]))
        link = pair.sender if by_sender else pair.receiver
        error = Error(condition=TEST_CONDITION, description="detach") if with_error else None
        link.detach(closed=closed, error=error)

    @rule(data=st.data(), client_side=st.booleans(), with_error=st.booleans(), dice=st.integers(0, 3))
    def end(self, data: st.DataObject, client_side: bool, with_error: bool, dice: int) -> None:
        """One side ends a session (one time in four)."""
        if self.closed or dice or not any(s[0].local_state is ACTIVE for s in self.sessions):
            return  # not applicable now: a no-op step rather than a rejected example
        client_session, server_session = data.draw(
            st.sampled_from([s for s in self.sessions if s[0].local_state is ACTIVE])
        )
        session = client_session if client_side else server_session
        session.end(Error(condition=TEST_CONDITION, description="end") if with_error else None)

    @rule(
        client_side=st.booleans(),
        with_error=st.booleans(),
        rnd=st.randoms(use_true_random=False),
        dice=st.integers(0, 3),
    )
    def close(self, client_side: bool, with_error: bool, rnd: random.Random, dice: int) -> None:
        """Close the connection (one time in four: a close ends the interesting part of a run)."""
        if self.closed or dice:
            return
        closer, other = self.peers(client_side)
        error = Error(condition=TEST_CONDITION, description="close") if with_error else None
        closer.connection.close(error)
        chunked_pump(self.c, self.s, rnd)
        self.closed = True
        assert self.c.connection.closed and self.s.connection.closed
        assert [e.remote for e in closer.of_type(ev.ConnectionClosed)] == [False]
        seen = other.of_type(ev.ConnectionClosed)
        assert [e.remote for e in seen] == [True] and seen[0].error == error

    @rule(rnd=st.randoms(use_true_random=False))
    def pump(self, rnd: random.Random) -> None:
        chunked_pump(self.c, self.s, rnd)

    # --- invariants -----------------------------------------------------------------------------------------

    @invariant()
    def no_transfer_beyond_credit(self) -> None:
        for pair in self.pairs:
            assert len(pair.sent) <= pair.granted, f"{pair.sender.name}: sent {len(pair.sent)} > granted"
            received = pair.received()
            assert len(received) <= pair.granted, f"{pair.receiver.name}: received {len(received)} > granted"
            assert pair.sender.credit <= pair.granted - len(pair.sent)
            assert pair.receiver.credit >= 0 and pair.sender.credit >= 0

    @invariant()
    def windows_never_negative(self) -> None:
        for peer in (self.c, self.s):
            for session in {*(pair[0] for pair in self.sessions), *(pair[1] for pair in self.sessions)}:
                if session.connection is not peer.connection:
                    continue
                assert session.remote_incoming_window >= 0, f"{peer.connection.role}: {session.remote_incoming_window}"
                assert session.incoming_window >= 0

    @invariant()
    def unsettled_deliveries_are_accounted_for(self) -> None:
        sessions = {*(pair[0] for pair in self.sessions), *(pair[1] for pair in self.sessions)}
        outgoing: dict[Session, int] = dict.fromkeys(sessions, 0)
        incoming: dict[Session, int] = dict.fromkeys(sessions, 0)
        for pair in self.pairs:
            if not gone(pair.sender):
                outgoing[pair.sender.session] += sum(1 for d in pair.sent if not d.settled)
            if not gone(pair.receiver):
                received = pair.received()
                incoming[pair.receiver.session] += sum(
                    1 for d in received if not d.settled and not d.remote_settled and not d.aborted
                )
                if pair.receiver._current is not None:  # a delivery whose frames are still arriving
                    incoming[pair.receiver.session] += 1
        for session in sessions:
            assert session.unsettled_outgoing == outgoing[session], (session.unsettled_outgoing, outgoing[session])
            assert session.unsettled_incoming == incoming[session], (session.unsettled_incoming, incoming[session])

    @invariant()
    def what_arrives_is_what_was_sent(self) -> None:
        for pair in self.pairs:
            received = [d.payload for d in pair.received() if not d.aborted]
            assert received == [d.payload for d in pair.sent[: len(received)]]

    @invariant()
    def no_unexpected_errors(self) -> None:
        for peer in (self.c, self.s):
            for event in peer.events:
                error = getattr(event, "error", None)
                assert error is None or error.condition == TEST_CONDITION, f"{peer.connection.role}: {event}"


EnginePairMachine.TestCase.settings = settings(
    max_examples=100,
    stateful_step_count=30,
    deadline=None,
    # One failure is enough, and it is reported as found: shrinking a 30-step run takes minutes. (To shrink one,
    # run this class with ``phases`` including ``Phase.shrink``.)
    report_multiple_bugs=False,
    phases=(Phase.explicit, Phase.reuse, Phase.generate),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestEnginePair = EnginePairMachine.TestCase


# --- one scenario, whole writes against cut writes -------------------------------------------------------------


def scenario(move: Callable[[EnginePeer, EnginePeer], None]) -> tuple[list[tuple[Any, ...]], dict[str, list[bytes]]]:
    """A conversation that touches every performative, with ``move`` carrying the bytes between the peers.
    Returns the events of both sides (normalised: no object identities; ``DeliveriesReceived`` dropped, as its
    batching follows the reads) and the payloads each side received, per link."""
    c = EnginePeer(CLIENT, auto_accept=True, auto_credit=7, incoming_window=3, max_frame_size=512)
    s = EnginePeer(SERVER, auto_accept=True, auto_credit=5, incoming_window=2, max_frame_size=600)
    c.open()
    move(c, s)
    first = c.begin()
    second = c.begin(incoming_window=5)
    move(c, s)
    sender = c.sender(first, "out", "q", rcv_settle_mode=RCV_SECOND)
    receiver = c.receiver(second, "in", "q", credit=0)
    presettled = c.sender(second, "fast", "q", snd_settle_mode=SND_SETTLED)
    move(c, s)
    server_sender = next(e.link for e in s.events if isinstance(e, ev.LinkAttached) and e.link.name == "in")
    server_receivers = {e.link.name: e.link for e in s.events if isinstance(e, ev.LinkAttached)}
    receiver.grant_credit(6)
    move(c, s)
    for index in range(5):
        sender.send(bytes([index]) * (index * 450))
        presettled.send(b"p%d" % index)
    for index in range(6):
        server_sender.send(bytes([65 + index]) * (index * 300 + 1))
    move(c, s)
    for delivery in list(s.received):
        if delivery.link is server_receivers["out"]:
            server_receivers["out"].settle(delivery, OUTCOMES[delivery.delivery_id % len(OUTCOMES)], settled=False)
    for delivery in c.received:
        receiver.settle(delivery, Accepted() if len(delivery.payload) % 2 else Released())
    move(c, s)
    receiver.grant_credit(4, drain=True)
    move(c, s)
    server_sender.send(b"last one")
    server_sender.drained()
    move(c, s)
    server_receivers["fast"].detach(error=Error(condition=TEST_CONDITION, description="enough"))
    move(c, s)
    first.end()
    move(c, s)
    c.connection.close()
    move(c, s)

    def normalise(peer: EnginePeer) -> list[tuple[Any, ...]]:
        out: list[tuple[Any, ...]] = []
        for event in peer.events:
            if isinstance(event, ev.DeliveriesReceived):
                continue
            if isinstance(event, ev.FlowReceived):
                out.append(("flow", event.link.name if event.link else None, event.drained))
            elif isinstance(event, ev.DeliveriesUpdated):
                ids = tuple(d.delivery_id for d in event.deliveries)
                out.append(("updated", ids, event.state, event.settled))
            elif isinstance(event, ev.LinkAttached | ev.LinkDetached):
                out.append(
                    (
                        type(event).__name__,
                        event.link.name,
                        getattr(event, "remote", None),
                        getattr(event, "error", None),
                    )
                )
            elif isinstance(event, ev.SessionBegun | ev.SessionEnded):
                out.append((type(event).__name__, event.session.channel, getattr(event, "remote", None)))
            else:
                out.append((repr(event),))
        return out

    payloads: dict[str, list[bytes]] = {}
    for peer in (c, s):
        for delivery in peer.received:  # per link: the order across links follows the reads
            payloads.setdefault(f"{peer.connection.role}:{delivery.link.name}", []).append(delivery.payload)
    return [*normalise(c), ("--",), *normalise(s)], payloads


def test_scenario_sanity() -> None:
    events, received = scenario(pump)
    assert {name: len(payloads) for name, payloads in received.items()} == {
        "client:in": 7,
        "server:out": 5,
        "server:fast": 5,
    }
    assert ("flow", "in", True) in events  # the drain completed
    assert not [e for e in events if "Error(" in repr(e) and "symbol('test:" not in repr(e)]


@settings(max_examples=40, deadline=None)
@given(rnd=st.randoms(use_true_random=False))
def test_same_events_whatever_the_read_boundaries(rnd: random.Random) -> None:
    whole = scenario(pump)
    cut = scenario(lambda a, b: chunked_pump(a, b, rnd))
    assert cut[1] == whole[1]
    assert cut[0] == whole[0]
