"""Record the `MessagingHandler` callbacks a program sees, on real Qpid Proton and on `amqp_async.proton` alike.

Used by ``tests/test_proton_callbacks.py``, which runs this file as a script, once per implementation and scenario::

    python callback_recorder.py --impl proton --scenario send_n
    python callback_recorder.py --impl amqp_async.proton --scenario send_n

and prints one JSON object: the callbacks the recording handler saw (``calls``), the raw core events that reached
its ``on_unhandled`` (``unhandled``), what the peer saw (``peer``), and an ``error`` (an exception that escaped
``Container.run()``, or a timeout) if any. Each run is a fresh process: a hang or a crash of one implementation
cannot touch the other, and a watchdog prints what was recorded so far and exits when the scenario overruns.

The program under test is written once, as a `Scenario` taking the three modules (``proton``, ``proton.handlers``,
``proton.reactor``) of the implementation as parameters; nothing in a scenario names an implementation.

The peer is always independent of the implementation under test: a real-proton listener (`ScriptedPeer`, a
`proton.reactor.Container` in a thread of the same process) whose behaviour is chosen by the address a link
attaches to, our embedded broker (`amqp_async.broker.BrokerThread`: the SASL scenario, as proton's wheel cannot
check passwords), a real-proton *client* (the listener scenario), a bare socket that hangs up, or nothing at all
(connection refused, timers).

What is recorded for each callback (only properties that are stable from run to run, see `describe`):

* endpoints: the link name and role, and the remote condition (name and description: set by the same peer on
  both runs, so equal);
* deliveries: link name, delivery tag, the remote state's name (``ACCEPTED``, ``RELEASED``, ``MODIFIED``...),
  the remote settled flag, a rejection's condition; messages: link name, tag and body;
* transport errors: the condition *name* only (the description is written by the local implementation: socket
  error texts, addresses);
* never credit at ``on_sendable`` (it depends on how the peer's flow frames were batched) nor anything with a time,
  a port or a generated id in it.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any, ClassVar

#: The MessagingHandler callbacks recorded as ``calls``.
CALLBACKS = (
    "on_start",
    "on_connection_opening",
    "on_connection_opened",
    "on_connection_closing",
    "on_connection_closed",
    "on_connection_error",
    "on_session_opening",
    "on_session_opened",
    "on_session_closing",
    "on_session_closed",
    "on_session_error",
    "on_link_opening",
    "on_link_opened",
    "on_link_closing",
    "on_link_closed",
    "on_link_error",
    "on_sendable",
    "on_message",
    "on_accepted",
    "on_rejected",
    "on_released",
    "on_settled",
    "on_disconnected",
    "on_transport_error",
    "on_timer_task",
)

RUN_TIMEOUT = 10.0  # seconds for one scenario, watchdog inside the process
PEER_SETTLE_TIMEOUT = 3.0  # seconds to wait for the peer to see the end of the conversation


# ---------------------------------------------------------------------------------------------------------------
# Describing events (works on either implementation: only public proton API)


def _cond(condition: Any) -> list[Any] | None:
    if condition is None:
        return None
    description = getattr(condition, "description", None)
    return [str(condition.name), None if description is None else str(description)]


def _tag(delivery: Any) -> str | None:
    try:
        tag = delivery.tag
    except Exception as exc:  # proton decodes tags as UTF-8
        return f"<tag error {type(exc).__name__}>"
    if isinstance(tag, (bytes, bytearray, memoryview)):
        return bytes(tag).decode("utf-8", "replace")
    return None if tag is None else str(tag)


def _body(message: Any) -> Any:
    body = message.body
    if isinstance(body, (bytes, bytearray, memoryview)):
        return "bytes:" + bytes(body).hex()
    if body is None or isinstance(body, (str, int, float, bool)):
        return body
    return repr(body)


def _state_name(proton: Any, state: Any) -> str | None:
    names = {
        proton.Delivery.ACCEPTED: "ACCEPTED",
        proton.Delivery.REJECTED: "REJECTED",
        proton.Delivery.RELEASED: "RELEASED",
        proton.Delivery.MODIFIED: "MODIFIED",
        proton.Delivery.RECEIVED: "RECEIVED",
    }
    if not state:
        return None
    for key, name in names.items():
        if state == key:
            return name
    return f"<state {state!r}>"


def _link(link: Any) -> list[Any]:
    return [link.name, "sender" if link.is_sender else "receiver"]


def describe(proton: Any, name: str, event: Any) -> list[Any]:
    """The stable properties of ``event`` for callback ``name``: a JSON-able list starting with the name."""
    if name == "on_start":
        return [name]
    # The remote condition only where it belongs: at *_opening / *_opened it is set only when the peer's closing
    # frame happened to arrive in the same read as its opening one (batching), so it is not recorded there.
    closing = name.endswith(("_closing", "_closed", "_error"))
    if name.startswith("on_connection_"):
        return [name, _cond(event.connection.remote_condition)] if closing else [name]
    if name.startswith("on_session_"):
        return [name, _cond(event.session.remote_condition)] if closing else [name]
    if name.startswith("on_link_"):
        link = [name, *_link(event.link)]
        return [*link, _cond(event.link.remote_condition)] if closing else link
    if name == "on_sendable":
        return [name, *_link(event.link)]
    if name == "on_message":
        return [name, event.link.name, _tag(event.delivery), _body(event.message)]
    if name in ("on_accepted", "on_rejected", "on_released", "on_settled"):
        dlv = event.delivery
        out = [name, dlv.link.name, _tag(dlv), _state_name(proton, dlv.remote_state), bool(dlv.settled)]
        if name == "on_rejected":
            out.append(_cond(dlv.remote.condition))
        return out
    if name == "on_transport_error":
        condition = event.transport.condition
        return [name, None if condition is None else str(condition.name)]
    if name == "on_disconnected":
        return [name]
    if name == "on_timer_task":
        return [name, "self"]
    return [name]


#: Raw events kept from ``on_unhandled``: the engine's core events. Left out, as they are not part of what a
#: handler can rely on and vary between runs of real proton itself: ``on_transport`` (raised whenever the
#: transport has new output pending: its count follows how writes were batched), ``on_reactor_quiesced``
#: (raised each time the reactor goes idle: timing) and ``on_selectable_*`` (proton's own socket bookkeeping).
def keep_unhandled(method: str) -> bool:
    if method in ("on_transport",):
        return False
    return method.startswith(("on_connection_", "on_session_", "on_link_", "on_delivery", "on_transport_"))


def describe_unhandled(method: str, args: tuple[Any, ...]) -> list[Any]:
    out: list[Any] = [method]
    event = args[0] if args else None
    if event is None:
        return out
    if method.startswith("on_link_") or method == "on_delivery":
        link = getattr(event, "link", None)
        if link is not None:
            out.extend(_link(link))
    return out


# ---------------------------------------------------------------------------------------------------------------
# The recording handler (made per implementation: it subclasses that implementation's MessagingHandler)


def make_recorder(proton: Any, handlers: Any, reactor: Any, scenario: Scenario, **options: Any) -> Any:
    """A `MessagingHandler` subclass instance of ``handlers`` that records every callback, then lets the scenario
    act (``scenario.<callback>(recorder, event)``), then runs the base class's default (which e.g. closes the
    connection after ``on_link_error``), unless the scenario lists the callback in ``overrides``."""
    base = handlers.MessagingHandler

    def make(name: str) -> Callable[..., None]:
        def callback(self: Any, event: Any) -> None:
            self.calls.append(describe(proton, name, event))
            hook = getattr(scenario, name, None)
            if hook is not None:
                hook(self, event)
            default = getattr(base, name, None)
            if default is not None and name not in scenario.overrides:
                default(self, event)

        callback.__name__ = name
        return callback

    namespace: dict[str, Any] = {name: make(name) for name in CALLBACKS}

    def __init__(self: Any) -> None:
        base.__init__(self, **options)
        self.calls = []
        self.unhandled = []
        self.state = {}

    def on_unhandled(self: Any, method: str, *args: Any) -> None:
        if keep_unhandled(method):
            self.unhandled.append(describe_unhandled(method, args))

    namespace["__init__"] = __init__
    namespace["on_unhandled"] = on_unhandled
    return type("Recorder", (base,), namespace)()


# ---------------------------------------------------------------------------------------------------------------
# The real-proton peer


OUTCOME_BODIES = ("accept", "reject", "release", "modify")


def start_peer(behaviour: dict[str, Any] | None = None) -> ScriptedPeer:
    peer = ScriptedPeer(behaviour or {})
    peer.start()
    return peer


class ScriptedPeer:
    """A real-proton listener in a thread, acting by the address a link attaches to:

    * ``refuse``: answer the attach, then detach (closed) with ``amqp:not-found`` "no such node";
    * ``detach``: answer, then detach (closed) without an error;
    * ``end-session``: answer, then end the session with ``amqp:internal-error`` "session ended by peer";
    * ``close-connection``: answer, then close the connection with ``amqp:internal-error`` "connection closed by
      peer";
    * ``forced``: answer, then close the connection with ``amqp:connection:forced`` "shutting down";
    * ``vanish``: answer, then drop the TCP connection with no close frame;
    * ``src-N`` (the client receives): send N messages, bodies ``m-0`` ...; ``outbound[address]`` overrides them;
    * anything else (the client sends): grant 10 credit once (``credit`` overrides); each message gets the
      outcome its body names (``reject``: ``amqp:precondition-failed`` "rejected by peer"; ``release``;
      ``modify``: delivery-failed); any other body is accepted; the peer settles at once.

    ``records`` is what the peer saw, as stable JSON-able lists (its own callbacks: attach, message, outcome,
    detach, close; ``closed`` once both ends closed cleanly, i.e. the client's close frame arrived;
    ``transport_error``; with ``record_credit``, the credit at each send).
    """

    def __init__(self, behaviour: dict[str, Any]) -> None:
        import proton
        from proton.handlers import MessagingHandler
        from proton.reactor import Container

        self.behaviour = behaviour
        self.records: list[list[Any]] = []
        self.done = threading.Event()
        peer = self

        class Handler(MessagingHandler):
            def __init__(self) -> None:
                super().__init__(prefetch=0, auto_accept=False, auto_settle=True)

            def on_start(self, event: Any) -> None:
                event.container.timeout = 0.1

            def on_link_opening(self, event: Any) -> None:
                link = event.link
                link.source.copy(link.remote_source)
                link.target.copy(link.remote_target)
                address = link.remote_source.address if link.is_sender else link.remote_target.address
                link._peer_address = address
                peer.records.append(["attach", link.name, "sender" if link.is_sender else "receiver", address])

            def on_link_opened(self, event: Any) -> None:
                link = event.link
                address = getattr(link, "_peer_address", None)
                if address is None:
                    return
                if address == "refuse":
                    link.condition = proton.Condition("amqp:not-found", "no such node")
                    link.close()
                elif address == "detach":
                    link.close()
                elif address == "end-session":
                    link.session.condition = proton.Condition("amqp:internal-error", "session ended by peer")
                    link.session.close()
                elif address == "close-connection":
                    link.connection.condition = proton.Condition("amqp:internal-error", "connection closed by peer")
                    link.connection.close()
                elif address == "forced":
                    link.connection.condition = proton.Condition("amqp:connection:forced", "shutting down")
                    link.connection.close()
                    self.drop_later(event)
                elif address == "vanish":
                    self.drop_later(event)
                elif link.is_sender:
                    if address in peer.behaviour.get("outbound", {}):
                        bodies = list(peer.behaviour["outbound"][address])
                    elif address.startswith("src-"):
                        bodies = [f"m-{i}" for i in range(int(address[4:]))]
                    else:
                        bodies = []
                    link._peer_queue = bodies
                    self.pump(link)
                else:
                    link.flow(peer.behaviour.get("credit", 10))

            def drop_later(self, event: Any) -> None:
                # Closing the transport at once would drop the frames not yet written (the answering attach):
                # drop the TCP connection (no close frame) once they have gone out.
                transport = event.transport

                class Drop:
                    def on_timer_task(self, _event: Any) -> None:
                        peer.records.append(["dropped"])
                        transport.close_tail()
                        transport.close_head()

                event.container.schedule(0.2, Drop())

            def pump(self, link: Any) -> None:
                queue = getattr(link, "_peer_queue", None)
                while queue and link.credit > 0:
                    body = queue.pop(0)
                    if peer.behaviour.get("record_credit"):
                        peer.records.append(["send", body, link.credit])
                    link.send(proton.Message(body=body))

            def on_sendable(self, event: Any) -> None:
                self.pump(event.link)

            def on_message(self, event: Any) -> None:
                body = event.message.body
                dlv = event.delivery
                peer.records.append(["message", event.link.name, body, bool(dlv.settled)])
                if dlv.settled:
                    return
                if body == "reject":
                    dlv.local.condition = proton.Condition("amqp:precondition-failed", "rejected by peer")
                    dlv.update(proton.Delivery.REJECTED)
                elif body == "release":
                    dlv.update(proton.Delivery.RELEASED)
                elif body == "modify":
                    dlv.local.failed = True
                    dlv.update(proton.Delivery.MODIFIED)
                else:
                    dlv.update(proton.Delivery.ACCEPTED)
                dlv.settle()

            def _outcome(self, event: Any) -> None:
                dlv = event.delivery
                peer.records.append(
                    ["outcome", dlv.link.name, _tag(dlv), _state_name(proton, dlv.remote_state), bool(dlv.settled)]
                )

            on_accepted = on_rejected = on_released = _outcome

            def on_link_closing(self, event: Any) -> None:
                peer.records.append(["detach", event.link.name, None])

            def on_link_error(self, event: Any) -> None:  # default: closes the connection
                peer.records.append(["detach", event.link.name, _cond(event.link.remote_condition)])

            def on_session_error(self, event: Any) -> None:  # default: closes the connection
                peer.records.append(["end", _cond(event.session.remote_condition)])

            def on_connection_closing(self, event: Any) -> None:
                peer.records.append(["close", None])

            def on_connection_error(self, event: Any) -> None:
                peer.records.append(["close", _cond(event.connection.remote_condition)])

            def on_connection_closed(self, event: Any) -> None:
                peer.records.append(["closed"])  # both ends closed cleanly: the client's close frame came
                peer.done.set()

            def on_transport_error(self, event: Any) -> None:
                condition = event.transport.condition
                peer.records.append(["transport_error", None if condition is None else str(condition.name)])

            def on_transport_closed(self, event: Any) -> None:
                peer.done.set()

        self.container = Container(Handler())
        self.acceptor = self.container.listen("127.0.0.1:0")
        self.port = int(self.acceptor._selectable.getsockname()[1])
        self.url = f"127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.container.run, name="scripted-peer", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def wait_done(self, timeout: float = PEER_SETTLE_TIMEOUT) -> None:
        self.done.wait(timeout)
        time.sleep(0.05)  # let it record the last frames it read together with the close


class PeerClient:
    """A real-proton client in a thread (for the listener scenario): connects to ``url``, sends ``inbox_bodies``
    on a sender to ``inbox``; once all are accepted opens a receiver from ``outbox``; after ``expect_replies``
    messages, closes the connection. Records what it saw in ``records``."""

    def __init__(self, url: str, inbox_bodies: list[str], expect_replies: int) -> None:
        import proton
        from proton.handlers import MessagingHandler
        from proton.reactor import Container

        self.records: list[list[Any]] = []
        self.done = threading.Event()
        client = self

        class Handler(MessagingHandler):
            def __init__(self) -> None:
                super().__init__(prefetch=10)
                self.pending = list(inbox_bodies)
                self.accepted = 0
                self.replies = 0

            def on_start(self, event: Any) -> None:
                event.container.timeout = 0.1
                event.container.connect(url)

            # One step at a time, each after the server answered the previous one, so that what the server sees
            # does not depend on how our frames were batched into reads.
            def on_connection_opened(self, event: Any) -> None:
                event.connection.session().open()

            def on_session_opened(self, event: Any) -> None:
                event.container.create_sender(event.session, "inbox", name="peer-snd")
                self.session = event.session

            def on_sendable(self, event: Any) -> None:
                while self.pending and event.sender.credit:
                    event.sender.send(proton.Message(body=self.pending.pop(0)))

            def on_accepted(self, event: Any) -> None:
                client.records.append(["accepted", _tag(event.delivery)])
                self.accepted += 1
                if self.accepted == len(inbox_bodies):
                    event.container.create_receiver(self.session, "outbox", name="peer-rcv")

            def on_message(self, event: Any) -> None:
                client.records.append(["message", event.message.body])
                self.replies += 1
                if self.replies == expect_replies:
                    event.connection.close()

            def on_connection_closed(self, event: Any) -> None:
                client.records.append(["closed"])
                client.done.set()

            def on_transport_error(self, event: Any) -> None:
                client.records.append(["transport_error", str(event.transport.condition.name)])

        self.container = Container(Handler())
        self.thread = threading.Thread(target=self.container.run, name="peer-client", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def wait_done(self, timeout: float = PEER_SETTLE_TIMEOUT) -> None:
        self.done.wait(timeout)


class Hangup:
    """A bare TCP listener that accepts one connection, reads the client's first bytes and closes the socket."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(1)
        self.url = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.records: list[list[Any]] = []
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        conn, _ = self.sock.accept()
        conn.settimeout(2.0)
        try:
            data = conn.recv(8)
            self.records.append(["header", data[:4].decode("ascii", "replace")])
        except OSError:
            pass
        conn.close()
        self.sock.close()

    def start(self) -> None:
        self.thread.start()

    def wait_done(self, timeout: float = PEER_SETTLE_TIMEOUT) -> None:
        self.thread.join(timeout)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# ---------------------------------------------------------------------------------------------------------------
