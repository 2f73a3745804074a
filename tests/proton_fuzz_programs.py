"""proton-style programs for the network fuzz of the callback API (``tests/test_network_fuzz_proton.py``).

Each program is written once against proton's API and runs on either implementation: it takes an :class:`Api`
(``amqp_async.proton`` or python-qpid-proton's ``proton``, with their ``reactor``, ``handlers`` and ``utils``
modules), the URL of its peer and a :class:`Run` where it leaves its container (so that a harness can stop one that
hangs) and what happened. It returns how it ended ("completed", or the last error its handler saw) or raises what
the API raised.

They are the programs proton's examples are made of, with the bounds a program facing an unreliable peer sets:
``heartbeat`` (the idle timeout: a silent peer is given up), ``reconnect=False``, and, for the blocking API, the
connection's ``timeout``. Link names, the container id and the messages are fixed, so that a session recorded with
a real broker answers a replaying program's attaches:

* ``send-receive`` (Container): a sender and a receiver on one queue, one message there and back, accepted.
* ``large`` (Container, no SASL, max-frame-size 512): a message of several transfer frames there and back.
* ``request`` (Container, proton's ``client.py``): a dynamic receiver for the replies, a request to ``requests``
  with ``reply_to`` set, the reply awaited.
* ``serve`` (Container, proton's ``server.py``): a request taken from ``requests`` and answered on the anonymous
  relay, at its ``reply_to``.
* ``transaction`` (Container, proton's ``tx_send.py``): a transaction declared, two messages sent in it, committed.
* ``blocking-send`` (BlockingConnection, SASL PLAIN): two messages sent, each waiting for its outcome.
* ``blocking-receive`` (BlockingConnection): two messages received with a prefetch of 2, accepted.
* ``blocking-request`` (BlockingConnection): a dynamic receiver, a request, its reply (``SyncRequestResponse`` made by
  hand, with fixed link names).
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["BLOCKING", "PROGRAMS", "Api", "Run", "api"]

#: The idle timeout the programs ask for (seconds): a peer silent for this long is given up.
HEARTBEAT = 0.5
#: The blocking programs' timeout for each blocking call (seconds).
BLOCKING_TIMEOUT = 1.5
CONTAINER_ID = "fuzz-program"
USER, PASSWORD = "fuzz", "secret"
LARGE_BODY = bytes(range(256)) * 12


@dataclass
class Api:
    """One implementation of proton's Python API."""

    name: str
    core: Any
    reactor: Any
    handlers: Any
    utils: Any


def api(name: str) -> Api:
    """``"ours"`` (amqp_async.proton) or ``"proton"`` (python-qpid-proton)."""
    package = "amqp_async.proton" if name == "ours" else "proton"
    modules = [importlib.import_module(f"{package}{suffix}") for suffix in ("", ".reactor", ".handlers", ".utils")]
    return Api(name, *modules)


@dataclass
class Run:
    """What one run of a program left: its container (to stop it), the connections the blocking API made (to
    close them), and the events its handler saw."""

    container: Any = None
    blocking: list[Any] = field(default_factory=list)
    events: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def stop(self) -> None:
        """Stop a program that did not end by itself (from another thread)."""
        container = self.container
        if container is None:
            return
        if hasattr(container, "call_threadsafe"):  # ours: stop() belongs to the container's thread
            container.call_threadsafe(container.stop)
        else:  # proton's is not thread-safe; it is what there is
            container.stop()


def _condition(endpoint: Any) -> str:
    condition = (
        None
        if endpoint is None
        else getattr(endpoint, "remote_condition", None) or getattr(endpoint, "condition", None)
    )
    return "" if condition is None else f" {condition.name}"


