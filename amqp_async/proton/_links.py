"""proton's links: ``Link``, ``Sender`` and ``Receiver``, the application's view of one end of a link of our engine.

With a container, a link's commands go to the engine link (``_impl``) as the application makes them, and incoming
deliveries are handed over whole; on a connection the program drives (proton's engine API), the link follows
proton's own model of credit, queued deliveries and deliveries in parts (see :mod:`._engine_links`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..codec.performatives import RCV_FIRST, RECEIVER, SENDER, SND_MIXED
from ..protocol.endpoint import CLOSED, UNINIT
from ..protocol.errors import LocalProtocolError
from ..types import symbol, ulong
from . import _engine_lifecycle, _engine_links
from ._condition import Condition
from ._delivery import Delivery
from ._endpoints import (
    _ACTIVE,
    _CLOSED,
    _UNINIT,
    Connection,
    Endpoint,
    Session,
    _close_later,
    _error_of,
    remote_bits,
)
from ._events import Event
from ._exceptions import LinkException
from ._terminus import Terminus
from ._transport import Transport

if TYPE_CHECKING:
    pass

__all__ = ["Link", "Receiver", "Sender", "link_attached_by_peer"]


class Link(Endpoint):
    """One end of a link (a :class:`Sender` or a :class:`Receiver`).

    Attributes:
        name: the link name.
        session: the link's session.
        handler: the handler for this link's events (None: the session's or connection's).
        source, target: this end's termini (set them before :meth:`open`).
        snd_settle_mode, rcv_settle_mode: the settle modes to ask for (``Link.SND_*``, ``Link.RCV_*``).
        max_message_size: the largest message this end accepts (0: no limit).
        properties: the link properties to send (a dict with symbol keys), or None.
        offered_capabilities, desired_capabilities: the link capabilities to send, or None.
        condition: the condition to close with.
    """

    SND_UNSETTLED = 0
    SND_SETTLED = 1
    SND_MIXED = 2
    RCV_FIRST = 0
    RCV_SECOND = 1

    _is_link = True
    is_sender = False
    is_receiver = False

    # What an attach sends, and the condition to close with: read when the link opens or closes, so defaults left on
    # the class (set on the instance when changed). An instance of 30 attributes or more keeps them in a dict, and
    # CPython 3.11 and 3.12 then specialise no method call on it (``self._send_payload(...)``, for every message).
    condition: Condition | None = None
    rcv_settle_mode = RCV_FIRST
    max_message_size = 0
    properties: Any = None
    offered_capabilities: Any = None
    desired_capabilities: Any = None

    def __init__(self, session: Session, name: str) -> None:
        # Read for every delivery: copied onto the instance (see Delivery.__init__ for why).
        cls = type(self)
        self.is_sender = cls.is_sender
        self.is_receiver = cls.is_receiver
        self._remote_detached = False  # the peer detached without closing (proton's engine API keeps REMOTE_ACTIVE)
        self.session = session
        self._connection = session.connection
        self.name = name
        self._impl: Any = None
        self._local = _UNINIT
        self._handler: Any = None
        self.source = Terminus(Terminus.SOURCE)
        self.target = Terminus(Terminus.TARGET)
        self.snd_settle_mode = SND_MIXED
        self._drain_mode = False
        self._closes = True
        # proton's engine API: the link's deliveries not settled and forgotten (in the order they were made), how
        # many are not settled here, and whether it was detached (not closed; with a container too: see state).
        self._deliveries: dict[Delivery, None] = {}
        self._unsettled_count = 0
        self._detached = False

    def _container(self) -> Any:
        return self.session.connection._reactor

    def _owner(self) -> Connection:
        return self.session.connection

    @property
    def state(self) -> int:
        """The local and remote state bits (a peer's detach that does not close leaves the remote state active)."""
        local = self._local
        if self._detached and local == _CLOSED and self._connection._reactor is not None:
            local = _ACTIVE  # proton: a detach that does not close leaves the local state active too
        impl = self._impl
        if impl is None:
            return local | 8
        remote = impl.remote_state
        # proton sets REMOTE_CLOSED only for a detach that closes: one that does not (closed=false, §2.6.4) leaves
        # the remote state active, as the engine link records (the engine API's input notes it on the link too).
        if self._remote_detached or (remote is CLOSED and not impl.remote_closed):
            return local | 16
        return local | remote_bits(remote)

    def _work(self) -> list[Delivery]:
        """This link's deliveries on proton's work list (see :attr:`Connection.work_head`)."""
        return []

    @property
    def connection(self) -> Connection:
        """The link's connection."""
        return self.session.connection

    @property
    def transport(self) -> Transport | None:
        """The transport of the link's connection."""
        return self.session.connection.transport

    # --- what the peer said ------------------------------------------------------------------------------

    @property
    def remote_source(self) -> Terminus:
        """The source the peer's attach carried."""
        impl = self._impl
        return Terminus._from_composite(None if impl is None else impl.remote_source, Terminus.SOURCE)

    @property
    def remote_target(self) -> Terminus:
        """The target the peer's attach carried."""
        impl = self._impl
        return Terminus._from_composite(None if impl is None else impl.remote_target, Terminus.TARGET)

    @property
    def remote_snd_settle_mode(self) -> int:
        """The sender settle mode the peer's attach carried."""
        impl = self._impl
        return SND_MIXED if impl is None else int(impl.remote_snd_settle_mode)

    @property
    def remote_rcv_settle_mode(self) -> int:
        """The receiver settle mode the peer's attach carried."""
        impl = self._impl
        return RCV_FIRST if impl is None else int(impl.remote_rcv_settle_mode)

    @property
    def remote_max_message_size(self) -> int:
        """The largest message the peer accepts (0: no limit)."""
        impl = self._impl
        return 0 if impl is None else int(impl.remote_max_message_size or 0)

    @property
    def remote_properties(self) -> Any:
        """The link properties the peer sent, or None."""
        impl = self._impl
        return None if impl is None or impl.remote_attach is None else impl.remote_attach.properties

    @property
    def remote_offered_capabilities(self) -> Any:
        """The capabilities the peer offered on this link, or None."""
        impl = self._impl
        return None if impl is None or impl.remote_attach is None else impl.remote_attach.offered_capabilities

    @property
    def remote_desired_capabilities(self) -> Any:
        """The capabilities the peer desired on this link, or None."""
        impl = self._impl
        return None if impl is None or impl.remote_attach is None else impl.remote_attach.desired_capabilities

    # --- credit ------------------------------------------------------------------------------------------

    @property
    def credit(self) -> int:
        """The link credit: how many more messages may be sent now."""
        impl = self._impl
        return 0 if impl is None else impl.link_credit

    @property
    def available(self) -> int:
        """The sender's count of messages it could send now (§2.6.7)."""
        impl = self._impl
        return 0 if impl is None else int(impl.available)

    @property
    def queued(self) -> int:
        """Deliveries waiting on this end: not yet sent (sender) or not yet read (receiver)."""
        return 0

    @property
    def unsettled(self) -> int:
        """Deliveries of this link not yet settled on this end."""
        return 0

    @property
    def drain_mode(self) -> bool:
        """The drain flag: a receiver asks the sender to use up or give back its credit (a sender reads the flag
        of the receiver's last flow).

        A receiver's is the application's, as proton's: set here or by :meth:`Receiver.drain`, it stays set once
        the drain is complete; a ``flow`` clears it after a ``drain`` (not after it was set here).
        """
        if self.is_receiver:
            return bool(self._drain)
        impl = self._impl
        return self._drain_mode if impl is None else bool(impl.drain)

    @drain_mode.setter
    def drain_mode(self, value: bool) -> None:
        self._drain_mode = bool(value)
        if self.is_receiver:
            self._drain = bool(value)
            self._drain_flag_mode = True
            if self._connection._reactor is None:
                _engine_links.modified(self)
            else:
                self._flow_drain_flag()

    @property
    def current(self) -> Delivery | None:
        """The current delivery: the one being written (sender) or read (receiver)."""
        return None

    def _flow_drain_flag(self) -> None:
        """Receiver hook: tell the sender the drain flag the application set (with a container)."""

    def advance(self) -> bool:
        """Move past the current delivery; True when there was one."""
        return False

    def drained(self) -> int:
        """Answer (sender) or account for (receiver) a drain; returns the credit it gave back."""
        return 0

    # --- life --------------------------------------------------------------------------------------------

    def open(self) -> None:
        """Attach the link (answering the peer's attach, for a link it started)."""
        if self._local != _UNINIT:
            return
        self._local = _ACTIVE
        self._push(Event.LINK_LOCAL_OPEN)
        if self._connection._reactor is None:
            self._connection._modified_endpoints[self] = None  # attached at the transport's next output
            self._connection._setup_pending = True
            return
        try:
            self._attach_if_ready()
        except LocalProtocolError as exc:  # a value of the program's the engine refuses (a link name in use...)
            raise LinkException(exc.description or str(exc)) from exc

    def close(self) -> None:
        """Detach and close the link (with :attr:`condition`, if set)."""
        self._detach(closed=True)

    def detach(self) -> None:
        """Detach the link without closing it (it may be resumed)."""
        self._detach(closed=False)

    def _detach(self, closed: bool) -> None:
        if self._connection._reactor is None:
            # proton's engine: a close is the link's local state; a detach is noted apart (the state stays).
            if (self._local == _CLOSED and closed) or (self._detached and not closed):
                return
            if closed:
                self._local = _CLOSED
            else:
                self._detached = True
                self._closes = False
            self._push(Event.LINK_LOCAL_CLOSE if closed else Event.LINK_LOCAL_DETACH)
            self._connection._modified_endpoints[self] = None  # detached at the transport's next output
            self._connection._setup_pending = True
            return
        if self._local == _CLOSED:
            if closed and self._detached:
                # proton: closing a detached link closes it locally (its detach, already sent, is not sent again).
                self._detached = False
                self._push(Event.LINK_LOCAL_CLOSE)
            return
        # With a container, a detach is a close that does not close: the link is done with on our side either way
        # (the container's code reads _local), and state reports it active, as proton's (see _detached).
        self._local = _CLOSED
        self._closes = closed
        self._detached = not closed
        self._push(Event.LINK_LOCAL_CLOSE if closed else Event.LINK_LOCAL_DETACH)
        _close_later(self)

    def _close_engine(self) -> None:
        """Send our detach (the container does it once the callbacks of the round have returned)."""
        impl = self._impl
        if impl is not None and impl.local_state is not CLOSED and self.session._engine_active():
            impl.detach(closed=self._closes, error=_error_of(self.condition))
            self.connection._touch()

    def free(self) -> None:
        """Forget the link (close it first)."""
        if self._connection._reactor is None:
            _engine_lifecycle.free_link(self)
            return
        links = self.session._links
        if self in links:
            links.remove(self)

    def next(self, mask: int) -> Link | None:
        """The next link of the connection whose state matches ``mask``."""
        links = [link for s in self.connection._sessions for link in s._links]
        index = links.index(self) if self in links else len(links)
        return next((link for link in links[index + 1 :] if link.state & mask == mask), None)

    def delivery(self, tag: bytes | str) -> Delivery:
        """Start a new delivery with ``tag`` (a sender's low-level API: :meth:`Sender.stream`, :meth:`advance`)."""
        raise LinkException("only a sender makes deliveries")

    # --- binding to the engine ---------------------------------------------------------------------------

    def _attach_options(self) -> dict[str, Any]:
        options: dict[str, Any] = {
            "source": self.source._composite(),
            "target": self.target._composite(),
            "snd_settle_mode": self.snd_settle_mode,
            "rcv_settle_mode": self.rcv_settle_mode,
        }
        if self.max_message_size:
            options["max_message_size"] = ulong(self.max_message_size)
        if self.properties:
            options["properties"] = {symbol(str(k)): v for k, v in dict(self.properties).items()}
        if self.offered_capabilities:
            options["offered_capabilities"] = self.offered_capabilities
        if self.desired_capabilities:
            options["desired_capabilities"] = self.desired_capabilities
        return options

    def _attach_if_ready(self) -> None:
        session = self.session
        if self._local != _ACTIVE or not session._engine_active():
            return
        impl = self._impl
        if impl is None:
            engine_session = session._impl
            namesake = engine_session.link_named(self.name, SENDER if self.is_sender else RECEIVER)
            if namesake is not None and (namesake.local_state is CLOSED or namesake.user_data._local == _CLOSED):
                # A link of this name, closed just now, waits for the peer's detach (§2.6.4, §2.6.1: a name
                # identifies a link): this one attaches once it has come (proton writes both, and its peer reads
                # them in order). A namesake still open is the program's error: the engine refuses it (misuse).
                session._name_waiters.setdefault(self.name, []).append(self)
                return
            attach = engine_session.attach_sender if self.is_sender else engine_session.attach_receiver
            impl = self._impl = attach(self.name, **self._attach_options())
            impl.user_data = self
            _engine_links.bound_held_message(impl)
        elif impl.local_state is UNINIT:
            impl.attach(**self._attach_options())
        else:
            return
        self.connection._touch()
        self._after_attach()

    def _after_attach(self) -> None:
        """Subclass hook: the engine link was attached on our side."""

    def _unbind(self) -> None:
        """The transport is gone: forget the engine link (a new one is made on the next transport)."""
        self._impl = None

    def _delivery_updated(self, delivery: Delivery) -> None:
        """A delivery's local state was set."""

    def _settle(self, delivery: Delivery) -> None:
        """Settle ``delivery`` on the engine."""

    def _send_state(self, delivery: Delivery) -> None:
        """Send the local state of ``delivery``, unsettled (it was updated and not settled in the callback)."""

    def _abort(self, delivery: Delivery) -> None:
        raise LinkException("only a sender aborts deliveries")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, state={self.state})"


