"""The callback API (``amqp_async.proton``) beside the awaitable API and python-qpid-proton, on the same benchmarks.

Run: ``python benchmarks/callback.py [--quick] [--messages N] [--warmup W] [--no-rabbitmq] [--no-broker]``.

The callback programs are written ONCE against proton's API (a ``MessagingHandler`` and ``Container(handler).run()``)
and run twice: with ``proton`` (python-qpid-proton, the reference) and with ``amqp_async.proton``; only the module
they are given differs. The awaitable API (``amqp_async.connect``, ``submit()`` with a window of 1000 trackers)
does the same work on the same peer in the same run. Every measurement runs in a fresh subprocess of its own (one
client, one connection), so no client shares its interpreter, heap or imports with another.

Workloads (16-byte bodies, a data section, a ``Message`` built and encoded per send, every message received decoded):

- send to the Qpid Proton C ``direct`` example as the receiver (it grants credit for every message, accepts and
  settles each one, then closes the connection):
    - at-least-once: the callback program sends in ``on_sendable`` while there is credit and fewer than 1000
      messages await their outcome (the awaitable client's window), counts ``on_accepted`` and sends more from
      there; the clock stops at the last outcome.
    - at-most-once (``AtMostOnce()`` link option; the awaitable sender opened with ``delivery="at-most-once"``):
      no outcomes, so the clock stops when the peer closes the connection after it received the last message
      (``on_connection_closing``; the awaitable client polls ``connection.is_closed`` every millisecond).
- receive from ``direct`` as the sender, prefetch (credit) 1000, every message decoded (``on_message``;
  ``delivery.message``) and accepted (auto-accept; ``await delivery.accept()``).
- through our embedded broker (its own process) and RabbitMQ 3.10, as ``throughput.py`` does: send at-least-once
  to a queue of the client's own, then receive the same messages back from it, prefetch 1000.

Warm-up, identical for every client: the first W messages (``--warmup``, at least 1) go before the clock starts. Sending
at-least-once, the W are sent and all their outcomes awaited, then the clock starts and N more are sent (the
pipeline is empty at the start, as in the existing suite). Sending at-most-once there are no outcomes: the clock
starts once the W-th message has been handed to the client. Receiving, the clock starts after the W-th message and
stops at the last. Rates are N / elapsed. Connection set-up and attach are outside the timed region.

Our ``Container.run()`` runs on uvloop when it is installed (python-qpid-proton has its own C loop), so the awaitable
API runs on that same loop here: the callback/awaitable ratio compares the two APIs, not two event loops.

The goals, reported per row: the callback API at least 2x python-qpid-proton's own Container, and at most
25% more costly than the awaitable API (callback rate >= 0.8 x awaitable rate).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import Row, broker_process, child_run, print_rows, proton_available

BODY = b"0123456789abcdef"
WINDOW = 1000
PREFETCH = 1000
#: The callback API may cost at most 25% more per message than the awaitable API: callback >= awaitable / 1.25.
AWAITABLE_GOAL = 1 / 1.25
CLIENTS = ("awaitable", "callback", "proton")


# --- the callback programs, written once against proton's API ----------------------------------------------------


def _connect(container: Any, url: str) -> Any:
    """``container.connect`` to ``url``, with its user and password (SASL PLAIN) when it has them."""
    parts = urlsplit(url)
    options: dict[str, Any] = {"reconnect": False}
    if parts.username:
        options.update(user=parts.username, password=parts.password or "", allow_insecure_mechs=True)
    return container.connect(f"{parts.hostname}:{parts.port}", **options)


def callback_run(api_name: str, kind: str, url: str, address: str, count: int, warmup: int, settle: str) -> float:
    """Run the send or receive program with the API ``api_name`` (``proton`` or ``amqp_async.proton``); msg/s."""
    api = importlib.import_module(api_name)
    handlers = importlib.import_module(api_name + ".handlers")
    reactor = importlib.import_module(api_name + ".reactor")
    Message = api.Message
    MessagingHandler = handlers.MessagingHandler
    warmup = max(1, warmup)
    total = warmup + count
    at_most_once = settle == "at-most-once"

    class Send(MessagingHandler):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            super().__init__()
            self.sent = self.confirmed = 0
            self.start = self.elapsed = 0.0
            self.limit = total if at_most_once else warmup

        def on_start(self, event: Any) -> None:
            options = reactor.AtMostOnce() if at_most_once else None
            event.container.create_sender(_connect(event.container, url), address, options=options)

        def _send(self, sender: Any) -> None:
            while sender.credit and self.sent < self.limit and (at_most_once or self.sent - self.confirmed < WINDOW):
                if self.sent == warmup and not self.start:
                    self.start = time.perf_counter()
                message = Message(body=BODY)
                message.inferred = True  # a data section
                sender.send(message)
                self.sent += 1

        def on_sendable(self, event: Any) -> None:
            self._send(event.sender)

        def on_accepted(self, event: Any) -> None:
            self.confirmed += 1
            if self.confirmed == total:
                self.elapsed = time.perf_counter() - self.start
                event.connection.close()
                return
            if self.confirmed == warmup:
                self.limit = total  # the warm-up is over, and every one of its outcomes is in
            self._send(event.sender)

        def on_connection_closing(self, event: Any) -> None:
            if at_most_once and not self.elapsed:
                self.elapsed = time.perf_counter() - self.start

    class Receive(MessagingHandler):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            super().__init__(prefetch=PREFETCH)
            self.received = 0
            self.start = self.elapsed = 0.0

        def on_start(self, event: Any) -> None:
            event.container.create_receiver(_connect(event.container, url), address)

        def on_message(self, event: Any) -> None:
            event.message.body  # noqa: B018 (decoded, as the awaitable client reads it)
            self.received += 1
            if self.received == warmup:
                self.start = time.perf_counter()
            elif self.received == total:
                self.elapsed = time.perf_counter() - self.start
                event.connection.close()

    handler = Send() if kind == "send" else Receive()
    reactor.Container(handler).run()
    if not handler.elapsed:
        raise RuntimeError(f"{api_name} {kind} did not finish (start {handler.start}, elapsed {handler.elapsed})")
    return count / handler.elapsed


# --- the awaitable API, the same work --------------------------------------------------------------------------


async def awaitable_send(url: str, address: str, count: int, warmup: int, settle: str) -> float:
    import anyio

    import amqp_async

    warmup = max(1, warmup)
    async with amqp_async.connect(url, reconnect=False) as connection:
        sender = await connection.open_sender(address, delivery=settle)

        async def burst(number: int) -> None:
            pending: list[Any] = []
            for _ in range(number):
                pending.append(await sender.submit(amqp_async.Message(body=BODY)))
                if len(pending) >= WINDOW:
                    for tracker in pending[: WINDOW // 2]:
                        await tracker
                    del pending[: WINDOW // 2]
            for tracker in pending:
                await tracker

        await burst(warmup)
        start = time.perf_counter()
        await burst(count)
        if settle == "at-most-once":
            while not connection.is_closed:  # the peer closes once it has every message
                await anyio.sleep(0.001)
        return count / (time.perf_counter() - start)


async def awaitable_receive(url: str, address: str, count: int, warmup: int) -> float:
    import amqp_async

    warmup = max(1, warmup)
    async with amqp_async.connect(url, reconnect=False) as connection:
        receiver = await connection.open_receiver(address, credit=PREFETCH)
        start = 0.0
        for index in range(1, warmup + count + 1):
            delivery = await receiver.receive()
            delivery.message  # noqa: B018 (decoded on first access)
            await delivery.accept()
            if index == warmup:
                start = time.perf_counter()
        return count / (time.perf_counter() - start)


def _loop_options() -> dict[str, Any]:
    """The event loop our ``Container.run()`` uses (uvloop when installed), for the awaitable API too."""
    if importlib.util.find_spec("uvloop") is not None:
        return {"backend": "asyncio", "backend_options": {"use_uvloop": True}}
    return {"backend": "asyncio"}


def child(client: str, kind: str, url: str, address: str, count: int, warmup: int, settle: str) -> float:
    """One measurement in this process (the subprocess body)."""
    if client == "awaitable":
        import anyio

        if kind == "send":
            return float(anyio.run(awaitable_send, url, address, count, warmup, settle, **_loop_options()))
        return float(anyio.run(awaitable_receive, url, address, count, warmup, **_loop_options()))
    api = "proton" if client == "proton" else "amqp_async.proton"
    return callback_run(api, kind, url, address, count, warmup, settle)


# --- the benchmark -------------------------------------------------------------------------------------------


def measure(
    client: str, kind: str, url: str, address: str, count: int, warmup: int, settle: str = "at-least-once"
) -> float | None:
    """One measurement in a fresh subprocess; None for proton when it is not installed."""
    if client == "proton" and not proton_available():
        return None
    arguments = [client, kind, url, address, str(count), str(warmup), settle]
    rate = float(child_run(__file__, arguments, "callback", timeout=120)["rate"])
    print(f"  {client:>9} {kind} {settle} via {address}: {rate:,.0f} msg/s", file=sys.stderr, flush=True)
    return rate


def attempt(*arguments: Any) -> float | None:
    """:func:`measure`, but a run that fails or hangs is reported on stderr and counts as no figure (None), so one
    client's failure does not lose the other figures."""
    try:
        return measure(*arguments)
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        print(f"FAILED {arguments[:4]}: {str(exc)[-1500:]}", file=sys.stderr, flush=True)
        return None