def _handler_base(api: Api, run: Run) -> type:
    """A MessagingHandler that records the errors it sees (and otherwise does what proton's does)."""

    class Recording(api.handlers.MessagingHandler):  # type: ignore[misc, name-defined]
        done = False

        def record(self, text: str) -> None:
            run.events.append(text)

        def on_transport_error(self, event: Any) -> None:
            self.record(f"transport_error{_condition(event.transport)}")
            super().on_transport_error(event)

        def on_connection_error(self, event: Any) -> None:
            self.record(f"connection_error{_condition(event.connection)}")
            super().on_connection_error(event)

        def on_session_error(self, event: Any) -> None:
            self.record(f"session_error{_condition(event.session)}")
            super().on_session_error(event)

        def on_link_error(self, event: Any) -> None:
            self.record(f"link_error{_condition(event.link)}")
            super().on_link_error(event)

        def on_disconnected(self, event: Any) -> None:
            self.record("disconnected")

        def on_rejected(self, event: Any) -> None:
            self.record("rejected")

        def on_released(self, event: Any) -> None:
            self.record("released")

        def finish(self, event: Any) -> None:
            self.done = True
            self.record("completed")
            event.connection.close()

    return Recording


def _run_container(api: Api, run: Run, handler: Any) -> str:
    container = api.reactor.Container(handler)
    container.container_id = CONTAINER_ID
    run.container = container
    container.run()
    return _outcome(run)


def _outcome(run: Run) -> str:
    if "completed" in run.events:
        return "completed"
    errors = [event for event in run.events if event not in ("disconnected", "rejected", "released")]
    return errors[-1] if errors else (run.events[-1] if run.events else "ended")


def _connect(container: Any, url: str, handler: Any, **options: Any) -> Any:
    return container.connect(url, handler=handler, heartbeat=HEARTBEAT, reconnect=False, **options)


# --- Container programs -----------------------------------------------------------------------------------------


def send_receive(api: Api, url: str, run: Run) -> str:
    base = _handler_base(api, run)

    class Program(base):  # type: ignore[misc, valid-type]
        sent = False

        def on_start(self, event: Any) -> None:
            conn = _connect(event.container, url, self)
            event.container.create_sender(conn, "fuzz-queue", name="fuzz-sender")
            event.container.create_receiver(conn, "fuzz-queue", name="fuzz-receiver")

        def on_sendable(self, event: Any) -> None:
            if not self.sent:
                self.sent = True
                event.sender.send(api.core.Message(body="hello", id="fuzz-1"))

        def on_message(self, event: Any) -> None:
            if event.message.body == "hello":
                self.finish(event)

    return _run_container(api, run, Program())


def large(api: Api, url: str, run: Run) -> str:
    base = _handler_base(api, run)

    class Program(base):  # type: ignore[misc, valid-type]
        sent = False

        def on_start(self, event: Any) -> None:
            conn = _connect(event.container, url, self, sasl_enabled=False, max_frame_size=512)
            event.container.create_sender(conn, "fuzz-large", name="large-sender")
            event.container.create_receiver(conn, "fuzz-large", name="large-receiver")

        def on_sendable(self, event: Any) -> None:
            if not self.sent:
                self.sent = True
                event.sender.send(api.core.Message(body=LARGE_BODY))

        def on_message(self, event: Any) -> None:
            if event.message.body == LARGE_BODY:
                self.finish(event)

    return _run_container(api, run, Program())


def request(api: Api, url: str, run: Run) -> str:
    base = _handler_base(api, run)

    class Program(base):  # type: ignore[misc, valid-type]
        def on_start(self, event: Any) -> None:
            conn = _connect(event.container, url, self)
            self.sender = event.container.create_sender(conn, "requests", name="request-sender")
            self.receiver = event.container.create_receiver(conn, None, dynamic=True, name="reply-receiver")

        def on_link_opened(self, event: Any) -> None:
            if event.receiver is not None and event.receiver.name == "reply-receiver":  # proton: no identity
                request = api.core.Message(
                    body="ping", reply_to=self.receiver.remote_source.address, correlation_id="fuzz-request"
                )
                self.sender.send(request)

        def on_message(self, event: Any) -> None:
            if event.message.correlation_id == "fuzz-request":
                self.finish(event)

    return _run_container(api, run, Program())


