"""One choice among the attempts of a task, made through files: Disk Paxos (Gafni and Lamport, 2003), one disk.

Spark may run one partition of a micro-batch twice at the same time (a speculative copy) or again after a failure
(a retry), and each attempt receives messages of its own and writes them to a log entry. Exactly one of those
entries must become the partition's content, and every attempt that gets that far must learn which, whatever the
others do: stall, crash at any point, or come later. The storage may be an object store with no atomic rename and
no create-if-absent (S3, GCS), so the choice may rely on no more than this:

- a file appears whole when it is written (a rename of a finished file, or an object store's upload), and
- a listing shows every file whose write finished before the listing began (read-after-write consistency: local
  and HDFS, S3 and GCS and Azure today).

That is what Disk Paxos needs. Each attempt owns a *block* (its latest ballot file) that only it writes; it reads
the others' blocks by listing them. With one disk the algorithm is Paxos with blocks for messages:

1. Choose a ballot ``(round, attempt)`` above every ballot seen. Write the block (ballot, and what it had accepted
   before); list the blocks. If another block has a higher ballot, back off and start again.
2. Otherwise take the value of the block with the highest accepted ballot (any block, its own included), or its
   own proposal if none has accepted one. Write the block again, now accepting that value at its ballot; list the
   blocks. If another block has a higher ballot, back off and start again; otherwise the value is chosen.

Safety (no two attempts ever learn different values) needs nothing of timing: an attempt that stalls or dies at
any step only makes others start a round again, and one that comes later finds the chosen value in the blocks and
adopts it. Progress needs one attempt to run its two phases undisturbed, which random back-off brings.

The algorithm is written Sans-IO, as a generator of :class:`Write`, :class:`Read` and :class:`Pause` requests, so
that tests drive any interleaving of any number of attempts against an in-memory store, and :func:`run` drives it
against a real one.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Generator, Iterable

import attrs

__all__ = ["NO_BALLOT", "Ballot", "Block", "Pause", "Read", "Write", "choose", "run"]


@attrs.frozen(order=True)
class Ballot:
    """A ballot: a round number, made unique by the attempt that holds it (compared in that order)."""

    round: int
    attempt: str


#: The ballot of a block that has accepted nothing.
NO_BALLOT = Ballot(0, "")


@attrs.frozen
class Block:
    """An attempt's block: the highest ballot it has started (``mbal``) and the value it last accepted (``inp``,
    at ballot ``bal``; None with :data:`NO_BALLOT`). ``seq`` counts the owner's writes: the latest is its block."""

    owner: str
    seq: int
    mbal: Ballot
    bal: Ballot = NO_BALLOT
    inp: str | None = None


@attrs.frozen
class Write:
    """Store ``block`` as its owner's block (it replaces the owner's earlier ones)."""

    block: Block


@attrs.frozen
class Read:
    """Answer with every owner's latest block."""


@attrs.frozen
class Pause:
    """Wait ``seconds`` before going on (a back-off after a lost round)."""

    seconds: float


Request = Write | Read | Pause
Steps = Generator[Request, "list[Block] | None", str]


def _outbid(blocks: Iterable[Block], me: str, ballot: Ballot) -> bool:
    """True when another attempt has started a higher ballot than ``ballot``."""
    return any(block.owner != me and block.mbal > ballot for block in blocks)


def choose(
    me: str, proposal: str, *, rng: random.Random | None = None, back_off: float = 0.02, max_back_off: float = 1.0
) -> Steps:
    """The steps of attempt ``me``, proposing ``proposal``; returns the chosen value (its own or another's).

    Args:
        me: this attempt's name, unique among all attempts (it breaks ties between ballots).
        proposal: the value it proposes (the name of its log entry, written before).
        rng: the randomness of the back-off (tests pass a seeded one).
        back_off: the first back-off's upper bound, in seconds; it doubles with each lost round up to
            ``max_back_off``.
    """
    rng = rng or random.Random()
    seq = 0
    bal, inp = NO_BALLOT, None  # what this attempt has accepted, kept from round to round
    highest = 0
    pause = back_off
    while True:
        blocks = yield Read()
        assert blocks is not None
        highest = max([highest, *(block.mbal.round for block in blocks)])
        ballot = Ballot(highest + 1, me)
        # Phase 1: claim the ballot, then learn what earlier ballots may have chosen.
        seq += 1
        yield Write(Block(me, seq, ballot, bal, inp))
        blocks = yield Read()
        assert blocks is not None
        if not _outbid(blocks, me, ballot):
            accepted = [block for block in blocks if block.owner != me and block.bal > NO_BALLOT]
            if bal > NO_BALLOT:
                accepted.append(Block(me, seq, ballot, bal, inp))
            value = max(accepted, key=lambda block: block.bal).inp if accepted else proposal
            assert value is not None
            # Phase 2: accept the value at this ballot; it is chosen if nobody has started a higher one meanwhile.
            bal, inp = ballot, value
            seq += 1
            yield Write(Block(me, seq, ballot, bal, inp))
            blocks = yield Read()
            assert blocks is not None
            if not _outbid(blocks, me, ballot):
                return value
        highest = max([highest, *(block.mbal.round for block in blocks)])
        yield Pause(rng.uniform(0, pause))
        pause = min(pause * 2, max_back_off)


def run(
    steps: Steps,
    write: Callable[[Block], None],
    read: Callable[[], list[Block]],
    sleep: Callable[[float], None] = time.sleep,
) -> str:
    """Drive ``steps`` (from :func:`choose`) with a real store; return the chosen value."""
    reply: list[Block] | None = None
    while True:
        try:
            request = steps.send(reply)
        except StopIteration as done:
            chosen: str = done.value
            return chosen
        reply = None
        if isinstance(request, Read):
            reply = read()
        elif isinstance(request, Write):
            write(request.block)
        else:
            sleep(request.seconds)
