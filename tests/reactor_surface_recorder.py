"""Programs that use the reactor's own surface, run on real Qpid Proton and on `amqp_async.proton` alike.

Used by ``tests/test_proton_reactor_surface.py``, which runs this file as a script, once per implementation and
program::

    python reactor_surface_recorder.py --impl proton --program global_tree
    python reactor_surface_recorder.py --impl amqp_async.proton --program global_tree

Each program is written once against the ``proton``, ``proton.handlers`` and ``proton.reactor`` modules it is given
and returns a JSON-able record of what it saw (which handler got which event, the address a reconnecting handler
read, what ``Container.run()`` raised...); the script prints it as one JSON line. The peers are those of
``callback_recorder.py`` (a real-proton listener that acts by link address, or a port nobody listens on).

What the programs exercise: ``Container`` as a ``Reactor`` (``super(Container, c).global_handler.add(...)``, as
proton's command-line clients do), the container's ``handler`` and ``global_handler`` trees, ``Container.connection``,
handlers on connections, sessions and links (proton's "nearest endpoint" rule, and its wrapping of a handler that is
not a ``Handler``), and reconnection: lists of delays, old-protocol policies (``reset()``/``next()``), ``Backoff``,
``reconnect=False``, failover across ``urls`` and the connected address after each attempt.

Recorded events leave out what follows I/O batching or timing, as ``callback_recorder.py`` does: ``on_transport``,
``on_link_flow``, ``on_reactor_quiesced`` and ``on_selectable_*``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import socket
import sys
import threading
import traceback
from collections.abc import Callable
from typing import Any

from callback_recorder import free_port, start_peer

RUN_TIMEOUT = 15.0

_SKIPPED = ("on_transport", "on_link_flow", "on_reactor_quiesced")


def keep(method: str) -> bool:
    """Whether an event is recorded (see the module docstring)."""
    return method not in _SKIPPED and not method.startswith("on_selectable_")


class EventLog:
    """A plain handler (not a ``Handler``) that records, tagged, every event it is given."""

    def __init__(self, log: list[Any], tag: str) -> None:
        self.log = log
        self.tag = tag

    def on_unhandled(self, method: str, *args: Any) -> None:
        if keep(method):
            self.log.append([self.tag, method[3:]])


def _error(exc: BaseException) -> list[str]:
    return [type(exc).__name__, str(exc)]


def _labeller(urls: dict[str, str]) -> Callable[[Any], Any]:
    """Replace the ``host:port`` of each URL by its label in an address a program read."""

    def label(address: Any) -> Any:
        if address is None:
            return None
        text = str(address)
        for url, name in urls.items():
            text = text.replace(url, name)
        return text

    return label


def _dead_url() -> str:
    return f"127.0.0.1:{free_port()}"


def _dead_urls() -> tuple[str, str]:
    """Two different addresses where nothing listens. Two calls of :func:`_dead_url` may give the same port (the
    kernel can hand a released port out again at once), and the two URLs' labels then merge: both ports are held
    until both are chosen."""
    with socket.socket() as one, socket.socket() as other:
        one.bind(("127.0.0.1", 0))
        other.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{one.getsockname()[1]}", f"127.0.0.1:{other.getsockname()[1]}"


# ---------------------------------------------------------------------------------------------------------------
# Programs


def global_tree(proton: Any, handlers: Any, reactor: Any) -> dict[str, Any]:
    """A command-line client's shape: ``super(Container, container).global_handler.add(...)`` before ``run()``;
    the global handler sees every event, after the application's handler."""
    peer = start_peer()
    log: list[Any] = []

    class App(handlers.MessagingHandler):  # type: ignore[name-defined,misc]
        sent = False

        def on_start(self, event: Any) -> None:
            conn = event.container.connect(peer.url, reconnect=False)
            event.container.create_sender(conn, "queue-a", name="snd")

        def on_sendable(self, event: Any) -> None:
            if not self.sent:
                self.sent = True
                event.sender.send(proton.Message(body="x"))

        def on_accepted(self, event: Any) -> None:
            log.append(["app", "accepted"])
            event.connection.close()

    container = reactor.Container(App())
    base = super(reactor.Container, container)
    base.global_handler.add(EventLog(log, "global"))
    record: dict[str, Any] = {
        "is_reactor": isinstance(container, importlib.import_module(proton.__name__ + "._reactor").Reactor),
        "global_is_handler": isinstance(container.global_handler, proton.Handler),
        "same_global": base.global_handler is container.global_handler,
        "root_children": len(container.handler.handlers),
    }
    container.run()
    peer.wait_done()
    record["events"] = log
    return record