# Scenarios: each written once, against the modules it is given


class Scenario:
    """A program under test. ``handler_options`` go to the MessagingHandler constructor; the methods named like
    callbacks are called after the callback was recorded; ``overrides`` lists callbacks whose base-class default
    must not run. `setup` starts the peer and returns it (with ``url``, ``records``, ``wait_done``)."""

    handler_options: ClassVar[dict[str, Any]] = {}
    overrides: frozenset[str] = frozenset()

    def __init__(self, proton: Any, handlers: Any, reactor: Any) -> None:
        self.proton, self.handlers, self.reactor = proton, handlers, reactor
        self.peer: Any = None

    def setup(self) -> Any:
        return start_peer()

    def connect(self, rec: Any, event: Any, **options: Any) -> Any:
        options.setdefault("reconnect", False)
        return event.container.connect(self.peer.url, **options)


class SendN(Scenario):
    """Send N messages as credit allows; close the connection when N are accepted (simple_send)."""

    N = 5

    def on_start(self, rec: Any, event: Any) -> None:
        rec.state.update(sent=0, confirmed=0)
        conn = self.connect(rec, event)
        event.container.create_sender(conn, "queue-a", name="snd")

    def on_sendable(self, rec: Any, event: Any) -> None:
        while event.sender.credit and rec.state["sent"] < self.N:
            event.sender.send(self.proton.Message(id=rec.state["sent"] + 1, body=f"msg-{rec.state['sent']}"))
            rec.state["sent"] += 1

    def on_accepted(self, rec: Any, event: Any) -> None:
        rec.state["confirmed"] += 1
        if rec.state["confirmed"] == self.N:
            event.connection.close()


