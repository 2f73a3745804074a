"""The package's layers depend in one direction only, and the folders say which layer a module is in.

    types, errors -> codec -> protocol (with message) -> io -> client / broker -> proton / spark / cli

Every ``.py`` file under ``amqp_async/`` is parsed with :mod:`ast`; each import of another part of the package
(absolute or relative, at module level or inside a function) must name a part that its own part may use. The
Sans-IO purity of ``codec`` and ``protocol`` (no I/O modules of the standard library) is tests/test_sans_io_imports.py.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "amqp_async"

#: What each part of the package may import from the others (itself always). ``message`` sits with the core: the
#: engine hands its payloads to it and the codec knows nothing of it.
ALLOWED: dict[str, frozenset[str]] = {
    "errors": frozenset(),
    "types": frozenset({"errors"}),
    "codec": frozenset({"errors", "types"}),
    "protocol": frozenset({"errors", "types", "codec"}),
    "message": frozenset({"errors", "types", "codec", "protocol"}),
    "io": frozenset({"errors", "types", "codec", "protocol"}),
    "client": frozenset({"errors", "types", "codec", "protocol", "message", "io", "__init__"}),
    "broker": frozenset({"errors", "types", "codec", "protocol", "message", "io"}),
    "proton": frozenset({"errors", "types", "codec", "protocol", "message", "io", "client"}),
    "spark": frozenset({"errors", "types", "codec", "protocol", "message", "io", "client"}),
    "cli": frozenset({"errors", "types", "codec", "protocol", "message", "io", "client", "broker", "__init__"}),
    "__init__": frozenset({"errors", "types", "codec", "protocol", "message", "io", "client"}),
    "__main__": frozenset({"cli"}),
}

PARTS = frozenset(ALLOWED)

#: Imports under ``if TYPE_CHECKING:`` a part may make beyond ALLOWED: names for annotations only, never imported
#: at run time (no cycle at import). ``errors`` names the codec's outcome classes, so that a refused message's
#: ``outcome`` is typed (``MessageRejected.outcome: Rejected | None``) for the user's type checker; ``types`` names
#: the codec's ``AMQPValue``, so that a received ``Described`` value or ``Array`` element reads as one, not ``Any``.
TYPE_ONLY: dict[str, frozenset[str]] = {"errors": frozenset({"codec"}), "types": frozenset({"codec"})}


def part_of(path: Path, package_dir: Path = PACKAGE) -> str:
    """The layer a file belongs to: its top folder under the package, or its own name for a top-level module."""
    return path.relative_to(package_dir).parts[0].removesuffix(".py")


def imported_parts(path: Path, package_dir: Path = PACKAGE) -> list[tuple[int, str]]:
    """(line, part) for every import of another part of the package in ``path``."""
    package = list(path.relative_to(package_dir.parent).parts[:-1])  # the package a relative import starts from
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets: list[list[str]] = []
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                if node.module:
                    targets.append(base + node.module.split("."))
                else:
                    targets.extend([*base, alias.name] for alias in node.names)
            elif node.module and node.module.split(".")[0] == "amqp_async":
                targets.append(node.module.split("."))
        elif isinstance(node, ast.Import):
            targets.extend(alias.name.split(".") for alias in node.names if alias.name.split(".")[0] == "amqp_async")
        for target in targets:
            if len(target) < 2:
                continue  # `import amqp_async` itself
            name = target[1]
            # `from .. import __version__` names the facade, not a module of its own
            found.append((node.lineno, name if name in PARTS else "__init__"))
    return found


def type_only_lines(path: Path) -> set[int]:
    """The lines of the imports ``path`` makes under ``if TYPE_CHECKING:`` (for the type checker only)."""
    lines: set[int] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            for statement in node.body:
                for inner in ast.walk(statement):
                    if isinstance(inner, (ast.Import, ast.ImportFrom)):
                        lines.add(inner.lineno)
    return lines


def test_every_part_is_known() -> None:
    """A new top-level module or folder gets its place in ALLOWED (and in docs/architecture.md)."""
    parts = {part_of(p) for p in PACKAGE.rglob("*.py")}
    assert parts <= PARTS, f"unplaced: {sorted(parts - PARTS)}"


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_follow_the_layers(path: Path) -> None:
    own = part_of(path)
    for_types = TYPE_ONLY.get(own, frozenset())
    type_only = type_only_lines(path) if for_types else set()
    wrong = [
        f"{path.name}:{line} imports {part}"
        for line, part in imported_parts(path)
        if part != own and part not in ALLOWED[own] and not (part in for_types and line in type_only)
    ]
    assert not wrong, f"{own} may import only {sorted(ALLOWED[own])}: {wrong}"


def test_the_checker_sees_a_wrong_import(tmp_path: Path) -> None:
    """The rule can fail: an import from ``io`` into ``protocol`` is reported, one from ``codec`` is not."""
    package_dir = tmp_path / "amqp_async"
    probe = package_dir / "protocol" / "probe.py"
    probe.parent.mkdir(parents=True)
    probe.write_text("from ..io.driver import EngineDriver\nfrom ..codec import encode\nimport amqp_async.client\n")
    assert part_of(probe, package_dir) == "protocol"
    assert imported_parts(probe, package_dir) == [(1, "io"), (2, "codec"), (3, "client")]
    assert "io" not in ALLOWED["protocol"] and "client" not in ALLOWED["protocol"]


def test_a_type_only_import_is_told_from_one_at_run_time(tmp_path: Path) -> None:
    """The allowance for annotations does not let a run-time import through: only the one under TYPE_CHECKING."""
    probe = tmp_path / "errors.py"
    probe.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .codec import x\nfrom .codec import y\n"
    )
    assert type_only_lines(probe) == {3}
