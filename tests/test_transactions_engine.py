"""Transactions (§4) in the Sans-IO engine: a coordinator link in both roles, declare/discharge bodies, the
declared outcome, and transactional-state on transfers (§4.4.1) and dispositions (§4.4.2), in memory.

Frames are checked as the peer decoded them (the server engine), and as bytes re-decoded by the generic codec.
"""

from __future__ import annotations

from typing import Any

import pytest

from amqp_async.codec import conditions, decode, encode
from amqp_async.codec.delivery_states import Accepted, Rejected
from amqp_async.codec.performatives import Disposition, Error, Transfer
from amqp_async.codec.transactions import (
    LOCAL_TRANSACTIONS,
    Coordinator,
    Declare,
    Declared,
    Discharge,
    TransactionalState,
    control_body,
    valid_txn_id,
)
from amqp_async.message import Message
from amqp_async.protocol import events as ev
from amqp_async.protocol.link import ReceiverLink, SenderLink
from amqp_async.protocol.transfer_frames import write_transfer_head

try:
    from test_engine_pair import begun, connected, last, link_setup, pump
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.test_engine_pair import begun, connected, last, link_setup, pump


def coordinator_pair(credit: int = 10) -> tuple[Any, Any, SenderLink, ReceiverLink]:
    c, s = connected(credit=credit)
    session, _ = begun(c, s)
    controller = session.attach_sender("txn-ctrl", target=Coordinator(capabilities=(LOCAL_TRANSACTIONS,)))
    pump(c, s)
    coordinator = last(s, ev.LinkAttached).link
    assert isinstance(coordinator, ReceiverLink)
    return c, s, controller, coordinator


def test_a_coordinator_link_attaches_in_both_roles() -> None:
    _, _, controller, coordinator = coordinator_pair()
    assert controller.coordinator and coordinator.coordinator
    assert coordinator.remote_target == Coordinator(capabilities=(LOCAL_TRANSACTIONS,))
    # the server's answer mirrored the coordinator target: the client sees it too
    assert isinstance(controller.remote_target, Coordinator)


def test_declare_and_declared_and_discharge_round_trip() -> None:
    c, s, controller, coordinator = coordinator_pair()
    declare = controller.send(Message(body=Declare()).encode())
    pump(c, s)
    incoming = s.received.pop()
    assert _body(incoming.payload) == Declare()
    coordinator.settle(incoming, Declared(txn_id=b"txn-1"))
    pump(c, s)
    assert declare.remote_settled and declare.remote_state == Declared(txn_id=b"txn-1")
    discharge = controller.send(Message(body=Discharge(txn_id=b"txn-1", fail=True)).encode())
    pump(c, s)
    assert _body(s.received.pop().payload) == Discharge(txn_id=b"txn-1", fail=True)
    assert not discharge.remote_settled


def _body(payload: bytes) -> Any:
    """The declare or discharge a coordinator reads in a message's amqp-value body (§4.5.2, §4.5.3)."""
    message = Message()
    message.decode(payload)
    return control_body(message.body)


def test_a_transactional_transfer_carries_its_state_and_the_receiver_sees_it() -> None:
    c, s, sender, receiver = link_setup()
    state = TransactionalState(txn_id=b"\x00\x01")
    delivery = sender.send(b"\x00\x53\x77\xa1\x02hi", state=state)
    pump(c, s)
    (received,) = s.received
    assert received.remote_state == state and received.payload == b"\x00\x53\x77\xa1\x02hi"
    transfers = [p for p in c.performatives(Transfer)]
    assert transfers[-1].state == state and transfers[-1].settled is False
    # the receiver answers within the transaction (§4.4.1): a transactional-state with the provisional outcome
    receiver.settle(received, TransactionalState(txn_id=b"\x00\x01", outcome=Accepted()))
    pump(c, s)
    assert delivery.remote_settled
    assert delivery.remote_state == TransactionalState(txn_id=b"\x00\x01", outcome=Accepted())
    (disposition,) = s.performatives(Disposition)
    assert disposition.state.outcome == Accepted()