def _direct(client: str, kind: str, count: int, warmup: int, settle: str = "at-least-once") -> float | None:
    """One measurement against a fresh C ``direct`` process (it sends or takes ``warmup + count`` messages)."""
    from _peers import start_direct

    if client == "proton" and not proton_available():
        return None
    peer = start_direct("examples", warmup + count)
    try:
        return attempt(client, kind, f"amqp://127.0.0.1:{peer.port}", "examples", count, warmup, settle)
    finally:
        peer.stop()


def _best(rates: list[float | None]) -> float | None:
    known = [rate for rate in rates if rate]
    return max(known) if known else None


def _rows(label: str, rates: dict[str, float | None], target: float = 2) -> list[Row]:
    awaitable, callback, proton = rates["awaitable"], rates["callback"], rates["proton"]
    note = ""
    if awaitable and callback:
        share = callback / awaitable
        met = "✓" if share >= AWAITABLE_GOAL else "✗"
        note = f"(callback/awaitable {share:.2f}, goal >= {AWAITABLE_GOAL:.2f} {met})"
    return [
        Row("callback", f"{label}, awaitable", "msg/s", awaitable, proton),
        Row("callback", f"{label}, callback", "msg/s", callback, proton, target=target, note=note),
    ]


def _rotations(repeat: int) -> list[tuple[str, ...]]:
    """The clients' order in each round, rotated so that none always runs first (or last) on a busy machine."""
    return [CLIENTS[index % 3 :] + CLIENTS[: index % 3] for index in range(repeat)]


