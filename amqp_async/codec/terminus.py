"""Link termini (spec §3.5): source, target, and the lifetime policies of dynamic nodes.

A :class:`Source` or :class:`Target` goes in the ``source`` / ``target`` field of an attach. The constants name
the choices of the restricted types terminus-durability (§3.5.5), terminus-expiry-policy (§3.5.6) and
std-dist-mode (§3.5.7).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from ..errors import DecodeError
from ..types import Described, symbol, ulong
from ._decoder import register_described
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
    "LifetimePolicy",
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


class LifetimePolicy(Described):
    """§3.5.9 lifetime-policy of a dynamic node: a described empty list whose descriptor names the policy.

    A policy travels in a terminus's dynamic-node-properties (§3.5.9), a map a program reads as it came; so, as
    python-qpid-proton does, a policy read from a frame keeps the descriptor it was sent with (its code or its
    symbolic name), and is sent again with that one. Made here, it has the code. It is a :class:`Described`, equal
    to any ``Described`` with the same descriptor and value, and to the same policy in the other form.

    Args:
        descriptor: ``ulong`` code or ``symbol`` name of this policy (default: the code).
        value: the described list (default: empty; a list with fields a later version of AMQP adds is kept).

    Raises:
        ValueError: ``descriptor`` names another type.
    """

    __slots__ = ()

    descriptor_code: ClassVar[int] = -1
    descriptor_name: ClassVar[str] = ""
    amqp_type: ClassVar[str] = ""

    def __init__(self, descriptor: ulong | symbol | None = None, value: list[Any] | None = None) -> None:
        if descriptor is None or descriptor == self.descriptor_code:
            descriptor = ulong(self.descriptor_code)
        elif descriptor == self.descriptor_name:
            descriptor = symbol(self.descriptor_name)
        else:
            raise ValueError(f"{descriptor!r} is not a descriptor of {self.amqp_type}")
        super().__init__(descriptor, [] if value is None else value)

    def __init_subclass__(cls, *, code: int, name: str, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.descriptor_code = code
        cls.descriptor_name = name
        cls.amqp_type = name.split(":")[1]
        register_described(code, name, cls._reader(ulong(code)), cls._reader(symbol(name)))

    @classmethod
    def _reader(cls, descriptor: ulong | symbol) -> Callable[[Any], LifetimePolicy]:
        """The decoder of this policy's value when it comes described by ``descriptor``."""

        def read(value: Any) -> LifetimePolicy:
            if value.__class__ is not list:
                raise DecodeError(f"{cls.amqp_type}: described value is not a list but {type(value).__name__}")
            return cls(descriptor, value)

        return read

    def __eq__(self, other: object) -> bool:
        if other.__class__ is self.__class__:
            # §1.4: a composite type's descriptor has a name and a code; both forms name the same policy.
            return bool(self.value == other.value)
        return super().__eq__(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        form = "" if self.descriptor.__class__ is ulong else repr(self.descriptor)
        extra = f"{', ' if form else ''}{self.value!r}" if self.value else ""
        return f"{type(self).__name__}({form}{extra})"


class DeleteOnClose(LifetimePolicy, code=0x2B, name="amqp:delete-on-close:list"):
    """§3.5.10 delete-on-close: the node is deleted when the link that caused its creation ceases to exist."""

    __slots__ = ()


class DeleteOnNoLinks(LifetimePolicy, code=0x2C, name="amqp:delete-on-no-links:list"):
    """§3.5.11 delete-on-no-links: the node is deleted when it has had no links for the timeout period."""

    __slots__ = ()


class DeleteOnNoMessages(LifetimePolicy, code=0x2D, name="amqp:delete-on-no-messages:list"):
    """§3.5.12 delete-on-no-messages: the node is deleted when it has held no messages."""

    __slots__ = ()


class DeleteOnNoLinksOrMessages(LifetimePolicy, code=0x2E, name="amqp:delete-on-no-links-or-messages:list"):
    """§3.5.13 delete-on-no-links-or-messages: deleted when it has neither links nor messages."""

    __slots__ = ()
