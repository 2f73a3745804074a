"""proton's ``Receiver``: a link on which this end receives (see :mod:`._links` for what every link has).

With a container, a link's commands go to the engine link (``_impl``) as the application makes them, and incoming
deliveries are handed over whole; on a connection the program drives (proton's engine API), the link follows
proton's own model of credit, queued deliveries and deliveries in parts (see :mod:`._engine_links`).
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from ..protocol.delivery import Delivery as EngineDelivery
from ..protocol.endpoint import ACTIVE
from . import _engine_links as engine_model
from ._delivery import _ACCEPTED, Delivery, local_state_object
from ._endpoints import (
    _ENGINE_ACTIVE,
    _OVERSHOOT_TOLERANCE,
    _TRANSPORT_EVENT,
    Session,
)
from ._exceptions import LinkException
from ._links import Link

if TYPE_CHECKING:
    from ..protocol.link import ReceiverLink as EngineReceiver

__all__ = ["Receiver"]

#: python-qpid-proton's ``flow(n)`` takes a C int: -2**31 to 2**31 - 1.
_INT32 = 1 << 31


def _refuse_credit(n: object) -> None:
    """Raise what python-qpid-proton's C binding raises for a credit ``n`` that is not a C int (its words); return
    for an int subclass (a bool) within range."""
    if not isinstance(n, int):
        raise TypeError("an integer is required")
    if not -_INT32 <= n < _INT32:
        raise OverflowError(f"integer {n} does not fit '32-bit int'")


class Receiver(Link):
    """A link on which this end receives messages.

    Complete deliveries queue here in order; the current one is read with :meth:`recv` and left with
    :meth:`advance` (``MessagingHandler`` does both and hands over the message).
    """

    is_receiver = True

    def __init__(self, session: Session, name: str) -> None:
        super().__init__(session, name)
        self._incoming: deque[Delivery] = deque()
        #: With a container: deliveries that arrived and wait for their event, not in ``_incoming`` yet (see
        #: :meth:`_take_arrived`).
        self._arrived = 0
        self._unsettled_count = 0
        self._credit_wanted = 0
        #: With a container and a prefetch (FlowController): what proton's credit would read beyond ours (see
        #: :meth:`_prefetch_topped`).
        self._credit_offset = 0
        # proton's engine API (see _engine_links): the credit the application gave (less the deliveries it advanced
        # past), the credit a drain gave back and not yet read by drained(), and the drain flag.
        self._credit = 0
        self._drained = 0
        self._drain = False
        self._drain_flag_mode = True

    @property
    def credit(self) -> int:
        """The credit given and not yet used by the application: proton counts a delivery against it when the link
        advances past it, not when it arrives, so the deliveries received and not yet read (:attr:`queued`) are
        still part of it (credit asked for before the attach included)."""
        credit = self._credit_given()
        impl = self._impl
        if self._connection._reactor is not None and impl is not None and impl.local_state is ACTIVE:
            # With a prefetch, the credit proton's FlowController would have given by now, which ours gives in fewer
            # and larger flows (see _prefetch_topped).
            credit += self._credit_offset
        return credit

    def _credit_given(self) -> int:
        """:attr:`credit` as this end granted it (the FlowController's offset left out)."""
        if self._connection._reactor is None:
            return self._credit
        impl = self._impl
        if impl is None or impl.local_state is not ACTIVE:
            return self._credit_wanted
        # The engine's credit is the sender's: each arrival used one. In proton's a delivery uses its credit as the
        # link advances past it (pn_link_advance), so inside on_message of a batch it reads the prefetch less one.
        credit: int = impl.link_credit + len(self._incoming) + self._arrived
        return credit

    def _prefetch_topped(self, window: int) -> None:
        """A FlowController with ``window`` topped this receiver up (or chose not to yet): from now on
        :attr:`credit` reads the window, as proton's does.

        proton's controller sets the credit to the window at every delivery (``flow(window - credit)``, with its
        credit the deliveries not yet advanced past), so the program reads the window less the deliveries taken
        since (``window - 1`` in ``on_message``). Ours writes fewer flows: it waits until a quarter of the window
        is used, and counts the deliveries that arrived and wait for their events as used. The frames stay ours;
        the offset makes the credit a program reads proton's. A flow the program asks for adds to both; a drain
        gives the offset on the wire (its flow carries proton's credit) and ends it.
        """
        impl = self._impl
        active = impl is not None and impl.local_state is ACTIVE and self._connection._reactor is not None
        self._credit_offset = window - self._credit_given() if active else 0

    def _prefetch_stopped(self) -> None:
        """The FlowController stopped topping up (a drain): :attr:`credit` is the engine's again."""
        self._credit_offset = 0

    @property
    def queued(self) -> int:
        """Complete deliveries not yet read (advanced past)."""
        return len(self._incoming) + self._arrived

    @property
    def unsettled(self) -> int:
        """Deliveries received and not yet settled on this end."""
        if self._connection._reactor is None:
            return self._unsettled_count
        impl = self._impl
        return 0 if impl is None or self.session._impl is None else self.session._impl.unsettled_incoming

    def _work(self) -> list[Delivery]:
        while self._arrived and self._take_next_arrived():
            pass
        incoming = self._incoming
        if not incoming:
            return []
        return [incoming[0], *(d for d in list(incoming)[1:] if d._updated and not d._settled_here)]

    @property
    def current(self) -> Delivery | None:
        """The delivery to read now, if any."""
        incoming = self._incoming
        if incoming:
            return incoming[0]
        return self._take_next_arrived() if self._arrived else None

    # --- deliveries that arrived, with a container ----------------------------------------------------------

    def _take_arrived(self, engine_delivery: EngineDelivery) -> Delivery:
        """The proton delivery of an engine delivery that arrived, made now and queued to be read (one from a
        transport since lost is not queued: the link's queue was cleared with it).

        With a container, a read's deliveries are queued for dispatch as the engine's, and each one's proton
        Delivery is made as its DELIVERY event is dispatched (or when the application reads ahead of the events:
        :meth:`_take_next_arrived`), not with the rest of the read. A read of a thousand messages then makes a
        thousand objects one after the other rather than at once, each freed (its message handled) before the next
        is made: the garbage collector, which runs on the count of objects made and not yet freed, ran 198 times in
        a 100,000-message receive, 105 times now. A disposition the peer sends for a delivery whose event is still
        queued is not reported as an event of its own (its state is read when the delivery's event comes).
        """
        delivery = Delivery(self, engine_delivery.tag, engine_delivery)
        delivery._payload = engine_delivery.payload
        engine_delivery.user_data = delivery
        if engine_delivery.link is self._impl:
            self._arrived -= 1
            self._incoming.append(delivery)
        return delivery

    def _take_next_arrived(self) -> Delivery | None:
        """The application reads ahead of the events (``current``, ``recv``, ``advance``, the connection's work
        list): the first delivery that arrived and whose event is still queued is made now, and its event carries
        it when dispatched."""
        container = self._connection._reactor
        impl = self._impl
        if container is None or impl is None:
            return None
        collector = container._collector
        for index, item in enumerate(collector):
            if type(item) is EngineDelivery and item.link is impl:
                delivery = self._take_arrived(item)
                collector[index] = delivery  # dispatched as a delivery made already
                return delivery
        self._arrived = 0  # none waits (a count out of step would only make queued wrong)
        return None

    def flow(self, n: int) -> None:
        """Give the sender ``n`` more credit.

        Raises:
            TypeError: ``n`` is not an int (as python-qpid-proton's, whose C binding refuses it at the call; taken,
                a float reached the engine's credit and failed only when the flow frame was encoded).
        """
        if n.__class__ is not int or not -_INT32 <= n < _INT32:
            _refuse_credit(n)
        connection = self._connection
        container = connection._reactor
        if container is None:
            engine_model.receiver_flow(self, n)
            return
        drain = self._drain
        if drain and not self._drain_flag_mode:
            # proton: a flow ends a drain asked for with drain(), not a drain flag the application set itself.
            drain = self._drain = False
        if n <= 0:
            return
        container._check_thread()
        impl = self._impl
        if (
            impl is not None
            and impl.local_state is _ENGINE_ACTIVE
            and (
                # Bound to a transport, the engine session is active when it and the connection are begun and
                # opened by us: _engine_active's answer, without its two calls (once per message when topping up).
                (
                    connection._bound is not None
                    and (session_impl := self.session._impl) is not None
                    and session_impl.local_state is _ENGINE_ACTIVE
                    and (connection_impl := connection._impl) is not None
                    and connection_impl.local_state is _ENGINE_ACTIVE
                )
                or self.session._engine_active()
            )
        ):
            # The sender runs short: it has less credit left than this flow gives (more than half a prefetch
            # window used up).
            short = impl.link_credit < n
            if drain or impl.drain:
                # The flow carries the application's drain flag (the engine clears its own once a drain is done).
                impl.grant_credit(impl.link_credit + n, drain=drain)
            else:
                impl.add_credit(n)
            if container is not None:
                container._dirty[connection] = None
                if short and connection._channel is not None:
                    # To the socket a few events later, not at the end of the round: the sender may be out of
                    # credit while the handlers still work through the deliveries of one read. Otherwise with the
                    # round's other output, as proton writes it: a drain asked for later in the round (the last
                    # message of a read) goes in the same flow frame (see Container._write_soon).
                    container._write_soon(connection)
        else:
            self._credit_wanted += n
        collector = connection._collector
        if collector is not None and not (
            collector._tail_context is connection._transport and collector._tail_type is _TRANSPORT_EVENT
        ):
            connection._modified()  # proton's TRANSPORT event, unless it is the last one queued already

    def drain(self, n: int) -> None:
        """Give ``n`` more credit and ask the sender to use it all up or give it back (§2.6.7).

        Raises:
            TypeError, OverflowError: as :meth:`flow`.
        """
        if n.__class__ is not int or not -_INT32 <= n < _INT32:
            _refuse_credit(n)
        if self._connection._reactor is None:
            engine_model.receiver_drain(self, n)
            return
        # proton's pn_link_drain: the drain flag set (it stays set: drain_mode reads True), the credit given with
        # it, and the next flow() ends the drain.
        self._drain = True
        # With a prefetch, the drain carries proton's credit: what its FlowController would have given by now
        # (see _prefetch_topped), the same frame.
        offset, self._credit_offset = self._credit_offset, 0
        impl = self._impl
        if impl is not None and impl.local_state is ACTIVE and self.session._engine_active():
            impl.grant_credit(max(int(impl.link_credit) + offset, 0) + max(n, 0), drain=True)
            self.connection._touch()
        else:
            self._credit_wanted += max(n, 0)
        self._drain_flag_mode = False
        self._connection._modified()

    def _flow_drain_flag(self) -> None:
        # proton sends a flow whenever the drain flag is set (and one that clears it): the sender answers a drain
        # of the credit it has.
        impl = self._impl
        if impl is not None and impl.local_state is ACTIVE and self.session._engine_active():
            impl.grant_credit(impl.link_credit, drain=self._drain)
            self.connection._touch()
        self._connection._modified()

    def draining(self) -> bool:
        """True while a drain asked for is not complete: the drain flag is set and the sender still has credit
        (proton's: the credit is more than the deliveries received and not read)."""
        if self._connection._reactor is None:
            return self._drain and self._credit > len(self._incoming)
        if not self._drain:
            return False
        impl = self._impl
        if impl is None or impl.local_state is not ACTIVE:
            return self._credit_wanted > 0
        return bool(impl.link_credit > 0)

    def drained(self) -> int:
        """The credit the sender gave back by draining, since the last call."""
        if self._connection._reactor is None:
            drained, self._drained = self._drained, 0
            return drained
        impl = self._impl
        if impl is None:
            return 0
        drained, impl.drained_credit = impl.drained_credit, 0
        return int(drained)

    def recv(self, limit: int) -> bytes | None:
        """Read up to ``limit`` bytes of the current delivery; None once it is all read."""
        if self._connection._reactor is None:
            return engine_model.recv(self, limit)
        current = self.current
        if current is None:
            raise LinkException("no current delivery to read")
        payload = current._payload
        if payload is None:
            return None
        start = current._read
        size = len(payload)
        if start >= size:
            # proton: nothing more yet of a partial delivery (b""), or the end of a complete one (None).
            return b"" if current.partial else None
        if start == 0 and limit >= size:
            # The usual read, ``recv(delivery.pending)``: the whole payload at once (no copy if it is bytes).
            current._read = size
            return bytes(payload)
        end = min(size, start + limit)
        current._read = end
        return bytes(payload[start:end])

    def advance(self) -> bool:
        """Move past the current delivery."""
        if self._connection._reactor is None:
            return engine_model.advance_receiver(self)
        if self._incoming or (self._arrived and self._take_next_arrived() is not None):
            self._incoming.popleft()
            return True
        return False

    # --- engine hooks ------------------------------------------------------------------------------------

    def _after_attach(self) -> None:
        # proton accepts transfers beyond the credit it gave (RabbitMQ before 4.0 sends a few too many after a
        # credit top-up); a peer that overshoots by more than this bound is still stopped (§2.6.7).
        self._impl.overshoot_tolerance = _OVERSHOOT_TOLERANCE
        wanted, self._credit_wanted = self._credit_wanted, 0
        if wanted:
            impl: EngineReceiver = self._impl
            impl.grant_credit(wanted, drain=self._drain)

    def _unbind(self) -> None:
        self._impl = None
        self._credit_offset = 0
        if self._connection._reactor is not None:
            self._incoming.clear()
            self._arrived = 0

    def _delivery_updated(self, delivery: Delivery) -> None:
        connection = self._connection
        container = connection._reactor
        if container is not None:
            container._updated.append(delivery)

    def _settle(self, delivery: Delivery) -> None:
        if delivery._span is not None:
            self._connection._tracing.settled(delivery)
        impl = delivery._impl
        link: EngineReceiver | None = self._impl
        if (
            impl is not None
            and link is not None
            and impl.link is link
            and not impl.settled
            and link.local_state is _ENGINE_ACTIVE
        ):
            # Once per message: the usual outcome, accepted, without local_state_object's call.
            link.settle(impl, _ACCEPTED if delivery._local_type == 0x24 else local_state_object(delivery))
            container = self.session.connection._reactor
            if container is not None:
                container._dirty[self.session.connection] = None
        incoming = self._incoming
        if incoming and incoming[0] is delivery:
            incoming.popleft()

    def _send_state(self, delivery: Delivery) -> None:
        impl = delivery._impl
        link: EngineReceiver | None = self._impl
        if impl is None or link is None or impl.link is not link or impl.settled:
            return
        if link.local_state is ACTIVE:
            link.settle(impl, local_state_object(delivery), settled=False)
            self.connection._touch()


# --- the endpoints the peer started -------------------------------------------------------------------------
