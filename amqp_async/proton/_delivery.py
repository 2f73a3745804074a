"""proton's ``Delivery`` and ``Disposition``: one message's transfer on a link, and the states both ends give it.

A :class:`Delivery` wraps the engine's delivery (:class:`amqp_async.protocol.delivery.Delivery`). Outgoing
deliveries made while the link has no credit (or is not attached yet) wait in their sender, as proton's do, and get
their engine delivery when they are sent. Delivery states (§3.4) are proton's integer codes (:class:`DispositionType`)
on this side and the codec's composites on the engine's: :func:`state_object` and :func:`disposition_from_state`
convert, in one place.
"""

from __future__ import annotations

import enum
from threading import get_ident
from typing import TYPE_CHECKING, Any

from ..codec import decode, encode
from ..codec.delivery_states import Accepted, Modified, Received, Rejected, Released
from ..codec.transactions import Declared, TransactionalState
from ..types import Described, ulong
from . import _engine_links as engine_model
from ._condition import Condition
from ._events import Event
from ._message import Message

if TYPE_CHECKING:
    from ..protocol.delivery import Delivery as EngineDelivery
    from ._endpoints import Connection, Link, Session
    from ._transport import Transport

__all__ = ["Delivery", "Disposition", "DispositionType"]


class DispositionType(enum.IntEnum):
    """The delivery states of §3.4, by their descriptor codes (proton's ``PN_ACCEPTED``...)."""

    RECEIVED = 0x23
    ACCEPTED = 0x24
    REJECTED = 0x25
    RELEASED = 0x26
    MODIFIED = 0x27

    @classmethod
    def or_int(cls, value: int) -> int:
        """The member for ``value``, or ``value`` itself when it is no known state (0: none)."""
        try:
            return cls(value)
        except ValueError:
            return value


# Outcomes without fields are shared: the session coalesces equal consecutive dispositions into one frame.
_TRANSPORT_EVENT = Event.TRANSPORT
_ACCEPTED = Accepted()
_RELEASED = Released()

# §4.5.5 declared and §4.5.6 transactional-state are proton's plain codes 0x33 and 0x34 (no DispositionType member).
_CODE_OF_STATE = {
    Received: 0x23,
    Accepted: 0x24,
    Rejected: 0x25,
    Released: 0x26,
    Modified: 0x27,
    Declared: 0x33,
    TransactionalState: 0x34,
}
_TYPE_OF_STATE: dict[type, int] = {kind: DispositionType.or_int(code) for kind, code in _CODE_OF_STATE.items()}


class Disposition:
    """A delivery state with its fields: the local one (which this end sets, through :meth:`Delivery.update`) or
    the remote one (what the peer last said).

    Attributes:
        type: the state (:class:`DispositionType`), or 0 for none.
        condition: the error of a rejected delivery.
        failed, undeliverable, annotations: the fields of a modified delivery (§3.4.5).
        section_number, section_offset: the fields of a received state (§3.4.1).
        data: the fields of a declared (``[txn_id]``) or transactional state (``[txn_id, outcome]``), as proton
            gives them; for another custom state, its value, kept but not sent.
    """

    RECEIVED = DispositionType.RECEIVED
    ACCEPTED = DispositionType.ACCEPTED
    REJECTED = DispositionType.REJECTED
    RELEASED = DispositionType.RELEASED
    MODIFIED = DispositionType.MODIFIED

    def __init__(self, local: bool = True) -> None:
        self.local = local
        self.type: int = 0
        self.condition: Condition | None = None
        self.failed = False
        self.undeliverable = False
        self.annotations: dict[Any, Any] | None = None
        self.section_number = 0
        self.section_offset = 0
        self.data: Any = None


def disposition_from_state(state: Any) -> Disposition:
    """The remote :class:`Disposition` for an engine delivery state (a codec composite or None)."""
    disposition = Disposition(local=False)
    if state is None:
        return disposition
    if isinstance(state, Described):
        # A delivery state this library does not know (an extension's, §3.4): its code and its fields, as proton
        # gives them.
        disposition.type = _custom_code(state)
        disposition.data = state.value if state.value not in (None, []) else None
        return disposition
    disposition.type = DispositionType.or_int(_CODE_OF_STATE.get(type(state), 0))
    if isinstance(state, Rejected) and state.error is not None:
        disposition.condition = Condition.from_error(state.error)
    elif isinstance(state, Modified):
        disposition.failed = bool(state.delivery_failed)
        disposition.undeliverable = bool(state.undeliverable_here)
        disposition.annotations = state.message_annotations
    elif isinstance(state, Received):
        disposition.section_number = state.section_number
        disposition.section_offset = state.section_offset
    elif isinstance(state, Declared):
        disposition.data = [state.txn_id]
    elif isinstance(state, TransactionalState):
        disposition.data = [state.txn_id, state.outcome]
    return disposition


