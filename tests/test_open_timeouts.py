"""A peer that keeps the connection alive but does not answer: ``open_timeout`` and ``drain_timeout``.

Before these bounds, ``open_session()``, ``open_sender()``/``open_receiver()`` and ``Receiver.drain()`` waited for
ever for a peer that answers heartbeats but not the begin, the attach or the drain (Qpid Proton's C broker example
never answers a drain: tests/test_interop_matrix.py). Now each waits ``open_timeout`` (15 s) or ``drain_timeout``
(60 s) by default, then raises ``SessionTimeout`` / ``LinkTimeout`` (``amqp:resource-limit-exceeded``, also the
builtin ``TimeoutError``), and leaves the connection working:

- the peer is python-qpid-proton's engine (tests/proton_peer.py) served on a socket, told not to answer one session
  or one link: it receives our end or detach, with the condition and why, as proton decodes them;
- a late answer after we gave up is not used: the connection, and the links opened after, go on;
- a drain the peer leaves unanswered is withdrawn (a flow with drain false), and the credit stays usable;
- the options take numbers > 0 or None (no limit), as ``connect_timeout`` does.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from proton import Endpoint, Event

import amqp_async
from amqp_async.client._config import DEFAULT_DRAIN_TIMEOUT, DEFAULT_OPEN_TIMEOUT, resolve_options
from amqp_async.codec.performatives import Begin, Close, End

try:
    from frames import frame, frames_only
    from proton_peer import ProtonPeer
    from scripted_server import Peer, ScriptedServer, open_then
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.frames import frame, frames_only
    from tests.proton_peer import ProtonPeer
    from tests.scripted_server import Peer, ScriptedServer, open_then

pytestmark = pytest.mark.anyio

TIMEOUT = 20.0
LIMIT = 0.5  # the open_timeout / drain_timeout under test: short, so that the tests are
CONDITION = "amqp:resource-limit-exceeded"
REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


class SilentPeer(ProtonPeer):
    """python-qpid-proton's engine as a server that answers everything but sessions (``silent_sessions``) or links
    to or from an address in ``silent_addresses``."""

    def __init__(self, *, silent_sessions: bool = False, silent_addresses: frozenset[str] = frozenset(), **kw: Any):
        super().__init__("server", auto_accept=True, auto_credit=10, auto_outcome="accepted", **kw)
        self.silent_sessions = silent_sessions
        self.silent_addresses = silent_addresses
        self.unanswered: list[Any] = []  # the proton links left unanswered, for a late answer

    def _react(self, event: Event) -> None:
        if self.silent_sessions and event.type in (Event.SESSION_REMOTE_OPEN, Event.SESSION_REMOTE_CLOSE):
            # silent to the end: proton, closing a session it never began, sends a begin of its own and an end
            # (and then refuses the answer to that begin), which is not what this peer is for
            return
        super()._react(event)

    def _accept_link(self, link: Any) -> None:
        terminus = link.remote_target if link.is_receiver else link.remote_source
        if terminus.address in self.silent_addresses:
            self.unanswered.append(link)
            return
        super()._accept_link(link)


def served(proton_peer: ProtonPeer) -> Callable[[Peer], Any]:
    """A ScriptedServer script relaying one connection's bytes to and from ``proton_peer``."""

    async def script(peer: Peer) -> None:
        fed = 0
        while True:
            if len(peer.received) > fed:
                proton_peer.feed(bytes(peer.received[fed:]))
                fed = len(peer.received)
            proton_peer.tick(time.monotonic())
            out = proton_peer.take()
            if out:
                await peer.send(out)
            if peer.closed.is_set() and len(peer.received) == fed:
                return
            await peer.wait_received(fed + 1, timeout=0.02)

    return script


def saw(proton_peer: ProtonPeer, kind: str, **fields: Any) -> bool:
    return proton_peer.recorder.saw(kind, **fields)


async def until(predicate: Callable[[], bool], what: str) -> None:
    with anyio.fail_after(5):
        while not predicate():
            await anyio.sleep(0.01)
    assert predicate(), what


async def test_an_unanswered_begin_fails_open_sender_after_open_timeout() -> None:
    proton_peer = SilentPeer(silent_sessions=True)
    async with ScriptedServer(served(proton_peer), linger=True) as server:
        with anyio.fail_after(TIMEOUT):
            async with amqp_async.connect(server.url, sasl_enabled=False, open_timeout=LIMIT) as conn:
                started = time.monotonic()
                with pytest.raises(amqp_async.SessionTimeout) as raised:
                    await conn.open_sender("q")
                waited = time.monotonic() - started
                assert LIMIT <= waited < LIMIT + 2.0
                error = raised.value
                assert isinstance(error, amqp_async.SessionError) and isinstance(error, TimeoutError)
                assert error.condition == CONDITION
                assert "did not answer the session's begin within open_timeout (0.5 s)" in str(error)
                # python-qpid-proton received our end, with the condition
                await until(lambda: saw(proton_peer, "session_remote_close", condition=CONDITION), "no end")
                assert not conn.is_closed
                with pytest.raises(amqp_async.SessionTimeout):
                    await conn.open_session()  # each open has its own time limit


