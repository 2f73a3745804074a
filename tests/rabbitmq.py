"""A private RabbitMQ 3.10 node (with its AMQP 1.0 plugin) for interop tests: the session fixture `rabbitmq_broker`.

tests/conftest.py registers it for every test file: a test asks for it by name (a test file must not import it:
the file would get a fixture of its own, and a node of its own)::

    def test_something(rabbitmq_broker):
        rabbitmq_broker.url  # "amqp://guest:guest@127.0.0.1:PORT"
        rabbitmq_broker.port  # PORT
        rabbitmq_broker.ctl("list_queues", "name")  # rabbitmqctl against OUR node, returns stdout
        rabbitmq_broker.queue_depth("q")  # messages ready + unacknowledged, None if no such queue

How it works
============

1. **Install** (once per machine; idempotent). If ``rabbitmq-server`` is missing, the fixture runs, as root and
   under an exclusive file lock (``/tmp/amqp_async-rabbitmq-install.lock``, so two test runs never race),
   ``DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends rabbitmq-server``; only when that
   fails (stale or missing package lists) does it run ``apt-get update`` and try once more. apt waits up to
   120 s for the dpkg lock instead of failing at once.

   The package's postinst starts the *system* service (``invoke-rc.d rabbitmq-server start || exit 1``). We prevent
   that with a ``/usr/sbin/policy-rc.d`` that exits 101 ("action forbidden"), created for the duration of the
   install and removed afterwards (a policy-rc.d that already existed, as in most container images, is left as it
   is). Why prevent rather than let it start: the system node would bind 0.0.0.0:5672 and :25672, and when another
   RabbitMQ already listens on 5672 (some machines have one) the init script fails, the postinst exits 1 and dpkg
   leaves the package half-configured: the install "fails" for a reason that has nothing to do with us. We also
   must never leave a stray service running on a CI machine. With the service start forbidden, the install
   behaves the same on every machine and the only node we run is our own.

   The install is announced on the terminal before it starts; with ``AMQP_ASYNC_TEST_NO_INSTALL=1`` nothing is
   installed and the RabbitMQ tests are skipped, saying so (tests/installs.py).

   When the install is impossible (not root, no apt-get, apt fails), every RabbitMQ test is *skipped* with the
   full apt error in the reason (shown by ``-ra`` in the summary) and a `pytest.PytestWarning` is emitted too.
   Once installed, a node that does not start is an *error*, never a skip.

2. **A private node**, never the system one and never one that may already listen on 5672. Everything lives in a
   fresh temporary directory ``D``:

   * ports: free ports (bound to port 0 and released) for AMQP (``RABBITMQ_NODE_PORT``, on 127.0.0.1 only), for
     Erlang distribution (``RABBITMQ_DIST_PORT``) and for a *private epmd* (``ERL_EPMD_PORT``, honoured by the
     node, by the epmd it starts and by rabbitmqctl): we neither depend on nor register with a system epmd on 4369,
     so the node is invisible to another RabbitMQ on the machine;
   * node name ``amqpasync-<amqp port>@localhost``;
   * ``HOME=D/home`` with our own ``.erlang.cookie`` (mode 0400), passed to the node *and* to every rabbitmqctl:
     they share the cookie, and root's ``~/.erlang.cookie`` (or the system node's) is never read or written;
   * ``RABBITMQ_MNESIA_BASE``, ``RABBITMQ_LOG_BASE``, ``RABBITMQ_CONFIG_FILE`` (``D/rabbitmq.conf``: the
     listener, ``loopback_users.guest = true`` (the default: guest/guest may log in from 127.0.0.1 only),
     ``disk_free_limit.absolute = 1MB`` so a nearly full CI disk does not raise a disk alarm that would silently
     withhold credit from senders), ``max_message_size = 536870912`` (512 MiB, the largest RabbitMQ takes; its
     default is 128 MiB), ``RABBITMQ_ADVANCED_CONFIG_FILE``, ``RABBITMQ_CONF_ENV_FILE`` (empty: the
     system ``/etc/rabbitmq/rabbitmq-env.conf`` is not read), ``RABBITMQ_PID_FILE`` and
     ``RABBITMQ_ENABLED_PLUGINS_FILE`` containing ``[rabbitmq_amqp1_0].`` — the plugin is on from the first boot,
     so no ``rabbitmq-plugins`` call against the running node is needed. The AMQP 1.0 plugin shares the AMQP
     listener (it detects the protocol header), so there is only the one AMQP port.

   The node runs in the *foreground* as a subprocess we own (``/usr/lib/rabbitmq/bin/rabbitmq-server``, the
   upstream script, not Debian's ``/usr/sbin`` wrapper that switches to the ``rabbitmq`` user and writes to
   ``/var/log/rabbitmq``), in its own process group, output in ``D/log/console.log``. Readiness:
   ``rabbitmqctl -n NODE await_startup`` is retried until the node is up (at most 120 s; the subprocess dying
   fails at once with the log's tail), then a TCP connection to the AMQP port must answer the AMQP 1.0 SASL
   header with the same header: the 1.0 plugin is really serving. A failed start (e.g. a port taken between our
   probe and the node's bind) is retried up to 3 times with new ports.

3. **Teardown**: ``rabbitmqctl -n NODE stop``, wait up to 30 s for the process to end, else SIGKILL its process
   group; ``epmd -kill`` on our private epmd port (the epmd daemon detaches from the group); remove ``D``.

Timings measured on a 2-core Debian 12 container (RabbitMQ 3.10.8, Erlang 25.2.3): install (apt-get install of
rabbitmq-server and its Erlang dependencies, downloaded from deb.debian.org, package lists already present): 11 s;
node start to ready (boot + await_startup + AMQP 1.0 probe): 5 to 7 s; teardown (rabbitmqctl stop) 1.6 s; each
rabbitmqctl call 0.6 to 1 s (an Erlang VM starts every time, so tests call it sparingly, off the event loop).
The node's ``install_seconds`` and ``start_seconds`` record what this run took.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

try:
    import installs
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests import installs

__all__ = ["RabbitMQNode", "RabbitMQUnavailable", "ensure_installed", "rabbitmq_broker", "start_node"]

#: Where the Debian package puts the upstream scripts (the /usr/sbin ones are wrappers that switch user).
SCRIPTS_DIR = Path("/usr/lib/rabbitmq/bin")
INSTALL_LOCK = Path(tempfile.gettempdir()) / "amqp_async-rabbitmq-install.lock"
POLICY_RC_D = Path("/usr/sbin/policy-rc.d")
START_TIMEOUT = 120.0
STOP_TIMEOUT = 30.0
CTL_TIMEOUT = 60.0
AMQP10_SASL_HEADER = b"AMQP\x03\x01\x00\x00"


class RabbitMQUnavailable(Exception):
    """RabbitMQ is not installed and cannot be installed here (the reason is the message)."""


# ---------------------------------------------------------------------------------------------------------------
# installation


def _installed() -> bool:
    return (SCRIPTS_DIR / "rabbitmq-server").exists() and (SCRIPTS_DIR / "rabbitmqctl").exists()


def _apt(*args: str, timeout: float = 900.0) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    return subprocess.run(
        ["apt-get", "-o", "DPkg::Lock::Timeout=120", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _tail(text: str, lines: int = 25) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


@contextlib.contextmanager
def _services_forbidden() -> Iterator[None]:
    """Forbid maintainer scripts to start services (policy-rc.d exit 101) for the duration of the block.

    A policy-rc.d that already exists is left alone (and not removed afterwards): it is the machine's own policy.
    """
    created = False
    if not POLICY_RC_D.exists():
        POLICY_RC_D.write_text("#!/bin/sh\n# amqp_async tests: installing rabbitmq-server, do not start it\nexit 101\n")
        POLICY_RC_D.chmod(0o755)
        created = True
    try:
        yield
    finally:
        if created:
            with contextlib.suppress(FileNotFoundError):
                POLICY_RC_D.unlink()


def ensure_installed() -> float:
    """Install the Debian package rabbitmq-server when missing; return the seconds it took (0.0 if present).

    Raises:
        RabbitMQUnavailable: it cannot be installed here; the message says why (with apt's output).
    """
    if _installed():
        return 0.0
    if os.name != "posix" or not shutil.which("apt-get"):
        raise RabbitMQUnavailable("rabbitmq-server is not installed and there is no apt-get to install it")
    if os.geteuid() != 0:
        raise RabbitMQUnavailable("rabbitmq-server is not installed and installing it needs root (apt-get)")
    command = ["apt-get", "install", "-y", "--no-install-recommends", "rabbitmq-server"]
    # said on the terminal first; skipped instead with AMQP_ASYNC_TEST_NO_INSTALL=1 (tests/installs.py)
    seconds: float = installs.install("rabbitmq-server", "the RabbitMQ interop tests", command, run=_install)
    return seconds


def _install() -> float:
    started = time.monotonic()
    with INSTALL_LOCK.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another test run may be installing right now
        if _installed():
            return time.monotonic() - started
        with _services_forbidden():
            install = ("install", "-y", "--no-install-recommends", "rabbitmq-server")
            result = _apt(*install)
            if result.returncode != 0:
                # Most often the package lists are missing or stale (404s): refresh them once and retry.
                update = _apt("update")
                if update.returncode != 0:
                    raise RabbitMQUnavailable(
                        f"apt-get install rabbitmq-server failed (exit {result.returncode}):\n{_tail(result.stderr)}"
                        f"\nand apt-get update failed (exit {update.returncode}):\n{_tail(update.stderr)}"
                    )
                result = _apt(*install)
            if result.returncode != 0:
                raise RabbitMQUnavailable(
                    f"apt-get install rabbitmq-server failed (exit {result.returncode}):\n"
                    f"{_tail(result.stderr or result.stdout)}"
                )
    if not _installed():
        raise RabbitMQUnavailable(f"apt-get installed rabbitmq-server but {SCRIPTS_DIR}/rabbitmq-server is missing")
    return time.monotonic() - started


# ---------------------------------------------------------------------------------------------------------------
# the private node


def _free_ports(count: int) -> list[int]:
    """Ports that are free now (all distinct): bound to port 0 together, then released."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


@dataclass
class RabbitMQNode:
    """A RabbitMQ node of our own: its ports, name, files, and the means to talk to it with rabbitmqctl."""

    port: int
    dist_port: int
    epmd_port: int
    nodename: str
    base: Path
    process: subprocess.Popen[bytes] | None = None
    env: dict[str, str] = field(default_factory=dict)
    start_seconds: float = 0.0
    install_seconds: float = 0.0

    user = "guest"
    password = "guest"
    host = "127.0.0.1"

    @property
    def url(self) -> str:
        return f"amqp://{self.user}:{self.password}@{self.host}:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.base / "log" / "console.log"

    def log_tail(self, lines: int = 40) -> str:
        try:
            return _tail(self.log_path.read_text(errors="replace"), lines)
        except OSError as exc:
            return f"(no log: {exc})"

    # --- rabbitmqctl ---------------------------------------------------------------------------------------

    def _run_ctl(self, *args: str, timeout: float = CTL_TIMEOUT) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(SCRIPTS_DIR / "rabbitmqctl"), "-n", self.nodename, *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def ctl(self, *args: str, timeout: float = CTL_TIMEOUT) -> str:
        """Run ``rabbitmqctl -n NODE ARGS...`` against this node and return its stdout (raise on failure)."""
        result = self._run_ctl(*args, timeout=timeout)
        if result.returncode != 0:
            raise RuntimeError(
                f"rabbitmqctl {' '.join(args)} failed (exit {result.returncode}):\n{result.stdout}{result.stderr}"
            )
        return result.stdout

    def queues(self) -> dict[str, tuple[int, int]]:
        """Every queue of the default vhost: name -> (messages ready, messages unacknowledged)."""
        out = self.ctl("list_queues", "-q", "--no-table-headers", "name", "messages_ready", "messages_unacknowledged")
        result = {}
        for line in out.splitlines():
            parts = line.split("\t")
            if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit():
                result[parts[0]] = (int(parts[1]), int(parts[2]))
        return result

    def queue_depth(self, name: str) -> int | None:
        """Messages ready plus unacknowledged in queue ``name``; None when the queue does not exist."""
        counts = self.queues().get(name)
        return None if counts is None else counts[0] + counts[1]

    def wait_queue_depth(self, name: str, expected: int | None, timeout: float = 15.0) -> int | None:
        """Poll `queue_depth` until it equals ``expected`` (or the timeout passes); return the last value seen."""
        deadline = time.monotonic() + timeout
        while True:
            depth = self.queue_depth(name)
            if depth == expected or time.monotonic() >= deadline:
                return depth
            time.sleep(0.2)

    # --- lifecycle -----------------------------------------------------------------------------------------

    def _write_files(self) -> None:
        home = self.base / "home"
        for sub in ("home", "mnesia", "log"):
            (self.base / sub).mkdir(parents=True, exist_ok=True)
        cookie = home / ".erlang.cookie"
        cookie.write_text(secrets.token_hex(16).upper())
        cookie.chmod(0o400)
        (self.base / "enabled_plugins").write_text("[rabbitmq_amqp1_0].\n")
        (self.base / "rabbitmq-env.conf").write_text("")
        (self.base / "rabbitmq.conf").write_text(
            f"listeners.tcp.default = 127.0.0.1:{self.port}\n"
            "loopback_users.guest = true\n"
            "disk_free_limit.absolute = 1MB\n"
            # RabbitMQ's largest (its default is 128 MiB): the streaming tests send 512 MiB (test_streaming_memory)
            "max_message_size = 536870912\n"
            "log.file.level = info\n"
        )
        self.env = {
            **{key: value for key, value in os.environ.items() if not key.startswith(("RABBITMQ_", "ERL_"))},
            "HOME": str(home),
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
            "ERL_EPMD_PORT": str(self.epmd_port),
            "ERL_EPMD_ADDRESS": "127.0.0.1",
            # Erlang distribution on loopback only (it listens on every interface by default).
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "-kernel inet_dist_use_interface {127,0,0,1}",
            "RABBITMQ_NODENAME": self.nodename,
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "RABBITMQ_MNESIA_BASE": str(self.base / "mnesia"),
            "RABBITMQ_LOG_BASE": str(self.base / "log"),
            "RABBITMQ_CONFIG_FILE": str(self.base / "rabbitmq.conf"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(self.base / "advanced.config"),
            "RABBITMQ_CONF_ENV_FILE": str(self.base / "rabbitmq-env.conf"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.base / "enabled_plugins"),
            "RABBITMQ_PID_FILE": str(self.base / "rabbitmq.pid"),
        }

    def start(self, timeout: float = START_TIMEOUT) -> None:
        """Boot the node and wait until it serves AMQP 1.0 (raise RuntimeError with the log's tail if not)."""
        self._write_files()
        started = time.monotonic()
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                [str(SCRIPTS_DIR / "rabbitmq-server")],
                env=self.env,
                cwd=self.base,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: teardown can kill erl and its helpers
            )
        deadline = started + timeout
        last = ""
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"rabbitmq-server {self.nodename} exited with {self.process.returncode} while starting:\n"
                    f"{self.log_tail()}"
                )
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RuntimeError(
                    f"rabbitmq-server {self.nodename} not ready after {timeout:.0f} s: {last}\n{self.log_tail()}"
                )
            try:
                result = self._run_ctl("await_startup", "--timeout", "10", timeout=min(30.0, remaining + 1))
            except subprocess.TimeoutExpired:
                last = "rabbitmqctl await_startup timed out"
                continue
            if result.returncode == 0:
                break
            last = (result.stdout + result.stderr).strip()
            time.sleep(0.5)
        self._probe_amqp10(deadline)
        self.start_seconds = time.monotonic() - started

    def _probe_amqp10(self, deadline: float) -> None:
        """The AMQP port answers the AMQP 1.0 SASL protocol header with the same header (the plugin is on)."""
        while True:
            try:
                with socket.create_connection((self.host, self.port), timeout=5) as sock:
                    sock.sendall(AMQP10_SASL_HEADER)
                    answer = b""
                    while len(answer) < 8:
                        chunk = sock.recv(8 - len(answer))
                        if not chunk:
                            break
                        answer += chunk
                if answer == AMQP10_SASL_HEADER:
                    return
                problem = f"answered {answer!r} to the AMQP 1.0 SASL header (is rabbitmq_amqp1_0 enabled?)"
            except OSError as exc:
                problem = f"connect to {self.host}:{self.port} failed: {exc}"
            if time.monotonic() >= deadline:
                raise RuntimeError(f"rabbitmq node {self.nodename}: {problem}\n{self.log_tail()}")
            time.sleep(0.2)

    def stop(self) -> None:
        """Stop the node (rabbitmqctl stop, then SIGKILL if needed) and its private epmd. Idempotent."""
        process = self.process
        if process is not None and process.poll() is None:
            with contextlib.suppress(subprocess.TimeoutExpired, OSError):
                self._run_ctl("stop", timeout=STOP_TIMEOUT)
            try:
                process.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)
        if process is not None:
            # erl's helpers (erl_child_setup, inet_gethost) share the group; nothing of ours may outlive the node.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
        epmd = shutil.which("epmd") or next(iter(sorted(Path("/usr/lib/erlang").glob("erts-*/bin/epmd"))), None)
        if epmd is not None and self.env:
            with contextlib.suppress(subprocess.TimeoutExpired, OSError):
                subprocess.run(
                    [str(epmd), "-port", str(self.epmd_port), "-kill"],
                    env=self.env,
                    capture_output=True,
                    timeout=10,
                    check=False,
                )
        self.process = None


