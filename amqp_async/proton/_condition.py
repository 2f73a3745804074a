"""proton's ``Condition``: the name, description and info of an AMQP error (spec §2.8.14), as a plain value.

Connections, sessions, links and deliveries carry a local and a remote condition; a condition is usually an error
(``amqp:not-found``...) but need not be one (``amqp:connection:redirect``). :meth:`Condition.from_error` and
:meth:`Condition.to_error` convert to and from the codec's ``error`` composite.
"""

from __future__ import annotations

from typing import Any

from ..codec.performatives import Error
from ..types import symbol

__all__ = ["Condition", "authentication_failure"]


class Condition:
    """An AMQP condition: a symbolic ``name``, a ``description`` and an ``info`` map, as in proton.

    Equality compares the three attributes (a non-Condition is never equal); the ``repr`` lists those that are
    set, as proton's does: ``Condition('amqp:not-found', 'no such queue')``. Conditions are mutable and, as in
    proton, unhashable.

    Args:
        name: the condition's symbolic name, such as ``"amqp:not-found"``.
        description: human-readable text, or None.
        info: additional information (usually a map with symbol keys), or None.
    """

    __slots__ = ("description", "info", "name")

    def __init__(self, name: str, description: str | None = None, info: Any = None) -> None:
        self.name = name
        self.description = description
        self.info = info

    def __repr__(self) -> str:
        return "Condition({})".format(", ".join(repr(x) for x in (self.name, self.description, self.info) if x))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Condition):
            return False
        return bool(self.name == other.name and self.description == other.description and self.info == other.info)

    __hash__ = None  # type: ignore[assignment]

    @classmethod
    def from_error(cls, error: Error) -> Condition:
        """The condition an ``error`` composite (from a close, end, detach or rejected outcome) carries."""
        return cls(str(error.condition), error.description, error.info)

    def to_error(self) -> Error:
        """This condition as the codec's ``error`` composite (the name becomes a symbol).

        Raises:
            amqp_async.EncodeError: the name is not ASCII (a symbol cannot hold it).
        """
        return Error(condition=symbol(self.name), description=self.description, info=self.info)


def authentication_failure(sasl: Any, sasl_code: int | None, error: Error | None) -> Condition:
    """The transport's condition when SASL ends the connection, in proton's words: ``amqp:unauthorized-access``,
    "Authentication failed [mech=PLAIN]" for an outcome that refused us (a program may look for those words), else
    the engine's description (no mechanism fitted, say). ``sasl`` is the engine's SASL client (or server)."""
    mechanism = getattr(sasl, "mechanism", None)
    if sasl_code and mechanism is not None:
        return Condition("amqp:unauthorized-access", f"Authentication failed [mech={mechanism.name}]")
    description = None if error is None else error.description
    return Condition("amqp:unauthorized-access", description or "Authentication failed")
