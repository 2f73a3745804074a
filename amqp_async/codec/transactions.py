"""Transaction types (spec §4.5): the coordinator target, declare/discharge bodies and transactional states.

A controller attaches a link whose target is a :class:`Coordinator`, sends :class:`Declare` and
:class:`Discharge` as ``amqp-value`` message bodies, and receives :class:`Declared` (an outcome) in return;
transfers and dispositions inside a transaction carry a :class:`TransactionalState`. Transaction ids
(§4.5.4 transaction-id) are binary, up to 32 octets. A coordinator reads the body of a message it receives with
:func:`control_body` (a message's values decode as ``Described``, as proton reads them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..types import Described, symbol
from ._decoder import decode_value
from ._encoder import encode_value
from .composite import Composite, F

if TYPE_CHECKING:
    from .delivery_states import Accepted, Modified, Rejected, Released

__all__ = [
    "DISTRIBUTED_TRANSACTIONS",
    "LOCAL_TRANSACTIONS",
    "MULTI_SESSIONS_PER_TXN",
    "MULTI_TXNS_PER_SSN",
    "PROMOTABLE_TRANSACTIONS",
    "Coordinator",
    "Declare",
    "Declared",
    "Discharge",
    "TransactionalState",
    "control_body",
    "valid_txn_id",
]

# §4.5.7 txn-capability (symbol).
#: Support local transactions.
LOCAL_TRANSACTIONS = symbol("amqp:local-transactions")
#: Support AMQP Distributed Transactions.
DISTRIBUTED_TRANSACTIONS = symbol("amqp:distributed-transactions")
#: Support AMQP Promotable Transactions.
PROMOTABLE_TRANSACTIONS = symbol("amqp:promotable-transactions")
#: Support multiple active transactions on a single session.
MULTI_TXNS_PER_SSN = symbol("amqp:multi-txns-per-ssn")
#: Support transactions whose txn-id is used across sessions on one connection.
MULTI_SESSIONS_PER_TXN = symbol("amqp:multi-ssns-per-txn")


class Coordinator(Composite, code=0x30, name="amqp:coordinator:list"):
    """§4.5.1 coordinator: the target of a link to a transaction coordinator."""

    capabilities: tuple[symbol, ...] | None = F("symbol", multiple=True, requires="txn-capability")


class Declare(Composite, code=0x31, name="amqp:declare:list"):
    """§4.5.2 declare: message body asking the coordinator to allocate a transaction id."""

    global_id: Any = F("*", requires="global-tx-id")


class Discharge(Composite, code=0x32, name="amqp:discharge:list"):
    """§4.5.3 discharge: message body ending a transaction (``fail=True`` rolls it back)."""

    txn_id: bytes = F("*", mandatory=True, requires="txn-id")
    fail: bool | None = F("boolean")


class Declared(Composite, code=0x33, name="amqp:declared:list"):
    """§4.5.5 declared: the outcome of a declare, carrying the allocated transaction id."""

    txn_id: bytes = F("*", mandatory=True, requires="txn-id")


class TransactionalState(Composite, code=0x34, name="amqp:transactional-state:list"):
    """§4.5.6 transactional-state: a delivery state tying a delivery to a transaction and its provisional outcome."""

    txn_id: bytes = F("*", mandatory=True, requires="txn-id")
    outcome: Accepted | Rejected | Released | Modified | None = F("*", requires="outcome")


def valid_txn_id(txn_id: Any) -> bool:
    """Whether ``txn_id`` may be a transaction id."""
    # §4.5.4 transaction-id: "A transaction-id can be up to 32 octets of binary data."
    return isinstance(txn_id, (bytes, bytearray)) and len(txn_id) <= 32


def control_body(body: Any) -> Declare | Discharge | None:
    """What a message sent to a coordinator asks (§4.5.2 declare, §4.5.3 discharge): the :class:`Declare` or
    :class:`Discharge` its amqp-value body holds, or None for any other body.

    ``Message`` reads a described value in a body as the application's, ``Described(descriptor, value)`` whatever
    its descriptor (as proton reads it): the coordinator, whose types these are, reads it as them here.

    Raises:
        DecodeError: a declare or discharge whose fields are not of their types.
    """
    if body.__class__ is not Described:
        return None
    encoded = bytearray()
    encode_value(encoded, body)
    value = decode_value(bytes(encoded))[0]  # the codec's reading of a frame's described values: its types
    return value if value.__class__ is Declare or value.__class__ is Discharge else None
