"""Senders and receivers of the awaitable API (trackers: ``_tracker``; link options: ``_link_options``)."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeAlias, cast

import anyio

from ..codec.delivery_states import Accepted
from ..codec.performatives import SENDER, Error
from ..errors import (
    AMQPError,
    ClosedByApplication,
    LinkDetached,
    LinkError,
    LinkTimeout,
    SessionError,
)
from ..message import Message
from ..protocol import events as ev
from ..protocol.endpoint import ACTIVE, CLOSED, UNINIT
from ..protocol.errors import LocalProtocolError
from ..types import symbol
from ._answer_due import AnswerDue
from ._arguments import check_credit, check_thread, check_transaction, get_ident, refusal
from ._config import timeout_option
from ._delivery import Delivery
from ._link_options import OnError, ReceiverOptions, SenderOptions, selector
from ._tracker import Tracker, _TracedTracker, session_ended_cause, session_ended_reason
from ._unwritten import ending_named, fail_unwritten, not_sent_error, report_dropped_presettled

if TYPE_CHECKING:
    from typing_extensions import TypeVar

    from ..protocol.delivery import Delivery as EngineDelivery
    from ..protocol.link import Link as EngineLink
    from ..protocol.link import ReceiverLink, SenderLink
    from ..protocol.payload import Gathered
    from ..protocol.session import Session as EngineSession
    from ._session import Session
    from ._tracing import MessageTracing
    from ._transaction import Transaction

    # What send() gives: Accepted on a confirmed sender (the default), None on an at-most-once one (see Tracker).
    _R = TypeVar("_R", default=Accepted)
else:
    from typing import TypeVar

    _R = TypeVar("_R")

__all__ = ["Receiver", "SendManyError", "Sender", "Tracker", "hand_dropped", "selector"]

#: Output bytes waiting in the engine past which a send waits for the writer to take them (backpressure).
_OUTPUT_HIGH_WATER = 1 << 20

#: The seconds a link's close waits for the peer, all of it: a sender's backlog written as the session window
#: opens, then the peer's answering detach (one deadline for both: the documented close bound).
CLOSE_TIMEOUT = 10.0


class _Default:
    """The type of :data:`_DEFAULT`: an argument not given (None means "no limit" where it is taken)."""

    def __repr__(self) -> str:
        return "<the connection's default>"


_DEFAULT = _Default()


def _timeout(value: float | None) -> float | None:
    return timeout_option("timeout", value)


def _link_error(error: Error | None, default: str) -> AMQPError:
    if error is None:
        return LinkDetached(default)
    return LinkError(error.description or "", condition=str(error.condition), info=error.info)


def _not_a_message(message: object) -> TypeError:
    """The error for a send of something that is neither a Message nor encoded message bytes."""
    shown = repr(message)
    if len(shown) > 60:
        shown = f"{shown[:57]}..."
    hint = " (or Message.from_json(...) for JSON)" if isinstance(message, (dict, list)) else ""
    return TypeError(
        "a message to send is an amqp_async.Message, or the bytes of an encoded message (Message.encode()); got "
        f"{type(message).__name__} {shown}. To send it as the message's body: Message(body=...){hint}"
    )


#: What a sender sends: a message, or the bytes of one already encoded (any bytes-like object).
Sendable: TypeAlias = "Message | bytes | bytearray | memoryview"


class _Link:
    """What senders and receivers share: attach, detach, errors."""

    _engine_link: EngineLink

    def __init__(self, session: Session, name: str) -> None:
        self.session = session
        self.connection = session.connection
        self.name = name
        self._error: AMQPError | None = None
        self._closed = False
        self._detaching = False  # close() was called: our own detach

    @property
    def is_closed(self) -> bool:
        """True once the link is detached (by either side) or its session or connection is gone."""
        return self._closed or self._error is not None

    def _check(self) -> None:
        if self._detaching and self._closed and self._error is None:
            # said first: the session a stream link was given of its own has ended with it, and "the session was
            # closed" would not name what the application closed
            # named by what the application opened (its address), as LinkDetached below: with many senders, the
            # generated name alone did not say which
            raise ClosedByApplication(f"the {self._describe()} was closed by the application (link {self.name!r})")
        self.session._check()
        if self._error is not None:
            raise self._error
        if self._closed:
            # named by what the application opened (its address), not only by the link's generated name
            raise LinkDetached(f"the {self._describe()} is detached (link {self.name!r})")

    @property
    def _closed_by_application(self) -> bool:
        """The application closed the link, its session or its connection: nothing more is handed out."""
        return self._detaching or self.session._closing or self.connection._closing

    async def _wait_attached(self) -> None:
        self.connection._kick()
        try:
            await self._wait_attach_answered()
            self._check()
        except (LinkError, SessionError) as exc:
            if isinstance(exc, LinkTimeout):
                raise
            # The peer refused the link (detached it, or ended its session): say which link, with its words.
            what = self._describe()
            why = exc.description
            if type(exc) is LinkDetached and exc.__cause__ is None:  # no words of the peer's: detached, no error
                why = f"it detached the link without an error (link {self.name!r})"
            raise type(exc)(f"the peer refused the {what}: {why}", condition=exc.condition, info=exc.info) from exc
        if self._dynamic_node_unnamed():
            unnamed = LinkError(
                f"the peer attached the {self._describe()} without the address of the node it made (§3.5.3, "
                "§3.5.4: the attach that answers a dynamic terminus MUST carry its address)",
                condition="amqp:invalid-field",
            )
            self._fail_attach(unnamed)  # detached, the peer told why: nothing flows on a node nobody can name
            raise unnamed

    async def _wait_attach_answered(self) -> None:
        limit = self.connection._options.open_timeout
        due = AnswerDue(self.connection, limit)
        # The engine link is read again on each wake-up: a reconnect meanwhile attaches a new one (_restore), and
        # the old one never hears from the peer again.
        while self._engine_link.remote_state is UNINIT:
            self._check()
            if due.passed(self._engine_link):
                self._give_up_attach(limit)
                return
            await due.wait()
        link = self._engine_link
        # §2.6.3: a peer that refuses a link attaches with a null terminus and detaches at once.
        refused = (link.role and link.remote_source is None) or (
            not link.role and link.remote_target is None and self._target_address_expected()
        )
        while refused and link.remote_state is ACTIVE and self._error is None:
            if link is not self._engine_link:
                break  # reconnected meanwhile: the new link's attach is what counts
            if due.passed(link):  # a refusal whose detach never comes
                self._give_up_attach(limit)
                return
            await due.wait()

    def _dynamic_node_unnamed(self) -> bool:
        """True when we asked the peer for a dynamic node and its attach came back without the node's address:
        the link would be open on a node nobody can name (a request's ``reply_to`` None, its replies never
        coming)."""
        return False

    def _give_up_attach(self, limit: float | None) -> None:
        """The peer did not answer our attach within ``open_timeout``: detach the link, telling the peer why (a
        late attach then meets our detach, and no transfer flows on it), and fail with :class:`LinkTimeout`."""
        self._fail_attach(
            LinkTimeout(f"the peer did not answer the attach of the {self._describe()} within open_timeout ({limit} s)")
        )

    def _fail_attach(self, error: LinkError) -> None:
        """Detach the link (closed) with ``error``, telling the peer why, and keep it as the link's error."""
        link = self._engine_link
        connection = self.connection
        if not connection.is_closed and not connection._reconnecting and link.local_state is ACTIVE:
            link.detach(closed=True, error=Error(condition=symbol(error.condition), description=error.description))
            connection._kick()
        self._closed = True
        self._error = error

    def _abandon(self) -> None:
        """Its open failed or was cancelled, so nobody holds the link: detach it (closed) without waiting for the
        peer's answer. Left attached, it stayed registered with its session, and a reconnect attached it again
        with its prefetch credit: a consumer no one read, taking the queue's messages."""
        self._detaching = True
        self._closed = True
        link: EngineLink | None = getattr(self, "_engine_link", None)  # None: the engine refused it, nothing sent
        connection = self.connection
        if link is None or connection.is_closed or connection._reconnecting:
            return
        if link.local_state is ACTIVE:
            link.detach(closed=True)
            connection._kick()

    def _describe(self) -> str:
        """The link in words, for errors: its kind and address."""
        return f"link {self.name!r}"

    def _target_address_expected(self) -> bool:
        return True

    def _on_detached(self, event: ev.LinkDetached) -> None:
        self._closed = True
        # The peer's error, or the one our engine detached with because of the peer (e.g. a transfer beyond the
        # credit granted): either way the caller learns the condition. A detach we asked for raises nothing new.
        if event.error is not None and (event.remote or not self._detaching):
            self._error = _link_error(event.error, "")

    def _detach_cause(self) -> AMQPError:
        """Why the link is detached, for what it leaves undone: the peer's error (its condition, for example
        ``amqp:link:message-size-exceeded`` for the message that was in flight), or :class:`LinkDetached`."""
        if self._error is not None:
            return self._error
        if self._detaching:
            return ClosedByApplication(f"the application closed the {self._describe()}")
        return LinkDetached(f"the peer detached the {self._describe()}")

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
        """Detach and close the link (closed=true, §2.6.6: the peer ends its side of the link, its terminus with
        it), and wait for the peer's detach (idempotent). A receiver's close unsubscribes a durable subscription on
        the brokers that follow §2.6.6 (the embedded one, ActiveMQ Artemis, Qpid Broker-J): ``detach()`` leaves it
        for a later attach."""
        await self._leave(error, closed=True)

    async def _leave(self, error: Error | None, *, closed: bool) -> None:
        """Detach the link (``closed`` or not) and wait for the peer's detach (within :data:`CLOSE_TIMEOUT`)."""
        check_thread(self.connection)
        # One deadline for the whole close: the backlog written, then the peer's detach. Each had its own 10 s
        # before, and a peer that stopped opening its session window held a sender's close for 20 s.
        deadline = anyio.current_time() + CLOSE_TIMEOUT
        link = await self._send_detach(error, deadline, closed=closed)
        if link is None:
            return
        connection = self.connection
        with anyio.CancelScope(deadline=deadline):
            while link.remote_state is ACTIVE and not connection.is_closed and not connection._reconnecting:
                await connection._wait_state()
        if link.remote_state is ACTIVE and not connection.is_closed and not connection._reconnecting:
            self._on_detach_unanswered()
        self._closed = True

    def _on_detach_unanswered(self) -> None:
        """The peer did not answer our detach in time, and keeps the connection alive: nothing more comes on this
        link for us. The trackers of its messages still without an outcome are in doubt now (they waited for ever
        after ``close()`` returned: only the connection's end failed them), and what waits on the link (a
        settlement in receiver settle mode second) wakes to find it closed."""
        self._closed = True
        cause = self._detach_cause()
        self._doubt_pending(
            f"the {self._describe()} was closed before the outcome was known: the peer did not answer its detach "
            f"within {CLOSE_TIMEOUT} s",
            cause,
        )
        self.connection._notify()

    def _doubt_pending(self, reason: str, cause: BaseException | None = None) -> None:
        """Fail the trackers still waiting for an outcome with :class:`DeliveryInDoubt` (senders have some)."""

    def _fail_unwritten(self, cause: AMQPError, what: str) -> None:
        """``cause`` ends the link (``what`` ends: its sender, session or connection, in words) and drops the
        transfers waiting for the peer's session window: fail the messages none of whose bytes was written with
        a definite error (senders have some)."""

    def _ending(self, cause: AMQPError, what: str) -> None:
        """Our detach, end or close (of ``what``: the sender, its session or its connection) is about to drop the
        transfers still waiting for the peer's session window (§2.5.6): fail the messages never written
        (:meth:`_fail_unwritten`), and say how many at-most-once ones go (senders)."""
        self._fail_unwritten(cause, what)

    def _on_dropped(self, dropped: Sequence[EngineDelivery], what: str) -> None:
        """The engine cut ``dropped`` (deliveries of this link) short as ``what`` ended (the sender, its session or
        its connection: by the peer, by the transport's loss, or by us): their last frame was never written. The
        at-most-once ones are counted in a warning: they have no tracker to fail."""
        report_dropped_presettled(dropped, self._describe(), what)

    async def _send_detach(
        self, error: Error | None, deadline: float | None = None, *, closed: bool = True
    ) -> EngineLink | None:
        """Detach the link (``closed``: closing it, §2.6.6; else §2.6.4), a sender's backlog written first (until
        ``deadline``, an :func:`anyio.current_time`; default :data:`CLOSE_TIMEOUT` from now), and return the engine
        link whose detach the peer answers; None when there is nothing to wait for (the link or connection was
        closed already, or the transport is down): the link is closed then."""
        link = self._engine_link
        if self._closed or self.connection.is_closed or link.local_state is CLOSED:
            self._closed = True
            return None
        self._detaching = True
        connection = self.connection
        if connection._reconnecting:
            # The transport went, and the engine link with it: the peer dropped the link with its connection, and
            # the reconnect leaves it out (Session._restore). Before, the close waited 10 s for a detach that could
            # not come, and the link was attached again, a consumer the application could no longer read.
            self._closed = True
            return None
        if error is None and link.role is SENDER:
            await self._write_backlog(link, anyio.current_time() + CLOSE_TIMEOUT if deadline is None else deadline)
            if link.local_state is CLOSED or connection.is_closed:
                self._closed = True
                return None
        self._ending(self._detach_cause(), "sender")  # the detach drops what still waits (§2.6.4)
        link.detach(closed=closed, error=error)
        connection._kick()
        return link

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def _write_backlog(self, link: EngineLink, deadline: float) -> None:
        """Before a clean detach: the link's transfers still waiting for the peer's session window are written as
        it opens (until ``deadline``, an :func:`anyio.current_time`); the detach dropped them (§2.6.4: nothing of
        a link goes after its detach), and at-most-once messages submit() had taken were lost without a word."""
        connection = self.connection
        session = link.session
        with anyio.CancelScope(deadline=deadline):
            while (
                session.has_backlog
                and any(delivery.link is link for delivery in session.backlogged_deliveries)
                and link.local_state is ACTIVE
                and not connection.is_closed
                and not connection._reconnecting
            ):
                await connection._wait_state()


