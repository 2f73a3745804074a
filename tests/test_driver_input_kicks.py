"""Output queued while a connection handles its input is written by the reader once the handling returns: the
writer task is not woken for it.

A proton program that sends its next message from ``on_accepted`` queues it while our callback API handles the
previous message's outcome (the input): waking the writer for it cost a turn of the event loop on every round trip,
and the reader wrote it first anyway. The peer is python-qpid-proton's test broker (tests/proton_broker.py).
"""

from __future__ import annotations

from typing import Any

import pytest

from amqp_async.io.driver import EngineDriver
from amqp_async.proton import Message
from amqp_async.proton.handlers import MessagingHandler
from amqp_async.proton.reactor import Container

try:
    from proton_broker import ProtonBroker
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.proton_broker import ProtonBroker

TIMEOUT = 30.0
ROUND_TRIPS = 200


class OneAtATime(MessagingHandler):  # type: ignore[misc]
    """Sends ``ROUND_TRIPS`` messages, each once the one before it was accepted; then closes."""

    def __init__(self, url: str) -> None:
        super().__init__()
        self.url = url
        self.sent = 0
        self.accepted = 0

    def on_start(self, event: Any) -> None:
        event.container.create_sender(f"{self.url}/queue")

    def on_sendable(self, event: Any) -> None:
        if self.sent == 0:
            self._send(event.sender)

    def on_accepted(self, event: Any) -> None:
        self.accepted += 1
        if self.accepted == ROUND_TRIPS:
            event.connection.close()
        else:
            self._send(event.sender)

    def _send(self, sender: Any) -> None:
        self.sent += 1
        sender.send(Message(body=f"message {self.sent}"))


@pytest.fixture
def writer_wakeups(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """One entry per time a driver wakes its writer task."""
    woken: list[int] = []
    original = EngineDriver._wake_writer

    def counted(self: EngineDriver) -> None:
        woken.append(1)
        original(self)

    monkeypatch.setattr(EngineDriver, "_wake_writer", counted)
    return woken


def test_sending_from_an_outcome_callback_wakes_no_writer(writer_wakeups: list[int]) -> None:
    with ProtonBroker(timeout=TIMEOUT) as broker:
        handler = OneAtATime(broker.url.removeprefix("amqp://"))
        Container(handler).run()
        bodies = [message.body for message in broker.queued("queue")]
    assert handler.accepted == ROUND_TRIPS
    # Every message reached the peer, in order: the reader wrote what the callbacks queued.
    assert bodies == [f"message {number}" for number in range(1, ROUND_TRIPS + 1)]
    # The connection's own wake-ups (the peer's open makes its idle timeout known; the close) and none per round
    # trip (there were ROUND_TRIPS of them before).
    assert len(writer_wakeups) <= 5
