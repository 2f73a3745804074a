"""amqp_async: a pure-Python, asyncio-native AMQP 1.0 client.

The public surface: :class:`Message`, :class:`AMQPError` and its subclasses, the AMQP types in
:mod:`amqp_async.types`, and the codec in :mod:`amqp_async.codec`.
"""

from __future__ import annotations

from . import codec, types
from .errors import AMQPError, DecodeError, EncodeError
from .message import Message

__all__ = ["AMQPError", "DecodeError", "EncodeError", "Message", "codec", "types"]
__version__ = "0.1.0"
