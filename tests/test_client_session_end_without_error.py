"""The peer ends a session without an error (§2.5.1): what waited on it names that, with the library's condition
``amqp-async:session-ended`` (``SESSION_ENDED``; no AMQP condition names it, as ``amqp:link:detach-forced`` names a
detach without an error).

Before, a send waiting for credit raised ``SessionError`` with ``amqp:internal-error`` ("the session has ended": an
internal error, by whom unsaid), and the message awaiting its outcome ``DeliveryInDoubt`` with
``amqp:connection:forced`` (the connection was up). An end with an error gives the peer's condition
(tests/test_client_session_end_in_doubt.py).

The peer: python-qpid-proton's Container over TCP, granting one credit, never settling, and ending the session
(without a condition) when a second sender to "trigger" attaches on it.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

import amqp_async
from amqp_async import DeliveryInDoubt, Message, SessionError
from amqp_async.errors import SESSION_ENDED

try:
    from proton_peer import proton_server
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.proton_peer import proton_server

pytestmark = pytest.mark.anyio

TIMEOUT = 15.0


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    if request.param == "trio":
        pytest.importorskip("trio", reason="trio is in the test dependency group")
    return str(request.param)


class EndsTheSessionWithoutError:
    def on_connection_remote_open(self, event: Any) -> None:
        event.connection.open()

    def on_session_remote_open(self, event: Any) -> None:
        event.session.open()

    def on_link_remote_open(self, event: Any) -> None:
        link = event.link
        link.source.copy(link.remote_source)
        link.target.copy(link.remote_target)
        link.open()
        if link.is_receiver and link.remote_target.address == "trigger":
            event.session.close()  # an end frame without an error
        elif link.is_receiver:
            link.flow(1)

    def on_connection_remote_close(self, event: Any) -> None:
        event.connection.close()


async def test_the_waiters_of_a_session_the_peer_ended_without_error_name_it() -> None:
    outcomes: dict[str, BaseException] = {}

    async def waits(name: str, call: Any) -> None:
        try:
            await call()
        except Exception as exc:
            outcomes[name] = exc

    with anyio.fail_after(TIMEOUT), proton_server(EndsTheSessionWithoutError()) as url:
        async with amqp_async.connect(url) as conn:
            session = await conn.open_session()
            sender = await session.open_sender("q")
            tracker = await sender.submit(Message(body=1))  # the one credit: never settled
            async with anyio.create_task_group() as tg:
                tg.start_soon(waits, "tracker", tracker.wait)
                tg.start_soon(waits, "send", lambda: sender.send(Message(body=2)))  # no credit left: it waits
                await anyio.sleep(0.2)
                tg.start_soon(waits, "open", lambda: session.open_sender("trigger"))
            assert set(outcomes) == {"tracker", "send", "open"}
            in_doubt = outcomes["tracker"]
            assert isinstance(in_doubt, DeliveryInDoubt)
            assert in_doubt.condition == SESSION_ENDED
            assert str(in_doubt) == (
                f"{SESSION_ENDED}: the session ended before the outcome was known: the peer ended the session "
                "without an error"
            )
            for name in ("send", "open"):
                error = outcomes[name]
                assert type(error) is SessionError
                assert error.condition == SESSION_ENDED
                assert str(error).endswith("the peer ended the session without an error")
            assert not conn.is_closed  # only the session ended
