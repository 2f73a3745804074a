"""Request/reply on every peer: ``examples/request_reply.py`` and the capabilities it checks
(``Connection.peer_capabilities``), against the embedded broker, RabbitMQ 3.10 and python-qpid-proton's broker
example (``/usr/share/proton/examples/python/broker.py``, as shipped), plus the proton broker of
tests/proton_broker.py.

Each peer offers something else, and the example must choose right on each (its output says how):

| peer | anonymous relay | dynamic nodes | the example uses |
|---|---|---|---|
| embedded broker | offered | made | the relay, a dynamic reply queue |
| RabbitMQ 3.10 | not offered (refused) | known not to (refused) | a sender per reply address, a named queue |
| proton's broker.py example | not offered | made (not announced) | a sender per reply address, a dynamic queue |

The capabilities are checked exactly on each peer, and a link refused by the peer (RabbitMQ's refusal of an
anonymous sender and of a dynamic receiver, our broker's refusal of a bad selector) raises an error that names the
link's address and keeps the peer's condition and words. Every run is bounded.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

import amqp_async
from amqp_async import PeerCapabilities
from amqp_async.codec.performatives import Open
from amqp_async.types import symbol

try:
    from proton_broker import ProtonBroker
    from rabbitmq import RabbitMQNode
    from test_broker_cli import broker_process
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.proton_broker import ProtonBroker
    from tests.rabbitmq import RabbitMQNode
    from tests.test_broker_cli import broker_process

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "request_reply.py"
TIMEOUT = 60.0
ANSWERS = [
    "'hello' -> 'HELLO' (correlation 0)",
    "'request' -> 'REQUEST' (correlation 1)",
    "'reply' -> 'REPLY' (correlation 2)",
]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def run_example(*arguments: str) -> list[str]:
    """``python examples/request_reply.py ARGUMENTS``: its lines (it must exit with 0)."""
    env = {key: value for key, value in os.environ.items() if key != "MESSAGING_CONNECT_FILE"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    result = subprocess.run(
        [sys.executable, str(EXAMPLE), *arguments], capture_output=True, text=True, env=env, timeout=TIMEOUT
    )
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result.stdout.splitlines()


async def capabilities(url: str) -> PeerCapabilities:
    with anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(url, reconnect=False) as conn:
            return conn.peer_capabilities


# ---------------------------------------------------------------------------------------------------------------
# The embedded broker


@pytest.mark.anyio
async def test_the_embedded_broker(tmp_path: Path) -> None:
    with broker_process(tmp_path, "--quiet") as broker:
        assert await capabilities(broker.url) == PeerCapabilities(
            offered=frozenset({"ANONYMOUS-RELAY", "amqp:local-transactions", "SHARED-SUBS"}),
            anonymous_relay=True,
            local_transactions=True,
            shared_subscriptions=True,
        )
        lines = await anyio.to_thread.run_sync(run_example, broker.url, "requests")
    assert lines[0] == "replies through the anonymous relay"
    assert re.fullmatch(r"replies to a dynamic node, temp-queue://amqp_async-broker/1\.[0-9a-f]{16}", lines[1])
    assert lines[2:] == ANSWERS


@pytest.mark.anyio
async def test_a_link_our_broker_refuses_names_its_address_and_keeps_the_brokers_words(tmp_path: Path) -> None:
    with broker_process(tmp_path, "--quiet") as broker:
        with anyio.fail_after(TIMEOUT):
            async with amqp_async.connect(broker.url, reconnect=False) as conn:
                with pytest.raises(amqp_async.LinkError) as refused:
                    await conn.open_receiver("orders", selector="price >")
    assert refused.value.condition == "amqp:invalid-field"
    assert str(refused.value).startswith(
        "amqp:invalid-field: the peer refused the receiver from 'orders': invalid selector: "
    )


# ---------------------------------------------------------------------------------------------------------------
# RabbitMQ 3.10


@pytest.mark.interop
@pytest.mark.anyio
async def test_rabbitmq(rabbitmq_broker: RabbitMQNode) -> None:
    found = await capabilities(rabbitmq_broker.url)
    assert found.version is not None and found.version.startswith("3.10.")
    assert found == PeerCapabilities(
        local_transactions=False, dynamic_nodes=False, product="RabbitMQ", version=found.version
    )
    lines = await anyio.to_thread.run_sync(run_example, rabbitmq_broker.url, "/queue/rr-requests")
    assert lines[:2] == ["replies through a sender per reply address", "no dynamic node: the peer makes none"]
    assert re.fullmatch(r"replies to a named queue, /queue/replies-[0-9a-f]{12}", lines[2]), lines
    assert lines[3:] == ANSWERS
    reply_queue = lines[2].rsplit("/", 1)[1]
    assert rabbitmq_broker.queue_depth("rr-requests") == 0  # every request taken and accepted
    assert rabbitmq_broker.queue_depth(reply_queue) == 0  # every reply taken and accepted


@pytest.mark.interop
@pytest.mark.anyio
async def test_rabbitmq_refusals_name_the_link_and_keep_rabbitmqs_words(rabbitmq_broker: RabbitMQNode) -> None:
    """RabbitMQ 3.x ends the session when it refuses an attach: each attempt on a session of its own."""
    with anyio.fail_after(TIMEOUT):
        async with amqp_async.connect(rabbitmq_broker.url, reconnect=False) as conn:
            with pytest.raises(amqp_async.SessionError) as anonymous:
                await (await conn.open_session()).open_sender(None)
            with pytest.raises(amqp_async.SessionError) as dynamic:
                await (await conn.open_session()).open_receiver(None, dynamic=True)
            missing = "/amq/queue/rr-no-such-queue"
            with pytest.raises((amqp_async.LinkError, amqp_async.SessionError)) as unknown:
                await (await conn.open_session()).open_receiver(missing)
            # the connection is unharmed
            sender = await conn.open_sender("/queue/rr-after")
            await sender.send(amqp_async.Message(body="still fine"))
    assert str(anonymous.value) == (
        "amqp:invalid-field: the peer refused the sender with no target (the anonymous relay): "
        "Attach rejected: {address_not_utf8_string,undefined}"
    )
    assert str(dynamic.value) == (
        "amqp:not-implemented: the peer refused the dynamic receiver (a node the peer makes): "
        "Dynamic sources not supported"
    )
    assert unknown.value.condition == "amqp:not-found"
    assert f"the peer refused the receiver from '{missing}': " in str(unknown.value)


# ---------------------------------------------------------------------------------------------------------------
# python-qpid-proton's broker example, as shipped


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def proton_broker_example() -> Iterator[str]:
    """python-qpid-proton's ``broker.py`` example on a free port (installed with the examples when missing)."""
    pytest.importorskip("proton", reason="python-qpid-proton runs its broker example; CI installs it")
    try:
        from test_proton_examples import _examples
    except ImportError:  # pragma: no cover - tests/ imported as a package
        from tests.test_proton_examples import _examples
    directory, why = _examples()
    if directory is None:
        pytest.skip(f"python-qpid-proton's broker example is not available: {why}")
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, str(directory / "broker.py"), "-a", f"127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + TIMEOUT
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            if process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(
                    f"proton's broker.py did not listen: {process.stderr.read() if process.stderr else ''}"
                )
            time.sleep(0.05)
        yield f"amqp://127.0.0.1:{port}"
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
        if process.stderr is not None:
            process.stderr.close()


