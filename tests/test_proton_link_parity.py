"""Links with a container, as python-qpid-proton's: each scenario runs once with ``proton`` and once with
``amqp_async.proton`` (only the import differs), against a python-qpid-proton listener in a thread, and what the
client saw must be the same.

Covered: a peer's detach that does not close (the remote state stays active, ``on_link_remote_detach``), our own
detach (the local state stays active), a receiver's credit while a batch of deliveries is handled (proton counts a
delivery against the credit as the link advances past it), a sender's credit and ``queued`` while it sends in one
callback (proton's credit goes below zero; what is sent is queued until the transport writes it), and the drain
flag (``drain_mode``, ``drain(n)``, ``draining()``, ``drained()``).
"""

from __future__ import annotations

import importlib
import threading
from typing import Any

import pytest

pytest.importorskip("proton")  # python-qpid-proton is the reference

IMPLEMENTATIONS = ["proton", "amqp_async.proton"]


def _modules(name: str) -> tuple[Any, Any, Any]:
    base = importlib.import_module(name)
    return base, importlib.import_module(name + ".handlers"), importlib.import_module(name + ".reactor")


class _ProtonPeer:
    """A python-qpid-proton listener in a thread (port 0), its handler a ``MessagingHandler`` with the callbacks
    given; it stops once a connection it accepted closes."""

    def __init__(self, prefetch: int = 10, **callbacks: Any) -> None:
        import proton.handlers
        import proton.reactor

        peer = self
        ready = threading.Event()
        self.log: list[Any] = []

        class Server(proton.handlers.MessagingHandler):  # type: ignore[misc]
            def on_start(self, event: Any) -> None:
                self.acceptor = event.container.listen("127.0.0.1:0")
                peer.port = int(self.acceptor._selectable.getsockname()[1])
                ready.set()

            def on_connection_closed(self, event: Any) -> None:
                self.acceptor.close()

            def on_transport_error(self, event: Any) -> None:
                self.acceptor.close()

        for name, callback in callbacks.items():
            setattr(Server, name, lambda self, *args, _cb=callback: _cb(peer, *args))
        self.container = proton.reactor.Container(Server(prefetch=prefetch))
        self.thread = threading.Thread(target=self.container.run, daemon=True)
        self.thread.start()
        assert ready.wait(5)

    def join(self) -> None:
        self.thread.join(5)
        assert not self.thread.is_alive()


def _run_client(name: str, peer: _ProtonPeer, handler_class: Any) -> None:
    _, _, reactor = _modules(name)
    reactor.Container(handler_class(f"127.0.0.1:{peer.port}")).run()
    peer.join()


def _both(scenario: Any, *args: Any) -> None:
    """Run ``scenario`` with proton, then with ours: they must record the same."""
    expected = scenario("proton", *args)
    assert scenario("amqp_async.proton", *args) == expected


# --- detach ------------------------------------------------------------------------------------------------


def _peer_detaches(name: str, kind: str, closed: bool) -> list[Any]:
    """The peer detaches (``closed``: closes) the link our client opened; the client records every link event
    with the link's state, and closes the connection once the peer's detach came."""
    _, handlers, _ = _modules(name)

    def on_link_opened(peer: _ProtonPeer, event: Any) -> None:
        if closed:
            event.link.close()
        else:
            event.link.detach()

    peer = _ProtonPeer(on_link_opened=on_link_opened)
    log: list[Any] = []

    class Client(handlers.MessagingHandler):  # type: ignore[misc]
        def __init__(self, url: str) -> None:
            super().__init__()
            self.url = url

        def on_start(self, event: Any) -> None:
            connection = event.container.connect(self.url)
            create = event.container.create_sender if kind == "sender" else event.container.create_receiver
            self.link = create(connection, "queue")

        def on_unhandled(self, method: str, event: Any) -> None:
            if "link" in method and event.link is not None:
                log.append((method, event.link.state))
                if method in ("on_link_remote_detach", "on_link_remote_close"):
                    event.connection.close()

        def on_link_opened(self, event: Any) -> None:
            log.append(("on_link_opened", event.link.state))

        def on_link_closing(self, event: Any) -> None:
            log.append(("on_link_closing", event.link.state))

        def on_link_closed(self, event: Any) -> None:
            log.append(("on_link_closed", event.link.state))

        def on_connection_closed(self, event: Any) -> None:
            log.append(("on_connection_closed", self.link.state))

    _run_client(name, peer, Client)
    return log


