"""Messages never put on the wire: the trackers of deliveries none of whose frames was written, and the definite
error such a message fails with when its link, session or connection ends (not ``DeliveryInDoubt``).

A transfer past the peer's incoming window (§2.5.6) waits in the engine's queue; an ending drops it: our close that
timed out, a lost transport, or the peer's detach, end or close (the engine drops the queue as it reads the frame,
before the event reaches us). Nothing of it reached the peer, so the application may send it again safely: it
learns that from an error that says so (the condition of what ended it), where ``DeliveryInDoubt`` left it
guessing. The engine marks each delivery as its first frame goes out (:attr:`Delivery.written
<amqp_async.protocol.delivery.Delivery.written>`): exact, for streamed deliveries too.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ..errors import (
    AMQPError,
    ClosedByApplication,
    ConnectionClosed,
    ConnectionError,
    ConnectionLost,
    LinkDetached,
    SessionError,
)

if TYPE_CHECKING:
    from ..protocol.link import SenderLink
    from ._tracker import Tracker

__all__ = ["fail_unwritten", "not_sent_error", "report_dropped_presettled"]

log = logging.getLogger("amqp_async.connection")


def fail_unwritten(pending: Iterable[Tracker[Any]], cause: AMQPError, what: str) -> None:
    """Fail the trackers among ``pending`` whose delivery had no frame written (:func:`not_sent_error`, with
    ``cause`` and ``what`` ended: the sender, session or connection, in words); those partly or wholly written are
    left to be put in doubt."""
    for tracker in list(pending):  # (each finished one leaves its sender's set)
        delivery = tracker.delivery
        if delivery is not None and not delivery.written and not tracker.done:
            tracker._finish(None, not_sent_error(cause, what))


def report_dropped_presettled(link: SenderLink, described: str, what: str) -> int:
    """Log a warning when at-most-once messages of ``link`` (``described``: the sender in words) still wait for the
    peer's session window as our ending of ``what`` (its sender, session or connection) is about to drop them:
    sent settled, they have no tracker to fail, and were dropped without a word (a ``send()`` still waiting for one
    to be written raises as well, ``Sender._wait_written``). Return how many."""
    session = link.session
    if not session.has_backlog:
        return 0
    dropped = {
        delivery
        for delivery in session.backlogged_deliveries
        # settled by us on sending (pre-settled): not settled early by the peer, not aborted
        if delivery.link is link and delivery.settled and not delivery.remote_settled and not delivery.aborted
    }
    if dropped:
        log.warning(
            "%d at-most-once message(s) of the %s were dropped before they were sent whole: the %s ended while "
            "they waited for the peer's session window (§2.5.6)",
            len(dropped),
            described,
            what,
        )
    return len(dropped)


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
    elif isinstance(cause, SessionError):  # the peer ended the session (its condition), as the sender raises now
        error = SessionError(description, condition=cause.condition, info=cause.info)
    else:  # the link's error (the peer's condition), or a detach without one
        error = LinkDetached(description, condition=cause.condition, info=cause.info)
    error.__cause__ = cause
    return error
