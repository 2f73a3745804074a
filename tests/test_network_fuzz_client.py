"""Network fuzz of the awaitable client (issue 15): a malicious server replays mutated server sessions.

Recording: our embedded broker serves a client doing connect, attach, send, receive, accept, detach and close,
through a recording relay that keeps each chunk the broker wrote together with how many bytes the client had sent
before it (so that a replay sends each chunk at the same point of the conversation). Two scenarios: ``basic``
(SASL ANONYMOUS, one small message) and ``large`` (no SASL, max-frame-size 512, a message of several transfer
frames).

Fuzzing: each session mutates a recording with a seeded RNG (`tests/fuzz_mutations.py`: bit flips, truncations,
lying size fields, inserted garbage, duplicated frames...), serves it from `tests/scripted_server.py` to a fresh
client running the same scenario, and then either closes the socket or keeps it open and silent (``linger``; the
client alone must end it then). Every session must end, within :data:`SESSION_DEADLINE`, either cleanly or with our
own ``AMQPError``; the client must have closed its socket, and once all sessions are done no connection task may
be left. Sessions run :data:`CONCURRENCY` at a time.

Knobs (environment): ``AMQP_FUZZ_CLIENT_SESSIONS`` (default 300), ``AMQP_FUZZ_CLIENT_SEED`` (the first seed,
default 0), ``AMQP_FUZZ_SAVE_CORPUS=1`` (write failing inputs into the corpus directory as well as the test's
temporary directory).

Corpus: ``tests/fuzz_corpus/client/*.json`` holds every input that once failed (a hang, another exception, a
socket or task left behind), replayed by :func:`test_corpus_input_ends_in_an_amqp_error`. Each file keeps the
mutated chunks themselves (recordings differ from run to run: container ids, link names), the scenario, the
``linger`` mode and how the input was found.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest

import amqp_async
import amqp_async.io.driver
from amqp_async import Message
from amqp_async.broker import Broker

try:
    import fuzz_inputs
    from scripted_server import ScriptedServer, client_tasks, replay
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests import fuzz_inputs
    from tests.scripted_server import ScriptedServer, client_tasks, replay

pytestmark = pytest.mark.anyio

SESSIONS = int(os.environ.get("AMQP_FUZZ_CLIENT_SESSIONS", "300"))
FIRST_SEED = int(os.environ.get("AMQP_FUZZ_CLIENT_SEED", "0"))
SAVE_CORPUS = os.environ.get("AMQP_FUZZ_SAVE_CORPUS") == "1"
CORPUS = Path(__file__).parent / "fuzz_corpus" / "client"

#: The client's bounds in these tests: idle timeout, connect timeout, and the wait for the answer to its close.
HEARTBEAT = 0.5
CONNECT_TIMEOUT = 1.0
CLOSE_TIMEOUT = 0.3
#: A session that has not ended by then is a hang (several times the longest legitimate path).
SESSION_DEADLINE = 10.0
#: How long the server waits for the client to close its socket once the client's code returned.
SOCKET_GRACE = 3.0
CONCURRENCY = 8

Chunks = fuzz_inputs.Chunks


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def short_close_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(amqp_async.io.driver, "CLOSE_TIMEOUT", CLOSE_TIMEOUT)


# ---------------------------------------------------------------------------------------------------------------
# Scenarios: what the client does, the same when recorded and when fuzzed (fixed link names: the recorded
# attaches must answer the replaying client's)


async def _basic(url: str) -> None:
    async with amqp_async.connect(url, reconnect=False, heartbeat=HEARTBEAT, connect_timeout=CONNECT_TIMEOUT) as conn:
        sender = await conn.open_sender("fuzz-basic", name="basic-sender")
        await sender.send(Message(body="hello"))
        receiver = await conn.open_receiver("fuzz-basic", name="basic-receiver", credit=10)
        delivery = await receiver.receive()
        await delivery.accept()
        await receiver.close()
        await sender.close()


async def _large(url: str) -> None:
    async with amqp_async.connect(
        url,
        reconnect=False,
        sasl_enabled=False,
        max_frame_size=512,
        heartbeat=HEARTBEAT,
        connect_timeout=CONNECT_TIMEOUT,
    ) as conn:
        sender = await conn.open_sender("fuzz-large", name="large-sender")
        await sender.send(Message(body=bytes(range(256)) * 12))
        receiver = await conn.open_receiver("fuzz-large", name="large-receiver", credit=2)
        delivery = await receiver.receive()
        await delivery.accept()


SCENARIOS: dict[str, Callable[[str], Awaitable[None]]] = {"basic": _basic, "large": _large}


# ---------------------------------------------------------------------------------------------------------------
# Recording


async def _record(scenario: Callable[[str], Awaitable[None]]) -> Chunks:
    """Run ``scenario`` against the embedded broker through a relay; the broker's chunks, each with the count of
    client bytes that preceded it."""
    chunks: Chunks = []
    async with Broker(port=0, allow_anonymous=True) as broker:
        target_port = int(broker.url.rsplit(":", 1)[1])
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
        port = int(listener.extra(anyio.abc.SocketAttribute.local_port))

        async def relay(client: anyio.abc.SocketStream) -> None:
            sent = 0
            async with client, await anyio.connect_tcp("127.0.0.1", target_port) as server:

                async def upstream() -> None:
                    nonlocal sent
                    try:
                        async for data in client:
                            sent += len(data)
                            await server.send(data)
                    except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                        pass

                async with anyio.create_task_group() as group:
                    group.start_soon(upstream)
                    try:
                        async for data in server:
                            chunks.append((sent, data))
                            await client.send(data)
                    except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                        pass
                    group.cancel_scope.cancel()

        async with listener, anyio.create_task_group() as group:
            group.start_soon(listener.serve, relay)
            with anyio.fail_after(SESSION_DEADLINE):
                await scenario(f"amqp://127.0.0.1:{port}")
                await anyio.sleep(0.2)  # the broker's last words (its close) reach the relay
            group.cancel_scope.cancel()
    assert chunks, "nothing recorded"
    return chunks


@pytest.fixture(scope="module")
def recordings() -> dict[str, Chunks]:
    """One recorded session per scenario (recorded once per module run, on a loop of its own)."""

    async def record_all() -> dict[str, Chunks]:
        return {name: await _record(scenario) for name, scenario in SCENARIOS.items()}

    return anyio.run(record_all)


# ---------------------------------------------------------------------------------------------------------------
# One session


class FuzzInput(fuzz_inputs.FuzzInput):
    KIND = "scenario"


async def run_session(item: FuzzInput) -> tuple[str, str | None]:
    """Serve ``item`` to a client running its scenario: how it ended ("completed", or the error's class and
    condition), and None when that is as it must be, else what went wrong."""
    async with ScriptedServer(replay(item.chunks), linger=item.linger) as server:
        outcome = "completed"
        problem: str | None = None
        with anyio.move_on_after(SESSION_DEADLINE) as scope:
            try:
                await SCENARIOS[item.name](server.url)
            except amqp_async.AMQPError as exc:
                outcome = f"{type(exc).__name__} {exc.condition}"
            except Exception as exc:
                outcome = type(exc).__name__
                problem = f"not an AMQPError: {exc!r}"
        if scope.cancelled_caught:
            outcome = "hang"
            problem = f"did not end within {SESSION_DEADLINE} s"
        if not await server.all_clients_closed(SOCKET_GRACE):
            problem = (problem + "; " if problem else "") + "the client left its socket open"
        return outcome, problem


# ---------------------------------------------------------------------------------------------------------------
# The tests


async def test_mutated_server_sessions_end_in_an_amqp_error(recordings: dict[str, Chunks], tmp_path: Path) -> None:
    failures: list[str] = []
    outcomes: Counter[str] = Counter()
    limiter = anyio.Semaphore(CONCURRENCY)

    async def one(seed: int) -> None:
        async with limiter:
            item = FuzzInput.seeded(recordings, seed)
            outcome, problem = await run_session(item)
            outcomes[outcome] += 1
            if problem is not None:
                saved = [item.save(problem, tmp_path)]
                if SAVE_CORPUS:
                    saved.append(item.save(problem, CORPUS))
                failures.append(f"{item.found} (saved to {', '.join(map(str, saved))})")

    async with anyio.create_task_group() as group:
        for seed in range(FIRST_SEED, FIRST_SEED + SESSIONS):
            group.start_soon(one, seed)
    print(f"{SESSIONS} sessions from seed {FIRST_SEED}:", dict(outcomes.most_common()))  # shown with -s / -rP
    assert failures == []
    assert client_tasks() == [], "connection tasks were left running"


def _corpus_files() -> Iterator[Any]:
    for path in sorted(CORPUS.glob("*.json")):
        yield pytest.param(path, id=path.stem)


@pytest.mark.parametrize("path", list(_corpus_files()))
async def test_corpus_input_ends_in_an_amqp_error(path: Path) -> None:
    item = FuzzInput.from_json(path.read_text())
    _, problem = await run_session(item)
    assert problem is None, item.found
    assert client_tasks() == []


def test_mutations_are_reproducible(recordings: dict[str, Chunks]) -> None:
    assert FuzzInput.seeded(recordings, 7) == FuzzInput.seeded(recordings, 7)
    assert FuzzInput.seeded(recordings, 7) != FuzzInput.seeded(recordings, 8)


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
@pytest.mark.parametrize("linger", [False, True], ids=["close", "linger"])
async def test_the_recording_itself_replays_cleanly(recordings: dict[str, Chunks], scenario: str, linger: bool) -> None:
    """The harness works: unmutated, the recording takes the client through its whole scenario."""
    item = FuzzInput(scenario, linger, recordings[scenario])
    async with ScriptedServer(replay(item.chunks), linger=linger) as server:
        with anyio.fail_after(SESSION_DEADLINE):
            await SCENARIOS[scenario](server.url)
        assert await server.all_clients_closed(SOCKET_GRACE)
