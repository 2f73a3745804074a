"""Senders, receivers and trackers of the awaitable API."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import anyio

from ..codec.delivery_states import Accepted, Modified, Received, Rejected, Released
from ..codec.performatives import RCV_FIRST, RCV_SECOND, SND_SETTLED, SND_UNSETTLED, Error
from ..codec.terminus import Source, Target
from ..codec.transactions import TransactionalState
from ..errors import (
    AMQPError,
    ClosedByApplication,
    DeliveryInDoubt,
    LinkDetached,
    LinkError,
    MessageModified,
    MessageRejected,
    MessageReleased,
)
from ..message import Message
from ..protocol import events as ev
from ..protocol.endpoint import EndpointState
from ..protocol.errors import LocalProtocolError
from ..types import Described, symbol

if TYPE_CHECKING:
    from ..protocol.delivery import Delivery as EngineDelivery
    from ..protocol.link import Link as EngineLink
    from ..protocol.link import ReceiverLink, SenderLink
    from ..protocol.session import Session as EngineSession
    from ._delivery import Delivery
    from ._session import Session
    from ._tracing import MessageTracing
    from ._transaction import Transaction

__all__ = ["Receiver", "Sender", "Tracker", "selector"]

# Delivery guarantees (§3.4 and §2.6.12) as settle modes.
_GUARANTEES = {
    "at-most-once": (SND_SETTLED, RCV_FIRST),
    "at-least-once": (SND_UNSETTLED, RCV_FIRST),
    "exactly-once": (SND_UNSETTLED, RCV_SECOND),
}
_TERMINUS_OPTIONS = ("durable", "expiry_policy", "timeout", "dynamic", "dynamic_node_properties")


def _terminus_fields(options: dict[str, Any]) -> dict[str, Any]:
    """Pop the terminus options; ``durable=True`` means unsettled-state durability (2, as proton's
    DurableSubscription sets it) and ``False`` none (0), §3.5.5."""
    fields = {key: options.pop(key) for key in _TERMINUS_OPTIONS if key in options}
    durable = fields.get("durable")
    if isinstance(durable, bool):
        fields["durable"] = 2 if durable else 0
    return fields


def selector(expression: str) -> dict[symbol, Described]:
    """A source filter map holding a JMS message selector (``apache.org:selector-filter:string``), as proton's
    ``Selector`` builds it: pass it as ``filter=`` to :meth:`Session.open_receiver` (or use ``selector=``)."""
    return {symbol("selector"): Described(symbol("apache.org:selector-filter:string"), expression)}


def _link_error(error: Error | None, default: str) -> AMQPError:
    if error is None:
        return LinkDetached(default)
    return LinkError(error.description or "", condition=str(error.condition), info=error.info)


def _settle_modes(options: dict[str, Any]) -> tuple[int, int]:
    guarantee = options.pop("delivery", "at-least-once")
    try:
        snd, rcv = _GUARANTEES[guarantee]
    except KeyError:
        raise ValueError(f"delivery must be one of {sorted(_GUARANTEES)}, got {guarantee!r}") from None
    return options.pop("snd_settle_mode", snd), options.pop("rcv_settle_mode", rcv)


class _Link:
    """What senders and receivers share: attach, detach, errors."""

    _engine_link: EngineLink

    def __init__(self, session: Session, options: dict[str, Any], kind: str) -> None:
        self.session = session
        self.connection = session.connection
        self._options = dict(options)
        self.name: str = self._options.pop("name", None) or f"{self.connection.container_id}-{kind}-{uuid.uuid4()}"
        self._error: AMQPError | None = None
        self._closed = False
        self._detaching = False  # close() was called: our own detach

    @property
    def is_closed(self) -> bool:
        """True once the link is detached (by either side) or its session or connection is gone."""
        return self._closed or self._error is not None

    def _check(self) -> None:
        self.session._check()
        if self._error is not None:
            raise self._error
        if self._closed:
            if self._detaching:
                raise ClosedByApplication(f"link {self.name!r} was closed by the application")
            raise LinkDetached(f"link {self.name!r} is detached")

    @property
    def _closed_by_application(self) -> bool:
        """The application closed the link, its session or its connection: nothing more is handed out."""
        return self._detaching or self.session._closing or self.connection._closing

    async def _wait_attached(self) -> None:
        self.connection._kick()
        # The engine link is read again on each wake-up: a reconnect meanwhile attaches a new one (_restore), and
        # the old one never hears from the peer again.
        while self._engine_link.remote_state is EndpointState.UNINIT:
            self._check()
            await self.connection._wait_state()
        link = self._engine_link
        # §2.6.3: a peer that refuses a link attaches with a null terminus and detaches at once.
        refused = (link.role and link.remote_source is None) or (
            not link.role and link.remote_target is None and self._target_address_expected()
        )
        while refused and link.remote_state is EndpointState.ACTIVE and self._error is None:
            if link is not self._engine_link:
                break  # reconnected meanwhile: the new link's attach is what counts
            await self.connection._wait_state()
        self._check()

    def _target_address_expected(self) -> bool:
        return True

    def _on_detached(self, event: ev.LinkDetached) -> None:
        self._closed = True
        # The peer's error, or the one our engine detached with because of the peer (e.g. a transfer beyond the
        # credit granted): either way the caller learns the condition. A detach we asked for raises nothing new.
        if event.error is not None and (event.remote or not self._detaching):
            self._error = _link_error(event.error, "")

    def _on_session_ended(self, error: AMQPError | None) -> None:
        self._closed = True
        if error is not None and self._error is None:
            self._error = error

    def _on_connection_failed(self, error: AMQPError | None) -> None:
        if self._error is None:
            self._error = error

    def _on_transport_lost(self) -> None:
        """The connection dropped: the engine link is gone (a reconnect attaches a new one)."""

    async def close(self, error: Error | None = None) -> None:
        """Detach and close the link (§2.6.4), and wait for the peer's detach (idempotent)."""
        link = self._engine_link
        if self._closed or self.connection.is_closed or link.local_state is EndpointState.CLOSED:
            self._closed = True
            return
        self._detaching = True
        link.detach(closed=True, error=error)
        self.connection._kick()
        with anyio.move_on_after(10):
            while link.remote_state is EndpointState.ACTIVE and not self.connection.is_closed:
                await self.connection._wait_state()
        self._closed = True

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


