"""Messages never put on the wire: the trackers of deliveries none of whose frames was written, or not the last
one, and the definite error such a message fails with when its link, session or connection ends (not
``DeliveryInDoubt``).

A transfer past the peer's incoming window (§2.5.6) waits in the engine's queue; an ending drops it: our close that
timed out, a lost transport, or the peer's detach, end or close (the engine drops the queue as it reads the frame,
before the event reaches us: the event names what it dropped, :attr:`LinkDetached.dropped
<amqp_async.protocol.events.LinkDetached.dropped>`). Nothing of it reached the peer, so the application may send it
again safely: it learns that from an error that says so (the condition of what ended it), where ``DeliveryInDoubt``
left it guessing. The engine marks each delivery as its first frame goes out (:attr:`Delivery.written
<amqp_async.protocol.delivery.Delivery.written>`): exact, for streamed deliveries too. A message of several frames
cut short after its first ones went out never reached the peer whole: it fails the same way (see
:func:`fail_unwritten`), a streamed one with ``DeliveryAborted`` (:func:`stream_cut_error` says why). At-most-once
messages have no tracker: their loss is logged (:func:`report_dropped_presettled`), and a ``send()`` or a stream's
``complete()`` waits for their last frame (:attr:`Delivery.written_whole
<amqp_async.protocol.delivery.Delivery.written_whole>`), raising the same errors when an ending comes first.
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
    DeliveryAborted,
    LinkDetached,
    SessionError,
)

if TYPE_CHECKING:
    from ..protocol.delivery import Delivery as EngineDelivery
    from ._tracker import Tracker

__all__ = [
    "ending_named",
    "fail_unwritten",
    "not_sent_error",
    "report_dropped_presettled",
    "stream_cut_error",
    "stream_ended_error",
]

log = logging.getLogger("amqp_async.connection")


def fail_unwritten(pending: Iterable[Tracker[Any]], cause: AMQPError, what: str) -> None:
    """Fail the trackers among ``pending`` whose delivery had no frame written, or not its last (the ending dropped
    the rest: :attr:`Delivery.written_whole <amqp_async.protocol.delivery.Delivery.written_whole>`), with
    :func:`not_sent_error` (``cause``; ``what`` ended: the sender, session or connection, in words); those written
    whole are left to be put in doubt. Called once an ending has made writing the rest impossible.

    A delivery is whole only with its last transfer frame: "additional data MAY be transferred in additional
    transfer frames by setting the more flag on all but the last transfer frame" (AMQP 1.0 §2.6.14). Once its link
    is detached no frame of it can follow (§2.6.4), and this client never resumes a delivery on a new link (§2.6.13:
    our attaches carry no unsettled map), so the receiver never gets the rest: it cannot deliver a message it did
    not get whole, and drops what came of it, as it must for an aborted one ("the receiver MUST discard the message
    data that was transferred prior to the abort", §2.6.14; §2.7.5 ``more``, ``aborted``). So a message cut short
    was never delivered, and may be sent again safely, as one never begun: not in doubt."""
    for tracker in list(pending):  # (each finished one leaves its sender's set)
        delivery = tracker.delivery
        if delivery is None or tracker.done:
            continue
        if not delivery.written:
            tracker._finish(None, not_sent_error(cause, what))
        elif not delivery.written_whole:
            tracker._finish(None, not_sent_error(cause, what, partly=True))


def report_dropped_presettled(dropped: Iterable[EngineDelivery], described: str, what: str) -> int:
    """Log a warning when at-most-once messages are among ``dropped``, the deliveries of one sender (``described``:
    the sender in words) that the ending of ``what`` (its sender, session or connection: ours, the peer's, or the
    transport's loss) cut short while they waited for the peer's session window: sent settled, they have no tracker
    to fail, and were dropped without a word (a ``send()`` still waiting for one to be written raises as well,
    ``Sender._wait_written``). Return how many."""
    count = sum(
        1
        for delivery in dropped
        # settled by us on sending (pre-settled): not settled early by the peer, not aborted
        if delivery.settled and not delivery.remote_settled and not delivery.aborted
    )
    if count:
        log.warning(
            "%d at-most-once message(s) of the %s were dropped before they were sent whole: the %s ended while "
            "they waited for the peer's session window (§2.5.6)",
            count,
            described,
            what,
        )
    return count


def not_sent_error(cause: AMQPError, what: str, *, partly: bool = False) -> AMQPError:
    """The error of a message none of whose bytes was written when ``cause`` ended ``what`` (its sender, session or
    connection, in words), or (``partly``) not its last frame: the same kind of error and condition as ``cause``,
    its description saying the message was never sent, and ``cause`` chained."""
    if partly:
        description = (
            f"the message was never sent whole: the {what} ended before its last frame was written (it waited for "
            "the peer's session window); the receiver drops a message it did not get whole, so it may be sent "
            f"again: {cause.description or cause.condition}"
        )
    else:
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


def ending_named(cause: AMQPError) -> str:
    """What ``cause`` ended, in words: the connection, the session or the sender."""
    if isinstance(cause, ConnectionError):
        return "connection"
    return "session" if isinstance(cause, SessionError) else "sender"


def stream_ended_error(delivery: EngineDelivery, cause: AMQPError, what: str) -> AMQPError | None:
    """The error of a streamed message (its ``delivery`` begun) when ``cause`` ended ``what`` (its sender, session
    or connection): never sent (:func:`not_sent_error`) when no frame of it was written; cut short
    (:func:`stream_cut_error`) when its last frame was not; None when it was written whole (its outcome is then in
    doubt)."""
    if not delivery.written:
        return not_sent_error(cause, what)
    if not delivery.written_whole:
        return stream_cut_error(cause, what)
    return None


def stream_cut_error(cause: AMQPError | None, what: str) -> DeliveryAborted:
    """The error of a streamed message cut mid-body: ``cause`` (None: the transport's loss, unnamed) ended ``what``
    (its sender, session or connection: ours, the peer's, or the transport's loss) after its first frames were
    written, before its last. It was never delivered: "additional data MAY be transferred in additional transfer
    frames by setting the more flag on all but the last transfer frame" (AMQP 1.0 §2.6.14), no frame of the link
    follows its end (§2.6.4), and the receiver drops a message it did not get whole, as an aborted one ("the
    receiver MUST discard the message data that was transferred prior to the abort", §2.6.14).

    Why :class:`DeliveryAborted` (``amqp-async:delivery-aborted``) and not, as for a :class:`Sender`'s message cut
    short, the error of what ended it (:func:`not_sent_error`): a stream's writer sends its body in parts, and one
    error kind tells it, whatever ended the message (its close, the peer's detach, end or close, the transport's
    loss with or without reconnect), that the body it was writing did not get through whole and may be sent again;
    it is the error its receiver sees for the same message (the body iterator's), and the one the stream sender has
    always raised at a connection lost mid-body. What ended it stays in ``__cause__`` (its kind and condition) and
    in the description. A streamed message none of whose frames was written was not cut: it was never sent
    (:func:`not_sent_error`, as a :class:`Sender`'s); one written whole is in doubt."""
    reason = f": {cause.description or cause.condition}" if cause is not None else ""
    error = DeliveryAborted(
        f"the streamed message was never delivered whole: the {what} ended after its first frames were written, "
        f"before its last{reason}; the receiver discards a message it did not get whole (§2.6.14), so it may be "
        "sent again"
    )
    error.__cause__ = cause
    return error