def serve(api: Api, url: str, run: Run) -> str:
    base = _handler_base(api, run)

    class Program(base):  # type: ignore[misc, valid-type]
        answered = False

        def on_start(self, event: Any) -> None:
            conn = _connect(event.container, url, self)
            event.container.create_receiver(conn, "requests", name="server-receiver")
            self.relay = event.container.create_sender(conn, None, name="server-relay")

        def on_message(self, event: Any) -> None:
            request = event.message
            if self.answered or request.reply_to is None:
                return
            self.answered = True
            reply = api.core.Message(
                address=request.reply_to, body=str(request.body).upper(), correlation_id=request.correlation_id
            )
            self.relay.send(reply)

        def on_accepted(self, event: Any) -> None:
            if event.sender.name == "server-relay":
                self.finish(event)

    return _run_container(api, run, Program())


def transaction(api: Api, url: str, run: Run) -> str:
    base = _handler_base(api, run)

    class Program(base, api.handlers.TransactionHandler):  # type: ignore[misc, valid-type, name-defined]
        def on_start(self, event: Any) -> None:
            self.container = event.container
            self.conn = _connect(event.container, url, self)
            self.sender = event.container.create_sender(self.conn, "fuzz-tx", name="tx-sender")
            event.container.declare_transaction(self.conn, handler=self)

        def on_transaction_declared(self, event: Any) -> None:
            for index in range(2):
                event.transaction.send(self.sender, api.core.Message(body=f"tx-{index}"))
            event.transaction.commit()

        def on_transaction_committed(self, event: Any) -> None:
            self.finish(event)

        def on_transaction_declare_failed(self, event: Any) -> None:
            self.record("declare_failed")
            event.connection.close()

        def on_transaction_commit_failed(self, event: Any) -> None:
            self.record("commit_failed")
            event.connection.close()

        def on_transaction_aborted(self, event: Any) -> None:
            self.record("aborted")
            event.connection.close()

    return _run_container(api, run, Program())


# --- BlockingConnection programs ---------------------------------------------------------------------------------


def _blocking(api: Api, url: str, run: Run, **options: Any) -> Any:
    container = api.reactor.Container()
    container.container_id = CONTAINER_ID
    run.container = container
    connection = api.utils.BlockingConnection(
        url, timeout=BLOCKING_TIMEOUT, heartbeat=HEARTBEAT, container=container, **options
    )
    run.blocking.append(connection)
    return connection


def blocking_send(api: Api, url: str, run: Run) -> str:
    connection = _blocking(api, url, run, user=USER, password=PASSWORD, allowed_mechs="PLAIN")
    try:
        sender = connection.create_sender("fuzz-blocking", name="blocking-sender")
        for index in range(2):
            sender.send(api.core.Message(body=f"blocking-{index}"))
    finally:
        connection.close()
    return "completed"


def blocking_receive(api: Api, url: str, run: Run) -> str:
    connection = _blocking(api, url, run)
    try:
        receiver = connection.create_receiver("fuzz-preloaded", credit=2, name="blocking-receiver")
        for _ in range(2):
            receiver.receive()
            receiver.accept()
    finally:
        connection.close()
    return "completed"


def blocking_request(api: Api, url: str, run: Run) -> str:
    connection = _blocking(api, url, run)
    try:
        replies = connection.create_receiver(None, dynamic=True, credit=1, name="blocking-replies")
        sender = connection.create_sender("requests", name="blocking-requests")
        sender.send(
            api.core.Message(body="ping", reply_to=replies.link.remote_source.address, correlation_id="fuzz-blocking")
        )
        reply = replies.receive()
        replies.accept()
        if reply.correlation_id != "fuzz-blocking":
            return "wrong reply"
    finally:
        connection.close()
    return "completed"


PROGRAMS: dict[str, Callable[[Api, str, Run], str]] = {
    "send-receive": send_receive,
    "large": large,
    "request": request,
    "serve": serve,
    "transaction": transaction,
    "blocking-send": blocking_send,
    "blocking-receive": blocking_receive,
    "blocking-request": blocking_request,
}
#: The programs on the blocking API.
BLOCKING = frozenset(name for name in PROGRAMS if name.startswith("blocking-"))