class Tracker:
    """The outcome of one sent message, to await later (:meth:`Sender.submit`).

    ``await tracker`` returns the outcome (``Accepted()``) or raises :class:`MessageRejected`,
    :class:`MessageReleased`, :class:`MessageModified`, or :class:`DeliveryInDoubt` when the connection or link
    ended before the outcome was known.
    """

    __slots__ = ("_error", "_sender", "_waiters", "delivery", "done", "outcome")

    def __init__(self, sender: Sender | None, delivery: EngineDelivery | None) -> None:
        self._sender = sender
        self.delivery = delivery
        self.done = False
        self.outcome: Any = None
        self._error: AMQPError | None = None
        # One wake-up per waiting task (a bare future on asyncio: a tenth of the cost of an event), made only
        # once someone waits.
        self._waiters: list[asyncio.Future[None] | anyio.Event] | None = None

    @property
    def tag(self) -> bytes | None:
        """The delivery tag."""
        return None if self.delivery is None else self.delivery.tag

    @property
    def settled(self) -> bool:
        """True once the delivery is settled (and the outcome known)."""
        return self.done and self._error is None

    def _update(self, delivery: EngineDelivery) -> None:
        state = delivery.remote_state
        if state.__class__ is TransactionalState:
            # §4.4.1: the outcome of a transfer within a transaction, provisional until the discharge
            state = state.outcome
            if state is None and not delivery.remote_settled:
                return
        if not (delivery.remote_settled or delivery.settled) and (state is None or isinstance(state, Received)):
            return  # not final yet (a received state, or an unsettled disposition without outcome)
        self._finish(state, _outcome_error(state))

    def _finish(self, outcome: Any, error: AMQPError | None) -> None:
        if self.done:
            return
        self.done = True
        self.outcome = outcome
        self._error = error
        if self.delivery is not None:
            self.delivery.user_data = None
        if self._sender is not None:
            self._sender._pending.discard(self)
        waiters = self._waiters
        if waiters is not None:
            self._waiters = None
            for waiter in waiters:
                if isinstance(waiter, anyio.Event):
                    waiter.set()
                elif not waiter.done():
                    waiter.set_result(None)

    def _in_doubt(self, reason: str, cause: BaseException | None = None) -> None:
        # The connection's error, when it ended or was lost: chained, and its condition kept.
        error = DeliveryInDoubt(reason, condition=cause.condition if isinstance(cause, AMQPError) else None)
        error.__cause__ = cause
        self._finish(None, error)

    async def wait(self) -> Any:
        """Wait for the outcome: return it, or raise the error it stands for."""
        return await self

    def __await__(self) -> Generator[Any, None, Any]:
        # A generator rather than a coroutine: ``await tracker`` (as ``send()`` does on every confirmed message)
        # then suspends one frame deep, on the waiter itself.
        if not self.done:
            loop = None if self._sender is None else self._sender.connection._loop
            waiter = anyio.Event() if loop is None else loop.create_future()  # no loop: not asyncio (trio)
            waiters = self._waiters
            if waiters is None:
                waiters = self._waiters = []
            waiters.append(waiter)
            try:
                yield from (waiter.wait().__await__() if isinstance(waiter, anyio.Event) else waiter.__await__())
            finally:
                if not self.done:  # cancelled: forget this waiter (a task may wait again and again, in timeouts)
                    waiters.remove(waiter)
        if self._error is not None:
            raise self._error
        return self.outcome