def hand_dropped(dropped: Sequence[EngineDelivery], what: str) -> None:
    """Hand the deliveries an ending of ``what`` (a sender, a session, the connection) cut short, as its event names
    them (:attr:`LinkDetached.dropped <amqp_async.protocol.events.LinkDetached.dropped>`), to their links'
    :meth:`_Link._on_dropped`, before the event fails what waits on them."""
    by_link: dict[EngineLink, list[EngineDelivery]] = {}
    for delivery in dropped:
        by_link.setdefault(delivery.link, []).append(delivery)
    for link, deliveries in by_link.items():
        owner = link.user_data
        if isinstance(owner, _Link):
            owner._on_dropped(deliveries, what)


def _attach_refusal(error: LocalProtocolError) -> LinkError:
    """What an open raises when our engine cannot attach the link (no free handle: the session's handle-max,
    §2.7.2, is reached; or the session has ended): a :class:`LinkError` with the engine's condition."""
    return LinkError(error.description or "", condition=str(error.condition))


class SendManyError(AMQPError):
    """Messages of a :meth:`Sender.send_many` batch were not accepted (or not sent): every message's result is
    kept, in order, so that none is lost track of.

    The condition and description are those of the first failure; the description also counts them.

    Attributes:
        results: one entry per message, in the order given: its outcome (as ``send()`` returns it) when it was
            accepted, else the error: a :class:`~amqp_async.DeliveryError` (``MessageRejected``,
            ``MessageReleased``, ``MessageModified``, or ``DeliveryInDoubt`` when the connection or link ended
            before its outcome came), or, for a message never transferred, the error that kept it back: the
            engine's refusal of that message (e.g. ``amqp:link:message-size-exceeded``; the batch goes on), or the
            error of the link or connection that failed midway (a ``LinkError`` or ``ConnectionError``; the rest
            are not sent), or for a message handed over but never written (it waited for the peer's session window
            when the link, session or connection ended) the error :meth:`Sender.send` names for that. A message
            never transferred is safe to send again.
        errors: ``(index, error)`` for each message that failed, in order.
        outcomes: the outcomes of the messages that were accepted, by index.
    """

    def __init__(self, results: list[Accepted | AMQPError | None]) -> None:
        self.results = results
        self.errors: list[tuple[int, AMQPError]] = [
            (index, result) for index, result in enumerate(results) if isinstance(result, AMQPError)
        ]
        self.outcomes: dict[int, Accepted | None] = {
            index: result for index, result in enumerate(results) if not isinstance(result, AMQPError)
        }
        index, first = self.errors[0]
        super().__init__(
            f"{len(self.errors)} of {len(results)} messages failed; the first, #{index}: {first}",
            condition=first.condition,
            info=first.info,
        )


