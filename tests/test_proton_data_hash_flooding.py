"""Maps that ``Data`` builds as Python dicts (``get_object``, ``get_dict``) refuse hash flooding, as the codec does.

A dict takes time in the square of the number of keys sharing a hash. A uuid hashes as its number modulo
2**61 - 1, a described value as the tuple of its parts, a double ``c * 2.0**61`` as ``c``: a peer can send a map of
thousands of keys of one hash (4,000 uuid keys took over a second to read, 8,000 four times that). ``Data`` reads
such a map's bytes (``decode``) as before, and refuses to build a dict of more than ``MAX_KEYS_OF_ONE_HASH`` keys
of one hash with a ``DataException`` naming ``amqp:decode-error``. python-qpid-proton 0.40 builds the dict, taking
the quadratic time (and cannot hash a described key at all).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest

from amqp_async import types as T
from amqp_async.codec import encode
from amqp_async.codec._decoder import MAX_KEYS_OF_ONE_HASH
from amqp_async.proton import Data, DataException

proton = pytest.importorskip("proton", reason="python-qpid-proton is the oracle (CI installs it)")

_MODULUS = 2**61 - 1  # CPython's hash of a number is the number modulo this prime
_FLOOD = 600  # keys of one hash: fast to refuse, and to build on the code before the bound


def uuid_keys(count: int) -> list[Any]:
    return [uuid.UUID(int=i * _MODULUS + 5) for i in range(1, count + 1)]


def described_keys(count: int) -> list[Any]:
    return [T.Described(T.symbol("k"), key) for key in uuid_keys(count)]


def double_keys(count: int) -> list[Any]:
    return [5 * 2.0 ** (61 * i) for i in range(count)]  # 2**61 is 1 modulo the prime: all hash as 5


def read_object(raw: bytes) -> Any:
    data = Data()
    data.decode(raw)
    data.rewind()
    data.next()
    return data.get_object()


def read_dict(raw: bytes) -> Any:
    data = Data()
    data.decode(raw)
    data.rewind()
    data.next()
    return data.get_dict()


def read_map_in_array(raw: bytes) -> Any:
    return read_object(raw).elements[0]


@pytest.mark.parametrize("make_keys", [uuid_keys, described_keys])
@pytest.mark.parametrize("read", [read_object, read_dict])
def test_map_of_one_hash_is_refused(make_keys: Callable[[int], list[Any]], read: Callable[[bytes], Any]) -> None:
    keys = make_keys(_FLOOD)
    assert len({hash(key) for key in keys}) == 1
    raw = encode({key: 1 for key in keys})
    with pytest.raises(DataException) as raised:
        read(raw)
    assert raised.value.condition == "amqp:decode-error"
    assert "hash" in str(raised.value)


def test_double_keys_of_one_hash_are_refused() -> None:
    keys = double_keys(17)  # doubles go up to 2**1024: 17 of them hash alike
    assert len(set(keys)) == 17 and len({hash(key) for key in keys}) == 1
    with pytest.raises(DataException) as raised:
        read_object(encode({key: 1 for key in keys}))
    assert raised.value.condition == "amqp:decode-error"


def test_map_in_an_array_is_bounded_too() -> None:
    flooded = {key: 1 for key in uuid_keys(_FLOOD)}
    raw = encode(T.Array(T.UNDESCRIBED, T.TypeCode.MAP, flooded))
    with pytest.raises(DataException) as raised:
        read_map_in_array(raw)
    assert raised.value.condition == "amqp:decode-error"


def test_maps_under_the_bound_read_as_proton_reads_them() -> None:
    """The bound itself, and ordinary uuid keys in any number, read as before: as proton reads them."""
    for keys in (uuid_keys(MAX_KEYS_OF_ONE_HASH), [uuid.uuid4() for _ in range(2000)]):
        raw = encode({key: T.int32(i) for i, key in enumerate(keys)})
        ours = read_object(raw)
        theirs = proton.Data()
        theirs.decode(raw)
        theirs.rewind()
        theirs.next()
        assert ours == theirs.get_object()
        assert read_dict(raw) == ours
