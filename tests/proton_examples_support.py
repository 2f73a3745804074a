"""Support for ``test_proton_api_examples.py``: proton's examples with their imports rewritten, and a runner that
plays one scenario inside a network namespace of its own.

Two things live here, neither needing pytest nor proton:

* :func:`rewrite_examples` copies proton's Python examples into a directory, changing nothing but their imports
  (``from proton...`` / ``import proton...`` become ``amqp_async.proton...``), and :func:`write_proton_blocker`
  makes a directory whose ``proton`` package refuses to import, put first on the path of those copies so they
  cannot lean on the real proton, as they could not where only amqp_async is installed.
* This file run as a script (``python proton_examples_support.py --inside SPEC``, under ``unshare -rn`` or
  ``sudo -n unshare -n``) brings ``lo`` up, starts the scenario's peer (a broker) if it has one and waits until
  it listens, runs the scenario's steps (programs in the foreground or the background, each with a timeout,
  outputs to files; waits for a port to listen), stops the peer with SIGINT or SIGTERM and prints a JSON report:
  every program's exit status and outputs, the peer's.

A program is named ``FLAVOUR:FILE``: ``proton:simple_send.py`` is proton's example as shipped (real proton),
``ours:simple_send.py`` the copy importing ``amqp_async.proton``; each flavour has its directory and environment.
``FLAVOUR:`` with no file runs the interpreter with the arguments that follow (``engine:``, ``-m``,
``amqp_async.broker``, ...).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# ``from proton import X`` / ``from proton.reactor import X`` (not ``from proton_server import``, a sibling module)
_FROM = re.compile(r"^(\s*)from\s+proton(?=[.\s])", re.MULTILINE)
# ``import proton`` / ``import proton.reactor``, possibly ``as NAME``
_IMPORT = re.compile(r"^(\s*)import\s+proton((?:\.\w+)*)(\s+as\s+\w+)?[ \t]*$", re.MULTILINE)
_ANY_PROTON = re.compile(r"^\s*(from\s+proton[.\s]|import\s+proton(\s|\.|$))", re.MULTILINE)


def rewrite_imports(source: str) -> str:
    """``source`` with each import of proton made an import of ``amqp_async.proton``, binding the same names."""

    def import_line(match: re.Match[str]) -> str:
        indent, submodules, alias = match.group(1), match.group(2), match.group(3)
        if alias:  # import proton.reactor as r -> import amqp_async.proton.reactor as r
            return f"{indent}import amqp_async.proton{submodules}{alias}"
        if not submodules:  # import proton -> binds proton
            return f"{indent}import amqp_async.proton as proton"
        # import proton.reactor binds ``proton`` (with .reactor loaded): the same, from our package
        return f"{indent}import amqp_async.proton{submodules}; from amqp_async import proton"

    rewritten = _IMPORT.sub(import_line, _FROM.sub(r"\1from amqp_async.proton", source))
    left = _ANY_PROTON.search(rewritten)
    if left:
        raise ValueError(f"an import of proton was not rewritten: {left.group(0)!r}")
    return rewritten


def rewrite_examples(examples: Path, into: Path, *, identity: bool = False) -> Path:
    """Copy every ``*.py`` of ``examples`` into ``into`` with its imports rewritten (unchanged if ``identity``:
    the harness proven with real proton); return ``into``."""
    into.mkdir(parents=True, exist_ok=True)
    for source in sorted(examples.glob("*.py")):
        text = source.read_text()
        (into / source.name).write_text(text if identity else rewrite_imports(text))
    return into


def write_proton_blocker(into: Path) -> Path:
    """A directory holding a ``proton`` package that raises ImportError: first on ``PYTHONPATH``, it keeps a
    rewritten example (and amqp_async.proton under it) from using the real proton, as where only we are
    installed."""
    package = into / "proton"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text(
        "raise ImportError('the real proton is not available to programs run on amqp_async.proton')\n"
    )
    return into


# ---------------------------------------------------------------------------------------------------------------
# Inside the namespace.


def _bring_loopback_up() -> None:
    """``ip link set lo up``, without needing iproute2: SIOCGIFFLAGS, then SIOCSIFFLAGS with IFF_UP."""
    import fcntl
    import socket
    import struct

    siocgifflags, siocsifflags, iff_up = 0x8913, 0x8914, 0x1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH22x", b"lo", 0)
        flags = struct.unpack("16sH22x", fcntl.ioctl(sock, siocgifflags, request))[1]
        fcntl.ioctl(sock, siocsifflags, struct.pack("16sH22x", b"lo", flags | iff_up))


def _listening(port: int) -> bool:
    """Whether a TCP socket in this network namespace listens on ``port`` (read from /proc: no connection is
    made, so no listener sees a stray one)."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 3 and fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                return True
    return False


def _stop(process: subprocess.Popen[bytes], first: int, grace: float) -> bool:
    """Send ``first``, then SIGKILL after ``grace`` seconds; True if it had to be killed."""
    if process.poll() is not None:
        return False
    process.send_signal(first)
    try:
        process.wait(grace)
        return False
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        return True


