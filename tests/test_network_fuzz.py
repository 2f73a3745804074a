"""Network fuzz at the broker: recorded client sessions, mutated and replayed over raw sockets (issue 15).

The broker runs as ``python -m amqp_async.broker`` in a subprocess on a free port, its log in a file. The sessions
are recorded once per module through a recording proxy (`tests/network_fuzz.py`): our awaitable client and
python-qpid-proton's blocking client each run a few real scenarios (send, receive and accept, release, reject,
transactions, topics, dynamic and anonymous links, SASL PLAIN and ANONYMOUS). Each fuzz case takes one of them and a
seed, mutates it (`network_fuzz.mutate`), and replays it; the broker must survive every one, end every session
within the deadline, and afterwards still carry a normal client's messages with exact counts. Its log must hold no
traceback: every peer-caused error is a protocol reaction, not a crash.

``AMQP_FUZZ_SESSIONS`` sets how many mutated sessions run (default 300, a few seconds); ``AMQP_FUZZ_SEED`` the
base seed. Every input that once crashed or hung the broker is kept in ``tests/fuzz_corpus/broker/`` and replayed
by :func:`test_corpus_input`: ``NAME.bin`` holds the bytes; ``NAME.boundaries``, when present, the offsets at which
the replay pauses for the broker's answer (comma-separated; a paced session). A failing fuzz case leaves both in
pytest's temporary directory (the path is in the failure message) to copy there.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

import amqp_async
from amqp_async import Message

try:
    from network_fuzz import Recorded, RecordingProxy, mutate, replay
    from test_broker_isolation import receive_numbers, send_numbers
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.network_fuzz import Recorded, RecordingProxy, mutate, replay
    from tests.test_broker_isolation import receive_numbers, send_numbers

CORPUS = Path(__file__).parent / "fuzz_corpus" / "broker"
SESSIONS = int(os.environ.get("AMQP_FUZZ_SESSIONS", "300"))
BASE_SEED = int(os.environ.get("AMQP_FUZZ_SEED", "15"))
DEADLINE = 5.0  # seconds for the broker to end a replayed session once we half-closed
TIMEOUT = 20.0
USER, PASSWORD = "fuzz", "secret"


class BrokerProcess:
    """``python -m amqp_async.broker`` on a free port, its stderr in a file."""

    def __init__(self, log: Path) -> None:
        self.log_path = log
        self._log = log.open("wb")
        root = str(Path(__file__).parent.parent)
        env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "amqp_async.broker",
                "--port",
                "0",
                "--user",
                f"{USER}:{PASSWORD}",
                "--allow-anonymous",
            ],
            stdout=subprocess.PIPE,
            stderr=self._log,
            env=env,
            cwd=root,  # python -m puts the working directory first on sys.path: this checkout's package, no other
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline().decode()
        match = re.search(r"listening on amqp://([\d.]+):(\d+)", line)
        if match is None:
            self.stop()
            raise RuntimeError(f"the broker did not start: {line!r}; log: {self.log()}")
        self.host = match.group(1)
        self.port = int(match.group(2))

    @property
    def url(self) -> str:
        return f"amqp://{self.host}:{self.port}"

    def alive(self) -> bool:
        return self.process.poll() is None

    def log(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()
        return self.process.returncode


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("broker") / "broker.log")
    try:
        yield process
    finally:
        code = process.stop()
        log = process.log()
        assert "Traceback" not in log, log[-5000:]
        assert code == 0, log[-5000:]


# ----------------------------------------------------------------------------------------------------------------
# recording real sessions


async def _ours(url: str) -> None:
    """Our client: sends, receives, settles each way, a transaction, a topic, dynamic and anonymous links."""
    with anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(url) as conn:
            sender = await conn.open_sender("fuzz-q")
            for number in range(3):
                await sender.send(Message(body=f"m{number}", subject="fuzz", properties={"n": number}))
            receiver = await conn.open_receiver("fuzz-q", credit=5)
            first = await receiver.receive()
            await first.accept()
            second = await receiver.receive()
            await second.release()
            again = await receiver.receive()
            await again.reject()
            third = await receiver.receive()
            await third.modify(delivery_failed=True)
            last = await receiver.receive()
            await last.accept()
        async with amqp_async.connect(url) as conn:
            async with conn.transaction() as txn:
                sender = await conn.open_sender("fuzz-txn")
                await txn.send(sender, Message(body=b"in a transaction"))
            topic = await conn.open_receiver("topic://fuzz-news", credit=2)
            publisher = await conn.open_sender("topic://fuzz-news")
            await publisher.send(Message(body="news"))
            news = await topic.receive()
            await news.accept()
            anonymous = await conn.open_sender(None)
            await anonymous.send(Message(body="relayed", address="fuzz-relay"))
            dynamic = await conn.open_receiver(None, dynamic=True, credit=1)
            await dynamic.close()
        async with amqp_async.connect(url.replace("amqp://", f"amqp://{USER}:{PASSWORD}@")) as conn:
            sender = await conn.open_sender("fuzz-auth")
            await sender.send(Message(body=list(range(20)), properties={"k": "v"}))


def _proton(url: str) -> None:
    """python-qpid-proton's blocking client: a send and a receive with accept, under SASL ANONYMOUS and PLAIN."""
    from proton import Message as ProtonMessage
    from proton.utils import BlockingConnection

    conn = BlockingConnection(url, timeout=TIMEOUT)
    try:
        sender = conn.create_sender("fuzz-proton")
        for number in range(3):
            sender.send(ProtonMessage(body=f"p{number}", properties={"n": number}))
        receiver = conn.create_receiver("fuzz-proton", credit=3)
        for _ in range(3):
            receiver.receive(TIMEOUT)
            receiver.accept()
    finally:
        conn.close()
    conn = BlockingConnection(
        url.replace("amqp://", f"amqp://{USER}:{PASSWORD}@"),
        timeout=TIMEOUT,
        allowed_mechs="PLAIN",
        allow_insecure_mechs=True,
    )
    try:
        conn.create_sender("fuzz-proton-auth").send(ProtonMessage(body={"a": 1}))
    finally:
        conn.close()