def test_a_transactional_state_on_a_multi_frame_transfer_is_on_each_frame() -> None:
    c, s, sender, _ = link_setup(client={"max_frame_size": 512}, server={"max_frame_size": 512})
    state = TransactionalState(txn_id=b"t" * 32)
    payload = b"\x00\x53\x75\xb0\x00\x00\x03\xe8" + b"x" * 1000
    sender.send(payload, state=state, tag=b"g" * 32)
    pump(c, s)
    (received,) = s.received
    assert received.payload == payload and received.remote_state == state
    frames = [f for f in c.frames(512) if isinstance(f.performative, Transfer)]
    assert len(frames) >= 3 and all(f.performative.state == state for f in frames)


def test_a_transactional_disposition_of_a_received_message() -> None:
    c, s = connected(credit=0)
    session, _ = begun(c, s)
    receiver = c.receiver(session, "r", "queue", credit=5)
    pump(c, s)
    server_sender = last(s, ev.LinkAttached).link
    sent = server_sender.send(b"\x00\x53\x77\x40")
    pump(c, s)
    (incoming,) = c.received
    state = TransactionalState(txn_id=b"abc", outcome=Accepted())
    receiver.settle(incoming, state)
    pump(c, s)
    assert sent.remote_state == state and sent.remote_settled
    (update,) = [e for e in s.events_of(ev.DeliveriesUpdated)]
    assert update.state == state


def test_the_transfer_template_with_a_state_decodes_generically() -> None:
    state = encode(TransactionalState(txn_id=b"x" * 32))
    for tag, aborted in ((b"1", False), (b"t" * 32, True), (b"z" * 200, False)):
        out = bytearray()
        write_transfer_head(out, 3, b"\x52\x07", 300, tag, 0, False, True, aborted, 0, state)
        assert int.from_bytes(out[:4], "big") == len(out)
        transfer = decode(bytes(out[8:]))
        assert isinstance(transfer, Transfer)
        assert (transfer.handle, transfer.delivery_id, transfer.delivery_tag) == (7, 300, tag)
        assert transfer.more and transfer.aborted is aborted
        assert transfer.state == TransactionalState(txn_id=b"x" * 32)


def test_transaction_conditions_and_txn_id_rule() -> None:
    assert conditions.TRANSACTION_UNKNOWN_ID == "amqp:transaction:unknown-id"
    assert conditions.TRANSACTION_ROLLBACK == "amqp:transaction:rollback"
    assert conditions.TRANSACTION_TIMEOUT == "amqp:transaction:timeout"
    assert valid_txn_id(b"x" * 32) and not valid_txn_id(b"x" * 33) and not valid_txn_id("text")
    rejected = Rejected(error=Error(condition=conditions.TRANSACTION_UNKNOWN_ID, description="no such txn"))
    assert decode(encode(rejected)) == rejected


@pytest.mark.parametrize("declared", [Declared(txn_id=b"1"), Accepted()])
def test_declared_is_a_terminal_outcome_in_receiver_settle_mode_second(declared: Any) -> None:
    c, s = connected(credit=10)
    session, _ = begun(c, s)
    controller = session.attach_sender("txn-ctrl", target=Coordinator(), rcv_settle_mode=1)
    pump(c, s)
    coordinator = last(s, ev.LinkAttached).link
    delivery = controller.send(Message(body=Declare()).encode())
    pump(c, s)
    coordinator.settle(s.received.pop(), declared, settled=False)
    pump(c, s)
    # §2.6.12: the sender settles once the receiver has an outcome
    assert delivery.settled and delivery.remote_state == declared


def test_transfers_held_back_by_the_window_are_listed_with_their_state() -> None:
    """Transfers held back by the peer's window are listed (``backlogged_deliveries``): the client waits for them
    before discharging; once the window opens they go, with their transactional state."""
    c, s, sender, _ = link_setup(credit=10, server={"incoming_window": 1})
    state = TransactionalState(txn_id=b"t1")
    session = sender.session
    first = sender.send(b"\x00\x53\x77\x40", state=state)
    second = sender.send(b"\x00\x53\x77\x40", state=state)
    assert [d.state for d in session.backlogged_deliveries] == [state]
    assert session.backlogged_deliveries == [second] and first not in session.backlogged_deliveries
    pump(c, s)
    assert not session.backlogged_deliveries
    assert [d.remote_state for d in s.received] == [state, state]
