"""AMQP over WebSocket beside plain TCP, and the cost of OpenTelemetry tracing, through our broker.

    python benchmarks/websocket.py [--quick] [--count N] [--repeats N]

Two report sections:

- **websocket**: our client sends (at-least-once, ``submit()`` with a window, as ``client.py``) and then receives
  (decode and accept each) ``--count`` 100-byte messages through our broker (a process of its own, serving
  ``--ws-port 0`` beside its TCP port), once over ``amqp://`` and once over ``ws://``. The WebSocket figure is in
  the "amqp_async" column and the TCP one in the reference column, so the ratio is WebSocket's share of TCP's
  throughput (target 0.6).
- **tracing**: the same send and receive over TCP, three ways: with tracing off (the default: one attribute check
  per message is all the hook costs); with the hook taken out (``Sender._transfer`` and ``Receiver.receive``
  recompiled from their source without the tracing lines: the build without the hook); and with tracing on (the
  OpenTelemetry SDK's ``TracerProvider``, spans made and ended, no exporter). Rows: off beside the build without
  the hook (target 0.95: under 5% cost), and on beside off (no target: the price of tracing).

Each figure is the best of ``--repeats`` runs (3; the variants alternate, so a noisy neighbour on a shared machine
hits them alike), each run a fresh client process (``child_run``).
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
from typing import Any

import anyio
from _common import Row, broker_process, child_run, ours_receive, ours_send, print_rows

import amqp_async

BODY = b"x" * 100


# --- the build without the tracing hook --------------------------------------------------------------------------


def _without(function: Any, hook: str, replacement: str = "") -> Any:
    """``function`` recompiled from its source with the ``hook`` lines replaced (the tracing lines taken out).

    ``hook`` and ``replacement`` are written as in the file; a method's source is indented, so they are shifted
    left by the same amount as the source before the replacement."""
    raw = inspect.getsource(function)
    indent = len(raw) - len(raw.lstrip(" "))

    def shift(text: str) -> str:
        return "".join(line[indent:] + "\n" for line in text.splitlines())

    source = shift(raw)
    if shift(hook) not in source:
        raise RuntimeError(f"the tracing hook of {function.__qualname__} is not where this benchmark expects it")
    code = compile(source.replace(shift(hook), shift(replacement)), inspect.getsourcefile(function) or "?", "exec")
    namespace: dict[str, Any] = {}
    exec(code, function.__globals__, namespace)
    return namespace[function.__name__]


def remove_hook() -> None:
    """Patch the client to what it was before tracing: no ``_tracing`` check on sending or receiving."""
    from amqp_async.client import _links

    _links.Sender._transfer = _without(  # type: ignore[method-assign]
        _links.Sender._transfer,
        "        if self._tracing is not None and traced and isinstance(message, Message):\n"
        "            return await self._traced_transfer(message, transaction)\n",
    )
    _links.Receiver.receive = _without(  # type: ignore[method-assign]
        _links.Receiver.receive,
        "                tracing = self._tracing\n"
        "                if tracing is None:\n"
        "                    delivery = Delivery(self, incoming.popleft())\n"
        "                else:\n"
        "                    delivery = tracing.delivery(self, incoming.popleft())\n",
        "                delivery = Delivery(self, incoming.popleft())\n",
    )


def _sdk_provider() -> Any:
    """An OpenTelemetry SDK tracer provider (spans recorded, nothing exported), or None without the SDK."""
    try:
        from opentelemetry.sdk.trace import TracerProvider
    except ImportError:
        return None
    return TracerProvider()


async def _send_receive(url: str, address: str, count: int, tracing: Any) -> tuple[float, float]:
    if tracing is None:
        return await ours_send(url, address, count, BODY), await ours_receive(url, address, count)
    # ours_send/ours_receive with the tracing option: the same loops (see _common), on a traced connection.
    original = amqp_async.connect

    def traced_connect(*args: Any, **options: Any) -> Any:
        return original(*args, tracing=tracing, **options)

    import _common

    _common.amqp_async.connect = traced_connect  # type: ignore[attr-defined]
    try:
        return await ours_send(url, address, count, BODY), await ours_receive(url, address, count)
    finally:
        _common.amqp_async.connect = original  # type: ignore[attr-defined]


def _child(variant: str, url: str, address: str, count: int) -> tuple[float, float]:
    tracing = None
    if variant == "no-hook":
        remove_hook()
    elif variant == "tracing-on":
        tracing = _sdk_provider()
        if tracing is None:
            raise RuntimeError("opentelemetry-sdk is not installed")
    result: tuple[float, float] = anyio.run(_send_receive, url, address, count, tracing)
    return result


def _best(rates: list[tuple[float, float]]) -> tuple[float, float]:
    return max(rate[0] for rate in rates), max(rate[1] for rate in rates)


def run(quick: bool = False, count: int | None = None, repeats: int | None = None) -> list[Row]:
    """Both sections' rows (see the module's documentation)."""
    count = count or (5_000 if quick else 30_000)
    repeats = repeats or (2 if quick else 3)
    variants = ["tcp", "ws", "no-hook"]
    if _sdk_provider() is not None:
        variants.append("tracing-on")
    results: dict[str, list[tuple[float, float]]] = {variant: [] for variant in variants}
    with broker_process("--ws-port", "0") as broker:
        assert broker.ws_url is not None
        for round_ in range(repeats):
            for variant in variants:
                url = broker.ws_url if variant == "ws" else broker.url
                mode = "off" if variant in ("tcp", "ws") else variant
                address = f"bench-{variant}-{round_}"
                rates = child_run(__file__, [mode, url, address, str(count)], f"{variant} send/receive")
                results[variant].append((float(rates[0]), float(rates[1])))
    best = {variant: _best(rates) for variant, rates in results.items()}
    note = f"{count} × 100 B, best of {repeats}"
    rows = []
    for index, what in enumerate(("send", "receive")):
        rows.append(
            Row(
                "websocket",
                f"{what} over ws:// (reference: amqp://), our broker",
                "msg/s",
                best["ws"][index],
                best["tcp"][index],
                target=0.6,
                note=f"reference column: TCP; {note}",
            )
        )
    for index, what in enumerate(("send", "receive")):
        rows.append(
            Row(
                "tracing",
                f"{what}, tracing off (reference: no hook)",
                "msg/s",
                best["tcp"][index],
                best["no-hook"][index],
                target=0.95,
                note=f"reference column: the hook taken out; {note}",
            )
        )
    if "tracing-on" in best:
        for index, what in enumerate(("send", "receive")):
            rows.append(
                Row(
                    "tracing",
                    f"{what}, tracing on (reference: off)",
                    "msg/s",
                    best["tracing-on"][index],
                    best["tcp"][index],
                    note=f"OpenTelemetry SDK, no exporter; reference column: off; {note}",
                )
            )
    return rows


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        variant, url, address, count = sys.argv[2:6]
        print(json.dumps(_child(variant, url, address, int(count))))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--count", type=int)
    parser.add_argument("--repeats", type=int)
    args = parser.parse_args()
    print_rows(
        "AMQP over WebSocket beside TCP, and the cost of tracing, through our broker",
        run(args.quick, args.count, args.repeats),
    )


if __name__ == "__main__":
    main()