@pytest.mark.interop
@pytest.mark.anyio
async def test_python_qpid_protons_broker_example() -> None:
    with proton_broker_example() as url:
        assert await capabilities(url) == PeerCapabilities()  # it announces nothing
        lines = await anyio.to_thread.run_sync(run_example, url, "requests")
    assert lines[0] == "replies through a sender per reply address"
    assert re.fullmatch(
        r"replies to a dynamic node, [0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", lines[1]
    )
    assert lines[2:] == ANSWERS


@pytest.mark.interop
@pytest.mark.anyio
async def test_the_proton_broker_of_the_tests_offers_the_relay() -> None:
    broker = ProtonBroker()
    await anyio.to_thread.run_sync(broker.start)
    try:
        assert (await capabilities(broker.url)).anonymous_relay is True
        lines = await anyio.to_thread.run_sync(run_example, broker.url, "requests")
    finally:
        await anyio.to_thread.run_sync(broker.stop)
    assert lines == ["replies through the anonymous relay", "replies to a dynamic node, dynamic-1", *ANSWERS]


# ---------------------------------------------------------------------------------------------------------------
# PeerCapabilities from open frames


@pytest.mark.parametrize(
    ("open_frame", "expected"),
    [
        (None, PeerCapabilities()),
        (Open(container_id="c"), PeerCapabilities()),
        (
            Open(
                container_id="artemis",
                offered_capabilities=[
                    symbol("sole-connection-for-container"),
                    symbol("DELAYED_DELIVERY"),
                    symbol("SHARED-SUBS"),
                    symbol("ANONYMOUS-RELAY"),
                ],
                desired_capabilities=[symbol("ANONYMOUS-RELAY")],
                properties={symbol("product"): "apache-activemq-artemis", symbol("version"): "2.31.2"},
            ),
            PeerCapabilities(
                offered=frozenset(
                    {"sole-connection-for-container", "DELAYED_DELIVERY", "SHARED-SUBS", "ANONYMOUS-RELAY"}
                ),
                desired=frozenset({"ANONYMOUS-RELAY"}),
                anonymous_relay=True,
                delayed_delivery=True,
                shared_subscriptions=True,
                sole_connection_for_container=True,
                product="apache-activemq-artemis",
                version="2.31.2",
            ),
        ),
        (  # one symbol where the field is multiple (§1.6.13 allows it)
            Open(container_id="c", offered_capabilities=symbol("ANONYMOUS-RELAY")),
            PeerCapabilities(offered=frozenset({"ANONYMOUS-RELAY"}), anonymous_relay=True),
        ),
        (  # RabbitMQ 4 serves AMQP 1.0 natively: nothing assumed from its name
            Open(container_id="r", properties={symbol("product"): "RabbitMQ", symbol("version"): "4.0.5"}),
            PeerCapabilities(product="RabbitMQ", version="4.0.5"),
        ),
        (
            Open(container_id="r", properties={symbol("product"): "RabbitMQ", symbol("version"): "3.13.7"}),
            PeerCapabilities(local_transactions=False, dynamic_nodes=False, product="RabbitMQ", version="3.13.7"),
        ),
    ],
    ids=["no-open", "nothing", "artemis-like", "single-symbol", "rabbitmq-4", "rabbitmq-3"],
)
def test_capabilities_from_an_open_frame(open_frame: Open | None, expected: PeerCapabilities) -> None:
    assert PeerCapabilities.from_open(open_frame) == expected