@pytest.mark.parametrize("kind", ["sender", "receiver"])
def test_a_peer_detach_that_does_not_close_leaves_the_remote_state_active(kind: str) -> None:
    """proton: ``on_link_remote_detach``, no ``on_link_closing``, and ``link.state`` keeps REMOTE_ACTIVE (18)."""
    _both(_peer_detaches, kind, False)
    log = _peer_detaches("amqp_async.proton", kind, False)
    assert ("on_link_remote_detach", 18) in log
    assert log[-1] == ("on_connection_closed", 18)


@pytest.mark.parametrize("kind", ["sender", "receiver"])
def test_a_peer_close_reads_remote_closed(kind: str) -> None:
    """The closing detach still closes: REMOTE_CLOSED, ``on_link_closing`` and our close, as proton's."""
    _both(_peer_detaches, kind, True)


def _client_detaches(name: str, kind: str) -> list[Any]:
    """Our client detaches its link once open (the peer answers with a detach of its own): the states read."""
    _, handlers, _ = _modules(name)

    def on_unhandled(peer: _ProtonPeer, method: str, event: Any) -> None:
        if method == "on_link_remote_detach":
            event.link.detach()

    peer = _ProtonPeer(on_unhandled=on_unhandled)
    log: list[Any] = []

    class Client(handlers.MessagingHandler):  # type: ignore[misc]
        def __init__(self, url: str) -> None:
            super().__init__()
            self.url = url

        def on_start(self, event: Any) -> None:
            connection = event.container.connect(self.url)
            create = event.container.create_sender if kind == "sender" else event.container.create_receiver
            self.link = create(connection, "queue")

        def on_link_opened(self, event: Any) -> None:
            event.link.detach()
            log.append(("detached", event.link.state))

        def on_unhandled(self, method: str, event: Any) -> None:
            if method in ("on_link_local_detach", "on_link_remote_detach"):
                log.append((method, event.link.state))
            if method == "on_link_remote_detach":
                event.connection.close()

        def on_connection_closed(self, event: Any) -> None:
            log.append(("on_connection_closed", self.link.state))

    _run_client(name, peer, Client)
    return log


@pytest.mark.parametrize("kind", ["sender", "receiver"])
def test_our_detach_leaves_the_local_state_active(kind: str) -> None:
    """proton's ``detach()`` does not close the link: LOCAL_ACTIVE stays (18 with the peer's answer)."""
    _both(_client_detaches, kind)
    assert _client_detaches("amqp_async.proton", kind)[0] == ("detached", 18)


# --- credit and queued -------------------------------------------------------------------------------------


def _peer_sends(count: int) -> _ProtonPeer:
    """A listener that sends ``count`` messages on the link a client receives from, as its credit allows."""
    import proton

    def on_sendable(peer: _ProtonPeer, event: Any) -> None:
        sent = getattr(peer, "sent", 0)
        while event.sender.credit and sent < count:
            event.sender.send(proton.Message(body=sent))
            sent += 1
        peer.sent = sent

    return _ProtonPeer(on_sendable=on_sendable)


