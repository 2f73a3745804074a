"""``amqp-async peek`` and ``receive --browse`` against peers that do not browse (amqp_async/cli/_browse.py).

A browsing receiver asks for distribution-mode copy (AMQP 1.0 §3.5.7). Before, the command trusted the peer: a
python-qpid-proton peer that answers the attach without distribution-mode (it moves the messages) and RabbitMQ
3.10, which answers with copy and moves them anyway, gave every message to ``peek``, which accepted them: the queue
was empty afterwards. Now the command refuses (exit 7, one line saying why) before it grants any credit, so no
message leaves the peer; a peer that browses (python-qpid-proton's reactor broker in tests/proton_broker.py, the
embedded broker in tests/test_cli.py) is browsed as before.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("proton", reason="python-qpid-proton is the reference peer; CI installs it")

from proton import Message as ProtonMessage
from proton.handlers import MessagingHandler

try:
    from proton_broker import ProtonBroker
    from proton_peer import proton_server
    from test_cli import cli, ok
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.proton_broker import ProtonBroker
    from tests.proton_peer import proton_server
    from tests.test_cli import cli, ok

pytest.importorskip("click", reason="the cli extra (click, rich) is in the test dependency group")

REFUSED = 7  # link or session refused


class _Mover(MessagingHandler):  # type: ignore[misc]
    """A peer whose queue holds three messages and that does not browse: it answers a receiver's attach with a
    source that has no distribution-mode (a move, §3.5.7) and sends what the credit allows."""

    def __init__(self) -> None:
        super().__init__(auto_accept=False)
        self.lock = threading.Lock()
        self.queue = ["one", "two", "three"]
        self.sent: list[str] = []
        self.attached = threading.Event()

    def on_link_opening(self, event: Any) -> None:
        link = event.link
        if link.is_sender:
            link.source.address = link.remote_source.address  # and no distribution-mode: it moves
            link.target.copy(link.remote_target)
            self.attached.set()

    def on_sendable(self, event: Any) -> None:
        sender = event.sender
        with self.lock:
            while sender.credit and self.queue:
                body = self.queue.pop(0)
                sender.send(ProtonMessage(body=body))
                self.sent.append(body)


@pytest.mark.parametrize(
    "arguments",
    [
        ["peek", "q"],
        ["receive", "q", "--browse", "--timeout", "1"],
        ["receive", "q", "--browse", "--timeout", "1", "--output-dir", "files"],
    ],
    ids=["peek", "receive-browse", "receive-browse-output-dir"],
)
def test_a_peer_that_answers_without_copy_is_refused_before_it_sends(arguments: list[str], tmp_path: Path) -> None:
    peer = _Mover()
    with proton_server(peer) as url:
        result = cli(arguments[0], "-u", url, *arguments[1:], cwd=tmp_path)
        assert peer.attached.is_set()
        time.sleep(0.2)  # a message granted credit would be on its way by now
        with peer.lock:
            sent = list(peer.sent)
    assert result.returncode == REFUSED, result.stderr
    assert sent == []  # no credit was given: every message is still on the peer (before: all three were taken)
    assert result.stdout == ""
    assert result.stderr == (
        "amqp-async: error: the peer does not browse 'q': its attach answered with no distribution-mode, not copy "
        "(AMQP 1.0 §3.5.3, §3.5.7); no message was taken (receive takes them)\n"
    )
    assert not (tmp_path / "files").exists() or not any((tmp_path / "files").iterdir())


def test_a_peer_that_browses_is_browsed_and_keeps_its_messages() -> None:
    """python-qpid-proton's reactor broker answers with copy and leaves the messages queued."""
    with ProtonBroker() as broker:
        for body in ("one", "two"):
            broker.put("q", ProtonMessage(body=body))
        peeked = ok("peek", "-u", broker.url, "q", "--timeout", "0.5", "-q")
        assert peeked.stdout.splitlines() == ["one", "two"]
        assert ok("receive", "-u", broker.url, "q", "--count", "2", "-q").stdout.splitlines() == ["one", "two"]


def test_rabbitmq_3_is_not_browsed_as_it_takes_the_messages(rabbitmq_broker: Any) -> None:
    """RabbitMQ 3.10 answers a browsing attach with distribution-mode copy, and then moves the messages."""
    address = "/queue/cli-peek"
    ok("send", "-u", rabbitmq_broker.url, address, "a", "b", "c", "-q")
    assert rabbitmq_broker.wait_queue_depth("cli-peek", 3) == 3
    result = cli("peek", "-u", rabbitmq_broker.url, address)
    assert result.returncode == REFUSED, result.stderr
    assert result.stdout == ""
    assert "the peer does not browse '/queue/cli-peek': RabbitMQ 3." in result.stderr
    assert len(result.stderr.splitlines()) == 1
    assert rabbitmq_broker.queue_depth("cli-peek") == 3  # before: 0, each message taken and accepted
    taken = ok("receive", "-u", rabbitmq_broker.url, address, "--count", "3", "--timeout", "10", "-q")
    assert taken.stdout.splitlines() == ["a", "b", "c"]