def start_node(attempts: int = 3) -> RabbitMQNode:
    """Start a private node on fresh ports (retried with new ports when a start fails); the caller stops it."""
    errors = []
    for _ in range(attempts):
        port, dist_port, epmd_port = _free_ports(3)
        base = Path(tempfile.mkdtemp(prefix=f"amqp_async-rabbitmq-{port}-"))
        node = RabbitMQNode(
            port=port, dist_port=dist_port, epmd_port=epmd_port, nodename=f"amqpasync-{port}@localhost", base=base
        )
        try:
            node.start()
            return node
        except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
            errors.append(str(exc))
            node.stop()
            shutil.rmtree(base, ignore_errors=True)
    raise RuntimeError("could not start a private RabbitMQ node:\n\n" + "\n\n".join(errors))


@pytest.fixture(scope="session")
def rabbitmq_broker() -> Iterator[RabbitMQNode]:
    """A private RabbitMQ 3.10 node with AMQP 1.0 for the whole session (installed first if needed).

    Skips (loudly) when RabbitMQ cannot be installed; errors when it is installed but does not start.
    """
    try:
        install_seconds = ensure_installed()
    except (RabbitMQUnavailable, subprocess.SubprocessError, OSError) as exc:
        reason = f"RabbitMQ interop tests SKIPPED: rabbitmq-server is unavailable: {exc}"
        warnings.warn(pytest.PytestWarning(reason), stacklevel=1)
        print(f"\n*** {reason}\n", file=sys.stderr)
        pytest.skip(reason)
    node = start_node()
    node.install_seconds = install_seconds
    try:
        yield node
    finally:
        node.stop()
        shutil.rmtree(node.base, ignore_errors=True)