def _receiver_credit_in_a_batch(name: str) -> list[Any]:
    """No prefetch: the client gives 10 credit once, the peer sends 10; each on_message reads credit and queued.

    proton counts a delivery against the credit when the link advances past it (``pn_link_advance``), whatever
    has arrived: 9, 8, ... 0, however the messages came in reads."""
    _, handlers, _ = _modules(name)
    peer = _peer_sends(10)
    log: list[Any] = []

    class Client(handlers.MessagingHandler):  # type: ignore[misc]
        def __init__(self, url: str) -> None:
            super().__init__(prefetch=0)
            self.url = url

        def on_start(self, event: Any) -> None:
            event.container.create_receiver(event.container.connect(self.url), "queue")

        def on_link_opened(self, event: Any) -> None:
            event.receiver.flow(10)
            log.append(("flow", event.receiver.credit))

        def on_message(self, event: Any) -> None:
            log.append((event.message.body, event.receiver.credit, event.delivery.pending))
            if event.message.body == 9:
                event.connection.close()

    _run_client(name, peer, Client)
    return log


def test_a_receiver_credit_counts_the_deliveries_not_read() -> None:
    """Inside on_message the credit is what was given less the deliveries read (arrived or not)."""
    _both(_receiver_credit_in_a_batch)
    log = _receiver_credit_in_a_batch("amqp_async.proton")
    assert [credit for _, credit, _ in log[1:]] == list(range(9, -1, -1))


def _sender_credit_and_queued(name: str) -> list[Any]:
    """The peer gives 7 credit (its prefetch); the client sends 12 messages in one on_sendable and reads credit,
    queued and unsettled after each: proton's credit goes below zero, and every message sent in the callback is
    queued (the transport writes them once the callback has returned)."""
    base, handlers, _ = _modules(name)

    def on_message(peer: _ProtonPeer, event: Any) -> None:
        peer.received = getattr(peer, "received", 0) + 1
        if peer.received == 12:
            event.connection.close()

    peer = _ProtonPeer(prefetch=7, on_message=on_message)
    log: list[Any] = []

    class Client(handlers.MessagingHandler):  # type: ignore[misc]
        def __init__(self, url: str) -> None:
            super().__init__()
            self.url = url
            self.done = False

        def on_start(self, event: Any) -> None:
            event.container.create_sender(event.container.connect(self.url), "queue")

        def on_sendable(self, event: Any) -> None:
            if self.done:
                return
            self.done = True
            sender = event.sender
            for i in range(12):
                sender.send(base.Message(body=i))
                log.append((sender.credit, sender.queued, sender.unsettled))

    _run_client(name, peer, Client)
    return log


def test_a_sender_credit_and_queued_while_it_sends() -> None:
    """credit 6 ... -5 and queued 1 ... 12, as proton's."""
    _both(_sender_credit_and_queued)
    log = _sender_credit_and_queued("amqp_async.proton")
    assert [credit for credit, _, _ in log] == list(range(6, -6, -1))
    assert [queued for _, queued, _ in log] == list(range(1, 13))


# --- drain -------------------------------------------------------------------------------------------------


