"""Outgoing deliveries' ``pending``, as python-qpid-proton's: each scenario runs once with ``proton`` and
once with ``amqp_async.proton`` (only the import differs), against a python-qpid-proton peer (a listener in a thread,
or, for the engine API, a proton ``Connection``/``Transport`` pair on the other end), and what the client saw must
be the same.

Covered: an outgoing delivery's ``pending`` (proton's ``pn_delivery_pending``: the bytes in the delivery not written
to the transport yet, a message's as proton encodes it) with a container (sent in a callback: until the callbacks
return; sent before the attach: until the link has credit) and with the engine API (until the transport's output is
read). It read 0 with a container.

Not the same, on purpose: the credit a ``MessagingHandler``'s prefetch keeps, read in ``on_message`` (ours up to
twice the window, proton's the window less one): proton's rule (a top-up to the window on every delivery, the
deliveries not read yet counted in the credit) cost our container a third of its throughput in a 20,000-message
run (fewer transfers in flight, three times the flow frames).
"""

from __future__ import annotations

import importlib
import threading
from typing import Any

import pytest

pytest.importorskip("proton")  # python-qpid-proton is the reference

OURS = "amqp_async.proton"


def _modules(name: str) -> tuple[Any, Any, Any]:
    base = importlib.import_module(name)
    return base, importlib.import_module(name + ".handlers"), importlib.import_module(name + ".reactor")


class _ProtonPeer:
    """A python-qpid-proton listener in a thread (port 0) that sends ``count`` messages on a link a client receives
    from, as its credit allows; it stops once a connection it accepted closes."""

    def __init__(self, count: int = 0) -> None:
        import proton
        import proton.handlers
        import proton.reactor

        peer = self
        ready = threading.Event()

        class Server(proton.handlers.MessagingHandler):  # type: ignore[misc]
            sent = 0

            def on_start(self, event: Any) -> None:
                self.acceptor = event.container.listen("127.0.0.1:0")
                peer.port = int(self.acceptor._selectable.getsockname()[1])
                ready.set()

            def on_sendable(self, event: Any) -> None:
                while event.sender.credit and self.sent < count:
                    event.sender.send(proton.Message(body=self.sent))
                    self.sent += 1

            def on_connection_closed(self, event: Any) -> None:
                self.acceptor.close()

            def on_transport_error(self, event: Any) -> None:
                self.acceptor.close()

        self.container = proton.reactor.Container(Server())
        self.thread = threading.Thread(target=self.container.run, daemon=True)
        self.thread.start()
        assert ready.wait(5)

    def join(self) -> None:
        self.thread.join(5)
        assert not self.thread.is_alive()


# --- pending, with a container ---------------------------------------------------------------------------------


def _pending_with_a_container(name: str) -> list[Any]:
    """The client sends one message before the attach, then in its first on_sendable three small ones and a large
    one, reading every delivery's pending as it goes; then again in on_accepted, once the transport wrote them."""
    base, handlers, reactor = _modules(name)
    peer = _ProtonPeer()
    log: list[Any] = []

    class Client(handlers.MessagingHandler):  # type: ignore[misc]
        def on_start(self, event: Any) -> None:
            connection = event.container.connect(f"127.0.0.1:{peer.port}")
            sender = event.container.create_sender(connection, "pending")
            self.early = sender.send(base.Message(body="before the attach"))
            log.append(("before the attach", self.early.pending))
            self.sent: list[Any] = []
            self.accepted = 0

        def on_sendable(self, event: Any) -> None:
            if self.sent:
                return
            log.append(("sendable: the early one", self.early.pending))
            for body in ("", "x" * 10, {"key": list(range(20))}, b"y" * 5000):
                self.sent.append(event.sender.send(base.Message(body=body, subject="s")))
                log.append(("sent", [delivery.pending for delivery in self.sent]))

        def on_accepted(self, event: Any) -> None:
            log.append(("accepted", event.delivery.pending, [delivery.pending for delivery in self.sent]))
            self.accepted += 1
            if self.accepted == 5:
                event.connection.close()

    reactor.Container(Client()).run()
    peer.join()
    return log


def test_pending_of_a_sent_message_with_a_container() -> None:
    """A message sent in a callback is pending (its encoded size, as proton's) until the callbacks return; one sent
    before the attach until the link has credit; all are 0 once written."""
    expected = _pending_with_a_container("proton")
    assert expected[0][1] > 0 and all(size > 0 for size in expected[5][1])  # proton's are not 0
    assert _pending_with_a_container(OURS) == expected


# --- pending, with the engine API ----------------------------------------------------------------------------------


def _pending_with_the_engine_api(name: str) -> list[Any]:
    """A client Connection/Transport of ``name`` against a proton server pair: messages sent (before any credit,
    with credit, streamed by hand), pending read before and after the transport's output is read."""
    import proton

    base = importlib.import_module(name)
    client, client_transport = base.Connection(), base.Transport()
    client_transport.bind(client)
    server, server_transport = proton.Connection(), proton.Transport(proton.Transport.SERVER)
    server_transport.bind(server)

    def pump() -> None:
        for _ in range(20):
            moved = False
            size = client_transport.pending()
            if size > 0:
                server_transport.push(client_transport.peek(size))
                client_transport.pop(size)
                moved = True
            size = server_transport.pending()
            if size > 0:
                client_transport.push(server_transport.peek(size))
                server_transport.pop(size)
                moved = True
            if not moved:
                return

    log: list[Any] = []
    client.open()
    session = client.session()
    session.open()
    sender = session.sender("pending")
    sender.open()
    early = sender.send(base.Message(body="before any credit"))
    log.append(("before any credit", early.pending, sender.queued))
    pump()
    log.append(("attached, no credit", early.pending))
    server.open()
    server.session_head(0).open()
    receiver = server.link_head(0)
    receiver.open()
    receiver.flow(5)
    pump()
    log.append(("written", early.pending))
    sent = [sender.send(base.Message(body="x" * size, subject="s")) for size in (0, 100, 2000)]
    log.append(("sent", [delivery.pending for delivery in sent]))
    raw = sender.delivery(b"raw")
    sender.send(b"\x00Sw\xa1\x03abc")
    log.append(("streamed", raw.pending))
    sender.advance()
    log.append(("advanced", raw.pending, [delivery.pending for delivery in sent]))
    size = client_transport.pending()
    log.append(("transport pending", [delivery.pending for delivery in [*sent, raw]]))
    client_transport.pop(size)
    log.append(("popped", [delivery.pending for delivery in [*sent, raw]]))
    return log


def test_pending_of_a_sent_message_with_the_engine_api() -> None:
    """Before the transport's output is read, a delivery's bytes are pending (as proton encodes a message)."""
    expected = _pending_with_the_engine_api("proton")
    assert expected[0][1] > 0 and all(size > 0 for size in expected[3][1])
    assert _pending_with_the_engine_api(OURS) == expected
