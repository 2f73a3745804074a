"""The inputs of the network fuzz tests that serve a mutated recording to a client (tests/test_network_fuzz_client.py:
the awaitable client's scenarios; tests/test_network_fuzz_proton.py: the callback API's programs).

A recording is what a broker wrote to the party under test, chunk by chunk, each with the count of bytes the party
had sent before it (:data:`Chunks`, served by tests/scripted_server.py). :meth:`FuzzInput.seeded` mutates one
(tests/fuzz_mutations.py) as a seed says; an input that once failed is kept as JSON in the corpus directory and
replayed by each file's corpus test.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

try:
    from fuzz_mutations import mutate_chunks
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.fuzz_mutations import mutate_chunks

__all__ = ["Chunks", "FuzzInput"]

#: What the broker wrote: (bytes the party had sent before, the chunk).
Chunks = list[tuple[int, bytes]]


@dataclass
class FuzzInput:
    """What one fuzz session serves: the recording of the party ``name`` (a scenario, a program), mutated or not;
    ``linger``: after the last chunk the socket stays open and silent (the party's own bounds must end it)
    instead of being closed; ``found``: how it was made (the seed and the mutations), and what it once did wrong.

    Subclasses name the party's kind (:attr:`KIND`), the key of ``name`` in the corpus files."""

    KIND: ClassVar[str] = "name"

    name: str
    linger: bool
    chunks: Chunks
    found: str = ""

    def to_json(self) -> str:
        return json.dumps(
            {
                self.KIND: self.name,
                "linger": self.linger,
                "found": self.found,
                "chunks": [[count, data.hex()] for count, data in self.chunks],
            },
            indent=1,
        )

    @classmethod
    def from_json(cls, text: str) -> FuzzInput:
        raw = json.loads(text)
        chunks = [(int(count), bytes.fromhex(data)) for count, data in raw["chunks"]]
        return cls(raw[cls.KIND], bool(raw["linger"]), chunks, raw.get("found", ""))

    @classmethod
    def seeded(cls, recordings: dict[str, Chunks], seed: int) -> FuzzInput:
        """The input of ``seed``: a recording, a linger mode, and the recording mutated, all chosen by the seed."""
        rng = random.Random(seed)
        name = rng.choice(sorted(recordings))
        linger = rng.random() < 0.5
        recorded = recordings[name]
        mutated, applied = mutate_chunks([data for _, data in recorded], rng)
        chunks = [(count, data) for (count, _), data in zip(recorded, mutated, strict=False)]
        return cls(name, linger, chunks, f"seed {seed}: {', '.join(applied)}")

    def save(self, problem: str, directory: Path) -> Path:
        """Write the input, with ``problem`` added to :attr:`found`, into ``directory``; its path."""
        directory.mkdir(parents=True, exist_ok=True)
        seed = self.found.split(":")[0].replace(" ", "-") or "input"
        path = directory / f"{seed}-{self.name}-{'linger' if self.linger else 'close'}.json"
        self.found = f"{self.found} -> {problem}"
        path.write_text(self.to_json() + "\n")
        return path
