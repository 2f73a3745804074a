"""Messages never put on the wire: which deliveries of a session none of whose bytes was written yet, and the
definite error such a message fails with when its link, session or connection ends (not ``DeliveryInDoubt``).

A transfer past the peer's incoming window (§2.5.6) waits in the engine's queue; a close that times out, or a lost
transport, drops it. Nothing of it reached the peer, so the application may send it again safely: it learns
that from an error that says so (the condition of what ended it), where ``DeliveryInDoubt`` left it guessing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import AMQPError, ClosedByApplication, ConnectionClosed, ConnectionError, ConnectionLost, LinkDetached

if TYPE_CHECKING:
    from ..protocol.delivery import Delivery as EngineDelivery
    from ..protocol.session import Session as EngineSession

__all__ = ["never_written", "not_sent_error"]


def never_written(session: EngineSession, candidates: set[EngineDelivery]) -> set[EngineDelivery]:
    """The deliveries among ``candidates`` (each sent whole by ``SenderLink.send``: one queued item, its payload
    the delivery's) none of whose bytes the engine wrote: they wait, whole, for the peer's incoming window.

    The engine writes its queue in turn (§2.5.6: each frame as the window allows), so only the delivery at its head
    can be partly written, a frame or more of it gone before the window shut. The head's written part is the
    difference between the bytes queued and those still waiting (:attr:`Session.outgoing_backlog`); it is known
    when every queued item is a whole delivery, and otherwise (a streamed delivery's parts are queued too) the head
    counts as partly written: in doubt, which is never wrong.
    """
    backlogged = session.backlogged_deliveries
    if not backlogged:
        return set()
    waiting = candidates.intersection(backlogged)
    head = backlogged[0]
    if head in waiting and not _head_untouched(session, backlogged, candidates):
        waiting.discard(head)
    return waiting


def _head_untouched(session: EngineSession, backlogged: list[EngineDelivery], whole: set[EngineDelivery]) -> bool:
    """True when nothing of the queue's head was written: every queued item is a whole delivery of ``whole`` (once),
    and the bytes still waiting are all of theirs."""
    if len(set(backlogged)) != len(backlogged) or not whole.issuperset(backlogged):
        return False
    return sum(len(delivery.payload) for delivery in backlogged) == session.outgoing_backlog


def not_sent_error(cause: AMQPError, what: str) -> AMQPError:
    """The error of a message none of whose bytes was written when ``cause`` ended ``what`` (its sender, session or
    connection, in words): the same kind of error and condition as ``cause``, its description saying the message
    was never sent, and ``cause`` chained."""
    description = (
        f"the message was never sent: the {what} ended before any of it was written (it waited for the peer's "
        f"session window), so it may be sent again: {cause.description or cause.condition}"
    )
    error: AMQPError
    if isinstance(cause, ConnectionError):
        kind = ConnectionClosed if isinstance(cause, ConnectionClosed) else ConnectionLost
        error = kind(
            description,
            condition=cause.condition,
            info=cause.info,
            url=cause.url,
            host=cause.host,
            port=cause.port,
            cause=cause,
        )
    elif isinstance(cause, ClosedByApplication):
        error = ClosedByApplication(description, condition=cause.condition)
    else:  # the link's or the session's error (the peer's condition), or a detach without one
        error = LinkDetached(description, condition=cause.condition, info=cause.info)
    error.__cause__ = cause
    return error
