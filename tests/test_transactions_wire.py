"""Wire check of transactions: one proton program (declare, two transactional sends, two transactional accepts,
commit), run once on the real python-qpid-proton and once on ``amqp_async.proton``, against our broker through a
recording proxy. The frames each client wrote are decoded on the peer side of the proxy and compared: the
coordinator attach, the declare and discharge transfers (their decoded bodies), the transactional transfers and
the transactional dispositions must be the same.
"""

from __future__ import annotations

import importlib
from typing import Any

import anyio
import anyio.abc
import anyio.to_thread
import pytest

from amqp_async import Message
from amqp_async.broker import Broker
from amqp_async.broker._nodes import Entry
from amqp_async.codec.delivery_states import Accepted
from amqp_async.codec.performatives import Attach, Disposition, Transfer
from amqp_async.codec.transactions import Coordinator, Declare, Discharge, TransactionalState, control_body

try:
    from test_engine_pair import decode_frames
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.test_engine_pair import decode_frames

pytest.importorskip("proton", reason="python-qpid-proton is the reference client; CI installs it")

pytestmark = pytest.mark.anyio

TIMEOUT = 20.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def make_program(flavour: str, url: str) -> Any:
    """The same transactional program on ``proton`` or ``amqp_async.proton``; returns its Container."""
    package = "proton" if flavour == "proton" else "amqp_async.proton"
    core = importlib.import_module(package)
    reactor = importlib.import_module(f"{package}.reactor")
    handlers = importlib.import_module(f"{package}.handlers")

    class Program(handlers.MessagingHandler, handlers.TransactionHandler):  # type: ignore[name-defined,misc]
        def __init__(self) -> None:
            super().__init__(prefetch=0, auto_accept=False)
            self.accepted = 0
            self.transaction: Any = None
            self.done: list[str] = []

        def on_start(self, event: Any) -> None:
            self.conn = event.container.connect(url)
            self.sender = event.container.create_sender(self.conn, "tx-out")
            self.receiver = event.container.create_receiver(self.conn, "tx-in")
            event.container.declare_transaction(self.conn, handler=self)

        def on_transaction_declared(self, event: Any) -> None:
            self.transaction = event.transaction
            for n in range(2):
                self.transaction.send(self.sender, core.Message(id=n, body=f"out-{n}"))
            self.receiver.flow(2)

        def on_message(self, event: Any) -> None:
            self.transaction.accept(event.delivery)
            self.accepted += 1
            if self.accepted == 2:
                self.transaction.commit()

        def on_transaction_committed(self, event: Any) -> None:
            self.done.append("committed")
            event.connection.close()

    program = Program()
    return reactor.Container(program), program


async def run_through_proxy(broker: Broker, flavour: str) -> tuple[bytes, list[str]]:
    """Run the program on ``flavour`` through a proxy to ``broker``; return the bytes the client wrote."""
    written = bytearray()
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)

    async def pipe(source: anyio.abc.ByteStream, sink: anyio.abc.ByteStream, record: bool) -> None:
        try:
            async for chunk in source:
                if record:
                    written.extend(chunk)
                await sink.send(chunk)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass
        finally:
            await sink.aclose()

    async def serve(client: anyio.abc.SocketStream) -> None:
        server = await anyio.connect_tcp("127.0.0.1", broker.port)
        async with anyio.create_task_group() as group:
            group.start_soon(pipe, client, server, True)
            group.start_soon(pipe, server, client, False)

    container, program = make_program(flavour, f"amqp://127.0.0.1:{port}")
    async with anyio.create_task_group() as group:
        group.start_soon(listener.serve, serve)
        with anyio.fail_after(TIMEOUT):
            await anyio.to_thread.run_sync(container.run)
        group.cancel_scope.cancel()
    return bytes(written), program.done


