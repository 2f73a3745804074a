"""Our Sans-IO engine with the two-method shape (``take()`` / ``feed()``) that ``proton_peer.pump`` moves bytes with.

``EnginePeer`` wraps an :class:`amqp_async.protocol.connection.Connection`, keeps every event it reports in
``events``, and can answer what the peer starts (sessions, links) the way a simple broker does, so that a test
scenario is a short list of commands on either side followed by ``pump(a, b)``.
"""

from __future__ import annotations

from typing import Any

from amqp_async.codec.terminus import Source, Target
from amqp_async.protocol import events as ev
from amqp_async.protocol.connection import CLIENT, SERVER, Connection
from amqp_async.protocol.delivery import Delivery
from amqp_async.protocol.link import Link, ReceiverLink, SenderLink
from amqp_async.protocol.session import Session

__all__ = ["CLIENT", "SERVER", "EnginePeer", "pump"]


def pump(a: Any, b: Any, rounds: int = 200) -> int:
    """Move bytes both ways until neither side has anything to say; return the number of rounds it took."""
    for count in range(rounds):
        out_a = a.take()
        out_b = b.take()
        if not out_a and not out_b:
            return count
        if out_a:
            b.feed(out_a)
        if out_b:
            a.feed(out_b)
    raise RuntimeError(f"still talking after {rounds} rounds")


class EnginePeer:
    """Our engine, pumped in memory.

    Args:
        role: ``"client"`` or ``"server"``.
        auto_accept: answer sessions and links the peer starts (links mirror the peer's termini; a dynamic
            source gets the address ``dynamic-N``), and answer the peer's open (a server).
        auto_credit: credit granted to every receiving link when it is attached (answered or started).
        **options: passed to :class:`Connection` (``container_id`` defaults to the role).
    """

    def __init__(self, role: str = CLIENT, *, auto_accept: bool = False, auto_credit: int = 0, **options: Any):
        options.setdefault("container_id", role)
        self.connection = Connection(role=role, **options)
        self.auto_accept = auto_accept
        self.auto_credit = auto_credit
        self.events: list[ev.Event] = []
        self.received: list[Delivery] = []
        self.now = 0.0
        self._dynamic = 0

    # --- the pump's two methods --------------------------------------------------------------------------

    def take(self) -> bytes:
        return self.connection.data_to_send(self.now)

    def feed(self, data: bytes) -> None:
        self.connection.receive_data(data, self.now)
        self.process()

    def process(self) -> list[ev.Event]:
        """Collect new events (answering what the peer starts when ``auto_accept``)."""
        new = self.connection.next_events()
        for event in new:
            if isinstance(event, ev.DeliveriesReceived):
                link = event.link
                assert isinstance(link, ReceiverLink)
                while link.incoming:
                    self.received.append(link.incoming.popleft())
            if not self.auto_accept:
                continue
            if isinstance(event, ev.ConnectionOpened) and self.connection.local_state.value == "uninit":
                self.connection.open()
            elif isinstance(event, ev.SessionBegun) and not event.session.locally_begun:
                event.session.begin()
            elif isinstance(event, ev.LinkAttached) and not event.link.locally_attached:
                self._answer_link(event.link)
        self.events.extend(new)
        return new

    def _answer_link(self, link: Link) -> None:
        source = link.remote_source
        if isinstance(source, Source) and source.dynamic:
            self._dynamic += 1
            source = Source(address=f"dynamic-{self._dynamic}", dynamic=True)
        link.attach(
            source=source,
            target=link.remote_target,
            snd_settle_mode=link.remote_snd_settle_mode,
            rcv_settle_mode=link.remote_rcv_settle_mode,
        )
        if isinstance(link, ReceiverLink) and self.auto_credit:
            link.grant_credit(self.auto_credit)

    # --- conveniences ------------------------------------------------------------------------------------

    def open(self) -> None:
        self.connection.open()

    def begin(self, **options: Any) -> Session:
        return self.connection.begin_session(**options)

    def sender(self, session: Session, name: str, address: str | None, **options: Any) -> SenderLink:
        options.setdefault("source", Source(address=None))
        return session.attach_sender(name, target=Target(address=address), **options)

    def receiver(
        self, session: Session, name: str, address: str | None, *, credit: int = 0, **options: Any
    ) -> ReceiverLink:
        options.setdefault("target", Target(address=None))
        link = session.attach_receiver(name, source=Source(address=address), **options)
        if credit:
            link.grant_credit(credit)
        return link

    def of_type(self, kind: type) -> list[Any]:
        """The events of one type, in order."""
        return [event for event in self.events if isinstance(event, kind)]
