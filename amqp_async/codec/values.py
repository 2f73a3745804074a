"""The Python types an AMQP value decodes to: one alias, :data:`AMQPValue`, for type annotations.

The codec maps AMQP's types to Python's as python-qpid-proton does (see :mod:`amqp_async.types`): the scalars
whose Python builtin is too wide are subclasses of it (``ulong`` is an ``int``, ``symbol`` a ``str``, ``float32`` a
``float``, ``decimal128`` ``bytes``), so the alias names the builtins and covers them all.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeAlias

from ..types import Array, Described
from .composite import Composite
from .sections import ValueSection

__all__ = ["AMQPValue"]

if TYPE_CHECKING:
    import uuid

    AMQPValue: TypeAlias = (
        bool
        | int
        | float
        | str
        | bytes
        | uuid.UUID
        | Described
        | Array
        | Composite
        | ValueSection
        | list["AMQPValue"]
        | dict["AMQPValue", "AMQPValue"]
        | None
    )
    """Any value AMQP carries, as the codec decodes it (spec §1.6, §1.3): null (``None``), boolean, the integer types
    (``int`` and its subclasses ``ubyte`` ... ``ulong``, ``byte`` ... ``int32``, ``timestamp``, ``decimal32``,
    ``decimal64``), ``float`` (and ``float32``), ``str`` (and ``symbol``, ``char``), ``bytes`` (and ``decimal128``),
    ``uuid.UUID``, a list or a map of such values, an :class:`~amqp_async.types.Array`, a
    :class:`~amqp_async.types.Described` value, or, in a frame (``codec.decode``), for a described value whose
    descriptor the codec knows, that type (a :class:`~amqp_async.codec.composite.Composite` such as an ``Error``,
    or a message section). A message's own values (body, annotations, application properties, footer) hold no
    composite: a described value there is a ``Described`` whatever its descriptor; a body of several sections is
    a list of :class:`~amqp_async.codec.sections.Data` (or ``AmqpSequence``) sections.

    A message's ``body`` and its application properties are typed with it: narrow a value with ``isinstance`` before
    using it (``if isinstance(body, str): ...``), or read a JSON body with :meth:`~amqp_async.Message.json`."""

else:

    def __getattr__(name: str) -> Any:
        """The same alias at run time, built when first asked for: it names ``uuid.UUID``, and importing :mod:`uuid`
        with the codec would load ``subprocess`` on Python 3.10 (see _uuid.py). Keep it the same expression as the
        one above (tests/test_sans_io_imports.py compares them)."""
        if name != "AMQPValue":
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        import uuid

        global AMQPValue
        AMQPValue = (
            bool
            | int
            | float
            | str
            | bytes
            | uuid.UUID
            | Described
            | Array
            | Composite
            | ValueSection
            | list["AMQPValue"]
            | dict["AMQPValue", "AMQPValue"]
            | None
        )
        return AMQPValue
