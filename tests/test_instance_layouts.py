"""The objects read for every message keep their fields where CPython reads them the fast way.

CPython keeps an instance's attributes inline (beside the object, not in a dict) up to 29 of them per class; past
that, each instance holds a dict. On 3.11 and 3.12 neither interpreter then specialises a method call on such an
instance (``self._send_payload(...)``, ``self.queue(name)``: the generic lookup each time), and 3.11 reads its
attributes through the dict's hint. Some of these classes had 30 to 34 (the engine's session 33, the broker 31,
proton's Container 34 and Sender 32, its Receiver 30): the engine's session and the broker now have slots, and the
callback API's objects leave what they read only at open and close on their class (set on the instance when
changed), as programs may still add attributes of their own to them.

Each object is checked after it has done its work: a callback program sending and receiving through
python-qpid-proton's test broker, and our broker routing messages from our client.
"""

from __future__ import annotations

from typing import Any

import anyio

import amqp_async
from amqp_async.broker import BrokerThread
from amqp_async.proton.reactor import Container

try:
    from proton_broker import ProtonBroker
    from test_proton_handler_attributes import MESSAGES as SENT
    from test_proton_handler_attributes import SendThenReceive
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.proton_broker import ProtonBroker
    from tests.test_proton_handler_attributes import MESSAGES as SENT
    from tests.test_proton_handler_attributes import SendThenReceive

#: The most attributes CPython 3.11 and 3.12 keep inline in an instance: measured, 29 give inline values and 30 a
#: dict.
MOST_INLINE = 29
MESSAGES = 50


def _inline_or_slots(obj: Any) -> None:
    """``obj`` keeps its fields in slots only, or in at most :data:`MOST_INLINE` attributes of its instance."""
    try:
        fields = object.__getattribute__(obj, "__dict__")
    except AttributeError:
        return  # slots only
    assert len(fields) <= MOST_INLINE, f"{type(obj).__qualname__} holds {len(fields)}: {sorted(fields)}"


class Program(SendThenReceive):
    """tests/test_proton_handler_attributes.py's program (sends messages, then receives them back), keeping what it
    met on the way."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.met: dict[str, Any] = {}

    def on_start(self, event: Any) -> None:
        super().on_start(event)
        self.met["container"] = event.container

    def on_accepted(self, event: Any) -> None:
        self.met.update(sender=event.sender, session=event.session, connection=event.connection)
        self.met["outgoing delivery"] = event.delivery
        super().on_accepted(event)

    def on_message(self, event: Any) -> None:
        self.met.update(receiver=event.receiver, delivery=event.delivery, transport=event.transport)
        if self.received + 1 == SENT:
            self.met["engine session"] = event.session._impl
        super().on_message(event)


def test_a_callback_programs_objects() -> None:
    with ProtonBroker(timeout=30.0) as broker:
        program = Program(broker.url.removeprefix("amqp://"))
        Container(program).run()
    assert program.bodies == [f"message {number}" for number in range(SENT)]
    assert set(program.met) == {
        "container",
        "outgoing delivery",
        "sender",
        "session",
        "connection",
        "receiver",
        "delivery",
        "transport",
        "engine session",
    }
    for obj in program.met.values():
        _inline_or_slots(obj)
    # The engine's session: slots only (a program never sees it).
    assert not hasattr(program.met["engine session"], "__dict__")


def test_the_brokers_objects() -> None:
    with BrokerThread() as running:

        async def send_and_receive() -> list[Any]:
            async with amqp_async.connect(running.url, reconnect=False) as connection:
                sender = await connection.open_sender("queue")
                for number in range(MESSAGES):
                    await sender.send(amqp_async.Message(body=number))
                receiver = await connection.open_receiver("queue", credit=10)
                bodies = []
                for _ in range(MESSAGES):
                    delivery = await receiver.receive()
                    bodies.append(delivery.message.body)
                    await delivery.accept()
                return bodies

        assert anyio.run(send_and_receive) == list(range(MESSAGES))
        broker = running.broker
        assert not hasattr(broker, "__dict__")  # slots only: it routes every message
        for obj in (broker.queues["queue"], broker.flow, broker.dead_letters):
            _inline_or_slots(obj)
