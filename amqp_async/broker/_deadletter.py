"""Dead-lettering: a message the broker gives up goes to the dead-letter queue, annotated with why.

Reasons (the value of :data:`REASON`):

- ``rejected``: a consumer rejected it (§3.4.3); the condition and description of the rejection's error go in
  :data:`CONDITION` and :data:`DESCRIPTION`;
- ``expired``: its ttl (§3.2.1) or absolute-expiry-time (§3.2.4) passed before it was consumed (perhaps delivered
  and returned after it); the description says when it expired;
- ``delivery-limit``: its delivery failed ``delivery_limit`` times (modified with delivery-failed, a rolled-back
  transaction, or held by a consumer whose connection was lost: the header's delivery-count, §3.2.1); when the
  last attempt was a lost connection, the description says so and :data:`CONDITION` is the condition of that end
  (``amqp:connection:forced``: the transport ended; ``amqp:resource-limit-exceeded``: the idle timeout);
- ``queue-full``: its queue was full when it arrived, and the producer's transfer was rejected with
  ``amqp:resource-limit-exceeded`` (``when_full="reject"``, or the anonymous relay to a full queue): RabbitMQ's
  ``reject-publish-dlx`` overflow does the same.

The annotations are message annotations (§3.2.3) with keys in the ``x-opt-`` space, which a receiver that does not
know them may ignore: :data:`REASON`, :data:`CONDITION` and :data:`DESCRIPTION` (when there is one), :data:`SOURCE`
(the queue it came from), :data:`TIME` (when, a timestamp) and :data:`COUNT` (how many times this message has
been dead-lettered, counting this one: an annotation already there is incremented). They are merged into the
message's own annotations; every other section keeps its bytes exactly (:mod:`._sections`). A dead-lettered
message does not expire in the dead-letter queue, nor is it given up there at the delivery limit: it is kept for
someone to look at.

A message given up by the dead-letter queue itself (rejected or expired there), and any message when no dead-letter
queue is configured, is dropped (and logged).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..errors import DecodeError
from ..types import symbol, timestamp, uint
from ._nodes import ENTRY_OVERHEAD
from ._sections import NO_TTL, annotations_of

if TYPE_CHECKING:
    from ._nodes import Entry, Queue

__all__ = ["CONDITION", "COUNT", "DESCRIPTION", "REASON", "SOURCE", "TIME", "DeadLetters"]

log = logging.getLogger("amqp_async.broker")

#: Why the message was dead-lettered: ``rejected``, ``expired``, ``delivery-limit`` or ``queue-full`` (a symbol).
REASON = symbol("x-opt-dead-letter-reason")
#: The error condition of a rejection (the consumer's), ``amqp:resource-limit-exceeded`` for queue-full, or that of
#: the lost connection that took a message to its delivery limit.
CONDITION = symbol("x-opt-dead-letter-condition")
#: The description of a rejection's error, or the broker's words for the other reasons.
DESCRIPTION = symbol("x-opt-dead-letter-description")
#: The address of the queue the message was dead-lettered from (for a topic subscription: ``TOPIC#KEY``).
SOURCE = symbol("x-opt-dead-letter-source")
#: When it was dead-lettered (a timestamp: milliseconds since the epoch).
TIME = symbol("x-opt-dead-letter-time")
#: How many times it was dead-lettered, this time included.
COUNT = symbol("x-opt-dead-letter-count")


class DeadLetters:
    """The broker's dead-letter handling.

    Args:
        address: the dead-letter queue's address (None: messages given up are dropped).
        queue: gives the queue at an address (made on first use).
    """

    def __init__(self, address: str | None, queue: Callable[[str], Queue]) -> None:
        self.address = address
        self._queue = queue
        #: messages dead-lettered and dropped, by reason (for tests and the log).
        self.counts: dict[str, int] = {}
        self.dropped: dict[str, int] = {}

    def __call__(
        self,
        queue: Queue | None,
        entry: Entry,
        reason: str,
        description: str,
        *,
        condition: str | None = None,
        source: str | None = None,
    ) -> None:
        """Give ``entry`` up for ``reason``: released by ``queue`` (the queue that held it; None for a message
        that never reached one), then moved to the dead-letter queue with its annotations, or dropped."""
        if queue is not None:
            # Its row goes; a large message's file stays (the entry still holds it, and the dead-letter queue's
            # row, inserted below in the same batch, names it: the store counts both, see _store).
            queue.release(entry)
        origin = source if source is not None else queue.name if queue is not None else "?"
        address = self.address
        if address is None or origin == address:
            self.dropped[reason] = self.dropped.get(reason, 0) + 1
            log.debug("message from %s dropped (%s: %s)", origin, reason, description)
            return
        annotations = {REASON: symbol(reason), SOURCE: origin, TIME: timestamp(int(time.time() * 1000))}
        if condition:
            annotations[CONDITION] = symbol(condition)
        if description:
            annotations[DESCRIPTION] = description
        try:
            previous = annotations_of(entry.payload).get(COUNT)
        except DecodeError:  # not a message: it goes as it came (annotate leaves it alone too)
            previous = None
        annotations[COUNT] = uint(int(previous) + 1 if isinstance(previous, int) else 1)
        entry.annotate(annotations)
        # It starts afresh in the dead-letter queue: counted at its new size, kept for inspection (no expiry),
        # deliverable to any consumer there.
        entry.dirty = False
        entry.size = len(entry.payload) + ENTRY_OVERHEAD
        entry.expires = None
        entry.ttl_at = NO_TTL
        entry.excluded = None
        self.counts[reason] = self.counts.get(reason, 0) + 1
        log.debug("message from %s dead-lettered to %s (%s: %s)", origin, address, reason, description)
        self._queue(address).put(entry)