def errors_handler(proton: Any, handlers: Any, reactor: Any) -> dict[str, Any]:
    """cli-proton-python's ErrorsHandler: a global handler whose ``on_unhandled`` raises on a link the peer
    refused; ``run()`` raises it, after the application's own callback."""
    peer = start_peer()
    log: list[Any] = []

    class ClientError(Exception):
        pass

    class ErrorsHandler:
        def on_unhandled(self, name: str, event: Any) -> None:
            if name == "on_link_remote_close" and event.link.remote_condition:
                condition = event.link.remote_condition
                raise ClientError(f"Link error: {condition.name} {condition.description}")

    class App(handlers.MessagingHandler):  # type: ignore[name-defined,misc]
        def on_start(self, event: Any) -> None:
            conn = event.container.connect(peer.url, reconnect=False)
            event.container.create_sender(conn, "refuse", name="snd")

        def on_link_error(self, event: Any) -> None:
            log.append(["app", "link_error"])

    container = reactor.Container(App())
    super(reactor.Container, container).global_handler.add(ErrorsHandler())
    error = None
    try:
        container.run()
    except ClientError as exc:
        error = _error(exc)
    peer.wait_done()
    return {"events": log, "error": error}


def barf(proton: Any, handlers: Any, reactor: Any) -> dict[str, Any]:
    """proton's own reactor exception tests: a handler that raises, set or added at each place a handler can be,
    makes ``run()`` raise."""

    class Barf(Exception):
        pass

    class BarfOnInit:
        def on_reactor_init(self, event: Any) -> None:
            raise Barf("reactor_init")

        def on_connection_init(self, event: Any) -> None:
            raise Barf("connection_init")

        def on_session_init(self, event: Any) -> None:
            raise Barf("session_init")

        def on_link_init(self, event: Any) -> None:
            raise Barf("link_init")

    class BarfOnTask:
        def on_timer_task(self, event: Any) -> None:
            raise Barf("timer_task")

    def global_set(c: Any) -> None:
        c.global_handler = BarfOnInit()

    def global_add(c: Any) -> None:
        c.global_handler.add(BarfOnInit())

    def global_super_add(c: Any) -> None:
        super(reactor.Container, c).global_handler.add(BarfOnInit())

    def reactor_set(c: Any) -> None:
        c.handler = BarfOnInit()

    def reactor_add(c: Any) -> None:
        c.handler.add(BarfOnInit())

    def connection(c: Any) -> None:
        c.connection(BarfOnInit())

    def connection_set(c: Any) -> None:
        c.connection().handler = BarfOnInit()

    def connection_add(c: Any) -> None:
        conn = c.connection()
        conn.handler = object()
        conn.handler.add(BarfOnInit())

    def session_set(c: Any) -> None:
        c.connection().session().handler = BarfOnInit()

    def session_add(c: Any) -> None:
        session = c.connection().session()
        session.handler = object()
        session.handler.add(BarfOnInit())

    def link_set(c: Any) -> None:
        c.connection().session().sender("xxx").handler = BarfOnInit()

    def link_add(c: Any) -> None:
        link = c.connection().session().receiver("xxx")
        link.handler = object()
        link.handler.add(BarfOnInit())

    def link_reset(c: Any) -> None:
        link = c.connection().session().sender("xxx")
        link.handler = BarfOnInit()
        link.handler = None  # back to the session's (none), the connection's (none), the container's

    def schedule(c: Any) -> None:
        c.schedule(0, BarfOnTask())

    cases = [
        global_set,
        global_add,
        global_super_add,
        reactor_set,
        reactor_add,
        connection,
        connection_set,
        connection_add,
        session_set,
        session_add,
        link_set,
        link_add,
        link_reset,
        schedule,
    ]
    outcome: dict[str, Any] = {}
    for case in cases:
        container = reactor.Container()
        case(container)
        try:
            container.run()
            outcome[case.__name__] = None
        except Barf as exc:
            outcome[case.__name__] = str(exc)
    wrapped = reactor.Container().connection()
    plain = object()
    wrapped.handler = plain
    outcome["wrapped"] = [
        isinstance(wrapped.handler, proton.Handler),
        list(wrapped.handler.handlers) == [plain],
    ]
    return outcome