class Sender(_Link, Generic[_R]):
    """Sends messages on one link. Get one with :meth:`Connection.open_sender` or :meth:`Session.open_sender`.

    ``Sender[Accepted]`` (plain ``Sender``) is a confirmed sender: :meth:`send` returns ``Accepted()`` once the
    peer accepted the message, and raises otherwise; ``Sender[None]`` (``delivery="at-most-once"``) sends
    settled messages, and :meth:`send` returns None once the transfer is written.

    Safe to share between tasks: concurrent :meth:`send` calls each wait for credit and are transferred in turn.

    Attributes:
        name: the link's name.
        target: the target address it was opened with (None: anonymous; :attr:`address` for the one in use).
        session: its session; connection: its connection.
    """

    _engine_link: SenderLink
    #: delivery states besides the four outcomes (§3.4) that end a transfer on this link: a transaction
    #: controller's declared (§4.5.3); any other fails the send with amqp:invalid-field.
    _more_outcomes: tuple[type, ...] = ()

    def __init__(self, session: Session, options: SenderOptions) -> None:
        super().__init__(session, options.link_name(session.connection.container_id, "sender"))
        self._options = options
        self.target: str | None = options.address
        self._pending: set[Tracker[_R]] = set()
        self._tracing: MessageTracing | None = self.connection._tracing
        self._turns: deque[anyio.Event] = deque()  # the sends waiting for credit, first come first

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

    def _dynamic_node_unnamed(self) -> bool:
        # §3.5.4: "The address of the target MUST be set when sent on a attach frame sent by the receiving link
        # endpoint where the dynamic flag is set to true"
        return bool(self._options.target.dynamic) and not getattr(self._engine_link.remote_target, "address", None)

    def _describe(self) -> str:
        if self._options.target.dynamic:
            return "dynamic sender (a node the peer makes)"
        return f"sender to {self.target!r}" if self.target else "sender with no target (the anonymous relay)"

    def _attach_arguments(self) -> dict[str, Any]:
        return self._options.attach_arguments()

    async def _attach(self) -> None:
        engine_session = self.session._engine_session
        assert engine_session is not None
        try:
            self._engine_link = engine_session.attach_sender(self.name, **self._attach_arguments())
        except LocalProtocolError as error:
            raise _attach_refusal(error) from None
        self._engine_link.user_data = self
        await self._wait_attached()

    def _restore(self, engine_session: EngineSession) -> None:
        self._engine_link = engine_session.attach_sender(self.name, **self._attach_arguments())
        self._engine_link.user_data = self

    def _on_event(self, event: Any) -> None:
        if isinstance(event, ev.LinkDetached):
            self._on_detached(event)
            cause = self._detach_cause()
            # the peer's detach (or ours, answered) dropped what waited for the session window (§2.6.4)
            self._fail_unwritten(cause, "sender")
            self._doubt_pending(f"the link was detached before the outcome was known: {cause.description}", cause)
        elif isinstance(event, ev.FlowReceived):
            link = self._engine_link
            if link.drain and link.credit > 0 and not self._waiting:
                link.drained()  # §2.6.7: nothing to send now: give the credit back
                self.connection._kick()

    def _on_transport_lost(self) -> None:
        loss = self.connection._loss
        if loss is not None:
            self._fail_unwritten(loss, "connection")
        self._doubt_pending(
            f"the connection to {self.connection.address} was lost before the outcome was known; the message may "
            "have arrived or not",
            loss,
        )

    def _on_connection_failed(self, error: AMQPError | None) -> None:
        super()._on_connection_failed(error)
        if error is not None:
            self._fail_unwritten(error, "connection")
        self._doubt_pending(
            f"the connection to {self.connection.address} ended before the outcome was known: {error}", error
        )

    def _on_session_ended(self, error: AMQPError | None) -> None:
        super()._on_session_ended(error)
        cause = session_ended_cause(error, self.session._closing)  # the peer's condition, or our close
        self._fail_unwritten(cause, "session")  # the end dropped what waited for the session window (§2.5.6)
        self._doubt_pending(session_ended_reason(cause), cause)

    def _doubt_pending(self, reason: str, cause: BaseException | None = None) -> None:
        pending = self._pending
        self._pending = set()
        for tracker in pending:
            tracker._in_doubt(reason, cause)

    def _fail_unwritten(self, cause: AMQPError, what: str) -> None:
        """Fail the trackers of messages none of whose frames was written (they waited whole for the peer's session
        window, §2.5.6) with :func:`~._unwritten.not_sent_error`: never sent, so safe to send again, where
        ``DeliveryInDoubt`` (kept for those written whole) left the application guessing; and so those whose last
        frame the ending dropped (never sent whole, see :func:`~._unwritten.fail_unwritten`). Called when the
        engine drops them (our detach, end or close; the peer's) or loses them (the transport went)."""
        if self._pending:
            fail_unwritten(self._pending, cause, what)

    def _ending(self, cause: AMQPError, what: str) -> None:
        link: SenderLink | None = getattr(self, "_engine_link", None)  # None: never attached
        if link is not None:
            self._on_dropped(link.session.incomplete_deliveries(link), what)  # what our ending is about to drop
        super()._ending(cause, what)

    _waiting = 0

    async def submit(self, message: Sendable, *, transaction: Transaction | None = None) -> Tracker[_R]:
        """Wait for credit, transfer the message, and return a :class:`Tracker` of its outcome.

        ``message`` is a :class:`Message` or already encoded message bytes. An anonymous sender (target None)
        routes by ``message.address``. With ``transaction``, the message is sent within it (§4.4.1): it reaches
        its node only if the transaction commits.

        Cancellation: cancelled while it waits for credit, nothing was sent. Once it returns, the message is on
        its way; cancelling ``await tracker`` leaves the outcome to be learned from the tracker later.

        Raises:
            TypeError: ``message`` is neither a Message nor bytes (the error names what it is).
            TransactionError, LinkError, ConnectionError: as for :meth:`send`.
        """
        tracker = self._transfer_now(message) if transaction is None else None
        if tracker is None:
            tracker = await self._transfer(message, transaction)
        driver = self.connection._driver
        if driver is not None:
            if tracker._sender is not None and len(self._pending) <= 1:
                # The only message in flight on the link (a request, say, whose reply the caller awaits next):
                # written now when the socket takes it, with whatever else is queued (an accept before it), rather
                # than at the writer's turn. A window of submits, and at-most-once ones (nothing is in flight to
                # tell), are left to the writer, which writes them together.
                driver.write_eagerly()
            elif driver.kick_streaming():
                # A chunk waits and only the writer task can write it: let it (the message is handed over
                # already, so no cancellation here).
                await anyio.lowlevel.cancel_shielded_checkpoint()
        return tracker

    def _transfer_now(self, message: Sendable) -> Tracker[_R] | None:
        """:meth:`_transfer` without a coroutine, for the common case: a :class:`Message` (not traced, outside a
        transaction) on a link with credit and room in the output, handed to the engine at once. None when the case
        is any other (nothing done then: :meth:`_transfer` takes it)."""
        link = self._engine_link
        connection = self.connection
        engine = connection._engine
        if (
            message.__class__ is not Message
            or self._tracing is not None
            or link.link_credit <= 0
            or self._waiting
            or connection._reconnecting
            or engine is None
            or engine.output_buffered > _OUTPUT_HIGH_WATER
            or self._error is not None
            or self._closed
            or connection._error is not None
        ):
            return None
        return self._hand_over(link, message._encode_payload(), None)

    async def _transfer(
        self,
        message: Sendable,
        transaction: Transaction | None = None,
        traced: bool = True,
    ) -> Tracker[_R]:
        """Wait for credit and hand the message to the engine, without waking the writer (the caller does)."""
        if self._tracing is not None and traced and isinstance(message, Message):
            return await self._traced_transfer(message, transaction)
        if isinstance(message, Message):
            payload = message._encode_payload()
        elif isinstance(message, (bytes, bytearray, memoryview)):
            payload = bytes(message)
        else:
            raise _not_a_message(message)
        if transaction is not None:
            check_transaction(transaction, self.connection)
            transaction._require_active()
        link = self._engine_link
        connection = self.connection
        if (
            link.link_credit <= 0
            or self._waiting
            or connection._reconnecting
            or connection._engine is None
            or connection._engine.output_buffered > _OUTPUT_HIGH_WATER
        ):
            await self._wait_for_credit()
            link = self._engine_link
        elif self._error is not None or self._closed or connection._error is not None:
            self._check()
        return self._hand_over(link, payload, transaction)

    def _hand_over(self, link: SenderLink, payload: bytes | Gathered, transaction: Transaction | None) -> Tracker[_R]:
        """Send ``payload`` on ``link`` (credit checked) and track its delivery."""
        connection = self.connection
        if get_ident() != connection._thread:
            check_thread(connection)  # another thread than the connection's loop: refused
        try:
            if transaction is None:
                delivery = link.send(payload)
            else:
                # checked after the wait for credit: the transaction may have ended meanwhile
                delivery = link.send(payload, state=transaction._transfer_state())
        except LocalProtocolError as error:
            self._check()  # the link, session or connection ended: raise what ended it
            raise refusal(error) from None
        tracker: Tracker[_R]
        if delivery.settled:
            tracker = Tracker(None, delivery)
            tracker._finish(None, None)
        else:
            tracker = Tracker(self, delivery)
            delivery.user_data = tracker
            self._pending.add(tracker)
        return tracker

    async def _traced_transfer(self, message: Message, transaction: Transaction | None) -> Tracker[_R]:
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
        traced: Tracker[_R] = _TracedTracker(self, delivery, tracing, span, size)
        delivery.user_data = traced
        self._pending.discard(tracker)
        self._pending.add(traced)
        return traced

    async def _wait_for_credit(self) -> None:
        """Wait until the link (the new one, while reconnecting) has credit and the output is below the high
        water mark, and it is this call's turn.

        Waiting sends take the credit in the order they came (``_turns``). All of them used to wake at each change,
        and the scheduler ran them in an order of its own (trio's in none at all): the first to run took the credit
        and a burst of messages went out shuffled. Now only the first in line waits for credit; each of the others
        waits for its turn, given by the one before as it leaves (one wake-up each, however many wait). A send
        arriving while others wait queues behind them (``_transfer_now`` and ``_transfer`` take the short way only
        when no one waits).
        """
        connection = self.connection
        turns = self._turns
        turn = anyio.Event()  # set by the send before this one in line, as it leaves
        turns.append(turn)
        self._waiting += 1
        try:
            if turns[0] is not turn:
                await turn.wait()
            while True:
                self._check()
                link = self._engine_link
                # While reconnecting, the old link is dead: wait for the new one (attached by _restore).
                ready = link.remote_state is ACTIVE and not connection._reconnecting
                if link.link_credit > 0 and ready:
                    await connection._wait_writable()
                    if link.link_credit > 0 and link is self._engine_link and not connection._reconnecting:
                        return
                    continue  # no credit left, or the connection was lost meanwhile: wait again
                await connection._wait_state()
        finally:
            self._waiting -= 1
            first = turns[0] is turn
            turns.remove(turn)  # the first in line (popped), or one cancelled while others were ahead
            if first and turns:
                turns[0].set()

    @property
    def unsettled(self) -> list[Tracker[_R]]:
        """The trackers of messages sent and not settled yet (their outcome is still to come).

        A ``send()`` cancelled while it waited for the outcome leaves its tracker here: ``await`` it to learn the
        outcome, or find it in doubt after a connection loss.
        """
        return list(self._pending)

    async def send(self, message: Sendable, *, transaction: Transaction | None = None) -> _R:
        """Send a message and wait for its outcome.

        ``message`` is a :class:`Message` (``Message(body=...)``, ``Message.from_json(...)``) or the bytes of an
        encoded one (``Message.encode()``). With ``transaction`` (a declared :class:`~amqp_async.Transaction` of
        this connection), the message is sent within it (§4.4.1): its node gets it only if the transaction
        commits; the outcome returned is the provisional one the receiver gave within the transaction.

        It waits for credit, then for the outcome, as long as the peer takes: a peer that keeps the connection alive
        but grants no credit (a broker's flow control) or gives no outcome holds it, with the default settings too
        (docs/client.md, "Defaults and their bounds"). Bound it with a cancel scope (``with anyio.fail_after(5):``):
        cancelled while it waits for credit, nothing was sent; cancelled after the transfer, the message is on its
        way, and its tracker stays in :attr:`unsettled` until the outcome comes.

        Returns:
            The outcome (``Accepted()``); on an at-most-once sender (``Sender[None]``), None once the transfer is
            written whole, its last frame too (to the socket: one waiting for the peer's session window, §2.5.6,
            waits with it; if the sender, its session or connection ends first, the error below that says it was
            never sent, or never sent whole).

        Raises:
            TypeError: ``message`` is neither a Message nor bytes (the error names what it is).
            TransactionError: ``transaction`` is not active (committed, rolled back, or its connection ended).
            MessageRejected, MessageReleased, MessageModified: the receiver did not accept it.
            DeliveryInDoubt: the connection or link ended before the outcome was known, after all of the message
                was written: it may have arrived or not.
            ClosedByApplication, ConnectionLost, ConnectionClosed, SessionError, LinkDetached: the sender, its
                session or its connection ended (closed by the application, lost, or closed, ended or detached by
                the peer) before any byte of the message was written, or before its last frame was (it waited for
                the peer's session window, §2.5.6; a receiver drops a message it did not get whole, §2.6.14): it
                was never sent, and may be sent again. The condition is the one that ended it; the description says
                "never sent" ("never sent whole").
            LinkError, ConnectionError: the link or connection failed.
        """
        tracker = self._transfer_now(message) if transaction is None else None
        if tracker is None:
            tracker = await self._transfer(message, transaction)
        connection = self.connection
        connection._write_eagerly()  # the caller waits on this transfer: it need not wait for the writer's turn
        if tracker._sender is None:  # settled on sending (at-most-once): done once it is written whole
            delivery = tracker.delivery
            if delivery is not None and not delivery.written_whole:  # (one frame, window open: written already)
                await self._wait_written(delivery)
            await connection._wait_flushed()
            return None  # type: ignore[return-value]  # _R is None on an at-most-once sender
        return await tracker

    async def _wait_written(self, delivery: EngineDelivery) -> None:
        """An at-most-once message waiting for the peer's session window (§2.5.6): wait until its last transfer
        frame goes out (send() returned once the first was written, and an ending then dropped the rest: only a
        warning said so), or raise what dropped it, saying it was never sent, or never sent whole
        (:func:`~._unwritten.not_sent_error`): a message of several frames is whole only with its last (§2.6.14).
        Woken by each change of state (the peer's flow opens the window), it reads one flag the engine sets
        (:attr:`Delivery.written_whole <amqp_async.protocol.delivery.Delivery.written_whole>`), never scans the
        session's queue. Cancelled, the message stays queued: it goes out as the window opens."""
        connection = self.connection
        link = delivery.link
        while not delivery.written_whole:
            if (
                link is not self._engine_link
                or link.local_state is not ACTIVE
                or link.session.local_state is not ACTIVE
                or connection.is_closed
                or connection._reconnecting
            ):
                raise self._dropped_error(partly=delivery.written)
            await connection._wait_state()

    def _dropped_error(self, *, partly: bool = False) -> AMQPError:
        """The error of an at-most-once message its link's, session's or connection's ending dropped unwritten (or,
        ``partly``, after its first frames)."""
        try:
            self._check()
            cause = self.connection._loss or self._detach_cause()
        except AMQPError as exc:
            cause = exc
        return not_sent_error(cause, ending_named(cause), partly=partly)

    async def send_many(self, messages: Iterable[Sendable], *, transaction: Transaction | None = None) -> list[_R]:
        """Send messages pipelined (each transferred as soon as there is credit, without waiting for the outcome
        of the ones before), and wait until every one is settled.

        Returns:
            The outcomes, in the order of ``messages``: ``Accepted()`` each (None each on an at-most-once sender,
            once all are written).

        Raises:
            TypeError: one of ``messages`` is neither a Message nor bytes; raised before anything is sent.
            SendManyError: some messages were not accepted, or not sent at all: its ``results`` hold, in order,
                the outcome of each message that was accepted and the error of each that was not (rejected,
                released, modified, in doubt, or never transferred). It is raised once every message sent has its
                outcome.
            LinkError, ConnectionError, TransactionError: nothing could be sent (the link or connection is gone,
                the transaction is not active).

        Cancellation: messages not transferred yet are not sent; the trackers of those sent stay in
        :attr:`unsettled`.
        """
        batch = list(messages)
        for message in batch:
            if not isinstance(message, (Message, bytes, bytearray, memoryview)):
                raise _not_a_message(message)
        sent: list[Tracker[_R] | AMQPError] = []
        connection = self.connection
        for message in batch:
            try:
                sent.append(await self._transfer(message, transaction))
            except AMQPError as exc:
                if not (self.is_closed or connection.is_closed):
                    sent.append(exc)  # refused for itself (e.g. larger than the peer's max-message-size): go on
                    continue
                if not sent:
                    raise  # the link or connection is gone and nothing was sent: the error is the call's
                sent.extend([exc] * (len(batch) - len(sent)))  # the rest are not sent
                break
            driver = connection._driver
            if driver is not None and driver.kick_streaming():
                await anyio.lowlevel.cancel_shielded_checkpoint()  # for the writer (as in submit)
        results: list[Accepted | AMQPError | None] = []
        failed = False
        unconfirmed = False
        for tracker in sent:
            if isinstance(tracker, AMQPError):
                results.append(tracker)
                failed = True
            elif tracker._sender is None:  # at-most-once: nothing to wait for
                results.append(None)
                unconfirmed = True
            else:
                try:
                    results.append(await tracker)  # type: ignore[arg-type]  # _R is Accepted on a confirmed sender
                except AMQPError as exc:  # refused, in doubt, or never sent (not_sent_error)
                    results.append(exc)
                    failed = True
        if unconfirmed:
            for index, tracker in enumerate(sent):
                if isinstance(tracker, AMQPError) or tracker._sender is not None:
                    continue
                delivery = tracker.delivery
                if delivery is not None and not delivery.written_whole:
                    try:
                        await self._wait_written(delivery)  # (as send(): written whole, or dropped and never sent)
                    except AMQPError as exc:
                        results[index] = exc
                        failed = True
            await connection._wait_flushed()  # at-most-once: done once all are written
        if failed:
            raise SendManyError(results)
        return results  # type: ignore[return-value]  # no error among them: each is an outcome (_R)

    async def __aenter__(self) -> Sender[_R]:
        return self

    def __repr__(self) -> str:
        return f"<amqp_async.Sender {self.name!r} to {self.address!r}>"