class OnePerSendable(SendN):
    """Send one message per on_sendable (a common pattern): proton raises on_sendable again after each transfer
    is written while credit remains, so all N go out and are accepted; an implementation that raises it only
    when a flow frame arrives stalls after the first (and the run times out)."""

    def on_sendable(self, rec: Any, event: Any) -> None:
        if event.sender.credit and rec.state["sent"] < self.N:
            event.sender.send(self.proton.Message(id=rec.state["sent"] + 1, body=f"msg-{rec.state['sent']}"))
            rec.state["sent"] += 1


class ReceiveN(Scenario):
    """Receive N messages with auto_accept; close the connection after the Nth (simple_recv)."""

    N = 5

    def on_start(self, rec: Any, event: Any) -> None:
        rec.state["received"] = 0
        conn = self.connect(rec, event)
        event.container.create_receiver(conn, f"src-{self.N}", name="rcv")

    def on_message(self, rec: Any, event: Any) -> None:
        rec.state["received"] += 1
        if rec.state["received"] == self.N:
            event.connection.close()


class ManualOutcomes(Scenario):
    """auto_accept=False: accept, reject, release(delivered=False) and release(delivered=True) four messages, then
    close the connection; the peer (a real-proton sender) records the outcomes (ACCEPTED, REJECTED, RELEASED,
    MODIFIED): the dispositions go out before the close frame."""

    handler_options: ClassVar[dict[str, Any]] = {"auto_accept": False}

    def on_start(self, rec: Any, event: Any) -> None:
        rec.state["received"] = 0
        conn = self.connect(rec, event)
        event.container.create_receiver(conn, "src-4", name="rcv")

    def on_message(self, rec: Any, event: Any) -> None:
        index = rec.state["received"]
        rec.state["received"] += 1
        if index == 0:
            rec.accept(event.delivery)
        elif index == 1:
            rec.reject(event.delivery)
        elif index == 2:
            rec.release(event.delivery, delivered=False)
        else:
            rec.release(event.delivery, delivered=True)
            event.connection.close()


