"""The broker's transaction coordinator (spec §4): local transactions, several at once on each connection.

A client declares a transaction on a link whose target is a coordinator (§4.5.1) and gets its id back in a
``declared`` outcome (§4.5.5). Work done under the transaction waits here until the discharge (§4.5.3):

- a transactional transfer (§4.4.1) is held, not routed: its message becomes visible on its node at commit, and is
  dropped at rollback;
- a transactional outcome of a message the broker delivered (§4.4.2) holds the message (already off its queue):
  at commit the outcome takes effect (accepted: the message is gone), at rollback it goes back to the head of its
  queue as a failed delivery attempt (its header's delivery-count goes up, §3.2.1).

Transactions belong to the connection that declared them (any session, any coordinator link of it); when the
connection ends, those still open are rolled back. With a timeout, a transaction open longer than that is rolled
back when it is next used or discharged, and reported with ``amqp:transaction:timeout``.

Open transactions are bounded: a connection holds at most ``max_open`` of them (:data:`DEFAULT_MAX_TRANSACTIONS`),
and each counts in the broker's memory limit as a node does (:data:`~._flow.NODE_SIZE`) until its discharge. A
declare beyond either is refused with ``amqp:resource-limit-exceeded`` (:class:`TransactionRefused`): before, a
peer that declared without ever discharging grew the broker by some 415 bytes a transaction (tracemalloc), without
end and past ``max_memory`` (200,000 declares took it from 30 to 124 MiB of RSS under a 64 MiB limit).
"""

from __future__ import annotations

import itertools
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..codec import conditions
from ..codec.delivery_states import Accepted
from ..codec.performatives import Error
from ..codec.transactions import TransactionalState
from ..types import symbol
from ._flow import no_room_within_memory

if TYPE_CHECKING:
    from ._flow import Flow
    from ._nodes import Consumer, Entry, Queue

__all__ = ["DEFAULT_MAX_TRANSACTIONS", "Coordinator", "Transaction", "TransactionRefused"]

_txn_numbers = itertools.count(1)
#: How many expired transaction ids a connection remembers (to answer them with the timeout, not unknown-id).
_EXPIRED_KEPT = 1024
#: The most transactions one connection may hold open at once by default (``Broker(max_transactions=...)``,
#: ``--max-transactions``). A client has one or a few open (one per session at most, as a rule); a thousand leaves
#: room for any real use, and bounds what a connection that declares and never discharges can hold.
DEFAULT_MAX_TRANSACTIONS = 1000

#: What the broker does with an outcome of a delivered message: ``settle(queue, consumer, entry, outcome)``.
Settle = Callable[["Queue", "Consumer | None", "Entry", Any], None]


def _error(condition: str, description: str) -> Error:
    return Error(condition=symbol(condition), description=description)


class TransactionRefused(Exception):
    """A declare the coordinator refuses (the limit of open transactions, or the memory limit, is reached): §4.3,
    the declare is rejected with :attr:`error`, which names the limit."""

    def __init__(self, error: Error) -> None:
        super().__init__(error.description)
        self.error = error


class Transaction:
    """One open transaction: the messages it will publish and the deliveries whose outcome it holds.

    Attributes:
        txn_id: its id (§4.5.4: binary, at most 32 octets).
        published: (address, topic, entry) to route at commit, in the order they were sent (``topic``: the
            address names a topic, as the sender's target capability said).
        acquired: (queue, consumer, entry, outcome) to settle at commit, or to return at rollback.
    """

    def __init__(self, txn_id: bytes, started: float = 0.0, flow: Flow | None = None) -> None:
        self.txn_id = txn_id
        self.started = started
        self.flow = flow
        #: the outcome of a transfer within it, accepted provisionally (§4.4.1): one object for all its sends.
        self.accepted = TransactionalState(txn_id=txn_id, outcome=Accepted())
        self.published: list[tuple[str, bool, Entry]] = []
        self.acquired: list[tuple[Queue, Consumer | None, Entry, Any]] = []

    def publish(self, address: str, entry: Entry, *, topic: bool = False) -> None:
        """Hold a message sent under the transaction until the commit. It counts against the broker's memory
        limit while it waits (a transaction is no way round the limit): the commit hands it to its queue, which
        counts it from then on; a rollback drops it."""
        self.published.append((address, topic, entry))
        if self.flow is not None:
            self.flow.hold(entry.size)

    def release_published(self) -> None:
        """The messages sent under the transaction are no longer held by it (routed, or dropped)."""
        flow = self.flow
        if flow is not None:
            for _, _, entry in self.published:
                flow.drop(entry.size)
        self.published.clear()

    def acquire(self, queue: Queue, consumer: Consumer | None, entry: Entry, outcome: Any) -> None:
        """Hold a delivered message with its transactional outcome until the discharge."""
        self.acquired.append((queue, consumer, entry, outcome))


