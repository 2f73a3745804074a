"""Network fuzz of the callback API (issue 25): proton-style programs served mutated sessions of a real broker.

Recording: our embedded broker serves each program of ``tests/proton_fuzz_programs.py`` (MessagingHandler programs
on a ``Container``: send and receive, a large message, request, serve, a transaction; ``BlockingConnection``
programs: send with SASL PLAIN, receive, request) through a recording relay that keeps each chunk the broker wrote
with the count of bytes the program had sent before it. Where a program needs a second party (a responder for a
request, a requester for a server, messages to receive) the awaitable client plays it, on the broker directly.

Fuzzing: each session mutates a recording with a seeded RNG (``tests/fuzz_mutations.py``), serves it from
``tests/scripted_server.py`` (each chunk once the program has sent what preceded it in the recording) to the same
program, on a thread of its own, and then either closes the socket or keeps it open and silent (``linger``: the
program's own bounds must end it). Every session must end within :data:`SESSION_DEADLINE`: normally (the
container's ``run()`` returns, the blocking program returns) or with one of proton's exceptions
(``ProtonException`` and its subclasses: ``ConnectionException``, ``Timeout``, ``LinkDetached``,
``SendException``...); any other exception, a hang, or a socket the program left open is a failure. Once all
sessions are done, no thread they started may be left (containers' and blocking connections' threads) and the
process must hold the file descriptors it held before. Sessions run :data:`CONCURRENCY` at a time.

Knobs (environment): ``AMQP_FUZZ_PROTON_SESSIONS`` (default 300), ``AMQP_FUZZ_PROTON_SEED`` (the first seed,
default 0), ``AMQP_FUZZ_SAVE_CORPUS=1`` (failing inputs also written into the corpus directory),
``AMQP_FUZZ_PROTON_IMPL=proton`` (the same sessions served to the same programs on python-qpid-proton, for
comparison: its results are printed and not asserted), ``AMQP_FUZZ_PROTON_RECORD=proton`` (record the sessions with
the programs on python-qpid-proton: its own conversation, mutated by the same seeds).

Corpus: ``tests/fuzz_corpus/proton/*.json`` holds the inputs that once failed, replayed by
:func:`test_corpus_input_ends_as_proton_would`; each keeps the mutated chunks, the program, the linger mode and how
the input was found.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import anyio.to_thread
import pytest

import amqp_async
import amqp_async.io.driver
from amqp_async.broker import Broker

try:
    import fuzz_inputs
    import proton_fuzz_programs as programs
    from scripted_server import ScriptedServer, replay
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests import fuzz_inputs
    from tests import proton_fuzz_programs as programs
    from tests.scripted_server import ScriptedServer, replay

pytestmark = pytest.mark.anyio

SESSIONS = int(os.environ.get("AMQP_FUZZ_PROTON_SESSIONS", "300"))
FIRST_SEED = int(os.environ.get("AMQP_FUZZ_PROTON_SEED", "0"))
SAVE_CORPUS = os.environ.get("AMQP_FUZZ_SAVE_CORPUS") == "1"
IMPLEMENTATION = os.environ.get("AMQP_FUZZ_PROTON_IMPL", "ours")
RECORDED_WITH = os.environ.get("AMQP_FUZZ_PROTON_RECORD", "ours")
CORPUS = Path(__file__).parent / "fuzz_corpus" / "proton"

#: How long our driver waits for the answer to a close (the programs' peers here never answer one that matters).
CLOSE_TIMEOUT = 0.3
#: A session that has not ended by then is a hang (several times the longest legitimate path: a blocking program
#: makes up to 6 blocking calls of BLOCKING_TIMEOUT each).
SESSION_DEADLINE = 15.0
#: How long the server waits for the program to close its socket once the program returned.
SOCKET_GRACE = 3.0
CONCURRENCY = 8

Chunks = fuzz_inputs.Chunks


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def short_close_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(amqp_async.io.driver, "CLOSE_TIMEOUT", CLOSE_TIMEOUT)


def _in_thread(function: Callable[[], Any], name: str) -> tuple[threading.Thread, dict[str, Any]]:
    """Run ``function`` on a new thread; the dict gets its ``result`` or its ``error``."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["result"] = function()
        except BaseException as exc:  # judged by the caller
            box["error"] = exc

    thread = threading.Thread(target=target, name=name, daemon=True)
    thread.start()
    return thread, box


async def _join(thread: threading.Thread, deadline: float) -> bool:
    """Wait (without blocking the loop) until ``thread`` ended; False if it still runs after ``deadline`` s."""
    end = time.monotonic() + deadline
    while thread.is_alive():
        if time.monotonic() > end:
            return False
        await anyio.sleep(0.01)
    return True


