"""What ``connect()`` returns: a public ``Opening[Connection]`` (awaitable, an async context manager, a coroutine)
that opens one connection, once.

The peer: the embedded broker in-process, whose ``connections`` say how many connections reached it (a second
connection that nothing closes would show there).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import anyio
import pytest

import amqp_async
from amqp_async import Connection, Opening

try:
    from broker_serving import serving
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.broker_serving import serving

pytestmark = pytest.mark.anyio

TIMEOUT = 15.0
REUSED = r"^what connect\(\) returned was already awaited or entered, .* call connect\(\) again for another$"


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    if request.param == "trio":
        pytest.importorskip("trio", reason="trio is in the test dependency group")
    return str(request.param)


async def eventually(predicate: Callable[[], Any], timeout: float = 10.0) -> None:
    with anyio.fail_after(timeout):
        while not predicate():
            await anyio.sleep(0.01)


async def test_connect_returns_the_public_opening_of_a_connection() -> None:
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker:
            opening = amqp_async.connect(broker.url)
            assert isinstance(opening, Opening)
            assert type(opening) is amqp_async.Opening  # the public name users annotate with, not a private one
            conn = await opening
            assert isinstance(conn, Connection)
            await conn.close()


async def test_one_connect_entered_twice_raises_and_opens_no_second_connection() -> None:
    # Before: the second entry silently opened a second connection, and both exits closed that one, leaving the
    # first open for ever.
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker:
            opening = amqp_async.connect(broker.url)
            async with opening as conn:
                await eventually(lambda: len(broker.connections) == 1)
                with pytest.raises(RuntimeError, match=REUSED):
                    async with opening:
                        pass  # pragma: no cover - never entered
                assert len(broker.connections) == 1
                assert not conn.is_closed
            assert conn.is_closed
            await eventually(lambda: not broker.connections)


async def test_one_connect_awaited_after_use_raises() -> None:
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker:
            opening = amqp_async.connect(broker.url)
            conn = await opening
            with pytest.raises(RuntimeError, match=REUSED):
                await opening
            assert len(broker.connections) == 1
            await conn.close()
            await eventually(lambda: not broker.connections)


async def test_a_wrong_connect_option_raises_at_the_call_before_any_await() -> None:
    # As open_sender() does: the mistake is reported at the line that made it, and nothing is left to await.
    with pytest.raises(TypeError, match=r"^connect\(\) got unexpected keyword argument\(s\): hearbeat$"):
        amqp_async.connect("amqp://localhost:1", hearbeat=30)  # type: ignore[call-arg]
    with pytest.raises(amqp_async.InvalidURL):
        amqp_async.connect("amqp://localhost:notaport")


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_connect_is_a_coroutine_for_create_task(anyio_backend: str) -> None:
    # Before: TypeError("a coroutine was expected, got <amqp_async.client._connect._Connect object ...>").
    with anyio.fail_after(TIMEOUT):
        async with serving() as broker:
            conn = await asyncio.create_task(amqp_async.connect(broker.url))
            assert isinstance(conn, Connection)
            await conn.close()


async def test_a_connect_in_a_task_group_gives_its_connection() -> None:
    # anyio's start_soon (trio's nursery underneath) takes a coroutine function: connect is one, in effect.
    results: list[Connection] = []

    async def keep(opening: Opening[Connection]) -> None:
        results.append(await opening)

    with anyio.fail_after(TIMEOUT):
        async with serving() as broker:
            async with anyio.create_task_group() as tg:
                tg.start_soon(keep, amqp_async.connect(broker.url))
            await results[0].close()
