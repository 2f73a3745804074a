"""Closing links, sessions and the connection in one callback, in amqp_async.proton beside python-qpid-proton 0.40:
the same program on each, the same callbacks.

proton's examples end a receiver with ``event.receiver.close(); event.connection.close()`` in ``on_message``. The
peer answers the detach (and the end) before its close, and proton reports each: ``on_link_closed`` (and
``on_session_closed``) before ``on_connection_closed``; the same for a link closed with its session
(``link.close(); session.close()``), the connection left open. Each scenario runs in a subprocess of its own (``python
this_file.py SCENARIO IMPL``: a hang fails the test, it never blocks the suite), against the embedded broker, once
on real proton and once on ours.
"""

from __future__ import annotations

import importlib
from typing import Any

import pytest
from scenario_subprocess import run_scenario, scenario_main


def close_in_on_message(name: str, options: dict[str, Any]) -> Any:
    """A sender and a receiver on one queue; at the first message the receiver is closed, its session too when
    ``options["session"]``, and the connection when ``options["connection"]``, in the same callback (else the
    connection is closed once the session is). Recorded: the closing callbacks."""
    from amqp_async.broker import BrokerThread

    base = importlib.import_module(name)
    handlers = importlib.import_module(name + ".handlers")
    reactor = importlib.import_module(name + ".reactor")
    record: list[Any] = []

    class Client(handlers.MessagingHandler):  # type: ignore[misc]
        def on_start(self, event: Any) -> None:
            connection = event.container.connect(url, reconnect=False)
            event.container.create_sender(connection, "q", name="snd")
            event.container.create_receiver(connection, "q", name="rcv")
            self.sent = False

        def on_sendable(self, event: Any) -> None:
            if not self.sent:
                self.sent = True
                event.sender.send(base.Message(body="one"))

        def on_message(self, event: Any) -> None:
            record.append(["on_message", event.message.body])
            event.receiver.close()
            if options["session"]:
                event.session.close()
            if options["connection"]:
                event.connection.close()

        def on_link_closed(self, event: Any) -> None:
            record.append(["on_link_closed", event.link.name])

        def on_link_closing(self, event: Any) -> None:
            record.append(["on_link_closing", event.link.name])

        def on_session_closed(self, event: Any) -> None:
            record.append(["on_session_closed"])
            if not options["connection"]:
                event.connection.close()

        def on_connection_closed(self, event: Any) -> None:
            record.append(["on_connection_closed"])

    with BrokerThread() as broker:
        url = broker.url
        reactor.Container(Client()).run()
    return record


SCENARIOS = {"close_in_on_message": close_in_on_message}


def _run(scenario: str, impl: str, options: dict[str, Any]) -> Any:
    return run_scenario(__file__, scenario, impl, options)


pytestmark = [pytest.mark.interop]
pytest.importorskip("proton")


@pytest.mark.parametrize(
    ("session", "connection"),
    [(False, True), (True, True), (True, False)],
    ids=["link-and-connection", "link-session-and-connection", "link-and-session"],
)
def test_link_closed_reported_when_closed_with_its_session_or_connection(session: bool, connection: bool) -> None:
    options = {"session": session, "connection": connection}
    reference = _run("close_in_on_message", "proton", options)
    expected = [["on_message", "one"], ["on_link_closed", "rcv"]]
    expected += [["on_session_closed"]] if session else []
    assert reference == [*expected, ["on_connection_closed"]]  # what proton does, checked: the test's premise
    assert _run("close_in_on_message", "amqp_async.proton", options) == reference


if __name__ == "__main__":
    scenario_main(SCENARIOS)
