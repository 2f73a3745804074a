"""Local transactions (§4) in the awaitable API: :meth:`Connection.transaction` and :class:`Transaction`.

A connection keeps one controller link (a sender whose target is the peer's coordinator, §4.5.1), attached with the
first transaction. Declares and discharges are messages on it (§4.5.2, §4.5.3); their outcomes (``declared``,
``accepted``, ``rejected``) say how each went. Work is tied to a transaction by the transactional-state its
transfers (§4.4.1) and dispositions (§4.4.2) carry.
"""

from __future__ import annotations

import logging
import math
import uuid
from collections.abc import Generator
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, TypeVar

import anyio

from ..codec import conditions
from ..codec.terminus import Source
from ..codec.transactions import (
    LOCAL_TRANSACTIONS,
    Coordinator,
    Declare,
    Declared,
    Discharge,
    TransactionalState,
    valid_txn_id,
)
from ..errors import (
    AMQPError,
    DeliveryError,
    DeliveryInDoubt,
    TransactionError,
    TransactionInDoubt,
    TransactionRolledBack,
)
from ..message import Message
from ._link_options import sender_options
from ._links import Sendable, Sender

if TYPE_CHECKING:
    from ..protocol.link import Link as EngineLink
    from ._connection import Connection
    from ._delivery import Delivery
    from ._session import Session
    from ._stream_delivery import StreamDelivery
    from ._tracker import Tracker

__all__ = ["Transaction"]

_log = logging.getLogger(__name__)

TransactionState: TypeAlias = Literal[
    "new", "declaring", "active", "discharging", "committed", "rolled back", "failed", "in doubt"
]
"""The states of a :class:`Transaction` (its ``state`` attribute)."""

_R = TypeVar("_R")

# The conditions of a commit that did not happen and was rolled back (§4.5.8).
_ROLLED_BACK = (str(conditions.TRANSACTION_ROLLBACK), str(conditions.TRANSACTION_TIMEOUT))


class _Controller(Sender[Any]):
    """The connection's link to the peer's transaction coordinator."""

    _more_outcomes = (Declared,)  # a declare's outcome (§4.5.3)

    def _attach_arguments(self) -> dict[str, Any]:
        arguments = super()._attach_arguments()
        # §4.5.1: the controller's target is a coordinator; its capabilities are the txn-capabilities desired
        arguments["target"] = Coordinator(capabilities=(LOCAL_TRANSACTIONS,))
        arguments["source"] = Source(address=None)
        return arguments

    def _describe(self) -> str:
        return "transaction controller link (its target the peer's coordinator)"

    def _fail_unwritten(self, cause: AMQPError, what: str) -> None:
        """A declare or discharge never written stays in doubt: the transaction reads its outcome from that
        (``_discharged``: a commit in doubt, a rollback rolled back either way), not from a message's error."""

    def __repr__(self) -> str:
        return f"<amqp_async transaction controller {self.name!r}>"


def _discharged(tracker: Tracker[Any], *, fail: bool) -> TransactionState:
    """The state a discharge's outcome leaves the transaction in, as :meth:`Transaction._discharge` sets it."""
    error = tracker._error
    if error is None:
        return "rolled back" if fail else "committed"
    if isinstance(error, DeliveryInDoubt):
        return "rolled back" if fail else "in doubt"
    if error.condition in _ROLLED_BACK:
        return "rolled back"
    return "failed"


def _answer_limit(connection: Connection) -> float | None:
    """The seconds a declare or a discharge waits for the coordinator: the connection's ``open_timeout`` (the
    coordinator's answer, as a link's attach is the peer's; ProtonJ2 bounds them by its request timeout)."""
    return connection._options.open_timeout


def _coordinator_timeout(step: Literal["declare", "discharge"], limit: float | None, *, sent: bool) -> str:
    """The words of a declare or discharge the coordinator did not answer within ``open_timeout``."""
    waited = "settle the" if sent else "give credit for the"
    return f"the transaction coordinator did not {waited} {step} within open_timeout ({limit} s)"


def _discard_late_declare(connection: Connection, controller: _Controller, tracker: Tracker[Any]) -> None:
    """Roll back (discharge with fail=True, §4.4) the transaction of a declare whose caller was cancelled (or
    timed out), once the coordinator's ``declared`` comes: in the background, the caller not waiting for it."""
    from ._connection import _spawn_system_task

    link = controller._engine_link

    async def discard() -> None:
        try:
            try:
                outcome = await tracker
            except AMQPError:
                return  # refused, or the connection ended: no transaction was left open
            if not isinstance(outcome, Declared) or not valid_txn_id(outcome.txn_id):
                return
            if (
                connection._closing
                or connection.is_closed
                or connection._error is not None
                or connection._reconnecting
                or controller.is_closed
                or controller._engine_link is not link
            ):
                return  # the peer rolls it back with the connection (or link) that ended
            discharge = await controller.submit(Message(body=Discharge(txn_id=bytes(outcome.txn_id), fail=True)))
            await discharge
        except Exception as exc:  # never raised into unrelated code
            _log.debug("rolling back the transaction of a cancelled declare failed: %r", exc)

    try:
        _spawn_system_task(discard)
    except Exception as exc:
        _log.debug("could not roll back the transaction of a cancelled declare: %r", exc)