def link_attached_by_peer(engine_link: Any) -> tuple[Link, bool]:
    """The proton link of an engine link the peer attached (a ``LinkAttached`` event), and whether it was made just
    now (the caller then reports ``LINK_INIT`` first): a ``Sender`` for a link on which we send, else a
    ``Receiver``."""
    link: Link | None = engine_link.user_data
    if link is not None:
        return link, False
    session = engine_link.session.user_data
    kind = Sender if engine_link.role is SENDER else Receiver
    if session.connection._reactor is None:
        # proton's engine: the application may have made the link (same name and role) before the peer's attach
        # came, and not attached it yet; it is that link (unless both ends closed it).
        for existing in session._links:
            if (
                type(existing) is kind
                and existing.name == engine_link.name
                and existing._impl is None
                and not (existing._local == _CLOSED and existing.state & Endpoint.REMOTE_CLOSED)
            ):
                existing._impl = engine_link
                engine_link.user_data = existing
                return existing, False
        link = session._new_link(kind, engine_link.name)  # queues its LINK_INIT
        link._impl = engine_link
        engine_link.user_data = link
        return link, False
    link = kind(session, engine_link.name)
    link._impl = engine_link
    engine_link.user_data = link
    session._links.append(link)
    return link, True


# The two kinds of link live in modules of their own (they use what is above).
from ._receiver import Receiver  # noqa: E402
from ._sender import Sender  # noqa: E402
