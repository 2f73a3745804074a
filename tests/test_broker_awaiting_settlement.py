"""Producers in receiver settle mode second (§2.6.12) that do not settle: the broker's memory stays bounded.

In mode second the broker sends its outcome unsettled and keeps the delivery until the producer settles it. A
producer that never does made the broker keep every delivery it ever sent, with its payload, outside the memory
limit's count (3,000 messages of 20 KB: 61 MB, ``held_bytes`` 0). Now a delivery waiting for its settlement keeps no
payload (the queue's entry has it), and past ``AWAITING_SETTLEMENT_LIMIT`` of them on a session its producers get no
credit until they settle; settling gives it back.

The producer is python-qpid-proton's, with ``auto_settle=False``: it sees each outcome and does not settle.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from amqp_async.broker import BrokerThread
from amqp_async.broker._connection import AWAITING_SETTLEMENT_LIMIT
from amqp_async.broker._flow import WINDOW

proton = pytest.importorskip("proton", reason="python-qpid-proton is a test dependency (the independent peer)")
from proton.handlers import MessagingHandler  # noqa: E402 - after the importorskip that explains its absence
from proton.reactor import AtLeastOnce, Container, LinkOption  # noqa: E402

try:
    from proton_stream_peer import _Later
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.proton_stream_peer import _Later

TIMEOUT = 60.0


class _SettleModeSecond(LinkOption):  # type: ignore[misc]
    def apply(self, link: Any) -> None:
        link.rcv_settle_mode = proton.Link.RCV_SECOND


class UnsettlingProducer(MessagingHandler):  # type: ignore[misc]
    """Sends while it has credit and settles nothing; once the credit has stopped coming for a second, records how
    many it sent, settles them all, and sends ``more`` after that."""

    def __init__(self, url: str, more: int) -> None:
        super().__init__(auto_settle=False)
        self.url = url
        self.more = more
        self.sent = 0
        self.outcomes = 0
        self.unsettled: list[Any] = []
        self.stalled_at: int | None = None
        self.last_sent = 0
        self.done = threading.Event()

    def on_start(self, event: Any) -> None:
        self.container = event.container
        connection = event.container.connect(self.url, allowed_mechs="ANONYMOUS")
        self.sender = event.container.create_sender(connection, "q", options=[AtLeastOnce(), _SettleModeSecond()])
        event.container.schedule(1.0, _Later(self.check))

    def on_sendable(self, event: Any) -> None:
        limit = None if self.stalled_at is None else self.stalled_at + self.more
        while event.sender.credit and (limit is None or self.sent < limit):
            self.unsettled.append(event.sender.send(proton.Message(body=b"x" * 1000)))
            self.sent += 1

    def on_accepted(self, event: Any) -> None:
        self.outcomes += 1
        if self.stalled_at is not None and self.outcomes >= self.stalled_at + self.more:
            for delivery in self.unsettled:
                delivery.settle()
            event.connection.close()
            self.done.set()

    def check(self) -> None:
        if self.stalled_at is None:
            if self.sent == self.last_sent and self.sent > 0:
                self.stalled_at = self.sent  # no credit for a second: settle what waits, and go on
                for delivery in self.unsettled:
                    delivery.settle()
                self.unsettled = []
            else:
                self.last_sent = self.sent
                self.container.schedule(1.0, _Later(self.check))


def test_a_producer_that_does_not_settle_gets_no_more_credit_until_it_does() -> None:
    with BrokerThread() as broker:
        producer = UnsettlingProducer(broker.url, more=500)
        container = Container(producer)
        thread = threading.Thread(target=container.run, daemon=True)
        thread.start()
        assert producer.done.wait(TIMEOUT), (producer.sent, producer.outcomes, producer.stalled_at)
        thread.join(TIMEOUT)
        assert producer.stalled_at is not None
        # it stopped within the limit and a window of credit granted before it was reached
        assert AWAITING_SETTLEMENT_LIMIT <= producer.stalled_at <= AWAITING_SETTLEMENT_LIMIT + WINDOW
        # once settled, the credit came back: every message was taken, and none is waiting any more
        assert producer.outcomes == producer.sent == producer.stalled_at + 500
        assert len(broker.broker.queues["q"].entries) == producer.sent


def test_a_waiting_delivery_keeps_no_payload() -> None:
    with BrokerThread() as broker:
        producer = UnsettlingProducer(broker.url, more=0)
        producer.more = 10**9  # never completes: stop once stalled, and look before it settles
        original_check = producer.check
        seen: dict[str, Any] = {}

        def check_then_look() -> None:
            if producer.sent == producer.last_sent and producer.sent > 0 and "payloads" not in seen:
                waiting = [
                    delivery
                    for connection in broker.broker.connections
                    for session in connection.engine.sessions
                    for delivery in session._incoming_unsettled.values()
                ]
                seen["count"] = len(waiting)
                seen["payloads"] = sum(len(delivery.payload) for delivery in waiting)
                producer.done.set()
                producer.container.stop()
                return
            original_check()

        producer.check = check_then_look  # type: ignore[method-assign]
        container = Container(producer)
        thread = threading.Thread(target=container.run, daemon=True)
        thread.start()
        assert producer.done.wait(TIMEOUT)
        thread.join(TIMEOUT)
    assert seen["count"] >= AWAITING_SETTLEMENT_LIMIT
    assert seen["payloads"] == 0
