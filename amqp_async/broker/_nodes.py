"""The broker's nodes: queues (competing consumers, browsers) and topics (a copy for every subscriber it selects).

A :class:`Queue` holds messages as their encoded bytes (decoded only when a selector or a redelivery needs the
fields). Consumers are the broker's sending links; each has the credit its receiver granted. Dispatch walks the
queue in order and offers each message to the consumers in round-robin order, skipping those without credit, whose
selector does not match, or to which the message is undeliverable (a ``modified`` outcome with
undeliverable-here). Browsers (distribution-mode ``copy``) see every message once and leave it in the queue.
Each entry has a place in its queue's order, and each consumer remembers the run of places it does not want (or,
a browser, has seen), so that a dispatch asks a consumer about a message once, however deep the backlog.

Messages sent to a consumer wait, unsettled, in the consumer's ``unsettled`` map until its outcome: accepted drops
them; released and modified put them back at the head (modified with delivery-failed counts the attempt in the
header's delivery-count, and gives the message up at the delivery limit); rejected drops them or moves them to
the dead-letter queue. When a consumer goes away, its unsettled messages return to the head of their queue in their
original order.

Expiry (§3.2.1 ttl, §3.2.4 absolute-expiry-time): each entry knows when it expires (from its arrival); a queue
knows its earliest expiry, so a dispatch takes the expired messages out first (an expired message is never
delivered) and the broker's periodic sweep (:meth:`Queue.expire`) frees them when nobody consumes. The entries
that may expire are in a heap, earliest first: finding the expired ones costs them, not the whole queue. A message
given up (expired, at the delivery limit) goes to the broker's dead-letter handling, or is dropped.

A queue counts the messages it holds (queued, or delivered and not settled) in the broker's :class:`Flow` (the
memory limit), and, when it is kept across restarts, writes its durable messages to the :class:`Store` on arrival
and removes them on settlement (:meth:`Queue.release`).
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import time
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import DecodeError
from ..message import Message
from ._flow import NoRoomForNode, no_room_within_memory
from ._sections import NO_TTL, cannot_expire, delivery_failed, expiry, merge_annotations, with_ttl, with_ttl_at
from ._store import is_durable

if TYPE_CHECKING:
    from ._bodies import BodyFile
    from ._flow import Flow, Producer
    from ._store import Store
    from .selector import Selector

__all__ = [
    "ENTRY_OVERHEAD",
    "EXPIRY_OVERHEAD",
    "WAITS_FOR_COMMIT",
    "Consumer",
    "ConsumerFailed",
    "DeadLetter",
    "Entry",
    "FailedAttempt",
    "Queue",
    "Topic",
]

_sequence = itertools.count()
#: Consumer keys (:attr:`Consumer.key`): never given twice in a process, unlike ``id()``, which a new consumer may
#: get from one freed before (a message refused by the old one was then withheld from the new one).
_consumer_keys = itertools.count(1)

#: Bytes of bookkeeping counted per message held, beside its payload (its Entry, the bytes object's header, its
#: place in the queue; measured with tracemalloc, rounded up), so that ``max_memory`` bounds many small messages
#: as well as a few large ones.
ENTRY_OVERHEAD = 256
#: Bytes counted besides for a message that may expire: its item in its queue's expiry heap (a tuple of three, 64
#: bytes, and its slot in the heap's list) and the float of its expiry time. Measured with tracemalloc: 50,000
#: one-byte messages put to a queue took 97 bytes more each with a ttl than without (besides their payloads);
#: rounded up for the list's growth. Uncounted, a flood of tiny messages with a ttl took the broker's RSS a third
#: past ``--max-memory`` (344 MiB under 256).
EXPIRY_OVERHEAD = 128


class DeadLetter(Protocol):
    """What the broker does with a message its queue gives up: ``dead_letter(queue, entry, reason, description,
    condition=...)``, with reason ``"expired"`` or ``"delivery-limit"`` (``condition``: the AMQP condition behind
    it, if any); the entry is still counted by the queue (see :meth:`Queue.release`)."""

    def __call__(
        self, queue: Queue, entry: Entry, reason: str, description: str, *, condition: str | None = None
    ) -> None: ...


@dataclass(frozen=True, slots=True)
class FailedAttempt:
    """How a delivery attempt failed, when something else than the consumer's outcome says so (its connection was
    lost): said in the dead-letter annotations of a message it takes to the delivery limit.

    Attributes:
        description: what happened (``"its consumer's connection was lost (...)"``).
        condition: the AMQP condition of it (``amqp:connection:forced``...), or None.
    """

    description: str
    condition: str | None = None


def expired_description(entry: Entry) -> str:
    """Why an expired message is given up, for its dead-letter description: when it expired (UTC, to the
    millisecond), so that a reader can tell how late it was (against ``x-opt-dead-letter-time``) and whether the
    producer's ttl or the consumers were short. "Before it was consumed": it may have been delivered and come back
    (released, its consumer gone) after its expiry, which the words "before it was delivered" denied."""
    expires = entry.expires
    when = "?" if expires is None else _utc(expires)
    why = "its ttl, counted from its arrival here, or its absolute-expiry-time"
    return f"expired at {when} ({why}) before it was consumed"


def _utc(seconds: float) -> str:
    """Seconds since the epoch as an ISO 8601 UTC time, to the millisecond."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
    return f"{stamp}.{int(seconds * 1000) % 1000:03d}Z"


