"""How a link's remote source and target read (``link.remote_source``, ``link.remote_target``), beside real proton.

proton-c reads a source that names no node (no address) and asks for none (not dynamic) as an unspecified terminus
(``type`` 0), and a target alike as a target: in both, the fields that say which node and how it lasts (address,
durability, expiry policy, timeout, distribution mode) read as their defaults, whatever the attach carried; the
fields it keeps as ``Data`` (properties, capabilities, filter, outcomes) are read in every case. Ours read such a
source as a source, with the frame's fields (a durability of 2 read 2). The same engine program runs with each
implementation writing the attach and each reading it.
"""

from __future__ import annotations

from typing import Any

import pytest
from proton_engine_program import Side, _open_pair, pump

pytest.importorskip("proton")

PROTON = "proton"
OURS = "amqp_async.proton"


def _data(data: Any) -> Any:
    data.rewind()
    if data.next() is None:
        return None
    value = data.get_object()
    if hasattr(value, "elements"):  # an Array: proton's and ours are distinct classes
        return [str(element) for element in value.elements]
    return value


def _read(terminus: Any) -> tuple[Any, ...]:
    return (
        terminus.type,
        terminus.address,
        terminus.dynamic,
        terminus.durability,
        terminus.expiry_policy,
        terminus.timeout,
        terminus.distribution_mode,
        _data(terminus.properties),
        _data(terminus.capabilities),
        _data(terminus.filter),
    )


def _fill(terminus: Any, mod: Any, source: bool) -> None:
    """Every field that is not the address: what proton drops when no node is named."""
    terminus.durability = 2
    terminus.expiry_policy = 3
    terminus.timeout = 9
    terminus.capabilities.put_array(False, mod.Data.SYMBOL)
    terminus.capabilities.enter()
    terminus.capabilities.put_symbol("cap")
    terminus.capabilities.exit()
    terminus.properties.put_dict({mod.symbol("p"): 1})
    if source:
        terminus.distribution_mode = 1
        terminus.filter.put_dict({mod.symbol("f"): "x"})


def _attach_and_read(writer: str, reader: str) -> dict[str, tuple[Any, Any]]:
    """Attach links of many termini from ``writer`` to ``reader``; what the reader reads of each."""
    log: list[tuple[Any, ...]] = []
    a = Side("A", writer, False, log)
    b = Side("B", reader, True, log)
    _open_pair(a, b)
    session = a.connection.session()
    session.open()
    # (name, kind, terminus to fill, how, address of the other terminus)
    links = [
        ("sender-unnamed-source", "sender", "source", _fill, "q"),
        ("receiver-unnamed-source", "receiver", "source", _fill, None),
        ("receiver-unnamed-target", "receiver", "target", _fill, "q"),
        ("sender-named-source", "sender", "source", _named, "q"),
        ("sender-empty-address", "sender", "source", _named_empty, "q"),
        ("receiver-dynamic-source", "receiver", "source", _dynamic, None),
        ("receiver-dynamic-target", "receiver", "target", _dynamic, "q"),
    ]
    for name, kind, filled, fill, other_address in links:
        link = getattr(session, kind)(name)
        other = link.target if filled == "source" else link.source
        if other_address is not None:
            other.address = other_address
        fill(getattr(link, filled), a.mod, filled == "source")
        link.open()
    a.drain()
    pump(a, b)
    b.drain()
    mask = b.mod.Endpoint.LOCAL_UNINIT | b.mod.Endpoint.REMOTE_ACTIVE
    read = {}
    link = b.connection.link_head(mask)
    while link:
        read[link.name] = (_read(link.remote_source), _read(link.remote_target))
        link = link.next(mask)
    assert len(read) == len(links)
    return read


def _named(terminus: Any, mod: Any, source: bool) -> None:
    _fill(terminus, mod, source)
    terminus.address = "node"


def _named_empty(terminus: Any, mod: Any, source: bool) -> None:
    _fill(terminus, mod, source)
    terminus.address = ""  # an address still: proton reads the fields


def _dynamic(terminus: Any, mod: Any, source: bool) -> None:
    _fill(terminus, mod, source)
    terminus.dynamic = True


@pytest.mark.parametrize("writer", [PROTON, OURS])
def test_remote_termini_read_as_proton_reads_them(writer: str) -> None:
    assert _attach_and_read(writer, OURS) == _attach_and_read(writer, PROTON)


def test_unnamed_source_reads_unspecified_with_its_node_fields_dropped() -> None:
    """The case the comparison is about, spelt out (on ours; proton reads the same, as the test above checks)."""
    read = _attach_and_read(PROTON, OURS)
    source, _ = read["sender-unnamed-source"]
    assert source[:7] == (0, None, False, 0, 1, 0, 0)  # UNSPECIFIED; durability 2 reads 0, expiry 3 reads 1...
    assert source[7:] == ({"p": 1}, ["cap"], {"f": "x"})  # what proton keeps as Data
    _, target = read["receiver-unnamed-target"]
    assert target[:7] == (2, None, False, 0, 1, 0, 0)  # a target still, with its node fields dropped
    source, _ = read["receiver-dynamic-source"]
    assert source[:7] == (1, None, True, 2, 3, 9, 1)  # a dynamic node: every field read


def _lifetime_policy_read(writer: str, reader: str, descriptor: str) -> Any:
    """A receiver's dynamic source with node properties (§3.5.9) whose lifetime-policy is delete-on-close (§3.5.10),
    its descriptor ``"symbol"`` or ``"code"``, and a described value no composite of ours: as the reader reads it."""
    log: list[tuple[Any, ...]] = []
    a = Side("A", writer, False, log)
    b = Side("B", reader, True, log)
    _open_pair(a, b)
    session = a.connection.session()
    session.open()
    link = session.receiver("dynamic-node")
    link.source.dynamic = True
    mod = a.mod
    policy = mod.symbol("amqp:delete-on-close:list") if descriptor == "symbol" else mod.ulong(0x2B)
    link.source.properties.put_dict(
        {
            mod.symbol("lifetime-policy"): mod.Described(policy, []),
            mod.symbol("x-other"): mod.Described(mod.symbol("example:other:list"), [1]),
        }
    )
    link.open()
    a.drain()
    pump(a, b)
    b.drain()
    remote = b.connection.link_head(b.mod.Endpoint.REMOTE_ACTIVE).remote_source.properties
    return {str(key): (repr(value.descriptor), value.value) for key, value in _data(remote).items()}


@pytest.mark.parametrize("descriptor", ["code", "symbol"])
def test_dynamic_node_properties_keep_their_descriptor_as_protons(descriptor: str) -> None:
    """A lifetime-policy read from a peer's dynamic source keeps the descriptor it travelled with, as proton's."""
    reference = _lifetime_policy_read(PROTON, PROTON, descriptor)
    assert _lifetime_policy_read(PROTON, OURS, descriptor) == reference
