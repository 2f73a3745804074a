"""A container's transports and events as proton's, beside python-qpid-proton: the same program on each
implementation (a listener and a client of that implementation, in one container), the same record.

Covered: a transport's ``idle_timeout`` set in ``on_connection_bound`` (a client's, before it connects: the peer
sends heartbeats; an accepted connection's: a client that goes quiet is closed with
``amqp:resource-limit-exceeded``), frame counters, event attributes read from the event's context
(``event.connected_address``), handler trees whose ``handlers`` is a tuple, ``event.handler`` of the container's
own events, and an acceptor closed between a stepping container's ``process()`` calls.
"""

from __future__ import annotations

import importlib
import socket
import time
from typing import Any

import pytest
from callback_recorder import free_port

pytest.importorskip("proton")

IMPLEMENTATIONS = ["proton", "amqp_async.proton"]


def _modules(name: str) -> tuple[Any, Any, Any]:
    base = importlib.import_module(name)
    return base, importlib.import_module(name + ".handlers"), importlib.import_module(name + ".reactor")


def keepalive_from_the_peer(name: str) -> list[Any]:
    """A client sets its transport's idle_timeout when the connection is bound: the server keeps it alive with
    heartbeats (the client's frame count grows while nothing else is sent)."""
    _, handlers, reactor = _modules(name)
    port = free_port()
    record: list[Any] = []

    class Client:
        def on_connection_bound(self, event: Any) -> None:
            event.transport.idle_timeout = 0.4

        def on_connection_remote_open(self, event: Any) -> None:
            self.connection = event.connection
            self.frames = event.transport.frames_input
            event.container.schedule(1.5, self)

        def on_timer_task(self, event: Any) -> None:
            transport = self.connection.transport
            record.append((self.connection.state, transport.frames_input - self.frames >= 3))
            record.append(transport.remote_idle_timeout)
            self.connection.close()

    class Server(handlers.MessagingHandler):  # type: ignore[misc]
        def on_start(self, event: Any) -> None:
            self.acceptor = event.container.listen(f"127.0.0.1:{port}")
            event.container.connect(f"127.0.0.1:{port}", handler=Client())

        def on_connection_closed(self, event: Any) -> None:
            self.acceptor.close()

    reactor.Container(Server()).run()
    return record


def quiet_client_closed(name: str) -> list[Any]:
    """An accepted connection's idle_timeout, set when it is bound, is enforced: a client that sends nothing for
    longer (here it blocks in a callback) is closed with amqp:resource-limit-exceeded."""
    _, handlers, reactor = _modules(name)
    port = free_port()
    record: list[Any] = []

    class Client(handlers.MessagingHandler):  # type: ignore[misc]
        def on_connection_opened(self, event: Any) -> None:
            record.append(event.transport.remote_idle_timeout > 0)
            time.sleep(1.5)  # nothing is sent meanwhile

        def on_connection_error(self, event: Any) -> None:
            condition = event.connection.remote_condition
            record.append(None if condition is None else str(condition.name))
            event.connection.close()

    class Server(handlers.MessagingHandler):  # type: ignore[misc]
        def on_start(self, event: Any) -> None:
            self.acceptor = event.container.listen(f"127.0.0.1:{port}")
            event.container.connect(f"127.0.0.1:{port}", handler=Client())

        def on_connection_bound(self, event: Any) -> None:
            event.transport.idle_timeout = 0.3

        def on_connection_closed(self, event: Any) -> None:
            self.acceptor.close()

        def on_transport_closed(self, event: Any) -> None:
            self.acceptor.close()

    reactor.Container(Server()).run()
    return record


def attributes_and_handler_trees(name: str) -> list[Any]:
    """Attributes an event does not have are read from its context (``event.connected_address``); a handler's
    ``handlers`` may be a tuple; ``event.handler`` of the container's events is the container's handler."""
    mod, handlers, reactor = _modules(name)
    port = free_port()
    record: list[Any] = []
    custom = mod.EventType("custom_check")

    class Leaf:
        def on_custom_check(self, event: Any) -> None:
            record.append("leaf")

    class Root:
        def __init__(self) -> None:
            self.handlers = (Leaf(),)

        def on_reactor_init(self, event: Any) -> None:
            record.append(event.handler is event.container.handler)
            event.dispatch(event.handler, custom)

        def on_custom_check(self, event: Any) -> None:
            record.append("root")

    class Server(handlers.MessagingHandler):  # type: ignore[misc]
        def on_start(self, event: Any) -> None:
            self.acceptor = event.container.listen(f"127.0.0.1:{port}")
            event.container.connect(f"127.0.0.1:{port}", handler=Client())

        def on_connection_closed(self, event: Any) -> None:
            self.acceptor.close()

    class Client(handlers.MessagingHandler):  # type: ignore[misc]
        def on_connection_opened(self, event: Any) -> None:
            record.append(event.connected_address == f"amqp://127.0.0.1:{port}")
            record.append(event.connection is event.context)
            event.connection.close()

    container = reactor.Container(Server())
    container.handler.add(Root())
    container.run()
    return record


def acceptor_closed_between_steps(name: str) -> list[Any]:
    """An acceptor closed between a stepping container's process() calls stops listening at the next one."""
    _, _, reactor = _modules(name)
    port = free_port()
    container = reactor.Container()
    container.timeout = 0.05
    container.start()
    acceptor = container.acceptor("127.0.0.1", port)
    record: list[Any] = []
    for _ in range(3):
        container.process()
    record.append(_connects(port))
    acceptor.close()
    steps = 0
    while container.process() and steps < 100:
        steps += 1
    record.append(steps < 100)
    record.append(_connects(port))
    container.stop()
    container.process()
    return record


def _connects(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return True
    except OSError:
        return False


PROGRAMS = {
    "keepalive_from_the_peer": keepalive_from_the_peer,
    "quiet_client_closed": quiet_client_closed,
    "attributes_and_handler_trees": attributes_and_handler_trees,
    "acceptor_closed_between_steps": acceptor_closed_between_steps,
}


@pytest.fixture(scope="module")
def references() -> dict[str, Any]:
    return {name: program("proton") for name, program in PROGRAMS.items()}


@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_same_record_as_proton(program: str, references: dict[str, Any]) -> None:
    assert PROGRAMS[program]("amqp_async.proton") == references[program]


def test_references_show_what_the_programs_claim(references: dict[str, Any]) -> None:
    assert references["keepalive_from_the_peer"][0] == (18, True)
    assert references["quiet_client_closed"] == [True, "amqp:resource-limit-exceeded"]
    assert references["attributes_and_handler_trees"] == [True, "root", "leaf", True, True]
    assert references["acceptor_closed_between_steps"] == [True, True, False]
