"""The peer's detach (and end) of links the program left open when it closed their connection (or session), in
amqp_async.proton beside python-qpid-proton 0.40: the same program on each, the same callbacks in the same order.

proton closes only the endpoints the program closed: a link left open when the connection is closed is still open on
our side when the peer's detach arrives, so proton reports a remote close of an open link (``on_link_closing``, or
``on_link_error`` with the peer's condition); its handler then closes the link, and that local close, dispatched
after the events already queued (the connection's close among them), reports ``on_link_closed``. The peer is
python-qpid-proton's container, which detaches the links and ends the sessions before it answers a close (or an end)
when told to. Each scenario runs in a subprocess of its own (``python this_file.py SCENARIO IMPL OPTIONS``: a hang
fails the test, it never blocks the suite), once on real proton and once on ours.
"""

from __future__ import annotations

import importlib
from typing import Any

import pytest
from scenario_subprocess import run_scenario, scenario_main


def _detaching_peer(options: dict[str, Any]) -> Any:
    """A proton server that, at our close of the connection (``options["close"] == "connection"``) or of the session
    (``"session"``), closes the links (with ``options["condition"]`` if set) and the sessions before it answers."""
    import proton
    import proton.handlers

    def close_links(connection: Any) -> None:
        link = connection.link_head(proton.Endpoint.LOCAL_ACTIVE)
        while link is not None:
            if options["condition"]:
                link.condition = proton.Condition("amqp:internal-error", "the peer's reason")
            link.close()
            link = connection.link_head(proton.Endpoint.LOCAL_ACTIVE)

    class Peer(proton.handlers.MessagingHandler):  # type: ignore[misc]
        def on_session_closing(self, event: Any) -> None:
            close_links(event.connection)
            event.session.close()

        def on_connection_closing(self, event: Any) -> None:
            close_links(event.connection)
            session = event.connection.session_head(proton.Endpoint.LOCAL_ACTIVE)
            while session is not None:
                session.close()
                session = event.connection.session_head(proton.Endpoint.LOCAL_ACTIVE)

    return Peer()


def close_with_links_open(name: str, options: dict[str, Any]) -> Any:
    """A sender and a receiver; once both are open the program closes the receiver when ``options["link"]``, then the
    connection (or the session, then the connection once the session is closed). Recorded: the closing callbacks."""
    from proton_peer import proton_server

    handlers = importlib.import_module(name + ".handlers")
    reactor = importlib.import_module(name + ".reactor")
    record: list[Any] = []

    class Client(handlers.MessagingHandler):  # type: ignore[misc]
        def on_start(self, event: Any) -> None:
            connection = event.container.connect(url, reconnect=False)
            event.container.create_sender(connection, "q", name="snd")
            event.container.create_receiver(connection, "q", name="rcv")
            self.opened = 0

        def on_link_opened(self, event: Any) -> None:
            self.opened += 1
            if self.opened < 2:
                return
            if options["link"]:
                event.receiver.close()
            if options["close"] == "session":
                event.session.close()
            else:
                event.connection.close()

        def on_link_closing(self, event: Any) -> None:
            record.append(["on_link_closing", event.link.name])

        def on_link_error(self, event: Any) -> None:
            record.append(["on_link_error", event.link.name, event.link.remote_condition.description])

        def on_link_closed(self, event: Any) -> None:
            record.append(["on_link_closed", event.link.name])

        def on_session_closing(self, event: Any) -> None:
            record.append(["on_session_closing"])

        def on_session_closed(self, event: Any) -> None:
            record.append(["on_session_closed"])
            if options["close"] == "session":
                event.connection.close()

        def on_connection_closed(self, event: Any) -> None:
            record.append(["on_connection_closed"])

    with proton_server(_detaching_peer(options)) as url:
        reactor.Container(Client()).run()
    return record


SCENARIOS = {"close_with_links_open": close_with_links_open}


def _run(scenario: str, impl: str, options: dict[str, Any]) -> Any:
    return run_scenario(__file__, scenario, impl, options)


pytestmark = [pytest.mark.interop]
pytest.importorskip("proton")

SENDER_CLOSING = [["on_link_closing", "snd"]]
BOTH_CLOSING = [["on_link_closing", "snd"], ["on_link_closing", "rcv"]]
BOTH_CLOSED = [["on_link_closed", "snd"], ["on_link_closed", "rcv"]]


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (
            {"close": "connection", "link": False, "condition": False},
            [*BOTH_CLOSING, ["on_session_closing"], ["on_connection_closed"], *BOTH_CLOSED, ["on_session_closed"]],
        ),
        (
            {"close": "connection", "link": True, "condition": False},
            [
                ["on_link_closed", "rcv"],
                *SENDER_CLOSING,
                ["on_session_closing"],
                ["on_connection_closed"],
                ["on_link_closed", "snd"],
                ["on_session_closed"],
            ],
        ),
        (
            {"close": "connection", "link": False, "condition": True},
            [
                ["on_link_error", "snd", "the peer's reason"],
                ["on_link_error", "rcv", "the peer's reason"],
                ["on_session_closing"],
                ["on_connection_closed"],
                *BOTH_CLOSED,
                ["on_session_closed"],
            ],
        ),
        (
            {"close": "session", "link": False, "condition": False},
            [*BOTH_CLOSING, ["on_session_closed"], *BOTH_CLOSED, ["on_connection_closed"]],
        ),
    ],
    ids=["connection", "receiver-then-connection", "connection-peer-condition", "session"],
)
def test_peer_detach_after_our_close_reported_as_proton_does(options: dict[str, Any], expected: Any) -> None:
    reference = _run("close_with_links_open", "proton", options)
    assert reference == expected  # what proton does, checked: the test's premise
    assert _run("close_with_links_open", "amqp_async.proton", options) == reference


if __name__ == "__main__":
    scenario_main(SCENARIOS)