def state_object(disposition: Disposition) -> Any:
    """The codec composite to send for a local :class:`Disposition` (None: no state)."""
    code = disposition.type
    if code == 0x24:
        return _ACCEPTED
    if code == 0x26:
        return _RELEASED
    return _state_with_fields(code, disposition)


def local_state_object(delivery: Delivery) -> Any:
    """The codec composite to send for ``delivery``'s local state (None: no state)."""
    code = delivery._local_type
    if code == 0x24:
        return _ACCEPTED
    if code == 0x26:
        return _RELEASED
    if not code:
        return None
    return _state_with_fields(code, delivery.local)


def _state_with_fields(code: int, disposition: Disposition) -> Any:
    if code == 0x25:
        condition = disposition.condition
        return Rejected(error=None if condition is None else condition.to_error())
    if code == 0x27:
        return Modified(
            delivery_failed=disposition.failed or None,
            undeliverable_here=disposition.undeliverable or None,
            message_annotations=disposition.annotations or None,
        )
    if code == 0x23:
        return Received(section_number=disposition.section_number, section_offset=disposition.section_offset)
    if code == 0x34:
        return _transactional_state(disposition.data)
    if code in _KNOWN_CODES:
        return None
    # A delivery state of the application's own: its code as the descriptor, its data as the fields.
    data = disposition.data
    return Described(ulong(code), [] if data is None else data)


_KNOWN_CODES = frozenset((0, 0x23, 0x24, 0x25, 0x26, 0x27, 0x33))


def _custom_code(state: Described) -> int:
    descriptor = state.descriptor
    return int(descriptor) if isinstance(descriptor, int) else 0


def _transactional_state(data: Any) -> TransactionalState | None:
    """The transactional-state (§4.5.6) proton's ``Transaction`` describes as ``[txn_id, outcome]`` in
    :attr:`Disposition.data`; the outcome may be a described value (``Described(ulong(0x24), [])``) or a
    composite."""
    if not data:
        return None
    outcome = data[1] if len(data) > 1 else None
    if outcome is not None and not isinstance(outcome, (Accepted, Rejected, Released, Modified)):
        outcome = decode(encode(outcome))  # a described value becomes the outcome it describes
    return TransactionalState(txn_id=bytes(data[0]), outcome=outcome)


