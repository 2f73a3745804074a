"""A send cut off by the peer ending the session (§2.5.1, an end with an error) is in doubt with the peer's error:
its condition, its words, and the ``SessionError`` as the cause.

Before, ``DeliveryInDoubt`` named ``amqp:connection:forced`` (the connection was up), said only "the session
ended", and had no cause, where a detach of the link and a close of the connection each gave the peer's error. An
application that retries or not on the condition (``amqp:unauthorized-access``, ``amqp:resource-limit-exceeded``)
could not tell. RabbitMQ 3.x ends the session rather than detach the link: the common path there. The peer here is
python-qpid-proton, ending the session with an error when a message arrives, before settling it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import pytest

import amqp_async

proton = pytest.importorskip("proton", reason="python-qpid-proton is the reference peer")
from proton.handlers import MessagingHandler  # noqa: E402 - after the importorskip that explains its absence

try:
    from proton_peer import proton_server
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.proton_peer import proton_server

pytestmark = pytest.mark.anyio

CONDITION = "amqp:unauthorized-access"
WORDS = "not allowed to send here"


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


class _SessionEnder(MessagingHandler):  # type: ignore[misc]
    """Ends the session of every message it is sent, with an error, leaving the message unsettled."""

    def __init__(self) -> None:
        super().__init__(auto_accept=False)

    def on_message(self, event: Any) -> None:
        session = event.link.session
        session.condition = proton.Condition(CONDITION, WORDS)
        session.close()


@pytest.fixture
def server() -> Iterator[str]:
    with proton_server(_SessionEnder()) as url:
        yield url


def _check(error: amqp_async.DeliveryInDoubt) -> None:
    assert error.condition == CONDITION
    assert str(error) == f"{CONDITION}: the session ended before the outcome was known: {WORDS}"
    assert isinstance(error.__cause__, amqp_async.SessionError)
    assert error.__cause__.condition == CONDITION


async def test_a_send_cut_off_by_the_peers_end_of_the_session_names_its_error(server: str) -> None:
    with anyio.fail_after(10):
        async with amqp_async.connect(server, reconnect=False) as conn:
            sender = await conn.open_sender("q")
            with pytest.raises(amqp_async.DeliveryInDoubt) as caught:
                await sender.send(amqp_async.Message(body="cut off"))
            _check(caught.value)
            with pytest.raises(amqp_async.SessionError) as next_send:  # the session is gone: what it says, again
                await sender.send(amqp_async.Message(body="after"))
            assert next_send.value.condition == CONDITION


async def test_a_streamed_send_cut_off_by_the_peers_end_of_the_session_names_its_error(server: str) -> None:
    with anyio.fail_after(10):
        async with amqp_async.connect(server, reconnect=False) as conn, conn.open_stream_sender("q") as sender:
            with pytest.raises(amqp_async.DeliveryInDoubt) as caught:
                await sender.send_stream(b"x" * 100_000)
            _check(caught.value)


class _NeverSettles(MessagingHandler):  # type: ignore[misc]
    """Takes every message and gives no outcome."""

    def __init__(self) -> None:
        super().__init__(auto_accept=False, auto_settle=False)

    def on_message(self, event: Any) -> None:
        pass


async def test_a_send_cut_off_by_the_applications_close_of_the_session_says_so() -> None:
    """As for a link or a connection the application closes: ``amqp-async:closed-by-application`` with the close
    as the cause (it named ``amqp:connection:forced``, as if the peer had forced it, without a cause)."""
    with proton_server(_NeverSettles()) as url, anyio.fail_after(10):
        async with amqp_async.connect(url, reconnect=False) as conn:
            session = await conn.open_session()
            tracker = await (await session.open_sender("q")).submit(amqp_async.Message(body="in flight"))
            stream_sender = await session.open_stream_sender("q")
            async with anyio.create_task_group() as group:
                streamed: list[BaseException] = []

                async def stream() -> None:
                    try:
                        await stream_sender.send_stream(b"x" * 10_000)
                    except amqp_async.DeliveryInDoubt as exc:
                        streamed.append(exc)

                group.start_soon(stream)
                await anyio.sleep(0.2)  # both are out, neither has an outcome
                await session.close()
            with pytest.raises(amqp_async.DeliveryInDoubt) as caught:
                await tracker
            for error in (caught.value, *streamed):
                assert error.condition == "amqp-async:closed-by-application"
                assert isinstance(error.__cause__, amqp_async.ClosedByApplication)
                assert str(error).endswith("the application closed the session")
            assert len(streamed) == 1