async def _controller(connection: Connection) -> _Controller:
    """The connection's controller, attached on first use.

    Raises:
        TransactionError: the peer refused the link (it has no coordinator), naming the condition it sent.
    """
    if connection._controller_lock is None:
        connection._controller_lock = anyio.Lock()
    async with connection._controller_lock:
        controller: _Controller | None = connection._controller
        if controller is not None and not controller.is_closed:
            return controller
        session: Session = await connection._session()
        name = f"{connection.container_id}-txn-ctrl-{uuid.uuid4()}"
        controller = _Controller(session, sender_options(None, name=name))
        session._links.append(controller)
        try:
            await controller._attach()
        except AMQPError as exc:
            session._links.remove(controller)
            raise TransactionError(
                f"the peer has no transaction coordinator (it refused the coordinator link): {exc}",
                condition=exc.condition,
                info=exc.info,
            ) from exc
        answered = controller._engine_link.remote_target
        if not isinstance(answered, Coordinator):
            # §4.5.1: the coordinator link's target is a coordinator. A peer that answers with another target
            # (python-qpid-proton's example broker: a plain Target) took it for a link to a queue: a declare would
            # be stored there as a message, and its outcome would be no transaction's.
            await controller.close()
            if controller in session._links:
                session._links.remove(controller)
            raise TransactionError(
                "the peer has no transaction coordinator: it answered the coordinator link with the target "
                f"{answered!r}, not a coordinator (§4.5.1)",
                condition=conditions.NOT_IMPLEMENTED,
            )
        connection._controller = controller
        return controller