def _drain(name: str) -> list[Any]:
    """The drain flag of a receiver: set and cleared before the attach; ``drain(5)`` with 3 messages to send (the
    peer sends them and answers the drain); then twice: the flag set by hand and ``flow(2)`` (the peer answers
    each flow that carries the flag). Every read of drain_mode, credit, draining(), drained() is recorded."""
    import proton

    _, handlers, _ = _modules(name)

    def on_link_flow(peer: _ProtonPeer, event: Any) -> None:
        link = event.link
        if not link.is_sender:
            return
        sent = getattr(peer, "sent", 0)
        while link.credit and sent < 3:
            link.send(proton.Message(body=sent))
            sent += 1
        peer.sent = sent
        if link.drain_mode:
            link.drained()

    peer = _ProtonPeer(on_link_flow=on_link_flow)
    log: list[Any] = []

    class Client(handlers.MessagingHandler):  # type: ignore[misc]
        def __init__(self, url: str) -> None:
            super().__init__(prefetch=0)
            self.url = url
            self.rounds = 0

        def on_start(self, event: Any) -> None:
            self.connection = event.container.connect(self.url)
            # Not a timing: a guard, so that a peer that is never asked to drain (the flag not sent) ends the
            # scenario (recorded as it is) rather than hanging it; cancelled when the connection closes (proton's
            # container still waits for a cancelled timer: kept short).
            self.guard = event.container.schedule(2, self)
            receiver = event.container.create_receiver(self.connection, "queue")
            log.append(("before the attach", receiver.drain_mode, receiver.credit))
            receiver.drain_mode = True
            log.append(("set", receiver.drain_mode, receiver.credit))
            receiver.drain_mode = False

        def on_link_opened(self, event: Any) -> None:
            receiver = event.receiver
            log.append(("opened", receiver.drain_mode, receiver.credit, receiver.draining()))
            receiver.drain(5)
            log.append(("drain(5)", receiver.drain_mode, receiver.credit, receiver.draining()))

        def on_timer_task(self, event: Any) -> None:
            log.append("no answer from the peer")
            self.connection.close()

        def on_connection_closed(self, event: Any) -> None:
            self.guard.cancel()

        def on_message(self, event: Any) -> None:
            receiver = event.receiver
            log.append((event.message.body, receiver.drain_mode, receiver.credit, receiver.draining()))

        def on_unhandled(self, method: str, event: Any) -> None:
            if method != "on_link_flow":
                return
            receiver = event.link
            log.append(("flow", receiver.drain_mode, receiver.credit, receiver.draining()))
            if receiver.draining():
                return
            log.append(("drained", receiver.drained(), receiver.credit))
            if self.rounds == 2:
                event.connection.close()
                return
            self.rounds += 1
            receiver.drain_mode = True
            log.append(("set", receiver.drain_mode, receiver.credit, receiver.draining()))
            receiver.flow(2)
            log.append(("flow(2)", receiver.drain_mode, receiver.credit, receiver.draining()))

    _run_client(name, peer, Client)
    return log


def test_drain_mode_and_drain_as_proton() -> None:
    """The drain flag stays set after drain(n) and once the drain is complete, a flag set by hand goes with the
    next flow (the peer drains it), and draining() is the flag and credit beyond what has arrived."""
    _both(_drain)
    log = _drain("amqp_async.proton")
    assert ("drain(5)", True, 5, True) in log
    assert ("flow(2)", True, 2, True) in log


# --- outcomes after our close ---------------------------------------------------------------------------------


def _send_then_close(name: str) -> list[Any]:
    """The client sends three messages and closes the connection in the same callback; the peer accepts them before
    it reads the close. proton still reports their outcomes (the peer's dispositions come before its close); ours
    dropped them (the engine ignored a closed connection's session frames)."""
    base, handlers, _ = _modules(name)
    peer = _ProtonPeer()
    log: list[Any] = []

    class Client(handlers.MessagingHandler):  # type: ignore[misc]
        def __init__(self, url: str) -> None:
            super().__init__()
            self.url = url
            self.sent = False

        def on_start(self, event: Any) -> None:
            event.container.create_sender(event.container.connect(self.url, reconnect=False), "queue")

        def on_sendable(self, event: Any) -> None:
            if not self.sent:
                self.sent = True
                for body in range(3):
                    event.sender.send(base.Message(body=body))
                event.connection.close()

        def on_accepted(self, event: Any) -> None:
            log.append(("accepted", event.delivery.tag))

        def on_settled(self, event: Any) -> None:
            log.append(("settled", event.delivery.tag))

        def on_connection_closed(self, event: Any) -> None:
            log.append(("closed",))

    _run_client(name, peer, Client)
    return log


def test_outcomes_that_come_after_our_close_are_reported() -> None:
    expected = _send_then_close("proton")
    assert len(expected) == 7 and expected[-1] == ("closed",)  # three accepted and settled, then closed
    assert _send_then_close("amqp_async.proton") == expected