class SenderOutcomes(Scenario):
    """The peer accepts, rejects, releases and modifies four messages: the sender sees on_accepted, on_rejected
    (with the peer's condition), on_released (RELEASED) and on_released (MODIFIED), each followed by on_settled.

    One message at a time (the next is sent from on_settled): a proton peer writes the dispositions of deliveries
    it read together in an order of its own (2, 1, 4, 3 for these four), which would make the order of the
    callbacks depend on how the sender's transfers were batched into reads."""

    def on_start(self, rec: Any, event: Any) -> None:
        rec.state.update(sent=0, outcomes=0)
        conn = self.connect(rec, event)
        event.container.create_sender(conn, "queue-b", name="snd")

    def send_next(self, rec: Any, sender: Any) -> None:
        if sender.credit and rec.state["sent"] == rec.state["outcomes"] < len(OUTCOME_BODIES):
            sender.send(self.proton.Message(body=OUTCOME_BODIES[rec.state["sent"]]))
            rec.state["sent"] += 1

    def on_sendable(self, rec: Any, event: Any) -> None:
        self.send_next(rec, event.sender)

    def on_settled(self, rec: Any, event: Any) -> None:
        rec.state["outcomes"] += 1
        if rec.state["outcomes"] == len(OUTCOME_BODIES):
            event.connection.close()
        else:
            self.send_next(rec, event.link)