async def test_an_unanswered_attach_fails_after_open_timeout_and_the_connection_goes_on() -> None:
    proton_peer = SilentPeer(silent_addresses=frozenset({"silent"}))
    async with ScriptedServer(served(proton_peer), linger=True) as server:
        with anyio.fail_after(TIMEOUT):
            async with amqp_async.connect(server.url, sasl_enabled=False, open_timeout=LIMIT) as conn:
                for opening in (conn.open_receiver, conn.open_sender):
                    started = time.monotonic()
                    with pytest.raises(amqp_async.LinkTimeout) as raised:
                        await opening("silent")
                    assert LIMIT <= time.monotonic() - started < LIMIT + 2.0
                    error = raised.value
                    assert isinstance(error, amqp_async.LinkError) and isinstance(error, TimeoutError)
                    assert error.condition == CONDITION
                    assert "did not answer the attach of the" in str(error) and "'silent'" in str(error)
                # python-qpid-proton received both detaches (closed), with the condition
                await until(
                    lambda: len(proton_peer.recorder.find("link_remote_close", condition=CONDITION)) == 2,
                    "no detach",
                )
                # a late answer to the attach is not used: the links stay closed, the connection goes on
                for link in proton_peer.unanswered:
                    link.open()
                sender = await conn.open_sender("q")
                assert (await sender.send(amqp_async.Message(body="after"))) is not None
                receiver = await conn.open_receiver("q")  # the peer grants nothing here: the link attaches
                assert not receiver.is_closed and not conn.is_closed
    assert [incoming.link_name for incoming in proton_peer.all_received] == [sender.name]


async def test_the_open_timeout_bounds_an_async_with_opening_too() -> None:
    proton_peer = SilentPeer(silent_addresses=frozenset({"silent"}))
    async with ScriptedServer(served(proton_peer), linger=True) as server:
        with anyio.fail_after(TIMEOUT):
            async with amqp_async.connect(server.url, sasl_enabled=False, open_timeout=LIMIT) as conn:
                with pytest.raises(amqp_async.LinkTimeout):
                    async with conn.open_stream_receiver("silent"):
                        pytest.fail("attached to a peer that never answered")
                with pytest.raises(amqp_async.LinkTimeout):
                    async with conn.open_stream_sender("silent"):
                        pytest.fail("attached to a peer that never answered")


async def test_open_timeout_none_waits_as_long_as_it_takes() -> None:
    proton_peer = SilentPeer(silent_addresses=frozenset({"silent"}))
    async with ScriptedServer(served(proton_peer), linger=True) as server:
        with anyio.fail_after(TIMEOUT):
            async with amqp_async.connect(server.url, sasl_enabled=False, open_timeout=None) as conn:
                with anyio.move_on_after(LIMIT * 3) as waited:
                    await conn.open_receiver("silent")
                assert waited.cancelled_caught  # still waiting, past three times the limit used above


async def test_an_unanswered_drain_is_withdrawn_after_drain_timeout_and_the_credit_stays() -> None:
    proton_peer = SilentPeer(auto_drain=False)
    async with ScriptedServer(served(proton_peer), linger=True) as server:
        with anyio.fail_after(TIMEOUT):
            async with amqp_async.connect(server.url, sasl_enabled=False, drain_timeout=LIMIT) as conn:
                receiver = await conn.open_receiver("q", credit=5)
                started = time.monotonic()
                with pytest.raises(amqp_async.LinkTimeout) as raised:
                    await receiver.drain()
                assert LIMIT <= time.monotonic() - started < LIMIT + 2.0
                assert raised.value.condition == CONDITION
                assert "did not answer the drain" in str(raised.value)
                # python-qpid-proton saw the drain asked, then withdrawn; the link is attached, with its credit
                await until(lambda: saw(proton_peer, "link_flow", drain=False, credit=5), "no drain withdrawn")
                flows = [record.drain for record in proton_peer.recorder.find("link_flow")]
                assert any(flows) and not flows[-1], flows  # asked (drain true), then withdrawn (false)
                assert not receiver.is_closed
                # the credit is still the sender's to use: a message sent now arrives
                proton_link = proton_peer.links[receiver.name]
                proton_peer.send(proton_link, amqp_async.Message(body="later").encode(), b"t1")
                delivery = await receiver.receive()
                assert delivery.message.body == "later"
                await delivery.accept()
                # a call's own timeout wins over the connection's (the message names the one that passed)
                started = time.monotonic()
                with pytest.raises(amqp_async.LinkTimeout, match=r"within 0\.2 s"):
                    await receiver.drain(timeout=0.2)
                assert time.monotonic() - started >= 0.2