class _TracedTracker(Tracker):
    """A :class:`Tracker` whose outcome also ends the message's send span (tracing on: ``_tracing``)."""

    __slots__ = ("_size", "_span", "_tracing")

    def __init__(self, sender: Sender, delivery: EngineDelivery, tracing: MessageTracing, span: Any, size: int) -> None:
        super().__init__(sender, delivery)
        self._tracing = tracing
        self._span = span
        self._size = size

    def _finish(self, outcome: Any, error: AMQPError | None) -> None:
        if self.done:
            return
        super()._finish(outcome, error)
        self._tracing.end_send(self._span, outcome, error, self._size)


def _outcome_error(state: Any) -> AMQPError | None:
    if state is None or isinstance(state, Accepted):
        return None
    if isinstance(state, Rejected):
        error = state.error
        if error is None:
            return MessageRejected("the message was rejected", outcome=state, condition="amqp:rejected")
        return MessageRejected(error.description or "", outcome=state, condition=str(error.condition))
    if isinstance(state, Released):
        return MessageReleased("the message was released", outcome=state)
    if isinstance(state, Modified):
        return MessageModified(
            f"the message was modified (delivery_failed={bool(state.delivery_failed)}, "
            f"undeliverable_here={bool(state.undeliverable_here)})",
            outcome=state,
        )
    return None  # other outcomes (transactional states...) are reported as they are


