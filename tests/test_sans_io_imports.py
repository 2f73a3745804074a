"""The Sans-IO core (``amqp_async.codec``, ``amqp_async.protocol``) imports no I/O, thread or clock modules.

Two checks, because each misses what the other sees:

- **Static** (the authority): every ``.py`` file under the two packages is parsed with :mod:`ast`; any
  ``import``/``from ... import`` of a forbidden module (by full name or top-level package), and any
  ``__import__("x")`` / ``importlib.import_module("x")`` with a literal name, is a violation, wherever it
  sits (module level, inside a function, under ``if TYPE_CHECKING``).
- **Dynamic**: a fresh interpreter imports every module of the two packages, without running
  ``amqp_async/__init__.py`` (the public facade may legitimately import the async driver), and records who
  imports each forbidden module. It fails when one of *our* modules (``amqp_async.*``, including ``types``
  or ``errors`` pulled in by the core) imports a forbidden module, even one already loaded, and when
  importing the core loads an event-loop, socket or process module at all, whoever asked for it. ``time``
  is loaded at interpreter start-up and ``threading`` by ``logging`` and many libraries, so those two count
  only when our own code imports them: a plain ``sys.modules`` diff would be blind to the first and wrong
  about the second. Every module of ours that the core pulls in is then also checked statically.

``uuid`` and ``platform`` may be imported inside a function (the codec imports ``uuid`` when the first uuid is
decoded: amqp_async/codec/_uuid.py) but importing the core must not load them: on Python 3.10, ``uuid`` imports
``platform`` and ``platform`` imports ``subprocess``. Checked on every interpreter, so that a module-level
``import uuid`` fails the suite on 3.13 as it would break the rule on 3.10.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

SANS_IO_PACKAGES = ("amqp_async.codec", "amqp_async.protocol")

#: The design contract's list, plus the C modules behind them.
FORBIDDEN = frozenset(
    {
        "asyncio",
        "anyio",
        "trio",
        "uvloop",
        "socket",
        "ssl",
        "select",
        "selectors",
        "threading",
        "subprocess",
        "time",
        "_asyncio",
        "_socket",
        "_ssl",
        "_thread",
    }
)
#: Modules that importing the core must not even *load*, whoever imports them: no stdlib module that a codec
#: or a state machine needs drags these in. (``time`` and ``threading`` routinely are; see the docstring.)
NEVER_LOADED = FORBIDDEN - {"time", "threading", "_thread"}
#: Allowed inside a function, never loaded by importing the core (see the module's docstring).
NOT_AT_IMPORT = frozenset({"uuid", "platform"})


def is_forbidden(module: str) -> bool:
    return module in FORBIDDEN or module.partition(".")[0] in FORBIDDEN


# --- static check ---


@dataclass(frozen=True)
class Violation:
    path: Path
    line: int
    module: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: imports {self.module}"


def _literal_import_target(node: ast.Call) -> str | None:
    """The module named by ``__import__("x")`` / ``importlib.import_module("x")`` / ``import_module("x")``."""
    func = node.func
    name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
    if name not in ("__import__", "import_module") or not node.args:
        return None
    first = node.args[0]
    if isinstance(first, ast.Constant) and isinstance(first.value, str):
        return first.value
    return None


def forbidden_imports(path: Path) -> list[Violation]:
    """Every import of a forbidden module in the Python source file ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[Violation] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend(Violation(path, node.lineno, a.name) for a in node.names if is_forbidden(a.name))
        elif isinstance(node, ast.ImportFrom):
            # Relative imports (level > 0) stay inside our own package by construction.
            if node.level == 0 and node.module and is_forbidden(node.module):
                found.append(Violation(path, node.lineno, node.module))
        elif isinstance(node, ast.Call):
            target = _literal_import_target(node)
            if target is not None and is_forbidden(target):
                found.append(Violation(path, node.lineno, target))
    return found


# --- locating the modules ---


def package_root() -> Path:
    """The directory of the ``amqp_async`` package that this test run imports (found without importing it)."""
    spec = importlib.util.find_spec("amqp_async")
    if spec is None or not spec.submodule_search_locations:
        pytest.fail("the amqp_async package is not importable; install it (pip install -e .)")
    return Path(next(iter(spec.submodule_search_locations)))


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def source_files(root: Path, dotted: str) -> list[Path]:
    """The ``.py`` files of module or package ``dotted`` (``amqp_async.x``) under ``root``; [] if absent."""
    relative = Path(*dotted.split(".")[1:])
    as_package, as_module = root / relative, (root / relative).with_suffix(".py")
    if as_package.is_dir():
        return sorted(as_package.rglob("*.py"))
    if as_module.is_file():
        return [as_module]
    return []


