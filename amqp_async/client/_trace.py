"""A frame trace: every frame, both ways, in readable form, on the ``amqp_async.frames`` logger.

Switched on by ``AMQP_ASYNC_TRACE_FRM=1`` (or proton's own ``PN_TRACE_FRM=1``) in the environment; the logger then
gets DEBUG records like ``-> [ch 0] Open(container_id='...', ...)``. Tracing decodes every frame a second time,
so it costs: it is for debugging, off by default.
"""

from __future__ import annotations

import logging
import os
import sys

from ..codec.framing import FRAME_SASL, FrameDecoder
from ..errors import DecodeError

__all__ = ["FrameTracer"]

log = logging.getLogger("amqp_async.frames")


class FrameTracer:
    """Decodes copies of the bytes each way and logs the frames."""

    def __init__(self) -> None:
        self._incoming = FrameDecoder()
        self._outgoing = FrameDecoder()
        self._headers = {id(self._incoming): True, id(self._outgoing): True}

    @classmethod
    def from_environment(cls) -> FrameTracer | None:
        """A tracer when AMQP_ASYNC_TRACE_FRM or PN_TRACE_FRM is set to a true value, else None."""
        for name in ("AMQP_ASYNC_TRACE_FRM", "PN_TRACE_FRM"):
            if os.environ.get(name, "").lower() in ("1", "true", "yes", "on"):
                if not log.handlers and not logging.getLogger().handlers:
                    handler = logging.StreamHandler(sys.stderr)
                    handler.setFormatter(logging.Formatter("[%(name)s] %(message)s"))
                    log.addHandler(handler)
                log.setLevel(logging.DEBUG)
                return cls()
        return None

    def received(self, data: bytes) -> None:
        """Log the frames in bytes just received."""
        self._trace(self._incoming, data, "<-")

    def sent(self, data: bytes) -> None:
        """Log the frames in bytes about to be written."""
        self._trace(self._outgoing, data, "->")

    def _trace(self, decoder: FrameDecoder, data: bytes, arrow: str) -> None:
        if not data:
            log.debug("%s EOS", arrow)
            return
        decoder.feed(data)
        try:
            while True:
                if decoder.buffered >= 8 and decoder.peek_protocol_header():
                    header = decoder.next_protocol_header()
                    log.debug("%s %r", arrow, header)
                    continue
                frame = decoder.next_frame()
                if frame is None:
                    return
                kind = "SASL " if frame.type == FRAME_SASL else ""
                if frame.performative is None:
                    log.debug("%s [ch %d] (empty frame)", arrow, frame.channel)
                else:
                    extra = f" +{len(frame.payload)} bytes" if frame.payload else ""
                    log.debug("%s %s[ch %d] %r%s", arrow, kind, frame.channel, frame.performative, extra)
        except DecodeError as exc:
            log.debug("%s (undecodable: %s)", arrow, exc)