class Sender(_Link):
    """Sends messages on one link. Get one with :meth:`Connection.open_sender` or :meth:`Session.open_sender`.

    Safe to share between tasks: concurrent :meth:`send` calls each wait for credit and are transferred in turn.
    """

    _engine_link: SenderLink

    def __init__(self, session: Session, target: str | None, options: dict[str, Any]) -> None:
        super().__init__(session, options, "sender")
        self.target = target
        self._snd_settle_mode, self._rcv_settle_mode = _settle_modes(self._options)
        self._pending: set[Tracker] = set()
        self._tracing: MessageTracing | None = self.connection._tracing

    @property
    def address(self) -> str | None:
        """The target address (for a dynamic target: the one the peer created)."""
        address = getattr(self._engine_link.remote_target, "address", None)
        if address:
            return str(address)
        return self.target

    @property
    def credit(self) -> int:
        """How many messages the peer accepts now."""
        return self._engine_link.credit

    def _target_address_expected(self) -> bool:
        return True

    def _attach_arguments(self) -> dict[str, Any]:
        options = dict(self._options)
        target_fields = _terminus_fields(options)
        capabilities = options.pop("capabilities", None)
        source = options.pop("source", None)
        return {
            "target": Target(address=self.target, capabilities=capabilities, **target_fields),
            "source": source if isinstance(source, Source) else Source(address=source),
            "snd_settle_mode": self._snd_settle_mode,
            "rcv_settle_mode": self._rcv_settle_mode,
            **options,
        }

    async def _attach(self) -> None:
        engine_session = self.session._engine_session
        assert engine_session is not None
        self._engine_link = engine_session.attach_sender(self.name, **self._attach_arguments())
        self._engine_link.user_data = self
        await self._wait_attached()

    def _restore(self, engine_session: EngineSession) -> None:
        self._engine_link = engine_session.attach_sender(self.name, **self._attach_arguments())
        self._engine_link.user_data = self

    def _on_event(self, event: Any) -> None:
        if isinstance(event, ev.LinkDetached):
            self._on_detached(event)
            self._doubt_pending("the link was detached before the outcome was known")
        elif isinstance(event, ev.FlowReceived):
            link = self._engine_link
            if link.drain and link.credit > 0 and not self._waiting:
                link.drained()  # §2.6.7: nothing to send now: give the credit back
                self.connection._kick()

    def _on_transport_lost(self) -> None:
        self._doubt_pending(
            f"the connection to {self.connection.address} was lost before the outcome was known; the message may "
            "have arrived or not",
            self.connection._loss,
        )

    def _on_connection_failed(self, error: AMQPError | None) -> None:
        super()._on_connection_failed(error)
        self._doubt_pending(
            f"the connection to {self.connection.address} ended before the outcome was known: {error}", error
        )

    def _on_session_ended(self, error: AMQPError | None) -> None:
        super()._on_session_ended(error)
        self._doubt_pending("the session ended before the outcome was known")

    def _doubt_pending(self, reason: str, cause: BaseException | None = None) -> None:
        pending = self._pending
        self._pending = set()
        for tracker in pending:
            tracker._in_doubt(reason, cause)

    _waiting = 0

    async def submit(self, message: Message | bytes, *, transaction: Transaction | None = None) -> Tracker:
        """Wait for credit, transfer the message, and return a :class:`Tracker` of its outcome.

        ``message`` is a :class:`Message` or already encoded message bytes. An anonymous sender (target None)
        routes by ``message.address``. With ``transaction``, the message is sent within it (§4.4.1): it reaches
        its node only if the transaction commits.

        Cancellation: cancelled while it waits for credit, nothing was sent. Once it returns, the message is on
        its way; cancelling ``await tracker`` leaves the outcome to be learned from the tracker later.
        """
        tracker = await self._transfer(message, transaction)
        self.connection._kick()
        return tracker

    async def _transfer(
        self, message: Message | bytes, transaction: Transaction | None = None, traced: bool = True
    ) -> Tracker:
        """Wait for credit and hand the message to the engine, without waking the writer (the caller does)."""
        if self._tracing is not None and traced and isinstance(message, Message):
            return await self._traced_transfer(message, transaction)
        payload = message._encode_payload() if isinstance(message, Message) else bytes(message)
        if transaction is not None:
            if transaction.connection is not self.connection:
                raise ValueError("the transaction belongs to another connection")
            transaction._require_active()
        link = self._engine_link
        connection = self.connection
        if (
            link.link_credit <= 0
            or connection._reconnecting
            or connection._engine is None
            or connection._engine.output_buffered > (1 << 20)
        ):
            await self._wait_for_credit()
            link = self._engine_link
        elif self._error is not None or self._closed or connection._error is not None:
            self._check()
        try:
            if transaction is None:
                delivery = link.send(payload)
            else:
                # checked after the wait for credit: the transaction may have ended meanwhile
                delivery = link.send(payload, state=transaction._transfer_state())
        except LocalProtocolError:
            self._check()  # the link, session or connection ended: raise what ended it
            raise  # a refusal with its own condition (e.g. amqp:link:message-size-exceeded)
        if delivery.settled:
            tracker = Tracker(None, delivery)
            tracker._finish(None, None)
        else:
            tracker = Tracker(self, delivery)
            delivery.user_data = tracker
            self._pending.add(tracker)
        return tracker

    async def _traced_transfer(self, message: Message, transaction: Transaction | None) -> Tracker:
        """:meth:`_transfer` with a send span (``_tracing``): its context goes into the message before it is
        encoded, and the span ends with the outcome (the tracker's), or with the error that stopped the transfer."""
        tracing = self._tracing
        assert tracing is not None
        span = tracing.start_send(self, message)
        try:
            tracker = await self._transfer(message, transaction, traced=False)
        except BaseException as exc:
            tracing.end_send(span, None, exc if isinstance(exc, AMQPError) else AMQPError(repr(exc)))
            raise
        delivery = tracker.delivery
        assert delivery is not None
        size = len(delivery.payload)
        if tracker._sender is None:  # settled on sending (at-most-once)
            tracing.end_send(span, None, None, size)
            return tracker
        traced = _TracedTracker(self, delivery, tracing, span, size)
        delivery.user_data = traced
        self._pending.discard(tracker)
        self._pending.add(traced)
        return traced

    async def _wait_for_credit(self) -> None:
        """Wait until the link (the new one, while reconnecting) has credit and the output is below the high
        water mark."""
        connection = self.connection
        self._waiting += 1
        try:
            while True:
                self._check()
                link = self._engine_link
                # While reconnecting, the old link is dead: wait for the new one (attached by _restore).
                ready = link.remote_state is EndpointState.ACTIVE and not connection._reconnecting
                if link.link_credit > 0 and ready:
                    await connection._wait_writable()
                    if link.link_credit > 0 and link is self._engine_link and not connection._reconnecting:
                        return
                    continue  # no credit left, or the connection was lost meanwhile: wait again
                await connection._wait_state()
        finally:
            self._waiting -= 1

    @property
    def unsettled(self) -> list[Tracker]:
        """The trackers of messages sent and not settled yet (their outcome is still to come).

        A ``send()`` cancelled while it waited for the outcome leaves its tracker here: ``await`` it to learn the
        outcome, or find it in doubt after a connection loss.
        """
        return list(self._pending)

    async def send(self, message: Message | bytes, *, transaction: Transaction | None = None) -> Any:
        """Send a message and wait for its outcome.

        With ``transaction`` (a declared :class:`~amqp_async.Transaction` of this connection), the message is
        sent within it (§4.4.1): its node gets it only if the transaction commits; the outcome returned is the
        provisional one the receiver gave within the transaction.

        Returns:
            The outcome (``Accepted()``); on an at-most-once sender, None once the transfer is written.

        Raises:
            TransactionError: ``transaction`` is not active (committed, rolled back, or its connection ended).
            MessageRejected, MessageReleased, MessageModified: the receiver did not accept it.
            DeliveryInDoubt: the connection or link ended before the outcome was known.
            LinkError, ConnectionError: the link or connection failed.
        """
        tracker = await self._transfer(message, transaction)
        connection = self.connection
        connection._write_eagerly()  # the caller waits on this transfer: it need not wait for the writer's turn
        if tracker._sender is None:  # settled on sending (at-most-once): done once it is written
            await connection._wait_flushed()
            return None
        return await tracker

    async def __aenter__(self) -> Sender:
        return self

    def __repr__(self) -> str:
        return f"<amqp_async.Sender {self.name!r} to {self.address!r}>"