async def test_a_drain_answered_returns_before_its_timeout() -> None:
    proton_peer = SilentPeer()  # answers a drain on an idle link at once (proton's Sender.drained())
    async with ScriptedServer(served(proton_peer), linger=True) as server:
        with anyio.fail_after(TIMEOUT):
            async with amqp_async.connect(server.url, sasl_enabled=False, drain_timeout=LIMIT) as conn:
                receiver = await conn.open_receiver("q", credit=5)
                await receiver.drain(timeout=None)
                assert receiver.credit == 5  # the drain ended (credit given back), then the prefetch granted again
                assert proton_peer.links[receiver.name].state & Endpoint.LOCAL_ACTIVE


def test_the_defaults_and_the_values_taken() -> None:
    options = resolve_options("amqp://127.0.0.1", {})
    assert (options.open_timeout, options.drain_timeout) == (DEFAULT_OPEN_TIMEOUT, DEFAULT_DRAIN_TIMEOUT)
    assert (DEFAULT_OPEN_TIMEOUT, DEFAULT_DRAIN_TIMEOUT) == (15.0, 60.0)
    options = resolve_options("amqp://127.0.0.1", {"open_timeout": None, "drain_timeout": float("inf")})
    assert (options.open_timeout, options.drain_timeout) == (None, None)
    assert resolve_options("amqp://127.0.0.1", {"open_timeout": 2}).open_timeout == 2.0
    for name in ("open_timeout", "drain_timeout"):
        with pytest.raises(ValueError, match=f"{name} must be > 0 seconds"):
            resolve_options("amqp://127.0.0.1", {name: 0})
        with pytest.raises(TypeError, match=f"{name} must be a number of seconds or None"):
            resolve_options("amqp://127.0.0.1", {name: "5"})
        with pytest.raises(TypeError, match=f"{name} must be a number of seconds or None"):
            resolve_options("amqp://127.0.0.1", {name: True})


async def test_a_bad_drain_timeout_is_refused_at_the_call() -> None:
    proton_peer = SilentPeer()
    async with ScriptedServer(served(proton_peer), linger=True) as server:
        with anyio.fail_after(TIMEOUT):
            async with amqp_async.connect(server.url, sasl_enabled=False) as conn:
                receiver = await conn.open_receiver("q", credit=5)
                with pytest.raises(ValueError, match="timeout must be > 0 seconds"):
                    await receiver.drain(timeout=-1)
                with pytest.raises(TypeError, match="timeout must be a number of seconds or None"):
                    await receiver.drain(timeout="1")  # type: ignore[arg-type]


async def test_the_command_line_exits_7_naming_the_condition() -> None:
    proton_peer = SilentPeer(silent_addresses=frozenset({"silent"}))
    async with ScriptedServer(served(proton_peer), linger=True) as server:
        with anyio.fail_after(TIMEOUT * 2):
            command = [sys.executable, "-m", "amqp_async", "receive", "-u", server.url, "--no-sasl"]
            result = await anyio.run_process(
                [*command, "--open-timeout", "0.5", "silent"], check=False, cwd=REPO, env=_cli_env()
            )
    stderr = result.stderr.decode()
    assert result.returncode == 7, stderr
    assert CONDITION in stderr and "did not answer the attach" in stderr and "open_timeout (0.5 s)" in stderr


def _cli_env() -> dict[str, str]:
    env = {name: value for name, value in os.environ.items() if not name.startswith(("AMQP_ASYNC_", "PN_TRACE"))}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    return env


async def test_a_late_begin_after_our_end_is_not_used() -> None:
    # Frame by frame (python-qpid-proton cannot be made to answer a begin after it read our end): the peer's begin
    # arrives after our end went out, then its end. The session stays ended; the connection goes on and closes.
    async def late(peer: Peer) -> None:
        await open_then()(peer)
        begun = len(peer.received)
        await peer.wait_received(begun + 1, timeout=5.0)  # our begin
        asked = len(peer.received)
        await peer.wait_received(asked + 1, timeout=5.0)  # our end, after open_timeout
        ours = frames_only(bytes(peer.received[begun:]))
        assert [type(item.body) for item in ours] == [Begin, End], ours
        await peer.send(frame(Begin(remote_channel=0, next_outgoing_id=0, incoming_window=10, outgoing_window=10)))
        await peer.send(frame(End()))
        ended = len(peer.received)
        if await peer.wait_received(ended + 1, timeout=5.0):  # the client's close
            await peer.send(frame(Close()))

    async with ScriptedServer(late, linger=True) as server:
        with anyio.fail_after(TIMEOUT):
            async with amqp_async.connect(server.url, sasl_enabled=False, open_timeout=LIMIT) as conn:
                with pytest.raises(amqp_async.SessionTimeout):
                    await conn.open_session()
                await anyio.sleep(0.3)  # the late begin and end arrive
                assert not conn.is_closed
            assert await server.all_clients_closed(5.0)
    after = frames_only(bytes(server.peers[0].received))
    assert not any(isinstance(item.body, Close) and item.body.error is not None for item in after), after
