"""``open_sender`` and ``open_receiver``, one definition shared by :class:`~amqp_async.Session` and
:class:`~amqp_async.Connection` (which attaches on its default session).

The public signatures are long (every link option is an explicit keyword, so that a typo is a type checker's
error and a run-time TypeError naming the method); they live here once, and each class says where its links go
by defining ``_attach_sender`` / ``_attach_receiver``.
"""

from __future__ import annotations

import types
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, overload

from ..codec.delivery_states import Accepted
from ..codec.terminus import Source, Target
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
from ._opening import Opening

if TYPE_CHECKING:
    from ._links import Receiver, Sender
    from ._stream_receiver import StreamReceiver
    from ._stream_sender import StreamSender

#: The bytes of transfer frames a stream sender lets wait for the peer's window (see StreamSender).
DEFAULT_STREAM_SEND_BUFFER = 1 << 20
#: The bytes of frames a stream receiver's own session lets the peer send ahead of the reader.
DEFAULT_STREAM_RECEIVE_BUFFER = 1 << 20
#: The largest message a receiver takes unless told otherwise (``open_receiver``'s ``max_message_size``): a
#: message is held whole before it is handed over, so without a limit a peer could make the process hold any
#: amount (an endless delivery). 128 MiB is RabbitMQ 3's own default limit; larger messages are read in bounded
#: memory with ``open_stream_receiver``, which has no limit by default.
DEFAULT_RECEIVE_MAX_MESSAGE_SIZE = 128 << 20

__all__ = ["LinkOpener"]