class Entry:
    """One message in a queue: its bytes, and what the broker learned about it.

    Args:
        payload: the encoded message, as its producer sent it; for a large message kept on disk, its leading
            sections only (header, annotations, properties, application properties: what the broker reads and
            rewrites), the whole of it being in ``body``.
        message: the message decoded already, if it was.
        arrived: when it arrived (seconds since the epoch; default now): a header ttl counts from then.
        body: the file of a large message kept on disk (:mod:`._bodies`), or None.
    """

    __slots__ = (
        "__weakref__",
        "_junk",
        "_message",
        "body",
        "dirty",
        "excluded",
        "expires",
        "payload",
        "place",
        "sequence",
        "shared",
        "size",
        "stored",
        "ttl_at",
    )

    def __init__(
        self,
        payload: bytes,
        message: Message | None = None,
        *,
        arrived: float | None = None,
        body: BodyFile | None = None,
    ) -> None:
        self.payload = payload
        self.body = body
        self.sequence = next(_sequence)
        #: its place in its queue's order (:meth:`Queue.put`, :meth:`Queue.put_back`).
        self.place = 0
        self._message = message
        self._junk = False  # the payload was found not to decode
        #: the consumers (their :attr:`Consumer.key`) that said undeliverable-here, while they last.
        self.excluded: set[int] | None = None
        #: its id in the store (0: not stored).
        self.stored = 0
        #: the payload changed since it was counted and stored.
        self.dirty = False
        #: the copies sharing its payload (:meth:`copy`): [how many queues hold one, the payload's length]; None
        #: when it is its own.
        self.shared: list[int] | None = None
        try:
            # Sections are in order (§3.2): a first section past the properties means neither a header nor
            # properties, so no expiry (one byte read: the usual message is decided here).
            plain = payload[2] > 0x73
        except IndexError:
            plain = True
        if plain or cannot_expire(payload):
            #: when it expires (seconds since the epoch, §3.2.1 ttl and §3.2.4 absolute-expiry-time), or None.
            self.expires: float | None = None
            #: where its header's ttl is (see :func:`._sections.expiry`; 0: none): a delivery rewrites it to the time
            #: left (§3.2.1).
            self.ttl_at = NO_TTL
        else:
            self.expires, self.ttl_at = expiry(payload, time.time() if arrived is None else arrived)
        #: the size counted in the memory limit: the payload (in memory) and the bookkeeping that holds it
        #: (:meth:`measure`).
        self.size = self.measure()

    def copy(self) -> Entry:
        """A copy for another queue (a topic's subscriptions): the same bytes and expiry, a place of its own.

        The copies share one payload (one bytes object): the memory limit counts it once, however many queues hold
        a copy, and each copy's bookkeeping apart (:meth:`Queue.put`, :func:`_counted_in`)."""
        share = self.shared
        if share is None:
            share = self.shared = [0, len(self.payload)]
        entry = Entry.__new__(Entry)
        entry.shared = share
        entry.payload = self.payload
        entry.body = self.body  # one file for every copy: it goes with the last of them (see _bodies)
        entry.sequence = next(_sequence)
        entry.place = 0
        entry._message = self._message
        entry._junk = self._junk
        entry.excluded = None
        entry.size = self.size  # the same payload and expiry: the same cost (its own heap item included)
        entry.stored = 0
        entry.dirty = False
        entry.expires = self.expires
        entry.ttl_at = self.ttl_at
        return entry

    def measure(self) -> int:
        """The bytes this message counts in the memory limit: its payload, its bookkeeping
        (:data:`ENTRY_OVERHEAD`), and, when it may expire, its item in its queue's expiry heap
        (:data:`EXPIRY_OVERHEAD`)."""
        size = len(self.payload) + ENTRY_OVERHEAD
        return size if self.expires is None else size + EXPIRY_OVERHEAD

    @property
    def message(self) -> Message:
        """The decoded message (decoded once, on first use)."""
        if self._message is None:
            message = Message()
            message.decode(self.payload)
            self._message = message
        return self._message

    @property
    def decodes(self) -> bool:
        """Whether the payload is a message that decodes (the broker takes any bytes; a producer may send junk)."""
        if self._message is None and not self._junk:
            try:
                self.message  # noqa: B018 - decoded for the check, and kept
            except DecodeError:
                self._junk = True
        return not self._junk

    def expired(self, now: float) -> bool:
        """Whether the message has expired at ``now`` (seconds since the epoch)."""
        expires = self.expires
        return expires is not None and expires <= now

    def outgoing(self) -> bytes:
        """The bytes to deliver: the payload, its header's ttl reduced to the time left when it has one.

        §3.2.1: "When a message is transmitted by an intermediary that was received with a ttl, the transmitted
        message's header SHOULD contain a ttl that is computed as the difference between the current time and
        the formerly computed message expiration time, i.e., the reduced ttl, so that messages will eventually
        die if they end up in a delivery loop."
        """
        at = self.ttl_at
        if at == NO_TTL or self.expires is None:
            return self.payload
        left = max(int((self.expires - time.time()) * 1000), 1)
        if at > 0:
            return with_ttl_at(self.payload, at, left)  # the usual encoding: four octets overwritten
        try:
            return with_ttl(self.payload, left)
        except DecodeError:
            return self.payload

    def _changed(self, payload: bytes) -> None:
        self.payload = payload
        self._message = None  # decoded again when needed
        self.dirty = True
        if self.ttl_at != NO_TTL:
            self.ttl_at = expiry(payload, 0.0)[1]  # the ttl may have moved

    def annotate(self, annotations: dict[Any, Any]) -> None:
        """Combine ``annotations`` into the message annotations (a modified outcome's, §3.4.5; dead-lettering's),
        the other sections' bytes unchanged; a payload that does not decode is left as it is."""
        try:
            self._changed(merge_annotations(self.payload, annotations))
        except DecodeError:
            self._junk = True

    def failed_attempt(self) -> int | None:
        """Count a failed delivery attempt in the header (§3.4.5 delivery-failed: delivery-count + 1,
        first-acquirer false), the other sections' bytes unchanged; return the new delivery-count (None for a
        payload that does not decode, left as it is)."""
        try:
            payload, count = delivery_failed(self.payload)
        except DecodeError:
            self._junk = True
            return None
        self._changed(payload)
        return count


