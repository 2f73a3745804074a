"""An ``open_session()`` abandoned (cancelled, or its begin failed) before the peer answered its begin ends the
session only once the peer's begin has come (amqp_async/client/_session.py, ``Session._abandon``).

Both went out together before; python-qpid-proton, reading a begin and an end at once, answers with a begin that
names no remote-channel, which reads as a session it starts; our engine answers that, naming a channel proton has
ended, and proton closes the connection ("begin reply to unknown channel"): 5 runs in 100 of
``test_client_reconnect.py::test_an_open_cancelled_before_its_answer_leaves_no_link_behind`` under load, none since.
A raw peer checks the order of the frames.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from typing import Any

import anyio
import pytest

import amqp_async
from amqp_async.codec.performatives import Begin, End, Open

try:
    from frames import AMQP_HEADER, frame, take_complete_frames
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.frames import AMQP_HEADER, frame, take_complete_frames

pytestmark = pytest.mark.anyio

TIMEOUT = 10.0


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def test_a_session_abandoned_before_its_answer_ends_only_after_the_peers_begin() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    seen: list[Any] = []

    def serve() -> None:
        peer, _ = listener.accept()
        with peer:
            peer.settimeout(TIMEOUT)
            buffer = bytearray()
            answered = False
            while not any(isinstance(body, End) for body in seen):
                chunk = peer.recv(65536)
                if not chunk:
                    return
                buffer += chunk
                bodies = take_complete_frames(buffer)
                seen.extend(bodies)
                for body in bodies:
                    if isinstance(body, Open):
                        peer.sendall(AMQP_HEADER + frame(Open(container_id="raw")))
                    elif isinstance(body, Begin) and not answered:
                        answered = True  # the abandoned session's begin: answered after a while
                        time.sleep(0.3)
                        peer.setblocking(False)
                        with contextlib.suppress(BlockingIOError):
                            buffer += peer.recv(65536)  # what came meanwhile came before the answer
                        peer.settimeout(TIMEOUT)
                        seen.extend(take_complete_frames(buffer))
                        seen.append("answered")
                        begin = Begin(remote_channel=0, next_outgoing_id=0, incoming_window=100, outgoing_window=100)
                        peer.sendall(frame(begin, channel=0))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        with anyio.fail_after(TIMEOUT):
            async with amqp_async.connect(f"amqp://127.0.0.1:{port}", reconnect=False, sasl_enabled=False) as conn:
                with anyio.move_on_after(0.05):
                    await conn.open_session()
                while thread.is_alive():
                    await anyio.sleep(0.02)
    finally:
        listener.close()
        thread.join(TIMEOUT)
    order = [body if isinstance(body, str) else type(body).__name__ for body in seen if not isinstance(body, Open)]
    assert order == ["Begin", "answered", "End"]  # the end came, and only once the begin was answered
