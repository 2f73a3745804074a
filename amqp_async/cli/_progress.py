"""Progress of a long run: a live bar on a terminal (rich), plain lines every few seconds otherwise.

Both go to stderr: stdout carries the messages ``receive`` prints. Lines look like::

    receive: 2,000/10,000 messages, 4,105 msg/s, 190.4 kB, ETA 2 s

``AMQP_ASYNC_PROGRESS_INTERVAL`` sets the seconds between plain lines (default 2). rich is imported only for a
live bar: a command whose output goes to a file or a pipe (scripts, CI) starts without it.
"""

from __future__ import annotations

import abc
import os
import sys
import time
from types import TracebackType
from typing import IO, TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from rich.progress import Progress, ProgressColumn

__all__ = ["RunProgress", "human_bytes"]

INTERVAL_ENV = "AMQP_ASYNC_PROGRESS_INTERVAL"
DEFAULT_INTERVAL = 2.0


def human_bytes(count: float) -> str:
    """``1234567`` -> ``1.2 MB`` (decimal units)."""
    for unit in ("B", "kB", "MB", "GB"):
        if abs(count) < 1000 or unit == "GB":
            return f"{count:,.0f} {unit}" if unit == "B" else f"{count:,.1f} {unit}"
        count /= 1000
    raise AssertionError("unreachable")


def _may_be_terminal(stream: IO[str]) -> bool:
    """False when rich's ``Console.is_terminal`` is sure to be False for ``stream`` (not a tty, and neither
    ``TTY_COMPATIBLE=1`` nor ``FORCE_COLOR`` says otherwise), without importing rich."""
    if os.environ.get("TTY_COMPATIBLE") == "1" or os.environ.get("FORCE_COLOR") is not None:
        return True
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty is not None and isatty())
    except ValueError:  # a closed stream
        return False


_P = TypeVar("_P", bound="_Progress")


class _Progress(abc.ABC):
    """What the progress displays share: a live bar on a terminal (rich: the description, a bar, then ``columns``),
    else, unless ``quiet``, :meth:`line` printed every ``AMQP_ASYNC_PROGRESS_INTERVAL`` seconds; a context manager
    (the live bar runs inside it)."""

    def __init__(
        self,
        verb: str,
        total: int | None,
        *,
        quiet: bool,
        stream: IO[str] | None,
        **fields: Any,
    ) -> None:
        self.verb = verb
        self._stream = stream if stream is not None else sys.stderr
        self._started = time.monotonic()
        self._interval = float(os.environ.get(INTERVAL_ENV) or DEFAULT_INTERVAL)
        self._next_line = self._started + self._interval
        self._live: Progress | None = None
        terminal = False
        if not quiet and _may_be_terminal(self._stream):
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TextColumn

            console = Console(file=self._stream)
            terminal = console.is_terminal
            if terminal:
                self._live = Progress(
                    TextColumn("{task.description}"), BarColumn(), *self._columns(), console=console, transient=True
                )
                self._task = self._live.add_task(verb, total=total, **fields)
        self._plain = not quiet and not terminal

    @abc.abstractmethod
    def _columns(self) -> tuple[ProgressColumn, ...]:
        """The live bar's columns after the description and the bar (rich is imported when this is called)."""

    def __enter__(self: _P) -> _P:
        if self._live is not None:
            self._live.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if self._live is not None:
            self._live.stop()

    @property
    def elapsed(self) -> float:
        """Seconds since the start."""
        return time.monotonic() - self._started

    def _show(self, **changes: Any) -> None:
        """Update the live bar with ``changes`` (rich's ``Progress.update`` arguments), or print :meth:`line` if
        the interval has passed."""
        if self._live is not None:
            self._live.update(self._task, **changes)
        elif self._plain:
            now = time.monotonic()
            if now >= self._next_line:
                self._next_line = now + self._interval
                print(self.line(), file=self._stream, flush=True)

    @abc.abstractmethod
    def line(self) -> str:
        """The progress so far, as one plain line."""


class RunProgress(_Progress):
    """Counts messages and bytes and shows them while a command runs, then gives a one-line summary.

    Args:
        verb: what is counted (``sent``, ``received``...), the first word of every line.
        total: the messages expected, for the bar and the ETA; None when unknown.
        quiet: show nothing while running.
        stream: where to write (stderr).
    """

    def __init__(self, verb: str, total: int | None, *, quiet: bool = False, stream: IO[str] | None = None) -> None:
        self.total = total
        self.messages = 0
        self.size = 0
        super().__init__(verb, total, quiet=quiet, stream=stream, size=0)

    def _columns(self) -> tuple[ProgressColumn, ...]:
        from rich.progress import (
            MofNCompleteColumn,
            ProgressColumn,
            Task,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )
        from rich.text import Text

        class Rate(ProgressColumn):
            def render(self, task: Task) -> Text:
                speed = task.finished_speed or task.speed
                return Text("- msg/s" if speed is None else f"{speed:,.0f} msg/s")

        class Size(ProgressColumn):
            def render(self, task: Task) -> Text:
                return Text(human_bytes(float(task.fields.get("size", 0))))

        return (MofNCompleteColumn(), Rate(), Size(), TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn())

    def advance(self, messages: int = 1, size: int = 0) -> None:
        """Count ``messages`` more, of ``size`` bytes together."""
        self.messages += messages
        self.size += size
        self._show(advance=messages, size=self.size)

    def rate(self) -> float:
        """Messages per second so far."""
        elapsed = self.elapsed
        return self.messages / elapsed if elapsed > 0 else 0.0

    def line(self) -> str:
        """The progress so far, as one plain line."""
        done = f"{self.messages:,}" if self.total is None else f"{self.messages:,}/{self.total:,}"
        rate = self.rate()
        text = f"{self.verb}: {done} messages, {rate:,.0f} msg/s, {human_bytes(self.size)}"
        if self.total is not None and rate > 0:
            text += f", ETA {max(0.0, (self.total - self.messages) / rate):,.0f} s"
        return text

    def summary(self) -> str:
        """The final line: ``sent 1,000 messages (12.3 kB) in 0.25 s, 4,000 msg/s``."""
        noun = "message" if self.messages == 1 else "messages"
        return (
            f"{self.verb} {self.messages:,} {noun} ({human_bytes(self.size)}) in {self.elapsed:.2f} s, "
            f"{self.rate():,.0f} msg/s"
        )
