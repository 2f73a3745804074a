"""The container reads a program's handlers without reading their ``__dict__``, so that CPython keeps reading their
attributes the fast way.

On CPython 3.11 an object whose ``__dict__`` has been read holds a dict object from then on, and the interpreter's
specialised attribute reads miss on such a dict and fall back to the generic lookup for good: a program's
``self.count += 1`` in every callback, and the container's own reads of MessagingHandler's parts, each cost several
times more. The container used to read every handler's ``__dict__`` (to learn whether the instance shadows an
``on_*`` callback); a callback send spent 8% more instructions a message for it (``benchmarks/callback.py``).

The peer is python-qpid-proton's test broker (tests/proton_broker.py); the program sends and receives through it.
"""

from __future__ import annotations

import dis
import sys
from typing import Any

import pytest

from amqp_async.proton import Message
from amqp_async.proton._events import Handler
from amqp_async.proton.handlers import MessagingHandler
from amqp_async.proton.reactor import Container

try:
    from proton_broker import ProtonBroker
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.proton_broker import ProtonBroker

TIMEOUT = 30.0
#: Enough for CPython to specialise the callbacks' instructions (it does after some fifty runs of one).
MESSAGES = 300
#: What gives an instance's real ``__dict__`` when a class replaces the attribute (Handler's own descriptor).
_REAL_DICT = vars(Handler)["__dict__"]


class SendThenReceive(MessagingHandler):
    """Sends ``MESSAGES`` messages, then receives them back, counting in attributes of its own."""

    def __init__(self, url: str) -> None:
        super().__init__(prefetch=50)
        self.url = url
        self.sent = 0
        self.accepted = 0
        self.received = 0
        self.bodies: list[Any] = []

    def on_start(self, event: Any) -> None:
        self.connection = event.container.connect(self.url, reconnect=False)
        event.container.create_sender(self.connection, "queue")

    def on_sendable(self, event: Any) -> None:
        sender = event.sender
        while sender.credit and self.sent < MESSAGES:
            sender.send(Message(body=f"message {self.sent}"))
            self.sent += 1

    def on_accepted(self, event: Any) -> None:
        self.accepted += 1
        if self.accepted == MESSAGES:
            event.container.create_receiver(self.connection, "queue")

    def on_message(self, event: Any) -> None:
        self.received += 1
        self.bodies.append(event.message.body)
        if self.received == MESSAGES:
            event.connection.close()


class Watched(SendThenReceive):
    """The same program, counting every read of its ``__dict__``."""

    dict_reads = 0

    @property  # type: ignore[misc]
    def __dict__(self) -> dict[str, Any]:  # type: ignore[override]
        type(self).dict_reads += 1
        return _REAL_DICT.__get__(self)  # type: ignore[no-any-return]


def _run(handler: SendThenReceive) -> None:
    with ProtonBroker(timeout=TIMEOUT) as broker:
        handler.url = broker.url.removeprefix("amqp://")
        Container(handler).run()
        assert [outcome.outcome for outcome in broker.outcomes] == ["accepted"] * MESSAGES
        assert broker.queued("queue") == []
    assert handler.bodies == [f"message {number}" for number in range(MESSAGES)]


def test_the_container_does_not_read_a_handlers_dict() -> None:
    handler = Watched("")
    _run(handler)
    # Every message went and came back, and nothing looked into the handler's __dict__ (the code before read it
    # for every callback name it planned: 35 reads here).
    assert Watched.dict_reads == 0


def test_a_handler_shadowing_a_callback_on_the_instance_is_still_called() -> None:
    """What the ``__dict__`` was read for: a callback set on the instance, not its class, is the one called."""
    handler = SendThenReceive("")
    seen: list[str] = []

    def on_message(event: Any) -> None:
        seen.append(event.message.body)
        SendThenReceive.on_message(handler, event)

    handler.on_message = on_message  # type: ignore[method-assign]
    _run(handler)
    assert seen == [f"message {number}" for number in range(MESSAGES)]


@pytest.mark.skipif(
    sys.version_info < (3, 11), reason="CPython 3.10 does not specialise attribute reads: there is nothing to keep"
)
def test_a_handlers_own_attribute_reads_stay_specialised() -> None:
    handler = SendThenReceive("")
    _run(handler)
    # The reads of the handler's own counters in its callbacks, as CPython left them after the run: specialised for
    # the instance's inline values (on 3.11 the code before left them generic, and 3.12 reading them from a dict).
    for callback in (SendThenReceive.on_accepted, SendThenReceive.on_message):
        reads = {
            instruction.argval: instruction.opname
            for instruction in dis.get_instructions(callback, adaptive=True)  # type: ignore[call-arg]
            if instruction.opname.startswith("LOAD_ATTR") and instruction.argval in ("accepted", "received")
        }
        assert reads and set(reads.values()) == {"LOAD_ATTR_INSTANCE_VALUE"}, reads
