"""python-qpid-proton as the other end of large and streamed messages (run as a subprocess by
tests/test_streaming_interop.py). One line of JSON per event on stdout; a listener prints ``listening on PORT`` first.

    python proton_stream_peer.py listen-receive COUNT
        listen; take messages until COUNT complete ones came; for each delivery print
        {"aborted": true} or {"size": N, "sha256": H, "subject": S}
    python proton_stream_peer.py listen-send-aborted SIZE [head]
        listen; to the first receiver that attaches with credit, send SIZE bytes of a message and abort it
        (§2.6.14), then a complete message of SIZE bytes whose body is ``bytes(range(256))`` repeated; print
        {"sent": "aborted"} and {"sent": "complete", "sha256": H}. With ``head``, the aborted message's
        application properties take 100 KB and it is aborted inside them, before its body starts
    python proton_stream_peer.py listen-send-endless
        listen; to the first receiver that attaches with credit, send a message that never ends: 1 MiB more of it
        whenever less than 4 MiB of it waits to go, until the receiver detaches the link; then print
        {"error": CONDITION, "description": ..., "streamed": BYTES} (BYTES: what was given to the link)
    python proton_stream_peer.py listen-detach-on-message
        listen; take each message whole, and instead of settling it detach its link with
        amqp:link:message-size-exceeded ("message larger than 1000 bytes": a limit the attach did not announce);
        print {"detached": SIZE} per message (SIZE: its encoded bytes)
    python proton_stream_peer.py send URL ADDRESS SIZE
        connect; send one message whose body is SIZE bytes (``bytes(range(256))`` repeated; one data section);
        print {"outcome": ..., "sha256": H} or {"error": CONDITION, "description": ...} when the link fails
"""

from __future__ import annotations

import hashlib
import json
import socket
import sys
from typing import Any

from proton import Condition, Delivery, Message
from proton.handlers import MessagingHandler
from proton.reactor import Container