def launch_program(
    work: Path, name: str, argv: list[str], env: dict[str, str], stdin: str | None
) -> subprocess.Popen[bytes]:
    """Start one program of a scenario in ``work``, its stdin, stdout and stderr in files named after it."""
    (work / f"{name}.stdin").write_text(stdin or "")
    with (
        open(work / f"{name}.stdin", "rb") as into,
        open(work / f"{name}.stdout", "wb") as out,
        open(work / f"{name}.stderr", "wb") as err,
    ):
        return subprocess.Popen(argv, cwd=work, env=env, stdin=into, stdout=out, stderr=err)


def record_end(
    report: dict[str, Any],
    work: Path,
    name: str,
    process: subprocess.Popen[bytes],
    *,
    timed_out: bool = False,
    killed: bool = False,
) -> None:
    """Put how a program ended, and what it printed, in ``report["processes"]``."""
    report["processes"][name] = {
        "returncode": process.returncode,
        "timed_out": timed_out,
        "killed": killed,
        "stdout": (work / f"{name}.stdout").read_text(errors="replace"),
        "stderr": (work / f"{name}.stderr").read_text(errors="replace"),
    }


def run_steps(
    spec: dict[str, Any],
    work: Path,
    report: dict[str, Any],
    launch: Callable[[str, list[str], str | None], subprocess.Popen[bytes]],
    await_port: Callable[..., bool] | None = None,
) -> None:
    """Run a scenario's steps (run, start, wait, stop, printed, sleep; listening when ``await_port`` is given),
    then kill what is still running. Every program's end goes in the report."""
    running: dict[str, tuple[subprocess.Popen[bytes], float]] = {}

    def wait(name: str, process: subprocess.Popen[bytes], deadline: float) -> None:
        try:
            process.wait(max(0.0, deadline - time.monotonic()))
            record_end(report, work, name, process)
        except subprocess.TimeoutExpired:
            record_end(report, work, name, process, timed_out=True, killed=_stop(process, signal.SIGINT, 2.0))

    for step in spec["steps"]:
        kind, name = step["kind"], step.get("name", "")
        if kind == "run":
            process = launch(name, step["argv"], step.get("stdin"))
            wait(name, process, time.monotonic() + step.get("timeout", spec["timeout"]))
        elif kind == "start":
            running[name] = (launch(name, step["argv"], step.get("stdin")), time.monotonic())
        elif kind == "wait":
            process, started = running.pop(name)
            wait(name, process, started + step.get("timeout", spec["timeout"]))
        elif kind == "stop":
            process, _ = running.pop(name)
            exited = process.poll() is not None
            record_end(report, work, name, process, killed=_stop(process, signal.SIGINT, 5.0))
            report["processes"][name]["exited_by_itself"] = exited
        elif kind == "listening" and await_port is not None:  # a background program listens (or has died)
            watched = [process for process, _ in running.values()]
            report.setdefault("listening", {})[str(step["port"])] = await_port(
                step["port"], step.get("timeout", spec["timeout"]), *watched
            )
        elif kind == "printed":  # a background program has printed a number of lines (or has died)
            process, _ = running[name]
            deadline = time.monotonic() + step.get("timeout", spec["timeout"])
            stdout = work / f"{name}.stdout"
            while stdout.read_bytes().count(b"\n") < step["lines"] and process.poll() is None:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.05)
        elif kind == "sleep":
            time.sleep(step["seconds"])
    for name, (process, _) in running.items():
        record_end(report, work, name, process, killed=_stop(process, signal.SIGKILL, 1.0))


def _inside(spec_path: str) -> None:
    # The examples stop on SIGINT as at a terminal. A test run started in the background by a non-interactive shell
    # hands SIGINT down ignored, and an ignored signal stays ignored across exec: give it back its default first.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    spec = json.loads(Path(spec_path).read_text())
    _bring_loopback_up()
    if spec.get("drop_to"):  # run by root through sudo: the namespace is made, back to the test's user
        uid, gid = spec["drop_to"]
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)
    work = Path(spec["work"])
    flavours: dict[str, dict[str, Any]] = spec["flavours"]
    report: dict[str, Any] = {"processes": {}, "peer": None}

    def launch(name: str, argv: list[str], stdin: str | None) -> subprocess.Popen[bytes]:
        flavour, _, program = argv[0].partition(":")
        environment = flavours[flavour]
        if program:  # an example, from the flavour's directory
            argv = [spec["python"], os.path.join(environment["directory"], program), *argv[1:]]
        else:  # "FLAVOUR:", "-m", "module", ...: the interpreter with these arguments
            argv = [spec["python"], *argv[1:]]
        return launch_program(work, name, argv, environment["env"], stdin)

    def await_port(port: int, timeout: float, *watched: subprocess.Popen[bytes]) -> bool:
        deadline = time.monotonic() + timeout
        while not _listening(port):
            if time.monotonic() > deadline or any(p.poll() is not None for p in watched):
                return False
            time.sleep(0.02)
        return True

    peer = spec.get("peer")
    broker = None
    ready = True
    if peer:
        broker = launch("peer", peer["argv"], None)
        ready = await_port(peer["port"], spec["peer_start_timeout"], broker)
        report["peer_listening"] = ready
    if ready:
        run_steps(spec, work, report, launch, await_port)
    if broker is not None:
        killed = _stop(broker, getattr(signal, peer["stop_signal"]), 10.0)
        record_end(report, work, "peer", broker, killed=killed)
    print(json.dumps(report))


if __name__ == "__main__" and sys.argv[1:2] == ["--inside"]:
    _inside(sys.argv[2])
    sys.exit(0)
