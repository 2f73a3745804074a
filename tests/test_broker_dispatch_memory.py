"""A queue's dispatch remembers what each consumer does not want (amqp_async/broker/_nodes.py).

Before, a consumer whose selector matched none of a deep backlog had the queue ask its selector about every queued
message at each dispatch: at every message that arrived and every flow of that consumer. With 60,000 messages
queued, a producer's confirmed send to that queue went from 0.15 ms to 159 ms (a probe run by hand,
``/tmp/probe/selector_backlog.py``, not committed); now 0.10 ms.

- Exactness: under Hypothesis, a queue with the memory and one with the dispatch before it (kept here as the
  reference) are given the same operations (messages put, credit, releases, undeliverable-here, acceptances,
  consumers that come, go, or fail a send, browsers); every message goes to the same consumer in the same order,
  and the queues hold the same messages in the same order.
- Cost: the selector is asked about each message once per consumer, however many dispatches follow; a release
  (a message back at the head) costs one question, not a new pass over the backlog.
- End to end through the embedded broker: a receiver whose selector matches nothing of 20,000 queued messages
  does not slow the producers of that queue.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import amqp_async
from amqp_async.broker import BrokerThread
from amqp_async.broker._nodes import Consumer, ConsumerFailed, Entry, Queue


class BodyIs:
    """A selector (the broker calls ``matches(message)``) taking the messages whose int body is ``remainder``
    modulo ``modulus``; it counts the questions."""

    def __init__(self, modulus: int, remainder: int) -> None:
        self.modulus = modulus
        self.remainder = remainder
        self.asked = 0

    def matches(self, message: Any) -> bool:
        self.asked += 1
        return bool(message.body % self.modulus == self.remainder)


class CountingConsumer(Consumer):
    """A consumer that counts the times the queue asks whether it wants a message."""

    __slots__ = ("asked",)

    def __init__(self, *arguments: Any, **options: Any) -> None:
        super().__init__(*arguments, **options)
        self.asked = 0

    def wants(self, entry: Entry) -> bool:
        self.asked += 1
        return super().wants(entry)


def payload(body: int) -> bytes:
    return amqp_async.Message(body=body).encode()


def reference_dispatch(queue: Queue) -> None:
    """The dispatch before the memory, word for word (expiry left out: these messages do not expire)."""
    consumers = queue.consumers
    if not consumers or not queue.entries:
        return
    for browser in [consumer for consumer in consumers if consumer.browse]:
        for entry in list(queue.entries):
            if browser.credit() <= 0:
                break
            if browser.wants(entry):
                try:
                    browser.send(entry)
                except ConsumerFailed:
                    break
                browser.last_seen = entry.sequence
    competing = [consumer for consumer in consumers if not consumer.browse]
    if not competing:
        return
    index = 0
    entries = queue.entries
    while index < len(entries) and any(consumer.credit() > 0 for consumer in competing):
        entry = entries[index]
        chosen = None
        count = len(competing)
        # round-robin in the order they subscribed, from the one after the last served
        start = next((at for at, consumer in enumerate(competing) if consumer.key >= queue.next_key), 0)
        for step in range(count):
            consumer = competing[(start + step) % count]
            if consumer.credit() > 0 and consumer.wants(entry):
                chosen = consumer
                queue.next_key = consumer.key + 1
                break
        if chosen is None:
            index += 1
            continue
        del entries[index]
        try:
            token = chosen.send(entry)
        except ConsumerFailed:
            entries.insert(index, entry)
            competing.remove(chosen)
            if not competing:
                return
            continue
        if token is not None:
            chosen.unsettled[token] = entry
        else:
            queue.release(entry)


class ReferenceQueue(Queue):
    """Every consumer looked at, at every dispatch: credit, and what it wants."""

    next_key = 0

    def dispatch(self) -> None:
        reference_dispatch(self)

    def credited(self, consumer: Consumer) -> None:
        self.dispatch()


class Side:
    """One queue and its consumers, driven by the operations; ``log`` is what each consumer was sent."""

    def __init__(self, queue: Queue) -> None:
        self.queue = queue
        self.consumers: list[Consumer] = []
        self.credits: list[int] = []
        self.failing: list[bool] = []
        self.log: list[tuple[int, int]] = []
        self.selectors: list[BodyIs | None] = []
        self._tokens = 0

    def subscribe(self, modulus: int, remainder: int, browse: bool) -> None:
        index = len(self.consumers)
        selector = BodyIs(modulus, remainder) if modulus > 1 else None

        def send(entry: Entry) -> int:
            if self.failing[index]:
                self.failing[index] = False
                raise ConsumerFailed("its connection failed")
            self.credits[index] -= 1
            self.log.append((index, entry.message.body))
            self._tokens += 1
            return self._tokens

        credit = lambda: self.credits[index]  # noqa: E731 - the consumer's credit, read at each call
        consumer = CountingConsumer(send, credit, selector=selector, browse=browse)
        self.consumers.append(consumer)
        self.credits.append(0)
        self.failing.append(False)
        self.selectors.append(selector)
        self.queue.subscribe(consumer)

    def unsettled(self, index: int, pick: int) -> list[Entry]:
        consumer = self.consumers[index]
        if consumer.browse or not consumer.unsettled:
            return []
        token = sorted(consumer.unsettled)[pick % len(consumer.unsettled)]
        return [consumer.unsettled.pop(token)]

    def apply(self, operation: tuple[Any, ...]) -> None:
        kind, *arguments = operation
        queue = self.queue
        live = [index for index, consumer in enumerate(self.consumers) if consumer in queue.consumers]
        if kind == "put":
            queue.put(Entry(payload(arguments[0])))
        elif kind == "subscribe":
            modulus, remainder, browse = arguments
            self.subscribe(modulus, remainder, bool(browse))
        elif not live:
            return
        elif kind == "credit":
            index = live[arguments[0] % len(live)]
            self.credits[index] += arguments[1]
            queue.credited(self.consumers[index])  # a flow of its link
        elif kind == "fail":
            self.failing[live[arguments[0] % len(live)]] = True
        elif kind in ("release", "undeliverable", "accept"):
            index = live[arguments[0] % len(live)]
            taken = self.unsettled(index, arguments[1])
            if kind == "undeliverable":
                for entry in taken:
                    self.consumers[index].refuse(entry)
            if kind == "accept":
                for entry in taken:
                    queue.release(entry)
            elif taken:
                queue.put_back(taken)
        elif kind == "unsubscribe":
            queue.unsubscribe(self.consumers[live[arguments[0] % len(live)]])

    def held(self) -> list[int]:
        return [entry.message.body for entry in self.queue.entries]


small = st.integers(min_value=0, max_value=3)
#: Two or three consumers first (browsers seldom), then few bodies, selectors that mostly split them in two, and
#: little credit at a time: the states where what a consumer knows matters (runs passed over, consumers out of
#: credit mid-walk, messages put back) come within a few steps.
consumers = st.lists(
    st.tuples(st.just("subscribe"), st.sampled_from([1, 2, 2, 3]), st.integers(0, 1), st.sampled_from([0, 0, 0, 1])),
    min_size=2,
    max_size=3,
)
operations = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.integers(min_value=0, max_value=5)),
        st.tuples(st.just("credit"), small, st.integers(min_value=1, max_value=2)),
        st.tuples(st.sampled_from(["release", "undeliverable", "accept"]), small, small),
        st.tuples(st.just("fail"), small),
        st.tuples(st.just("unsubscribe"), small),
        st.tuples(st.just("subscribe"), st.sampled_from([1, 2, 3]), st.integers(0, 1), st.sampled_from([0, 1])),
    ),
    max_size=30,
)


#: Walks Hypothesis finds seldom or not at all unaided, each the witness of a wrong way to remember: a message
#: released by one consumer returns inside the run another consumer passed over while it was away (it must be
#: asked about again: a new place); a consumer out of credit among messages put back at the head has not looked at
#: the rest of them (what it learned does not join what it knew before); a consumer out of credit mid-walk has not
#: looked at what the others passed over after it.
RELEASED_INTO_A_KNOWN_RUN = [
    ("subscribe", 2, 0, False),
    ("subscribe", 2, 0, False),
    ("put", 1),
    ("put", 2),
    ("put", 3),
    ("credit", 0, 1),
    ("credit", 1, 5),
    ("release", 0, 0),
]
STOPPED_AT_THE_HEAD = [
    ("subscribe", 1, 0, False),
    ("subscribe", 2, 0, False),
    ("put", 1),
    ("put", 3),
    ("put", 2),
    ("credit", 1, 1),
    ("put", 4),
    ("put", 6),
    ("credit", 0, 4),
    ("release", 0, 3),
    ("release", 0, 2),
    ("credit", 1, 1),
    ("credit", 1, 1),
]
STOPPED_MID_WALK = [
    ("subscribe", 2, 1, False),
    ("subscribe", 2, 0, False),
    ("put", 2),
    ("put", 4),
    ("credit", 0, 5),
    ("credit", 1, 1),
    ("credit", 1, 1),
]


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example([], RELEASED_INTO_A_KNOWN_RUN)
@example([], STOPPED_AT_THE_HEAD)
@example([], STOPPED_MID_WALK)
@given(consumers, operations)
def test_the_same_messages_go_to_the_same_consumers_in_the_same_order(
    subscriptions: list[tuple[Any, ...]], steps: list[tuple[Any, ...]]
) -> None:
    ours, reference = Side(Queue("q")), Side(ReferenceQueue("q"))
    for step in [*subscriptions, *steps]:
        ours.apply(step)
        reference.apply(step)
        assert ours.log == reference.log, step
        assert ours.held() == reference.held(), step
    for side in (ours, reference):
        for index in range(len(side.consumers)):
            side.credits[index] += 100
            side.queue.credited(side.consumers[index])
    assert ours.log == reference.log
    assert ours.held() == reference.held()


def test_a_selector_is_asked_about_each_message_once() -> None:
    queue = Queue("q")
    for body in range(10_000):
        queue.put(Entry(payload(body)))
    side = Side(queue)
    side.subscribe(10_001, 10_000, False)  # matches nothing queued
    side.credits[0] = 10
    selector = side.selectors[0]
    assert selector is not None
    for _ in range(100):
        queue.credited(side.consumers[0])  # flows of that consumer
    for body in range(100):
        queue.put(Entry(payload(10_001 + body)))  # arrivals
    assert selector.asked == 10_100
    # a message put back at the head (released by another consumer) is one more question, not a pass
    plain = Side(queue)
    plain.subscribe(1, 0, False)
    plain.credits[0] = 1
    queue.credited(plain.consumers[0])
    queue.put_back([plain.unsettled(0, 0)[0]])
    assert selector.asked == 10_101
    # and the consumer still gets what it wants, wherever it is
    queue.put(Entry(payload(10_000)))
    assert side.log == [(0, 10_000)]
    assert len(queue) == 10_100


def test_a_browser_passes_over_what_it_has_seen_at_once() -> None:
    queue = Queue("q")
    for body in range(5_000):
        queue.put(Entry(payload(body)))
    side = Side(queue)
    side.subscribe(1, 0, True)
    side.credits[0] = 10_000
    browser = side.consumers[0]
    assert isinstance(browser, CountingConsumer)
    queue.credited(browser)
    assert len(side.log) == 5_000
    for body in range(200):
        queue.put(Entry(payload(5_000 + body)))  # each arrival shown, without a walk over the 5,000 seen
    assert [body for _, body in side.log] == list(range(5_200))
    assert browser.asked == 5_200  # before: each arrival asked again about every message queued (1,025,000)


@pytest.mark.anyio
async def test_a_selector_matching_nothing_queued_does_not_slow_the_producers() -> None:
    depth, sends = 20_000, 200
    with BrokerThread() as broker:
        async with amqp_async.connect(broker.url) as conn:
            sender = await conn.open_sender("deep", delivery="at-most-once")
            for body in range(depth):
                await sender.send(amqp_async.Message(body=body, properties={"n": body}))
            confirmed = await conn.open_sender("deep")
            await confirmed.send(amqp_async.Message(body="synchronised"))
            receiver = await conn.open_receiver("deep", credit=100, selector="n = -2")
            with anyio.fail_after(60):
                for body in range(sends):
                    await confirmed.send(amqp_async.Message(body=body, properties={"n": -1}))
                    receiver.add_credit(1)  # a flow of the selector's consumer too, each time
            assert receiver.receive_nowait() is None
            # (86 ms a send before: a walk of the 20,000 at the arrival and at the flow; about 0.2 ms now, not
            # asserted: a loaded host makes any time bound flaky.) What makes it so: the broker's consumer knows the
            # whole queue is of no use to it, so a dispatch asks its selector about the new message alone.
            queue = broker.broker.queues["deep"]
            [consumer] = [consumer for consumer in queue.consumers if consumer.selector is not None]
            assert consumer.known_from <= queue.entries[0].place
            assert consumer.known_to >= queue.entries[-1].place
