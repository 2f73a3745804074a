"""At-most-once messages the PEER's ending (or the transport's loss) drops unsent are reported, as our close's are.

An at-most-once message is settled as it is handed to the engine (``submit()`` returns then, with no outcome to wait
for); past the peer's incoming window (§2.5.6) its transfer waits in the engine. When the peer detached the link,
ended the session or closed the connection, the engine dropped those transfers as it read the frame, before the
client saw the event; when the transport was lost they were lost with it: no tracker could fail, and nothing said
messages were lost (only our own close counted them in a warning). Now the engine's event names the deliveries it
cut short (``LinkDetached.dropped``, ``SessionEnded.dropped``, ``ConnectionClosed.dropped``), and the client logs the
same warning on ``amqp_async.connection``: how many, the sender's address, and what ended. A ``send()`` still
waiting for the window raises the condition of what ended, saying the message was never sent.

The peer is python-qpid-proton with a session window of four frames that reads no transfer, and ends what the test
asks once every message is handed over; the transport is cut by a relay in between. The engine's part is checked
on its own too, against our engine as the peer, in memory.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio
import anyio.abc
import pytest
from engine_peer import CLIENT, SERVER, EnginePeer, pump

import amqp_async
from amqp_async import ConnectionClosed, ConnectionLost, LinkDetached, Message, SessionError
from amqp_async.codec.performatives import Error
from amqp_async.protocol import events as ev

pytest.importorskip("proton", reason="python-qpid-proton is a test dependency (the independent peer)")
from proton_peer import proton_server
from shut_window_peer import ENDING_CONDITION, ONE_FRAME, WINDOW_FRAMES, EndsOnCue, cuttable_relay

pytestmark = pytest.mark.anyio

TIMEOUT = 60.0
#: at-most-once messages submitted: the first WINDOW_FRAMES are written, the others wait (one more: a send())
SUBMITTED = 12


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.mark.parametrize(
    ("ending", "reconnect", "what", "kind"),
    [
        ("detach", False, "sender", LinkDetached),
        ("end", False, "session", SessionError),
        ("close", False, "connection", ConnectionClosed),
        ("cut", False, "connection", ConnectionLost),
        ("cut", True, "connection", ConnectionLost),
    ],
    ids=["peer-detach", "peer-end", "peer-close", "transport-lost", "transport-lost-reconnect"],
)
async def test_at_most_once_messages_dropped_by_the_peer_or_the_network_are_counted_in_a_warning(
    ending: str, reconnect: bool, what: str, kind: type[BaseException], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="amqp_async.connection")
    handler = EndsOnCue(ending, answer_detach=ending != "cut")
    outcome: list[BaseException | None] = []
    with proton_server(handler) as url, anyio.fail_after(TIMEOUT):
        relay = cuttable_relay(url, reconnects_pass=True)
        async with relay as (relayed, cut), amqp_async.connect(relayed, reconnect=reconnect) as conn:
            sender = await conn.open_sender("stalled", delivery="at-most-once")
            session = sender._engine_link.session
            # one frame each: the first four fill the peer's window, the other eight never leave the engine
            for _ in range(SUBMITTED):
                await sender.submit(Message(body=ONE_FRAME))

            async def send_one() -> None:
                try:
                    await sender.send(Message(body=b"waits for the window"))
                except Exception as exc:
                    outcome.append(exc)
                else:
                    outcome.append(None)

            async with anyio.create_task_group() as group:
                group.start_soon(send_one)
                while len(set(session.backlogged_deliveries)) < SUBMITTED - WINDOW_FRAMES + 1:
                    await anyio.sleep(0.01)  # the send() handed over, waiting behind the others
                if ending == "cut":
                    cut.set()
                else:
                    handler.cue.set()
    [error] = outcome
    assert isinstance(error, kind), repr(error)  # the send() raised, not hung
    assert "never sent" in str(error)
    if ending != "cut":
        assert error.condition == ENDING_CONDITION  # type: ignore[attr-defined]
    dropped = [record for record in caplog.records if "at-most-once" in record.getMessage()]
    [warning] = dropped  # before: none (the messages went without a word)
    assert warning.levelno == logging.WARNING
    message = warning.getMessage()
    assert message.startswith("9 at-most-once message(s) of the sender to 'stalled' were dropped"), message
    assert f"the {what} ended" in message


# --- the engine's part: the events name the deliveries the ending cut short -----------------------------------


def _stalled_pair() -> tuple[EnginePeer, EnginePeer, Any, list[Any]]:
    """Our engine as client and as server, the server's session window two frames and shut (it reads nothing
    more): four one-frame deliveries sent at most once, the first two written, the last two waiting for the
    window. Returns the client, the server, the client's sender link and the four deliveries."""
    client = EnginePeer(CLIENT)
    server = EnginePeer(SERVER, auto_accept=True, auto_credit=100)
    client.open()
    session = client.begin()
    pump(client, server)
    [server_session] = server.connection.sessions
    server_session.set_incoming_window(2)  # taken over from the engine's replenishing: it stays shut
    link = client.sender(session, "stalled", "queue")
    pump(client, server)
    deliveries = [link.send(b"m%d" % n, settled=True) for n in range(4)]
    pump(client, server)
    assert [delivery.written for delivery in deliveries] == [True, True, False, False]
    return client, server, link, deliveries


@pytest.mark.parametrize("ending", ["detach", "end", "close", "transport"])
def test_the_engine_names_what_the_peers_ending_dropped(ending: str) -> None:
    client, server, link, deliveries = _stalled_pair()
    peer_error = Error(condition=ENDING_CONDITION, description="the peer gives up")
    if ending == "detach":
        [server_link] = server.connection.sessions[0].links
        server_link.detach(error=peer_error)
    elif ending == "end":
        server.connection.sessions[0].end(peer_error)
    elif ending == "close":
        server.connection.close(peer_error)
    if ending == "transport":
        client.feed(b"")
    else:
        pump(client, server)
    kind = {
        "detach": ev.LinkDetached,
        "end": ev.SessionEnded,
        "close": ev.ConnectionClosed,
        "transport": ev.ConnectionClosed,
    }[ending]
    [event] = client.of_type(kind)
    assert event.dropped == tuple(deliveries[2:])  # before: no such field; the queue was cleared unseen
    assert not link.session.has_backlog or ending == "transport"


def test_our_own_detach_leaves_the_answer_nothing_to_name() -> None:
    """Our detach dropped them as it ran (the layer above named them just before, from
    ``Session.incomplete_deliveries``): the peer's answer names none."""
    client, server, link, deliveries = _stalled_pair()
    assert link.session.incomplete_deliveries(link) == tuple(deliveries[2:])
    link.detach()
    pump(client, server)
    [event] = client.of_type(ev.LinkDetached)
    assert event.dropped == () and not event.remote
    assert link.session.incomplete_deliveries() == ()