class AutoSettleOff(Scenario):
    """auto_settle=False: the sender settles nothing by itself. ``Link.unsettled`` at each on_accepted shows it
    (recorded as an extra ``unsettled`` entry); the handler settles everything itself at the end."""

    handler_options: ClassVar[dict[str, Any]] = {"auto_settle": False}
    N = 3

    def on_start(self, rec: Any, event: Any) -> None:
        rec.state.update(sent=0, confirmed=0, deliveries=[])
        conn = self.connect(rec, event)
        event.container.create_sender(conn, "queue-c", name="snd")

    def on_sendable(self, rec: Any, event: Any) -> None:
        while event.sender.credit and rec.state["sent"] < self.N:
            rec.state["deliveries"].append(event.sender.send(self.proton.Message(body=f"s-{rec.state['sent']}")))
            rec.state["sent"] += 1

    def on_accepted(self, rec: Any, event: Any) -> None:
        rec.calls.append(["unsettled", event.link.unsettled])

    def on_settled(self, rec: Any, event: Any) -> None:
        rec.state["confirmed"] += 1
        if rec.state["confirmed"] == self.N:
            rec.calls.append(["unsettled", event.link.unsettled])
            for dlv in rec.state["deliveries"]:
                dlv.settle()
            rec.calls.append(["unsettled", event.link.unsettled])
            event.connection.close()