def sans_io_files(dotted: str) -> tuple[Path, list[Path]]:
    root = package_root()
    files = source_files(root, dotted)
    if not files:
        pytest.skip(f"{dotted} has no modules yet")
    return root, files


# --- dynamic check ---

# Runs in a fresh interpreter: argv[1] is a JSON object {"path": dir holding amqp_async, "modules": [...],
# "forbidden": [...]}. Prints a JSON report on its last line.
_PROBE = r"""
import builtins, importlib, importlib.util, json, sys

args = json.loads(sys.argv[1])
forbidden = frozenset(args["forbidden"])
sys.path.insert(0, args["path"])

def is_forbidden(name):
    return name in forbidden or name.partition(".")[0] in forbidden

events = []  # [importer module, imported module]
real_import = builtins.__import__
real_import_module = importlib.import_module

def traced_import(name, globals=None, locals=None, fromlist=(), level=0):
    if level == 0 and is_forbidden(name):
        events.append([(globals or {}).get("__name__", "?"), name])
    return real_import(name, globals, locals, fromlist, level)

def traced_import_module(name, package=None):
    if not name.startswith(".") and is_forbidden(name):
        events.append([sys._getframe(1).f_globals.get("__name__", "?"), name])
    return real_import_module(name, package)

# The parent package as an empty shell: its submodules import normally, its __init__ (the facade) never runs.
spec = importlib.util.find_spec("amqp_async")
sys.modules["amqp_async"] = importlib.util.module_from_spec(spec)

before = set(sys.modules)
builtins.__import__ = traced_import
importlib.import_module = traced_import_module
try:
    for name in args["modules"]:
        importlib.import_module(name)
finally:
    builtins.__import__ = real_import
    importlib.import_module = real_import_module
loaded = sorted(set(sys.modules) - before)

print(json.dumps({
    "events": events,
    "loaded_forbidden": [m for m in loaded if is_forbidden(m)],
    "loaded_ours": [m for m in loaded if m.startswith("amqp_async.")],
    "files": {m: getattr(sys.modules[m], "__file__", None) for m in loaded if m.startswith("amqp_async.")},
}))
"""


@dataclass(frozen=True)
class ImportReport:
    events: list[tuple[str, str]]  # (importer, imported) for every import of a forbidden module
    loaded_forbidden: list[str]  # forbidden modules newly in sys.modules
    loaded_ours: list[str]  # amqp_async.* modules newly in sys.modules
    files: dict[str, str | None]

    def by_us(self) -> list[tuple[str, str]]:
        return sorted({(a, b) for a, b in self.events if a == "amqp_async" or a.startswith("amqp_async.")})

    def importers_of(self, module: str) -> list[str]:
        return sorted({a for a, b in self.events if b == module or b.startswith(module + ".")})


