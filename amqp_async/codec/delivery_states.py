"""Delivery states and outcomes (spec §3.4), defined from the spec's field tables.

``received`` is a non-terminal delivery state; ``accepted``, ``rejected``, ``released`` and ``modified`` are the
terminal outcomes. They travel in the ``state`` field of transfer and disposition, and in a source's
``default_outcome``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .composite import Composite, F
from .performatives import Error

if TYPE_CHECKING:
    from .values import AMQPValue

__all__ = [
    "OUTCOMES",
    "Accepted",
    "Modified",
    "Received",
    "Rejected",
    "Released",
]


class Received(Composite, code=0x23, name="amqp:received:list"):
    """§3.4.1 received: the delivery has been received up to ``section_number`` / ``section_offset``."""

    section_number: int = F("uint", mandatory=True)
    section_offset: int = F("ulong", mandatory=True)


class Accepted(Composite, code=0x24, name="amqp:accepted:list"):
    """§3.4.2 accepted: the terminal outcome of a successfully processed message."""


class Rejected(Composite, code=0x25, name="amqp:rejected:list"):
    """§3.4.3 rejected: the terminal outcome of an invalid, unprocessable message; ``error`` says why."""

    error: Error | None = F("error")


class Released(Composite, code=0x26, name="amqp:released:list"):
    """§3.4.4 released: the message was not (and will not be) acted upon; it may be redelivered."""


class Modified(Composite, code=0x27, name="amqp:modified:list"):
    """§3.4.5 modified: the message was released and should be modified at the node."""

    delivery_failed: bool | None = F("boolean")
    undeliverable_here: bool | None = F("boolean")
    message_annotations: dict[str, AMQPValue] | None = F("fields")


#: The symbolic descriptors of the standard outcomes (for a source's ``outcomes`` field, §3.5.3).
OUTCOMES: tuple[str, ...] = (
    Accepted.descriptor_name,
    Rejected.descriptor_name,
    Released.descriptor_name,
    Modified.descriptor_name,
)