# ---------------------------------------------------------------------------------------------------------------
# Recording


async def _second_party(name: str, url: str) -> None:
    """What the broker's other client does while ``name`` is recorded (the awaitable API, on the broker)."""
    if name in ("request", "blocking-request"):  # answer one request
        async with amqp_async.connect(url) as conn:
            requests = await conn.open_receiver("requests")
            relay = await conn.open_sender(None)
            delivery = await requests.receive()
            request = delivery.message
            await relay.send(
                amqp_async.Message(body="pong", address=request.reply_to, correlation_id=request.correlation_id)
            )
            await delivery.accept()
    elif name == "serve":  # a request waits for the server
        async with amqp_async.connect(url) as conn:
            sender = await conn.open_sender("requests")
            await sender.send(amqp_async.Message(body="ping", reply_to="fuzz-replies", correlation_id="fuzz-serve"))
    elif name == "blocking-receive":  # two messages wait for the receiver
        async with amqp_async.connect(url) as conn:
            sender = await conn.open_sender("fuzz-preloaded")
            for index in range(2):
                await sender.send(amqp_async.Message(body=f"preloaded-{index}"))


async def _record(name: str, implementation: str = "ours") -> Chunks:
    """Run program ``name`` on ``implementation`` against the embedded broker through a relay: the broker's chunks,
    each with the count of program bytes that preceded it."""
    chunks: Chunks = []
    api = programs.api(implementation)
    async with Broker(port=0, users={programs.USER: programs.PASSWORD}, allow_anonymous=True) as broker:
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
                    try:
                        await server.send_eof()
                    except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
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
            with anyio.fail_after(30):
                if name in ("serve", "blocking-receive"):
                    await _second_party(name, broker.url)
                else:
                    group.start_soon(_second_party, name, broker.url)
                run = programs.Run()
                outcome = await anyio.to_thread.run_sync(programs.PROGRAMS[name], api, f"amqp://127.0.0.1:{port}", run)
                assert outcome == "completed", f"{name} did not complete against the broker: {run.events}"
                await anyio.sleep(0.2)  # the broker's last words (its close) reach the relay
            group.cancel_scope.cancel()
    assert chunks, "nothing recorded"
    return chunks


@pytest.fixture(scope="module")
def recordings() -> dict[str, Chunks]:
    """One recorded session per program (recorded once per module run, on a loop of its own)."""

    async def record_all() -> dict[str, Chunks]:
        return {name: await _record(name, RECORDED_WITH) for name in programs.PROGRAMS}

    return anyio.run(record_all)


# ---------------------------------------------------------------------------------------------------------------
# One session


class FuzzInput(fuzz_inputs.FuzzInput):
    KIND = "program"


async def run_session(item: FuzzInput, implementation: str = IMPLEMENTATION) -> tuple[str, str | None]:
    """Serve ``item`` to its program: how it ended ("completed", the error its handler saw last, or the class
    of the exception), and None when that is as it must be, else what went wrong."""
    api = programs.api(implementation)
    run = programs.Run()
    async with ScriptedServer(replay(item.chunks), linger=item.linger) as server:
        thread, box = _in_thread(lambda: programs.PROGRAMS[item.name](api, server.url, run), "fuzz-program")
        ended = await _join(thread, SESSION_DEADLINE)
        problem: str | None = None
        if not ended:
            outcome = "hang"
            problem = f"did not end within {SESSION_DEADLINE} s (events: {run.events})"
            run.stop()  # and, for a blocking program, the server going away ends what waits
        elif "error" in box:
            error = box["error"]
            outcome = next(kind.__name__ for kind in type(error).__mro__ if not kind.__name__.startswith("_"))
            if not isinstance(error, api.core.ProtonException):
                problem = f"not one of proton's exceptions: {error!r}"
            elif implementation == "ours" and not isinstance(error, amqp_async.AMQPError):
                problem = f"not an amqp_async.AMQPError: {error!r}"
        else:
            outcome = str(box.get("result"))
        if not await server.all_clients_closed(SOCKET_GRACE):
            problem = (problem + "; " if problem else "") + "the program left its socket open"
    if not ended:
        await _join(thread, SESSION_DEADLINE)
    return outcome, problem


