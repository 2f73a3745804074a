"""Progress of files moving as streamed messages (``send --file``, ``receive --output-dir``): bytes and MB/s.

A live bar on a terminal (rich's transfer columns), plain lines every few seconds otherwise (on stderr, as
:mod:`._progress` does), such as::

    sent: 512.0 MB/1.1 GB, 240.3 MB/s, 1/3 files, ETA 2 s
"""

from __future__ import annotations

from typing import IO, TYPE_CHECKING

from ._progress import _Progress, human_bytes

if TYPE_CHECKING:
    from rich.progress import ProgressColumn

__all__ = ["TransferProgress"]


class TransferProgress(_Progress):
    """Counts the bytes and files of a run and shows them, then gives a one-line summary.

    Args:
        verb: what is counted (``sent``, ``received``), the first word of every line.
        total_bytes: the bytes expected (for the bar and the ETA), None when unknown.
        total_files: the files expected, None when unknown.
        quiet: show nothing while running.
        stream: where to write (stderr).
    """

    def __init__(
        self,
        verb: str,
        total_bytes: int | None = None,
        total_files: int | None = None,
        *,
        quiet: bool = False,
        stream: IO[str] | None = None,
    ) -> None:
        self.total_bytes = total_bytes
        self.total_files = total_files
        self.size = 0
        self.files = 0
        super().__init__(verb, total_bytes, quiet=quiet, stream=stream)

    def _columns(self) -> tuple[ProgressColumn, ...]:
        from rich.progress import DownloadColumn, TextColumn, TimeRemainingColumn, TransferSpeedColumn

        return (DownloadColumn(), TransferSpeedColumn(), TextColumn("ETA"), TimeRemainingColumn())

    def naming(self, name: str) -> None:
        """The file now moving (shown on the live bar)."""
        if self._live is not None:
            self._live.update(self._task, description=f"{self.verb} {name}")

    def advance(self, size: int) -> None:
        """Count ``size`` more bytes."""
        self.size += size
        self._show(advance=size)

    def file_done(self) -> None:
        """Count one more file done."""
        self.files += 1

    def rate(self) -> float:
        """Bytes per second so far."""
        elapsed = self.elapsed
        return self.size / elapsed if elapsed > 0 else 0.0

    def line(self) -> str:
        """The progress so far, as one plain line."""
        done = (
            human_bytes(self.size)
            if self.total_bytes is None
            else f"{human_bytes(self.size)}/{human_bytes(self.total_bytes)}"
        )
        rate = self.rate()
        files = f"{self.files:,}" if self.total_files is None else f"{self.files:,}/{self.total_files:,}"
        text = f"{self.verb}: {done}, {human_bytes(rate)}/s, {files} files"
        if self.total_bytes is not None and rate > 0:
            text += f", ETA {max(0.0, (self.total_bytes - self.size) / rate):,.0f} s"
        return text

    def summary(self) -> str:
        """The final line: ``sent 3 files (1.1 GB) in 4.52 s, 240.3 MB/s``."""
        plural = "" if self.files == 1 else "s"
        return (
            f"{self.verb} {self.files:,} file{plural} ({human_bytes(self.size)}) in {self.elapsed:.2f} s, "
            f"{human_bytes(self.rate())}/s"
        )
