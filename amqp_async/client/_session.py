"""Sessions of the awaitable API; each owns its senders and receivers."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, overload

import anyio

from ..codec.delivery_states import Accepted
from ..codec.performatives import Error
from ..codec.terminus import Source, Target
from ..errors import AMQPError, ClosedByApplication, ConnectionError, SessionError
from ..protocol import events as ev
from ..protocol.endpoint import EndpointState
from ._link_options import (
    DeliveryMode,
    DistributionMode,
    ExpiryPolicy,
    OnError,
    Outcome,
    ReceiverOptions,
    SenderOptions,
    receiver_options,
    sender_options,
)
from ._links import Receiver, Sender
from ._opening import Opening

if TYPE_CHECKING:
    from ..protocol.session import Session as EngineSession
    from ._connection import Connection

__all__ = ["Session"]


class Session:
    """A session (§2.5) of a :class:`Connection`; get one with :meth:`Connection.open_session`.

    An async context manager: leaving it ends the session (and its links).
    """

    def __init__(self, connection: Connection, options: dict[str, Any]) -> None:
        #: The connection the session belongs to.
        self.connection = connection
        self._options = options
        self._engine_session: EngineSession | None = None
        self._links: list[Sender | Receiver] = []
        self._error: AMQPError | None = None
        self._ended = False
        self._closing = False  # close() was called: our own end is no error

    @property
    def is_closed(self) -> bool:
        """True once the session has ended (or its connection is gone)."""
        return self._ended or self._error is not None

    def _check(self) -> None:
        self.connection._check()
        if self._error is not None:
            raise self._error
        if self._ended:
            if self._closing:
                raise ClosedByApplication("the session was closed by the application")
            raise SessionError("the session has ended")

    async def _begin(self) -> None:
        connection = self.connection
        engine_session = connection.engine.begin_session(**self._options)
        engine_session.user_data = self
        self._engine_session = engine_session
        connection._kick()
        # Read again on each wake-up: a reconnect meanwhile begins a new engine session (_restore).
        while self._engine_session.remote_state is EndpointState.UNINIT:
            self._check()
            await connection._wait_state()
        self._check()

    def _restore(self) -> None:
        """After a reconnect: begin again on the new connection and re-attach every link."""
        engine_session = self.connection.engine.begin_session(**self._options)
        engine_session.user_data = self
        self._engine_session = engine_session
        self._links = [link for link in self._links if not link.is_closed]  # closed links stay closed
        for link in self._links:
            link._restore(engine_session)

    def _on_transport_lost(self) -> None:
        for link in self._links:
            link._on_transport_lost()

    def _on_connection_failed(self, error: AMQPError | None) -> None:
        self._error = error or ConnectionError("the connection closed")
        for link in self._links:
            link._on_connection_failed(self._error)

    def _on_event(self, event: Any) -> None:
        if isinstance(event, ev.SessionEnded):
            self._ended = True
            # The peer's end with an error, or ours because the peer broke the protocol on this session (§2.5.5,
            # e.g. amqp:session:handle-in-use): the error names the condition. Not an end we asked for.
            if event.error is not None and (event.remote or not self._closing):
                self._error = SessionError(
                    event.error.description or "", condition=str(event.error.condition), info=event.error.info
                )
            for link in self._links:
                link._on_session_ended(self._error)

    @overload
    def open_sender(
        self,
        target: str | None,
        *,
        name: str | None = None,
        delivery: Literal["at-most-once"],
        snd_settle_mode: Literal[1] | None = None,
        rcv_settle_mode: Literal[0, 1] | None = None,
        source: str | Source | None = None,
        durable: bool | Literal[0, 1, 2] | None = None,
        expiry_policy: ExpiryPolicy | None = None,
        timeout: int | None = None,
        dynamic: bool = False,
        dynamic_node_properties: Mapping[str, object] | None = None,
        capabilities: str | Sequence[str] | None = None,
        properties: Mapping[str, object] | None = None,
        offered_capabilities: str | Sequence[str] | None = None,
        desired_capabilities: str | Sequence[str] | None = None,
        max_message_size: int | None = None,
        initial_delivery_count: int = 0,
    ) -> Opening[Sender[None]]: ...

    @overload
    def open_sender(
        self,
        target: str | None,
        *,
        name: str | None = None,
        delivery: Literal["at-least-once", "exactly-once"] = "at-least-once",
        snd_settle_mode: Literal[0, 2] | None = None,
        rcv_settle_mode: Literal[0, 1] | None = None,
        source: str | Source | None = None,
        durable: bool | Literal[0, 1, 2] | None = None,
        expiry_policy: ExpiryPolicy | None = None,
        timeout: int | None = None,
        dynamic: bool = False,
        dynamic_node_properties: Mapping[str, object] | None = None,
        capabilities: str | Sequence[str] | None = None,
        properties: Mapping[str, object] | None = None,
        offered_capabilities: str | Sequence[str] | None = None,
        desired_capabilities: str | Sequence[str] | None = None,
        max_message_size: int | None = None,
        initial_delivery_count: int = 0,
    ) -> Opening[Sender[Accepted]]: ...

    def open_sender(
        self,
        target: str | None,
        *,
        name: str | None = None,
        delivery: DeliveryMode = "at-least-once",
        snd_settle_mode: Literal[0, 1, 2] | None = None,
        rcv_settle_mode: Literal[0, 1] | None = None,
        source: str | Source | None = None,
        durable: bool | Literal[0, 1, 2] | None = None,
        expiry_policy: ExpiryPolicy | None = None,
        timeout: int | None = None,
        dynamic: bool = False,
        dynamic_node_properties: Mapping[str, object] | None = None,
        capabilities: str | Sequence[str] | None = None,
        properties: Mapping[str, object] | None = None,
        offered_capabilities: str | Sequence[str] | None = None,
        desired_capabilities: str | Sequence[str] | None = None,
        max_message_size: int | None = None,
        initial_delivery_count: int = 0,
    ) -> Opening[Sender[Any]]:
        """Attach a sender to ``target`` (None: an anonymous sender, routing by each message's address).

        Returns an :class:`Opening`: ``await`` it for the attached :class:`Sender`, or ``async with`` it to have the
        sender closed at the end of the block. The options are checked here, at the call.

        The type of the sender says what :meth:`Sender.send` returns: ``Sender[Accepted]`` (at-least-once and
        exactly-once: the outcome, once the peer settled) or ``Sender[None]`` (at-most-once: nothing to wait for).

        Args:
            target: the target address (§3.5.4).
            name: the link name (default: unique, from the container id).
            delivery: the guarantee (§2.6.12): ``"at-least-once"`` (default), ``"at-most-once"`` (messages sent
                settled), ``"exactly-once"`` (the receiver settles second).
            snd_settle_mode: the sender settle mode (§2.8.2) as a number, instead of what ``delivery`` implies: 2
                (mixed) for a confirmed sender; 1 (settled) only with ``delivery="at-most-once"``.
            rcv_settle_mode: the receiver settle mode (§2.8.3) as a number: 0 (first) or 1 (second).
            source: our source address (or a :class:`~amqp_async.codec.terminus.Source`).
            durable: the target's durability (§3.5.5): 0 (none), 1 (configuration), 2 (unsettled state); True is 2.
            expiry_policy: the target's expiry policy (§3.5.6).
            timeout: the target's expiry timeout, in seconds.
            dynamic: ask the peer to create the target node (§3.5.4); ``dynamic_node_properties`` its properties.
            capabilities: the target's capabilities (symbols; a str is one).
            properties: the link's properties (§2.7.3; str keys are sent as symbols).
            offered_capabilities: the capabilities the link offers (§2.7.3; symbols, a str is one).
            desired_capabilities: the capabilities the link desires of the peer (§2.7.3).
            max_message_size: the largest message we send, in bytes (None: no limit).
            initial_delivery_count: the delivery-count the link starts at (§2.6.7).

        Raises:
            ValueError, TypeError: an option out of its range or of the wrong type (at the call); a keyword no
                option has: TypeError, naming this method.
            LinkError: (when awaited) the peer refused the link (its detach carries the condition, e.g.
                ``amqp:not-found``).
            SessionError, ConnectionError: (when awaited) the session or connection has ended.
        """
        options = sender_options(
            target,
            name=name,
            delivery=delivery,
            snd_settle_mode=snd_settle_mode,
            rcv_settle_mode=rcv_settle_mode,
            source=source,
            durable=durable,
            expiry_policy=expiry_policy,
            timeout=timeout,
            dynamic=dynamic,
            dynamic_node_properties=dynamic_node_properties,
            capabilities=capabilities,
            properties=properties,
            offered_capabilities=offered_capabilities,
            desired_capabilities=desired_capabilities,
            max_message_size=max_message_size,
            initial_delivery_count=initial_delivery_count,
        )
        return Opening(self._attach_sender(options))

    async def _attach_sender(self, options: SenderOptions) -> Sender[Any]:
        self._check()
        sender: Sender[Any] = Sender(self, options)
        self._links.append(sender)
        await sender._attach()
        return sender

    def open_receiver(
        self,
        source: str | None,
        *,
        credit: int = 100,
        name: str | None = None,
        delivery: DeliveryMode = "at-least-once",
        snd_settle_mode: Literal[0, 1, 2] | None = None,
        rcv_settle_mode: Literal[0, 1] | None = None,
        on_error: OnError = "modify",
        dynamic: bool = False,
        dynamic_node_properties: Mapping[str, object] | None = None,
        durable: bool | Literal[0, 1, 2] | None = None,
        expiry_policy: ExpiryPolicy | None = None,
        timeout: int | None = None,
        distribution_mode: DistributionMode | None = None,
        filter: Mapping[str, object] | None = None,  # noqa: A002 - the source's field (§3.5.3)
        selector: str | None = None,
        capabilities: str | Sequence[str] | None = None,
        default_outcome: Outcome | None = None,
        outcomes: Sequence[str] | None = None,
        properties: Mapping[str, object] | None = None,
        offered_capabilities: str | Sequence[str] | None = None,
        desired_capabilities: str | Sequence[str] | None = None,
        max_message_size: int | None = None,
        target: str | Target | None = None,
    ) -> Opening[Receiver]:
        """Attach a receiver from ``source`` (None with ``dynamic=True``: a node the peer creates).

        Returns an :class:`Opening`: ``await`` it for the attached :class:`Receiver`, or ``async with`` it to have
        the receiver closed at the end of the block. The options are checked here, at the call.

        Args:
            source: the source address (§3.5.3).
            credit: the prefetch kept topped up as deliveries are taken (default 100: at most 100 are ever
                buffered); 0 for manual credit with :meth:`Receiver.add_credit`.
            name: the link name (default: unique, from the container id).
            delivery: the guarantee (§2.6.12): ``"at-least-once"`` (default), ``"at-most-once"`` (the sender
                settles first), ``"exactly-once"`` (we settle second).
            snd_settle_mode: the sender settle mode (§2.8.2) as a number (0, 1, 2), instead of what ``delivery``
                implies.
            rcv_settle_mode: the receiver settle mode (§2.8.3) as a number (0 first, 1 second), likewise.
            on_error: what ``async with delivery:`` does when its block raises: ``"modify"`` (default: modified
                with delivery-failed, the attempt counted), ``"release"`` (released, not counted) or ``"reject"``
                (rejected, with the exception as the error; an :class:`~amqp_async.AMQPError` gives its condition).
            dynamic: ask the peer to create the source node (``address`` is then its name);
                ``dynamic_node_properties`` its properties (§3.5.9).
            durable: the source's durability (§3.5.5): 0, 1, 2; True is 2 (a durable subscription).
            expiry_policy: the source's expiry policy (§3.5.6).
            timeout: the source's expiry timeout, in seconds.
            distribution_mode: ``"move"`` (take) or ``"copy"`` (browse), §3.5.7.
            filter: the source's filter set (§3.5.8), e.g. from :func:`~amqp_async.selector`.
            selector: a JMS selector string (added to ``filter``).
            capabilities: the source's capabilities (symbols; a str is one).
            default_outcome: the source's default outcome (``Released()``...); outcomes: the outcomes it supports
                (descriptor symbols).
            properties: the link's properties (§2.7.3; str keys are sent as symbols).
            offered_capabilities: the capabilities the link offers (§2.7.3; symbols, a str is one).
            desired_capabilities: the capabilities the link desires of the peer (§2.7.3).
            max_message_size: the largest message we take, in bytes (None: no limit).
            target: our target address (or a :class:`~amqp_async.codec.terminus.Target`).

        Raises:
            ValueError, TypeError: an option out of its range or of the wrong type (at the call); a keyword no
                option has: TypeError, naming this method.
            LinkError: (when awaited) the peer refused the link.
            SessionError, ConnectionError: (when awaited) the session or connection has ended.
        """
        options = receiver_options(
            source,
            credit=credit,
            name=name,
            delivery=delivery,
            snd_settle_mode=snd_settle_mode,
            rcv_settle_mode=rcv_settle_mode,
            on_error=on_error,
            dynamic=dynamic,
            dynamic_node_properties=dynamic_node_properties,
            durable=durable,
            expiry_policy=expiry_policy,
            timeout=timeout,
            distribution_mode=distribution_mode,
            filter=filter,
            selector=selector,
            capabilities=capabilities,
            default_outcome=default_outcome,
            outcomes=outcomes,
            properties=properties,
            offered_capabilities=offered_capabilities,
            desired_capabilities=desired_capabilities,
            max_message_size=max_message_size,
            target=target,
        )
        return Opening(self._attach_receiver(options))

    async def _attach_receiver(self, options: ReceiverOptions) -> Receiver:
        self._check()
        receiver = Receiver(self, options)
        self._links.append(receiver)
        await receiver._attach()
        return receiver

    async def close(self, error: Error | None = None) -> None:
        """End the session (§2.5.1) and wait for the peer's end (idempotent)."""
        engine_session = self._engine_session
        if self._ended or engine_session is None or self.connection.is_closed:
            self._ended = True
            return
        self._closing = True
        engine_session.end(error)
        self.connection._kick()
        with anyio.move_on_after(10):
            while engine_session.remote_state is EndpointState.ACTIVE and not self.connection.is_closed:
                await self.connection._wait_state()
        self._ended = True

    async def __aenter__(self) -> Session:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
