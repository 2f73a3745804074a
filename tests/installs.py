"""What the test suite installs for itself, said out loud, and the way to say no: ``AMQP_ASYNC_TEST_NO_INSTALL=1``.

Some tests need programs that pip does not bring: RabbitMQ 3.10 (``apt-get install rabbitmq-server``), Java 17 for
Spark (``openjdk-17-jre-headless``), Qpid Proton's C and Python examples (``libqpid-proton11-dev``,
``libqpid-proton11-dev-examples``), and rhea for the interop matrix (``npm install rhea``). The fixtures install
what is missing the first time it is needed, so that a fresh machine (and CI) runs everything. Every such install
goes through :func:`install`, which

- writes one line to the terminal, even while pytest captures output, before it starts: what, why (which tests)
  and the exact command (``amqp_async tests: installing rabbitmq-server for the RabbitMQ interop tests:
  apt-get install -y --no-install-recommends rabbitmq-server``), and lists it again in the run's summary;
- with ``AMQP_ASYNC_TEST_NO_INSTALL=1`` (or ``true``/``yes``) in the environment installs nothing: the tests that
  need it are *skipped*, with the reason (what is missing, and the command that would install it), shown by
  ``-ra`` in the summary.

Nothing is installed when what is needed is already there.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from collections.abc import Callable, Sequence
from typing import Any

import pytest

try:
    import terminal
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests import terminal

__all__ = [
    "NO_INSTALL",
    "InstallFailed",
    "announce",
    "install",
    "installed_this_run",
    "installs_allowed",
    "record",
]

#: The environment variable that turns installs off (the tests that need them are skipped instead).
NO_INSTALL = "AMQP_ASYNC_TEST_NO_INSTALL"

_config: pytest.Config | None = None
_installed: list[str] = []


class InstallFailed(Exception):
    """The install ran and failed; the message says what failed, with the command's output."""


def configure(config: pytest.Config) -> None:
    """Called by tests/conftest.py: the session's config, for writing to the terminal past the output capture."""
    global _config
    _config = config


def installs_allowed() -> bool:
    """False when ``AMQP_ASYNC_TEST_NO_INSTALL`` says not to install anything."""
    return os.environ.get(NO_INSTALL, "").strip().lower() not in ("1", "true", "yes", "on")


def installed_this_run() -> list[str]:
    """What was installed (or tried) during this run, one line each: for the summary."""
    return list(_installed)


def record(lines: Sequence[str]) -> None:
    """Add to :func:`installed_this_run` what another process of the run installed (a pytest-xdist worker)."""
    _installed.extend(lines)


def announce(line: str) -> None:
    """Write ``line`` to the terminal now, even while pytest captures the output (stderr outside pytest)."""
    terminal.write_lines(_config, [line], yellow=True, bold=True)


def install(
    what: str,
    why: str,
    command: Sequence[str],
    *,
    run: Callable[[], Any] | None = None,
) -> Any:
    """Install ``what`` (needed by ``why``) with ``command``, saying so first; or skip when installs are off.

    Args:
        what: the thing installed, as a reader knows it (``rabbitmq-server``, ``Java 17``).
        why: the tests that need it (``the RabbitMQ interop tests``).
        command: the command that installs it, as shown to the reader (and run, unless ``run`` is given).
        run: runs the install itself (for installs with retries or locks); its result is returned. Without it,
            ``command`` runs with its output captured, and a non-zero exit raises :class:`InstallFailed`.

    Raises:
        pytest.skip.Exception: installs are off (``AMQP_ASYNC_TEST_NO_INSTALL``); the reason names what is
            missing and the command that would install it.
        InstallFailed: ``command`` failed.
    """
    shown = shlex.join(command)
    if not installs_allowed():
        pytest.skip(f"{what} is missing and {NO_INSTALL} is set: {why} skipped (to install it: {shown})")
    announce(f"amqp_async tests: installing {what} for {why}: {shown} (set {NO_INSTALL}=1 to skip them instead)")
    _installed.append(f"{what} ({shown}) for {why}")
    if run is not None:
        return run()
    environment = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    result = subprocess.run(list(command), capture_output=True, text=True, env=environment, timeout=900, check=False)
    if result.returncode != 0:
        output = (result.stderr or result.stdout).strip().splitlines()[-25:]
        raise InstallFailed(f"`{shown}` failed (exit {result.returncode}):\n" + "\n".join(output))
    return result
