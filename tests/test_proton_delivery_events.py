"""The container queues a DELIVERY event as its delivery, and makes the event as it dispatches it.

A read brings a batch of messages: made at once, an event per message lived until its turn, and a batch of a
thousand kept a thousand more objects alive; CPython's garbage collector runs on the count of objects made and not
yet freed, and ran twice as often in a receive (198 collections for 51,000 messages against C ``direct``, 107 now).
The peer is python-qpid-proton's test broker (tests/proton_broker.py), with the messages queued before the receiver
attaches, so that they come in one batch.
"""

from __future__ import annotations

import gc
from typing import Any

from amqp_async.proton import Event
from amqp_async.proton.handlers import MessagingHandler
from amqp_async.proton.reactor import Container

try:
    from proton_broker import ProtonBroker
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.proton_broker import ProtonBroker

TIMEOUT = 30.0
MESSAGES = 300


class ReceiveAll(MessagingHandler):  # type: ignore[misc]
    """Receives ``MESSAGES`` messages; at the first, counts the queued deliveries and the live events."""

    def __init__(self, url: str) -> None:
        super().__init__(prefetch=MESSAGES)
        self.url = url
        self.bodies: list[Any] = []
        self.waiting = 0
        self.live_events = 0

    def on_start(self, event: Any) -> None:
        event.container.create_receiver(f"{self.url}/queue")

    def on_message(self, event: Any) -> None:
        if not self.bodies:
            self.waiting = len(event.receiver._incoming)
            self.live_events = sum(1 for item in gc.get_objects() if type(item) is Event)
        self.bodies.append(event.message.body)
        if len(self.bodies) == MESSAGES:
            event.connection.close()


def test_a_batch_of_deliveries_waits_for_its_turn_without_an_event_each() -> None:
    with ProtonBroker(timeout=TIMEOUT) as broker:
        for number in range(MESSAGES):
            broker.put("queue", f"message {number}")
        handler = ReceiveAll(broker.url.removeprefix("amqp://"))
        Container(handler).run()
    assert handler.bodies == [f"message {number}" for number in range(MESSAGES)]
    # Many deliveries waited for their turn when the first was handled (the batch came in one read or a few)...
    assert handler.waiting >= 20
    # ...without an event each (only the one being dispatched, and a few of the connection's own, were alive).
    assert handler.live_events < 10
