"""Engine programs written against proton's engine API, run with either implementation on each side.

Each scenario takes two proton modules (``proton`` or ``amqp_async.proton``): side A (the client) is built from the
first, side B (the server) from the second, and the two transports are pumped against each other in memory, as
proton's own engine tests do. What each side's collector reports (the event's handler method and its context's
class), and what the program reads from the endpoints along the way, is recorded per side, so a run with real proton
on both sides is the reference for every mix.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

__all__ = ["SCENARIOS", "Side", "pump", "record", "run_scenario"]


def _module(name: str) -> ModuleType:
    return importlib.import_module(name)


def pump_once(src: Any, dst: Any, buffer_size: int = 1024) -> bool:
    """Move what ``src`` has to write into ``dst`` (proton's tests' ``pump_uni``); True when something moved."""
    pending = src.pending()
    capacity = dst.capacity()
    if capacity < 0:
        if pending < 0:
            return False
        src.close_head()
        return True
    if pending < 0:
        dst.close_tail()
    elif pending == 0 or capacity == 0:
        return False
    else:
        data = src.peek(min(capacity, buffer_size))
        dst.push(data)
        src.pop(len(data))
    return True


def pump(a: Any, b: Any, buffer_size: int = 1024) -> None:
    """Pump both ways until neither transport has anything to give."""
    while pump_once(a.transport, b.transport, buffer_size) or pump_once(b.transport, a.transport, buffer_size):
        pass


class Side:
    """One end: a connection, its transport and its collector, made with ``module``; :meth:`drain` records the
    collected events."""

    def __init__(self, name: str, module_name: str, server: bool, log: list[tuple[Any, ...]]) -> None:
        self.name = name
        self.mod = _module(module_name)
        self.log = log
        self.connection = self.mod.Connection()
        self.connection.container = f"container-{name}"
        self.collector = self.mod.Collector()
        self.connection.collect(self.collector)
        self.transport = self.mod.Transport(self.mod.Transport.SERVER) if server else self.mod.Transport()

    def bind(self) -> None:
        self.transport.bind(self.connection)

    def drain(self) -> list[Any]:
        """Record and drop the collected events; returns them."""
        events = []
        while True:
            event = self.collector.peek()
            if event is None:
                break
            events.append(event)
            context = event.context
            self.log.append((self.name, event.type.method, type(context).__name__))
            self.collector.pop()
        return events

    def note(self, what: str, *values: Any) -> None:
        """Record what the program read (compared across implementations too)."""
        self.log.append((self.name, what, *values))


def _condition(condition: Any) -> Any:
    return None if condition is None else (str(condition.name), condition.description)


def _tag(tag: Any) -> bytes:
    return tag.encode() if isinstance(tag, str) else bytes(tag)


def _open_pair(a: Side, b: Side) -> None:
    """Open the connection and one session each way; B answers what A opened."""
    a.connection.hostname = "example"
    a.bind()
    b.bind()
    a.connection.open()
    a.drain()
    pump(a, b)
    b.drain()
    mask = b.mod.Endpoint.LOCAL_UNINIT | b.mod.Endpoint.REMOTE_ACTIVE
    b.connection.open()
    b.note("remote", b.connection.remote_container, b.connection.remote_hostname, b.connection.state)
    b.drain()
    pump(a, b)
    a.drain()
    b.drain()
    a.note("remote", a.connection.remote_container, a.connection.state, b.connection.session_head(mask) is None)


def scenario_transfer(a: Side, b: Side) -> None:
    """Open, begin, attach, flow, a one-frame and a multi-frame (partial) transfer, disposition, settle, detach,
    end and close, with conditions."""
    b.transport.max_frame_size = 512  # the receiver's frames are small: a 3000-byte message comes in parts
    _open_pair(a, b)
    session = a.connection.session()
    session.open()
    sender = session.sender("sender-1")
    sender.target.address = "queue-1"
    sender.source.address = "here"
    sender.open()
    a.drain()
    pump(a, b)
    b.drain()
    mask = b.mod.Endpoint.LOCAL_UNINIT | b.mod.Endpoint.REMOTE_ACTIVE
    b_session = b.connection.session_head(mask)
    b_session.open()
    receiver = b.connection.link_head(mask)
    b.note(
        "attach", receiver.name, receiver.is_receiver, receiver.remote_target.address, receiver.remote_source.address
    )
    receiver.target.copy(receiver.remote_target)
    receiver.source.copy(receiver.remote_source)
    receiver.open()
    receiver.flow(3)
    b.note("credit", receiver.credit)
    b.drain()
    pump(a, b)
    a.drain()
    b.drain()
    a.note("credit", sender.credit, sender.state, sender.remote_target.address)
    delivery = sender.delivery(b"tag-1")
    a.note("writable", delivery.writable)
    sender.send(b"small message")
    sender.advance()
    big = sender.delivery(b"tag-2")
    sender.send(bytes(range(256)) * 12)
    sender.advance()
    a.note("after-advance", sender.credit, sender.unsettled)
    a.drain()
    partial_seen = False
    while pump_once(a.transport, b.transport, 700):
        for event in b.drain():
            d = event.delivery
            if d is not None and d.partial:
                partial_seen = True
    b.drain()
    pump(a, b)
    a.drain()
    b.drain()
    b.note("partial-seen", partial_seen)
    received = []
    while receiver.current is not None:
        current = receiver.current
        chunks = []
        while True:
            chunk = receiver.recv(1000)
            if chunk is None:
                break
            chunks.append(chunk)
        body = b"".join(bytes(chunk) for chunk in chunks)
        received.append((_tag(current.tag), len(body), hash(body), current.partial, current.settled))
        b.note("readable", current.readable)
        current.update(current.ACCEPTED)
        current.settle()
    b.note("received", received, receiver.queued, receiver.unsettled, receiver.credit)
    b.drain()
    pump(a, b)
    a.drain()
    b.drain()
    a.note("outcomes", delivery.remote_state, delivery.settled, big.remote_state, big.settled)
    delivery.settle()
    big.settle()
    a.note("unsettled", sender.unsettled)
    sender.condition = a.mod.Condition("amqp:link:detach-forced", "done with it")
    sender.close()
    a.drain()
    pump(a, b)
    b.drain()
    b.note("detached", _condition(receiver.remote_condition), receiver.state)
    receiver.close()
    b_session.close()
    b.drain()
    pump(a, b)
    a.drain()
    b.drain()
    a.note("closed", sender.state, session.state)
    session.close()
    a.connection.condition = a.mod.Condition("amqp:connection:forced", "bye")
    a.connection.close()
    a.drain()
    pump(a, b)
    b.drain()
    b.note("conn-closed", _condition(b.connection.remote_condition), b.connection.state)
    b.connection.close()
    b.drain()
    pump(a, b)
    a.drain()
    b.drain()
    a.note("end", a.connection.state, a.transport.closed, b.transport.closed)


def scenario_receiver_first(a: Side, b: Side) -> None:
    """The client receives: it attaches a receiver with credit before the server answers; the server sends
    pre-settled messages (at-most-once) and drains."""
    _open_pair(a, b)
    session = a.connection.session()
    session.open()
    receiver = session.receiver("rx")
    receiver.source.address = "topic"
    receiver.flow(2)
    receiver.open()
    a.drain()
    pump(a, b)
    b.drain()
    mask = b.mod.Endpoint.LOCAL_UNINIT | b.mod.Endpoint.REMOTE_ACTIVE
    b.connection.session_head(mask).open()
    sender = b.connection.link_head(mask)
    sender.snd_settle_mode = sender.SND_SETTLED
    sender.source.copy(sender.remote_source)
    sender.target.copy(sender.remote_target)
    sender.open()
    b.drain()
    pump(a, b)
    a.drain()
    b.drain()
    b.note("credit", sender.credit, sender.is_sender, sender.remote_source.address)
    receiver.drain(3)
    a.drain()
    pump(a, b)
    b.drain()
    b.note("drain", sender.credit, sender.drain_mode)
    b.note("drained", sender.drained())
    b.drain()
    pump(a, b)
    a.drain()
    b.drain()
    a.note("after-drain", receiver.credit, receiver.draining(), receiver.drained())
    receiver.flow(2)
    pump(a, b)
    a.drain()
    b.drain()
    for n in range(2):
        d = sender.delivery(b"m%d" % n)
        sender.send(b"payload %d" % n)
        sender.advance()
        d.settle()
    b.note("after-send", sender.credit, sender.unsettled)
    b.drain()
    pump(a, b)
    a.drain()
    b.drain()
    got = []
    while receiver.current is not None:
        current = receiver.current
        got.append((bytes(receiver.recv(100)), current.settled))
        current.settle()
    a.note("got", got, receiver.credit)
    a.connection.close()
    pump(a, b)
    b.connection.close()
    pump(a, b)
    a.drain()
    b.drain()


def scenario_refused(a: Side, b: Side) -> None:
    """The server refuses a link (attach then detach with a condition) and ends the session with one."""
    _open_pair(a, b)
    session = a.connection.session()
    session.open()
    sender = session.sender("refused")
    sender.target.address = "nowhere"
    sender.open()
    pump(a, b)
    a.drain()
    b.drain()
    mask = b.mod.Endpoint.LOCAL_UNINIT | b.mod.Endpoint.REMOTE_ACTIVE
    b_session = b.connection.session_head(mask)
    b_session.open()
    link = b.connection.link_head(mask)
    link.condition = b.mod.Condition("amqp:not-found", "no such node")
    link.close()
    b.drain()
    pump(a, b)
    a.drain()
    b.drain()
    a.note("refused", _condition(sender.remote_condition), sender.state, sender.remote_target.address)
    b_session.condition = b.mod.Condition("amqp:resource-limit-exceeded", "too many")
    b_session.close()
    pump(a, b)
    a.drain()
    b.drain()
    a.note("ended", _condition(session.remote_condition), session.state)
    sender.close()
    session.close()
    a.connection.close()
    pump(a, b)
    b.connection.close()
    pump(a, b)
    a.drain()
    b.drain()


def scenario_garbage(a: Side, b: Side) -> None:
    """The peer sends bytes that are not AMQP: the transport fails with a condition and both halves close."""
    a.bind()
    a.connection.open()
    a.drain()
    a.transport.push(b"HTTP/1.1 400 Bad Request\r\n\r\n")
    a.drain()
    a.note("condition", a.transport.condition is not None, a.transport.capacity())
    while a.transport.pending() > 0:
        a.transport.pop(a.transport.pending())
    a.drain()
    a.note("closed", a.transport.closed)


SCENARIOS = {
    "transfer": scenario_transfer,
    "receiver_first": scenario_receiver_first,
    "refused": scenario_refused,
    "garbage": scenario_garbage,
}


def run_scenario(name: str, client_module: str, server_module: str) -> list[tuple[Any, ...]]:
    """Run scenario ``name`` with the client on ``client_module`` and the server on ``server_module``; return
    the log of both sides, in program order."""
    log: list[tuple[Any, ...]] = []
    a = Side("A", client_module, False, log)
    b = Side("B", server_module, True, log)
    SCENARIOS[name](a, b)
    return log


def record(name: str, client_module: str, server_module: str) -> dict[str, list[tuple[Any, ...]]]:
    """Each side's log on its own (the interleaving of the two sides is the program's, not the engine's)."""
    log = run_scenario(name, client_module, server_module)
    return {side: [entry[1:] for entry in log if entry[0] == side] for side in ("A", "B")}
