"""``receive --output-dir``: the names a sender puts in the ``filename`` property (and the message id) never write
outside the directory, never replace a file or a symbolic link there, and never forge a line of the listing
(amqp_async/cli/_files.py, ``output_name``).

Before, a name with a newline (``"a\\nb"``) made two lines of the listing on stdout, so that a sender could add a
line naming any path (``"x\\n/home/user/.ssh/id_rsa"``) to what a script reads from it; U+202E showed ``gnp.exe``
as ``exe.png``; ``-rf`` was listed as is (an option to the ``xargs rm`` of a script) and a dangling symbolic link of
that name in the directory was replaced. Traversal (``../../etc/x``), absolute paths, ``\\``, ``.``, ``..``, empty
names and NUL were refused already; they are checked here too.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from amqp_async import Message
from amqp_async.cli._files import output_name

try:
    from test_cli import BrokerCLI, ok
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.test_cli import BrokerCLI, ok

pytest.importorskip("click", reason="the cli extra (click, rich) is in the test dependency group")

#: filename property -> the name it gets (None: it falls back to message-N).
HOSTILE = {
    "../../etc/x": None,
    "/etc/passwd": None,
    "sub/../../escape": None,
    "..\\..\\windows": None,
    "": None,
    ".": None,
    "..": None,
    "a\x00b": None,
    "a\nb": None,
    "x\n/etc/passwd": None,
    "tab\there": None,
    "\x1b[2Jclear": None,
    "\u202egnp.exe": None,
    "line\u2028sep": None,
    "-rf": None,
    "n" * 300: None,
    "report 2026.csv": "report 2026.csv",
    ".hidden": ".hidden",
    "résumé.pdf": "résumé.pdf",
}


@pytest.mark.parametrize("given", list(HOSTILE), ids=[repr(name)[:30] for name in HOSTILE])
def test_a_filename_property_is_taken_only_when_it_is_a_plain_printable_name(given: str, tmp_path: Path) -> None:
    path = output_name(Message(body=b"x", properties={"filename": given}), 7, tmp_path)
    assert path.parent == tmp_path
    assert path.name == (HOSTILE[given] or "message-7")


@pytest.mark.parametrize(
    ("message_id", "expected"),
    [("../../id", "_.._id"), ("/abs", "_abs"), ("..", "message-3"), ("-rf", "rf"), ("-.x.", "x"), ("a\nb", "a_b")],
)
def test_a_message_id_gives_a_name_of_safe_characters(message_id: str, expected: str, tmp_path: Path) -> None:
    assert output_name(Message(body=b"x", id=message_id), 3, tmp_path) == tmp_path / expected


def test_a_symbolic_link_is_never_replaced_even_a_dangling_one(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    directory = tmp_path / "out"
    directory.mkdir()
    (directory / "link.txt").symlink_to(outside)  # dangling: its target does not exist
    path = output_name(Message(body=b"x", properties={"filename": "link.txt"}), 1, directory)
    assert path == directory / "link-1.txt"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerCLI]:
    process = BrokerCLI(tmp_path_factory.mktemp("cli-names-broker"))
    try:
        yield process
    finally:
        process.stop()


def test_hostile_names_through_the_command_stay_inside_and_list_one_line_each(
    broker: BrokerCLI, tmp_path: Path
) -> None:
    queue = f"names-{uuid.uuid4().hex[:10]}"
    names = [name for name in HOSTILE if "\x00" not in name] + ["a\x00b"]
    lines = [
        json.dumps({"body": f"body {index}", "properties": {"filename": name}}) for index, name in enumerate(names)
    ]
    ok("send", "-u", broker.url, queue, "-i", "-", "--format", "message", "-q", input="\n".join(lines) + "\n")
    directory = tmp_path / "out"
    directory.mkdir()
    outside = tmp_path / "outside.txt"
    (directory / "-rf").symlink_to(outside)
    result = ok("receive", "-u", broker.url, queue, "-d", str(directory), "-c", str(len(names)), "-t", "10", "-q")
    listed = result.stdout.splitlines()
    assert len(listed) == len(names)  # one line per message: no name made two
    for line in listed:
        assert Path(line).parent == directory
    written = sorted(os.listdir(directory))
    assert len(written) == len(names) + 1  # and the symbolic link, untouched
    assert os.readlink(directory / "-rf") == str(outside) and not outside.exists()
    assert not (tmp_path / "escape").exists() and not (tmp_path / "windows").exists()
    bodies = sorted((directory / name).read_text() for name in written if name != "-rf")
    assert bodies == sorted(f"body {index}" for index in range(len(names)))
