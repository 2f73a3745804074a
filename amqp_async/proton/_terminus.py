"""proton's ``Terminus``: the source or target of a link, as the application sets it and as the peer's attach gave it.

A terminus is the codec's :class:`~amqp_async.codec.terminus.Source` or :class:`~amqp_async.codec.terminus.Target`
(or a transaction :class:`~amqp_async.codec.transactions.Coordinator`, §4.5.1) seen through proton's attributes;
its ``properties``, ``capabilities``, ``outcomes`` and ``filter`` are :class:`Data` objects, as in proton, and
capabilities and outcomes read back as arrays of symbols (how they travel).
"""

from __future__ import annotations

from typing import Any

from ..codec.terminus import Source, Target
from ..codec.transactions import Coordinator
from ..types import UNDESCRIBED, Array, TypeCode, symbol
from ._data import Data

__all__ = ["Terminus"]


class Terminus:
    """A source or target: the node a link takes messages from or gives them to, and how.

    On a link's local termini every attribute may be set before the link is opened; the remote termini
    (:attr:`Link.remote_source`, :attr:`Link.remote_target`) hold what the peer's attach said.
    :attr:`properties`, :attr:`capabilities`, :attr:`outcomes` and :attr:`filter` are :class:`Data` objects, as
    in proton (``link.source.filter.put_dict(...)``).
    """

    UNSPECIFIED = 0
    SOURCE = 1
    TARGET = 2
    COORDINATOR = 3
    NONDURABLE = 0
    CONFIGURATION = 1
    DELIVERIES = 2
    EXPIRE_WITH_LINK = 0
    EXPIRE_WITH_SESSION = 1
    EXPIRE_WITH_CONNECTION = 2
    EXPIRE_NEVER = 3
    DIST_MODE_UNSPECIFIED = 0
    DIST_MODE_COPY = 1
    DIST_MODE_MOVE = 2

    def __init__(self, kind: int = 0) -> None:
        self.type = kind
        self._address: str | None = None
        self.durability = self.NONDURABLE
        self.expiry_policy = self.EXPIRE_WITH_SESSION
        self.timeout = 0
        self.dynamic = False
        self.distribution_mode = self.DIST_MODE_UNSPECIFIED
        self.properties = Data()
        self.capabilities = Data()
        self.outcomes = Data()
        self.filter = Data()
        self.default_outcome: Any = None

    @property
    def address(self) -> str | None:
        """The node's address (None: none, as for a dynamic node before the peer names it)."""
        return self._address

    @address.setter
    def address(self, value: str | None) -> None:
        # As python-qpid-proton's setter (its C binding takes a string): anything else is refused here, with its
        # words, rather than sent to the peer as a value of another type.
        if value is not None and not isinstance(value, str):
            raise TypeError(f"Unrecognized string type: {value!r} ({type(value)!r})")
        self._address = value

    def copy(self, src: Terminus) -> None:
        """Copy every attribute of ``src`` into this terminus."""
        for name in ("type", "address", "durability", "expiry_policy", "timeout", "dynamic", "distribution_mode"):
            setattr(self, name, getattr(src, name))
        self.default_outcome = src.default_outcome
        for name in ("properties", "capabilities", "outcomes", "filter"):
            data = Data()
            value = _data_value(getattr(src, name))
            if value is not None:
                data.put_object(value)
            setattr(self, name, data)

    # --- to and from the codec's composites --------------------------------------------------------------

    @classmethod
    def _from_composite(cls, composite: Any, kind: int) -> Terminus:
        terminus = cls(kind)
        if not isinstance(composite, (Source, Target, Coordinator)):
            # None, or a value of another type: attach's source and target are "*" fields (§2.7.3), and what is no
            # terminus we know is an unspecified one, as proton reads it.
            terminus.type = cls.UNSPECIFIED
            return terminus
        if isinstance(composite, Coordinator):
            terminus.type = cls.COORDINATOR
            if composite.capabilities is not None:
                terminus.capabilities.put_object(_symbol_array(composite.capabilities))
            return terminus
        if composite.address is not None or composite.dynamic:
            terminus._read_node_fields(composite)
        elif isinstance(composite, Source):
            # A source that names no node and asks for none: proton-c reads it as an unspecified terminus, as if
            # there were no source (§2.6.3: a link with no source never produces messages).
            terminus.type = cls.UNSPECIFIED
        # Without a node, proton-c drops the scalar fields too (a durability of 2 reads 0), here as in proton;
        # what it keeps as Data (properties, capabilities, filter, outcomes) is kept in every case.
        if composite.dynamic_node_properties is not None:
            terminus.properties.put_object(composite.dynamic_node_properties)
        if composite.capabilities is not None:
            terminus.capabilities.put_object(_symbol_array(composite.capabilities))
        if isinstance(composite, Source):
            if composite.filter is not None:
                terminus.filter.put_object(composite.filter)
            if composite.outcomes is not None:
                terminus.outcomes.put_object(_symbol_array(composite.outcomes))
            terminus.default_outcome = composite.default_outcome
        return terminus

    def _read_node_fields(self, composite: Source | Target) -> None:
        """Read the fields of a peer's terminus that name its node and say how it lasts."""
        self.address = None if composite.address is None else str(composite.address)
        self.durability = int(composite.durable)
        self.expiry_policy = _EXPIRY_CODES.get(str(composite.expiry_policy), self.EXPIRE_WITH_SESSION)
        self.timeout = int(composite.timeout)
        self.dynamic = bool(composite.dynamic)
        if isinstance(composite, Source):
            mode = None if composite.distribution_mode is None else str(composite.distribution_mode)
            self.distribution_mode = {"copy": self.DIST_MODE_COPY, "move": self.DIST_MODE_MOVE}.get(mode or "", 0)

    def _composite(self) -> Source | Target | Coordinator | None:
        """The source or target to send in attach (None for an unspecified terminus)."""
        if self.type == self.UNSPECIFIED:
            return None
        if self.type == self.COORDINATOR:
            # §4.5.1: a coordinator target has only capabilities (the txn-capabilities desired)
            return Coordinator(capabilities=_symbols(_data_value(self.capabilities)))
        common: dict[str, Any] = {
            "address": self.address,
            "durable": self.durability,
            "expiry_policy": symbol(_EXPIRY_NAMES[self.expiry_policy]),
            "timeout": self.timeout,
            "dynamic": bool(self.dynamic),
            "dynamic_node_properties": _data_value(self.properties),
            "capabilities": _symbols(_data_value(self.capabilities)),
        }
        if self.type == self.SOURCE:
            mode = {self.DIST_MODE_COPY: "copy", self.DIST_MODE_MOVE: "move"}.get(self.distribution_mode)
            return Source(
                **common,
                distribution_mode=None if mode is None else symbol(mode),
                filter=_data_value(self.filter),
                outcomes=_symbols(_data_value(self.outcomes)),
                default_outcome=self.default_outcome,
            )
        return Target(**common)

    def __repr__(self) -> str:
        return f"Terminus(address={self.address!r}, dynamic={self.dynamic})"


_EXPIRY_NAMES = {0: "link-detach", 1: "session-end", 2: "connection-close", 3: "never"}
_EXPIRY_CODES = {name: code for code, name in _EXPIRY_NAMES.items()}


def _data_value(data: Data) -> Any:
    """The first value a terminus's :class:`Data` holds, or None when it is empty."""
    data.rewind()
    if data.next() is None:
        return None
    value = data.get_object()
    data.rewind()
    return value


def _symbols(value: Any) -> tuple[symbol, ...] | None:
    if value is None:
        return None
    if isinstance(value, (str, bytes)):
        return (symbol(value if isinstance(value, str) else value.decode()),)
    return tuple(symbol(str(item)) for item in value)


def _symbol_array(values: Any) -> Array:
    """Symbols as the array they travel in (proton reads a terminus's capabilities and outcomes that way)."""
    if isinstance(values, (str, bytes)):
        values = [values]
    return Array(UNDESCRIBED, TypeCode.SYMBOL, *(symbol(str(value)) for value in values))