@pytest.fixture(scope="module")
def sessions(broker: BrokerProcess) -> list[Recorded]:
    """The bytes of real client sessions (our client's, then proton's)."""
    with RecordingProxy((broker.host, broker.port)) as proxy:
        anyio.run(_ours, proxy.url)
        ours = len(proxy.wait_sessions(3))
        _proton(proxy.url)
        recorded = proxy.wait_sessions(ours + 2)
    assert all(session.data for session in recorded), "an empty recorded session"
    return recorded


# ----------------------------------------------------------------------------------------------------------------
# a normal client afterwards


async def _round_trip(url: str, address: str, count: int) -> list[Any]:
    with anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(url) as conn:
            await send_numbers(conn, address, range(count))
            return await receive_numbers(conn, address, count)


def assert_serves(broker: BrokerProcess, address: str, count: int = 50) -> None:
    assert broker.alive(), broker.log()[-5000:]
    assert anyio.run(_round_trip, broker.url, address, count) == list(range(count))


# ----------------------------------------------------------------------------------------------------------------
# the tests


@pytest.mark.parametrize("paced", [True, False], ids=["paced", "pipelined"])
def test_recorded_sessions_replay_cleanly(broker: BrokerProcess, sessions: list[Recorded], paced: bool) -> None:
    """Control: each recorded session, replayed unchanged, is served to its end. Paced, as the client wrote it, it
    is the client's conversation again: the broker closes it without an error. Pipelined (all at once), the client's
    transfers come before the broker's answers (and credit): the broker ends it however it must, and goes on."""
    for index, session in enumerate(sessions):
        boundaries = session.boundaries if paced else None
        result = replay(broker.host, broker.port, session.data, seed=index, deadline=DEADLINE, boundaries=boundaries)
        assert result.ended == "closed", index
        assert broker.alive()
    assert_serves(broker, "fuzz-control")


def test_mutated_sessions(broker: BrokerProcess, sessions: list[Recorded], tmp_path: Path) -> None:
    """``SESSIONS`` mutated sessions (two in three paced like the original, the rest pipelined): the broker survives
    all, ends each within the deadline, then still serves."""
    failures: list[str] = []
    seen = len(broker.log())
    for index in range(SESSIONS):
        seed = BASE_SEED * 1_000_003 + index
        base = sessions[index % len(sessions)]
        mutated = mutate(base.data, seed)
        boundaries = base.boundaries if index % 3 else None
        result = replay(broker.host, broker.port, mutated.data, seed=seed, deadline=DEADLINE, boundaries=boundaries)
        log = broker.log()
        traceback = "Traceback" in log[seen:]
        seen = len(log)
        if result.ended != "closed" or not broker.alive() or traceback:
            path = tmp_path / f"seed-{seed}.bin"
            path.write_bytes(mutated.data)
            if boundaries is not None:
                path.with_suffix(".boundaries").write_text(",".join(map(str, boundaries)))
            failures.append(
                f"{path} ({result.ended}, alive={broker.alive()}, traceback={traceback}): {mutated.mutations}"
            )
            if not broker.alive():
                break
    assert not failures, "\n".join(failures) + "\n" + broker.log()[-5000:]
    assert_serves(broker, "fuzz-after")


@pytest.mark.parametrize("path", sorted(CORPUS.glob("*.bin")), ids=lambda path: path.stem)
def test_corpus_input(broker: BrokerProcess, path: Path) -> None:
    """Every input that once crashed or hung the broker: it is served to its end and the broker goes on."""
    paced = path.with_suffix(".boundaries")
    boundaries = [int(offset) for offset in paced.read_text().split(",")] if paced.exists() else None
    result = replay(broker.host, broker.port, path.read_bytes(), deadline=DEADLINE, boundaries=boundaries)
    assert result.ended == "closed"
    assert_serves(broker, f"fuzz-corpus-{path.stem}", count=5)