class LinkOpener:
    """The methods that open links; a subclass says on which session by defining the two ``_attach_*`` methods."""

    __slots__ = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # Each subclass gets its own function objects, named after it: Python's TypeError for a misspelt keyword
        # names the function's __qualname__, and the user called Connection.open_receiver, not LinkOpener's.
        super().__init_subclass__(**kwargs)
        for name in ("open_sender", "open_receiver", "open_stream_sender", "open_stream_receiver"):
            if name in cls.__dict__:
                continue  # the subclass defines its own
            shared = LinkOpener.__dict__[name]
            own = types.FunctionType(shared.__code__, shared.__globals__, name, shared.__defaults__, shared.__closure__)
            own.__kwdefaults__ = shared.__kwdefaults__
            own.__doc__ = shared.__doc__
            own.__annotations__ = shared.__annotations__
            own.__module__ = cls.__module__
            own.__qualname__ = f"{cls.__qualname__}.{name}"
            setattr(cls, name, own)

    if TYPE_CHECKING:

        async def _attach_sender(self, options: SenderOptions) -> Sender[Any]: ...

        async def _attach_receiver(self, options: ReceiverOptions) -> Receiver: ...

        async def _attach_stream_sender(self, options: SenderOptions, buffer_size: int) -> StreamSender[Any]: ...

        async def _attach_stream_receiver(self, options: ReceiverOptions, buffer_size: int) -> StreamReceiver: ...

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
            max_message_size: the largest message we send, in bytes (None or 0: no limit).
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
        return Opening(self._attach_sender(options), call="open_sender()")

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
        max_message_size: int | None = DEFAULT_RECEIVE_MAX_MESSAGE_SIZE,
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
            max_message_size: the largest message we take, in bytes: announced in the attach (§2.7.3), and a
                larger one detaches the link with ``amqp:link:message-size-exceeded`` (the message is not taken:
                the peer keeps it). Default 128 MiB (:data:`DEFAULT_RECEIVE_MAX_MESSAGE_SIZE`), as a message is held
                whole; None or 0: no limit. Larger messages are read in bounded memory with
                :meth:`open_stream_receiver`.
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
        return Opening(self._attach_receiver(options), call="open_receiver()")

    # --- streams: messages of any size, in bounded memory ------------------------------------------------

    @overload
    def open_stream_sender(
        self,
        target: str | None,
        *,
        buffer_size: int = DEFAULT_STREAM_SEND_BUFFER,
        name: str | None = None,
        delivery: Literal["at-most-once"],
        source: str | Source | None = None,
        durable: bool | Literal[0, 1, 2] | None = None,
        expiry_policy: ExpiryPolicy | None = None,
        timeout: int | None = None,
        capabilities: str | Sequence[str] | None = None,
        properties: Mapping[str, object] | None = None,
        offered_capabilities: str | Sequence[str] | None = None,
        desired_capabilities: str | Sequence[str] | None = None,
        max_message_size: int | None = None,
    ) -> Opening[StreamSender[None]]: ...

    @overload
    def open_stream_sender(
        self,
        target: str | None,
        *,
        buffer_size: int = DEFAULT_STREAM_SEND_BUFFER,
        name: str | None = None,
        delivery: Literal["at-least-once", "exactly-once"] = "at-least-once",
        source: str | Source | None = None,
        durable: bool | Literal[0, 1, 2] | None = None,
        expiry_policy: ExpiryPolicy | None = None,
        timeout: int | None = None,
        capabilities: str | Sequence[str] | None = None,
        properties: Mapping[str, object] | None = None,
        offered_capabilities: str | Sequence[str] | None = None,
        desired_capabilities: str | Sequence[str] | None = None,
        max_message_size: int | None = None,
    ) -> Opening[StreamSender[Accepted]]: ...

    def open_stream_sender(
        self,
        target: str | None,
        *,
        buffer_size: int = DEFAULT_STREAM_SEND_BUFFER,
        name: str | None = None,
        delivery: DeliveryMode = "at-least-once",
        source: str | Source | None = None,
        durable: bool | Literal[0, 1, 2] | None = None,
        expiry_policy: ExpiryPolicy | None = None,
        timeout: int | None = None,
        capabilities: str | Sequence[str] | None = None,
        properties: Mapping[str, object] | None = None,
        offered_capabilities: str | Sequence[str] | None = None,
        desired_capabilities: str | Sequence[str] | None = None,
        max_message_size: int | None = None,
    ) -> Opening[StreamSender[Any]]:
        """Attach a sender of messages whose body is streamed (:class:`~amqp_async.StreamSender`): each message
        is one delivery whose body is read, while it is sent, from an async iterable, an iterable or a file object,
        its size unknown beforehand and never held whole (``await sender.send_stream(file, Message(...))``).

        Returns an :class:`Opening`, as :meth:`open_sender` does; the options are those of :meth:`open_sender`,
        plus:

        Args:
            buffer_size: the bytes of transfer frames a message lets wait for the peer's session window before its
                writes wait (default 1 MiB): with the connection's output bound, what the sender holds of a message.

        Raises:
            ValueError, TypeError: an option out of its range or of the wrong type (at the call).
            LinkError, SessionError, ConnectionError: (when awaited) as :meth:`open_sender`.
        """
        if buffer_size < 1:
            raise ValueError(f"buffer_size must be at least 1 byte, got {buffer_size!r}")
        options = sender_options(
            target,
            name=name,
            delivery=delivery,
            source=source,
            durable=durable,
            expiry_policy=expiry_policy,
            timeout=timeout,
            capabilities=capabilities,
            properties=properties,
            offered_capabilities=offered_capabilities,
            desired_capabilities=desired_capabilities,
            max_message_size=max_message_size,
        )
        return Opening(self._attach_stream_sender(options, buffer_size), call="open_stream_sender()")

    def open_stream_receiver(
        self,
        source: str | None,
        *,
        buffer_size: int = DEFAULT_STREAM_RECEIVE_BUFFER,
        credit: int = 1,
        name: str | None = None,
        delivery: DeliveryMode = "at-least-once",
        on_error: OnError = "modify",
        dynamic: bool = False,
        durable: bool | Literal[0, 1, 2] | None = None,
        expiry_policy: ExpiryPolicy | None = None,
        timeout: int | None = None,
        distribution_mode: DistributionMode | None = None,
        filter: Mapping[str, object] | None = None,  # noqa: A002 - the source's field (§3.5.3)
        selector: str | None = None,
        capabilities: str | Sequence[str] | None = None,
        properties: Mapping[str, object] | None = None,
        offered_capabilities: str | Sequence[str] | None = None,
        desired_capabilities: str | Sequence[str] | None = None,
        max_message_size: int | None = None,
    ) -> Opening[StreamReceiver]:
        """Attach a receiver of messages read as they arrive (:class:`~amqp_async.StreamReceiver`): each delivery
        is handed over at its first transfer frame, and its body read with ``delivery.body_chunks()`` while the
        rest comes, the frames not read yet bounded by the session's window (§2.5.6), whatever the message's size.

        On a connection the receiver gets a session of its own (ended with it) whose incoming window holds
        ``buffer_size`` bytes of frames; on a session it uses that session, whose ``incoming_window`` times the
        max-frame-size is then the bound (``buffer_size`` does not apply).

        Returns an :class:`Opening`, as :meth:`open_receiver` does; the options are those of :meth:`open_receiver`,
        plus:

        Args:
            buffer_size: the bytes of frames the peer may send ahead of the reader (default 1 MiB; at least two
                frames).
            credit: messages whose first frame may come ahead of the reader (default 1).
            max_message_size: as :meth:`open_receiver`'s, but no limit by default (a body is never held whole).

        Raises:
            ValueError, TypeError: an option out of its range or of the wrong type (at the call).
            LinkError, SessionError, ConnectionError: (when awaited) as :meth:`open_receiver`.
        """
        if buffer_size < 1:
            raise ValueError(f"buffer_size must be at least 1 byte, got {buffer_size!r}")
        options = receiver_options(
            source,
            credit=credit,
            name=name,
            delivery=delivery,
            on_error=on_error,
            dynamic=dynamic,
            durable=durable,
            expiry_policy=expiry_policy,
            timeout=timeout,
            distribution_mode=distribution_mode,
            filter=filter,
            selector=selector,
            capabilities=capabilities,
            properties=properties,
            offered_capabilities=offered_capabilities,
            desired_capabilities=desired_capabilities,
            max_message_size=max_message_size,
        )
        return Opening(self._attach_stream_receiver(options, buffer_size), call="open_stream_receiver()")
