"""The receive hot path (amqp_async/protocol/transfer_intake.py) against the general input path it stands in for.

The fast path takes ordinary transfer frames in one loop and must leave the engine exactly as the general path
(framing, connection, field parser, session, link) would: same deliveries, same counters, same output, same errors.
Each test feeds the same bytes to two client engines set up alike, one with the fast path and one without it, and
compares everything they show; hand-made frames cover the encodings the fast path reads and those it must leave
to the general path (a delivery in several frames, an aborted one, one with a state, a wide descriptor, an
extended header, no credit, a full window, an unknown handle, a frame cut short, any split of the bytes). The
fast path's being taken at all is checked too, so that the comparison is not between two general paths.
python-qpid-proton's sender goes through it in tests/test_engine_proton.py and every client test.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import amqp_async.protocol.connection as connection_module
from amqp_async.protocol.link import ReceiverLink
from amqp_async.protocol.transfer_intake import take_transfers

try:
    from engine_peer import EnginePeer, pump
    from frames import raw_frame, uint
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.engine_peer import EnginePeer, pump
    from tests.frames import raw_frame, uint

# --- field encodings ---------------------------------------------------------------------------------------------


def transfer(
    *,
    handle: int = 0,
    handle_encoding: str = "uint0",
    delivery_id: int | None = 0,
    id_encoding: str = "uint",
    tag: bytes | None = b"t",
    message_format: int | None = 0,
    settled: bool | None = None,
    more: bool | None = None,
    state: bytes | None = None,
    aborted: bool = False,
    count: int = 4,
    payload: bytes = b"\x00\x53\x77\xa1\x05hello",
    channel: int = 0,
    descriptor: bytes = b"\x00\x53\x14",
) -> bytes:
    """A transfer frame with its fields in a list8, each in the encoding asked for; ``count`` fields (more when a
    later field is set)."""
    fields = [uint(handle, handle_encoding)]
    fields.append(b"\x40" if delivery_id is None else uint(delivery_id, id_encoding))
    fields.append(b"\x40" if tag is None else bytes((0xA0, len(tag))) + tag)
    fields.append(b"\x40" if message_format is None else uint(message_format, "uint0"))
    fields.append({None: b"\x40", True: b"\x41", False: b"\x42"}[settled])
    fields.append({None: b"\x40", True: b"\x41", False: b"\x42"}[more])
    fields.append(b"\x40")  # rcv-settle-mode
    fields.append(b"\x40" if state is None else state)
    fields.append(b"\x40")  # resume
    fields.append(b"\x41" if aborted else b"\x40")
    if aborted:
        count = 10
    elif state is not None:
        count = max(count, 8)
    body = b"".join(fields[:count])
    return raw_frame(descriptor + bytes((0xC0, len(body) + 1, count)) + body + payload, channel=channel)


# --- two engines, one input --------------------------------------------------------------------------------------


@contextmanager
def general_path_only() -> Iterator[None]:
    """The engine without the fast path: every frame through the general input path."""
    original = connection_module.take_transfers
    connection_module.take_transfers = lambda connection: 0
    try:
        yield
    finally:
        connection_module.take_transfers = original


def receiving_client(credit: int, window: int, streaming: bool = False) -> tuple[EnginePeer, ReceiverLink]:
    """A client engine whose receiver ``r`` is attached to our own server engine (session channel 0, handle 0)
    with ``credit``, its session's incoming window ``window``; then raw frames are fed to the client alone. A
    ``streaming`` receiver hands a delivery of several frames over at its first (as the stream receiver and the
    broker's links do)."""
    server = EnginePeer("server", auto_accept=True)
    client = EnginePeer("client")
    client.connection.open()
    session = client.connection.begin_session(incoming_window=window)
    link = session.attach_receiver("r", source="q")
    link.streaming = streaming
    pump(client, server)
    if credit:
        link.grant_credit(credit)
    client.take()
    return client, link


def snapshot(client: EnginePeer, link: ReceiverLink) -> dict[str, Any]:
    """Everything the fast path could change, as comparable values."""
    connection = client.connection
    session = link.session
    return {
        "events": [type(event).__name__ for event in client.connection.next_events()],
        "deliveries": [
            (d.delivery_id, d.tag, d.message_format, bytes(d.payload), d.remote_settled, d.aborted, d.remote_state)
            for d in link.incoming
        ],
        "link": (link.link_credit, link.delivery_count, link.drain, link.local_state, link._current is not None),
        "session": (
            session.next_incoming_id,
            session.incoming_window,
            session.remote_outgoing_window,
            sorted(session._incoming_unsettled),
            session.local_state,
        ),
        "connection": (connection.frames_received, connection.local_state, connection.remote_state),
        "output": client.take(),
    }


def run(data: bytes, splits: list[int], credit: int, window: int, streaming: bool = False) -> dict[str, Any]:
    client, link = receiving_client(credit, window, streaming)
    previous = 0
    for split in [*sorted(set(splits)), len(data)]:
        if previous < split <= len(data):
            client.connection.receive_data(data[previous:split], 0.0)
            previous = split
    return snapshot(client, link)


def both_paths(
    data: bytes, splits: Sequence[int] = (), credit: int = 100, window: int = 2048, streaming: bool = False
) -> dict[str, Any]:
    """The snapshot with the fast path, checked equal to the general path's."""
    fast = run(data, list(splits), credit, window, streaming)
    with general_path_only():
        general = run(data, list(splits), credit, window, streaming)
    assert fast == general
    return fast


@pytest.fixture
def taken() -> Iterator[list[int]]:
    """What each call of the fast path took."""
    counts: list[int] = []
    original = connection_module.take_transfers

    def counting(connection: Any) -> int:
        count = original(connection)
        counts.append(count)
        return count

    connection_module.take_transfers = counting
    try:
        yield counts
    finally:
        connection_module.take_transfers = original


# --- the frames the fast path takes ---------------------------------------------------------------------------


@pytest.mark.parametrize("handle_encoding", ["uint0", "smalluint", "uint"])
@pytest.mark.parametrize("id_encoding", ["uint0", "smalluint", "uint"])
@pytest.mark.parametrize("count", [3, 4, 5, 6])
def test_the_common_layouts_are_taken_as_the_general_path_takes_them(
    taken: list[int], handle_encoding: str, id_encoding: str, count: int
) -> None:
    frames = b"".join(
        transfer(
            delivery_id=n,
            handle_encoding=handle_encoding,
            id_encoding=id_encoding,
            tag=bytes([n]) * n,
            count=count,
            settled=n % 2 == 0 if count > 4 else None,
            more=False if count > 5 else None,
            payload=b"payload %d" % n,
        )
        for n in range(5)
    )
    result = both_paths(frames)
    assert [d[0] for d in result["deliveries"]] == list(range(5))
    assert [d[3] for d in result["deliveries"]] == [b"payload %d" % n for n in range(5)]
    assert sum(taken) == 5  # every frame by the fast path


def test_settled_deliveries_are_not_tracked_and_unsettled_ones_are(taken: list[int]) -> None:
    frames = transfer(delivery_id=0, settled=True, count=5) + transfer(delivery_id=1, settled=False, count=5)
    result = both_paths(frames)
    assert result["session"][3] == [1]
    assert [d[4] for d in result["deliveries"]] == [True, False]
    assert sum(taken) == 2


def test_message_formats_and_tags(taken: list[int]) -> None:
    frames = (
        transfer(delivery_id=0, message_format=None, tag=b"")
        + transfer(delivery_id=1, message_format=7, tag=b"x" * 32)
        + transfer(delivery_id=2, message_format=0x1234567, tag=b"\x00\xff")
    )
    result = both_paths(frames)
    assert [(d[1], d[2]) for d in result["deliveries"]] == [(b"", 0), (b"x" * 32, 7), (b"\x00\xff", 0x1234567)]
    assert sum(taken) == 3


def test_the_window_half_used_queues_the_session_flow_as_the_general_path_does(taken: list[int]) -> None:
    frames = b"".join(transfer(delivery_id=n) for n in range(8))
    result = both_paths(frames, window=8)
    assert result["output"]  # the session's flow, written when half the window was used
    assert len(result["deliveries"]) == 8
    assert sum(taken) == 8


def test_a_drain_completes_when_the_credit_is_used_up() -> None:
    client, link = receiving_client(0, 2048)
    link.grant_credit(2, drain=True)
    client.take()
    client.connection.receive_data(transfer(delivery_id=0) + transfer(delivery_id=1), 0.0)
    assert link.link_credit == 0 and not link.drain
    with general_path_only():
        client, link = receiving_client(0, 2048)
        link.grant_credit(2, drain=True)
        client.take()
        client.connection.receive_data(transfer(delivery_id=0) + transfer(delivery_id=1), 0.0)
        assert link.link_credit == 0 and not link.drain


# --- the frames it leaves to the general path ------------------------------------------------------------------

LEFT_TO_THE_GENERAL_PATH = {
    "more": transfer(delivery_id=0, more=True, count=6) + transfer(delivery_id=None, tag=None, count=6, more=False),
    "aborted": transfer(delivery_id=0, more=True, count=6) + transfer(delivery_id=None, tag=None, aborted=True),
    "state": transfer(delivery_id=0, state=b"\x00\x53\x24\x45"),
    "wide descriptor": transfer(delivery_id=0, descriptor=b"\x00\x80\x00\x00\x00\x00\x00\x00\x00\x14"),
    "no delivery-id": transfer(delivery_id=None),
    "no tag": transfer(tag=None),
    "unknown handle": transfer(handle=9),
    "unknown channel": transfer(channel=5),
    "tag not bin8": transfer(tag=b"x")[: -len(b"\x00\x53\x77\xa1\x05hello") - 3]
    + b"\xa1\x01x\x43"
    + b"\x00\x53\x77\xa1\x05hello",
    "list size lies": transfer(delivery_id=0)[:12] + b"\x7f" + transfer(delivery_id=0)[13:],
    "settled not a boolean": transfer(delivery_id=0, count=5)[: -len(b"\x00\x53\x77\xa1\x05hello") - 1]
    + b"\x43"
    + b"\x00\x53\x77\xa1\x05hello",
    "extended header": raw_frame(transfer(delivery_id=0)[8:], doff=3, extended=b"\x00\x00\x00\x00"),
    "cut short": transfer(delivery_id=0)[:16],
}


@pytest.mark.parametrize("case", sorted(LEFT_TO_THE_GENERAL_PATH))
def test_what_the_fast_path_does_not_take_ends_as_the_general_path_ends_it(case: str) -> None:
    ordinary = transfer(delivery_id=100)
    both_paths(ordinary + LEFT_TO_THE_GENERAL_PATH[case] + transfer(delivery_id=101))


def test_no_credit_and_a_full_window_are_the_general_paths_errors() -> None:
    frames = b"".join(transfer(delivery_id=n) for n in range(4))
    no_credit = both_paths(frames, credit=2)
    assert "LinkDetached" in no_credit["events"]  # amqp:link:transfer-limit-exceeded, from the general path
    full = both_paths(frames, window=2)
    assert "SessionEnded" in full["events"]  # amqp:session:window-violation


def test_a_frame_split_anywhere_is_taken_whole(taken: list[int]) -> None:
    frames = b"".join(transfer(delivery_id=n, payload=bytes(40)) for n in range(3))
    for split in range(1, len(frames)):
        result = both_paths(frames, [split])
        assert [d[0] for d in result["deliveries"]] == [0, 1, 2]
    assert sum(taken) > 0


def links_on_two_sessions(credit: int, window: int) -> tuple[EnginePeer, list[ReceiverLink]]:
    """A client engine with receivers on two sessions: handles 0 and 1 on channel 0, handle 0 on channel 1, each
    with ``credit``, each session's incoming window ``window``."""
    server = EnginePeer("server", auto_accept=True)
    client = EnginePeer("client")
    client.connection.open()
    first = client.connection.begin_session(incoming_window=window)
    second = client.connection.begin_session(incoming_window=window)
    links = [first.attach_receiver("a", source="q"), first.attach_receiver("b", source="q")]
    links.append(second.attach_receiver("c", source="q"))
    pump(client, server)
    for link in links:
        link.grant_credit(credit)
    client.take()
    return client, links


def run_on_links(data: bytes, credit: int, window: int) -> list[Any]:
    client, links = links_on_two_sessions(credit, window)
    client.connection.receive_data(data, 0.0)
    return [snapshot(client, link) for link in links]


@pytest.mark.parametrize(("credit", "window"), [(100, 2048), (3, 2048), (100, 5), (2, 4)])
def test_frames_of_several_links_and_sessions_interleaved_are_counted_on_each(
    taken: list[int], credit: int, window: int
) -> None:
    """The fast path checks a link once for a run of its frames: a frame of another link (of the same session,
    whose window they share, or of another) between them is counted against its own link, and the run's link is
    checked again after it; credit and window run out where the general path finds them out."""
    order = [(0, 0), (0, 1), (0, 0), (1, 0), (0, 0), (0, 1), (0, 1), (1, 0), (0, 0), (0, 0)]
    # delivery-ids follow one another on each session (§2.6.12), whatever the link
    ids = [sum(1 for earlier, _ in order[:n] if earlier == channel) for n, (channel, _) in enumerate(order)]
    data = b"".join(
        transfer(channel=channel, handle=handle, delivery_id=ids[n]) for n, (channel, handle) in enumerate(order)
    )
    fast = run_on_links(data, credit, window)
    with general_path_only():
        general = run_on_links(data, credit, window)
    assert fast == general
    assert sum(taken) > 0
    if credit >= len(order) and window >= len(order):
        assert sum(taken) == len(order)
        assert [len(snapshot["deliveries"]) for snapshot in fast] == [5, 3, 2]


@settings(deadline=None)
@given(
    initial=st.one_of(st.just(-1), st.integers(1, 40)),  # -1: a window the layer above manages (manual_window)
    held=st.one_of(st.just(0), st.integers(0, 30)),
    window=st.integers(0, 60),
    count=st.integers(1, 130),
)
@example(initial=40, held=0, window=10, count=5)  # below its low mark before the run: the first frame reopens it
@example(initial=40, held=3, window=18, count=100)  # reopened several times within the run
def test_a_run_of_frames_is_counted_as_that_many_single_frames(
    initial: int, held: int, window: int, count: int
) -> None:
    """The fast path counts a run of frames against the session's window in one call: the window, the ids and the
    session flow it queues are what the rule applied frame by frame leaves (§2.5.6: each frame uses a unit of the
    window; the window reopens to its size, less the frames held unread, whenever it is down to half of that)."""
    _client, link = receiving_client(credit=0, window=100)
    session = link.session
    session.initial_incoming_window = initial
    session.held_frames = held
    session.incoming_window = window
    session.next_incoming_id = 0xFFFFFFF0  # the ids wrap within a run
    session.remote_outgoing_window = 1000
    session._session_flow_pending = False
    session._count_incoming_frames(count)

    expected_window, reopened = window, False
    for _ in range(count):  # the rule, one frame at a time
        expected_window -= 1
        if expected_window <= (initial >> 1) - held:
            expected_window, reopened = initial - held, True
    assert session.incoming_window == expected_window
    assert session.next_incoming_id == (0xFFFFFFF0 + count) & 0xFFFFFFFF
    assert session.remote_outgoing_window == 1000 - count
    assert session._session_flow_pending is reopened


# --- any mixture, any split --------------------------------------------------------------------------------------

_frame = st.one_of(
    st.builds(
        lambda n, handle_encoding, id_encoding, count, settled, tag: transfer(
            delivery_id=n,
            handle_encoding=handle_encoding,
            id_encoding=id_encoding,
            count=count,
            settled=settled if count > 4 else None,
            tag=tag,
        ),
        st.integers(0, 300),
        st.sampled_from(["uint0", "smalluint", "uint"]),
        st.sampled_from(["uint0", "smalluint", "uint"]),
        st.integers(3, 6),
        st.sampled_from([None, True, False]),
        st.binary(max_size=33),
    ),
    st.sampled_from(sorted(LEFT_TO_THE_GENERAL_PATH.values())),
    st.just(raw_frame(b"")),  # an empty frame (a heartbeat)
)


_REUSED_ID = transfer(delivery_id=0, count=5, settled=False)
_REUSED_ID_SETTLED = transfer(delivery_id=0, count=5, settled=True)


@settings(suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(
    frames=st.lists(_frame, max_size=12),
    splits=st.lists(st.integers(1, 2000), max_size=4),
    credit=st.integers(0, 12),
    window=st.integers(1, 16),
    streaming=st.booleans(),
)
# A peer that reuses the delivery-id of one it has not settled, then settles the next it sends with that id (found
# by this test: the fast path kept the first one tracked, the general path dropped it).
@example(frames=[_REUSED_ID, _REUSED_ID_SETTLED], splits=[], credit=7, window=7, streaming=False)
def test_any_mixture_of_frames_split_anywhere_leaves_the_engine_as_the_general_path_does(
    frames: list[bytes], splits: list[int], credit: int, window: int, streaming: bool
) -> None:
    both_paths(b"".join(frames), splits, credit, window, streaming)


def test_a_streaming_links_whole_deliveries_are_taken_and_the_rest_streamed(taken: list[int]) -> None:
    """On a streaming link (our broker's, a stream receiver's) a delivery of one frame is whole at once, as on any
    link: the fast path takes it (it left every frame of such a link to the general path, which read each one a
    second time: a fifth of the broker's instructions per message). A delivery of several frames goes to the general
    path, which hands it over at its first frame; the frames after it are taken again."""
    frames = [
        transfer(delivery_id=0, tag=b"a"),
        transfer(delivery_id=1, tag=b"b"),
        transfer(delivery_id=2, tag=b"c", more=True, count=6, payload=b"\x00\x53\x75\xa0\x02he"),
        transfer(delivery_id=None, tag=None, more=False, count=6, payload=b"llo"),
        transfer(delivery_id=3, tag=b"d"),
        transfer(delivery_id=4, tag=b"e"),
    ]
    result = both_paths(b"".join(frames), streaming=True)
    assert [delivery[0] for delivery in result["deliveries"]] == [0, 1, 2, 3, 4]
    # The whole ones before and after the streamed one were taken by the fast path (once with it, once without).
    assert sum(taken) == 4, taken


def test_the_fast_path_takes_nothing_before_the_peers_open() -> None:
    client = EnginePeer("client")
    client.connection.open()
    client.connection.receive_data(b"AMQP\x00\x01\x00\x00", 0.0)
    assert take_transfers(client.connection) == 0


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("ids", [(0, 0), (5, 3), (0, 2)])
def test_a_delivery_id_that_is_not_the_sessions_next_ends_the_session(fast: bool, ids: tuple[int, int]) -> None:
    """§2.6.12: a delivery-id names an unsettled delivery of the session, and ids follow one another (Qpid Proton:
    "sequencing error, expected delivery-id"). A peer that reused one got the message handed over twice and its
    dispositions sent twice; ids out of order were taken as they came. Now the session ends, amqp:invalid-field,
    the first delivery handed over and the second not."""
    client, link = receiving_client(credit=10, window=100)
    data = transfer(delivery_id=ids[0], tag=b"a") + transfer(delivery_id=ids[1], tag=b"b")
    if fast:
        client.connection.receive_data(data, 0.0)
    else:
        with general_path_only():
            client.connection.receive_data(data, 0.0)
    events = list(client.connection.next_events())
    ended = [event for event in events if type(event).__name__ == "SessionEnded"]
    assert len(ended) == 1 and ended[0].error.condition == "amqp:invalid-field", events
    assert "delivery-id" in ended[0].error.description
    assert [delivery.tag for delivery in link.incoming] == [b"a"]
    assert client.connection.is_open  # the session's error, not the connection's
