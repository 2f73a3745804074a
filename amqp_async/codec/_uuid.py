"""The standard library's :class:`uuid.UUID` for the codec, without importing :mod:`uuid` when the codec loads.

On Python 3.10, ``import uuid`` runs ``import platform``, and 3.10's ``platform`` imports ``subprocess`` (and
with it ``selectors``, ``select``, ``signal`` and ``threading``) at module level; 3.11 made that import lazy. The
Sans-IO core must not load those modules (tests/test_sans_io_imports.py), so the codec reaches ``uuid`` only
when a UUID actually goes through it:

- encoding: a :class:`uuid.UUID` value can only exist once the application imported :mod:`uuid`, so the encoder
  takes the class from ``sys.modules`` (:func:`loaded_uuid_class`) and never imports the module itself;
- decoding: the first uuid on the wire imports the module (:func:`uuid_class`): the value handed to the
  application is a :class:`uuid.UUID`, which it cannot use without that module anyway.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from uuid import UUID

__all__ = ["loaded_uuid_class", "uuid_class"]


def uuid_class() -> type[UUID]:
    """:class:`uuid.UUID`, importing :mod:`uuid` if nothing has yet."""
    import uuid  # lazily: see the module's docstring

    return uuid.UUID


def loaded_uuid_class() -> type[UUID] | None:
    """:class:`uuid.UUID` if :mod:`uuid` is loaded, else ``None`` (then no value can be a UUID)."""
    module = sys.modules.get("uuid")
    return None if module is None else module.UUID
