"""Rules the test suite keeps for its own speed (tests/conftest.py says why each holds)."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).parent


def _imported_names(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.ImportFrom):
            names.update(alias.asname or alias.name for alias in node.names)
    return names


def test_no_test_file_imports_the_rabbitmq_fixture() -> None:
    """A session fixture imported into a test file is that file's own, so each such file would start a RabbitMQ
    node of its own; conftest.py registers ``rabbitmq_broker`` once, for one node per pytest-xdist worker."""
    assert "rabbitmq_broker" in _imported_names(TESTS / "conftest.py")
    importing = sorted(path.name for path in TESTS.glob("test_*.py") if "rabbitmq_broker" in _imported_names(path))
    assert importing == []


def test_the_check_finds_an_imported_fixture(tmp_path: Path) -> None:
    source = tmp_path / "test_example.py"
    source.write_text("try:\n    from rabbitmq import RabbitMQNode, rabbitmq_broker\nexcept ImportError:\n    pass\n")
    assert "rabbitmq_broker" in _imported_names(source)


def _test_functions(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    return {
        node.name
        for node in tree.body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test_")
    }


def test_every_markers_entry_names_a_test_file_or_test_that_exists() -> None:
    """conftest.py's MARKERS keeps the interpreter matrix's policy by name: an entry whose file or test was renamed
    would silently stop marking it (a ``processes`` test back on every Python, a ``matrix`` one gone from them)."""
    try:
        from conftest import MARKERS
    except ImportError:  # pragma: no cover - tests/ imported as a package
        from tests.conftest import MARKERS
    missing = []
    for key in MARKERS:
        file_name, _, test_name = key.partition("::")
        path = TESTS / file_name
        if not path.is_file() or (test_name and test_name not in _test_functions(path)):
            missing.append(key)
    assert missing == []