def transactional_frames(data: bytes) -> dict[str, list[Any]]:
    """The frames of the transaction's work, as the peer decodes them, without what legitimately differs between
    two clients (container ids, link names chosen at random, window and credit figures). A disposition for a
    range of deliveries counts as one for each."""
    frames = [f for f in decode_frames(data, 1 << 20) if f.performative is not None]
    attaches = [f.performative for f in frames if isinstance(f.performative, Attach)]
    controller = next(a for a in attaches if isinstance(a.target, Coordinator))
    found: dict[str, list[Any]] = {"attach": [], "control": [], "transfer": [], "disposition": []}
    found["attach"].append(
        {
            "name": controller.name,
            "role": controller.role,
            "snd_settle_mode": controller.snd_settle_mode,
            "rcv_settle_mode": controller.rcv_settle_mode,
            "target": controller.target,
        }
    )
    for frame in frames:
        performative = frame.performative
        if isinstance(performative, Transfer):
            message = Message()
            message.decode(bytes(frame.payload))
            fields = {
                "tag": performative.delivery_tag,
                "settled": bool(performative.settled),
                "more": performative.more,
                "state": performative.state,
                "format": performative.message_format,
                "id": message.id,
                "body": control_body(message.body),  # the declare or discharge the coordinator reads
            }
            found["control" if performative.handle == controller.handle else "transfer"].append(fields)
        elif isinstance(performative, Disposition) and isinstance(performative.state, TransactionalState):
            last = performative.first if performative.last is None else performative.last
            for delivery_id in range(performative.first, last + 1):
                found["disposition"].append(
                    {
                        "role": performative.role,
                        "delivery_id": delivery_id,
                        "settled": performative.settled,
                        "state": performative.state,
                    }
                )
    return found


def renamed(items: list[dict[str, Any]], old: bytes, new: bytes) -> list[dict[str, Any]]:
    """``items`` with the transaction id ``old`` (in states and discharge bodies) replaced by ``new``."""
    result = []
    for item in items:
        item = dict(item)
        state = item.get("state")
        if isinstance(state, TransactionalState) and state.txn_id == old:
            item["state"] = TransactionalState(txn_id=new, outcome=state.outcome)
        body = item.get("body")
        if isinstance(body, Discharge) and body.txn_id == old:
            item["body"] = Discharge(txn_id=new, fail=body.fail)
        result.append(item)
    return result


async def test_our_transaction_frames_match_real_protons() -> None:
    async with Broker(port=0) as broker:
        seen: dict[str, dict[str, list[Any]]] = {}
        for flavour in ("proton", "ours"):
            for n in range(2):
                broker.queue("tx-in").put(Entry(Message(body=f"in-{n}").encode()))
            data, done = await run_through_proxy(broker, flavour)
            assert done == ["committed"], flavour
            seen[flavour] = transactional_frames(data)
        assert [entry.message.body for entry in broker.queue("tx-out").entries] == ["out-0", "out-1"] * 2
        assert len(broker.queue("tx-in")) == 0

    proton, ours = seen["proton"], seen["ours"]
    # the ids the broker gave each run (the discharge names it)
    proton_id, our_id = proton["control"][-1]["body"].txn_id, ours["control"][-1]["body"].txn_id
    assert proton_id != our_id
    # what real proton wrote, as the spec has it (§4): the coordinator target, declare, transactional transfers
    # and accepts, discharge
    assert proton["attach"][0]["target"] == Coordinator(capabilities=("amqp:local-transactions",))
    assert [c["body"] for c in proton["control"]] == [Declare(), Discharge(txn_id=proton_id, fail=False)]
    assert [t["state"] for t in proton["transfer"]] == [TransactionalState(txn_id=proton_id)] * 2
    assert [d["state"].outcome for d in proton["disposition"]] == [Accepted(), Accepted()]
    # and ours the same, frame for frame (with the id our run was given)
    for kind in ("attach", "control", "transfer", "disposition"):
        assert ours[kind] == renamed(proton[kind], proton_id, our_id), kind