def handler_tree(proton: Any, handlers: Any, reactor: Any) -> dict[str, Any]:
    """The container's handlers as a tree: constructor handlers, then added ones, each after its parent; a
    timer's own handler; a timer without one goes to the container's tree; replacing the root."""
    log: list[Any] = []
    first, second, third = EventLog(log, "first"), EventLog(log, "second"), EventLog(log, "third")
    container = reactor.Container(first, second)
    container.handler.add(third)
    record: dict[str, Any] = {
        "children": len(container.handler.handlers),
        "root_is_handler": isinstance(container.handler, proton.Handler),
    }
    container.schedule(0.01, EventLog(log, "task"))
    container.schedule(0.02, None)

    class Replace:
        def on_timer_task(self, event: Any) -> None:
            log.append(["replace", "timer_task"])
            event.container.handler = EventLog(log, "new-root")
            event.container.schedule(0.01, None)

    container.schedule(0.03, Replace())
    container.run()
    record["events"] = log
    return record


def scoped_handlers(proton: Any, handlers: Any, reactor: Any) -> dict[str, Any]:
    """Handlers on a connection, a session and a link (plain objects, which proton wraps): each event goes to the
    nearest endpoint's handler (link, session, connection), else to the container's."""
    peer = start_peer()
    log: list[Any] = []

    class LinkHandler(EventLog):
        sent = False

        def on_link_flow(self, event: Any) -> None:
            sender = event.sender
            if not self.sent and sender.credit:
                self.sent = True
                sender.send(proton.Message(body="x"))

        def on_delivery(self, event: Any) -> None:
            self.log.append([self.tag, "delivery"])
            delivery = event.delivery
            if delivery.remote_state:
                delivery.settle()
                event.connection.close()

    class Starter(EventLog):
        def on_reactor_init(self, event: Any) -> None:
            self.log.append([self.tag, "reactor_init"])
            conn = event.container.connect(peer.url, handler=EventLog(log, "connection"), reconnect=False)
            session = conn.session()
            session.handler = EventLog(log, "session")
            session.open()
            sender = session.sender("snd")
            sender.target.address = "queue-s"
            sender.handler = LinkHandler(log, "link")
            sender.open()
            record["wrapped"] = [
                isinstance(conn.handler, proton.Handler),
                type(conn.handler.handlers[0]).__name__,
                isinstance(sender.handler, proton.Handler),
            ]

    record: dict[str, Any] = {}
    reactor.Container(Starter(log, "container")).run()
    peer.wait_done()
    record["events"] = log
    return record


def _address(event: Any) -> Any:
    """The address of the event's connection (proton unbinds a dropped transport before its error event)."""
    connection = event.connection
    return None if connection is None else connection.connected_address


def _failover_app(handlers: Any, log: list[Any], label: Callable[[Any], Any], connect: Callable[[Any], Any]) -> Any:
    class App(handlers.MessagingHandler):  # type: ignore[name-defined,misc]
        opened = 0

        def on_start(self, event: Any) -> None:
            connect(event)

        def on_transport_error(self, event: Any) -> None:
            log.append(["transport_error", label(_address(event))])

        def on_disconnected(self, event: Any) -> None:
            log.append(["disconnected", label(_address(event))])

        def on_connection_opened(self, event: Any) -> None:
            connection = event.connection
            log.append(["opened", label(connection.connected_address), label(connection.hostname)])
            self.opened += 1
            if self.on_opened(event):
                connection.close()

        def on_opened(self, event: Any) -> bool:
            return True

        def on_connection_closed(self, event: Any) -> None:
            log.append(["closed"])

    return App


def reconnect_list(proton: Any, handlers: Any, reactor: Any) -> dict[str, Any]:
    """``urls=[dead, live]`` with ``reconnect`` a list of delays: the first URL fails, the second is tried after
    the first delay; each handler reads the address being tried."""
    peer = start_peer()
    dead = _dead_url()
    label = _labeller({dead: "dead", peer.url: "live"})
    log: list[Any] = []
    app = _failover_app(handlers, log, label, lambda e: e.container.connect(urls=[dead, peer.url], reconnect=[0.05]))
    reactor.Container(app()).run()
    peer.wait_done()
    return {"events": log}


def reconnect_urls_object(proton: Any, handlers: Any, reactor: Any) -> dict[str, Any]:
    """``urls`` given as proton's ``Urls`` (as cli-proton-python does), with a ``Backoff``."""
    peer = start_peer()
    dead = _dead_url()
    label = _labeller({dead: "dead", peer.url: "live"})
    log: list[Any] = []
    urls = importlib.import_module(proton.__name__ + "._reactor").Urls([dead, dead, peer.url])
    backoff = reactor.Backoff(initial=0.02, max_delay=0.05)
    app = _failover_app(handlers, log, label, lambda e: e.container.connect(urls=urls, reconnect=backoff))
    reactor.Container(app()).run()
    peer.wait_done()
    return {"events": log}


