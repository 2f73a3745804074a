"""Lifetime policies of dynamic nodes (§3.5.9-§3.5.13) keep the descriptor they travelled with, as proton's do."""

from __future__ import annotations

from typing import Any

import proton
import pytest

from amqp_async.codec import decode, encode
from amqp_async.codec.terminus import (
    DeleteOnClose,
    DeleteOnNoLinks,
    DeleteOnNoLinksOrMessages,
    DeleteOnNoMessages,
    Target,
)
from amqp_async.types import Described, symbol, ulong

POLICIES = [DeleteOnClose, DeleteOnNoLinks, DeleteOnNoMessages, DeleteOnNoLinksOrMessages]


def _proton_bytes(descriptor: object) -> bytes:
    """What python-qpid-proton writes for a lifetime policy described by ``descriptor``."""
    data = proton.Data()
    data.put_object(proton.Described(descriptor, []))
    return bytes(data.encode())


@pytest.mark.parametrize("policy", POLICIES, ids=lambda cls: cls.__name__)
@pytest.mark.parametrize("form", ["code", "name"])
def test_a_policy_read_in_a_frame_is_written_back_with_its_descriptor(policy: type[Any], form: str) -> None:
    """A peer's policy, described by its code or its name, decodes to its class and encodes to the same bytes."""
    descriptor = proton.ulong(policy.descriptor_code) if form == "code" else proton.symbol(policy.descriptor_name)
    wire = _proton_bytes(descriptor)
    target = decode(encode(Target(dynamic=True, dynamic_node_properties={symbol("lifetime-policy"): decode(wire)})))
    read = target.dynamic_node_properties[symbol("lifetime-policy")]
    assert type(read) is policy
    assert read.descriptor == descriptor and type(read.descriptor) is (ulong if form == "code" else symbol)
    assert encode(read) == wire


def test_a_policy_made_here_has_the_code_and_is_a_described_value() -> None:
    """Made by a program, a policy is sent with its code (proton's bytes) and equals that described value."""
    assert encode(DeleteOnClose()) == _proton_bytes(proton.ulong(0x2B))
    assert DeleteOnClose() == Described(ulong(0x2B), [])
    assert DeleteOnClose(symbol("amqp:delete-on-close:list")) == Described(symbol("amqp:delete-on-close:list"), [])
    assert DeleteOnClose(0x2B).descriptor.__class__ is ulong
    with pytest.raises(ValueError, match="delete-on-close"):
        DeleteOnClose(symbol("amqp:delete-on-no-links:list"))


def test_both_forms_name_the_same_policy() -> None:
    """§1.3: the code and the name describe one type; the forms compare equal, other policies do not."""
    assert DeleteOnClose(symbol("amqp:delete-on-close:list")) == DeleteOnClose()
    assert DeleteOnClose() != DeleteOnNoLinks()
    assert DeleteOnClose() != Described(symbol("amqp:delete-on-close:list"), [])
