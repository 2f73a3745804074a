"""A disposition's range (§2.7.6: first..last, across the wrap) against the deliveries we sent and track.

The deliveries a range settles or updates are exactly those unsettled ones whose id it covers: checked under
Hypothesis against that rule taken literally, for ranges anywhere in the 32-bit space (before, across, after and
around the ids in use, across the wrap) and any subset settled before. And the work a range costs is bounded by
what it can match, not by what the peer says nor by how many deliveries are unsettled: a 25-byte frame whose range
is 2**30 wide and misses every one of 5,000 unsettled deliveries looks at none of them (before, it went through all
of them: a consumer holding 50,000 unsettled deliveries stalled the embedded broker ~3 ms per such frame, every other
connection with it).
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from amqp_async.codec.delivery_states import Accepted
from amqp_async.codec.performatives import Disposition
from amqp_async.protocol import events as ev
from amqp_async.protocol.serial import MASK

try:
    from engine_peer import CLIENT, SERVER, EnginePeer, pump
    from frames import frame
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.engine_peer import CLIENT, SERVER, EnginePeer, pump
    from tests.frames import frame


def sent(count: int) -> tuple[EnginePeer, Any, list[Any]]:
    """A client that sent ``count`` unsettled deliveries (ids 0..count-1) to a server that has not settled any."""
    client = EnginePeer(CLIENT)
    server = EnginePeer(SERVER, auto_accept=True, auto_credit=count)
    client.open()
    session = client.begin()
    sender = client.sender(session, "out", "q")
    pump(client, server)
    deliveries = [sender.send(b"\x00\x53\x77\xa1\x01x") for _ in range(count)]
    pump(client, server)
    return client, session, deliveries


def dispose(client: EnginePeer, first: int, last: int, *, settled: bool) -> set[int]:
    """Feed the client a receiver's disposition; the ids it reported updated."""
    client.events.clear()
    client.feed(frame(Disposition(role=True, first=first, last=last, settled=settled, state=Accepted())))
    return {
        delivery.delivery_id
        for event in client.events
        if isinstance(event, ev.DeliveriesUpdated)
        for delivery in event.deliveries
    }


@settings(max_examples=300, deadline=None)
@given(
    count=st.integers(1, 60),
    settled_before=st.sets(st.integers(0, 59)),
    start=st.one_of(st.integers(0, 80), st.integers(MASK - 80, MASK), st.integers(0, MASK)),
    span=st.one_of(st.integers(0, 100), st.integers(0, 2**31 - 1)),
)
def test_a_range_updates_exactly_the_unsettled_deliveries_it_covers(
    count: int, settled_before: set[int], start: int, span: int
) -> None:
    client, session, _deliveries = sent(count)
    settled_before = {delivery_id for delivery_id in settled_before if delivery_id < count}
    for delivery_id in sorted(settled_before):
        dispose(client, delivery_id, delivery_id, settled=True)
    last = (start + span) & MASK
    expected = {
        delivery_id
        for delivery_id in range(count)
        if delivery_id not in settled_before and ((delivery_id - start) & MASK) <= span
    }
    assert dispose(client, start, last, settled=True) == expected
    assert set(session._outgoing_unsettled) == set(range(count)) - settled_before - expected


class CountingMap(dict):  # type: ignore[type-arg]
    """The session's map of unsettled deliveries, counting the entries looked at."""

    looked_at = 0

    def __iter__(self) -> Any:
        for key in super().__iter__():
            CountingMap.looked_at += 1
            yield key

    def get(self, key: Any, default: Any = None) -> Any:
        CountingMap.looked_at += 1
        return super().get(key, default)


def test_a_wide_range_that_misses_them_all_looks_at_none() -> None:
    client, session, _deliveries = sent(5000)
    session._outgoing_unsettled = CountingMap(session._outgoing_unsettled)
    CountingMap.looked_at = 0
    for first in (10**9, 2**31 + 5000, MASK - 2**30):
        assert dispose(client, first, (first + 2**30) & MASK, settled=False) == set()
    assert CountingMap.looked_at <= 3  # the oldest one, read to find the window (once per frame)
    assert dispose(client, 4990, 4990 + 2**30, settled=True) == set(range(4990, 5000))
    assert CountingMap.looked_at <= 3 + 1 + 10
    assert len(session._outgoing_unsettled) == 4990
