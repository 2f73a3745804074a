"""One client connection of the embedded broker: the engine in the server role, and what the broker keeps for
each of its links (producers, consumers, transaction controllers).

Isolation: whatever a client sends, the engine answers it within the protocol (it closes the connection, ends the
session or detaches the link with the condition that names the breach). An exception in the broker's own handling
of one connection (a bug of ours) closes that connection alone, with ``amqp:internal-error``, logs it once with its
traceback, rolls back its transactions and returns its unsettled messages to their queues; the broker and every
other connection go on (see :meth:`ServerConnection.fail`).

Time bounds what a peer may hold without speaking: a connection has ``Broker.handshake_timeout`` seconds from
its accept to the peer's open (protocol header, SASL, open); past it the socket is closed. Once open, the broker's
open asks for an idle-time-out (§2.4.5: half of ``Broker.idle_timeout``), and a peer that then sends nothing for
the whole ``idle_timeout`` is closed with ``amqp:resource-limit-exceeded``: its transactions roll back, its
unsettled messages return to their queues, its place under ``max_connections`` is free again.
"""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc

from .. import protocol
from ..codec import conditions
from ..codec.delivery_states import Accepted, Received, Rejected, Released
from ..codec.performatives import RCV_SECOND, Error
from ..codec.transactions import (
    LOCAL_TRANSACTIONS,
    MULTI_SESSIONS_PER_TXN,
    MULTI_TXNS_PER_SSN,
    Coordinator,
    Declare,
    Declared,
    Discharge,
    TransactionalState,
    control_body,
)
from ..errors import DecodeError
from ..io.driver import EngineDriver
from ..message import Message
from ..protocol import events as ev
from ..protocol.endpoint import ACTIVE
from ..protocol.sasl import SaslServer
from ..types import symbol
from ._consumers import (
    OUTPUT_LIMIT,
    SHARED_SUBS,
    TERMINAL,
    Outbound,
    attach_outbound,
    settle_by_default,
    unsubscribe,
)
from ._flow import MORE_MEMORY, WINDOW
from ._nodes import FailedAttempt
from ._producers import (
    AWAITING_SETTLEMENT_LIMIT,
    Inbound,
    attach_inbound,
    on_deliveries,
    settle_stored,
    settled_incoming,
)
from ._transactions import Coordinator as TransactionCoordinator
from ._transactions import TransactionRefused

if TYPE_CHECKING:
    from ._server import Broker

__all__ = [
    "AWAITING_SETTLEMENT_LIMIT",
    "DEFAULT_HANDSHAKE_TIMEOUT",
    "DEFAULT_IDLE_TIMEOUT",
    "INCOMING_CREDIT",
    "OUTPUT_LIMIT",
    "ServerConnection",
]

log = logging.getLogger("amqp_async.broker")

INCOMING_CREDIT = WINDOW
#: Seconds a peer has, from its connection's accept, to complete its handshake (protocol header, SASL, open) before
#: the broker closes the socket (``Broker(handshake_timeout=...)``, ``--handshake-timeout``): as long as a WebSocket
#: client has for its upgrade, and ActiveMQ's ``connectAttemptTimeout``. Before, a socket that connected and said
#: nothing was kept for ever, and under ``max_connections`` two such sockets locked every real client out.
DEFAULT_HANDSHAKE_TIMEOUT = 30.0
#: Seconds of silence after which the broker gives an open connection up (``Broker(idle_timeout=...)``,
#: ``--idle-timeout``): its open asks the peer for a frame every 30 s (half, as §2.4.5 advises; proton and our
#: client then write every 15 s when they have nothing else to say). RabbitMQ's default heartbeat is 60 s too (Qpid
#: Dispatch's listeners 16 s). Before, the broker asked for none: a frozen or vanished client kept its connection,
#: its unsettled messages and its place under ``max_connections`` for ever.
DEFAULT_IDLE_TIMEOUT = 60.0


class _DriverEnded(Exception):
    """The connection's driver has ended: its output will never drain."""


