"""The read size rule (`amqp_async.io.read_size`): 64 KiB reads (a 256 KiB one costs an mmap, an mremap and a munmap),
256 KiB while reads come back full, back to 64 KiB once a read is small again."""

from __future__ import annotations

from amqp_async.io.read_size import LARGE_READ, SMALL_READ, next_read_size


def test_small_reads_stay_small() -> None:
    assert SMALL_READ == 65536 and LARGE_READ == 262144
    for received in (1, 30, 65535):
        assert next_read_size(SMALL_READ, received) == SMALL_READ


def test_a_full_read_makes_reads_large_until_one_is_small() -> None:
    size = next_read_size(SMALL_READ, SMALL_READ)
    assert size == LARGE_READ
    assert next_read_size(size, LARGE_READ) == LARGE_READ  # full again: stays large
    assert next_read_size(size, 100_000) == LARGE_READ  # more than a small read holds: stays large
    assert next_read_size(size, 1000) == SMALL_READ  # small again


def test_a_read_larger_than_asked_still_counts_as_full() -> None:
    # Some streams hand over what they buffered beyond the size asked (anyio's receive does not, but the rule
    # must not shrink reads for it).
    assert next_read_size(SMALL_READ, 2 * SMALL_READ) == LARGE_READ
    assert next_read_size(LARGE_READ, 2 * LARGE_READ) == LARGE_READ
