"""Rules the test suite keeps for its own speed (tests/conftest.py says why each holds)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
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


def test_the_workers_read_the_test_modules_rewritten_before_they_start(tmp_path: Path) -> None:
    """rewrite_cache.py, in a pytest-xdist controller, writes each test module's rewritten pyc where the workers'
    import looks for it, before they start; with PYTHONDONTWRITEBYTECODE set it writes nothing, as pytest itself
    would not."""
    (tmp_path / "conftest.py").write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(TESTS)!r})\n"
        "import rewrite_cache\n"
        "def pytest_configure(config):\n"
        "    written = rewrite_cache.rewrite_before_the_workers_start(config, set())\n"
        "    if not hasattr(config, 'workerinput'):\n"
        "        open('written.txt', 'w').write(str(written))\n"
    )
    (tmp_path / "test_example.py").write_text("def test_it():\n    pass\n")
    (tmp_path / "test_other.py").write_text("def test_it():\n    pass\n")
    command = [sys.executable, "-m", "pytest", "-q", "-n", "1", "-p", "no:cacheprovider", "--rootdir", str(tmp_path)]
    for dont_write, expected in (("1", "0"), ("", "2")):
        for pyc in tmp_path.glob("__pycache__/test_*-pytest-*.pyc"):
            pyc.unlink()
        env = {**os.environ, "PYTHONDONTWRITEBYTECODE": dont_write}
        result = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stdout + result.stderr
        assert (tmp_path / "written.txt").read_text() == expected
        cached = sorted(pyc.name.split(".")[0] for pyc in tmp_path.glob("__pycache__/test_*-pytest-*.pyc"))
        assert cached == ([] if dont_write else ["test_example", "test_other"])