class AutoSettleOn(AutoSettleOff):
    """The same program with auto_settle=True (the default): each delivery is settled after its on_settled."""

    handler_options: ClassVar[dict[str, Any]] = {"auto_settle": True}


class LinkRefused(Scenario):
    """The peer answers the attach and detaches with amqp:not-found: on_link_error, whose default closes the
    connection."""

    def on_start(self, rec: Any, event: Any) -> None:
        conn = self.connect(rec, event)
        event.container.create_sender(conn, "refuse", name="snd")


class LinkRefusedHandled(Scenario):
    """A receiver refused the same way, by a handler that overrides on_link_error (so the default does not close
    the connection): once the link is closed it opens a sender on the same connection, sends one message and
    closes the connection when it is accepted."""

    overrides = frozenset({"on_link_error"})

    def on_start(self, rec: Any, event: Any) -> None:
        rec.state["sent"] = False
        conn = self.connect(rec, event)
        event.container.create_receiver(conn, "refuse", name="rcv")

    def on_link_closed(self, rec: Any, event: Any) -> None:
        if event.link.name == "rcv":
            event.container.create_sender(event.connection, "queue-g", name="snd")

    def on_sendable(self, rec: Any, event: Any) -> None:
        if not rec.state["sent"]:
            rec.state["sent"] = True
            event.sender.send(self.proton.Message(body="after-error"))

    def on_accepted(self, rec: Any, event: Any) -> None:
        event.connection.close()


class PeerDetach(Scenario):
    """The peer detaches (closed) without an error: on_link_closing, then on_link_closed (proton's
    EndpointStateHandler closes the local end); the handler then closes the connection."""

    def on_start(self, rec: Any, event: Any) -> None:
        conn = self.connect(rec, event)
        event.container.create_receiver(conn, "detach", name="rcv")

    def on_link_closed(self, rec: Any, event: Any) -> None:
        event.connection.close()


class PeerCloseIsError(PeerDetach):
    """The same with peer_close_is_error=True. In proton, MessagingHandler always passes itself as the
    EndpointStateHandler's delegate, so the flag never takes effect: the callbacks are those of PeerDetach."""

    handler_options: ClassVar[dict[str, Any]] = {"peer_close_is_error": True}


class SessionError(Scenario):
    """The peer ends the session with an error: on_session_error, whose default closes the connection."""

    def on_start(self, rec: Any, event: Any) -> None:
        conn = self.connect(rec, event)
        event.container.create_sender(conn, "end-session", name="snd")


class ConnectionError(Scenario):
    """The peer closes the connection with amqp:internal-error: on_connection_error."""

    def on_start(self, rec: Any, event: Any) -> None:
        conn = self.connect(rec, event)
        event.container.create_sender(conn, "close-connection", name="snd")


class ConnectionForced(Scenario):
    """The peer closes the connection with amqp:connection:forced and drops the socket soon after. proton treats
    that close as a dropped socket: no on_connection_error, no local close (reconnect would follow; here it is
    disabled)."""

    def on_start(self, rec: Any, event: Any) -> None:
        conn = self.connect(rec, event)
        event.container.create_sender(conn, "forced", name="snd")

    def on_disconnected(self, rec: Any, event: Any) -> None:
        # Without this, proton waits for ever: the connection is still open locally, with reconnect disabled.
        event.connection.close()


class PeerVanishes(Scenario):
    """The peer answers the attach, then drops the TCP connection with no close frame: on_disconnected and
    on_transport_error."""

    def on_start(self, rec: Any, event: Any) -> None:
        conn = self.connect(rec, event)
        event.container.create_sender(conn, "vanish", name="snd")


class HangupAtHeader(Scenario):
    """The peer accepts the TCP connection, reads the protocol header and hangs up before any AMQP frame."""

    def setup(self) -> Any:
        peer = Hangup()
        peer.start()
        return peer

    def on_start(self, rec: Any, event: Any) -> None:
        conn = self.connect(rec, event)
        event.container.create_sender(conn, "queue-d", name="snd")


