"""Transactional throughput through the embedded broker, beside python-qpid-proton running the same program.

    python benchmarks/transactions.py [--quick] [--batches N] [--batch-size N]

Two programs, each in batches of ``--batch-size`` (100) messages, one transaction per batch (AMQP §4):

- **send**: declare, send the batch within the transaction, commit; the next batch's transaction is declared once
  the commit is confirmed (proton's ``tx_send.py``);
- **accept**: declare, take the batch's messages and accept each within the transaction, commit (proton's
  ``tx_recv.py``, which grants the batch's credit at each declare; ours keeps a batch of credit granted).

The clock runs from the first declare to the last commit's confirmation; messages per second. The broker runs in a
process of its own; each client runs in a fresh process (``child_run``) so neither shares an interpreter with it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import anyio
from _common import Row, broker_process, child_run, print_rows, proton_available

import amqp_async

SECTION = "transactions"
BODY = b"0123456789abcdef"


async def _fill(url: str, address: str, count: int) -> None:
    async with amqp_async.connect(url, reconnect=False) as connection:
        sender = await connection.open_sender(address)
        trackers = [await sender.submit(amqp_async.Message(body=BODY)) for _ in range(count)]
        for tracker in trackers:
            await tracker


async def ours_send(url: str, address: str, batches: int, size: int) -> float:
    async with amqp_async.connect(url, reconnect=False) as connection:
        sender = await connection.open_sender(address)
        start = time.perf_counter()
        for _ in range(batches):
            async with connection.transaction() as transaction:
                for _ in range(size):
                    await sender.submit(amqp_async.Message(body=BODY), transaction=transaction)
        return batches * size / (time.perf_counter() - start)


async def ours_accept(url: str, address: str, batches: int, size: int) -> float:
    async with amqp_async.connect(url, reconnect=False) as connection:
        receiver = await connection.open_receiver(address, credit=size)
        start = time.perf_counter()
        for _ in range(batches):
            async with connection.transaction() as transaction:
                for _ in range(size):
                    delivery = await receiver.receive()
                    delivery.message  # noqa: B018 -- decoded, as proton's on_message hands a decoded message
                    await delivery.accept(transaction=transaction)
        return batches * size / (time.perf_counter() - start)


def proton_send(url: str, address: str, batches: int, size: int) -> float:
    from proton import Message
    from proton.handlers import MessagingHandler, TransactionHandler
    from proton.reactor import Container

    class TxSend(MessagingHandler, TransactionHandler):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.committed = self.current = 0
            self.transaction: Any = None
            self.start = self.elapsed = 0.0

        def on_start(self, event: Any) -> None:
            self.container = event.container
            self.connection = self.container.connect(url.removeprefix("amqp://"), reconnect=False)
            self.sender = self.container.create_sender(self.connection, address)
            self.start = time.perf_counter()
            self.container.declare_transaction(self.connection, handler=self)

        def on_transaction_declared(self, event: Any) -> None:
            self.transaction = event.transaction
            self._send()

        def on_sendable(self, event: Any) -> None:
            self._send()

        def _send(self) -> None:
            while self.transaction and self.sender.credit and self.current < size:
                message = Message(body=BODY)
                message.inferred = True
                self.transaction.send(self.sender, message)
                self.current += 1
                if self.current == size:
                    self.transaction.commit()
                    self.transaction = None

        def on_transaction_committed(self, event: Any) -> None:
            self.committed += 1
            self.current = 0
            if self.committed == batches:
                self.elapsed = time.perf_counter() - self.start
                event.connection.close()
            else:
                self.container.declare_transaction(self.connection, handler=self)

    handler = TxSend()
    Container(handler).run()
    return batches * size / handler.elapsed


def proton_accept(url: str, address: str, batches: int, size: int) -> float:
    from proton.handlers import MessagingHandler, TransactionHandler
    from proton.reactor import Container

    class TxRecv(MessagingHandler, TransactionHandler):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__(prefetch=0, auto_accept=False)
            self.committed = self.current = 0
            self.transaction: Any = None
            self.start = self.elapsed = 0.0

        def on_start(self, event: Any) -> None:
            self.container = event.container
            self.connection = self.container.connect(url.removeprefix("amqp://"), reconnect=False)
            self.receiver = self.container.create_receiver(self.connection, address)
            self.start = time.perf_counter()
            self.container.declare_transaction(self.connection, handler=self)

        def on_message(self, event: Any) -> None:
            self.transaction.accept(event.delivery)
            self.current += 1
            if self.current == size:
                self.transaction.commit()

        def on_transaction_declared(self, event: Any) -> None:
            self.transaction = event.transaction
            self.receiver.flow(size)

        def on_transaction_committed(self, event: Any) -> None:
            self.committed += 1
            self.current = 0
            if self.committed == batches:
                self.elapsed = time.perf_counter() - self.start
                event.connection.close()
            else:
                self.container.declare_transaction(self.connection, handler=self)

    handler = TxRecv()
    Container(handler).run()
    return batches * size / handler.elapsed


def _child(client: str, program: str, url: str, address: str, batches: int, size: int) -> float:
    if client == "ours":
        function = ours_send if program == "send" else ours_accept
        rate: float = anyio.run(function, url, address, batches, size)
        return rate
    return (proton_send if program == "send" else proton_accept)(url, address, batches, size)


def run(quick: bool = False, batches: int | None = None, size: int = 100) -> list[Row]:
    """The two programs, ours then proton's, through one broker; returns the report rows."""
    batches = batches or (20 if quick else 300)
    count = batches * size
    rows: list[Row] = []
    with broker_process() as broker:
        for program in ("send", "accept"):
            rates: dict[str, float | None] = {}
            for client in ("ours", "proton"):
                if client == "proton" and not proton_available():
                    rates[client] = None
                    continue
                address = f"tx-{program}-{client}"
                if program == "accept":
                    anyio.run(_fill, broker.url, address, count)
                arguments = [client, program, broker.url, address, str(batches), str(size)]
                rates[client] = child_run(__file__, arguments, f"{client} transactional {program}")
            what = "sends committed" if program == "send" else "accepts committed"
            rows.append(
                Row(
                    SECTION,
                    f"{what}, batches of {size}, our broker",
                    "msg/s",
                    rates["ours"],
                    rates["proton"],
                    target=3.0,
                    note=f"{batches} transactions each",
                )
            )
    return rows


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        client, program, url, address, batches, size = sys.argv[2:8]
        print(json.dumps(_child(client, program, url, address, int(batches), int(size))))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--batches", type=int)
    parser.add_argument("--batch-size", type=int, default=100)
    args = parser.parse_args()
    print_rows(
        "Transactions through our broker, beside python-qpid-proton",
        run(args.quick, args.batches, args.batch_size),
    )


if __name__ == "__main__":
    main()
