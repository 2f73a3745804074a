"""proton's deliveries and links keep the fields read per message on the instance, not as defaults on the class.

CPython 3.11 reads an instance's own attribute in a specialised instruction and a default left on the class through
the generic lookup (about 13 ns more a read); the engine API read 27 such defaults a message before they moved
(docs/benchmarks.md, "Class defaults, and proton's APIs per message"). Here each class-level default of
``Delivery`` and the link classes is replaced by a descriptor that counts the reads reaching it (an instance's own
attribute hides it), and an engine-API program moves messages between two in-memory engines (the sides and pump of
tests/proton_engine_program.py, as proton's own engine tests do).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from amqp_async import proton
from amqp_async.proton._delivery import Delivery
from amqp_async.proton._links import Link
from amqp_async.proton._receiver import Receiver
from amqp_async.proton._sender import Sender

try:
    from proton_engine_program import Side, pump
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.proton_engine_program import Side, pump

MESSAGES = 200


class _CountedDefault:
    """A class attribute's value, counting each read through an instance (a non-data descriptor: an attribute the
    instance sets itself is found first, and never reaches it)."""

    def __init__(self, reads: Counter[str], name: str, value: Any) -> None:
        self.reads = reads
        self.name = name
        self.value = value

    def __get__(self, instance: Any, owner: Any = None) -> Any:
        if instance is not None:
            self.reads[self.name] += 1
        return self.value


@pytest.fixture
def default_reads(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    reads: Counter[str] = Counter()
    for cls in (Delivery, Link, Sender, Receiver):
        for name, value in list(vars(cls).items()):
            if name.startswith("__") or name.isupper() or callable(value) or hasattr(value, "__get__"):
                continue
            monkeypatch.setattr(cls, name, _CountedDefault(reads, f"{cls.__name__}.{name}", value))
    return reads


def _send_accept_settle(count: int) -> int:
    """``count`` messages sent, accepted and settled by the receiver, then settled by the sender; how many."""
    log: list[tuple[Any, ...]] = []
    client = Side("a", "amqp_async.proton", False, log)
    server = Side("b", "amqp_async.proton", True, log)
    client.bind()
    server.bind()
    client.connection.open()
    session = client.connection.session()
    session.open()
    sender = session.sender("sender")
    sender.target.address = "q"
    sender.open()
    pump(client, server)
    server.connection.open()
    opened = proton.Endpoint.LOCAL_UNINIT | proton.Endpoint.REMOTE_ACTIVE
    server.connection.session_head(opened).open()
    receiver = server.connection.link_head(opened)
    receiver.target.copy(receiver.remote_target)
    receiver.open()
    receiver.flow(count)
    pump(client, server)
    for number in range(count):
        sender.delivery(b"%d" % number)
        sender.send(b"x" * 100)
        sender.advance()
    pump(client, server)
    for event in server.drain():
        delivery = event.delivery
        if event.type == proton.Event.DELIVERY and delivery.readable and not delivery.partial:
            receiver.recv(delivery.pending)
            delivery.update(proton.Delivery.ACCEPTED)
            delivery.settle()
    pump(client, server)
    settled = 0
    for event in client.drain():
        delivery = event.delivery
        if event.type == proton.Event.DELIVERY and delivery.remote_state == proton.Delivery.ACCEPTED:
            delivery.settle()
            settled += 1
    pump(client, server)
    return settled


def test_no_class_default_is_read_per_message(default_reads: Counter[str]) -> None:
    assert _send_accept_settle(MESSAGES) == MESSAGES
    # Each DELIVERY event's ``event.delivery`` checks its context's ``_is_delivery`` (a constant of the class, read
    # by getattr on any context): the program's own two a message. Nothing else is read per message.
    per_message = {name: reads for name, reads in default_reads.items() if reads >= MESSAGES}
    assert per_message == {"Delivery._is_delivery": 2 * MESSAGES}
