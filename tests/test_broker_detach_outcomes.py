"""A producer's last messages and its detach, read together, get their outcomes before the broker's detach.

The engine answered a detach as it read it, and the broker gave the outcomes of the messages that came in the same
read afterwards: the client, which forgets a link's deliveries at the broker's detach (§2.6.4), took messages the
broker kept as in doubt (``submit()`` then ``close()``: ``DeliveryInDoubt`` for messages a consumer then received).
The engine now answers a receiver link's detach once the layer above has handled the input (protocol/session.py
``_on_detach``), as python-qpid-proton's broker does.

Clients: ours (its transfers and detach in one write) and python-qpid-proton's Container (a handler that sends and
closes its sender in one callback, so that proton writes them together); the broker is the embedded one.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from broker_serving import serving

import amqp_async
from amqp_async import Accepted, Message
from amqp_async.broker import BrokerThread

proton = pytest.importorskip("proton", reason="python-qpid-proton is a test dependency (the independent peer)")
from proton.handlers import MessagingHandler  # noqa: E402 - after the importorskip that explains its absence
from proton.reactor import Container  # noqa: E402

MESSAGES = 20
TIMEOUT = 20.0


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.mark.anyio
@pytest.mark.parametrize("durable", [False, True], ids=["in-memory", "durable-in-data-dir"])
async def test_messages_submitted_just_before_a_close_are_accepted_not_in_doubt(durable: bool, tmp_path: Any) -> None:
    # durable: the outcomes wait for the store's commit, and the broker's detach waits for them
    options = {"data_dir": tmp_path} if durable else {}
    async with serving(**options) as broker, amqp_async.connect(broker.url) as conn:
        with anyio.fail_after(TIMEOUT):
            for round_ in range(5):
                sender = await conn.open_sender("last-words")
                trackers = [
                    await sender.submit(Message(body=f"{round_}-{i}", durable=durable)) for i in range(MESSAGES)
                ]
                await sender.close()  # the detach goes out with the transfers still unanswered
                outcomes = [await tracker for tracker in trackers]  # before: DeliveryInDoubt
                assert all(isinstance(outcome, Accepted) for outcome in outcomes), outcomes
            receiver = await conn.open_receiver("last-words", credit=5 * MESSAGES)
            bodies = [(await receiver.receive()).message.body for _ in range(5 * MESSAGES)]
        assert bodies == [f"{round_}-{i}" for round_ in range(5) for i in range(MESSAGES)]


class _SendThenClose(MessagingHandler):  # type: ignore[misc]
    """Send ``MESSAGES`` messages and close the sender in the same callback: proton writes the transfers and the
    detach together. Records each delivery's outcome and whether it came before the link's close."""

    def __init__(self, url: str) -> None:
        super().__init__()
        self.url = url
        self.sent = False
        self.outcomes: list[tuple[str, bool]] = []
        self.link_closed = False

    def on_start(self, event: Any) -> None:
        self.connection = event.container.connect(self.url)
        event.container.create_sender(self.connection, "proton-last-words")

    def on_sendable(self, event: Any) -> None:
        if self.sent:
            return
        self.sent = True
        for i in range(MESSAGES):
            event.sender.send(proton.Message(body=i))
        event.sender.close()

    def on_accepted(self, event: Any) -> None:
        self.outcomes.append(("accepted", self.link_closed))

    def on_rejected(self, event: Any) -> None:
        self.outcomes.append(("rejected", self.link_closed))

    def on_link_closed(self, event: Any) -> None:
        self.link_closed = True
        event.connection.close()


def test_python_qpid_protons_sender_closed_with_its_messages_learns_their_outcomes_first() -> None:
    with BrokerThread(port=0) as broker:
        handler = _SendThenClose(broker.url)
        container = Container(handler)
        container.timeout = TIMEOUT
        container.run()
        # each outcome came, and before the broker's detach (before: none came, proton forgets a closed link's
        # deliveries)
        assert handler.outcomes == [("accepted", False)] * MESSAGES
        assert len(broker.broker.queues["proton-last-words"]) == MESSAGES
