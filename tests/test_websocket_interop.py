"""AMQP over WebSocket against an independent implementation: rhea (npm) with its WebSocket transport (the npm
package ``ws``), both ways, and our own broker; the scenarios of the interop matrix (`tests/test_interop_matrix.py`,
whose scenario functions, peer processes and rhea installation are reused here).

Columns:

* ``rhea-ws``: our client → ``tests/interop/rhea_broker.js --websocket /amqp`` (rhea's ``websocket_accept`` on a
  ``ws`` WebSocketServer that answers with the ``amqp`` subprotocol), URL ``ws://127.0.0.1:PORT/amqp``;
* ``amqp_async-ws``: our client → ``python -m amqp_async.broker --ws-port 0`` over ``ws://``;
* ``rhea-client-ws``: ``tests/interop/rhea_client.js --websocket /`` (rhea's ``websocket_connect`` with ``ws``)
  → our broker's WebSocket port.

rhea and ws are installed with npm into ``~/.cache/amqp_async/rhea`` when missing (idempotent, under a lock);
without node or npm the tests are skipped with the reason printed. Unlike the TCP matrix, nothing is written to
docs/interop.md: a cell is a test, and a failure fails it.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

try:
    import test_interop_matrix as matrix
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests import test_interop_matrix as matrix

pytest.importorskip("wsproto", reason="AMQP over WebSocket needs wsproto (the websocket extra; CI installs it)")

pytestmark = [pytest.mark.interop, pytest.mark.anyio]

SCENARIOS = list(matrix.SCENARIOS)
RHEA_WS_PATH = "/amqp"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _our_ws_broker(*arguments: str) -> Any:
    """Our broker in a subprocess serving WebSocket on a free port; ``.port`` is the WebSocket port."""
    env = {
        **matrix.os.environ,
        "PYTHONPATH": matrix.os.pathsep.join(filter(None, [str(matrix.ROOT), matrix.os.environ.get("PYTHONPATH")])),
    }
    return matrix._Process(
        [matrix.sys.executable, "-m", "amqp_async.broker", "--port", "0", "--ws-port", "0", "--quiet", *arguments],
        r"listening on ws://[^\s:]+:(\d+)",
        "python -m amqp_async.broker --ws-port 0",
        env=env,
    )


@contextlib.contextmanager
def start_ws_peer(key: str, variant: str | None) -> Iterator[matrix.Peer]:
    if key == "rhea-ws":
        arguments = ["--user", matrix.PLAIN_USER[0], "--password", matrix.PLAIN_USER[1]] if variant == "plain" else []
        process = matrix._Process(
            ["node", str(matrix.INTEROP / "rhea_broker.js"), "--port", "0", "--websocket", RHEA_WS_PATH, *arguments],
            r"listening on (\d+)",
            "the rhea broker over WebSocket (node tests/interop/rhea_broker.js --websocket)",
            env=matrix._rhea_env(websocket=True),
        )
        url = f"ws://127.0.0.1:{process.port}{RHEA_WS_PATH}"
        plain = matrix.PLAIN_USER if variant == "plain" else None
        try:
            # key "rhea": the error scenario provokes it as the TCP rhea peer (same fault-injection addresses)
            yield matrix.Peer("rhea", url, url, process=process, plain=plain)
        finally:
            process.stop()
    elif key == "amqp_async-ws":
        arguments = []
        if variant == "plain":
            arguments = ["--user", ":".join(matrix.PLAIN_USER)]
        elif variant == "limits":
            arguments = ["--max-connections", "1"]
        process = _our_ws_broker(*arguments)
        url = f"ws://127.0.0.1:{process.port}/"
        try:
            yield matrix.Peer(
                "amqp_async", url, url, process=process, plain=matrix.PLAIN_USER if variant == "plain" else None
            )
        finally:
            process.stop()
    else:  # pragma: no cover
        raise ValueError(key)


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """The peers are on loopback: a proxy set in the environment must not be used."""
    for name in ("http_proxy", "HTTP_PROXY"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("peer_key", ["rhea-ws", "amqp_async-ws"])
async def test_websocket_interop(peer_key: str, scenario: str) -> None:
    """Our client over ``ws://`` against ``peer_key`` in ``scenario`` (the interop matrix's scenario)."""
    with start_ws_peer(peer_key, matrix.VARIANTS.get(scenario)) as peer:
        # Every scenario passes over TCP with both peers (docs/interop.md): a NotSupported here fails the test too.
        with anyio.fail_after(matrix.TIMEOUTS.get(scenario, 45.0)):
            detail = await matrix.SCENARIO_FUNCTIONS[scenario](peer)
    print(f"{peer_key} / {scenario}: {detail}")


@pytest.mark.parametrize("scenario", [scenario for scenario in SCENARIOS if scenario not in matrix.OUR_PROGRAMS_ONLY])
async def test_rhea_client_over_websocket(scenario: str) -> None:
    """rhea (``websocket_connect`` with ``ws``) as a client of our broker's WebSocket listener."""
    started = time.monotonic()
    arguments: list[str] = ["--queue", f"rhea-ws-{scenario}", "--websocket", "/"]
    if scenario in ("at-least-once", "at-most-once"):
        arguments += ["--count", str(matrix.COUNT)]
    broker_arguments: list[str] = []
    if scenario == "sasl-plain":
        broker_arguments = ["--user", ":".join(matrix.PLAIN_USER)]
        arguments += ["--user", matrix.PLAIN_USER[0], "--password", matrix.PLAIN_USER[1]]
    matrix._rhea_env(websocket=True)
    process = _our_ws_broker(*broker_arguments)
    try:
        with anyio.fail_after(120):
            if scenario == "request-reply":
                count = 10
                url = f"ws://127.0.0.1:{process.port}/"
                async with matrix.connected(url) as responder, anyio.create_task_group() as group:
                    group.start_soon(matrix._respond, responder, f"rhea-ws-{scenario}-requests", count)
                    outcome = await matrix._run_rhea_client(process.port, scenario, *arguments, "--count", str(count))
                    group.cancel_scope.cancel()
            else:
                outcome = await matrix._run_rhea_client(process.port, scenario, *arguments)
    finally:
        process.stop()
    assert outcome["ok"], f"rhea client over WebSocket: {outcome['detail']}"
    print(f"rhea-client-ws / {scenario}: {outcome['detail']} ({time.monotonic() - started:.1f} s)")
