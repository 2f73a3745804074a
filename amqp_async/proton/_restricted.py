"""proton's restricted collections: ``PropertyDict``, ``AnnotationDict`` (symbol or ulong keys) and ``SymbolList``."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, ClassVar

from ..errors import EncodeError
from ..types import UNDESCRIBED, Array, TypeCode, symbol, ulong

__all__ = ["AnnotationDict", "PropertyDict", "SymbolList"]


def _as_symbol(key: Any, allow_ulong: bool) -> Any:
    """``key`` as a symbol (a ``str`` is converted), or unchanged if it is a ulong and ``allow_ulong``.

    Raises:
        TypeError: any other key, or a ``str`` that is not ASCII (a symbol cannot hold it).
    """
    if isinstance(key, symbol) or (allow_ulong and isinstance(key, ulong)):
        return key
    if isinstance(key, str):
        try:
            return symbol(key)
        except EncodeError as exc:
            raise TypeError(exc.description) from None
    raise TypeError(f"Non-symbol type {type(key)}: {key}")


class _RestrictedKeyDict(dict[Any, Any]):
    """A ``dict`` whose keys must be symbols (``str`` keys are converted), proton's ``RestrictedKeyDict``."""

    _allow_ulong: ClassVar[bool] = False

    def __init__(self, e: Any = None, raise_on_error: bool = True, **kwargs: Any) -> None:
        super().__init__()
        self.raise_on_error = raise_on_error
        self.update(e, **kwargs)

    def _key(self, key: Any) -> Any:
        try:
            return _as_symbol(key, self._allow_ulong)
        except TypeError:
            if self.raise_on_error:
                # __setitem__ raises KeyError for a bad key, as proton's does.
                raise KeyError(f"invalid non-symbol key: {type(key)}: {key}") from None
            return key

    def __setitem__(self, key: Any, value: Any) -> None:
        """Set ``self[key]``, converting a ``str`` key to a symbol. Raises KeyError for any other key type."""
        super().__setitem__(self._key(key), value)

    def update(self, e: Any = None, **kwargs: Any) -> None:  # type: ignore[override]
        """As ``dict.update`` (a mapping or an iterable of pairs, then keywords), checking every key."""
        if e:
            if hasattr(e, "keys"):
                for key in list(e):
                    self[key] = e[key]
            else:
                for key, value in e:
                    self[key] = value
        for key, value in kwargs.items():
            self[key] = value

    def setdefault(self, key: Any, default: Any = None) -> Any:
        """As ``dict.setdefault``, checking the key."""
        return super().setdefault(self._key(key), default)


class PropertyDict(_RestrictedKeyDict):
    """A ``dict`` with symbol keys; ``str`` keys become symbols (proton's ``PropertyDict``).

    Args:
        e: initial items: a mapping, or an iterable of ``(key, value)`` pairs.
        raise_on_error: when True (the default), a key that is neither a symbol nor a ``str`` raises
            ``KeyError``; when False it is kept as it is.
        **kwargs: more initial items.
    """

    def __repr__(self) -> str:
        return f"PropertyDict({dict.__repr__(self)})"


class AnnotationDict(_RestrictedKeyDict):
    """A ``dict`` with symbol or ulong keys; ``str`` keys become symbols (proton's ``AnnotationDict``).

    Args:
        e: initial items: a mapping, or an iterable of ``(key, value)`` pairs.
        raise_on_error: when True (the default), a key that is neither a symbol, a ulong nor a ``str`` raises
            ``KeyError``; when False it is kept as it is.
        **kwargs: more initial items.
    """

    _allow_ulong = True

    def __repr__(self) -> str:
        return f"AnnotationDict({dict.__repr__(self)})"


class SymbolList(list[Any]):
    """A ``list`` of symbols; ``str`` elements become symbols (proton's ``SymbolList``).

    Args:
        t: initial elements (an iterable), or one ``str``, which is the single element.
        raise_on_error: when True (the default), an element that is neither a symbol nor a ``str`` raises
            ``TypeError``; when False it is kept as it is.
    """

    def __init__(self, t: Any = None, raise_on_error: bool = True) -> None:
        super().__init__()
        self.raise_on_error = raise_on_error
        if isinstance(t, str):
            self.append(t)
        elif t is not None:
            self.extend(t)

    def _check(self, value: Any) -> Any:
        try:
            return _as_symbol(value, False)
        except TypeError:
            if self.raise_on_error:
                raise
            return value

    def _check_all(self, values: Iterable[Any] | None) -> list[Any]:
        return [self._check(value) for value in values] if values else []

    def to_array(self) -> Array:
        """The elements as an AMQP array of symbols (how capabilities are sent)."""
        return Array(UNDESCRIBED, TypeCode.SYMBOL, *self)

    def append(self, v: Any) -> None:
        """Append ``v``, as a symbol."""
        super().append(self._check(v))

    def extend(self, t: Iterable[Any]) -> None:
        """Append every element of ``t``, as symbols."""
        super().extend(self._check_all(t))

    def insert(self, i: Any, v: Any) -> None:
        """Insert ``v``, as a symbol, before index ``i``."""
        super().insert(i, self._check(v))

    def __add__(self, t: Iterable[Any]) -> SymbolList:
        return SymbolList(list(self) + self._check_all(t), raise_on_error=self.raise_on_error)

    def __iadd__(self, t: Iterable[Any]) -> SymbolList:
        super().extend(self._check_all(t))
        return self

    def __setitem__(self, i: Any, t: Any) -> None:
        if isinstance(i, slice):
            super().__setitem__(i, self._check_all(t))
        else:
            super().__setitem__(i, self._check(t))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, (list, tuple, Array)):
            return NotImplemented
        return list.__eq__(self, SymbolList(other, raise_on_error=False))

    __hash__ = None

    def __repr__(self) -> str:
        return f"SymbolList({list.__repr__(self)})"