class _WaitsForCommit:
    """The type of :data:`WAITS_FOR_COMMIT`."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "WAITS_FOR_COMMIT"


#: What a consumer's ``send`` returns for an entry dealt to it pre-settled whose transfer waits for the store to
#: commit its removal (:func:`._consumers._send_after_commit`): the queue removes it from the store now and keeps
#: it counted in the memory limit until the transfer is written or the entry comes back (:meth:`Queue.written`,
#: :meth:`Queue.restore`).
WAITS_FOR_COMMIT = _WaitsForCommit()


class ConsumerFailed(Exception):
    """Raised by a consumer's ``send`` that did not send the entry: its connection failed while sending (it is
    being closed), or the entry is larger than the receiver takes (its link is being detached). The entry stays
    in the queue, and the consumer is passed over."""


class Consumer:
    """A subscription to a queue: a broker sending link, as the driver sees it.

    Args:
        send: transfers one entry (returns a token to settle it later, None when sent settled, or
            :data:`WAITS_FOR_COMMIT`).
        credit: returns the link's credit now.
        selector: only messages it matches are offered.
        browse: distribution-mode copy: see messages, leave them queued.
    """

    __slots__ = (
        "browse",
        "credit",
        "gone",
        "key",
        "known_from",
        "known_to",
        "last_seen",
        "parked",
        "refused",
        "selector",
        "send",
        "unsettled",
    )

    def __init__(
        self,
        send: Callable[[Entry], Any],
        credit: Callable[[], int],
        *,
        selector: Selector | None = None,
        browse: bool = False,
    ) -> None:
        self.send = send
        self.credit = credit
        self.selector = selector
        self.browse = browse
        self.last_seen = -1  # browsers: the sequence number of the last message shown
        #: The places (:attr:`Entry.place`) of a run of its queue's entries it is known not to want: every entry
        #: of the queue placed from ``known_from`` to ``known_to`` (empty when from > to) was found unwanted, or
        #: shown (a browser). Dispatch skips them without asking again (see :meth:`Queue.dispatch`).
        self.known_from = 1
        self.known_to = 0
        #: entries sent and not settled yet, by the token ``send`` returned.
        self.unsettled: dict[Any, Entry] = {}
        #: what names it in :attr:`Entry.excluded`: unique for the life of the process (never reused, as id() is).
        self.key = next(_consumer_keys)
        #: the entries it refused (undeliverable-here), weakly: the exclusions to drop when it goes.
        self.refused: weakref.WeakSet[Entry] | None = None
        #: it has left its queue (:meth:`Queue.unsubscribe`).
        self.gone = False
        #: found without credit: dispatch passes it by until :meth:`Queue.credited` (see :meth:`Queue.dispatch`).
        self.parked = False

    def refuse(self, entry: Entry) -> None:
        """The consumer settled ``entry`` modified with undeliverable-here: §3.4.5, the message "MUST NOT be
        redelivered to the same link". Other links, now or later, may have it; once this consumer is gone
        (:meth:`forget`), so is the exclusion."""
        if self.gone:
            return  # its link is gone (a transaction's late outcome): no link left to keep it from
        excluded = entry.excluded
        if excluded is None:
            entry.excluded = {self.key}
        else:
            excluded.add(self.key)
        refused = self.refused
        if refused is None:
            refused = self.refused = weakref.WeakSet()
        refused.add(entry)

    def forget(self) -> None:
        """The consumer is gone: the messages it refused no longer exclude it (their sets would otherwise grow
        with every consumer that refused them, for as long as they live)."""
        self.gone = True
        refused = self.refused
        if refused is None:
            return
        self.refused = None
        key = self.key
        for entry in refused:
            excluded = entry.excluded
            if excluded is not None:
                excluded.discard(key)
                if not excluded:
                    entry.excluded = None

    def wants(self, entry: Entry) -> bool:
        """Whether this consumer may be offered the entry."""
        if entry.excluded is not None and self.key in entry.excluded:
            return False
        if self.browse and entry.sequence <= self.last_seen:
            return False
        # A selector matches no payload that does not decode (it has no fields to select on).
        return self.selector is None or (entry.decodes and self.selector.matches(entry.message))


#: How many messages at the head of a queue a returned message looks past for its place (:meth:`Queue.put_back`).
RETURN_SCAN = 256


def _counted_in(entry: Entry) -> int:
    """The bytes the memory limit counts for ``entry`` as a queue takes it: its size, less its payload when another
    copy sharing the payload is counted already (:meth:`Entry.copy`).

    Counted whole for each copy, a message to a topic with ten subscribers counted ten payloads for the one bytes
    object they share: 200 messages of 50 kB filled a 64 MiB limit at 10.6 MiB really taken (tracemalloc), and as
    its producer's credit was counted at one message's size, 66 of them were rejected
    (``amqp:resource-limit-exceeded``) rather than waited for credit."""
    share = entry.shared
    if share is None:
        return entry.size
    share[0] += 1
    return entry.size if share[0] == 1 else entry.size - share[1]


def _counted_out(entry: Entry) -> int:
    """The bytes to uncount as a queue lets ``entry`` go (or its payload changes): what :func:`_counted_in` counted,
    its payload with the last copy that shares it. The entry no longer shares it."""
    share = entry.shared
    if share is None:
        return entry.size
    entry.shared = None
    share[0] -= 1
    return entry.size if share[0] == 0 else entry.size - share[1]


def _arrival(entry: Entry) -> int:
    return entry.sequence


def _consumer_key(consumer: Consumer) -> int:
    return consumer.key


class Queue:
    """A queue: messages in order, competing consumers served round-robin, browsers.

    Attributes:
        name: the address.
        max_depth: the most messages it holds (None: no limit).
        dynamic: made for a dynamic source; deleted when its link detaches.
        store: where its durable messages are kept (None: in memory only).
        flow: the broker's accounting of the messages held (None: not counted).
        delivery_limit: the failed deliveries after which a message is given up (None: no limit).
        dead_letter: what the broker does with a message given up (expired, or at the delivery limit); None drops
            it.
    """

    def __init__(
        self,
        name: str,
        *,
        max_depth: int | None = None,
        dynamic: bool = False,
        store: Store | None = None,
        flow: Flow | None = None,
        delivery_limit: int | None = None,
        dead_letter: DeadLetter | None = None,
    ) -> None:
        self.name = name
        self.max_depth = max_depth
        self.dynamic = dynamic
        self.store = store
        self.flow = flow
        self.delivery_limit = delivery_limit
        self.dead_letter = dead_letter
        self.entries: deque[Entry] = deque()
        # The places the next entries take (Entry.place): counting up at the tail, down at the head, so that the
        # entries are always in the order of their places, and a place, once left, is never given again.
        self._tail_place = 0
        self._head_place = -1
        #: every consumer, in the order they subscribed.
        self.consumers: list[Consumer] = []
        # Those not parked (found without credit since their last flow), competing and browsing, in the order they
        # subscribed (their keys go up): what a dispatch looks at.
        self._competing: list[Consumer] = []
        self._browsing: list[Consumer] = []
        # Round-robin: the key of the competing consumer that comes next (the one after the last served).
        self._next_key = 0
        #: the links that send to it (for their credit, :mod:`._flow`).
        self.producers: set[Producer] = set()
        #: the bytes of its messages counted in the memory limit (:attr:`Entry.size`), queued and delivered not
        #: settled yet: what its share of the limit is counted against (:meth:`._flow.Flow.share_left`).
        self.held_bytes = 0
        self.durable_subscription = False
        #: the node was deleted (:meth:`delete`): what comes back to it (a rolled-back transaction's messages) is
        #: dropped, not kept where no consumer will ever come.
        self.deleted = False
        #: a topic subscription's: the selector of its subscriber (the filter of the link that attached to it last),
        #: or None. :meth:`Topic.publish` copies to it only the messages it matches: the others would never leave.
        self.selector: Selector | None = None
        #: how many of its entries have an expiry.
        self.expiring = 0
        # (expires, place, entry) of the entries with an expiry, earliest first; an item whose entry has left the
        # queue since (delivered, or put back at another place) stays until it comes up, or until such items are
        # half the heap (_will_expire).
        self._expiries: list[tuple[float, int, Entry]] = []
        #: the earliest expiry among its entries (or earlier: the entry may have left), None when none expires.
        self.next_expiry: float | None = None

    def __len__(self) -> int:
        return len(self.entries)

    @property
    def full(self) -> bool:
        """True when the queue holds ``max_depth`` messages."""
        return self.max_depth is not None and len(self.entries) >= self.max_depth

    def queues(self) -> list[Queue]:
        """The queues its producers fill: itself."""
        return [self]

    def _will_expire(self, entry: Entry) -> None:
        """An entry with an expiry joined the queue (at its place)."""
        assert entry.expires is not None
        self.expiring += 1
        heap = self._expiries
        heapq.heappush(heap, (entry.expires, entry.place, entry))
        if len(heap) > 2 * self.expiring + 64:
            self._compact_expiries()
        self.next_expiry = heap[0][0]

    def _compact_expiries(self) -> None:
        """Most items of the expiry heap are of entries that left the queue: keep the others (a look-up each, not a
        pass over every message queued, most of which may not expire at all). Kept, an item holds its entry, and
        the message's bytes with it, settled and uncounted."""
        heap = self._expiries
        heap[:] = [item for item in heap if self._queued_at(item[2], item[1])]
        heapq.heapify(heap)
        self.next_expiry = heap[0][0] if heap else None

    def _queued_at(self, entry: Entry, place: int) -> bool:
        """Whether ``entry`` is in the queue, at ``place``."""
        index = self._index_after(place - 1)
        return index < len(self.entries) and self.entries[index] is entry

    def put(self, entry: Entry) -> None:
        """Append a message (counted; stored when durable and the queue is kept) and offer it to the consumers."""
        flow = self.flow
        if flow is not None:
            counted = _counted_in(entry)
            flow.hold(counted)
            if counted != entry.size:
                flow.last_size = entry.size  # the size of the message seen, not the part counted for this copy
            self.held_bytes += entry.size
        store = self.store
        if store is not None and is_durable(entry.payload):
            store.insert(entry, self.name)
        entry.place = self._tail_place
        self._tail_place += 1
        self.entries.append(entry)
        if entry.expires is not None:
            self._will_expire(entry)
        self.dispatch()

    def load(self, entry: Entry) -> None:
        """Append a message loaded from the store (counted; not stored again, not dispatched yet)."""
        entry.size = entry.measure()  # its expiry is the store's (kept from its arrival), not its payload's
        if self.flow is not None:
            self.flow.hold(entry.size)
            self.held_bytes += entry.size
        if entry.body is not None and self.store is not None:
            self.store.hold(entry.body)  # its file goes when no row names it and no entry holds it any more
        entry.place = self._tail_place
        self._tail_place += 1
        self.entries.append(entry)
        if entry.expires is not None:
            self._will_expire(entry)

    def put_back(self, entries: list[Entry]) -> None:
        """Return messages to the head of the queue (released, modified, or from a gone consumer), in the order
        they arrived in: among themselves, and behind messages returned before them that arrived earlier. Returned
        to a deleted node (:meth:`delete`), they are dropped.

        A message returned goes behind the ones at the head that arrived before it, looking at most
        :data:`RETURN_SCAN` of them (so that a consumer releasing many messages one disposition at a time costs
        each release that much at most; past it, the message goes to the head). Before, each release went to the
        head alone: a, b and c released one after the other came back as c, b, a.
        """
        if self.deleted:
            for entry in entries:
                self.release(entry)
            return
        queued = self.entries
        for entry in sorted(entries, key=_arrival, reverse=True):  # the latest first: each lands before those
            if entry.dirty:
                self._changed(entry)
            ahead: list[Entry] = []
            sequence = entry.sequence
            while queued and queued[0].sequence < sequence and len(ahead) < RETURN_SCAN:
                ahead.append(queued.popleft())
            if ahead and queued and queued[0].sequence < sequence:  # past the scan: at the head, as before
                queued.extendleft(reversed(ahead))  # back as they were, places unchanged
                ahead = []
            self._to_head(entry, counted=True)
            for earlier in reversed(ahead):
                self._to_head(earlier, counted=False)
        self.dispatch()

    def restore(self, entries: list[Entry]) -> None:
        """Take back messages dealt pre-settled (:data:`WAITS_FOR_COMMIT`: removed from the store, still counted)
        that were not delivered after all (their transfers waited for the store's commit, and their link went or its
        credit was lowered meanwhile): stored again, and back at the head of the queue in order (:meth:`put_back`;
        dropped when the node was deleted)."""
        store = self.store
        if store is not None and not self.deleted:
            for entry in entries:
                if is_durable(entry.payload):
                    store.insert(entry, self.name)
        self.put_back(entries)

    def written(self, entry: Entry) -> None:
        """A message dealt pre-settled (:data:`WAITS_FOR_COMMIT`) was written to its consumer: uncount it.

        Counted until then: uncounted as it was dealt, the messages waiting for a commit held on a slow disk took
        4.4 MB under a 1 MiB limit in five seconds (``flow.held_bytes`` 0), and grew for as long as the disk was
        slow."""
        self._uncount(entry)

    def _to_head(self, entry: Entry, *, counted: bool) -> None:
        """Put ``entry`` at the head under a new place: what a consumer learned of it before (a selector's verdict
        on bytes since modified, a browser that saw it) no longer stands for it. ``counted``: an entry joining the
        queue (else one already in it, moved, whose expiry is counted already)."""
        entry.place = self._head_place
        self._head_place -= 1
        self.entries.appendleft(entry)
        if entry.expires is not None:
            if counted:
                self._will_expire(entry)
            else:  # its old heap item is left behind (stale: it names the old place)
                heapq.heappush(self._expiries, (entry.expires, entry.place, entry))
                self.next_expiry = self._expiries[0][0]

    def failed(self, entries: list[Entry], attempt: FailedAttempt | None = None) -> None:
        """Return messages whose delivery failed (modified with delivery-failed, a rolled-back transaction, a
        consumer's lost connection: ``attempt`` says how, when the outcome does not): their header's
        delivery-count goes up (§3.2.1); those that reach the delivery limit are given up (to the dead-letter queue,
        or dropped), the others go back to the head of the queue in order."""
        if self.deleted:
            self.put_back(entries)  # dropped (see put_back)
            return
        kept = []
        limit = self.delivery_limit
        for entry in entries:
            count = entry.failed_attempt()
            if limit is not None and count is not None and count >= limit:
                description = f"{count} failed deliveries (the limit is {limit})"
                if attempt is None:
                    self.give_up(entry, "delivery-limit", description)
                else:
                    description = f"{description}, the last: {attempt.description}"
                    self.give_up(entry, "delivery-limit", description, condition=attempt.condition)
            else:
                kept.append(entry)
        if kept:
            self.put_back(kept)

    def give_up(self, entry: Entry, reason: str, description: str, *, condition: str | None = None) -> None:
        """A message this queue holds (no longer in :attr:`entries`) is given up: dead-lettered, or dropped."""
        if self.dead_letter is not None:
            self.dead_letter(self, entry, reason, description, condition=condition)
        else:
            self.release(entry)

    def expire(self, now: float) -> int:
        """Take the messages expired at ``now`` out of the queue (§3.2.1: "Messages that live longer than their
        expiration time will be discarded (or dead lettered)") and give them up; return how many.

        Called when a dispatch finds the earliest expiry passed, and by the broker's periodic sweep, so that
        expired messages free their memory and depth even when nobody consumes.
        """
        entries = self.entries
        heap = self._expiries
        expired: list[Entry] = []
        while heap and heap[0][0] <= now:
            _, place, entry = heapq.heappop(heap)
            index = self._index_after(place - 1)
            if index < len(entries) and entries[index] is entry:  # still queued there (else: left since)
                del entries[index]
                expired.append(entry)
        self.expiring -= len(expired)
        if self.expiring <= 0:
            self.expiring = 0
            heap.clear()  # what is left is of entries that left the queue
        self.next_expiry = heap[0][0] if heap else None
        if expired:
            expired.sort(key=lambda entry: entry.place)  # given up in the queue's order
            for entry in expired:
                self.give_up(entry, "expired", expired_description(entry))
            flow = self.flow
            if flow is not None and flow.starved:
                flow.freed()
        return len(expired)

    def _changed(self, entry: Entry) -> None:
        """A held message's bytes changed: count and store the new ones."""
        entry.dirty = False
        size = entry.measure()
        if self.flow is not None:
            # its own bytes now: a copy whose payload changed no longer shares the others' (Entry.copy)
            self.flow.resize(size - _counted_out(entry))
            self.held_bytes += size - entry.size
        entry.size = size
        if entry.stored and self.store is not None:
            self.store.update(entry, self.name)

    def release(self, entry: Entry) -> None:
        """A message this queue held is done with (settled, or dropped): uncount it and remove it from the store."""
        self._unstore(entry)
        self._uncount(entry)

    def _unstore(self, entry: Entry) -> None:
        """Remove ``entry`` from the store (when it is kept there)."""
        if entry.stored and self.store is not None:
            self.store.delete(entry)

    def _uncount(self, entry: Entry) -> None:
        """Take ``entry`` out of the memory accounting (what :meth:`put` or :meth:`load` counted)."""
        flow = self.flow
        if flow is not None:
            self.held_bytes -= entry.size
            flow.drop(_counted_out(entry))

    def clear(self) -> None:
        """The queue is deleted: release every message still in it."""
        entries = list(self.entries)
        self.entries.clear()
        self.expiring = 0
        self._expiries.clear()
        self.next_expiry = None
        for entry in entries:
            self.release(entry)

    def delete(self) -> None:
        """The node is deleted (a dynamic queue, a subscription): its messages are dropped (their memory and, for
        a kept one, their rows and large-message files released), and a kept queue is forgotten by the store."""
        self.deleted = True
        self.clear()
        if self.store is not None:
            self.store.remove_queue(self.name)

    def subscribe(self, consumer: Consumer) -> None:
        """Add a consumer; it is offered messages as its credit allows."""
        self.consumers.append(consumer)
        bisect.insort(self._browsing if consumer.browse else self._competing, consumer, key=_consumer_key)
        self.dispatch()

    def unsubscribe(self, consumer: Consumer, failed: FailedAttempt | None = None) -> None:
        """Remove a consumer, returning its unsettled messages to the head of the queue in order: released, or,
        with ``failed`` (its connection was lost), as failed deliveries (:meth:`failed`). The consumer is gone
        first: what comes back is not offered to it again."""
        if consumer in self.consumers:
            self.consumers.remove(consumer)
            if not consumer.parked:
                (self._browsing if consumer.browse else self._competing).remove(consumer)
        consumer.forget()
        pending = sorted(consumer.unsettled.values(), key=lambda entry: entry.sequence)
        consumer.unsettled.clear()
        if consumer.browse or not pending:
            return
        if failed is None:
            self.put_back(pending)
        else:
            self.failed(pending, failed)

    def credited(self, consumer: Consumer) -> None:
        """The consumer's credit may have gone up (a flow of its link, its session's window or its connection's
        output opening again): unpark it, and dispatch."""
        if consumer.parked and not consumer.gone:
            consumer.parked = False
            ready = self._browsing if consumer.browse else self._competing
            # back in its place among the others (subscription order: round-robin stays fair)
            ready.insert(bisect.bisect_left(ready, consumer.key, key=_consumer_key), consumer)
        self.dispatch()

    def _park(self, ready: list[Consumer]) -> list[Consumer]:
        """Park the consumers of ``ready`` that have no credit; return the others (those ``ready`` keeps)."""
        with_credit = []
        for consumer in ready:
            if consumer.credit() > 0:
                with_credit.append(consumer)
            else:
                consumer.parked = True
        ready[:] = with_credit
        return with_credit

    def dispatch(self) -> None:
        """Offer queued messages to consumers with credit, round-robin among competing consumers (those expired
        first taken out: an expired message is never delivered).

        A consumer found without credit is parked: dispatches pass it by until :meth:`credited` says its credit
        may have come back. A queue's consumers may be many, most of them idle (20,000 receivers without credit
        made each message put to their queue cost a pass over all of them three times: another client's
        send-and-receive on it went from 3,600 a second to 124).

        What each consumer was found not to want is remembered (:attr:`Consumer.known_from`, ``known_to``), so
        that a consumer whose selector matches none of a deep backlog costs each later dispatch the new messages
        only, not the whole backlog again: every message that arrives, and every flow of that consumer, used to
        ask its selector about all of them.
        """
        if not self.entries or not (self._competing or self._browsing):
            return
        next_expiry = self.next_expiry
        if next_expiry is not None and next_expiry <= time.time():
            self.expire(time.time())
            if not self.entries:
                return
        if self._browsing:
            for browser in self._park(self._browsing):
                self._show(browser)
        if self._competing:
            ready = self._park(self._competing)
            if ready:
                self._deal(ready)

    def _show(self, browser: Consumer) -> None:
        """Show a browser the messages it has not seen, in order, as its credit allows."""
        entries = self.entries
        index = self._first_unknown(browser)
        if index >= len(entries) or browser.credit() <= 0:
            return
        head_place, first_place, last_place = entries[0].place, entries[index].place, None
        while index < len(entries):
            entry = entries[index]
            if browser.known_from <= entry.place <= browser.known_to:
                index = self._index_after(browser.known_to)  # seen, or not wanted: skipped at once
                last_place = entries[index - 1].place
                continue
            if browser.credit() <= 0:
                break
            if browser.wants(entry):
                try:
                    browser.send(entry)
                except ConsumerFailed:
                    break
                browser.last_seen = entry.sequence
            last_place = entry.place
            index += 1
        self._learned(browser, head_place, first_place, last_place)

    def _deal(self, ready: list[Consumer]) -> None:
        """Give queued messages to the competing consumers ``ready`` (with credit, in the order they subscribed),
        round-robin, in order."""
        entries = self.entries
        competing = list(ready)  # less those that fail to send, as the walk goes
        index = min(self._first_unknown(consumer) for consumer in ready)
        if index >= len(entries):
            return
        # Every consumer ready now learns, of the entries from the first one looked at, up to where it stops being
        # ready (its credit used up: `stopped`) or the walk ends, that none is left that it wants.
        head_place, first_place = entries[0].place, entries[index].place
        last_place: int | None = None
        stopped: dict[Consumer, int | None] = {}
        waiting = len(ready)  # the consumers with credit still
        before = len(entries)
        while index < len(entries) and waiting:
            entry = entries[index]
            place = entry.place
            chosen = None
            count = len(competing)
            start = bisect.bisect_left(competing, self._next_key, key=_consumer_key)
            for step in range(count):
                consumer = competing[(start + step) % count]
                if consumer.known_from <= place <= consumer.known_to:
                    continue  # known not to want it
                if consumer.credit() > 0 and consumer.wants(entry):
                    chosen = consumer
                    self._next_key = consumer.key + 1
                    break
            if chosen is None:
                # no consumer for this one now (selectors, exclusions): on to the next message, or past the run
                # that every consumer with credit is known not to want
                index = self._next_unknown(index + 1, ready, stopped)
                last_place = entries[index - 1].place  # this one, or the last of the run passed over
                continue
            del entries[index]
            try:
                token = chosen.send(entry)
            except ConsumerFailed:
                entries.insert(index, entry)  # not sent: it keeps its place
                competing.remove(chosen)
                if chosen not in stopped:
                    stopped[chosen] = last_place  # it wanted this one: what it knows ends before it
                    waiting -= 1
                if not competing:
                    break
                continue
            last_place = place
            if chosen.credit() <= 0 and chosen not in stopped:
                stopped[chosen] = place
                waiting -= 1
            if entry.expires is not None:
                self.expiring -= 1
                if self.expiring <= 0:  # none left to expire: no sweep of this queue until one comes
                    self.expiring = 0
                    self._expiries.clear()
                    self.next_expiry = None
            if token is WAITS_FOR_COMMIT:
                self._unstore(entry)  # its removal joins the commit its transfer waits for; counted until written
            elif token is not None:
                chosen.unsettled[token] = entry
            else:
                self.release(entry)  # sent settled (at-most-once): done with
        for consumer in ready:
            self._learned(consumer, head_place, first_place, stopped.get(consumer, last_place))
        if self.expiring and len(self._expiries) > 2 * self.expiring + 64:
            # Delivered, they left items behind: a consumer that drained a backlog of messages with an hour's ttl
            # kept every one of them (and its bytes, uncounted) until its hour was up, unless more came.
            self._compact_expiries()
        flow = self.flow
        if flow is not None and flow.starved and len(entries) < before:
            flow.freed()  # room in the queue for producers waiting for credit

    # --- what consumers are known not to want -------------------------------------------------------------

    def _index_after(self, place: int) -> int:
        """The index of the first entry placed after ``place`` (the entries are in the order of their places)."""
        entries = self.entries
        low, high = 0, len(entries)
        while low < high:
            middle = (low + high) // 2
            if entries[middle].place <= place:
                low = middle + 1
            else:
                high = middle
        return low

    def _first_unknown(self, consumer: Consumer) -> int:
        """The index of the first entry the consumer may want: the head, unless its known run starts there."""
        entries = self.entries
        if consumer.known_from > consumer.known_to or not entries or entries[0].place < consumer.known_from:
            return 0
        return self._index_after(consumer.known_to)

    def _next_unknown(self, index: int, ready: list[Consumer], stopped: dict[Consumer, int | None]) -> int:
        """``index``, or past the entries from there that every consumer still with credit knows it does not
        want."""
        entries = self.entries
        if index >= len(entries):
            return index
        place = entries[index].place
        ends = []
        for consumer in ready:
            if consumer in stopped:
                continue
            if not consumer.known_from <= place <= consumer.known_to:
                return index
            ends.append(consumer.known_to)
        return self._index_after(min(ends)) if ends else index

    @staticmethod
    def _learned(consumer: Consumer, head_place: int, first_place: int, last_place: int | None) -> None:
        """The consumer was found to want none of the queue's entries placed from ``first_place`` to
        ``last_place`` (a walk that started with the head at ``head_place``): join that to its known run."""
        if last_place is None or last_place < first_place:
            return
        known_from, known_to = consumer.known_from, consumer.known_to
        if known_from > known_to:
            consumer.known_from, consumer.known_to = first_place, last_place
        elif head_place >= known_from:
            # the walk started after the entries of the known run (or within it): the two are one run
            consumer.known_to = max(known_to, last_place)
        elif last_place >= known_from:
            # the walk started at the head, before the known run, and reached it
            consumer.known_from, consumer.known_to = first_place, max(known_to, last_place)
        elif last_place - first_place >= known_to - known_from:
            # two runs apart (entries between them not looked at): keep the longer
            consumer.known_from, consumer.known_to = first_place, last_place