class Coordinator:
    """The transactions of one connection.

    Args:
        route: puts an entry on the node at an address; returns the error that refuses it (or None).
        has_room: whether the node at an address takes ``count`` more messages.
        settle: applies an outcome to a delivered message (as a non-transactional outcome would).
        timeout: roll back transactions open longer than this many seconds (None: never).
        clock: the clock the timeout is measured with.
        flow: the broker's accounting of the memory held, which the messages sent under a transaction count in
            until its discharge, and each open transaction as a node (None: not counted).
        max_open: the most transactions open at once (None: no limit); a declare beyond it is refused.
    """

    def __init__(
        self,
        route: Callable[[str, Entry, bool], Error | None],
        has_room: Callable[[str, int, bool], bool],
        settle: Settle,
        *,
        timeout: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        flow: Flow | None = None,
        max_open: int | None = DEFAULT_MAX_TRANSACTIONS,
    ) -> None:
        self._flow = flow
        self._max_open = max_open
        self._route = route
        self._has_room = has_room
        self._settle = settle
        self._timeout = timeout
        self._clock = clock
        self.transactions: dict[bytes, Transaction] = {}
        self._expired: OrderedDict[bytes, None] = OrderedDict()

    def declare(self) -> Transaction:
        """Start a transaction (§4.3) with a new id.

        Raises:
            TransactionRefused: the connection holds ``max_open`` transactions already, or the memory limit has no
                room for one more (those past the timeout, if any, are rolled back first: they hold no place).
        """
        flow = self._flow
        max_open = self._max_open
        full = max_open is not None and len(self.transactions) >= max_open
        if full or (flow is not None and not flow.room_for_node()):
            self._expire_overdue()
            if max_open is not None and len(self.transactions) >= max_open:
                raise TransactionRefused(
                    _error(
                        conditions.RESOURCE_LIMIT_EXCEEDED,
                        f"this connection has {len(self.transactions)} transactions open, the most the broker "
                        f"takes (max-transactions {max_open}): discharge one first",
                    )
                )
            if flow is not None and not flow.room_for_node():
                raise TransactionRefused(
                    _error(
                        conditions.RESOURCE_LIMIT_EXCEEDED,
                        no_room_within_memory("a new transaction", flow.max_memory),
                    )
                )
        if flow is not None:
            # An open transaction holds memory of its own, whatever work it holds (its entry here, its id, lists and
            # outcome: 415 bytes with tracemalloc): counted as a node is, so that declares alone cannot pass the limit.
            flow.hold_node()
        txn_id = b"txn-%d" % next(_txn_numbers)
        transaction = self.transactions[txn_id] = Transaction(txn_id, self._clock(), self._flow)
        return transaction

    def _end(self, transaction: Transaction, commit: bool = False) -> Error | None:
        """Take ``transaction`` out of the open ones, commit it (``commit``) or roll it back, then give back the
        memory it was counted at: after its work is done, so that a commit does not find room for its nodes in the
        transaction's own (a node it needs and the limit has no room for rolls it back, as it did before)."""
        del self.transactions[transaction.txn_id]
        try:
            if commit:
                return self._commit(transaction)
            self._rollback(transaction)
            return None
        finally:
            if self._flow is not None:
                self._flow.drop_node()

    def _expire(self, transaction: Transaction) -> None:
        """Roll back a transaction open past the timeout, and remember its id (to answer it with the timeout)."""
        self._end(transaction)
        self._expired[transaction.txn_id] = None
        if len(self._expired) > _EXPIRED_KEPT:
            self._expired.popitem(last=False)

    def _expire_overdue(self) -> None:
        """Roll back the transactions open past the timeout (they are rolled back when next used anyway; one never
        used again would otherwise keep its place against the limits until the connection ends). They are kept in
        the order they were declared, which is the order they expire in: the oldest are looked at alone."""
        timeout = self._timeout
        if timeout is None:
            return
        now = self._clock()
        for transaction in list(self.transactions.values()):
            if now - transaction.started <= timeout:
                break
            self._expire(transaction)

    def get(self, txn_id: Any) -> Transaction | None:
        """The open transaction with this id, or None (unknown, discharged, or just rolled back for its
        timeout: :meth:`refusal` says which)."""
        if not isinstance(txn_id, (bytes, bytearray)):
            return None
        transaction = self.transactions.get(bytes(txn_id))
        timeout = self._timeout
        if transaction is not None and timeout is not None and self._clock() - transaction.started > timeout:
            self._expire(transaction)
            return None
        return transaction

    def refusal(self, txn_id: Any) -> Error:
        """The error for work or a discharge naming a transaction that :meth:`get` did not find."""
        if isinstance(txn_id, (bytes, bytearray)) and bytes(txn_id) in self._expired:
            # §4.5.8: "amqp:transaction:timeout: The work represented by this transaction took too long."
            return _error(conditions.TRANSACTION_TIMEOUT, f"transaction {txn_id!r} took too long: rolled back")
        # §4.5.8: "amqp:transaction:unknown-id: The specified txn-id does not exist."
        return _error(conditions.TRANSACTION_UNKNOWN_ID, f"no open transaction {txn_id!r} on this connection")

    def discharge(self, txn_id: Any, fail: bool) -> Error | None:
        """End a transaction (§4.4): commit it, or roll it back when ``fail``; return the error that says why it
        could not be done (the transaction is then rolled back, or was never known)."""
        transaction = self.get(txn_id)
        if transaction is None:
            error = self.refusal(txn_id)
            if fail and error.condition == conditions.TRANSACTION_TIMEOUT:
                self._expired.pop(bytes(txn_id), None)
                return None  # rolled back, as asked
            return error
        return self._end(transaction, commit=not fail)

    def rollback_all(self) -> None:
        """Roll back every open transaction (the connection ended)."""
        for transaction in list(self.transactions.values()):
            self._end(transaction)

    def _commit(self, transaction: Transaction) -> Error | None:
        wanted: dict[tuple[str, bool], int] = {}
        for address, topic, _ in transaction.published:
            wanted[address, topic] = wanted.get((address, topic), 0) + 1
        for (address, topic), count in wanted.items():
            if not self._has_room(address, count, topic):
                self._rollback(transaction)
                # §4.5.8: "amqp:transaction:rollback: The transaction was rolled back for an unspecified reason."
                return _error(conditions.TRANSACTION_ROLLBACK, f"node {address!r} has no room for {count} messages")
        for address, topic, entry in transaction.published:
            self._route(address, entry, topic)  # its queue counts it now: the transaction's count goes after
        transaction.release_published()
        for queue, consumer, entry, outcome in transaction.acquired:
            self._settle(queue, consumer, entry, outcome)
        return None

    def _rollback(self, transaction: Transaction) -> None:
        transaction.release_published()
        by_queue: dict[int, tuple[Queue, list[Entry]]] = {}
        for queue, _, entry, _ in transaction.acquired:
            by_queue.setdefault(id(queue), (queue, []))[1].append(entry)
        transaction.acquired.clear()
        for queue, entries in by_queue.values():
            entries.sort(key=lambda entry: entry.sequence)
            # they were delivered, and the attempt came to nothing (§3.2.1 delivery-count; the delivery limit)
            queue.failed(entries)
