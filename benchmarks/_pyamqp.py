"""Azure's pure-Python AMQP stack (``azure.servicebus._pyamqp``) as a third client in the send benchmarks.

Not a benchmark itself (the leading underscore keeps ``nox -s bench`` from running it). ``_pyamqp`` is made for
Service Bus and Event Hubs; reaching a plain peer takes what the Service Bus emulator path does: ``use_tls=False``
(without it the port in the host is dropped for 5671 and TLS is used) and a host of ``HOST:PORT`` with no scheme.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any
from urllib.parse import urlsplit

__all__ = ["pyamqp_available", "pyamqp_send"]


def pyamqp_available() -> bool:
    """Whether azure-servicebus (and so ``_pyamqp``) is installed."""
    try:
        import azure.servicebus._pyamqp  # noqa: F401
    except ImportError:
        return False
    return True


class _Anonymous:
    """SASL ANONYMOUS for ``SendClientAsync(auth=...)``: the client reads ``auth.sasl`` and ``auth.auth_type``,
    and ``_pyamqp.authentication`` has no anonymous class (its docstrings promise a default, but ``auth=None``
    fails on ``None.sasl``). Any ``auth_type`` other than CBS skips the Service Bus token handshake."""

    auth_type = "AUTH_SASL_ANONYMOUS"

    def __init__(self) -> None:
        from azure.servicebus._pyamqp.sasl import SASLAnonymousCredential

        self.sasl = SASLAnonymousCredential()


async def _send(url: str, address: str, count: int, body: bytes, warmup: int) -> float:
    from azure.servicebus._pyamqp.aio import SendClientAsync
    from azure.servicebus._pyamqp.constants import ReceiverSettleMode, SenderSettleMode
    from azure.servicebus._pyamqp.message import Message

    parts = urlsplit(url)
    options: dict[str, Any] = {
        "auth": _Anonymous(),
        "use_tls": False,
        "send_settle_mode": SenderSettleMode.Unsettled,
        # Its default asks for rcv-settle-mode second, and it ignores unsettled dispositions: at-least-once is first.
        "receive_settle_mode": ReceiverSettleMode.First,
    }
    client = SendClientAsync(f"{parts.hostname}:{parts.port}", address, **options)
    await client.open_async()
    try:
        # The link attach, outside the timed region even with no warm-up (as the library's own send waits for it).
        while not await client.client_ready_async():
            await asyncio.sleep(0.01)
        for _ in range(warmup):
            await client.send_message_async(Message(data=[body]))
        start = time.perf_counter()
        for _ in range(count):
            # One at a time: each send drives the connection itself, so concurrent sends interleave their transfers
            # (the peer closes with "sequencing error, expected delivery-id N"). _pyamqp has no pipelined send.
            await client.send_message_async(Message(data=[body]))
        return count / (time.perf_counter() - start)
    finally:
        await client.close_async()


def pyamqp_send(url: str, address: str, count: int, body: bytes, warmup: int = 500) -> float | None:
    """Messages per second for Azure's pure-Python ``_pyamqp`` async sender (``SendClientAsync``): ``count``
    messages with ``body`` as one binary data section, at-least-once (unsettled, waiting for the peer's outcome),
    timed from the first timed send to the last outcome, after ``warmup`` untimed messages (the peer must expect
    ``warmup + count``). None when azure-servicebus is not installed.

    Sends as a user of that API does: ``await client.send_message_async(Message(data=[body]))`` in a loop, one
    message in flight at a time, each built inside the timed loop. ``url`` is ``amqp://HOST:PORT``: plain TCP and
    SASL ANONYMOUS. Runs its own event loop (``asyncio.run``), so call it from synchronous code.
    """
    if not pyamqp_available():
        return None
    return asyncio.run(_send(url, address, count, body, warmup))