_ACCEPTED = Accepted()
_RELEASED = Released()


def _error(condition: str, description: str) -> Error:
    return Error(condition=symbol(condition), description=description)


def _lost(event: ev.ConnectionClosed) -> Error | None:
    """The error of a connection lost (None for one that ended otherwise): its transport ended without the peer's
    close (a process killed, a host gone: ``amqp:connection:forced``), or the peer went silent past our idle
    timeout (§2.4.5, ``amqp:resource-limit-exceeded``). A close the peer sent, one we sent (a refusal, a protocol
    violation of the peer's, our own failure) or the broker's stop is no loss."""
    error = event.error
    if event.transport_ended:
        return error if error is not None else _error(conditions.CONNECTION_FORCED, "the transport ended")
    return error if event.idle_expired else None


def _no_room_for(what: str, max_memory: int | None) -> str:
    return (
        f"no room for another {what}: sessions and links take at most half the broker's memory limit "
        f"({max_memory} bytes): {MORE_MEMORY}"
    )


class _ControlLink:
    """What the broker keeps for a link to its transaction coordinator (nothing: transactions are the
    connection's)."""


class ServerConnection:
    """One client connection: the engine in the server role and the tasks that drive it."""

    def __init__(self, broker: Broker, stream: anyio.abc.ByteStream) -> None:
        self.broker = broker
        self.stream = stream
        try:
            address = stream.extra(anyio.abc.SocketAttribute.remote_address)
            self.peer = f"{address[0]}:{address[1]}" if isinstance(address, tuple) else str(address)
        except anyio.TypedAttributeLookupError:
            self.peer = "?"
        mechanisms = []
        if broker.users:
            mechanisms += ["SCRAM-SHA-256", "SCRAM-SHA-1", "PLAIN"]
        if broker.allow_anonymous:
            mechanisms.append("ANONYMOUS")
        idle = broker.idle_timeout
        self.engine = protocol.Connection(
            role=protocol.SERVER,
            container_id=broker.container_id,
            sasl=SaslServer(mechanisms, broker._store),
            require_sasl=not broker.allow_anonymous,
            # §2.7.1 "the extension capabilities the sender supports": SHARED-SUBS too, which Qpid JMS checks on the
            # connection before it makes a shared consumer (shared subscriptions: ._consumers)
            offered_capabilities=["ANONYMOUS-RELAY", LOCAL_TRANSACTIONS, SHARED_SUBS],
            # §2.4.5: the idle-time-out announced "SHOULD be half the peer's actual timeout threshold"
            idle_timeout=idle,
            advertised_idle_timeout=None if idle is None else idle / 2,
        )
        self._driver = EngineDriver(self.engine, stream, self._on_events, on_error=self.fail)
        self._outbound: dict[Outbound, None] = {}
        #: our handling of this connection failed (see :meth:`fail`): its events are ignored from then on.
        self.failed = False
        self._inbound: dict[Inbound, None] = {}
        # The links to the transaction coordinator attached (counted in the memory limit as the others are).
        self._controllers: dict[protocol.Link, None] = {}
        # The sessions the peer began and we answered (counted in the memory limit, as links are).
        self._sessions: dict[protocol.Session, None] = {}
        # It counts in Broker.opened_connections (from its open until release).
        self._counted = False
        self._group: anyio.abc.TaskGroup | None = None
        self._output_waiting = False  # a task waits for the socket to take our output (consumers paused)
        # The sessions whose window was found shut by a consumer's credit (see _consumers): their consumers are
        # parked in their queues until the client's flow opens it.
        self._window_shut: set[protocol.Session] = set()
        self._awaiting_settlement = False  # a producer was refused credit until it settles (see settled_incoming)
        self._progress: anyio.Event | None = None  # set when the peer says something (streams waiting for it)
        self._handshake_scope: anyio.CancelScope | None = None  # the handshake deadline's, until the peer's open
        self._handshake_expired = False  # closed for its handshake deadline (logged then, once)
        self._ending = False  # being released (release): its consumers take nothing more
        self.transactions = TransactionCoordinator(
            broker.route,
            broker._has_room,
            broker._settle_entry,
            timeout=broker.transaction_timeout,
            flow=broker.flow,
            max_open=broker.max_transactions,
        )

    def kick(self) -> None:
        """The engine has output: wake the writer, or, when another connection's input made it (a message routed
        to one of our consumers, say), write it once that input is handled (see :meth:`_on_events`): one write per
        connection for all a read of the other's made, without a turn of our writer task."""
        broker = self.broker
        handling = broker.handling
        if handling is not None and handling is not self:
            broker.touched[self] = None
        else:
            self._driver.kick()

    async def run(self) -> None:
        """Serve the connection until it ends."""
        async with anyio.create_task_group() as group:
            self._group = group  # for the wait on a slow socket (_resume_output), started only when needed
            timeout = self.broker.handshake_timeout
            if timeout is not None:
                group.start_soon(self._handshake_deadline, timeout)
            await self._driver.run()
            group.cancel_scope.cancel()

    async def _handshake_deadline(self, timeout: float) -> None:
        """Close the socket unless the peer's open came within ``timeout`` seconds of the accept: a socket that
        says nothing, or stops in its header or SASL, must not keep its file descriptor and its place under
        ``max_connections`` for ever (the idle timeout runs from the open only). The task ends at the peer's open
        (:meth:`_on_open` cancels it): an open connection costs no task for it."""
        if self.engine.remote_open is not None:
            return  # the open came with the first bytes, before this task first ran (nothing to cancel then)
        with anyio.CancelScope() as scope:
            self._handshake_scope = scope
            await anyio.sleep(timeout)
        self._handshake_scope = None
        if scope.cancel_called or self.engine.remote_open is not None or self.engine.closed:
            return
        log.info("connection %s: no open within %g s of connecting (handshake timeout): closed", self.peer, timeout)
        self._handshake_expired = True
        # Nothing is said to a peer that has not opened (before its open there is no connection to close with an
        # error, and it may be in the middle of SASL): the socket is closed, and run() ends.
        self._driver.abort()

    async def wait_progress(self) -> None:
        """Wait until the peer says something (a flow may have opened its window; the connection may have ended)."""
        event = self._progress
        if event is None:
            event = self._progress = anyio.Event()
        await event.wait()

    async def wait_output(self, limit: int) -> None:
        """Wait until the socket took the output down to ``limit`` bytes (or the connection's driver ended)."""
        driver = self._driver

        def check() -> None:
            if driver.ended:
                raise _DriverEnded

        try:
            await driver.wait_output_below(limit, check)
        except _DriverEnded:
            pass

    def _pause_output(self) -> None:
        """More than OUTPUT_LIMIT bytes wait for the socket: pause the consumers until it took enough."""
        if not self._output_waiting and self._group is not None:
            self._output_waiting = True
            self._group.start_soon(self._resume_output)

    async def _resume_output(self) -> None:
        try:
            await self._driver.wait_output_below(OUTPUT_LIMIT // 2, lambda: None)
        finally:
            self._output_waiting = False
        for outbound in list(self._outbound):
            outbound.queue.credited(outbound.consumer)
        self.kick()

    def _on_events(self, events: list[ev.Event]) -> None:
        broker = self.broker
        outer = broker.handling
        broker.handling = self
        try:
            for event in events:
                if self.failed:
                    return
                self._on_event(event)
            progress = self._progress
            if progress is not None:
                self._progress = None
                progress.set()
        finally:
            broker.handling = outer
            if outer is None:
                _write_touched(broker.touched)

    def fail(self, exc: BaseException) -> None:
        """Our handling of this connection raised ``exc`` (a bug of ours, not the peer's): log it once, close the
        connection with ``amqp:internal-error`` and stop its driver; once stopped, the connection is released (its
        transactions roll back, its unsettled messages return to their queues). Nothing of it is handled any more;
        the broker and the other connections go on."""
        if self.failed:
            return
        self.failed = True
        log.error("connection %s: internal error, closing the connection", self.peer, exc_info=exc)
        try:
            self.engine.close(_error(conditions.INTERNAL_ERROR, f"internal error in the broker: {type(exc).__name__}"))
        except Exception:
            pass
        # The driver stops; once it has, _handle releases the connection (transactions, unsettled messages): not
        # here, as this may run inside another connection's dispatch to one of our consumers.
        self._driver.give_up()

    def _on_closed(self, event: ev.ConnectionClosed) -> None:
        """The connection ended: what its consumers left unsettled takes the outcome its end calls for, then the
        connection is released.

        - Lost (its transport ended without the peer's close, or the peer went silent past the idle timeout): each
          delivery counts as modified with delivery-failed (§3.4.5; the header's delivery-count, §3.2.1: "the
          number of unsuccessful previous attempts to deliver this message"), whatever default-outcome its link
          named, and is given up at the delivery limit: a message that crashes every consumer that takes it ends in
          the dead-letter queue, as in RabbitMQ's quorum queues and ActiveMQ Artemis, instead of being delivered
          for ever.
        - Closed by the peer (its close frame: the application's decision): each consumer's default-outcome
          (§3.5.3), as at its link's detach; released (not counted) without one.
        - Any other end (our close of a peer that broke the protocol, our own failure): released, not counted.
        """
        error = _lost(event)
        if error is None:
            if event.remote:
                for outbound in self._outbound:
                    settle_by_default(self, outbound)
            self.release()
            return
        attempt = FailedAttempt(
            f"its consumer's connection was lost ({self.peer}: {error.description or error.condition})",
            str(error.condition) if error.condition else None,
        )
        held = sum(len(outbound.consumer.unsettled) for outbound in self._outbound if not outbound.consumer.browse)
        if held:
            log.info("connection %s lost with %d messages unsettled: returned as failed deliveries", self.peer, held)
        self.release(attempt)

    def release(self, lost: FailedAttempt | None = None) -> None:
        """The connection is gone: its consumers' unsettled messages go back to their queues (released, or with
        ``lost`` as failed deliveries, see :meth:`_on_closed`), and its open transactions roll back (what they
        hold goes back to the queues once the consumers are gone: not to them)."""
        self._ending = True
        if self._counted:
            self._counted = False
            self.broker.opened_connections -= 1
        flow = self.broker.flow
        endpoints = len(self._outbound) + len(self._inbound) + len(self._controllers) + len(self._sessions)
        self._controllers.clear()
        self._sessions.clear()
        for outbound in self._outbound:
            unsubscribe(self, outbound, lost)
        self._outbound.clear()
        self.transactions.rollback_all()
        for inbound in self._inbound:
            inbound.drop()
        flow.remove(*(inbound.producer for inbound in self._inbound))
        self._inbound.clear()
        flow.drop_endpoints(endpoints)

    # --- events ------------------------------------------------------------------------------------------

    def _on_event(self, event: ev.Event) -> None:
        if isinstance(event, ev.DeliveriesReceived):
            self._on_deliveries(event.link)  # type: ignore[arg-type]
        elif isinstance(event, ev.DeliveriesUpdated):
            self._on_outcomes(event)
        elif isinstance(event, ev.FlowReceived):
            self._on_flow(event)
        elif isinstance(event, ev.LinkAttached):
            if not event.link.locally_attached:
                self._on_attach(event.link)
        elif isinstance(event, ev.LinkDetached):
            # §2.6.6: the peer closing its link (closed=true) ends its terminus: a durable subscription with it
            self._on_detach(event.link, closed=event.remote and event.closed)
        elif isinstance(event, ev.SessionBegun):
            if not event.session.locally_begun:
                self._on_begin(event.session)
        elif isinstance(event, ev.SessionEnded):
            self._window_shut.discard(event.session)
            if event.session in self._sessions:
                del self._sessions[event.session]
                self.broker.flow.drop_endpoints()
            # The session's links end with it (the engine has forgotten them): their consumers go too.
            for outbound in [outbound for outbound in self._outbound if outbound.link.session is event.session]:
                self._on_detach(outbound.link)
            for inbound in [inbound for inbound in self._inbound if inbound.link.session is event.session]:
                self._on_detach(inbound.link)
            for control in [control for control in self._controllers if control.session is event.session]:
                self._on_detach(control)
        elif isinstance(event, ev.ConnectionOpened):
            self._on_open(event)
        elif isinstance(event, ev.ConnectionClosed):
            if not self._handshake_expired:  # (that says why already: the transport's end would be a second line)
                reason = f": {event.error}" if event.error else ""
                why = self._driver.transport_error if event.transport_ended else None
                if why:
                    # what ended the stream, as the driver read it (a WebSocket the peer broke, a reset): the
                    # engine's own words are only "the transport ended before the peer closed"
                    reason += f" ({why})"
                log.info("connection %s closed%s", self.peer, reason)
            self._on_closed(event)

    def _on_open(self, event: ev.ConnectionOpened) -> None:
        broker = self.broker
        if self._handshake_scope is not None:
            self._handshake_scope.cancel()  # the handshake is done within its time
            self._handshake_scope = None
        log.info("connection %s opened (container %s)", self.peer, event.open.container_id)
        self.engine.open()
        self._driver.wake_timer()  # the client's idle timeout may need our first heartbeat soon
        if broker.max_connections is not None and broker.opened_connections >= broker.max_connections:
            description = f"the broker takes at most {broker.max_connections} connections"
            log.info("connection %s refused: %s", self.peer, description)
            self.engine.close(_error(conditions.RESOURCE_LIMIT_EXCEEDED, description))
        else:
            # counted from its open: sockets still in their handshake (silent ones too) keep no client out
            self._counted = True
            broker.opened_connections += 1

    def _on_begin(self, session: protocol.Session) -> None:
        """A session the peer began: answered, and counted in the memory limit; past the room sessions and links
        have, ended at once with ``amqp:resource-limit-exceeded`` (§2.5.1: a begin is always answered)."""
        session.begin()
        flow = self.broker.flow
        if flow.room_for_endpoint():
            self._sessions[session] = None
            flow.hold_endpoint()  # until its end, or release
        else:
            session.end(_error(conditions.RESOURCE_LIMIT_EXCEEDED, _no_room_for("session", flow.max_memory)))

    def _on_attach(self, link: protocol.Link) -> None:
        flow = self.broker.flow
        if not flow.room_for_endpoint():
            self._refuse(link, conditions.RESOURCE_LIMIT_EXCEEDED, _no_room_for("link", flow.max_memory))
            return
        if isinstance(link, protocol.ReceiverLink):
            attach_inbound(self, link)
        else:
            assert isinstance(link, protocol.SenderLink)
            attach_outbound(self, link)

    def _refuse(self, link: protocol.Link, condition: str, description: str) -> None:
        """§2.6.3: refuse a link by attaching with a null terminus and detaching at once with the error."""
        log.info("link %r refused: %s", link.name, description)
        if isinstance(link, protocol.SenderLink):
            link.attach(source=None, target=link.remote_target)
        else:
            link.attach(source=link.remote_source, target=None)
        link.detach(closed=True, error=_error(condition, description))

    def _attach_coordinator(self, link: protocol.ReceiverLink) -> None:
        """A link to the transaction coordinator (§4.1): declares and discharges arrive on it."""
        link.user_data = _ControlLink()
        link.attach(
            source=link.remote_source,
            # §4.5.1: the coordinator's capabilities are the txn-capabilities it supports (§4.5.7)
            target=Coordinator(capabilities=(LOCAL_TRANSACTIONS, MULTI_TXNS_PER_SSN, MULTI_SESSIONS_PER_TXN)),
            snd_settle_mode=link.remote_snd_settle_mode,
            rcv_settle_mode=link.remote_rcv_settle_mode,
        )
        link.grant_credit(INCOMING_CREDIT)
        self._controllers[link] = None
        self.broker.flow.hold_endpoint()  # until _on_detach or release
        log.info("link %r attached: %s controls transactions", link.name, self.peer)

    def _on_control(self, link: protocol.ReceiverLink) -> None:
        """Declares and discharges (§4.3, §4.4): each is answered, settled, with its outcome."""
        second = link.rcv_settle_mode == RCV_SECOND
        while link.incoming:
            delivery = link.incoming.popleft()
            if delivery.aborted:
                continue
            state = self._control(bytes(delivery.payload))
            storage = self.broker.storage
            if storage is not None and state is _ACCEPTED:
                # a discharge: what the commit (or rollback) changed is stored before the client hears of it
                storage.after_commit(functools.partial(settle_stored, self, link, delivery, state, not second))
                continue
            link.settle(delivery, state, settled=not second)
        if link.local_state is ACTIVE and link.credit < INCOMING_CREDIT // 2:
            link.grant_credit(INCOMING_CREDIT)

    def _control(self, payload: bytes) -> Any:
        """The outcome of one message sent to the coordinator."""
        try:
            message = Message()
            message.decode(payload)
            body = control_body(message.body)  # §4.5.2, §4.5.3: the Declare or Discharge its amqp-value holds
        except DecodeError as exc:
            return Rejected(error=_error(conditions.DECODE_ERROR, f"the message does not decode: {exc.description}"))
        if isinstance(body, Declare):
            if body.global_id is not None:
                return Rejected(error=_error(conditions.NOT_IMPLEMENTED, "distributed transactions are not supported"))
            try:
                transaction = self.transactions.declare()
            except TransactionRefused as exc:
                # §4.3: a declare the coordinator cannot do is rejected with the error saying why
                log.info("transaction refused (%s): %s", self.peer, exc.error.description)
                return Rejected(error=exc.error)
            log.info("transaction %r declared (%s)", transaction.txn_id, self.peer)
            return Declared(txn_id=transaction.txn_id)  # §4.3: the declared outcome carries the new txn-id
        if isinstance(body, Discharge):
            error = self.transactions.discharge(body.txn_id, bool(body.fail))
            log.info(
                "transaction %r %s (%s)",
                body.txn_id,
                f"failed: {error.condition}" if error else "rolled back" if body.fail else "committed",
                self.peer,
            )
            # §4.4: a discharge that cannot be done is rejected with the transaction-error saying why
            return _ACCEPTED if error is None else Rejected(error=error)
        return Rejected(
            error=_error(conditions.NOT_ALLOWED, "the coordinator takes declare and discharge bodies (§4.5.2, §4.5.3)")
        )

    def _on_deliveries(self, link: protocol.ReceiverLink) -> None:
        inbound = link.user_data
        if isinstance(inbound, _ControlLink):
            self._on_control(link)
            return
        if not isinstance(inbound, Inbound):
            return
        on_deliveries(self, link, inbound)

    def _on_flow(self, event: ev.FlowReceived) -> None:
        link = event.link
        session = event.session
        if session in self._window_shut and session.remote_incoming_window > 0:
            # the client's session window opened again: its consumers parked on it may take messages
            self._window_shut.discard(session)
            for outbound in [outbound for outbound in self._outbound if outbound.link.session is session]:
                outbound.queue.credited(outbound.consumer)
        if isinstance(link, protocol.SenderLink):
            outbound = link.user_data
            if isinstance(outbound, Outbound):
                outbound.queue.credited(outbound.consumer)
            if (
                link.drain
                and link.local_state is ACTIVE
                and link.streaming is None
                and not (isinstance(outbound, Outbound) and outbound.awaiting_commit)
            ):
                # §2.6.7: what could be sent was sent; give back the rest (pre-settled transfers waiting for the
                # store's commit, or a large message streaming, go first: _consumers.deal_then_answer_drain answers
                # the drain once they are written)
                link.drained()
        self.kick()

    def _on_outcomes(self, event: ev.DeliveriesUpdated) -> None:
        touched = False
        unknown: list[tuple[protocol.Link, Any]] = []
        if self._awaiting_settlement and event.settled:
            settled_incoming(self, event.deliveries)
        for delivery in event.deliveries:
            outbound = delivery.link.user_data
            if not isinstance(outbound, Outbound):
                continue
            state = delivery.remote_state
            transaction = None
            if isinstance(state, TransactionalState):
                transaction = self.transactions.get(state.txn_id)
                if transaction is None:
                    unknown.append((delivery.link, state.txn_id))
                    continue
                state = state.outcome
                if state is None and delivery.remote_settled:
                    state = _ACCEPTED  # settled within the transaction without an outcome: consumed at commit
            if not delivery.remote_settled and (state is None or isinstance(state, Received)):
                continue  # not an outcome yet
            if not isinstance(state, TERMINAL):
                # Settled without an outcome, with a non-terminal state (received) or one of a kind not known:
                # the link's default-outcome (§3.5.3), else accepted for none (the receiver is done with it) and
                # released for the others (kept: nothing says it was consumed).
                state = outbound.default_outcome or (_ACCEPTED if state is None else _RELEASED)
            entry = outbound.consumer.unsettled.pop(delivery, None)
            if entry is None:
                continue
            if transaction is not None:
                # §4.4.2: the outcome takes effect when the transaction commits; a rollback returns the message
                transaction.acquire(outbound.queue, outbound.consumer, entry, state)
                continue
            self.broker._settle_entry(outbound.queue, outbound.consumer, entry, state)
            touched = True
        for link, txn_id in unknown:
            if link.local_state is ACTIVE:
                link.detach(error=self.transactions.refusal(txn_id))  # unknown-id, or timeout (§4.5.8)
                self._on_detach(link)
                touched = True
        if touched:
            self.kick()

    def _on_detach(self, link: protocol.Link, *, closed: bool = False) -> None:
        """The link is detached (by the peer, or with its session); ``closed``: the peer closed it (its detach
        said closed=true, §2.6.6), which unsubscribes a durable subscription (:func:`._consumers.unsubscribe`)."""
        outbound = link.user_data
        if isinstance(outbound, Outbound):
            settle_by_default(self, outbound)
            unsubscribe(self, outbound, closed=closed)
            if outbound in self._outbound:
                del self._outbound[outbound]
                self.broker.flow.drop_endpoints()
            link.user_data = None
            log.info("link %r detached (%s)", link.name, self.peer)
        elif isinstance(outbound, Inbound):
            if self.engine.hold_detach_answer(link):
                # §2.6.4: answered here, in the order the peer's frames came (the engine would answer once the
                # output is taken, after what later frames of the read brought), once the outcomes of the
                # messages that came before the detach are given: those waiting for the store's commit first
                if outbound.storing:
                    outbound.detach_answer = link.remote_closed  # answered by _producers.settle_stored
                else:
                    link.detach(closed=link.remote_closed)
            link.user_data = None
            outbound.drop()
            self.broker.flow.remove(outbound.producer)
            if outbound in self._inbound:
                del self._inbound[outbound]
                self.broker.flow.drop_endpoints()
            log.info("link %r detached (%s)", link.name, self.peer)
        elif isinstance(outbound, _ControlLink):
            if self.engine.hold_detach_answer(link):
                link.detach(closed=link.remote_closed)  # in the order the peer's frames came (as above)
            link.user_data = None
            if link in self._controllers:
                del self._controllers[link]
                self.broker.flow.drop_endpoints()


def _write_touched(touched: dict[ServerConnection, None]) -> None:
    """Write the output the input just handled gave other connections: each now, when its socket takes it, else
    by its writer."""
    while touched:
        connection = next(iter(touched))
        del touched[connection]
        connection._driver.write_or_wake()