def say(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


def free_port() -> int:
    """A port free now (proton's acceptor does not say which port 0 gave it)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def pattern(size: int) -> bytes:
    block = bytes(range(256))
    return (block * (size // 256 + 1))[:size]


class _Later:
    """A timer task (``Container.schedule``) that calls a function."""

    def __init__(self, function: Any) -> None:
        self.function = function

    def on_timer_task(self, event: Any) -> None:
        self.function()


class ListenReceive(MessagingHandler):  # type: ignore[misc]
    def __init__(self, count: int) -> None:
        super().__init__(auto_accept=True)
        self.count = count
        self.received = 0

    def on_start(self, event: Any) -> None:
        port = free_port()
        self.acceptor = event.container.listen(f"127.0.0.1:{port}")
        print(f"listening on {port}", flush=True)

    def on_aborted(self, event: Any) -> None:
        say(aborted=True)

    def on_message(self, event: Any) -> None:
        body = event.message.body
        data = bytes(body) if body is not None else b""
        say(size=len(data), sha256=hashlib.sha256(data).hexdigest(), subject=event.message.subject)
        self.received += 1
        if self.received >= self.count:
            event.connection.close()
            self.acceptor.close()


class ListenSendAborted(MessagingHandler):  # type: ignore[misc]
    def __init__(self, size: int, in_head: bool = False) -> None:
        super().__init__()
        self.size = size
        self.in_head = in_head
        self.done = False

    def on_start(self, event: Any) -> None:
        port = free_port()
        self.acceptor = event.container.listen(f"127.0.0.1:{port}")
        print(f"listening on {port}", flush=True)

    def on_sendable(self, event: Any) -> None:
        if self.done:
            return
        self.done = True
        sender = event.sender
        # A delivery of several frames, never completed: half of it is given, the rest never; a second later (its
        # first frames are out: the receiver has it) it is aborted (§2.6.14), and a complete one follows.
        partial = sender.delivery(b"aborted-1")
        properties = {"padding": "p" * 100_000} if self.in_head else None
        message = Message(body=pattern(self.size), subject="to be aborted", properties=properties, inferred=True)
        encoded = message.encode()
        sender.stream(encoded[: 20_000 if self.in_head else len(encoded) // 2])
        event.container.schedule(1.0, _Later(lambda: self.abort_then_send(sender, partial)))

    def abort_then_send(self, sender: Any, partial: Any) -> None:
        partial.abort()
        say(sent="aborted")
        body = pattern(self.size)
        sender.send(Message(body=body, subject="complete", inferred=True))
        say(sent="complete", sha256=hashlib.sha256(body).hexdigest())

    def on_settled(self, event: Any) -> None:
        if event.delivery.remote_state == Delivery.ACCEPTED:
            say(outcome="accepted")
            event.connection.close()
            self.acceptor.close()


class ListenDetachOnMessage(MessagingHandler):  # type: ignore[misc]
    """A receiver with a limit it did not announce: it refuses each message by detaching the link (§2.7.3)."""

    def __init__(self) -> None:
        super().__init__(auto_accept=False)

    def on_start(self, event: Any) -> None:
        port = free_port()
        self.acceptor = event.container.listen(f"127.0.0.1:{port}")
        print(f"listening on {port}", flush=True)

    def on_message(self, event: Any) -> None:
        say(detached=len(event.message.encode()))
        link = event.receiver
        link.condition = Condition("amqp:link:message-size-exceeded", "message larger than 1000 bytes")
        link.close()


class ListenSendEndless(MessagingHandler):  # type: ignore[misc]
    """A hostile sender: one delivery, more=true on every frame, for as long as the receiver takes it."""

    CHUNK = 1 << 20

    def __init__(self) -> None:
        super().__init__()
        self.sender: Any = None
        self.streamed = 0
        self.ended = False

    def on_start(self, event: Any) -> None:
        port = free_port()
        self.container = event.container
        self.acceptor = event.container.listen(f"127.0.0.1:{port}")
        print(f"listening on {port}", flush=True)

    def on_sendable(self, event: Any) -> None:
        if self.sender is None:
            self.sender = event.sender
            self.delivery = self.sender.delivery(b"endless")  # its bytes never need to decode: it never ends
            self.more()

    def more(self) -> None:
        if self.ended:
            return
        # What proton holds is bounded: the delivery's bytes not yet framed (the receiver's session window decides
        # when they are) and the frames not yet written
        transport = self.sender.connection.transport
        if transport is not None and transport.pending() + self.delivery.pending < 4 * self.CHUNK:
            self.sender.stream(pattern(self.CHUNK))
            self.streamed += self.CHUNK
        self.container.schedule(0.002, _Later(self.more))

    def on_link_error(self, event: Any) -> None:  # proton's handler for a remote detach with an error
        self.on_link_closing(event)

    def on_link_closing(self, event: Any) -> None:
        if self.ended:
            return
        self.ended = True
        condition = event.link.remote_condition
        say(
            error=str(condition.name) if condition else None,
            description=condition.description if condition else None,
            streamed=self.streamed,
        )
        event.connection.close()
        self.acceptor.close()


class Send(MessagingHandler):  # type: ignore[misc]
    def __init__(self, url: str, address: str, size: int) -> None:
        super().__init__()
        self.url = url
        self.address = address
        self.size = size
        self.sent = False

    def on_start(self, event: Any) -> None:
        connection = event.container.connect(self.url, allowed_mechs="ANONYMOUS")
        event.container.create_sender(connection, self.address)

    def on_sendable(self, event: Any) -> None:
        if self.sent:
            return
        self.sent = True
        body = pattern(self.size)
        event.sender.send(Message(body=body, subject="from proton", inferred=True))
        self.digest = hashlib.sha256(body).hexdigest()

    def on_accepted(self, event: Any) -> None:
        say(outcome="accepted", sha256=self.digest)
        event.connection.close()

    def on_rejected(self, event: Any) -> None:
        condition = event.delivery.remote.condition
        say(outcome="rejected", error=str(condition.name) if condition else None)
        event.connection.close()

    def on_link_error(self, event: Any) -> None:
        condition = event.link.remote_condition
        say(error=str(condition.name), description=condition.description)
        event.connection.close()

    def on_link_closing(self, event: Any) -> None:
        condition = event.link.remote_condition
        if condition is not None:
            say(error=str(condition.name), description=condition.description)
        event.connection.close()


def main(argv: list[str]) -> None:
    mode = argv[0]
    if mode == "listen-receive":
        handler: MessagingHandler = ListenReceive(int(argv[1]))
    elif mode == "listen-send-aborted":
        handler = ListenSendAborted(int(argv[1]), in_head=argv[2:] == ["head"])
    elif mode == "listen-detach-on-message":
        handler = ListenDetachOnMessage()
    elif mode == "listen-send-endless":
        handler = ListenSendEndless()
    elif mode == "send":
        handler = Send(argv[1], argv[2], int(argv[3]))
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    Container(handler).run()


if __name__ == "__main__":
    main(sys.argv[1:])