class ConnectionRefused(Scenario):
    """Nothing listens on the port: on_transport_error and on_disconnected, with reconnect=False."""

    class _Nobody:
        def __init__(self) -> None:
            self.records: list[list[Any]] = []
            self.url = f"127.0.0.1:{free_port()}"

        def wait_done(self) -> None:
            pass

    def setup(self) -> Any:
        return self._Nobody()

    def on_start(self, rec: Any, event: Any) -> None:
        conn = self.connect(rec, event)
        event.container.create_sender(conn, "queue-e", name="snd")


class SaslBadPassword(Scenario):
    """Our embedded broker with a user configured; the client offers PLAIN with a wrong password: the SASL outcome
    is auth failure, seen as on_transport_error amqp:unauthorized-access (whose default closes the connection)."""

    def setup(self) -> Any:
        from amqp_async.broker import BrokerThread

        class Broker:
            def __init__(self) -> None:
                self.records: list[list[Any]] = []
                self.thread = BrokerThread(users={"alice": "secret"}).start()
                self.url = self.thread.url.replace("amqp://", "")

            def wait_done(self) -> None:
                pass

        return Broker()

    def on_start(self, rec: Any, event: Any) -> None:
        conn = self.connect(
            rec, event, user="alice", password="wrong", allowed_mechs="PLAIN", allow_insecure_mechs=True
        )
        event.container.create_sender(conn, "queue-f", name="snd")


class BrokerRoundTrip(Scenario):
    """Against our embedded broker: send 3 messages to a queue, then receive them back on a receiver opened once
    all three are accepted, then close."""

    N = 3

    def setup(self) -> Any:
        from amqp_async.broker import BrokerThread

        class Broker:
            def __init__(self) -> None:
                self.records: list[list[Any]] = []
                self.thread = BrokerThread().start()
                self.url = self.thread.url.replace("amqp://", "")

            def wait_done(self) -> None:
                pass

        return Broker()

    def on_start(self, rec: Any, event: Any) -> None:
        rec.state.update(sent=0, confirmed=0, received=0)
        conn = self.connect(rec, event)
        event.container.create_sender(conn, "round-trip", name="snd")

    def on_sendable(self, rec: Any, event: Any) -> None:
        while event.sender.credit and rec.state["sent"] < self.N:
            event.sender.send(self.proton.Message(body=f"rt-{rec.state['sent']}"))
            rec.state["sent"] += 1

    def on_accepted(self, rec: Any, event: Any) -> None:
        rec.state["confirmed"] += 1
        if rec.state["confirmed"] == self.N:
            event.sender.close()
            event.container.create_receiver(event.connection, "round-trip", name="rcv")

    def on_message(self, rec: Any, event: Any) -> None:
        rec.state["received"] += 1
        if rec.state["received"] == self.N:
            event.connection.close()


class Prefetch0(Scenario):
    """prefetch=0: no automatic credit; the handler grants one credit at a time with receiver.flow(1). The peer
    records the credit it had at each send (always 1)."""

    handler_options: ClassVar[dict[str, Any]] = {"prefetch": 0}
    N = 3

    def setup(self) -> Any:
        return start_peer({"record_credit": True})

    def on_start(self, rec: Any, event: Any) -> None:
        rec.state["received"] = 0
        conn = self.connect(rec, event)
        rec.state["receiver"] = event.container.create_receiver(conn, f"src-{self.N}", name="rcv")

    def on_link_opened(self, rec: Any, event: Any) -> None:
        rec.calls.append(["credit", event.receiver.credit])
        event.receiver.flow(1)

    def on_message(self, rec: Any, event: Any) -> None:
        rec.state["received"] += 1
        if rec.state["received"] == self.N:
            event.connection.close()
        else:
            event.receiver.flow(1)


class Listener(Scenario):
    """The program under test listens (Container.listen); a real-proton client connects, sends two messages to
    ``inbox``, then opens a receiver from ``outbox``, takes one reply and closes. The server sees
    on_connection_opening, on_session_opening, on_link_opening (each followed by the matching *_opened), the
    messages, sends the reply from on_sendable, and on the client's close, on_connection_closing and
    on_connection_closed, where it closes its acceptor so that Container.run() returns."""

    def setup(self) -> Any:
        self.port = free_port()
        return None  # the peer client starts from on_start, once the program listens

    def on_start(self, rec: Any, event: Any) -> None:
        rec.state.update(replied=False)
        rec.state["acceptor"] = event.container.listen(f"127.0.0.1:{self.port}")
        self.peer = PeerClient(f"127.0.0.1:{self.port}", ["in-0", "in-1"], 1)
        self.peer.start()

    def on_link_opening(self, rec: Any, event: Any) -> None:
        link = event.link
        if link.is_sender:
            link.source.address = link.remote_source.address
        else:
            link.target.address = link.remote_target.address

    def on_sendable(self, rec: Any, event: Any) -> None:
        if not rec.state["replied"]:
            rec.state["replied"] = True
            event.sender.send(self.proton.Message(body="reply-0"))

    def on_connection_closed(self, rec: Any, event: Any) -> None:
        rec.state["acceptor"].close()


