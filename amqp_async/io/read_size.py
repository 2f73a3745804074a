"""How much a connection asks for at each read: 64 KiB, and 256 KiB while reads come back full.

A read of up to ``n`` bytes allocates a fresh ``bytes`` of ``n`` and shrinks it to what came: asyncio's transports,
trio's ``receive_some`` and the ``ssl`` module all do. glibc serves an allocation of 256 KiB with ``mmap``, and the
shrink and the free then cost an ``mremap`` and a ``munmap``: three system calls on every read, however small (on a
request/response round trip, three of seven). 64 KiB comes from the heap. Reads that fill 64 KiB mean a large
message is arriving: then 256 KiB a read, so that a megabyte still takes few reads (each read costs a turn of the
engine), until a read comes back small again.
"""

from __future__ import annotations

__all__ = ["LARGE_READ", "SMALL_READ", "next_read_size"]

SMALL_READ = 65536
LARGE_READ = 262144


def next_read_size(current: int, received: int) -> int:
    """The size of the next read, after one of ``current`` bytes that brought ``received``."""
    if received >= current:
        return max(current, LARGE_READ)
    if received < SMALL_READ:
        return SMALL_READ
    return current