def reconnect_policy(proton: Any, handlers: Any, reactor: Any) -> dict[str, Any]:
    """An old-protocol policy (``reset()``, ``next()``) that gives up by raising, as cli-proton-python's
    ``CustomBackoff`` does: each delay covers both URLs, and ``run()`` raises the policy's exception."""
    first, second = _dead_urls()
    label = _labeller({first: "first", second: "second"})
    log: list[Any] = []

    class GaveUp(Exception):
        pass

    class Policy:
        def __init__(self) -> None:
            self.failed = 0

        def reset(self) -> None:
            log.append(["policy", "reset"])
            self.failed = 0

        def next(self) -> float:
            self.failed += 1
            log.append(["policy", "next", self.failed])
            if self.failed > 3:
                raise GaveUp(f"gave up after {self.failed - 1} delays")
            return 0.02

    app = _failover_app(handlers, log, label, lambda e: e.container.connect(urls=[first, second], reconnect=Policy()))
    error = None
    try:
        reactor.Container(app()).run()
    except GaveUp as exc:
        error = _error(exc)
    return {"events": log, "error": error}


def reconnect_iterable(proton: Any, handlers: Any, reactor: Any) -> dict[str, Any]:
    """A policy that is an iterable of delays (``__iter__`` only): the attempts end with it, and the connection
    gives up quietly."""
    first, second = _dead_urls()
    label = _labeller({first: "first", second: "second"})
    log: list[Any] = []

    class Delays:
        def __iter__(self) -> Any:
            log.append(["policy", "iter"])
            return iter([0.01, 0.02, 0.03])

    app = _failover_app(handlers, log, label, lambda e: e.container.connect(urls=[first, second], reconnect=Delays()))
    reactor.Container(app()).run()
    return {"events": log}


def reconnect_false(proton: Any, handlers: Any, reactor: Any) -> dict[str, Any]:
    """``reconnect=False`` with two URLs: only the first is tried."""
    peer = start_peer()
    dead = _dead_url()
    label = _labeller({dead: "dead", peer.url: "live"})
    log: list[Any] = []
    app = _failover_app(handlers, log, label, lambda e: e.container.connect(urls=[dead, peer.url], reconnect=False))
    reactor.Container(app()).run()
    return {"events": log}


def reconnect_after_drop(proton: Any, handlers: Any, reactor: Any) -> dict[str, Any]:
    """Connected to the first of two peers, the connection drops: the attempts start again from the first URL
    (after the first delay of the list), and the handler reads where it is connected now."""
    first, second = start_peer(), start_peer()
    label = _labeller({first.url: "first", second.url: "second"})
    log: list[Any] = []
    base = _failover_app(
        handlers, log, label, lambda e: e.container.connect(urls=[first.url, second.url], reconnect=[0.02, 0.05])
    )

    class App(base):  # type: ignore[valid-type,misc]
        def on_opened(self, event: Any) -> bool:
            if self.opened == 1:
                event.container.create_sender(event.connection, "vanish", name="snd")  # the peer drops it
                return False
            return True

    reactor.Container(App()).run()
    return {"events": log}


PROGRAMS: dict[str, Callable[[Any, Any, Any], dict[str, Any]]] = {
    program.__name__: program
    for program in (
        global_tree,
        errors_handler,
        barf,
        handler_tree,
        scoped_handlers,
        reconnect_list,
        reconnect_urls_object,
        reconnect_policy,
        reconnect_iterable,
        reconnect_false,
        reconnect_after_drop,
    )
}


def run(impl: str, name: str, timeout: float = RUN_TIMEOUT) -> None:
    proton = importlib.import_module(impl)
    handlers = importlib.import_module(impl + ".handlers")
    reactor = importlib.import_module(impl + ".reactor")

    def watchdog() -> None:
        sys.stdout.write(json.dumps({"error": f"timeout: still running after {timeout} s"}) + "\n")
        sys.stdout.flush()
        os._exit(3)

    timer = threading.Timer(timeout, watchdog)
    timer.daemon = True
    timer.start()
    try:
        result: dict[str, Any] = {"record": PROGRAMS[name](proton, handlers, reactor), "error": None}
    except BaseException:
        result = {"error": "program failed:\n" + traceback.format_exc()}
    timer.cancel()
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--impl", required=True)
    parser.add_argument("--program", required=True, choices=sorted(PROGRAMS))
    args = parser.parse_args(argv)
    run(args.impl, args.program)
    os._exit(0)  # peers run in daemon threads


if __name__ == "__main__":
    main()