def run_direct(
    quick: bool = False, messages: int | None = None, warmup: int | None = None, repeat: int = 1
) -> list[Row]:
    """The rows against the C ``direct`` example: send at-least-once and at-most-once, receive with credit 1000.
    Each figure is the best of ``repeat`` runs, the clients taking turns."""
    count = messages or (10_000 if quick else 100_000)
    warm = warmup if warmup is not None else (500 if quick else 2_000)
    rows: list[Row] = []
    for kind, settle, label in (
        ("send", "at-least-once", "direct: send at-least-once"),
        ("send", "at-most-once", "direct: send at-most-once"),
        ("receive", "at-least-once", f"direct: receive, credit {PREFETCH}"),
    ):
        runs: dict[str, list[float | None]] = {client: [] for client in CLIENTS}
        for order in _rotations(repeat):
            for client in order:
                runs[client].append(_direct(client, kind, count, warm, settle))
        rows += _rows(label, {client: _best(rates) for client, rates in runs.items()})
    return rows


def run_brokers(
    quick: bool = False,
    messages: int | None = None,
    warmup: int | None = None,
    repeat: int = 1,
    broker: bool = True,
    rabbitmq: bool = True,
) -> list[Row]:
    """The rows through our embedded broker and RabbitMQ 3.10 (left out, with a note on stderr, when it cannot run):
    send confirmed to a queue of the client's own, then receive those messages back. Best of ``repeat`` runs."""
    count = messages or (5_000 if quick else 50_000)
    warm = warmup if warmup is not None else (500 if quick else 2_000)
    brokers: list[tuple[str, str, Any]] = []
    if broker:
        brokers.append(("our broker", "", broker_process))
    if rabbitmq:
        from _rabbitmq import rabbitmq_node

        brokers.append(("RabbitMQ 3.10", "/queue/", rabbitmq_node))
    rows: list[Row] = []
    for name, prefix, start in brokers:
        sent: dict[str, list[float | None]] = {client: [] for client in CLIENTS}
        received: dict[str, list[float | None]] = {client: [] for client in CLIENTS}
        try:
            with start() as node:
                for order in _rotations(repeat):
                    run_id = uuid.uuid4().hex[:8]
                    queues = {client: f"{prefix}bench-callback-{client}-{run_id}" for client in order}
                    for client in order:
                        sent[client].append(attempt(client, "send", node.url, queues[client], count, warm))
                    for client in order:
                        received[client].append(attempt(client, "receive", node.url, queues[client], count, warm))
        except RuntimeError as exc:
            if start is broker_process or "callback child" in str(exc):
                raise
            print(f"(RabbitMQ not measured: {exc})", file=sys.stderr)
            continue
        rows += _rows(f"{name}: send confirmed", {client: _best(rates) for client, rates in sent.items()})
        rows += _rows(
            f"{name}: receive, credit {PREFETCH}", {client: _best(rates) for client, rates in received.items()}
        )
    return rows