class Transaction:
    """A local transaction (§4) on a connection: messages sent within it reach their nodes only when it commits,
    and messages settled within it are consumed only when it commits.

    Get one with :meth:`Connection.transaction`: ``async with conn.transaction() as txn:`` declares it, commits
    it when the block ends normally, and rolls it back when the block raises or is cancelled; or
    ``txn = await conn.transaction()`` declares it and leaves :meth:`commit` / :meth:`rollback` to the caller.

    Work within it: ``await sender.send(message, transaction=txn)`` (or :meth:`send`) on any sender of the
    connection, and ``await delivery.accept(transaction=txn)`` (``reject``, ``release``, ``modify`` likewise) on
    any delivery received on it.

    Attributes:
        txn_id: the id the coordinator gave it (None before it is declared).
        state: ``"new"``, ``"declaring"``, ``"active"``, ``"discharging"``, ``"committed"``, ``"rolled back"``,
            ``"failed"`` (the declare or a discharge was refused) or ``"in doubt"``.
    """

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self.txn_id: bytes | None = None
        self._state: TransactionState = "new"
        # A discharge whose commit() or rollback() was cancelled while under way: (its tracker, fail). Its outcome
        # still comes, and ``state`` says it once it has (it stayed "in doubt" for ever, the transaction committed).
        self._pending_discharge: tuple[Tracker[Any], bool] | None = None
        self._controller: _Controller | None = None
        self._link: EngineLink | None = None  # the controller's engine link it was declared on
        self._sending_state: TransactionalState | None = None
        self._lost_connection = False  # rolled back because its connection ended (not by a rollback() call)

    @property
    def state(self) -> TransactionState:
        """Where the transaction stands (see the class's attributes)."""
        pending = self._pending_discharge
        if pending is not None and pending[0].done:
            self._pending_discharge = None
            self._state = _discharged(pending[0], fail=pending[1])
        return self._state

    @state.setter
    def state(self, state: TransactionState) -> None:
        self._state = state
        self._pending_discharge = None

    # --- declare -----------------------------------------------------------------------------------------

    async def declare(self) -> Transaction:
        """Declare the transaction (§4.3) and return it; ``await conn.transaction()`` does this.

        The coordinator's credit and its answer are awaited within the connection's ``open_timeout``: a declared
        outcome that comes later is rolled back in the background (nothing is left open at the coordinator).

        Raises:
            TransactionError: the peer has no coordinator, or refused the declare (the condition says why), or did
                not answer it within ``open_timeout`` (``amqp:resource-limit-exceeded``).
        """
        if self.state != "new":
            raise TransactionError(f"the transaction is already declared ({self.state})")
        self.state = "declaring"
        try:
            self.connection._check()
            controller = await _controller(self.connection)
        except BaseException:
            self.state = "failed"
            raise  # TransactionError from _controller; the connection's own error if it had ended
        limit = _answer_limit(self.connection)
        sent = False
        with anyio.move_on_after(math.inf if limit is None else limit) as bound:
            try:
                tracker = await controller.submit(Message(body=Declare()))
            except BaseException:
                self.state = "failed"  # nothing was sent (cancelled while it waited for credit)
                raise
            sent = True
            outcome = await self._declare_outcome(controller, tracker)
        if bound.cancelled_caught:  # the state is "failed"; a late declared outcome is rolled back
            raise TransactionError(
                _coordinator_timeout("declare", limit, sent=sent), condition=str(conditions.RESOURCE_LIMIT_EXCEEDED)
            )
        if not isinstance(outcome, Declared) or not valid_txn_id(outcome.txn_id):
            self.state = "failed"
            raise TransactionError(
                f"the coordinator answered the declare with {outcome!r}, not a declared outcome (§4.5.5)",
                condition=conditions.INVALID_FIELD,
            )
        self.txn_id = bytes(outcome.txn_id)
        self._controller = controller
        self._link = controller._engine_link
        self.state = "active"
        return self

    async def _declare_outcome(self, controller: _Controller, tracker: Tracker[Any]) -> Any:
        """The outcome of a declare that was sent: what the coordinator answered it with."""
        try:
            return await tracker
        except DeliveryInDoubt as exc:
            self.state = "failed"
            raise TransactionError(f"the connection ended during the declare: {exc}", condition=exc.condition) from exc
        except DeliveryError as exc:
            self.state = "failed"
            raise TransactionError(f"the coordinator refused the declare: {exc}", condition=exc.condition) from exc
        except BaseException:
            # Cancelled (or timed out) after the declare was sent: the coordinator may still declare it, and
            # nothing would ever discharge it (it stayed open for the connection's whole life). Roll it back once
            # its outcome comes.
            self.state = "failed"
            _discard_late_declare(self.connection, controller, tracker)
            raise

    def __await__(self) -> Generator[Any, None, Transaction]:
        return self.declare().__await__()

    # --- work within it ----------------------------------------------------------------------------------

    def _lost(self) -> bool:
        """True when the connection (or the controller link) the transaction was declared on is gone."""
        controller = self._controller
        return (
            controller is None
            or controller._engine_link is not self._link
            or controller.is_closed
            or self.connection._error is not None
            or self.connection.is_closed
            or self.connection._reconnecting
        )

    def _require_active(self) -> bytes:
        if self.state == "active" and self._lost():
            self.state = "rolled back"
            self._lost_connection = True
        if self.state != "active" or self.txn_id is None:
            if self._lost_connection:
                raise TransactionRolledBack("the transaction was rolled back: the connection it was declared on ended")
            raise TransactionError(f"the transaction is not active ({self.state})", condition=conditions.ILLEGAL_STATE)
        return self.txn_id

    def _transfer_state(self) -> TransactionalState:
        """The state a transfer within the transaction carries (§4.4.1): one object, so that the engine encodes
        it once."""
        txn_id = self._require_active()
        state = self._sending_state
        if state is None:
            state = self._sending_state = TransactionalState(txn_id=txn_id)
        return state

    def _outcome_state(self, outcome: Any) -> TransactionalState:
        """The state a disposition within the transaction carries: the outcome it will have at commit (§4.4.2)."""
        return TransactionalState(txn_id=self._require_active(), outcome=outcome)

    async def send(self, sender: Sender[_R], message: Sendable) -> _R:
        """Send ``message`` on ``sender`` within the transaction: ``sender.send(message, transaction=self)``."""
        return await sender.send(message, transaction=self)

    async def accept(self, delivery: Delivery | StreamDelivery) -> None:
        """Accept a received message within the transaction: ``delivery.accept(transaction=self)``."""
        await delivery.accept(transaction=self)

    # --- discharge ---------------------------------------------------------------------------------------

    async def commit(self) -> None:
        """Commit the transaction (§4.4): its sends become visible and its accepted messages are consumed.

        Raises:
            TransactionRolledBack: the coordinator rolled it back instead (``amqp:transaction:rollback`` or
                ``amqp:transaction:timeout``), or the connection ended before the commit was asked.
            TransactionInDoubt: the connection ended while the commit was under way.
            TransactionError: the coordinator refused the discharge for another reason (e.g.
                ``amqp:transaction:unknown-id``), or the transaction is not active.
        """
        await self._discharge(fail=False)

    async def rollback(self) -> None:
        """Roll the transaction back (§4.4): its sends are dropped and the messages it settled are returned.

        A transaction whose connection ended is rolled back by the peer: this then returns at once.

        Raises:
            TransactionError: the coordinator refused the discharge (e.g. ``amqp:transaction:unknown-id``), or
                the transaction is already committed.
        """
        if self.state in ("rolled back", "failed", "new"):
            self.state = "rolled back"
            return
        if self.state == "active" and self._lost():
            self.state = "rolled back"
            self._lost_connection = True
            return
        await self._discharge(fail=True)

    def _backlogged(self) -> bool:
        """True while transfers sent within the transaction wait for a session window (on any session)."""
        engine = self.connection._engine
        state = self._sending_state
        if engine is None or state is None:
            return False
        return any(d.state is state for session in engine.sessions for d in session.backlogged_deliveries)

    async def _discharge(self, *, fail: bool) -> None:
        txn_id = self._require_active()
        controller = self._controller
        assert controller is not None
        # The discharge follows the work of the transaction on the wire: a transfer of another session still
        # waiting for its window must not be overtaken by it.
        while self._backlogged() and not self._lost():
            await self.connection._wait_state()
        txn_id = self._require_active()
        self.state = "discharging"
        limit = _answer_limit(self.connection)
        sent = False
        with anyio.move_on_after(math.inf if limit is None else limit) as bound:
            try:
                tracker = await controller.submit(Message(body=Discharge(txn_id=txn_id, fail=fail)))
            except AMQPError as exc:
                # Nothing was sent: the connection ended before the discharge, and the peer rolls it back.
                self.state = "rolled back"
                self._lost_connection = True
                if fail:
                    return
                raise TransactionRolledBack(f"the connection ended before the commit: {exc}") from exc
            except BaseException:
                self.state = "active"  # cancelled while it waited for credit: nothing was sent
                raise
            sent = True
            await self._discharge_outcome(tracker, fail=fail)
        if bound.cancelled_caught:
            # Not sent: the transaction is still active (a rollback may be tried again; the connection's end rolls
            # it back). Sent: "in doubt" until the coordinator's answer comes, which ``state`` then says.
            words = _coordinator_timeout("discharge", limit, sent=sent)
            condition = str(conditions.RESOURCE_LIMIT_EXCEEDED)
            if sent:
                raise TransactionInDoubt(f"{words}: the transaction may still commit or roll back", condition=condition)
            raise TransactionError(f"{words}: the transaction is still active", condition=condition)

    async def _discharge_outcome(self, tracker: Tracker[Any], *, fail: bool) -> None:
        """Wait for the outcome of a discharge that was sent, and set the state it leaves the transaction in."""
        try:
            await tracker
        except DeliveryInDoubt as exc:
            if fail:
                self.state = "rolled back"  # rolled back either way
                return
            self.state = "in doubt"
            raise TransactionInDoubt(f"the connection ended during the commit: {exc}", condition=exc.condition) from exc
        except DeliveryError as exc:
            self.state = "failed"
            if not fail and exc.condition in _ROLLED_BACK:
                self.state = "rolled back"
                raise TransactionRolledBack(
                    f"the coordinator rolled the transaction back: {exc}", condition=exc.condition
                ) from exc
            raise TransactionError(
                f"the coordinator refused to {'roll back' if fail else 'commit'} the transaction: {exc}",
                condition=exc.condition,
                info=exc.info,
            ) from exc
        except BaseException:
            self.state = "in doubt"  # cancelled while the discharge was under way: its outcome may still come
            self._pending_discharge = (tracker, fail)
            raise
        self.state = "rolled back" if fail else "committed"

    # --- as a context manager ----------------------------------------------------------------------------

    async def __aenter__(self) -> Transaction:
        if self.state == "new":
            await self.declare()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is None:
            if self.state == "active":
                await self.commit()
            elif self._lost_connection:
                # The block caught the TransactionRolledBack of its work (a per-message try/except) and ended
                # normally: nothing was committed, which the block's end must say as a commit() would have.
                raise TransactionRolledBack("the transaction was rolled back: the connection it was declared on ended")
            return
        if self.state == "active":
            # Cancelled or failed: roll back, shielded from the cancellation (and bounded), then let it propagate.
            with anyio.CancelScope(shield=True), anyio.move_on_after(10):
                try:
                    await self.rollback()
                except AMQPError:
                    pass  # the exception that ended the block is the one to report

    def __repr__(self) -> str:
        return f"<amqp_async.Transaction {self.txn_id!r} {self.state}>"