class Delivery:
    """Tracks the transfer of one message over a link, and what each end made of it.

    The state constants are proton's (``Delivery.ACCEPTED``...). A delivery object may carry attributes the
    application sets on it, as proton's do.
    """

    RECEIVED = DispositionType.RECEIVED
    ACCEPTED = DispositionType.ACCEPTED
    REJECTED = DispositionType.REJECTED
    RELEASED = DispositionType.RELEASED
    MODIFIED = DispositionType.MODIFIED

    _is_delivery = True

    _span_size = 0  # the encoded size of a traced outgoing message (read only with tracing on)

    def __init__(self, link: Link, tag: bytes, impl: EngineDelivery | None = None) -> None:
        self.link = link
        self._tag = tag
        self._impl = impl
        # Every field is set here rather than left as a default on the class: they are read several times per
        # message, and CPython 3.11 reads an instance's own attribute in a specialised instruction but a class
        # default through the generic lookup, about 13 ns more a read (the engine API pair: 8% fewer instructions a
        # message). Instance values are allocated for these fields either way.
        self._local: Disposition | None = None
        self._local_type = 0
        self._settled_here = False
        self._updated = False
        self._payload: bytes | bytearray | memoryview | None = None
        self._read = 0
        self._transfer_state: Any = None  # an outgoing delivery's state on its transfer (a transaction's, §4.4.1)
        self._span: Any = None  # the OpenTelemetry span while it is open (tracing on: see _tracing.py)
        self._aborted_here = False  # aborted on this end (read for every message received)

    # proton's engine API (a connection without a container, see _engine_links): a sender's bytes not written yet,
    # whether it was advanced (a receiver's: whether its last frame came), written entirely; how many of a
    # receiver's bytes the session counts as received. A container never reads them: defaults here, set on the
    # instance by _start_engine_state for the engine API, which reads them for every message.
    _buffer: bytes | bytearray = b""
    _done = False
    _ended = False  # its last part was given to the engine
    _sent = False
    _counted = 0
    # A container's outgoing delivery: the round of callbacks (the container's ``_sent``) in which its sender handed
    # it to the engine, for ``pending`` (set for every message sent; read only by ``pending``).
    _round: object = None
    _raw = False  # its bytes were written with Sender.stream() (else it is a message the container encoded)

    def _start_engine_state(self) -> None:
        """Give a delivery of proton's engine API its own engine fields (read per message: see __init__)."""
        self._buffer = b""
        self._done = False
        self._ended = False
        self._sent = False
        self._counted = 0

    # --- where it belongs --------------------------------------------------------------------------------

    @property
    def _event_link(self) -> Link:
        return self.link

    @property
    def tag(self) -> str | bytes:
        """The delivery tag: unique among the link's unsettled deliveries. As proton gives it: decoded from UTF-8
        (``"1"``, ``"tag"``); a tag that is not UTF-8 is given as its bytes (proton raises ``UnicodeDecodeError``)."""
        tag = self._tag
        try:
            return tag.decode()
        except UnicodeDecodeError:
            return tag

    @property
    def session(self) -> Session:
        """The session of the delivery's link."""
        return self.link.session

    @property
    def connection(self) -> Connection:
        """The connection of the delivery's link."""
        return self.link.session.connection

    @property
    def transport(self) -> Transport | None:
        """The transport of the delivery's connection."""
        return self.link.session.connection.transport

    @property
    def span(self) -> Any:
        """The OpenTelemetry span of this delivery while it is open (None when tracing is off, or once it ended):
        an incoming delivery's receive span until this end settles it (it is current while the delivery's events
        are dispatched; ``trace.use_span(delivery.span, end_on_exit=False)`` makes it so elsewhere), an outgoing
        delivery's send span until its outcome comes."""
        return self._span

    # --- states ------------------------------------------------------------------------------------------

    @property
    def local(self) -> Disposition:
        """The local disposition: set its fields, then :meth:`update` with its type."""
        if self._local is None:
            self._local = Disposition(local=True)
            self._local.type = self._local_type
        return self._local

    @property
    def local_state(self) -> int:
        """The state this end gave the delivery (0: none yet)."""
        return self._local_type

    @property
    def remote(self) -> Disposition:
        """The state the peer last gave the delivery, with its fields."""
        return disposition_from_state(None if self._impl is None else self._impl.remote_state)

    @property
    def remote_state(self) -> int:
        """The state the peer last gave the delivery (``Delivery.ACCEPTED``..., 0x33 declared, 0x34
        transactional, another code for a state of its own; 0: none)."""
        impl = self._impl
        if impl is None or impl.remote_state is None:
            return 0
        state = impl.remote_state
        if isinstance(state, Described):
            return _custom_code(state)
        return _TYPE_OF_STATE.get(type(state), 0)

    @property
    def settled(self) -> bool:
        """True once the peer has settled the delivery."""
        impl = self._impl
        return impl is not None and (impl.remote_settled or (impl.aborted and not self.link.is_sender))

    @property
    def local_settled(self) -> bool:
        """True once this end has settled the delivery."""
        return self._settled_here

    @property
    def updated(self) -> bool:
        """True while the event being handled reports a change of the remote state or settlement."""
        return self._updated

    @property
    def aborted(self) -> bool:
        """True when the sender aborted the delivery (§2.6.14)."""
        if self._aborted_here:
            return True
        impl = self._impl
        return impl is not None and impl.aborted

    def _aborted_remote(self) -> bool:
        impl = self._impl
        return impl is not None and impl.aborted

    @property
    def partial(self) -> bool:
        """True for a delivery not complete: an incoming one whose data is not all here (the container hands
        deliveries over complete; with proton's engine API a delivery is reported as its first frames arrive), an
        outgoing one not advanced yet (engine API)."""
        if self.link._connection._reactor is None:
            return not self._done and not self.aborted
        impl = self._impl
        return impl is not None and getattr(impl.link, "_current", None) is impl

    @property
    def pending(self) -> int:
        """The number of bytes not yet read (incoming) or not yet sent (outgoing)."""
        if self.link._connection._reactor is None:
            if self.aborted:
                return 1  # proton's: an aborted delivery has something pending, so recv() reports the abort
            if self.link.is_sender:
                return len(self._buffer)
            payload = self._payload
            return 0 if payload is None else len(payload) - self._read
        payload = self._payload
        if payload is not None:
            return len(payload) - self._read
        link = self.link
        if not link.is_sender:
            return 0
        if link.current is self:
            chunks: bytes | list[bytes] = link._stream or b""  # type: ignore[attr-defined]
            return len(chunks) if isinstance(chunks, bytes) else sum(len(chunk) for chunk in chunks)
        # proton's pn_delivery_pending: the bytes in the delivery not written to the transport yet. A message sent
        # without credit (or before the attach) waits in its sender whole; one handed to the engine during this
        # round of callbacks is written by proton's transport once they return (as Sender.queued counts it).
        impl = self._impl
        if impl is None:
            if self._settled_here and self._aborted_here:
                return 0
            waiting: list[tuple[Delivery, Any]] = list(link._pending)  # type: ignore[attr-defined]
            for delivery, payload in waiting:
                if delivery is self:
                    return self._unwritten_size(payload)
            return 0
        round_ = self._round
        if round_ is not None and round_ is link._connection._reactor._sent and not impl.aborted:
            return self._unwritten_size(impl.payload)
        return 0

    def _unwritten_size(self, payload: Any) -> int:
        """The size proton's delivery would buffer for ``payload``: the bytes themselves for a delivery written with
        ``stream()``; for a message, its size as proton encodes it (proton writes empty header and properties
        sections that the container leaves out): decoded and encoded again, only when ``pending`` is read."""
        data = payload if isinstance(payload, (bytes, bytearray, memoryview)) else bytes(payload)
        if self._raw:
            return len(data)
        message = Message()
        try:
            message.decode(data)
            return len(message.encode())
        except Exception:  # not a message proton would encode again: the bytes as they are
            return len(data)

    @property
    def readable(self) -> bool:
        """True for an incoming delivery that is its link's current one (it has data to read)."""
        link = self.link
        if not link.is_receiver:
            return False
        incoming = link._incoming  # type: ignore[attr-defined]  # a receiver's (``current``, without the call)
        return bool(incoming) and incoming[0] is self

    @property
    def writable(self) -> bool:
        """True for an outgoing delivery that is its link's current one while the link has credit."""
        link = self.link
        return link.is_sender and link.current is self and link.credit > 0

    @property
    def buffered(self) -> bool:
        """True for an outgoing delivery still waiting in this process (no credit, or not attached yet)."""
        if self.link._connection._reactor is None:
            return self.link.is_sender and not self._sent and (self._done or bool(self._buffer))
        return self.link.is_sender and self._impl is None and not self._settled_here

    @property
    def work_next(self) -> Delivery | None:
        """The delivery after this one on its connection's work list (see ``Connection.work_head``)."""
        work = self.link.session.connection._work_list()
        for index, delivery in enumerate(work):
            if delivery is self:
                return work[index + 1] if index + 1 < len(work) else None
        return work[0] if work else None

    # --- commands ----------------------------------------------------------------------------------------

    def update(self, state: int) -> None:
        """Set the local state (``Delivery.ACCEPTED``...); its fields come from :attr:`local`.

        The disposition is sent with the settlement when :meth:`settle` follows in the same callback (the usual
        ``accept``), else on its own, unsettled, once the callback returns.

        Raises:
            TypeError, OverflowError: ``state`` is not an int, or not a uint64 (as proton's C binding says at the
                call; taken, it failed later, where the disposition was written).
        """
        if state.__class__ is not int and not isinstance(state, int):
            raise TypeError("an integer is required")
        if not 0 <= state < 1 << 64:
            raise OverflowError(f"integer {state} does not fit 'uint64_t'")
        link = self.link
        if link._connection._reactor is None:
            engine_model.update(self, state)
            return
        self._local_type = state
        local = self._local
        if local is not None:
            local.type = state
        link._delivery_updated(self)
        connection = link._connection
        collector = connection._collector
        if collector is not None and not (
            collector._tail_context is connection._transport and collector._tail_type is _TRANSPORT_EVENT
        ):
            connection._modified()  # proton's TRANSPORT event, unless it is the last one queued already

    def _settle_as(self, state: int) -> None:
        """``update(state)`` then ``settle()``, in one step (the auto-accept of every received message)."""
        self._local_type = state
        local = self._local
        if local is not None:
            local.type = state
        if not self._settled_here:
            self._settled_here = True
            self.link._settle(self)
            impl = self._impl
            if impl is not None:
                impl.user_data = None  # _forget(), inline: once per message

    def settle(self) -> None:
        """Settle the delivery on this end: nothing more will be said or heard about it.

        Settling the link's current incoming delivery also advances the link past it, as in proton.
        """
        if self._settled_here:
            return
        link = self.link
        connection = link._connection
        container = connection._reactor
        if container is None:
            engine_model.settle(self)
            return
        loop_thread = container._loop_thread
        if loop_thread is not None and loop_thread != get_ident():
            container._check_thread()  # raises: another thread
        self._settled_here = True
        link._settle(self)
        impl = self._impl
        if impl is not None:
            impl.user_data = None  # as _forget

    def _forget(self) -> None:
        # Settled here, the engine says no more of it (§2.6.12): drop its link back to us, so that the pair is
        # not a reference cycle that only the garbage collector frees (one per message, which makes it run often).
        impl = self._impl
        if impl is not None:
            impl.user_data = None

    def abort(self) -> None:
        """Abort an outgoing delivery (§2.6.14): the receiver discards what it got of it."""
        if self.link._connection._reactor is None:
            engine_model.abort(self)
            return
        self.link._abort(self)

    def __repr__(self) -> str:
        return f"Delivery(tag={self._tag!r}, local_state={self._local_type}, remote_state={self.remote_state})"