class Receiver(_Link):
    """Receives messages on one link. Get one with :meth:`Connection.open_receiver` or :meth:`Session.open_receiver`.

    ``async for delivery in receiver`` yields :class:`Delivery` objects until the application closes the receiver,
    its session or its connection, or the peer closes the link without an error; it raises :class:`LinkError`
    when the peer detaches it with one, and the connection's error when the connection fails. With ``credit=N``
    (default 100) the receiver keeps N messages' credit granted, topped up as deliveries are taken: at most N
    messages are ever buffered.
    """

    _engine_link: ReceiverLink

    def __init__(self, session: Session, source: str | None, options: dict[str, Any]) -> None:
        super().__init__(session, options, "receiver")
        self.source = source
        self._snd_settle_mode, self._rcv_settle_mode = _settle_modes(self._options)
        self._prefetch: int = int(self._options.pop("credit", 100))
        if self._prefetch < 0:
            raise ValueError("credit must be >= 0")
        self._tracing: MessageTracing | None = self.connection._tracing

    @property
    def address(self) -> str | None:
        """The source address; for a dynamic receiver, the address of the node the peer created."""
        remote = self._engine_link.remote_source
        if remote is not None and getattr(remote, "address", None):
            return str(remote.address)
        return self.source

    @property
    def credit(self) -> int:
        """The credit the sender has on this link."""
        return self._engine_link.credit

    @property
    def queued(self) -> int:
        """Deliveries received and not yet taken."""
        return len(self._engine_link.incoming)

    def _attach_arguments(self) -> dict[str, Any]:
        options = dict(self._options)
        source_fields = _terminus_fields(options)
        filters = options.pop("filter", None)
        expression = options.pop("selector", None)
        if expression is not None:
            filters = {**(filters or {}), **selector(expression)}
        distribution_mode = options.pop("distribution_mode", None)
        target = options.pop("target", None)
        source = Source(
            address=self.source,
            capabilities=options.pop("capabilities", None),
            filter=filters,
            distribution_mode=symbol(distribution_mode) if distribution_mode else None,
            default_outcome=options.pop("default_outcome", None),
            outcomes=options.pop("outcomes", None),
            **source_fields,
        )
        return {
            "source": source,
            "target": target if isinstance(target, Target) else Target(address=target),
            "snd_settle_mode": self._snd_settle_mode,
            "rcv_settle_mode": self._rcv_settle_mode,
            **options,
        }

    async def _attach(self) -> None:
        engine_session = self.session._engine_session
        assert engine_session is not None
        self._engine_link = engine_session.attach_receiver(self.name, **self._attach_arguments())
        self._engine_link.user_data = self
        self._tolerate_overshoot()
        await self._wait_attached()
        if self._prefetch:
            self._engine_link.grant_credit(self._prefetch)
            self.connection._kick()

    def _tolerate_overshoot(self) -> None:
        # Some brokers (RabbitMQ before 4.0) overshoot a credit top-up by up to the credit they held: accept that
        # much (it is bounded by our own prefetch) rather than detach the link. See ReceiverLink._on_transfer.
        self._engine_link.overshoot_tolerance = max(self._prefetch, 1)

    def _restore(self, engine_session: EngineSession) -> None:
        self._engine_link = engine_session.attach_receiver(self.name, **self._attach_arguments())
        self._engine_link.user_data = self
        self._tolerate_overshoot()
        if self._prefetch:
            self._engine_link.grant_credit(self._prefetch)

    def _on_event(self, event: Any) -> None:
        if isinstance(event, ev.LinkDetached):
            self._on_detached(event)

    def _top_up(self) -> None:
        link = self._engine_link
        prefetch = self._prefetch
        if prefetch and link.local_state is EndpointState.ACTIVE and link.link_credit <= prefetch >> 1:
            # Credit plus what waits in the queue stays at most ``prefetch``: memory is bounded by it.
            wanted = prefetch - len(link.incoming)
            if wanted > link.link_credit:
                link.grant_credit(wanted)
                self.connection._kick()

    def add_credit(self, credit: int) -> None:
        """Grant ``credit`` more messages (for a receiver opened with ``credit=0``: manual flow control)."""
        self._check()
        self._engine_link.add_credit(credit)
        self.connection._kick()

    async def drain(self) -> None:
        """Ask the sender to use up or give back all credit now (§2.6.7 drain), and wait until it has."""
        self._check()
        link = self._engine_link
        link.grant_credit(link.link_credit, drain=True)
        connection = self.connection
        connection._kick()
        while True:
            self._check()  # the link, its session or the connection may have ended instead of draining
            if link is not self._engine_link:
                return  # reconnected meanwhile: the old link's credit went with it
            if not (link.drain and link.local_state is EndpointState.ACTIVE) and not connection._reconnecting:
                return
            await connection._wait_state()

    def receive_nowait(self) -> Delivery | None:
        """Take the next delivery if one is queued, else None (never waits)."""
        from ._delivery import Delivery

        incoming = self._engine_link.incoming
        if not incoming:
            return None
        tracing = self._tracing
        delivery = Delivery(self, incoming.popleft()) if tracing is None else tracing.delivery(self, incoming.popleft())
        self._top_up()
        return delivery

    async def receive(self) -> Delivery:
        """Wait for the next delivery.

        Cancellation never loses a delivery: one is taken from the queue only when it is returned.

        Raises:
            LinkDetached: the link was detached (without error) and no delivery is left.
            LinkError, SessionError, ConnectionError: the link, session or connection failed.
        """
        from ._delivery import Delivery

        while True:
            incoming = self._engine_link.incoming
            if incoming:
                if self._closed_by_application:
                    self._check()  # ClosedByApplication: what is queued is not handed out after a close
                tracing = self._tracing
                if tracing is None:
                    delivery = Delivery(self, incoming.popleft())
                else:
                    delivery = tracing.delivery(self, incoming.popleft())
                self._top_up()
                return delivery
            self._check()
            await self.connection._wait_state()

    def __aiter__(self) -> Receiver:
        return self

    async def __anext__(self) -> Delivery:
        # Ends quietly once the application closed the receiver, its session or its connection, or the peer
        # closed the link without an error; raises when the peer detached it with one, or the connection failed.
        try:
            return await self.receive()
        except (LinkDetached, ClosedByApplication):
            raise StopAsyncIteration from None

    async def __aenter__(self) -> Receiver:
        return self

    def __repr__(self) -> str:
        return f"<amqp_async.Receiver {self.name!r} from {self.address!r}>"
