"""The proton callback API against a misbehaving server: each case ends in proton's own exception (or a transport
error handed to the handler) naming what went wrong, in bounded time, and the client closes its socket.

The servers are scripts of ``tests/scripted_server.py`` (raw bytes on a real socket, on the test's event loop);
the blocking proton programs run in a worker thread so that the server's loop goes on meanwhile.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

import anyio
import pytest

try:
    from frames import AMQP_HEADER, frame, raw_frame
    from scripted_server import Peer, ScriptedServer, open_then
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.frames import AMQP_HEADER, frame, raw_frame
    from tests.scripted_server import Peer, ScriptedServer, open_then

from amqp_async.codec.performatives import Begin, Open
from amqp_async.proton import ConnectionException, Timeout
from amqp_async.proton.handlers import MessagingHandler
from amqp_async.proton.reactor import Container
from amqp_async.proton.utils import BlockingConnection

pytestmark = pytest.mark.anyio

#: The most any case may take (each would hang for ever without its bound).
DEADLINE = 15.0
#: A frame whose body is no performative: a described list with a lying size.
GARBAGE = raw_frame(b"\x00\x53\x10\xd0\xff\xff\xff\xff")
#: How long the client has, once its call returned, to have closed its socket.
SOCKET_GRACE = 5.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def silent(peer: Peer) -> None:
    """Accept the socket and say nothing."""
    await peer.wait_received(8, timeout=DEADLINE)


async def answer_begin_only(peer: Peer) -> None:
    """Open, answer the client's begin once it came (its descriptor, 0x11, in what the client sent), then say
    nothing more."""
    await peer.wait_received(9, timeout=DEADLINE)
    await peer.send(AMQP_HEADER + frame(Open(container_id="scripted")))
    with anyio.move_on_after(DEADLINE):
        while b"\x00\x53\x11" not in peer.received:
            await peer.wait_received(len(peer.received) + 1, timeout=DEADLINE)
    await peer.send(frame(Begin(remote_channel=0, next_outgoing_id=0, incoming_window=1000, outgoing_window=1000)))


async def in_thread(call: Any) -> tuple[BaseException | None, float]:
    """Run the blocking ``call`` in a worker thread; what it raised (None if nothing) and how long it took."""

    def run() -> tuple[BaseException | None, float]:
        start = time.monotonic()
        try:
            call()
        except Exception as exc:
            return exc, time.monotonic() - start
        return None, time.monotonic() - start

    with anyio.fail_after(DEADLINE):
        return await anyio.to_thread.run_sync(run)


async def test_a_server_that_never_opens_times_the_blocking_connection_out() -> None:
    async with ScriptedServer(silent, linger=True) as server:
        error, took = await in_thread(
            lambda: BlockingConnection(server.url, timeout=1.0, reconnect=False, sasl_enabled=False)
        )
        assert isinstance(error, Timeout), error
        assert took < 5.0
        assert await server.all_clients_closed(SOCKET_GRACE), "the client socket was left open"


async def test_garbage_after_the_header_fails_the_blocking_connection_with_the_condition() -> None:
    """Bytes that are no frame after the protocol header: a decode or framing error, not a hang."""
    # The header answered, then a frame whose body is not a performative.
    async with ScriptedServer(open_then(GARBAGE, wait_open=False), linger=True) as server:
        error, _ = await in_thread(
            lambda: BlockingConnection(server.url, timeout=5.0, reconnect=False, sasl_enabled=False)
        )
        assert isinstance(error, ConnectionException), error
        assert "amqp:decode-error" in str(error) or "amqp:connection:framing-error" in str(error), error
        assert await server.all_clients_closed(SOCKET_GRACE), "the client socket was left open"


async def test_a_server_that_never_answers_the_attach_times_the_sender_out() -> None:
    """The connection opens, the begin is answered, the attach never is: create_sender times out."""
    async with ScriptedServer(answer_begin_only, linger=True) as server:

        def program() -> None:
            connection = BlockingConnection(server.url, timeout=1.0, reconnect=False, sasl_enabled=False)
            try:
                connection.create_sender("nowhere")
            finally:
                # Proton waits for the close's answer (up to the timeout, then Timeout); either way it is bounded.
                with contextlib.suppress(Timeout):
                    connection.close()

        error, took = await in_thread(program)
        assert isinstance(error, Timeout), error
        assert took < 10.0
        assert await server.all_clients_closed(SOCKET_GRACE), "the client socket was left open"


async def test_a_container_gets_a_transport_error_and_run_returns() -> None:
    """The callback API proper: garbage from the server reaches ``on_transport_error`` with its condition, and
    ``Container.run()`` returns."""
    async with ScriptedServer(open_then(GARBAGE, wait_open=False)) as server:
        conditions: list[str] = []

        class Client(MessagingHandler):  # type: ignore[misc]
            def on_start(self, event: Any) -> None:
                event.container.connect(server.url, reconnect=False, sasl_enabled=False)

            def on_transport_error(self, event: Any) -> None:
                condition = event.transport.condition
                conditions.append(condition.name if condition is not None else "")

        error, _ = await in_thread(lambda: Container(Client()).run())
        assert error is None, error
        assert conditions and conditions[0] in ("amqp:decode-error", "amqp:connection:framing-error"), conditions
        assert await server.all_clients_closed(SOCKET_GRACE), "the client socket was left open"
