"""Link termini (spec §3.5): source, target, and the lifetime policies of dynamic nodes.

A :class:`Source` or :class:`Target` goes in the ``source`` / ``target`` field of an attach. The constants name
the choices of the restricted types terminus-durability (§3.5.5), terminus-expiry-policy (§3.5.6) and
std-dist-mode (§3.5.7).
"""

from __future__ import annotations

from typing import Any

from ..types import symbol
from .composite import Composite, F

__all__ = [
    "CONFIGURATION",
    "CONNECTION_CLOSE",
    "COPY",
    "LINK_DETACH",
    "MOVE",
    "NEVER",
    "NONE",
    "SESSION_END",
    "UNSETTLED_STATE",
    "DeleteOnClose",
    "DeleteOnNoLinks",
    "DeleteOnNoLinksOrMessages",
    "DeleteOnNoMessages",
    "Source",
    "Target",
]

# §3.5.5 terminus-durability (uint).
#: No terminus state is retained durably.
NONE = 0
#: Only the existence and configuration of the terminus is retained durably.
CONFIGURATION = 1
#: In addition to the existence and configuration of the terminus, the unsettled state is retained durably.
UNSETTLED_STATE = 2

# §3.5.6 terminus-expiry-policy (symbol).
#: The expiry timer starts when terminus is detached.
LINK_DETACH = symbol("link-detach")
#: The expiry timer starts when the most recently associated session is ended.
SESSION_END = symbol("session-end")
#: The expiry timer starts when most recently associated connection is closed.
CONNECTION_CLOSE = symbol("connection-close")
#: The terminus never expires.
NEVER = symbol("never")

# §3.5.7 std-dist-mode (symbol).
#: Once successfully transferred over the link, the message will no longer be available to other links.
MOVE = symbol("move")
#: Once successfully transferred over the link, the message is still available for other links.
COPY = symbol("copy")


class Source(Composite, code=0x28, name="amqp:source:list"):
    """§3.5.3 source: the source of messages on a link (``filter`` is a filter-set map, §3.5.8)."""

    address: str | None = F("*", requires="address")
    durable: int = F("terminus-durability", default=NONE)
    expiry_policy: symbol = F("terminus-expiry-policy", default=SESSION_END)
    timeout: int = F("seconds", default=0)
    dynamic: bool = F("boolean", default=False)
    dynamic_node_properties: dict[Any, Any] | None = F("node-properties")
    distribution_mode: symbol | None = F("symbol", requires="distribution-mode")
    filter: dict[Any, Any] | None = F("filter-set")
    default_outcome: Any = F("*", requires="outcome")
    outcomes: tuple[symbol, ...] | None = F("symbol", multiple=True)
    capabilities: tuple[symbol, ...] | None = F("symbol", multiple=True)


class Target(Composite, code=0x29, name="amqp:target:list"):
    """§3.5.4 target: the destination of messages on a link."""

    address: str | None = F("*", requires="address")
    durable: int = F("terminus-durability", default=NONE)
    expiry_policy: symbol = F("terminus-expiry-policy", default=SESSION_END)
    timeout: int = F("seconds", default=0)
    dynamic: bool = F("boolean", default=False)
    dynamic_node_properties: dict[Any, Any] | None = F("node-properties")
    capabilities: tuple[symbol, ...] | None = F("symbol", multiple=True)


class DeleteOnClose(Composite, code=0x2B, name="amqp:delete-on-close:list"):
    """§3.5.10 delete-on-close: the node is deleted when the link that caused its creation ceases to exist."""


class DeleteOnNoLinks(Composite, code=0x2C, name="amqp:delete-on-no-links:list"):
    """§3.5.11 delete-on-no-links: the node is deleted when it has had no links for the timeout period."""


class DeleteOnNoMessages(Composite, code=0x2D, name="amqp:delete-on-no-messages:list"):
    """§3.5.12 delete-on-no-messages: the node is deleted when it has held no messages."""


class DeleteOnNoLinksOrMessages(Composite, code=0x2E, name="amqp:delete-on-no-links-or-messages:list"):
    """§3.5.13 delete-on-no-links-or-messages: deleted when it has neither links nor messages."""