class _ReceivingLink(_Link):
    """What :class:`Receiver` and :class:`~amqp_async.StreamReceiver` share: the source, the credit kept granted
    (``credit=N``: topped up as deliveries are taken, so that at most N messages wait), manual credit."""

    _engine_link: ReceiverLink

    def __init__(self, session: Session, options: ReceiverOptions, kind: str) -> None:
        super().__init__(session, options.link_name(session.connection.container_id, kind))
        self._options = options
        self.source: str | None = options.address
        self._prefetch = options.credit

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
        """Deliveries received and not yet taken (a stream receiver's: at their first frame)."""
        return len(self._engine_link.incoming)

    @property
    def on_error(self) -> OnError:
        """What ``async with delivery:`` does with a delivery of this receiver when its block raises (the
        ``on_error`` option it was opened with): ``"modify"``, ``"release"`` or ``"reject"``."""
        return self._options.on_error

    def _on_event(self, event: Any) -> None:
        if isinstance(event, ev.LinkDetached):
            self._on_detached(event)

    def _dynamic_node_unnamed(self) -> bool:
        # §3.5.3: "The address of the source MUST be set when sent on a attach frame sent by the sending link
        # endpoint where the dynamic flag is set to true"
        return bool(self._options.source.dynamic) and not getattr(self._engine_link.remote_source, "address", None)

    def _top_up(self) -> None:
        link = self._engine_link
        prefetch = self._prefetch
        queued = len(link.incoming)
        if link.link_credit + queued <= prefetch >> 1 and prefetch and link.local_state is ACTIVE:
            # Once half the prefetch is taken (what the sender may still send plus what waits here is down to half),
            # top the credit up so that the two make ``prefetch`` again: memory stays bounded by it, and a flow
            # goes out once per half a prefetch of messages, not once per message (RabbitMQ before 4.0 adds each
            # flow's credit to what it still holds, rabbitmq-server#2597: frequent flows make it overshoot more).
            connection = self.connection
            if get_ident() != connection._thread:
                check_thread(connection)  # another thread than the connection's loop: refused
            link.grant_credit(prefetch - queued)
            # Written now: the sender may have run out of credit, and the application may take the deliveries
            # queued before its next await that suspends (woken, the writer would run only then).
            self.connection._write_soon()

    async def detach(self) -> None:
        """Detach the link without closing it (closed=false, §2.6.4: the peer keeps its terminus for a later attach
        of the same link name), wait for the peer's detach as :meth:`close` does, and leave the receiver closed
        (idempotent; a :meth:`close` after it sends nothing more).

        Use it to step away from a durable subscription (``durable=True, expiry_policy="never"``) and come back to
        it with a receiver of the same ``name`` on a connection with the same ``container_id``: the messages
        published meanwhile wait there. :meth:`close` ends the link, and the brokers that follow §2.6.6 (the
        embedded one, ActiveMQ Artemis, Qpid Broker-J; JMS's ``unsubscribe`` relies on it) delete the subscription
        with it. The deliveries not settled yet are left to the peer, as at a close (the embedded broker offers
        them again). A stream receiver on a session of its own ends that session too. A peer may answer with
        closed=true: it has closed its end of the link.
        """
        await self._leave(None, closed=False)

    def add_credit(self, credit: int) -> None:
        """Grant ``credit`` more messages (for a receiver opened with ``credit=0``: manual flow control).

        Raises:
            TypeError: ``credit`` is not an int.
            ValueError: it is negative, or would make the link's credit more than 2**32 - 1.
            LinkError, SessionError, ConnectionError: the link, session or connection has ended.
        """
        self._check()
        link = self._engine_link
        link.add_credit(check_credit(credit, link.link_credit))
        self.connection._kick()

    def _on_transport_lost(self) -> None:
        """The connection dropped: the deliveries queued on the lost link and not handed out yet are dropped, but
        those the sender settled (at-most-once: it will not send them again).

        §2.6.13: a new link resumes none of the old one's deliveries, and the peer delivers the unsettled ones
        again on it. Handed out, each failed its settlement (``LinkDetached``) after the application had handled
        it, and came again: a receiver's whole prefetch (``credit``, 100 by default) was handled twice per outage.
        """
        link = self._engine_link
        kept = [delivery for delivery in link.incoming if delivery.remote_settled and not delivery.aborted]
        link.incoming.clear()
        link.incoming.extend(kept)