class Topic:
    """A topic: every subscriber gets its own copy of each message published while it is subscribed.

    Each subscription is a private queue; a durable subscription (terminus durable, expiry-policy never) keeps its
    queue, and the messages published meanwhile, after its link detaches (closed=false), for as long as the broker
    runs (and across restarts with a store), until its subscriber unsubscribes: the detach with closed=true of the
    last link attached to it (:meth:`unsubscribe`).

    A subscriber with a selector gets copies of the messages its selector matches only, as JMS topic subscriptions
    (and ActiveMQ Artemis's) do: before, its subscription took a copy of every message, and the copies it would never
    be given filled the memory limit until every producer of the broker waited for credit.

    Args:
        name: the address.
        delivery_limit: that of its subscriptions' queues (see :class:`Queue`).
        dead_letter: that of its subscriptions' queues (see :class:`Queue`).
    """

    def __init__(self, name: str, *, delivery_limit: int | None = None, dead_letter: DeadLetter | None = None) -> None:
        self.name = name
        self.subscriptions: dict[str, Queue] = {}
        #: the links that send to it (for their credit, :mod:`._flow`).
        self.producers: set[Producer] = set()
        self.delivery_limit = delivery_limit
        self.dead_letter = dead_letter

    def queues(self) -> list[Queue]:
        """The queues its producers fill: its subscriptions."""
        return list(self.subscriptions.values())

    def publish(self, entry: Entry) -> None:
        """Copy a message to every subscription whose selector, if it has one, matches it (one that is full misses
        it)."""
        for queue in self.subscriptions.values():
            if queue.full:
                continue
            selector = queue.selector
            # As Consumer.wants asks (a payload that does not decode matches no selector); the message is decoded
            # once, on the entry every copy is made from, and the copies share it.
            if selector is not None and not (entry.decodes and selector.matches(entry.message)):
                continue
            queue.put(entry.copy())

    def subscription(
        self,
        key: str,
        *,
        max_depth: int | None = None,
        durable: bool = False,
        store: Store | None = None,
        flow: Flow | None = None,
        refusable: bool = True,
        selector: Selector | None = None,
    ) -> Queue:
        """The subscription queue for ``key`` (made on first use); a durable one is kept in ``store``.

        ``selector`` is that of the subscriber attaching (its link's filter, None without one): from now on the
        subscription takes only the messages it matches (:meth:`publish`). A subscriber that comes back with another
        selector (a durable subscription's) replaces it; the messages queued already stay (no subscriber with
        another selector, or none, has lost them). While another subscriber with a different selector is attached
        to the same subscription (a durable one, shared), it takes every message, as before.

        A durable subscription kept in ``store`` keeps its selector there too: loaded at start (``selector``, the
        one stored), it goes on taking only what it matches until its subscriber attaches again.

        Raises:
            NoRoomForNode: ``flow``'s memory limit leaves no room for a new subscription (unless not
                ``refusable``: one loaded from the store).
        """
        queue = self.subscriptions.get(key)
        if queue is None:
            name = f"{self.name}#{key}"
            if flow is not None:
                if refusable and not flow.room_for_node():
                    raise NoRoomForNode(no_room_within_memory(f"a new subscription to {self.name!r}", flow.max_memory))
                flow.hold_node()
            queue = self.subscriptions[key] = Queue(
                name,
                max_depth=max_depth,
                store=store if durable else None,
                flow=flow,
                delivery_limit=self.delivery_limit,
                dead_letter=self.dead_letter,
            )
            if durable and store is not None:
                store.add_queue(name, self.name, key)
        before = queue.selector  # as the store has it (a subscription just kept has none there yet)
        if durable and not queue.durable_subscription:
            queue.durable_subscription = True
            if store is not None and queue.store is None:
                # a subscription that becomes durable: keep it, and the durable messages it holds, from now on
                queue.store = store
                store.add_queue(queue.name, self.name, key)
                for entry in queue.entries:
                    if is_durable(entry.payload):
                        store.insert(entry, queue.name)
                before = None
        if any(not _same_selector(consumer.selector, selector) for consumer in queue.consumers):
            queue.selector = None  # what either wants, until one of them attaches alone
        else:
            queue.selector = selector
        if queue.durable_subscription and queue.store is not None and not _same_selector(before, queue.selector):
            # kept with the subscription: after a restart it goes on taking only what it matches
            queue.store.set_selector(queue.name, None if queue.selector is None else queue.selector.text)
        return queue

    def unsubscribe(self, key: str) -> Queue | None:
        """Delete the subscription ``key`` (a durable one unsubscribed, or a private one whose link went): its
        messages are dropped and the store forgets it. Returns the queue deleted (None: there was none)."""
        queue = self.subscriptions.pop(key, None)
        if queue is not None:
            queue.delete()
        return queue


def _same_selector(one: Selector | None, other: Selector | None) -> bool:
    """Whether two selectors are the same (by their text: a long one is compiled anew at each attach)."""
    if one is None or other is None:
        return one is other
    return one is other or one.text == other.text
