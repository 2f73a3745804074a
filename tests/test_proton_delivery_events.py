"""The container queues a DELIVERY event as its delivery, and makes the event as it dispatches it; a delivery that
arrived on a receiver is queued as the engine's, and its proton ``Delivery`` is made then too.

A read brings a batch of messages: made at once, an event and a ``Delivery`` per message lived until its turn, and
a batch of a thousand kept two thousand more objects alive; CPython's garbage collector runs on the count of
objects made and not yet freed, and ran twice as often in a receive (198 collections for 101,000 messages against
C ``direct``, 105 now). The peer is python-qpid-proton's test broker (tests/proton_broker.py), with the messages
queued before the receiver attaches, so that they come in one batch.

What the application sees of the batch does not change: ``receiver.queued`` counts the deliveries not dispatched
yet, and reading ahead of the events (``receiver.current``, ``recv``, ``advance``) reads the next one, as in
python-qpid-proton (the same program, run on both, must see the same).
"""

from __future__ import annotations

import gc
import importlib
from typing import Any

import pytest

from amqp_async.proton import Event
from amqp_async.proton._delivery import Delivery

try:
    from proton_broker import ProtonBroker
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.proton_broker import ProtonBroker

TIMEOUT = 30.0
MESSAGES = 300


def _receive_all(api: str, url: str) -> Any:
    """Receives ``MESSAGES`` messages with ``api`` (``proton`` or ``amqp_async.proton``); at the first, counts what
    waits (queued deliveries, live events and live ``Delivery`` objects of ours)."""
    handlers = importlib.import_module(api + ".handlers")

    class ReceiveAll(handlers.MessagingHandler):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            super().__init__(prefetch=MESSAGES)
            self.bodies: list[Any] = []
            self.queued = 0
            self.live_events = 0
            self.live_deliveries = 0

        def on_start(self, event: Any) -> None:
            event.container.create_receiver(f"{url}/queue")

        def on_message(self, event: Any) -> None:
            if not self.bodies:
                # (this receiver's: other tests of the process may leave objects of theirs for the collector)
                receiver = event.receiver
                self.queued = receiver.queued
                live = gc.get_objects()
                self.live_deliveries = sum(1 for item in live if type(item) is Delivery and item.link is receiver)
                self.live_events = sum(
                    1
                    for item in live
                    if type(item) is Event
                    and (item._context is receiver or getattr(item._context, "link", None) is receiver)
                )
            self.bodies.append(event.message.body)
            if len(self.bodies) == MESSAGES:
                event.connection.close()

    return ReceiveAll()


def _read_ahead(api: str, url: str) -> Any:
    """Receives ``MESSAGES`` messages with ``api``; at the first message that has another waiting after it, reads
    that next one ahead of its event (``current``, ``recv``, ``advance``) and settles it."""
    handlers = importlib.import_module(api + ".handlers")
    message_type = importlib.import_module(api).Message

    class ReadAhead(handlers.MessagingHandler):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            super().__init__(prefetch=MESSAGES)
            self.bodies: list[Any] = []
            self.read_ahead: list[Any] = []
            self.queued_then = -1

        def on_start(self, event: Any) -> None:
            event.container.create_receiver(f"{url}/queue")

        def on_message(self, event: Any) -> None:
            self.bodies.append(event.message.body)
            receiver = event.receiver
            if not self.read_ahead and receiver.current is not None:
                self.queued_then = receiver.queued
                ahead = receiver.current
                message = message_type()
                message.decode(receiver.recv(ahead.pending))
                receiver.advance()
                ahead.update(ahead.ACCEPTED)
                ahead.settle()
                self.read_ahead.append(message.body)
            if len(self.bodies) + len(self.read_ahead) == MESSAGES:
                event.connection.close()

    return ReadAhead()


def _run(program: Any, api: str) -> Any:
    with ProtonBroker(timeout=TIMEOUT) as broker:
        for number in range(MESSAGES):
            broker.put("queue", f"message {number}")
        handler = program(api, broker.url.removeprefix("amqp://"))
        importlib.import_module(api + ".reactor").Container(handler).run()
        # Every message was accepted once, and none went back to the queue.
        assert [outcome.outcome for outcome in broker.outcomes] == ["accepted"] * MESSAGES
        assert broker.queued("queue") == []
    return handler


def test_a_batch_of_deliveries_waits_for_its_turn_without_an_object_each() -> None:
    handler = _run(_receive_all, "amqp_async.proton")
    assert handler.bodies == [f"message {number}" for number in range(MESSAGES)]
    # Many deliveries waited for their turn when the first was handled (the batch came in one read or a few)...
    assert handler.queued >= 20
    # ...without an event or a Delivery each (only the one being dispatched, and a few of the connection's own, were
    # alive: a Delivery each made them 300).
    assert handler.live_events < 10
    assert handler.live_deliveries < 10


@pytest.mark.parametrize("api", ["proton", "amqp_async.proton"])
def test_reading_ahead_of_the_events_reads_the_next_delivery(api: str) -> None:
    handler = _run(_read_ahead, api)
    [ahead] = handler.read_ahead
    number = int(ahead.split()[1])
    # The message read ahead is the one after the message being handled, and it gets no on_message of its own; every
    # other message comes once, in order.
    assert handler.bodies[-1] != ahead
    assert handler.bodies.index(f"message {number - 1}") == number - 1
    assert handler.bodies == [f"message {n}" for n in range(MESSAGES) if n != number]
    assert handler.queued_then >= 1


def _custom_tree(api: str, url: str, counting: bool) -> Any:
    """Receives ``MESSAGES`` messages with ``api`` through a handler tree of its own: a flow controller (a subclass
    that counts its ``on_delivery`` calls, or proton's own) and a subclass of ``IncomingMessageHandler`` that
    overrides ``on_message``."""
    handlers = importlib.import_module(api + ".handlers")

    class Incoming(handlers.IncomingMessageHandler):  # type: ignore[misc, name-defined]
        def on_message(self, event: Any) -> None:
            root.bodies.append(event.message.body)
            if len(root.bodies) == MESSAGES:
                event.connection.close()

    class CountingFlow(handlers.FlowController):  # type: ignore[misc, name-defined]
        def on_delivery(self, event: Any) -> None:
            root.flow_calls += 1
            super().on_delivery(event)

    class Root(handlers.MessagingHandler):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            super().__init__(prefetch=0)
            flow = (CountingFlow if counting else handlers.FlowController)(MESSAGES // 3)
            self.handlers = [flow, Incoming(auto_accept=True)]
            self.bodies: list[Any] = []
            self.flow_calls = 0

        def on_start(self, event: Any) -> None:
            event.container.create_receiver(f"{url}/queue")

    root = Root()
    return root


@pytest.mark.parametrize("counting", [False, True], ids=["proton's flow controller", "a subclass of it"])
@pytest.mark.parametrize("api", ["proton", "amqp_async.proton"])
def test_a_handler_tree_of_subclasses_is_called_as_written(api: str, counting: bool) -> None:
    # The container makes a flow controller's and an incoming message handler's on_delivery one call when both are
    # the classes' own (an Incoming that overrides only on_message is); a flow controller whose on_delivery is
    # overridden is called on its own. Either way, every message comes once, in order, through the overridden
    # on_message, with credit kept topped up (a third of the messages at a time).
    handler = _run(lambda api, url: _custom_tree(api, url, counting), api)
    assert handler.bodies == [f"message {number}" for number in range(MESSAGES)]
    assert handler.flow_calls == (MESSAGES if counting else 0)
