"""The broker's credit for producers: how it stays within ``max_queue_depth`` and ``max_memory`` (backpressure).

A producer (a link on which a client sends) gets credit (§2.6.7) in windows of :data:`WINDOW` messages, topped
up when it falls below half. With limits, a window is never larger than the room left:

- ``max_queue_depth``: a producer to a queue gets at most the room of the queue (the limit, less the messages
  waiting in it, less the credit its other producers hold); a producer to a topic, the least room of the topic's
  subscriptions. Every transfer uses a credit and adds a message, so the depth never passes the limit. (Messages
  that come back, released or from a consumer gone, return to their queue even above it: the credit then waits.)
- ``max_memory``: all producers together get at most the room left in bytes (the limit, less the bytes of the
  messages held and of those arriving in parts, each of these counted whole, less the bytes of the credit every
  producer holds), each producer's credit counted in messages of its own size (:meth:`Flow.unit`: the largest of
  its messages taken before its last top-up). Counted in one size for all (the larger of the average held and the
  last seen), one large message made every credit cost its size: small producers got no credit with a third of the
  memory free. A producer's own size is not known before its first message: until then it is counted at the size
  seen (the larger of the average held and the last), :data:`UNSEEN_SIZE` at most and before any message (a full
  window under a roomy limit, one credit under a tight one). Once its first message shows its size, and whenever
  its messages grow larger than that, credit it holds beyond the room is taken back (a flow lowering its
  link-credit, §2.6.7; :meth:`Flow._lower`), so that a producer of large messages waits rather than sends the rest
  of a window granted for smaller ones. With messages of one size the bytes held never pass the limit; with mixed
  sizes the estimate can be short, so each message is also checked in bytes as it arrives, and one that does not
  fit is rejected with ``amqp:resource-limit-exceeded`` (:func:`._assembly.memory_refusal`): a message larger than
  the limit, those a producer sent before it saw its credit lowered, and those of producers that change size or
  together outrun the estimate. A message counts its bytes and a fixed bookkeeping estimate
  (:data:`~._nodes.ENTRY_OVERHEAD`), so that many small messages are bounded as well as a few large ones; a topic's
  copies of one message share its bytes, counted once (:meth:`._nodes.Entry.copy`), and its producer's credit is
  counted at what the message took in all.

A queue holds at most its share of the memory limit (:meth:`Flow.share_left`: ``queue_share``, half by default, of
what the limit leaves beside the other queues, its messages waiting and delivered not settled counted): a producer's
room is also the least room left in the shares of the queues it fills. A queue whose consumer is stuck (it took its
prefetch and never settles) or slow, or that has none, then holds its own producers back, not those of every queue:
before, it took the whole limit, and no producer of the broker got credit for as long as it stayed so.

A producer refused a full window is *starved*: once consumers take messages or settle them (:meth:`Flow.freed`)
it gets credit again, as soon as the room is worth a window (half of one, or half of the limit when that is
smaller) — never a trickle of single credits. Nothing is rejected (but for the cases above) and the producers'
sends simply wait.

The room is counted less the credit every producer holds, so a producer that holds credit and never uses it (a
sender opened and left idle; one granted its window when messages were smaller than those since) starves the others
while the memory and the queues are empty: nothing held, no settlement to wait for. The broker's periodic sweep
(:meth:`Flow.unstall`, every ``expiry_interval``) gives the producers still starved since the last sweep a share of
the room that is really free (the messages held, not the credit promised, counted), half of it at most for all of
them together, when that room is worth a grant (less is the limit reached: that waits for settlements): a producer
is never held back for good by credit that is not used. This can commit more than the
limits if the idle producers then send all their credit: by at most the credit they held.

Producers whose address is known only per message (the anonymous relay) are held by the memory limit only; a
queue that is full when such a message arrives refuses it with ``amqp:resource-limit-exceeded``.

The nodes the broker makes on first use (queues, topics, topic subscriptions) count in ``max_memory`` too, each at
:data:`NODE_SIZE`: a node the limit has no room for is not made, and what asked for it (an attach, a message to a
new address) is refused with ``amqp:resource-limit-exceeded``. So does each open transaction (:mod:`._transactions`:
a declare without room is rejected likewise).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._nodes import Queue, Topic

__all__ = ["ENDPOINT_SIZE", "NODE_SIZE", "QUEUE_SHARE", "WINDOW", "Flow", "NoRoomForNode", "Producer"]

#: The credit a producer holds at most (and gets again once it used half). With 500, a producer sending as fast as
#: it could used it up before the broker's next flow came: 100,000 messages of 16 bytes waited for credit 237 times,
#: 0.7 s of 1.3 (none with 2,000, and a third faster); the limits make it smaller where they apply.
WINDOW = 2000
#: The part of the memory limit one queue may hold by default, of what the other queues leave (:meth:`Flow.share_left`).
QUEUE_SHARE = 0.5
#: The size a message is assumed to take before the broker has seen one (for the memory limit's first credit).
UNSEEN_SIZE = 64 << 10
#: The bytes a node (an empty queue, a topic, a subscription) is counted at in the memory limit: an empty queue
#: measured 1,413 bytes with tracemalloc (its deque, lists and counters), a topic 493, rounded up with the name and
#: the broker's dict entry.
NODE_SIZE = 1536
#: The bytes an endpoint a peer begins or attaches (a session, a link: a producer's, a consumer's, a transaction
#: controller's) is counted at in the memory limit: 20,000 idle receivers on one connection grew the broker's RSS by
#: 46 MiB (2.4 kB each: the engine's link, its consumer or producer and their maps), 20,000 sessions by 41 MiB,
#: rounded up. A peer could make them by the million, one frame each, with no message at all.
ENDPOINT_SIZE = 2560


def _worth(limit: int) -> int:
    """The least credit worth granting under a limit of ``limit`` messages: half a window, or half the limit when
    that is smaller (at least one): room below it is the limit reached, and waits for settlements."""
    return min(WINDOW // 2, max(1, limit // 2))


#: What a refusal for the memory limit tells the user to change (the broker's command-line option).
MORE_MEMORY = "run the broker with a larger --max-memory"


def no_room_within_memory(what: str, max_memory: int | None) -> str:
    """The description of a refusal of ``what`` (e.g. "a new queue 'x'") for the memory limit: it names the option
    that lifts it, so that the user reading it knows what to change."""
    return f"no room for {what} within the broker's memory limit ({max_memory} bytes): {MORE_MEMORY}"


class NoRoomForNode(Exception):
    """The memory limit leaves no room for a new node: what asked for it is refused with
    ``amqp:resource-limit-exceeded`` and these words."""


class Producer:
    """A link on which a client sends, as the flow control sees it.

    Args:
        credit: its credit now, plus the messages it sent that wait to be routed (they will take room).
        grant: gives it room for this many messages, those it sent that wait to be routed included (and wakes
            its connection to tell the client).
        target: the queue or topic its messages go to (None: per message, the anonymous relay).
    """

    __slots__ = ("counted", "counted_bytes", "credit", "grant", "latest", "size", "target")

    def __init__(self, credit: Callable[[], int], grant: Callable[[int], None], target: Queue | Topic | None) -> None:
        self.credit = credit
        self.grant = grant
        self.target = target
        #: its credit as the running totals count it (:meth:`Flow.recount`), and the bytes it is counted at.
        self.counted = 0
        self.counted_bytes = 0
        #: the size of its messages: the largest of those it sent before its last top-up (0: none sent yet). Its
        #: credit is counted in messages of this size (:meth:`Flow.unit`), not of other producers' sizes.
        self.size = 0
        #: the largest of its messages taken since its last top-up (:meth:`Flow.took`; 0: none).
        self.latest = 0


class Flow:
    """Credit for the broker's producers, and the bytes of the messages it holds.

    Args:
        max_memory: the most bytes of message payloads held at once (None: no limit).
        block_full_queues: withhold credit from producers of a queue at its ``max_depth`` (else the queue's
            messages beyond it are rejected, and only the memory limit holds producers back).
        queue_share: the part of the memory limit one queue may hold, of what the other queues leave
            (:meth:`share_left`; 1: the whole).
    """

    def __init__(
        self, max_memory: int | None = None, *, block_full_queues: bool = True, queue_share: float = QUEUE_SHARE
    ) -> None:
        if not 0 < queue_share <= 1:
            raise ValueError(f"queue_share must be above 0 and at most 1, not {queue_share!r}")
        self.max_memory = max_memory
        self.block_full_queues = block_full_queues
        self.queue_share = queue_share
        #: bytes and count of the messages held (queued, delivered and not settled).
        self.held_bytes = 0
        self.held_count = 0
        #: bytes of messages arriving in parts, in memory, not complete yet (:mod:`._assembly`).
        self.assembling = 0
        #: how many messages arrive in parts in memory (each counts whole in the room for messages: see _taken).
        self.arriving = 0
        #: bytes of the nodes (queues, topics, subscriptions) the broker made, each counted at :data:`NODE_SIZE`.
        self.node_bytes = 0
        #: bytes of the sessions and links peers began and attached, each counted at :data:`ENDPOINT_SIZE`.
        self.endpoint_bytes = 0
        self.last_size = 0
        self.producers: set[Producer] = set()
        self.starved: set[Producer] = set()
        # Bytes dropped since the starved producers were last looked at, and how many must be for one of them to
        # be worth a look again (the least any of them lacked then): see drop().
        self._dropped = 0
        self._lacking = 0
        # The producers starved at the last unstall() pass.
        self._starved_at_last_pass: set[Producer] = set()
        # The credit the producers hold, in all and by target (id), kept as running totals: summed at every
        # top-up, it made each attach cost a pass over every producer (4,000 senders to one queue took 6 s to
        # attach, 1.5 ms the last one). See recount().
        self._promised = 0
        self._promised_to: dict[int, int] = {}
        # The bytes that credit is counted at, each producer's in messages of its own size (see unit()).
        self._promised_bytes = 0

    # --- accounting (from the queues) ---------------------------------------------------------------------

    def hold(self, size: int) -> None:
        """A message of ``size`` bytes is held."""
        self.held_bytes += size
        self.held_count += 1
        self.last_size = size

    def drop(self, size: int) -> None:
        """A held message of ``size`` bytes is gone (settled, or its queue deleted)."""
        self.held_bytes -= size
        self.held_count -= 1
        if self.starved:
            # Not a pass over the starved producers at every settlement: with a thousand of them starved, each
            # settlement cost a million credit reads and the broker stopped answering (heartbeats included). Only
            # once the bytes dropped make up what the least needy of them lacked at the last pass.
            self._dropped += size
            if self._dropped >= self._lacking or not self.held_count:  # (the estimate of a size may have moved)
                self.freed()

    def resize(self, change: int) -> None:
        """A held message changed size (annotations, delivery-count)."""
        self.held_bytes += change

    def _held(self) -> int:
        """The bytes counted against the memory limit: messages, parts of messages, nodes, sessions and links."""
        return self.held_bytes + self.assembling + self.node_bytes + self.endpoint_bytes

    def _taken(self, size: int) -> int:
        """The bytes the room for messages of ``size`` is counted less: :meth:`_held`, with each message arriving in
        parts counted whole. Counted as far as it came, a 1 MiB message in 64 KiB frames used its credit at its
        first frame and left its room free: the producer got credit for it again, and every other message it
        sent was rejected."""
        return self._held() + max(0, self.arriving * size - self.assembling)

    def room_for_node(self) -> bool:
        """Whether the memory limit leaves room for one more node: else the node is not made (a peer could make
        one per attach, for as long as it likes, with no message at all)."""
        return self.max_memory is None or self._held() + NODE_SIZE <= self.max_memory

    def room_for_endpoint(self) -> bool:
        """Whether the memory limit leaves room for one more session or link: else it is refused.

        Sessions and links may take half the limit, whatever the messages take: a broker full of messages must still
        take the consumers that will drain it (the messages' room shrinks by what they take, see :meth:`_held`)."""
        return self.max_memory is None or self.endpoint_bytes + ENDPOINT_SIZE <= self.max_memory // 2

    def hold_endpoint(self) -> None:
        """A session was begun, or a link attached."""
        self.endpoint_bytes += ENDPOINT_SIZE

    def drop_endpoints(self, count: int = 1) -> None:
        """Sessions or links are gone (ended, detached, or their connection closed): their room counts as bytes
        dropped (see :meth:`drop`: not a pass over the starved producers at each)."""
        size = count * ENDPOINT_SIZE
        self.endpoint_bytes -= size
        if self.starved and size:
            self._dropped += size
            if self._dropped >= self._lacking:
                self.freed()

    def hold_node(self) -> None:
        """A node was made (counted whether or not :meth:`room_for_node` was asked: one loaded from the store)."""
        self.node_bytes += NODE_SIZE

    def drop_node(self) -> None:
        """A node was deleted (a dynamic queue, a subscription)."""
        self.node_bytes -= NODE_SIZE
        if self.starved:
            self.freed()

    # --- producers ----------------------------------------------------------------------------------------

    def add(self, producer: Producer) -> None:
        """A new producer: give it its first credit."""
        self.producers.add(producer)
        if producer.target is not None:
            producer.target.producers.add(producer)
            self._promised_to.setdefault(id(producer.target), 0)
        producer.counted = 0
        self.top_up(producer)

    def remove(self, *producers: Producer) -> None:
        """Producers are gone (their links detached, or their connection): the credit they held is free for the
        others (one pass over the starved producers for them all, and none when they held no credit: removing a
        thousand starved producers one pass each made a connection's end cost seconds)."""
        freed = False
        for producer in producers:
            if producer not in self.producers:
                continue
            self.producers.discard(producer)
            self.starved.discard(producer)
            self._starved_at_last_pass.discard(producer)
            freed = freed or producer.counted > 0
            self._count(producer, -producer.counted)
            producer.counted = 0
            self._promised_bytes -= producer.counted_bytes
            producer.counted_bytes = 0
            target = producer.target
            if target is not None:
                target.producers.discard(producer)
                if not target.producers:
                    del self._promised_to[id(target)]  # (an id can be another node's once this one is gone)
        if freed and self.starved:
            self.freed()

    def recount(self, producer: Producer) -> int:
        """Bring the running totals up to date with ``producer``'s credit now, and return it.

        Its credit changes when the broker grants some (every grant goes through this module, and is recounted
        at once) and when its messages are routed (the connection then tops it up, which recounts it first); the
        totals may lag only a change the client makes itself (a sender advancing its delivery-count, §2.6.7),
        and that only until the producer's next top-up or the periodic pass (:meth:`unstall`, which recounts
        them all)."""
        credit = producer.credit()
        if producer in self.producers:
            if credit != producer.counted:
                self._count(producer, credit - producer.counted)
                producer.counted = credit
            counted_bytes = credit * self.unit(producer)
            self._promised_bytes += counted_bytes - producer.counted_bytes
            producer.counted_bytes = counted_bytes
        return credit

    def _count(self, producer: Producer, change: int) -> None:
        self._promised += change
        if producer.target is not None:
            self._promised_to[id(producer.target)] += change

    def _grant(self, producer: Producer, room: int) -> None:
        """Give ``producer`` room for ``room`` messages (the connection may hold it back: its session waits for
        the client's settlements), and count what it holds then."""
        producer.grant(room)
        self.recount(producer)

    def top_up(self, producer: Producer) -> int:
        """Give a producer a new window when it used half of its own (and the limits leave room); lower its credit
        when it holds more than the memory limit leaves it (:meth:`_lower`).

        Returns the bytes the memory limit lacked for a window worth granting (0 when granted, or when another
        limit held it back).
        """
        credit = self.recount(producer)
        latest, producer.latest = producer.latest, 0
        if latest:
            # Its messages showed their size: its credit is counted in messages of that size from now on (unit()),
            # and, when they are larger than it was counted at (its first, or a switch to larger messages), lowered
            # if it holds more than the memory limit leaves it at that size (_lower).
            grew = latest > self.unit(producer)
            producer.size = latest
            credit = self.recount(producer)
            if grew and credit > 0 and self.max_memory is not None:
                credit = self._lower(producer, credit)
        if credit >= WINDOW // 2:
            return 0
        if self.max_memory is None and (not self.block_full_queues or producer.target is None):
            self._grant(producer, WINDOW)  # no limit applies: the plain window
            return 0
        room, worth, lacking = self._room(producer, credit)
        if room - credit >= worth:
            self._grant(producer, room)
            self.starved.discard(producer)
            return 0
        if credit <= 0 and not producer.size and self._depth_room(producer, credit) > 0 and self._guessed(producer):
            # No message of it seen yet, so its room is counted at a guess (UNSEEN_SIZE a message at most), and the
            # producers that came first may hold it all without sending (the default limit holds two windows of it).
            # Starved on that guess alone, a producer would wait for ever for a settlement that nothing is there to
            # make: one credit lets its first message through, and with the size it shows, the room is counted anew
            # (its next top-up).
            self._grant(producer, 1)
            self.starved.discard(producer)
            return 0
        self.starved.add(producer)
        return lacking

    def took(self, producer: Producer, size: int) -> None:
        """The connection took a message of ``size`` bytes (as the memory limit counts it) that ``producer`` sent:
        its next top-up counts its credit in messages of its size (:meth:`unit`)."""
        if size > producer.latest:
            producer.latest = size

    def _guessed(self, producer: Producer) -> bool:
        """Whether ``producer``, its size not known yet, may be starved on a guess of its size alone: no message
        seen yet, or messages seen larger than :data:`UNSEEN_SIZE` (its size is guessed at that, see :meth:`unit`)
        and the memory limit has room for one message of it.

        Under a 24 MiB limit, with 17 MiB held after a 10 MB message, 6.8 MiB were room for 108 messages of
        64 KiB: below a grant worth making (192, :func:`_worth`), a producer of 100-byte messages that had not
        sent yet would wait for room it did not need, and the sweep (unstall) would not give it any either."""
        if not self.last_size:
            return True
        if self.max_memory is None or self._message_size() <= UNSEEN_SIZE:
            return False  # its room is counted at the sizes seen (as for every producer): not a guess
        return self._free_bytes() >= self.unit(producer)

    def _lower(self, producer: Producer, credit: int) -> int:
        """Lower the credit of ``producer`` (holding ``credit``), whose messages just showed a larger size than its
        credit was counted at (:attr:`Producer.size`), to the room the memory limit leaves it when it holds more;
        return its credit then.

        Its first window was counted in messages of the size seen so far, its own unknown (:data:`UNSEEN_SIZE`
        before any message): a producer of 1 MiB messages given 2,000 credits at 64 KiB a message held 2 GB of them
        under the default limit of 256 MiB, and once the memory was full, every message it sent was rejected, the
        rest of that window (``amqp:resource-limit-exceeded``, each one crossing the wire in full first). Lowered
        once its first message shows the size, its sends wait for credit instead. Lowered again when its messages
        grow larger: a producer that sent 100-byte messages, then 256 KiB ones, kept the window granted for the
        small ones (1,981 credits under an 8 MiB limit), and once the memory was full, 29 of its 60 large messages
        were rejected, beside a consumer taking them. A message larger than those seen before a top-up is still
        checked in bytes as it comes (:func:`._assembly.memory_refusal`).

        §2.6.7: "If the link-credit is reduced by the receiver when transfers are in-flight, the receiver MAY either
        handle the excess messages normally or detach the link with a transfer-limit-exceeded error code." The
        broker handles them (the engine takes as many as were taken back: ``protocol.link``), each checked in bytes as
        it comes: what was in flight when the producer saw the flow may be rejected, not the rest of the window.
        """
        assert self.max_memory is not None
        size = self.unit(producer)
        # The credit the others hold is room promised (as _room counts it): not this producer's.
        room = self._free_bytes() - (self._promised_bytes - producer.counted_bytes)
        room //= size
        if credit <= room:
            return credit
        self._grant(producer, max(room, 0))
        return producer.counted

    def freed(self) -> None:
        """Room was made (messages taken or settled): starved producers get credit again if it is worth it (one
        pass over them, each in constant time: the credit the others hold is a running total)."""
        lacking = [self.top_up(producer) for producer in list(self.starved)]
        self._dropped = 0
        self._lacking = min(lacking, default=0)

    def unstall(self) -> int:
        """The broker's periodic pass: producers starved at the last pass and still starved get credit from the room
        the messages held really leave (the credit others hold not counted), half of it at most among them; return
        how many got some.

        Starving a producer waits for room that settlements make. When the room is promised to producers that do
        not send, no settlement comes: without this pass such a producer waited for ever with the broker empty."""
        for producer in self.producers:
            self.recount(producer)  # what the totals may lag (see recount) is made good here
        stalled = [producer for producer in self.starved if producer in self._starved_at_last_pass]
        self._starved_at_last_pass = set(self.starved)
        if not stalled:
            return 0
        # The bytes really free; each producer may have half (rounded up) of what they hold in messages of its own
        # size, and a share takes twice its bytes from them: together, half of the room at most.
        free = None if self.max_memory is None else self._free_bytes()
        free_by_target: dict[int, int] = {}
        unstalled = 0
        for producer in stalled:
            if producer.credit() > 0:
                continue
            share = WINDOW // 2
            unit = self.unit(producer)
            if free is not None:
                assert self.max_memory is not None
                if not self._worth_a_grant(unit):
                    # Less than a grant worth making (see _room) is the limit reached, not room promised and
                    # unused: that waits for settlements, as before (no trickle of shares towards the last byte).
                    continue
                allowed = (free // unit + 1) // 2
                share = min(share, max(1, allowed // len(stalled)), allowed)
            target = producer.target
            key = id(target)
            if free is not None and target is not None:
                for queue in target.queues():  # half of what its queues' shares leave (share_left), likewise
                    share = min(share, (max(0, self.share_left(queue)[1]) // unit + 1) // 2)
            if self.block_full_queues and target is not None:
                if key not in free_by_target:
                    free_by_target[key] = self._free_depth(target)
                share = min(share, free_by_target[key])
            if share <= 0:
                continue
            self._grant(producer, share)
            self.starved.discard(producer)
            self._starved_at_last_pass.discard(producer)
            if free is not None:
                free -= 2 * share * unit
            if key in free_by_target:
                free_by_target[key] -= share
            unstalled += 1
        return unstalled

    def memory_full(self) -> bool:
        """Whether the memory limit holds producers back now: some wait for credit, and the room it leaves for
        messages (the messages held counted, not the credit promised) is less than a grant worth making, or the
        share of a queue they fill is (:meth:`share_left`)."""
        if self.max_memory is None or not self.starved:
            return False
        return not any(self._worth_a_grant(self.unit(producer)) for producer in self.starved) or any(
            self._share_reached(producer) for producer in self.starved
        )

    def _share_reached(self, producer: Producer) -> bool:
        """Whether one of the queues ``producer`` fills has less of its share left (:meth:`share_left`) than a
        grant worth making of its messages: it waits for that queue's consumers."""
        if producer.target is None:
            return False
        unit = self.unit(producer)
        for queue in producer.target.queues():
            share, left = self.share_left(queue)
            if left // unit < _worth(share // unit):
                return True
        return False

    def share_left(self, queue: Queue) -> tuple[int, int]:
        """The share of the memory limit ``queue`` may hold, and the bytes of it left now (both 0 without a limit).

        A queue (a topic's subscription too) holds at most :attr:`queue_share` (half by default) of what the limit
        leaves beside the other queues, its messages queued and delivered not settled counted
        (:attr:`~._nodes.Queue.held_bytes`): a queue whose consumer is stuck (it took its prefetch and never
        settles) or slow, or that has none, stops its own producers at its share, and every other queue keeps room
        for its producers (half of the rest, and so on). Before, such a queue took the whole limit, and the
        producers of every other queue waited for credit for as long as it was stuck. See
        ``docs/broker-differences.md`` (the memory limit) for ActiveMQ Artemis's and RabbitMQ's rules."""
        if self.max_memory is None:
            return 0, 0
        share = int(max(0, self.max_memory - (self._held() - queue.held_bytes)) * self.queue_share)
        return share, share - queue.held_bytes

    def _free_bytes(self) -> int:
        """The bytes the memory limit leaves messages now: the messages held counted, not the credit promised."""
        assert self.max_memory is not None
        return max(0, self.max_memory - self._taken(self._message_size()))

    def _worth_a_grant(self, unit: int) -> bool:
        """Whether the bytes really free (:meth:`_free_bytes`) hold a grant worth making of messages of ``unit``
        bytes: less is the memory limit reached (for messages of that size)."""
        assert self.max_memory is not None
        return self._free_bytes() // unit >= _worth(self.max_memory // unit)

    @staticmethod
    def _free_depth(target: Queue | Topic) -> int:
        """Half (rounded up) of what the fullest of ``target``'s queues with a ``max_depth`` has free, in messages
        (WINDOW: none has a limit); 0 when that is less than a grant worth making (half the queue's limit): the
        queue is full then, not promised to producers that do not send."""
        free = 2 * WINDOW
        for queue in target.queues():
            if queue.max_depth is not None:
                room = max(0, queue.max_depth - len(queue.entries))
                free = min(free, room if room >= _worth(queue.max_depth) else 0)
        return (free + 1) // 2

    def _message_size(self) -> int:
        """The size a message is counted at: the larger of the average held and the last seen (UNSEEN_SIZE before
        the first)."""
        if not self.last_size:
            return UNSEEN_SIZE
        return max(self.last_size, self.held_bytes // self.held_count if self.held_count else 0, 1)

    def unit(self, producer: Producer) -> int:
        """The size ``producer``'s credit is counted at in the memory limit: the size of its own messages once they
        showed it, else the size a message is counted at (:meth:`_message_size`), at most :data:`UNSEEN_SIZE`.

        Counted in messages of one size for all (the larger of the average held and the last seen), one message of
        100 MB held made every producer's credit cost 100 MB: with 142 MiB held of 207, a producer of 100-byte
        messages got no credit at all, for as long as nothing was consumed (its sends hung), and the broker logged
        its memory full. A producer not sized yet is counted at UNSEEN_SIZE at most: what it sends first shows its
        size, and its credit is lowered then if it holds more than the room (:meth:`_lower`)."""
        if producer.size:
            return producer.size
        return min(self._message_size(), UNSEEN_SIZE)

    def _depth_room(self, producer: Producer, credit: int) -> int:
        """The most credit the queue-depth limit lets ``producer`` (holding ``credit``) hold now (WINDOW: none
        applies)."""
        room = WINDOW
        target = producer.target
        if self.block_full_queues and target is not None:
            others = self._promised_to[id(target)] - credit
            for queue in target.queues():
                if queue.max_depth is not None:
                    room = min(room, queue.max_depth - len(queue.entries) - others)
        return room

    def _room(self, producer: Producer, credit: int) -> tuple[int, int, int]:
        """The most credit ``producer`` (holding ``credit``) may hold now, the least worth granting, and the bytes
        the memory limit lacks for that (0: none lacking)."""
        room = self._depth_room(producer, credit)
        worth = WINDOW // 2
        lacking = 0
        target = producer.target
        if self.block_full_queues and target is not None:
            for queue in target.queues():
                if queue.max_depth is not None:
                    worth = min(worth, _worth(queue.max_depth))
        if self.max_memory is not None:
            # Counted in messages of the larger of the average size held and the last one seen; before the first
            # message, of UNSEEN_SIZE: a full window where the room is ample, one credit (to learn the size) where
            # the limit is tight.
            unit = self.unit(producer)
            memory_room = (self._free_bytes() - (self._promised_bytes - producer.counted_bytes)) // unit
            room = min(room, memory_room)
            worth = min(worth, _worth(self.max_memory // unit))
            if target is not None:
                # Its queues' shares of the limit (share_left): less the credit their other producers hold
                others = (self._promised_to[id(target)] - credit) * unit
                for queue in target.queues():
                    share, left = self.share_left(queue)
                    share_room = (left - others) // unit
                    if share_room < memory_room:
                        memory_room = share_room
                        room = min(room, share_room)
                        worth = min(worth, _worth(share // unit))
            lacking = max(0, worth - (memory_room - credit)) * unit
        return max(room, 0), worth, lacking
