"""A declare or a discharge the coordinator does not answer is bounded by the connection's ``open_timeout``.

Before, ``conn.transaction()``, ``commit()`` and ``rollback()`` waited for ever with the default settings on a
coordinator that attached and then gave no credit, or did not settle the declare (or the discharge). Now each
raises :class:`TransactionError` with ``amqp:resource-limit-exceeded`` after ``open_timeout`` (ProtonJ2 bounds
its transaction requests likewise, by its request timeout), naming the coordinator, the step and the limit. A
declare that timed out after it was sent is rolled back in the background if its answer comes later (the same
path as a cancelled declare: tests/test_transactions_cancelled_declare.py).

The peer is python-qpid-proton (a Container) scripted to attach the coordinator link and then stall.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

import amqp_async
from amqp_async import TransactionError, TransactionInDoubt

pytest.importorskip("proton", reason="python-qpid-proton is a test dependency (the independent peer)")
from proton import Message as ProtonMessage
from proton_peer import proton_server

pytestmark = pytest.mark.anyio

OPEN_TIMEOUT = 1.0
DECLARED = 0x33  # the declared outcome's descriptor (§4.5.5)


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


class _Coordinator:
    """A proton handler that attaches the coordinator link (its target copied: a coordinator) and then stalls:
    ``credit`` is what it gives the controller (0: none), and it declares the first ``declare`` transactions
    (``declared`` with a txn-id) and settles nothing else."""

    def __init__(self, *, credit: int, declare: int = 0, late: float = 0.0) -> None:
        self.credit = credit
        self.declare = declare
        self.late = late  # declare that many seconds late
        self.received = 0
        self.bodies: list[tuple[Any, list[Any]]] = []  # the declares and discharges: (descriptor, fields)

    def on_connection_remote_open(self, event: Any) -> None:
        event.connection.open()

    def on_connection_remote_close(self, event: Any) -> None:
        event.connection.close()

    def on_session_remote_open(self, event: Any) -> None:
        event.session.open()

    def on_link_remote_open(self, event: Any) -> None:
        link = event.link
        link.source.copy(link.remote_source)
        link.target.copy(link.remote_target)
        link.open()
        if self.credit:
            link.flow(self.credit)

    def on_delivery(self, event: Any) -> None:
        delivery = event.delivery
        if delivery.partial:
            return
        message = ProtonMessage()
        message.decode(event.link.recv(delivery.pending))
        event.link.advance()
        self.received += 1
        body = message.body  # a described list; its binary fields are views into proton's buffer: copied now
        self.bodies.append((body.descriptor, [bytes(v) if isinstance(v, memoryview) else v for v in body.value]))
        if self.received <= self.declare:
            txn_id = b"txn-%d" % self.received
            if self.late:
                event.container.schedule(self.late, _Declare(delivery, txn_id))
            else:
                _Declare(delivery, txn_id).on_timer_task(None)


class _Declare:
    """Settles a declare with ``declared`` (on the peer's thread, maybe as a timer task)."""

    def __init__(self, delivery: Any, txn_id: bytes) -> None:
        self.delivery = delivery
        self.txn_id = txn_id

    def on_timer_task(self, event: Any) -> None:
        self.delivery.local.data = [self.txn_id]
        self.delivery.update(DECLARED)
        self.delivery.settle()


def _assert_timed_out(error: TransactionError, step: str) -> None:
    assert error.condition == "amqp:resource-limit-exceeded"
    words = str(error)
    assert "coordinator" in words and step in words and f"open_timeout ({OPEN_TIMEOUT} s)" in words


@pytest.mark.parametrize("credit", [0, 10], ids=["no-credit", "never-settled"])
async def test_a_declare_the_coordinator_does_not_answer_times_out(credit: int) -> None:
    with proton_server(_Coordinator(credit=credit)) as url, anyio.fail_after(30):
        async with amqp_async.connect(url, reconnect=False, open_timeout=OPEN_TIMEOUT) as conn:
            started = anyio.current_time()
            with pytest.raises(TransactionError) as caught:
                await conn.transaction()  # before: waited for ever (the fail_after's TimeoutError)
            assert anyio.current_time() - started < OPEN_TIMEOUT + 10
            _assert_timed_out(caught.value, "declare")


@pytest.mark.parametrize("commit", [True, False], ids=["commit", "rollback"])
async def test_a_discharge_the_coordinator_does_not_settle_times_out(commit: bool) -> None:
    with proton_server(_Coordinator(credit=10, declare=1)) as url, anyio.fail_after(30):
        async with amqp_async.connect(url, reconnect=False, open_timeout=OPEN_TIMEOUT) as conn:
            txn = await conn.transaction()
            assert txn.state == "active" and txn.txn_id == b"txn-1"
            with pytest.raises(TransactionInDoubt) as caught:  # a TransactionError
                await (txn.commit() if commit else txn.rollback())
            _assert_timed_out(caught.value, "discharge")
            assert txn.state == "in doubt"  # sent: its answer may still come


async def test_a_discharge_the_coordinator_gives_no_credit_for_times_out() -> None:
    # credit for the declare only: the commit is never sent, and the transaction stays active
    with proton_server(_Coordinator(credit=1, declare=1)) as url, anyio.fail_after(30):
        async with amqp_async.connect(url, reconnect=False, open_timeout=OPEN_TIMEOUT) as conn:
            txn = await conn.transaction()
            with pytest.raises(TransactionError) as caught:
                await txn.commit()
            assert not isinstance(caught.value, TransactionInDoubt)
            _assert_timed_out(caught.value, "discharge")
            assert "credit" in str(caught.value)
            assert txn.state == "active"


async def test_a_declare_answered_after_its_timeout_is_rolled_back() -> None:
    peer = _Coordinator(credit=10, declare=1, late=3 * OPEN_TIMEOUT)
    with proton_server(peer) as url, anyio.fail_after(30):
        async with amqp_async.connect(url, reconnect=False, open_timeout=OPEN_TIMEOUT) as conn:
            with pytest.raises(TransactionError) as caught:
                await conn.transaction()
            _assert_timed_out(caught.value, "declare")
            while len(peer.bodies) < 2:  # the late declared comes, and its transaction is discharged
                await anyio.sleep(0.05)
            assert peer.bodies[1] == (0x32, [b"txn-1", True])  # a discharge (§4.5.3) with fail=True: rolled back
