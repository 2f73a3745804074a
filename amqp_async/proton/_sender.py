"""proton's ``Sender``: a link on which this end sends (see :mod:`._links` for what every link has).

With a container, a link's commands go to the engine link (``_impl``) as the application makes them, and incoming
deliveries are handed over whole; on a connection the program drives (proton's engine API), the link follows
proton's own model of credit, queued deliveries and deliveries in parts (see :mod:`._engine_links`).
"""

from __future__ import annotations

from collections import deque
from threading import get_ident
from typing import TYPE_CHECKING, Any

from ..codec.performatives import SND_SETTLED
from ..message import Message
from ..protocol.endpoint import ACTIVE
from ..protocol.payload import Gathered
from . import _engine_links as engine_model
from ._delivery import Delivery, local_state_object
from ._endpoints import (
    _ENGINE_ACTIVE,
    _TRANSPORT_EVENT,
    _WRITE_THROUGH,
    Session,
    _tag_bytes,
)
from ._exceptions import LinkException
from ._links import Link

if TYPE_CHECKING:
    from ..protocol.link import SenderLink as EngineSender

__all__ = ["Sender"]


class Sender(Link):
    """A link on which this end sends messages.

    Messages sent without credit (or before the link is attached) wait here, in order, and go as credit comes, as
    in proton; :attr:`queued` counts them.

    Attributes:
        tag_generator: an iterator (or a function) giving delivery tags; by default "1", "2", ... as proton's.
    """

    is_sender = True

    def __init__(self, session: Session, name: str) -> None:
        super().__init__(session, name)
        self._pending: deque[tuple[Delivery, bytes | Gathered]] = deque()
        self._unsettled: dict[Delivery, None] = {}
        self._tag_count = 0
        self.tag_generator: Any = None
        self._current: Delivery | None = None
        #: the bytes written to the current delivery so far: the one chunk of the usual single ``send`` (no list
        #: made per message), or a list of chunks joined at advance; None without a current delivery.
        self._stream: bytes | list[bytes] | None = None
        # proton's engine API (see _engine_links): deliveries advanced and not written yet, those being written
        # (their first frames went, the rest waits for the peer's window or the application), and the credit a
        # drain answer gives back once they are all written.
        self._queued = 0
        self._in_flight: list[Delivery] = []
        self._drained_amount = 0
        # With a container: the messages handed to the engine during the current round of callbacks (the
        # container's ``_sent`` of that round marks it; a new round has a new one), which proton counts as queued
        # until its transport writes them, once the callbacks have returned.
        self._round: object = None
        self._round_sent = 0

    @property
    def queued(self) -> int:
        """Messages sent and not written yet: waiting for credit, or (with a container) sent during this round of
        callbacks, which proton's transport writes once they have returned."""
        container = self._connection._reactor
        if container is None:
            return self._queued
        return len(self._pending) + (self._round_sent if self._round is container._sent else 0)

    @property
    def unsettled(self) -> int:
        """Messages sent (or waiting, or being written) not yet settled on this end."""
        if self._connection._reactor is None:
            return self._unsettled_count
        return len(self._unsettled) + (self._current is not None)

    @property
    def current(self) -> Delivery | None:
        """The delivery being written with :meth:`stream`, if any."""
        return self._current

    @property
    def credit(self) -> int:
        """The link credit: how many more messages may be sent now (less those advanced and waiting to go)."""
        impl = self._impl
        if self._connection._reactor is None:
            # proton's (engine_model.sender_credit, without the calls: a sender reads it for every message)
            transport_credit = 0 if impl is None else impl.link_credit + len(self._in_flight)
            return int(transport_credit - self._queued - self._drained_amount)
        if impl is None:
            return 0
        pending = self._pending
        # proton's credit goes below zero as messages are sent without credit: those waiting here used it already.
        credit: int = impl.link_credit - len(pending) if pending else impl.link_credit  # (read for every message)
        return credit

    def _work(self) -> list[Delivery]:
        work = [d for d in self._unsettled if d._updated and not d._settled_here]
        current = self._current
        if current is not None and self.credit > 0:
            work.insert(0, current)
        return work

    def delivery_tag(self) -> bytes:
        """The tag for the next delivery."""
        generator = self.tag_generator
        if generator is None:
            self._tag_count += 1
            return b"%d" % self._tag_count
        tag = next(generator) if hasattr(generator, "__next__") else generator()
        return tag.encode() if isinstance(tag, str) else bytes(tag)

    def offered(self, n: int) -> None:
        """Tell the receiver how many messages are available to send (§2.6.7 ``available``)."""
        self._offered = n
        impl = self._impl
        if impl is not None and impl.local_state is ACTIVE:
            impl.set_available(n)
            self.connection._touch()

    def send(self, obj: Any, tag: bytes | str | None = None) -> Any:
        """Send a message (a :class:`Message`, or anything with a ``send(sender, tag)`` method) as a new
        delivery, or write raw bytes to the current delivery (see :meth:`stream`).

        Returns:
            The :class:`Delivery` (for bytes: the number of bytes written).
        """
        if obj.__class__ is bytes:
            return self.stream(obj)  # the engine API's usual call: raw bytes of the current delivery
        if isinstance(obj, Message):
            if self._connection._reactor is None:
                return self._send_engine_message(obj.encode(), tag)
            tracing = self._connection._tracing
            if tracing is not None:
                return tracing.send(self, obj, tag)
            return self._send_payload(obj._encode_payload(), tag)
        if hasattr(obj, "send"):
            return obj.send(self, tag=tag)
        return self.stream(obj)

    def _send_payload(
        self,
        payload: bytes | Gathered,
        tag: bytes | str | None,
        delivery: Delivery | None = None,
        state: Any = None,
    ) -> Delivery:
        container = self._connection._reactor
        if container is None:
            # proton's engine API: a delivery of these bytes, through the link's model (see _engine_links).
            if delivery is not None:
                raise LinkException("a delivery of the engine API is written with stream() and advance()")
            return self._send_engine_message(bytes(payload), tag)
        if container._loop_thread is not None and container._loop_thread != get_ident():
            container._check_thread()  # raises: another thread
        if delivery is None:
            if tag is None:
                if self.tag_generator is None:
                    self._tag_count = count = self._tag_count + 1
                    tag = b"%d" % count
                else:
                    tag = self.delivery_tag()
            elif isinstance(tag, str):
                tag = tag.encode()
            delivery = Delivery(self, tag)
        else:
            tag = delivery._tag
        if state is not None:
            delivery._transfer_state = state
        settled = self.snd_settle_mode == SND_SETTLED
        if settled:
            delivery._settled_here = True
        else:
            self._unsettled[delivery] = None
        impl = self._impl
        if (
            impl is not None
            and impl.link_credit > 0
            and not self._pending
            and impl.remote_state is _ENGINE_ACTIVE
            and impl.local_state is _ENGINE_ACTIVE
        ):
            engine_delivery = impl.send(payload, tag=tag, settled=settled, state=delivery._transfer_state)
            delivery._impl = engine_delivery
            engine_delivery.user_data = delivery
            connection = self._connection
            container._dirty[connection] = None
            sent = container._sent
            sent[self] = None
            delivery._round = sent
            if self._round is not sent:
                self._round = sent
                self._round_sent = 0
            self._round_sent += 1
            if connection._channel is not None and impl.session.connection.output_buffered > _WRITE_THROUGH:
                connection._channel.write_now()
        else:
            self._pending.append((delivery, payload))
        return delivery

    def _sendable(self) -> bool:
        impl = self._impl
        return impl.local_state is ACTIVE and impl.remote_state is ACTIVE and self.session._engine_active()

    def _pump(self) -> None:
        """Send the waiting messages the credit allows."""
        impl = self._impl
        pending = self._pending
        if not pending or impl is None or not self._sendable():
            return
        settled = self.snd_settle_mode == SND_SETTLED
        while pending and impl.link_credit > 0:
            delivery, payload = pending.popleft()
            engine_delivery = impl.send(payload, tag=delivery._tag, settled=settled, state=delivery._transfer_state)
            delivery._impl = engine_delivery
            engine_delivery.user_data = delivery
        self.connection._touch()

    # --- proton's low-level delivery API -----------------------------------------------------------------

    def _send_engine_message(self, encoded: bytes, tag: bytes | str | None) -> Delivery:
        """proton's ``Message.send`` on a connection the program drives: a delivery, its bytes, advance (and settle,
        for a sender that sends settled)."""
        delivery = self.delivery(self.delivery_tag() if tag is None else tag)
        self.stream(encoded)
        self.advance()
        if self.snd_settle_mode == SND_SETTLED:
            delivery.settle()
        return delivery

    def delivery(self, tag: bytes | str) -> Delivery:
        """Start a delivery with ``tag``: :meth:`stream` its bytes, then :meth:`advance` to send it."""
        if self._connection._reactor is None:
            return engine_model.new_sender_delivery(self, _tag_bytes(tag))
        current = self._current = Delivery(
            self, tag if tag.__class__ is bytes else tag.encode() if isinstance(tag, str) else bytes(tag)
        )
        current._raw = True
        self._stream = b""
        return current

    def stream(self, data: bytes) -> int:
        """Append bytes to the current delivery (made by :meth:`delivery`); returns how many were taken."""
        if self._connection._reactor is None:
            return engine_model.send_bytes(self, data if data.__class__ is bytes else bytes(data))
        chunks = self._stream
        if self._current is None or chunks is None:
            raise LinkException("no current delivery: call sender.delivery(tag) first")
        # The chunks are joined at advance (a delivery written in one send is not copied twice).
        chunk = data if data.__class__ is bytes else bytes(data)
        if not chunks:
            self._stream = chunk  # the first (usually the only) chunk
        elif isinstance(chunks, list):
            chunks.append(chunk)
        else:
            self._stream = [chunks, chunk]
        connection = self._connection
        collector = connection._collector
        if collector is not None and not (
            collector._tail_context is connection._transport and collector._tail_type is _TRANSPORT_EVENT
        ):
            connection._modified()  # proton's TRANSPORT event, unless it is the last one queued already
        return len(data)

    def advance(self) -> bool:
        """Finish the current delivery and send it."""
        if self._connection._reactor is None:
            return engine_model.advance_sender(self)
        current, chunks = self._current, self._stream
        if current is None or chunks is None:
            return False
        self._current = self._stream = None
        self._send_payload(chunks if isinstance(chunks, bytes) else b"".join(chunks), None, current)
        return True

    def drained(self) -> int:
        """Answer the receiver's drain: give back the credit not used; returns how much."""
        if self._connection._reactor is None:
            return engine_model.sender_drained(self)
        impl = self._impl
        if impl is None or not impl.drain:
            return 0
        credit = int(impl.link_credit)
        impl.drained()
        self.connection._touch()
        if credit:
            self._connection._modified()
        return credit

    # --- engine hooks ------------------------------------------------------------------------------------

    def _after_attach(self) -> None:
        self._pump()

    def _unbind(self) -> None:
        # Messages sent on the lost transport are in doubt: as in proton, nothing resends them.
        self._impl = None
        self._in_flight.clear()
        for delivery in list(self._unsettled):
            if delivery._impl is not None:
                del self._unsettled[delivery]

    def _delivery_updated(self, delivery: Delivery) -> None:
        pass  # a sender's own state is not sent; settle() sends the settlement

    def _settle(self, delivery: Delivery) -> None:
        self._unsettled.pop(delivery, None)
        if delivery._span is not None:
            self._connection._tracing.settled(delivery)
        impl = delivery._impl
        if impl is None:
            # Not sent yet: settling it first is giving it up.
            self._pending = deque(item for item in self._pending if item[0] is not delivery)
            return
        link: EngineSender | None = self._impl
        if not impl.settled and link is not None and impl.link is link:
            # Once per message: a sender that set no state of its own (the usual case) sends none, without the call.
            link.settle(impl, None if not delivery._local_type else local_state_object(delivery))
            self.connection._touch()

    def _abort(self, delivery: Delivery) -> None:
        impl = delivery._impl
        if impl is None:
            self._pending = deque(item for item in self._pending if item[0] is not delivery)
        elif self._impl is not None and self._impl is impl.link:
            self.session._impl.abort(impl)
            self.connection._touch()
        delivery._settled_here = True
        self._unsettled.pop(delivery, None)
