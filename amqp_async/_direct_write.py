"""Synchronous, gathered writes to an anyio TCP stream on asyncio: the driver's fast path for output.

anyio's ``ByteStream.send`` takes one buffer and yields to the event loop after it. The driver's output is a list
of buffers (frame heads, and large message payloads by reference, uncopied); sent one ``send`` at a time, a
transfer's few-byte head goes out as a TCP segment of its own before its payload, and each segment costs the
sender (and on loopback, the receiver) a trip through the network stack. Under anyio's asyncio backend a TCP
stream is an asyncio transport (uvloop's, when installed) whose ``write`` and ``writelines`` are synchronous: they
hand the bytes to the kernel, and buffer, in order, what it does not take yet. :class:`DirectWriter` writes the
whole list through it in one call (one ``writev`` where the transport gathers), and waits afterwards as anyio's
``send`` does: until the transport's buffer has gone to the kernel.

The same synchronous write lets an owner hand output to the socket from inside a long callback
(``EngineDriver.write_now``).

This reaches under anyio's public API (its stream's ``_transport`` and ``_protocol``). :meth:`DirectWriter.of`
checks every piece it uses and returns None when anything differs (trio, TLS streams, another anyio), and the
driver then writes through ``send`` as before.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel

__all__ = ["DirectWriter"]

Buffer = bytes | bytearray | memoryview


def _gathers(transport: Any) -> bool:
    """Whether ``transport.writelines`` writes a list without joining it first: uvloop's does (one ``writev``),
    and CPython's since 3.12 (``sendmsg``); 3.11's joins the buffers into one copy, so we write them one by one."""
    return type(transport).__module__.startswith("uvloop") or sys.version_info >= (3, 12)


class DirectWriter:
    """Writes buffers to the asyncio transport under an anyio TCP stream, synchronously and in order."""

    __slots__ = ("_event", "_gather", "_protocol", "_transport")

    def __init__(self, transport: Any, protocol: Any) -> None:
        self._transport = transport
        self._protocol = protocol
        self._event: asyncio.Event = protocol.write_event
        self._gather = _gathers(transport)

    @classmethod
    def of(cls, stream: anyio.abc.ByteStream) -> DirectWriter | None:
        """The writer for ``stream`` if it is anyio's asyncio TCP stream as we know it; else None."""
        if type(stream).__module__ != "anyio._backends._asyncio" or type(stream).__name__ != "SocketStream":
            return None
        transport = getattr(stream, "_transport", None)
        protocol = getattr(stream, "_protocol", None)
        methods = ("write", "writelines", "get_write_buffer_size", "is_closing")
        if transport is None or not all(callable(getattr(transport, name, None)) for name in methods):
            return None
        if not isinstance(getattr(protocol, "write_event", None), asyncio.Event) or not hasattr(protocol, "exception"):
            return None
        return cls(transport, protocol)

    def idle(self) -> bool:
        """True when a write now goes straight to the kernel: nothing of ours is still buffered, the stream is open."""
        return not self._transport.get_write_buffer_size() and not self._transport.is_closing()

    def write(self, buffers: Sequence[Buffer]) -> None:
        """Hand ``buffers`` to the transport, in order, without waiting.

        Raises:
            anyio.BrokenResourceError: the connection is lost or closing.
        """
        transport = self._transport
        if transport.is_closing() or self._protocol.exception is not None:
            raise anyio.BrokenResourceError from self._protocol.exception
        try:
            if len(buffers) == 1:
                transport.write(buffers[0])
            elif self._gather:
                transport.writelines(buffers)
            else:
                for buffer in buffers:
                    transport.write(buffer)
        except RuntimeError as exc:  # asyncio's "transport is closing"
            raise anyio.BrokenResourceError from exc

    async def drain(self) -> None:
        """Wait until what was written has gone to the kernel (anyio's stream does the same after each ``send``),
        or yield once if it already has.

        Raises:
            anyio.BrokenResourceError: the connection was lost meanwhile.
        """
        event = self._event
        if event.is_set():
            await anyio.lowlevel.cancel_shielded_checkpoint()
            return
        await event.wait()
        if self._protocol.exception is not None:
            raise anyio.BrokenResourceError from self._protocol.exception
        if self._transport.is_closing():
            raise anyio.BrokenResourceError