class Timers(Scenario):
    """No peer: timers only. Tasks at 0.1 s ("a", which re-schedules itself twice, 1 s apart), 0.5 s ("b",
    handler=the recorder itself), 0.8 s ("c", cancelled at once) and 1.6 s ("d"); Container.run() returns once
    no task is left. Half a second between the ticks at least: a loaded machine's late tick (CI once held the
    first "a" past 0.05 s, when the ticks were 0.05 s apart) moves the ones it schedules, not the order."""

    def setup(self) -> Any:
        return None

    def on_start(self, rec: Any, event: Any) -> None:
        calls = rec.calls

        class Tick:
            def __init__(self, label: str, repeat: int = 0) -> None:
                self.label, self.repeat = label, repeat

            def on_timer_task(self, event: Any) -> None:
                calls.append(["tick", self.label])
                if self.repeat:
                    self.repeat -= 1
                    event.container.schedule(1.0, self)

        container = event.container
        container.schedule(0.1, Tick("a", repeat=2))
        container.schedule(0.5, rec)
        task = container.schedule(0.8, Tick("c"))
        container.schedule(1.6, Tick("d"))
        task.cancel()


SCENARIOS: dict[str, type[Scenario]] = {
    "send_n": SendN,
    "one_per_sendable": OnePerSendable,
    "receive_n": ReceiveN,
    "manual_outcomes": ManualOutcomes,
    "sender_outcomes": SenderOutcomes,
    "auto_settle_off": AutoSettleOff,
    "auto_settle_on": AutoSettleOn,
    "link_refused": LinkRefused,
    "link_refused_handled": LinkRefusedHandled,
    "peer_detach": PeerDetach,
    "peer_close_is_error": PeerCloseIsError,
    "session_error": SessionError,
    "connection_error": ConnectionError,
    "connection_forced": ConnectionForced,
    "peer_vanishes": PeerVanishes,
    "hangup_at_header": HangupAtHeader,
    "connection_refused": ConnectionRefused,
    "sasl_bad_password": SaslBadPassword,
    "broker_round_trip": BrokerRoundTrip,
    "prefetch_0": Prefetch0,
    "listener": Listener,
    "timers": Timers,
}


# ---------------------------------------------------------------------------------------------------------------
# Running one scenario on one implementation


def run(impl: str, name: str, timeout: float = RUN_TIMEOUT) -> dict[str, Any]:
    proton = importlib.import_module(impl)
    handlers = importlib.import_module(impl + ".handlers")
    reactor = importlib.import_module(impl + ".reactor")
    scenario = SCENARIOS[name](proton, handlers, reactor)
    scenario.peer = scenario.setup()
    recorder = make_recorder(proton, handlers, reactor, scenario, **scenario.handler_options)
    result: dict[str, Any] = {"impl": impl, "scenario": name, "error": None}

    def dump(error: str | None) -> None:
        result["error"] = error
        result["calls"] = list(recorder.calls)
        result["unhandled"] = list(recorder.unhandled)
        peer = scenario.peer
        result["peer"] = list(peer.records) if peer is not None else []
        sys.stdout.write(json.dumps(result) + "\n")
        sys.stdout.flush()

    def watchdog() -> None:
        dump(f"timeout: Container.run() still running after {timeout} s")
        os._exit(3)

    timer = threading.Timer(timeout, watchdog)
    timer.daemon = True
    timer.start()
    error = None
    try:
        reactor.Container(recorder).run()
    except BaseException:
        error = "exception from Container.run():\n" + traceback.format_exc()
    if scenario.peer is not None:
        scenario.peer.wait_done()
    timer.cancel()
    dump(error)
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--impl", required=True)
    parser.add_argument("--scenario", required=True, choices=sorted(SCENARIOS))
    parser.add_argument("--timeout", type=float, default=RUN_TIMEOUT)
    args = parser.parse_args(argv)
    try:
        run(args.impl, args.scenario, args.timeout)
    except BaseException:
        sys.stdout.write(json.dumps({"error": "runner failed:\n" + traceback.format_exc()}) + "\n")
        sys.stdout.flush()
    os._exit(0)  # peers run in daemon threads; do not wait for them (or for an implementation's own threads)


if __name__ == "__main__":
    main()
