"""How a streaming read's task ends its link: the credit it takes back at its byte bound, what it does with the
messages still on their way, and the outcome its source names for what it leaves unsettled.

Run as Spark would run a task (``read_partition``), without a JVM, against python-qpid-proton (its Container, as a
broker and as a plain sending application) and the embedded broker.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from proton import Message as ProtonMessage
from proton import Transport
from proton.handlers import MessagingHandler
from proton_broker import ProtonBroker
from proton_peer import proton_server
from spark_support import fill

import amqp_async
from amqp_async.broker import BrokerThread
from amqp_async.codec.delivery_states import Released
from amqp_async.spark import MESSAGE_SCHEMA, _links
from amqp_async.spark._options import parse_options
from amqp_async.spark._stream_task import StreamPartition, read_partition

#: How long a task's end may wait for the sender's answer, in these tests (below the 10 s a task gives its close):
#: a task that waits for it all (before, with a sender that answers no echo) takes longer than :data:`_PROMPT`.
_PATIENCE = 9.0
#: Seconds a task that need not wait for an answer takes at most here, on a loaded machine (0.3 s unloaded).
_PROMPT = 6.0


@pytest.fixture
def long_patience(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_links, "_IN_FLIGHT_PATIENCE", _PATIENCE)


def _partition(location: Path, budget: int = 100, *, wait: float = 0.0) -> StreamPartition:
    return StreamPartition("source1", 0, 0, budget, str(location), wait, None)


def _read(url: str, location: Path, **extra: str) -> tuple[list[str], float]:
    """The message ids a task reads from ``q``, and the seconds it took (its connection closed)."""
    options = parse_options({"url": url, "address": "q", **extra})
    started = time.monotonic()
    ids = [
        message_id
        for batch in read_partition(options, MESSAGE_SCHEMA, _partition(location))
        for message_id in batch.column("message_id").to_pylist()
    ]
    return ids, time.monotonic() - started


def _small_then_large(large: int, size: int) -> list[ProtonMessage]:
    """A 1-byte message, then ``large`` of ``size`` bytes: the first sets the average size low, so the task grants
    more credit than its byte bound needs, and stops at the bound with credit left."""
    return [ProtonMessage(body="x", id="m0")] + [
        ProtonMessage(body="y" * size, id=f"m{n}") for n in range(1, large + 1)
    ]


# --- credit taken back at the byte bound, from a sender that answers no echo ----------------------------------------


@pytest.mark.parametrize(
    ("large", "size", "window_bytes"),
    [(2, 1000, "1500"), (39, 1000, "1500"), (200, 20_000, "30000")],
    ids=["queue-ends-within-the-credit", "more-queued-than-bytes", "more-queued-than-credit"],
)
def test_a_task_at_its_byte_bound_ends_at_once_with_a_broker_that_answers_no_echo(
    tmp_path: Path, long_patience: None, large: int, size: int, window_bytes: str
) -> None:
    """python-qpid-proton's engine answers no flow with echo (§2.7.4), so a task that took its credit back at its
    byte bound and waited for that answer waited its whole patience (2 s by default) at its end, every micro-batch.
    Now it asks with a drain (§2.6.7) once the echo goes unanswered, and ends as soon as the broker answered it, or
    as soon as every credit taken back has been used: nothing more can come then. Every message the broker sent
    beyond the batch is still released before the close (§3.4.4: delivered again, its delivery-count unchanged),
    once."""
    messages = _small_then_large(large, size)
    with ProtonBroker() as peer:
        for message in messages:
            peer.put("q", message)
        ids, took = _read(peer.url, tmp_path, windowBytes=window_bytes)
        peer.wait_closes(1, timeout=30)
        assert took < _PROMPT, f"the task waited {took:.1f} s at its end"
        assert ids == [f"m{n}" for n in range(len(ids))] and 1 <= len(ids) <= 3
        outcomes = peer.outcomes
        assert [outcome.message.id for outcome in outcomes if outcome.outcome == "accepted"] == ids
        assert {outcome.outcome for outcome in outcomes} <= {"accepted", "released"}
        assert all(outcome.settled for outcome in outcomes)
        # Each message came to the task once: those beyond the batch are released once the drain is answered, so
        # that it cannot bring them again.
        assert max(Counter(outcome.message.id for outcome in outcomes).values()) == 1
        queued = [(message.id, message.delivery_count) for message in peer.queued("q")]
        assert sorted(queued) == sorted((message.id, 0) for message in messages[len(ids) :])


class _Backlog(MessagingHandler):
    """python-qpid-proton sending ``messages`` as credit allows, answering neither an echo nor a drain (as many a
    proton application does not call ``drained()``), and counting the outcomes of what it sent."""

    def __init__(self, messages: list[ProtonMessage]) -> None:
        super().__init__(auto_settle=True)
        self.messages = list(messages)
        self.sent = 0
        self.outcomes: Counter[str] = Counter()
        self.closed = threading.Event()

    def on_link_opening(self, event: Any) -> None:
        if event.link.is_sender:
            event.link.source.copy(event.link.remote_source)
        event.link.open()

    def on_sendable(self, event: Any) -> None:
        # credit > 0, not "while credit" as proton's examples write: proton's credit goes negative once the
        # receiver takes back credit below what is on its way, and such a sender sends on beyond it (§2.6.7).
        while self.messages and event.link.credit > 0:
            event.link.send(self.messages.pop(0))
            self.sent += 1

    def on_accepted(self, event: Any) -> None:
        self.outcomes["accepted"] += 1

    def on_released(self, event: Any) -> None:
        self.outcomes["released"] += 1

    def on_connection_closed(self, event: Any) -> None:
        self.closed.set()


def test_a_task_whose_credit_taken_back_is_all_used_ends_without_an_answer(tmp_path: Path, long_patience: None) -> None:
    """A sender with more messages than the credit uses all of it before it sees the credit taken back; it answers
    neither the echo nor a drain, but none is needed: once the link's delivery-count reaches the end of the credit
    taken back, nothing more can come (§2.6.7), and the task releases what came and ends. Before, it waited for an
    answer all its patience."""
    handler = _Backlog(_small_then_large(200, 20_000))
    with proton_server(handler) as url:
        ids, took = _read(url, tmp_path, windowBytes="30000")
        assert handler.closed.wait(30)
    assert took < _PROMPT, f"the task waited {took:.1f} s at its end"
    assert 1 <= len(ids) <= 3
    # Every message it sent got an outcome before the close: the batch's accepted, the others released.
    assert handler.outcomes == {"accepted": len(ids), "released": handler.sent - len(ids)}


def test_a_task_ends_at_once_with_the_embedded_broker_that_answers_the_echo(
    tmp_path: Path, long_patience: None
) -> None:
    """The embedded broker answers the echo at once: no drain is asked, and what it sent beyond the batch is
    released (its delivery-count unchanged), as before."""
    with BrokerThread() as broker:
        fill(broker.url, "q", [amqp_async.Message(body="x", id="m0")])
        fill(broker.url, "q", [amqp_async.Message(body="y" * 1000, id=f"m{n}") for n in range(1, 40)])
        ids, took = _read(broker.url, tmp_path, windowBytes="1500")
        assert took < _PROMPT
        assert ids == [f"m{n}" for n in range(len(ids))] and 1 <= len(ids) <= 3
        rest, _ = _read(broker.url, tmp_path / "rest")
    assert rest == [f"m{n}" for n in range(len(ids), 40)]


# --- the source's default-outcome ------------------------------------------------------------------------------------


def test_the_tasks_source_names_released_as_default_outcome_to_the_embedded_broker(tmp_path: Path) -> None:
    """§3.5.3: what the task leaves unsettled at its link's end takes the source's default-outcome, released
    (§3.4.4), not a failed delivery: the task settles what it does not consume with released itself."""
    with BrokerThread() as broker:
        seen: list[Any] = []
        results: list[Any] = []
        options = parse_options({"url": broker.url, "address": "q"})
        task = threading.Thread(
            target=lambda: results.append(list(read_partition(options, MESSAGE_SCHEMA, _partition(tmp_path, wait=30)))),
            daemon=True,
        )
        task.start()
        deadline = time.monotonic() + 30
        while not seen and time.monotonic() < deadline:
            seen = [
                outbound.default_outcome
                for connection in list(broker.broker.connections)
                for outbound in list(connection._outbound)
            ]
            time.sleep(0.02)
        fill(broker.url, "q", [amqp_async.Message(body="x", id="m0")])  # ends the task's first wait
        task.join(60)
        assert not task.is_alive() and results
    assert len(seen) == 1 and isinstance(seen[0], Released)


class _Tracing(MessagingHandler):
    """python-qpid-proton sending nothing, answering drains, and keeping its frame trace (its API does not show a
    source's default-outcome)."""

    def __init__(self) -> None:
        super().__init__()
        self.frames: list[str] = []

    def on_connection_bound(self, event: Any) -> None:
        event.transport.trace(Transport.TRACE_FRM)
        event.transport.tracer = lambda _transport, message: self.frames.append(message)

    def on_link_opening(self, event: Any) -> None:
        if event.link.is_sender:
            event.link.source.copy(event.link.remote_source)
        event.link.open()

    def on_link_flow(self, event: Any) -> None:
        if event.link.is_sender and event.link.drain_mode:
            event.link.drained()


def _attaches(frames: list[str]) -> Iterator[str]:
    return (frame for frame in frames if "<- @attach" in frame)


def test_the_tasks_source_names_released_as_default_outcome_to_python_qpid_proton(tmp_path: Path) -> None:
    handler = _Tracing()
    with proton_server(handler) as url:
        ids, _ = _read(url, tmp_path)
    assert ids == []
    [attach] = _attaches(handler.frames)
    assert "default-outcome=@released(38) []" in attach, attach
