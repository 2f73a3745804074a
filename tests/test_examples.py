"""The programs in ``examples/`` run as users run them: ``python examples/NAME.py ARGS`` in a subprocess (this
interpreter, the repository root on ``PYTHONPATH``), against the proton broker of `tests/proton_broker.py` (a TLS
one for ``tls.py``; ``quickstart.py`` runs its own embedded broker). Each must exit with status 0 and print what its
docstring promises; what the broker saw is checked too. Every run is bounded with ``anyio.fail_after``.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

proton = pytest.importorskip("proton", reason="python-qpid-proton is the reference peer; CI installs it")

from proton import SSL, Message, SSLDomain  # noqa: E402

try:
    from proton_broker import ProtonBroker
    from tls_certs import make_ca, make_cert, openssl_available
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.proton_broker import ProtonBroker
    from tests.tls_certs import make_ca, make_cert, openssl_available

pytestmark = [pytest.mark.interop, pytest.mark.anyio]

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
TIMEOUT = 30.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Run:
    def __init__(self, returncode: int, stdout: str, stderr: str) -> None:
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr

    @property
    def lines(self) -> list[str]:
        return self.stdout.splitlines()

    def __repr__(self) -> str:
        return f"exit {self.returncode}\n--- stdout\n{self.stdout}--- stderr\n{self.stderr}"


async def run_example(name: str, *args: str, cwd: Path) -> Run:
    """Run ``examples/<name>`` with ``args``; ``cwd`` is a scratch directory (no stray connect.json there)."""
    env = {key: value for key, value in os.environ.items() if key != "MESSAGING_CONNECT_FILE"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["PYTHONUNBUFFERED"] = "1"
    with anyio.fail_after(TIMEOUT):
        result = await anyio.run_process([sys.executable, str(EXAMPLES / name), *args], cwd=cwd, env=env, check=False)
    return Run(result.returncode, result.stdout.decode(), result.stderr.decode())


@asynccontextmanager
async def running_broker(**options: Any) -> AsyncIterator[ProtonBroker]:
    broker = ProtonBroker(**options)
    await anyio.to_thread.run_sync(broker.start)
    try:
        yield broker
    finally:
        await anyio.to_thread.run_sync(broker.stop)


async def test_examples_are_all_covered() -> None:
    assert sorted(path.name for path in EXAMPLES.glob("*.py")) == [
        "codec_tour.py",
        "proton_engine_selectors.py",  # run by tests/test_proton_engine_api.py::test_selectors_loop_against_our_broker
        "quickstart.py",
        "receive.py",
        "request_reply.py",  # and on every kind of peer by tests/test_request_reply.py
        "send.py",
        "spark_pipeline.py",  # run by tests/test_spark.py::test_the_example_pipeline_on_a_local_cluster
        "tls.py",
    ]


async def test_send(tmp_path: Path) -> None:
    async with running_broker() as broker:
        run = await run_example("send.py", broker.url, "example-q", "5", cwd=tmp_path)
        assert run.returncode == 0, run
        assert run.lines == ["sent 5 messages to 'example-q', all accepted"], run
        messages = await anyio.to_thread.run_sync(lambda: broker.wait_messages(5, address="example-q"))
        assert [m.body for m in messages] == [f"message {n}" for n in range(5)]
        assert [m.properties for m in messages] == [{"number": n} for n in range(5)]
        assert all(m.outcome == "accepted" and not m.settled for m in messages)


async def test_send_fails_loudly_when_rejected(tmp_path: Path) -> None:
    async with running_broker() as broker:
        broker.outcome_for["picky"] = ("rejected", "amqp:precondition-failed", "not today")
        run = await run_example("send.py", broker.url, "picky", "2", cwd=tmp_path)
        assert run.returncode != 0, run
        assert "MessageRejected" in run.stderr, run
        assert "not today" in run.stderr, run
        assert "all accepted" not in run.stdout, run


async def test_send_defaults_to_ten_messages(tmp_path: Path) -> None:
    async with running_broker() as broker:
        run = await run_example("send.py", broker.url, cwd=tmp_path)
        assert run.returncode == 0, run
        assert run.lines == ["sent 10 messages to 'examples', all accepted"], run
        assert len(await anyio.to_thread.run_sync(lambda: broker.wait_messages(10, address="examples"))) == 10


async def test_receive(tmp_path: Path) -> None:
    async with running_broker() as broker:
        for number in range(4):
            broker.put("inbox", Message(body=f"queued {number}"))
        run = await run_example("receive.py", broker.url, "inbox", "3", cwd=tmp_path)
        assert run.returncode == 0, run
        assert run.lines == [
            "received 'queued 0'",
            "received 'queued 1'",
            "received 'queued 2'",
            "received 3 messages from 'inbox'",
        ], run
        outcomes = await anyio.to_thread.run_sync(lambda: broker.wait_outcomes(3, outcome="accepted"))
        assert [o.message.body for o in outcomes] == ["queued 0", "queued 1", "queued 2"]

        def rest() -> list[Any]:
            # The fourth was prefetched (credit 100) and released back when the connection closed.
            return broker.wait_for(lambda: broker.queued("inbox") or None, what="the unconsumed message requeued")

        assert [m.body for m in await anyio.to_thread.run_sync(rest)] == ["queued 3"]


async def test_send_then_receive_round_trip(tmp_path: Path) -> None:
    async with running_broker() as broker:
        sent = await run_example("send.py", broker.url, "relay", "3", cwd=tmp_path)
        assert sent.returncode == 0, sent
        received = await run_example("receive.py", broker.url, "relay", "3", cwd=tmp_path)
        assert received.returncode == 0, received
        assert received.lines == [
            "received 'message 0'",
            "received 'message 1'",
            "received 'message 2'",
            "received 3 messages from 'relay'",
        ], received


async def test_request_reply(tmp_path: Path) -> None:
    async with running_broker() as broker:
        run = await run_example("request_reply.py", broker.url, "requests", cwd=tmp_path)
        assert run.returncode == 0, run
        assert run.lines == [
            "replies through the anonymous relay",  # the proton broker offers ANONYMOUS-RELAY
            "replies to a dynamic node, dynamic-1",
            "'hello' -> 'HELLO' (correlation 0)",
            "'request' -> 'REQUEST' (correlation 1)",
            "'reply' -> 'REPLY' (correlation 2)",
        ], run
        attaches = broker.attaches
        assert any(a.role == "receiver" and a.source.dynamic for a in attaches)
        assert any(a.role == "sender" and a.target.address is None for a in attaches)  # the anonymous replier
        requests = [m for m in broker.messages if m.address == "requests"]
        assert [m.body for m in requests] == ["hello", "request", "reply"]
        replies = [m for m in broker.messages if m.address != "requests"]
        assert [m.body for m in replies] == ["HELLO", "REQUEST", "REPLY"]
        assert {m.address for m in replies} == {requests[0].message.reply_to}


@pytest.mark.skipif(not SSL.present(), reason="this python-qpid-proton has no TLS support")
@pytest.mark.skipif(not openssl_available(), reason="the openssl command is needed to make test certificates")
@pytest.mark.parametrize("client_certificate", [False, True], ids=["server-auth", "mutual-auth"])
async def test_tls(tmp_path: Path, client_certificate: bool) -> None:
    certs = tmp_path / "certs"
    ca = make_ca(certs, "ca")
    server = make_cert(certs, "server", ca, "localhost", san=["DNS:localhost", "IP:127.0.0.1"])
    client = make_cert(certs, "client", ca, "example-client", client=True)
    domain = SSLDomain(SSLDomain.MODE_SERVER)
    domain.set_credentials(server.cert, server.key, None)
    if client_certificate:
        domain.set_trusted_ca_db(ca.cert)
        domain.set_peer_authentication(SSLDomain.VERIFY_PEER, ca.cert)
    async with running_broker(ssl_domain=domain) as broker:
        url = f"amqps://localhost:{broker.port}"
        args = [url, "secure", ca.cert] + ([client.cert, client.key] if client_certificate else [])
        run = await run_example("tls.py", *args, cwd=tmp_path)
        assert run.returncode == 0, run
        assert run.lines == [f"sent over TLS to {url}: Accepted()"], run
        [message] = await anyio.to_thread.run_sync(lambda: broker.wait_messages(1, address="secure"))
        assert message.body == "over TLS"


@pytest.mark.skipif(not SSL.present(), reason="this python-qpid-proton has no TLS support")
@pytest.mark.skipif(not openssl_available(), reason="the openssl command is needed to make test certificates")
async def test_tls_refuses_an_unknown_ca(tmp_path: Path) -> None:
    certs = tmp_path / "certs"
    ca = make_ca(certs, "ca")
    stranger = make_ca(certs, "stranger")
    server = make_cert(certs, "server", ca, "localhost", san=["DNS:localhost"])
    domain = SSLDomain(SSLDomain.MODE_SERVER)
    domain.set_credentials(server.cert, server.key, None)
    async with running_broker(ssl_domain=domain) as broker:
        run = await run_example("tls.py", f"amqps://localhost:{broker.port}", "secure", stranger.cert, cwd=tmp_path)
        assert run.returncode != 0, run
        assert "CertificateVerifyFailed" in run.stderr and "certificate verify failed" in run.stderr, run
        assert broker.messages == []


async def test_tls_without_arguments_prints_its_usage(tmp_path: Path) -> None:
    run = await run_example("tls.py", cwd=tmp_path)
    assert run.returncode == 1, run
    assert "python examples/tls.py URL ADDRESS CA_FILE" in run.stderr, run


async def test_quickstart(tmp_path: Path) -> None:
    """The quickstart needs no broker of ours: it runs the embedded one in its own process."""
    run = await run_example("quickstart.py", cwd=tmp_path)
    assert run.returncode == 0, run
    lines = run.lines
    assert re.fullmatch(r"embedded broker listening on amqp://127\.0\.0\.1:\d+", lines[0]), run
    assert lines[1:] == [
        "sent 'hello 0': Accepted()",
        "sent 'hello 1': Accepted()",
        "sent 'hello 2': Accepted()",
        "received 'hello 0' (subject 'greeting')",
        "received 'hello 1' (subject 'greeting')",
        "received 'hello 2' (subject 'greeting')",
        "done",
    ], run


async def test_codec_tour(tmp_path: Path) -> None:
    run = await run_example("codec_tour.py", cwd=tmp_path)
    assert run.returncode == 0, run
    assert run.stderr == "", run
    lines = run.lines
    assert lines[0].startswith("message: ")
    assert lines[1].startswith("encoded (") and lines[1].endswith(" bytes):")
    assert any(line.startswith("decoded: ") for line in lines)
    assert "Hello, AMQP 1.0!" in run.stdout
    # The value table: each value, then its decoded form.
    assert any(line.startswith("None ") and line.rstrip().endswith("40") for line in lines), run
    assert sum(1 for line in lines if line.strip().startswith("-> ")) == 12, run