def run(
    quick: bool = False,
    messages: int | None = None,
    warmup: int | None = None,
    repeat: int = 1,
    broker: bool = True,
    rabbitmq: bool = True,
) -> list[Row]:
    """Every row of this benchmark: the C ``direct`` rows, then the brokers' (with half the messages by default)."""
    return run_direct(quick, messages, warmup, repeat) + run_brokers(
        quick, messages and max(1, messages // 2), warmup, repeat, broker, rabbitmq
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small run (10,000 messages; 5,000 via brokers)")
    parser.add_argument("--messages", type=int, help="timed messages per run (default 100,000; 50,000 via brokers)")
    parser.add_argument("--warmup", type=int, help="messages before the clock starts (default 2,000; quick 500)")
    parser.add_argument("--repeat", type=int, default=1, help="runs per figure, the best one kept (default 1)")
    parser.add_argument("--no-broker", action="store_true", help="leave our embedded broker out")
    parser.add_argument("--no-rabbitmq", action="store_true", help="leave RabbitMQ out")
    parser.add_argument("--child", nargs=7, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        client, kind, url, address, count, warmup, settle = args.child
        rate = child(client, kind, url, address, int(count), int(warmup), settle)
        print(json.dumps({"rate": rate}))
        return
    rows = run(args.quick, args.messages, args.warmup, args.repeat, not args.no_broker, not args.no_rabbitmq)
    print_rows(
        "Callback API (amqp_async.proton) and awaitable API vs python-qpid-proton's Container (16-byte bodies)", rows
    )


if __name__ == "__main__":
    main()