def probe_imports(path: Path, modules: list[str]) -> ImportReport:
    """Import ``modules`` in a fresh interpreter, ``path`` first on sys.path; report forbidden imports."""
    payload = json.dumps({"path": str(path), "modules": modules, "forbidden": sorted(FORBIDDEN | NOT_AT_IMPORT)})
    proc = subprocess.run(
        [sys.executable, "-I", "-c", _PROBE, payload],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if proc.returncode != 0:
        pytest.fail(f"importing {modules} in a fresh interpreter failed:\n{proc.stderr}")
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    return ImportReport(
        events=[(a, b) for a, b in report["events"]],
        loaded_forbidden=report["loaded_forbidden"],
        loaded_ours=report["loaded_ours"],
        files=report["files"],
    )


def check_dynamic(path: Path, modules: list[str]) -> list[str]:
    """Problems found by importing ``modules`` (an empty list when the core is clean)."""
    report = probe_imports(path, modules)
    problems = [f"{importer} imports {module}" for importer, module in report.by_us()]
    for module in report.loaded_forbidden:
        if module.partition(".")[0] in NEVER_LOADED | NOT_AT_IMPORT:
            via = ", ".join(report.importers_of(module)) or "unknown importer"
            problems.append(f"importing the core loads {module} (imported by {via})")
    for name in report.loaded_ours:
        file = report.files.get(name)
        if file and file.endswith(".py"):
            problems.extend(str(v) for v in forbidden_imports(Path(file)))
    return sorted(set(problems))


# --- tests ---


@pytest.mark.parametrize("package", SANS_IO_PACKAGES)
def test_sans_io_sources_import_nothing_forbidden(package: str) -> None:
    _, files = sans_io_files(package)
    violations = [v for path in files for v in forbidden_imports(path)]
    assert not violations, "the Sans-IO core must not import I/O, threads or the clock:\n" + "\n".join(
        map(str, violations)
    )


@pytest.mark.parametrize("package", SANS_IO_PACKAGES)
def test_importing_sans_io_core_loads_nothing_forbidden(package: str) -> None:
    root, files = sans_io_files(package)
    modules = sorted({module_name(root, path) for path in files})
    problems = check_dynamic(root.parent, modules)
    assert not problems, "the Sans-IO core must not import I/O, threads or the clock:\n" + "\n".join(problems)


# --- the checks can fail (self-test) ---


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import socket\n", ["socket"]),
        ("import os, asyncio.events as ev\n", ["asyncio.events"]),
        ("from time import monotonic\n", ["time"]),
        ("def f():\n    import trio\n", ["trio"]),
        ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import anyio\n", ["anyio"]),
        ("import importlib\nimportlib.import_module('ssl')\n", ["ssl"]),
        ("__import__('threading')\n", ["threading"]),
        ("import struct, os.path\nfrom . import framing\nfrom ..types import ulong\nimport timeit\n", []),
    ],
)
def test_static_checker_flags_forbidden_imports(tmp_path: Path, source: str, expected: list[str]) -> None:
    path = tmp_path / "module.py"
    path.write_text(source, encoding="utf-8")
    assert [v.module for v in forbidden_imports(path)] == expected


def _fake_package(tmp_path: Path, codec_source: str, types_source: str = "") -> Path:
    for name, text in {
        "amqp_async/__init__.py": "import asyncio  # the facade may; it must not run in the probe\n",
        "amqp_async/types.py": types_source,
        "amqp_async/codec/__init__.py": "from .. import types\nfrom . import core\n",
        "amqp_async/codec/core.py": codec_source,
    }.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text, encoding="utf-8")
    return tmp_path


@pytest.mark.parametrize(
    ("codec_source", "types_source", "expected"),
    [
        ("import struct\n", "import enum\n", []),
        # threading arrives through a dependency, not through our code: allowed (as attrs does it).
        ("import logging\n", "", []),
        ("import socket\n", "", ["amqp_async.codec.core imports socket"]),
        # time is already loaded at start-up; a sys.modules diff would not see this.
        ("import time\n", "", ["amqp_async.codec.core imports time"]),
        ("", "import threading\n", ["amqp_async.types imports threading"]),
        # An import inside a function of a module the core pulls in: only the static pass sees it.
        ("", "def now():\n    import time\n", ["types.py:2: imports time"]),
        ("import selectors\n", "", ["amqp_async.codec.core imports selectors"]),
        # uuid: imported inside a function, fine; at import time, not (on 3.10 it loads subprocess).
        ("def make():\n    import uuid\n", "", []),
        ("import uuid\n", "", ["amqp_async.codec.core imports uuid", "importing the core loads uuid"]),
    ],
)
def test_dynamic_checker_flags_forbidden_imports(
    tmp_path: Path, codec_source: str, types_source: str, expected: list[str]
) -> None:
    path = _fake_package(tmp_path, codec_source, types_source)
    problems = check_dynamic(path, ["amqp_async.codec", "amqp_async.codec.core"])
    if not expected:
        assert problems == []
    for wanted in expected:
        assert any(wanted in problem for problem in problems), (wanted, problems)


def test_the_run_time_amqp_value_alias_is_the_one_type_checkers_read() -> None:
    """codec/values.py writes AMQPValue twice: for type checkers, and built on first use at run time (it names
    uuid.UUID, which the codec must not import when it loads). Both must be the same expression."""
    tree = ast.parse((package_root() / "codec" / "values.py").read_text(encoding="utf-8"))
    aliases = [
        ast.unparse(node.value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Assign, ast.AnnAssign))
        and node.value is not None
        and any(
            isinstance(t, ast.Name) and t.id == "AMQPValue"
            for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
        )
    ]
    assert len(aliases) == 2
    assert aliases[0] == aliases[1]
    import uuid

    import amqp_async.codec  # the facade may import it first; what matters is that it resolves

    assert uuid.UUID in amqp_async.codec.AMQPValue.__args__
