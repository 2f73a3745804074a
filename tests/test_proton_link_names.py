"""Two links of one name on a connection (§2.6.1: a link's name and role identify it between two containers).

The container names a link after its container and address (as proton does), so two ``create_sender(conn, "q")``
make two links of one name:

* both open: the engine refuses the second attach (the program's error; proton's peer closes the connection with
  ``amqp:invalid-field``). It was a transport error, then a reconnect meeting the same refusal, for ever; now the
  connection ends with the error and is not retried, and ``BlockingConnection.create_*`` raises a
  ``ProtonException`` (it raised the engine's own error).
* the first closed just before the second opens (a program that closes a sender and makes another to the same
  address, in one callback): the engine refused it until the peer answered the detach; proton writes both and its
  peer reads them in order. Now the second attaches once the peer's detach comes.

The peer is the embedded broker (a python-qpid-proton Container server refuses a name it still maps).
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from amqp_async.broker import BrokerThread
from amqp_async.proton import Message, ProtonException
from amqp_async.proton.handlers import MessagingHandler
from amqp_async.proton.reactor import Container
from amqp_async.proton.utils import BlockingConnection

TIMEOUT = 20.0


def _run(container: Container) -> None:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            container.run()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(TIMEOUT)
    assert not thread.is_alive(), "the container still runs: retried for ever?"
    if errors:
        raise errors[0]


def test_two_open_links_of_one_name_end_the_connection_once_without_reconnecting() -> None:
    calls: list[tuple[str, Any]] = []

    class TwoSenders(MessagingHandler):  # type: ignore[misc]
        def on_start(self, event: Any) -> None:
            connection = event.container.connect(url)  # reconnect left at its default
            first = event.container.create_sender(connection, "q")
            second = event.container.create_sender(connection, "q")
            assert first.name == second.name

        def on_transport_error(self, event: Any) -> None:
            condition = event.transport.condition
            calls.append(("transport_error", (condition.name, condition.description)))

        def on_disconnected(self, event: Any) -> None:
            calls.append(("disconnected", None))

    with BrokerThread() as broker:
        url = broker.url
        _run(Container(TwoSenders()))
    errors = [detail for name, detail in calls if name == "transport_error"]
    assert len(errors) == 1, calls  # before: one a reconnect, for ever
    condition, description = errors[0]
    assert condition == "amqp:illegal-state" and "already attached" in description


def test_blocking_connection_refuses_a_second_open_link_of_one_name_with_a_proton_exception() -> None:
    with BrokerThread() as broker:
        connection = BlockingConnection(broker.url, timeout=TIMEOUT)
        try:
            connection.create_receiver("q")
            with pytest.raises(ProtonException, match="already attached"):
                connection.create_receiver("q")
        finally:
            connection.close()


def test_a_link_closed_and_made_again_by_name_in_one_callback_opens_once_the_peer_has_answered() -> None:
    seen: list[str] = []

    class Again(MessagingHandler):  # type: ignore[misc]
        def on_start(self, event: Any) -> None:
            self.connection = event.container.connect(url, reconnect=False)
            self.sender = event.container.create_sender(self.connection, "again")
            self.opened = 0

        def on_link_opened(self, event: Any) -> None:
            self.opened += 1
            seen.append(f"opened {self.opened}")
            if self.opened == 1:
                self.sender.close()
                self.sender = event.container.create_sender(self.connection, "again")  # before: raised

        def on_sendable(self, event: Any) -> None:
            if self.opened == 2 and event.sender is self.sender and "sent" not in seen:
                seen.append("sent")
                event.sender.send(Message(body="after the namesake"))

        def on_link_closed(self, event: Any) -> None:
            seen.append("closed")

        def on_accepted(self, event: Any) -> None:
            seen.append("accepted")
            self.connection.close()

    with BrokerThread() as broker:
        url = broker.url
        _run(Container(Again()))
        assert len(broker.broker.queues["again"]) == 1
    assert seen == ["opened 1", "closed", "opened 2", "sent", "accepted"]