def _open_fds() -> dict[str, str]:
    """The process's open file descriptors and what each is (a socket, a pipe, a file...)."""
    fds = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            fds[fd] = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed meanwhile (the listing's own descriptor)
            pass
    return fds


def _program_threads(before: set[threading.Thread]) -> list[str]:
    """The threads started since ``before`` and still running, but the test loop's own executor's (getaddrinfo
    for the scripted servers' listeners runs there)."""
    executor = getattr(asyncio.get_running_loop(), "_default_executor", None)
    own = set(getattr(executor, "_threads", ()))
    return sorted(
        thread.name
        for thread in threading.enumerate()
        if thread not in before and thread not in own and thread.is_alive()
    )


async def _baseline() -> tuple[dict[str, str], set[threading.Thread]]:
    """The descriptors and threads before the sessions, once our container has run in this process: its first run
    makes what lives as long as the process (uvloop's libuv keeps a pipe), which is no session's leak."""
    warm_up = threading.Thread(target=programs.api("ours").reactor.Container().run, name="fuzz-warm-up")
    warm_up.start()
    assert await _join(warm_up, SESSION_DEADLINE)
    return _open_fds(), set(threading.enumerate())


async def _settled_resources(fds: dict[str, str], threads: set[threading.Thread]) -> tuple[list[str], list[str]]:
    """The descriptors and threads beyond the baseline, once what is still closing had a moment to."""
    for _ in range(100):
        now = _open_fds()
        extra_fds = sorted(f"{fd}: {now[fd]}" for fd in set(now) - set(fds) if now[fd] != fds.get(fd))
        extra_threads = _program_threads(threads)
        if not extra_fds and not extra_threads:
            break
        await anyio.sleep(0.05)
    return extra_fds, extra_threads


# ---------------------------------------------------------------------------------------------------------------
# The tests


async def test_mutated_sessions_end_as_proton_programs_should(recordings: dict[str, Chunks], tmp_path: Path) -> None:
    failures: list[str] = []
    outcomes: Counter[str] = Counter()
    limiter = anyio.Semaphore(CONCURRENCY)
    fds, threads = await _baseline()
    started = time.monotonic()
    longest = 0.0

    async def one(seed: int) -> None:
        nonlocal longest
        async with limiter:
            item = FuzzInput.seeded(recordings, seed)
            began = time.monotonic()
            outcome, problem = await run_session(item)
            longest = max(longest, time.monotonic() - began)
            outcomes[f"{item.name}: {outcome}"] += 1
            if problem is not None:
                saved = [item.save(problem, tmp_path)]
                if SAVE_CORPUS:
                    saved.append(item.save(problem, CORPUS))
                failures.append(f"{item.found} (saved to {', '.join(map(str, saved))})")

    async with anyio.create_task_group() as group:
        for seed in range(FIRST_SEED, FIRST_SEED + SESSIONS):
            group.start_soon(one, seed)
    extra_fds, extra_threads = await _settled_resources(fds, threads)
    seconds = time.monotonic() - started
    print(  # shown with -s / -rP
        f"{SESSIONS} sessions from seed {FIRST_SEED} on {IMPLEMENTATION} (recorded on {RECORDED_WITH}) in {seconds:.1f}"
        f" s, the longest {longest:.1f} s:",
        json.dumps(dict(sorted(outcomes.items())), indent=1),
    )
    print("failures:", json.dumps(failures, indent=1))
    if IMPLEMENTATION != "ours":
        return
    assert failures == []
    assert extra_threads == [], "threads were left running"
    assert extra_fds == [], "file descriptors were left open"


def _corpus_files() -> Iterator[Any]:
    for path in sorted(CORPUS.glob("*.json")):
        yield pytest.param(path, id=path.stem)


@pytest.mark.parametrize("path", list(_corpus_files()))
async def test_corpus_input_ends_as_proton_would(path: Path) -> None:
    item = FuzzInput.from_json(path.read_text())
    fds, threads = await _baseline()
    _, problem = await run_session(item, "ours")
    assert problem is None, item.found
    extra_fds, extra_threads = await _settled_resources(fds, threads)
    assert (extra_fds, extra_threads) == ([], [])


def test_mutations_are_reproducible(recordings: dict[str, Chunks]) -> None:
    assert FuzzInput.seeded(recordings, 7) == FuzzInput.seeded(recordings, 7)
    assert FuzzInput.seeded(recordings, 7) != FuzzInput.seeded(recordings, 8)


@pytest.mark.parametrize("program", sorted(programs.PROGRAMS))
@pytest.mark.parametrize("linger", [False, True], ids=["close", "linger"])
async def test_the_recording_itself_replays_cleanly(recordings: dict[str, Chunks], program: str, linger: bool) -> None:
    """The harness works: unmutated, the recording takes the program through its whole work."""
    if RECORDED_WITH != IMPLEMENTATION:
        pytest.skip("a recording replays the conversation of the implementation that made it (its byte counts pace it)")
    outcome, problem = await run_session(FuzzInput(program, linger, recordings[program]), IMPLEMENTATION)
    assert (outcome, problem) == ("completed", None)
