"""A sender's ``on_link_flow`` after it sends, in amqp_async.proton beside python-qpid-proton 0.40: the same program
hears the same flows with the same credit and drain mode.

proton's transport raises ``PN_LINK_FLOW`` on a sender after it writes a batch of transfers, whatever credit is left:
with credit left, ``MessagingHandler`` turns it into another ``on_sendable``; at none (the credit used up, or given
back by ``drained()`` while the receiver drains), the program hears ``on_link_flow`` with credit 0, its sign that
the drain (§2.6.7) is answered. Each scenario runs in a subprocess of its own (``python this_file.py SCENARIO IMPL
OPTIONS``: a hang fails the test) against a receiver on real python-qpid-proton that grants ``credit`` on attach,
with ``drain`` or not; the sender has ``messages`` to send.
"""

from __future__ import annotations

import importlib
import socket
import threading
from typing import Any

import pytest
from scenario_subprocess import run_scenario, scenario_main

RUN_SECONDS = 1.5  # the sender closes its connection this long after it starts: every flow has come by then


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def send_to_a_draining_receiver(name: str, options: dict[str, Any]) -> Any:
    """The sender's ``on_link_flow`` (credit, drain mode), ``on_sendable`` (credit) and ``drained()`` (what it gave
    back), in order, sending what it has at each ``on_sendable`` and calling ``drained()`` while it drains."""
    import proton
    import proton.handlers
    import proton.reactor

    credit, drain, messages = options["credit"], options["drain"], options["messages"]
    url = f"127.0.0.1:{_free_port()}"

    class Receiver(proton.handlers.MessagingHandler):  # type: ignore[misc]
        """Real proton: accepts one connection, grants the credit (draining or not), accepts what comes."""

        def __init__(self) -> None:
            super().__init__(prefetch=0)
            self.listening = threading.Event()

        def on_start(self, event: Any) -> None:
            self.acceptor = event.container.listen(url)
            self.listening.set()

        def on_link_opening(self, event: Any) -> None:
            link = event.link
            if link.is_receiver:
                link.target.copy(link.remote_target)
                link.open()
                if drain:
                    link.drain(credit)
                else:
                    link.flow(credit)

        def on_connection_closed(self, event: Any) -> None:
            self.acceptor.close()

    receiver = Receiver()
    peer = proton.reactor.Container(receiver)
    peer_thread = threading.Thread(target=peer.run, daemon=True)
    peer_thread.start()
    assert receiver.listening.wait(10)

    base = importlib.import_module(name)
    handlers = importlib.import_module(name + ".handlers")
    reactor = importlib.import_module(name + ".reactor")
    record: list[Any] = []

    class Sender(handlers.MessagingHandler):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.sent = 0

        def on_start(self, event: Any) -> None:
            self.connection = event.container.connect(url, reconnect=False)
            event.container.create_sender(self.connection, "q")
            event.container.schedule(RUN_SECONDS, self)

        def on_link_flow(self, event: Any) -> None:
            record.append(["flow", event.sender.credit, event.sender.drain_mode])

        def on_sendable(self, event: Any) -> None:
            sender = event.sender
            record.append(["sendable", sender.credit])
            while sender.credit and self.sent < messages:
                sender.send(base.Message(body=self.sent))
                self.sent += 1
            if sender.credit and sender.drain_mode:
                record.append(["drained", sender.drained()])

        def on_timer_task(self, event: Any) -> None:
            self.connection.close()

    reactor.Container(Sender()).run()
    peer_thread.join(10)
    return record


SCENARIOS = {"send_to_a_draining_receiver": send_to_a_draining_receiver}

pytestmark = [pytest.mark.interop]
pytest.importorskip("proton")


@pytest.mark.parametrize(
    ("credit", "drain", "messages", "expected"),
    [
        # The credit used up by the sends: a flow at credit 0 follows (the drain is answered by the sends).
        (3, True, 3, [["flow", 3, True], ["sendable", 3], ["flow", 0, True]]),
        (3, False, 3, [["flow", 3, False], ["sendable", 3], ["flow", 0, False]]),
        # Fewer messages than credit while draining: drained() gives the rest back, then a flow at credit 0.
        (5, True, 2, [["flow", 5, True], ["sendable", 5], ["drained", 3], ["flow", 0, True]]),
        # Credit left after the sends, no drain: another flow, another on_sendable.
        (5, False, 2, [["flow", 5, False], ["sendable", 5], ["flow", 3, False], ["sendable", 3]]),
        # Nothing to send while draining: drained() gives it all back, and no transfer means no flow after it.
        (5, True, 0, [["flow", 5, True], ["sendable", 5], ["drained", 5]]),
    ],
)
def test_a_senders_flows_after_sending_are_protons(credit: int, drain: bool, messages: int, expected: Any) -> None:
    options = {"credit": credit, "drain": drain, "messages": messages}
    reference = run_scenario(__file__, "send_to_a_draining_receiver", "proton", options)
    assert reference == expected  # the test's premise: proton 0.40 behaves so
    ours = run_scenario(__file__, "send_to_a_draining_receiver", "amqp_async.proton", options)
    assert ours == reference


if __name__ == "__main__":
    scenario_main(SCENARIOS)