class Receiver(_ReceivingLink):
    """Receives messages on one link. Get one with :meth:`Connection.open_receiver` or :meth:`Session.open_receiver`.

    ``async for delivery in receiver`` yields :class:`Delivery` objects until the application closes the receiver,
    its session or its connection, or the peer closes the link without an error; it raises :class:`LinkError`
    when the peer detaches it with one, and the connection's error when the connection fails. With ``credit=N``
    (default 100) the receiver keeps N messages' credit granted, topped up as deliveries are taken: at most N
    messages are ever buffered.

    Attributes:
        name: the link's name.
        source: the source address it was opened with (:attr:`address` for the one in use).
        session: its session; connection: its connection.
    """

    def __init__(self, session: Session, options: ReceiverOptions) -> None:
        super().__init__(session, options, "receiver")
        self._tracing: MessageTracing | None = self.connection._tracing

    def _describe(self) -> str:
        if self._options.source.dynamic:
            return "dynamic receiver (a node the peer makes)"
        return f"receiver from {self.source!r}"

    def _attach_arguments(self) -> dict[str, Any]:
        return self._options.attach_arguments()

    async def _attach(self) -> None:
        engine_session = self.session._engine_session
        assert engine_session is not None
        try:
            self._engine_link = engine_session.attach_receiver(self.name, **self._attach_arguments())
        except LocalProtocolError as error:
            raise _attach_refusal(error) from None
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

    async def drain(self, *, timeout: float | _Default | None = _DEFAULT) -> None:
        """Ask the sender to use up or give back all credit now (§2.6.7 drain), and wait until it has, and until
        the messages it sent are whole in the queue (the last credit is used at a message's first frame). A
        receiver with a prefetch (``credit=N``) then has its credit topped up again, as after a receive.

        Args:
            timeout: the seconds to wait for the sender's answer (default: the connection's ``drain_timeout``,
                60 s unless ``connect()`` said otherwise); None waits as long as it takes.

        Raises:
            LinkTimeout: the sender did not answer within ``timeout`` (also the builtin TimeoutError). Some peers
                never answer a drain (Qpid Proton's C broker example). The drain is then withdrawn (a flow with
                drain false, §2.6.7) and the link stays attached: the sender keeps the credit, and messages may
                still come for it.
            LinkError, SessionError, ConnectionError: the link, session or connection ended instead.
        """
        self._check()
        limit = self.connection._options.drain_timeout if isinstance(timeout, _Default) else _timeout(timeout)
        link = self._engine_link
        if link.link_credit <= 0 and link.partial is None and not link.drain:
            # No credit left, no message part-way in: nothing to drain. Asked anyway, a sender that answers a drain
            # only when it has credit to give back (Qpid Proton's pn_link_drained) says nothing: LinkTimeout.
            self._top_up()
            return
        link.grant_credit(link.link_credit, drain=True)
        connection = self.connection
        connection._kick()
        with anyio.move_on_after(math.inf if limit is None else limit):
            while True:
                self._check()  # the link, its session or the connection may have ended instead of draining
                if link is not self._engine_link:
                    return  # reconnected meanwhile: the old link's credit went with it
                # The last credit is used at a message's first frame, where the engine's drain ends: that message
                # is still to come whole (not on a streaming link, whose deliveries are handed over at their first
                # frame and read as they come).
                whole = link.partial is None or link.streaming or link.local_state is not ACTIVE
                if not (link.drain and link.local_state is ACTIVE) and not connection._reconnecting and whole:
                    # A prefetch is kept topped up (credit=N): the drain took it all, and with nothing queued no
                    # receive would ever top it up again (receive() waited for ever, messages at the broker).
                    self._top_up()
                    return
                await connection._wait_state()
        if link is self._engine_link and link.drain and link.local_state is ACTIVE and not connection.is_closed:
            link.grant_credit(link.link_credit, drain=False)
            connection._kick()
        raise LinkTimeout(f"the sender did not answer the drain of the {self._describe()} within {limit} s")

    def receive_nowait(self) -> Delivery | None:
        """Take the next delivery if one is queued, else None (never waits).

        Raises:
            RuntimeError: called from another thread than the connection's (nothing is taken).
            ClosedByApplication: the receiver, its session or its connection was closed.
        """
        if get_ident() != self.connection._thread:
            check_thread(self.connection)  # refused before anything is taken off the queue
        incoming = self._engine_link.incoming
        if incoming and incoming[0].aborted:
            while incoming and incoming[0].aborted:
                incoming.popleft()  # aborted by the sender (§2.6.14): no message, and settled
            self._top_up()  # (their credit was used)
        if not incoming:
            return None
        if self._detaching or self.session._closing or self.connection._closing:
            self._check()  # ClosedByApplication, as receive() raises it: nothing is handed out after a close
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
            RuntimeError: called from another thread than the connection's (nothing is taken).
        """
        if get_ident() != self.connection._thread:
            check_thread(self.connection)  # refused before anything is taken off the queue
        while True:
            incoming = self._engine_link.incoming
            if incoming:
                # _closed_by_application inline (once per message)
                if self._detaching or self.session._closing or self.connection._closing:
                    self._check()  # ClosedByApplication: what is queued is not handed out after a close
                engine_delivery = incoming.popleft()
                if engine_delivery.aborted:
                    self._top_up()
                    continue  # aborted by the sender (§2.6.14): no message, and settled
                tracing = self._tracing
                if tracing is None:
                    delivery = Delivery(self, engine_delivery)
                else:
                    delivery = tracing.delivery(self, engine_delivery)
                self._top_up()
                return delivery
            self._check()
            await self.connection._wait_deliveries()

    async def receive_many(self, max_count: int, *, timeout: float | None = None) -> list[Delivery]:
        """Take up to ``max_count`` deliveries: those queued at once, then those that arrive, until there are
        ``max_count`` or ``timeout`` seconds have passed; then return what there is, possibly nothing (an empty
        list). ``timeout=None`` waits for ``max_count``.

        Credit stays bounded: a receiver with a prefetch (``credit=N``) keeps its N; one with manual credit
        (``credit=0``) is granted what it lacks for ``max_count`` (credit plus queued deliveries), and keeps what
        remains granted once it returns (at most ``max_count`` deliveries more may arrive for a later call).

        Like :meth:`receive`, it never loses a delivery: a cancelled call leaves the ones not returned queued
        (more than a prefetch, then: no credit is granted until the queue is down to it).
        Once some deliveries are taken, an error of the link or connection ends the call with them (the next
        call raises it); with none taken it raises, as :meth:`receive` does.

        Raises:
            TypeError: ``max_count`` is not an int, or ``timeout`` not a number.
            ValueError: ``max_count`` is below 1, or ``timeout`` below 0 (or NaN).
            LinkDetached: the link was detached (without error) and no delivery is left.
            LinkError, SessionError, ConnectionError: the link, session or connection failed.
        """
        if get_ident() != self.connection._thread:
            check_thread(self.connection)  # refused before anything is taken off the queue
        if isinstance(max_count, bool) or not isinstance(max_count, int):
            raise TypeError(f"max_count must be an int, not {type(max_count).__name__}")
        if max_count < 1:
            raise ValueError(f"max_count must be at least 1, got {max_count!r}")
        if timeout is not None:  # 0 is a timeout here: what is queued now, without waiting
            if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
                raise TypeError(f"timeout must be a number of seconds or None, not {type(timeout).__name__}")
            if not timeout >= 0:
                raise ValueError(f"timeout must be >= 0 seconds (or None: no limit), not {timeout!r}")
        link = self._engine_link
        if not self._prefetch and link.local_state is ACTIVE:
            wanted = max_count - len(link.incoming) - link.link_credit
            if wanted > 0:
                try:
                    self.add_credit(wanted)
                except AMQPError:
                    pass  # the link is gone: what is queued is still returned, and receive() raises after it
        # Deliveries are taken off the queue as they come (a prefetch smaller than max_count is topped up as it
        # drains) and made Delivery objects only on the way out: a cancellation puts the ones taken back at the
        # head of their queue, in order, with nothing handed out (no receive span started for them).
        taken: list[EngineDelivery] = []
        self._take_queued(taken, max_count)
        if len(taken) < max_count:
            try:
                with anyio.move_on_after(math.inf if timeout is None else timeout):
                    while True:
                        try:
                            if self._detaching or self.session._closing or self.connection._closing:
                                self._check()  # ClosedByApplication, as receive() raises it
                            self._take_queued(taken, max_count)
                            if len(taken) == max_count:
                                break
                            self._check()
                        except AMQPError:
                            if taken:
                                break  # the next call raises it
                            raise
                        await self.connection._wait_deliveries()
            except BaseException:
                for delivery in reversed(taken):
                    cast("ReceiverLink", delivery.link).incoming.appendleft(delivery)
                self._lower_credit_to_prefetch()
                raise
        tracing = self._tracing
        if tracing is None:
            return [Delivery(self, delivery) for delivery in taken]
        return [tracing.delivery(self, delivery) for delivery in taken]

    def _lower_credit_to_prefetch(self) -> None:
        """The deliveries a cancelled receive_many took are queued again, and the credit it topped up for them
        would buffer that many more than the prefetch: lowered so that credit and queue make the prefetch
        (§2.6.7: the receiver may lower the credit it gave; what the sender sent meanwhile still comes)."""
        link = self._engine_link
        prefetch = self._prefetch
        if not prefetch or link.local_state is not ACTIVE or link is not self._engine_link or link.drain:
            return
        wanted = max(0, prefetch - len(link.incoming))
        if link.link_credit > wanted:
            link.grant_credit(wanted)
            self.connection._kick()

    def _take_queued(self, taken: list[EngineDelivery], max_count: int) -> None:
        incoming = self._engine_link.incoming
        if not incoming:
            return
        while incoming and len(taken) < max_count:
            delivery = incoming.popleft()
            if not delivery.aborted:  # aborted by the sender (§2.6.14): no message, and settled
                taken.append(delivery)
        self._top_up()

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
