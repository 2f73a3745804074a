"""Short engine programs written against proton's engine API, each run with python-qpid-proton and with
``amqp_async.proton``: what a program records (values it reads, the events it collects) must be the same.

Each program takes the module to use and returns its record. They cover what proton's engine does beyond opening
and closing (``tests/proton_engine_program.py`` covers that): a transport that works before it is bound, the order
of frames a transport writes, credit and queued deliveries as the application reads them, deliveries sent in parts,
a session's incoming window computed from its capacity, the references that decide ``*_FINAL`` events, delivery
states of the application's own, the idle-timeout clock, SASL's defaults.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

__all__ = ["PROGRAMS", "run"]

AMQP_HEADER = b"AMQP\x00\x01\x00\x00"
Record = list[Any]


def run(name: str, module_name: str) -> Record:
    """Run program ``name`` with ``module_name`` (``proton`` or ``amqp_async.proton``); its record."""
    return PROGRAMS[name](importlib.import_module(module_name))


# --- helpers ---------------------------------------------------------------------------------------------------


def _move(src: Any, dst: Any, size: int = 1024) -> bool:
    """Move what ``src`` has for ``dst`` (and the end of either half); True when something moved."""
    pending = src.pending()
    capacity = dst.capacity()
    if capacity < 0:
        if pending < 0:
            return False
        src.close_head()
        return True
    if pending < 0:
        dst.close_tail()
        return True
    if pending == 0 or capacity == 0:
        return False
    data = src.peek(min(size, capacity, pending))
    dst.push(bytes(data))
    src.pop(len(data))
    return True


def pump(t1: Any, t2: Any, size: int = 1024) -> None:
    """Move bytes both ways until neither side has any."""
    while _move(t1, t2, size) or _move(t2, t1, size):
        pass


def events(collector: Any) -> list[str]:
    """The collected events' handler methods, and drop them."""
    names = []
    while True:
        event = collector.peek()
        if event is None:
            return names
        names.append(event.type.method)
        collector.pop()


def output(transport: Any) -> bytes:
    """All a transport has to write now (taken)."""
    out = b""
    while True:
        pending = transport.pending()
        if pending <= 0:
            return out
        data = bytes(transport.peek(pending))
        transport.pop(len(data))
        out += data


def _tag(tag: Any) -> Any:
    return tag


class Pair:
    """A client and a server connection, each bound to its transport, with collectors."""

    def __init__(self, mod: Any, client_frame: int | None = None, server_frame: int | None = None) -> None:
        self.mod = mod
        self.c1 = mod.Connection()
        self.c2 = mod.Connection()
        self.c1.container = "one"
        self.c2.container = "two"
        self.e1 = mod.Collector()
        self.e2 = mod.Collector()
        self.c1.collect(self.e1)
        self.c2.collect(self.e2)
        self.t1 = mod.Transport()
        self.t2 = mod.Transport(mod.Transport.SERVER)
        if client_frame is not None:
            self.t1.max_frame_size = client_frame
        if server_frame is not None:
            self.t2.max_frame_size = server_frame
        self.t1.bind(self.c1)
        self.t2.bind(self.c2)

    def pump(self) -> None:
        pump(self.t1, self.t2)

    def link(self, name: str = "link") -> tuple[Any, Any]:
        """Open the connection, a session and a sending link from the client; the server answers all."""
        mask = self.mod.Endpoint.LOCAL_UNINIT | self.mod.Endpoint.REMOTE_ACTIVE
        self.c1.open()
        self.c2.open()
        ssn = self.c1.session()
        ssn.open()
        snd = ssn.sender(name)
        snd.open()
        self.pump()
        self.c2.session_head(mask).open()
        rcv = self.c2.link_head(mask)
        rcv.open()
        self.pump()
        events(self.e1)
        events(self.e2)
        return snd, rcv


def _condition(condition: Any) -> Any:
    return None if condition is None else str(condition.name)


# --- a transport before it is bound ----------------------------------------------------------------------------


def unbound_client_refuses_garbage(mod: Any) -> Record:
    """An unbound client writes its header at once; bytes that are no AMQP header fail it at once, and its
    output is still an open and a close carrying the error (what the peer reads)."""
    transport = mod.Transport()
    peer = mod.Transport(mod.Transport.SERVER)
    connection = mod.Connection()
    peer.bind(connection)
    record: Record = [transport.pending(), output(transport)]
    transport.push(b"HEL")
    record.append(_condition(transport.condition))
    for data in (b"AMQP\x00\x01\x00\x00", output(transport)):
        peer.push(data)
    record += [transport.pending(), transport.closed, transport.capacity()]
    record += [connection.remote_container, connection.state, _condition(connection.remote_condition)]
    return record


def unbound_server_answers_bad_headers(mod: Any) -> Record:
    """A server answers a header cut short, or another protocol's, with AMQP's header, an open and a close."""
    record: Record = []
    for data, close in ((b"AM", True), (b"AMQP\x01\x01\x00\x00", False), (b"GET / HTTP/1.1\r\n", False)):
        transport = mod.Transport(mod.Transport.SERVER)
        transport.push(data)
        if close:
            transport.close_tail()
        out = output(transport)
        client = mod.Transport()
        connection = mod.Connection()
        client.bind(connection)
        client.push(out)
        record += [out[:8], _condition(transport.condition), transport.pending(), transport.closed]
        record += [connection.state, _condition(connection.remote_condition)]
    return record


def unbound_halves_end(mod: Any) -> Record:
    """Each half of an unbound transport ends on its own; an empty push changes nothing."""
    client = mod.Transport()
    server = mod.Transport(mod.Transport.SERVER)
    record: Record = [client.capacity() > 0, client.pending(), server.pending()]
    client.push(b"")
    client.close_tail()
    record += [client.capacity(), _condition(client.condition)]
    client.close_head()
    server.close_head()
    server.close_tail()
    record += [client.pending(), client.closed, server.pending(), server.capacity(), server.closed]
    return record


def bind_after_the_peer_opened(mod: Any) -> Record:
    """What the peer sent before the transport was bound (its open, a session, a link) is on the connection bound
    after; answered, the client sees the server's side."""
    mask = mod.Endpoint.LOCAL_UNINIT | mod.Endpoint.REMOTE_ACTIVE
    client = mod.Connection()
    client.container = "early-client"
    client.hostname = "vhost-7"
    ssn = client.session()
    ssn.open()
    link = ssn.sender("early")
    link.open()
    client.open()
    t1 = mod.Transport()
    t1.bind(client)
    t2 = mod.Transport(mod.Transport.SERVER)
    t2.push(output(t1))
    server = mod.Connection()
    collector = mod.Collector()
    server.collect(collector)
    record: Record = [server.remote_container, server.session_head(0) is None]
    t2.bind(server)
    record += [server.remote_container, server.remote_hostname, events(collector)]
    server.open()
    server.session_head(mask).open()
    server.link_head(mask).open()
    pump(t1, t2)
    record += [client.state, ssn.state, link.state, client.remote_container, events(collector)]
    return record


def unbind_and_free(mod: Any) -> Record:
    """References decide the *_FINAL events: free() of what no transport maps reports at once; a transport's
    mappings (our begin and attach, the peer's) hold the endpoints until the frames that end them, or the unbind."""
    record: Record = []
    alone = mod.Connection()
    collector = mod.Collector()
    alone.collect(collector)
    s1 = alone.session()
    link = s1.receiver("r")
    s2 = alone.session()
    record.append(events(collector))
    link.free()
    record.append(events(collector))
    s2.free()
    alone.free()
    record.append(events(collector))

    pair = Pair(mod)
    snd, rcv = pair.link()
    spare = pair.c1.session()
    spare.open()
    pair.pump()
    events(pair.e1)
    snd.close()
    pair.pump()
    snd.free()
    record.append(events(pair.e1))  # the peer still maps the link: no LINK_FINAL yet
    rcv.close()
    pair.pump()
    record.append(events(pair.e1))
    pair.c1.free()
    record.append(events(pair.e1))
    pair.t1.unbind()
    record.append(events(pair.e1))
    return record


def collect_reports_what_exists(mod: Any) -> Record:
    """collect() reports INIT for the endpoints made before it, in the order they were made."""
    connection = mod.Connection()
    first = connection.session()
    sender = first.sender("a")
    second = connection.session()
    receiver = second.receiver("b")
    another = first.receiver("c")
    collector = mod.Collector()
    connection.collect(collector)
    record = [events(collector)]
    transport = mod.Transport()
    transport.bind(connection)
    transport.unbind()
    record.append(events(collector))
    return [*record, sender.name, receiver.name, another.name]


# --- the transport's output ------------------------------------------------------------------------------------


def pipelined_until_the_peer_answers(mod: Any) -> Record:
    """Everything sent before the peer answered (open, begin, attach, settled deliveries, then the closes) waits
    for it: the closes go only once the deliveries could be written."""
    mask = mod.Endpoint.LOCAL_UNINIT
    pair = Pair(mod)
    ssn = pair.c1.session()
    snd = ssn.sender("pipe")
    pair.c1.open()
    ssn.open()
    snd.open()
    for n in range(4):
        delivery = snd.delivery(f"d{n}")
        snd.send(b"payload-%d" % n)
        delivery.settle()
    snd.close()
    ssn.close()
    pair.c1.close()
    record: Record = [snd.queued, snd.credit, events(pair.e1)]
    pair.pump()
    record += [pair.c2.state, snd.queued, events(pair.e2)]
    pair.c2.open()
    pair.c2.session_head(mask).open()
    rcv = pair.c2.link_head(mask)
    rcv.open()
    rcv.flow(3)
    pair.pump()
    # The link waits for its last delivery; the connection's close waited only for the peer's open.
    record += [snd.queued, rcv.queued, rcv.state, pair.c2.state, events(pair.e1), events(pair.e2)]
    tags = []
    while rcv.current is not None:
        current = rcv.current
        tags.append((current.tag, current.settled, rcv.recv(100)))
        current.settle()
    record += [snd.queued, rcv.queued, rcv.state, pair.c2.state, pair.c1.state, tags, ssn.state]
    return record


def credit_as_the_application_sees_it(mod: Any) -> Record:
    """A sender's credit drops as it advances (below zero without credit) and deliveries wait (queued); a
    receiver's credit drops as it advances past what arrived."""
    pair = Pair(mod)
    snd, rcv = pair.link()
    record: Record = []
    for n in range(2):
        snd.delivery(f"early-{n}")
        snd.send(b"x")
        snd.advance()
    record.append((snd.credit, snd.queued, snd.unsettled))
    pair.pump()
    record.append((snd.credit, snd.queued, rcv.credit, rcv.queued))
    rcv.flow(5)
    record.append((rcv.credit, rcv.queued))
    pair.pump()
    record.append((snd.credit, snd.queued, rcv.credit, rcv.queued, rcv.unsettled))
    rcv.advance()
    record.append((rcv.credit, rcv.queued, rcv.current.tag))
    snd.delivery("later")
    snd.send(b"y")
    snd.advance()
    record.append((snd.credit, snd.queued))
    pair.pump()
    record.append((snd.credit, snd.queued, rcv.credit, rcv.queued, rcv.unsettled))
    record.append(events(pair.e1))
    record.append(events(pair.e2))
    return record


def drain_answered_after_queued(mod: Any) -> Record:
    """A sender answers a drain only once its queued deliveries are written; the receiver reads what came back."""
    pair = Pair(mod)
    snd, rcv = pair.link()
    rcv.drain(6)
    pair.pump()
    record: Record = [(snd.credit, rcv.credit, rcv.draining(), snd.drain_mode)]
    for n in range(2):
        snd.delivery(f"t{n}")
        snd.send(b"z")
        snd.advance()
    record.append(snd.drained())
    record.append((snd.credit, snd.queued))
    pair.pump()
    record.append((snd.credit, snd.queued, rcv.credit, rcv.queued, rcv.draining(), rcv.drained()))
    while rcv.current is not None:
        rcv.advance()
    pair.pump()
    record.append((snd.credit, rcv.credit, rcv.draining(), rcv.drained()))
    rcv.flow(2)
    pair.pump()
    record.append((snd.credit, rcv.credit, rcv.draining()))
    return record


def delivery_in_parts(mod: Any) -> Record:
    """Bytes sent before advance() go out as they are sent (the delivery partial until its last frame, an empty
    one when advance() comes after the bytes)."""
    pair = Pair(mod)
    snd, rcv = pair.link()
    rcv.flow(2)
    pair.pump()
    delivery = snd.delivery("parts")
    record: Record = [snd.send(b"first part,"), delivery.pending, snd.credit]
    pair.pump()
    current = rcv.current
    record += [current.partial, current.pending, rcv.recv(5), current.pending, snd.credit]
    record += [snd.send(b" second"), rcv.recv(100)]
    pair.pump()
    record += [current.partial, rcv.recv(100), rcv.recv(100)]
    snd.advance()
    pair.pump()
    record += [current.partial, rcv.recv(100), snd.credit, rcv.credit]
    rcv.advance()
    record += [rcv.credit, events(pair.e1)[:4], events(pair.e2)[:4]]
    return record


def abort_before_and_after_frames(mod: Any) -> Record:
    """Aborted before any frame went: nothing is written, no credit used. Aborted after: one aborted transfer
    (byte for byte as proton writes it), one credit used; the receiver sees the delivery aborted."""
    pair = Pair(mod, server_frame=512)
    snd, rcv = pair.link("ab")
    rcv.flow(2)
    pair.pump()
    unsent = snd.delivery("never")
    snd.send(b"0123456789" * 60)
    unsent.abort()
    record: Record = [unsent.aborted, snd.credit, output(pair.t1), snd.credit, snd.queued]
    streamed = snd.delivery("half")
    snd.send(b"abcdefghij" * 60)
    pair.pump()
    record += [rcv.current.pending, rcv.current.partial]
    snd.send(b"never seen")
    streamed.abort()
    abort_frame = output(pair.t1)
    pair.t2.push(abort_frame)
    current = rcv.current
    record += [abort_frame, streamed.aborted, snd.credit, current.aborted, current.settled, current.pending]
    snd.close()
    record.append(output(pair.t1))
    return record


def session_capacity_window(mod: Any) -> Record:
    """With incoming_capacity set, the session's incoming window is what of it the bytes received and not read
    leave free: the sender waits (outgoing_bytes), and sends more as the receiver reads."""
    pair = Pair(mod, client_frame=1024, server_frame=1024)
    pair.c2.open()
    pair.c1.open()
    ssn = pair.c1.session()
    ssn.open()
    snd = ssn.sender("window")
    snd.open()
    pair.pump()
    mask = mod.Endpoint.LOCAL_UNINIT | mod.Endpoint.REMOTE_ACTIVE
    server_session = pair.c2.session_head(mask)
    server_session.incoming_capacity = 5000
    server_session.open()
    rcv = pair.c2.link_head(mask)
    rcv.open()
    rcv.flow(10)
    pair.pump()
    record: Record = []
    for n in range(10):
        snd.delivery(f"w{n}")
        snd.send(bytes([n]) * 700)
        snd.advance()
        pair.pump()
        record.append((ssn.outgoing_bytes, server_session.incoming_bytes, snd.queued, rcv.queued))
    for _ in range(10):
        current = rcv.current
        if current is None:
            break
        record.append((current.pending, len(rcv.recv(300) or b"")))
        rcv.advance()
        pair.pump()
        record.append((ssn.outgoing_bytes, server_session.incoming_bytes, snd.queued, rcv.queued))
    return record


def states_both_ways(mod: Any) -> Record:
    """Both ends send their state (the sender's too, before it settles); a state of the application's own travels
    with its code and data."""
    pair = Pair(mod)
    snd, rcv = pair.link("states")
    rcv.flow(3)
    pair.pump()
    sent = []
    for n in range(3):
        sent.append(snd.delivery(f"s{n}"))
        snd.send(b"m")
        snd.advance()
    pair.pump()
    got = []
    while rcv.current is not None:
        got.append(rcv.current)
        rcv.advance()
    got[0].local.failed = True
    got[0].local.annotations = {mod.symbol("why"): "busy"}
    got[0].update(mod.Delivery.MODIFIED)
    got[1].local.section_number = 3
    got[1].local.section_offset = 7
    got[1].update(mod.Delivery.RECEIVED)
    got[2].local.data = [7, "eight"]
    got[2].update(0x4444)
    pair.pump()
    record: Record = []
    for delivery in sent:
        remote = delivery.remote
        record.append((delivery.remote_state, delivery.updated, remote.failed, remote.annotations))
        record.append((remote.section_number, remote.section_offset, remote.data, delivery.settled))
    sent[0].update(mod.Delivery.ACCEPTED)
    sent[2].local.data = ["back"]
    sent[2].update(0x4445)
    pair.pump()
    record += [(delivery.remote_state, delivery.remote.data) for delivery in got]
    for delivery in sent:
        delivery.settle()
    pair.pump()
    record += [(delivery.settled, delivery.remote_state) for delivery in got]
    record += [events(pair.e1), events(pair.e2)]
    return record


def idle_timeout_clock(mod: Any) -> Record:
    """proton's idle clock: the deadlines tick() gives, heartbeats when the peer asked for them, and the close
    when the peer went quiet for longer than our idle timeout."""
    pair = Pair(mod)
    pair.t1.idle_timeout = 4.0
    pair.c1.open()
    pair.c2.open()
    pair.pump()
    record: Record = [pair.t2.remote_idle_timeout, pair.t1.remote_idle_timeout]
    frames = pair.t1.frames_input
    for now in (100.0, 100.5, 101.0, 101.001, 102.5, 103.01):
        record.append((now, pair.t1.tick(now), pair.t2.tick(now)))
        pair.pump()
        record.append(pair.t1.frames_input - frames)
    for now in (104.0, 104.5, 106.0, 108.0, 109.0):
        record.append((now, pair.t1.tick(now)))
        output(pair.t2)  # the server's heartbeats are lost from here on
    record += [_condition(pair.t1.condition), events(pair.e1)[-4:]]
    pair.t2.push(output(pair.t1))
    record += [pair.c2.state, _condition(pair.c2.remote_condition)]
    return record


def quiet_peer(mod: Any) -> Record:
    """A client whose peer never answers gives up at its idle timeout: before SASL's end without frames, after its
    open with a close."""
    record: Record = []
    for sasl in (False, True):
        connection = mod.Connection()
        collector = mod.Collector()
        connection.collect(collector)
        transport = mod.Transport()
        if sasl:
            transport.sasl()
        transport.idle_timeout = 1.5
        transport.bind(connection)
        connection.open()
        output(transport)
        record.append((transport.tick(50.0), transport.tick(51.0), transport.tick(51.6)))
        record += [events(collector), transport.capacity(), transport.pending() > 0]
        output(transport)
        record += [events(collector), transport.pending(), _condition(transport.condition)]
    return record


def settings_as_proton_keeps_them(mod: Any) -> Record:
    """Transport and connection settings read back as proton reads them."""
    transport = mod.Transport()
    record: Record = [transport.max_frame_size, transport.channel_max]
    transport.max_frame_size = 100
    transport.channel_max = 50000
    record += [transport.max_frame_size, transport.channel_max]
    transport.max_frame_size = 0
    transport.channel_max = 99
    record += [transport.max_frame_size, transport.channel_max]
    connection = mod.Connection()
    connection.user = "someone"
    connection.password = "secret"
    connection.offered_capabilities = mod.Array(mod.UNDESCRIBED, mod.Data.SYMBOL, mod.symbol("one"), mod.symbol("two"))
    connection.desired_capabilities = ["three"]
    record += [connection.user, connection.password, connection.offered_capabilities]
    transport.bind(connection)
    connection.open()
    peer = mod.Transport(mod.Transport.SERVER)
    other = mod.Connection()
    peer.bind(other)
    pump(transport, peer)
    try:
        transport.channel_max = 7
        record.append("changed")
    except mod.SessionException:
        record.append("refused")
    record += [transport.channel_max, peer.remote_channel_max, peer.remote_max_frame_size]
    record += [other.remote_offered_capabilities, other.remote_desired_capabilities]
    record += [other.remote_offered_capabilities == connection.offered_capabilities]
    return record


def termini_round_trip(mod: Any) -> Record:
    """A terminus's capabilities, outcomes and filter read back (formatted) as they were set."""
    pair = Pair(mod)
    pair.c1.open()
    pair.c2.open()
    ssn = pair.c1.session()
    ssn.open()
    snd = ssn.sender("termini")
    source = snd.source
    source.address = "from-here"
    source.capabilities.put_array(False, mod.Data.SYMBOL)
    source.capabilities.enter()
    for capability in ("red", "green"):
        source.capabilities.put_symbol(capability)
    source.capabilities.exit()
    source.filter.put_map()
    source.filter.enter()
    source.filter.put_symbol("selector")
    source.filter.put_string("color = 'red'")
    source.filter.put_ulong(9)
    source.filter.exit()
    snd.target.type = mod.Terminus.COORDINATOR
    snd.target.capabilities.put_array(False, mod.Data.SYMBOL)
    snd.target.capabilities.enter()
    snd.target.capabilities.put_symbol("amqp:local-transactions")
    snd.target.capabilities.exit()
    snd.open()
    pair.pump()
    rcv = pair.c2.link_head(0)
    remote_source, remote_target = rcv.remote_source, rcv.remote_target
    # (values, not format(): python-qpid-proton 0.40's format() cuts its text at 16 bytes)
    return [
        _value(source.capabilities),
        _value(remote_source.capabilities),
        _value(source.filter),
        _value(remote_source.filter),
        remote_target.type,
        _value(remote_target.capabilities),
    ]


def _value(data: Any) -> Any:
    data.rewind()
    data.next()
    value = data.get_object()
    data.rewind()
    elements = getattr(value, "elements", None)
    if elements is not None:  # an Array (each implementation's own class): its type code and elements
        return ("array", int(value.type), [str(element) for element in elements])
    return value


def detach_is_not_close(mod: Any) -> Record:
    """detach() keeps the link's state; the peer hears a detach, not a close."""
    pair = Pair(mod)
    snd, rcv = pair.link("detached")
    snd.detach()
    record: Record = [snd.state, events(pair.e1)]
    pair.pump()
    record += [rcv.state, events(pair.e2)]
    rcv.detach()
    pair.pump()
    record += [snd.state, events(pair.e1)]
    return record


def tags_read_back(mod: Any) -> Record:
    """Tags read as proton reads them (UTF-8 decoded), on both ends."""
    pair = Pair(mod)
    snd, rcv = pair.link("tags")
    rcv.flow(3)
    pair.pump()
    local = []
    for tag in ("text", b"bytes", "ünïcode"):
        local.append(snd.delivery(tag).tag)
        snd.send(b".")
        snd.advance()
    pair.pump()
    remote = []
    while rcv.current is not None:
        remote.append(rcv.current.tag)
        rcv.advance()
    return [local, remote]


# --- SASL ------------------------------------------------------------------------------------------------------


def _sasl_pair(mod: Any, mechs: str | None, user: str | None = None, insecure: bool | None = None) -> Any:
    pair = Pair.__new__(Pair)
    pair.mod = mod
    pair.c1, pair.c2 = mod.Connection(), mod.Connection()
    pair.e1, pair.e2 = mod.Collector(), mod.Collector()
    pair.c1.collect(pair.e1)
    pair.c2.collect(pair.e2)
    pair.t1, pair.t2 = mod.Transport(), mod.Transport(mod.Transport.SERVER)
    client_sasl = pair.t1.sasl()
    if mechs is not None:
        client_sasl.allowed_mechs(mechs)
    if insecure is not None:
        client_sasl.allow_insecure_mechs = insecure
    if user is not None:
        pair.c1.user = user
        pair.c1.password = "pw"
    pair.t1.bind(pair.c1)
    pair.t2.bind(pair.c2)
    pair.c1.open()
    pair.c2.open()
    pair.pump()
    return pair


def sasl_defaults(mod: Any) -> Record:
    """proton's SASL defaults: a client does not send PLAIN in clear unless allowed; a server (with or without a
    SASL layer configured) takes ANONYMOUS; users and outcomes read as proton's."""
    record: Record = []
    for mechs, user, insecure in (("ANONYMOUS", "visitor", None), ("PLAIN", "bob", None), ("NOPE", None, None)):
        pair = _sasl_pair(mod, mechs, user, insecure)
        client, server = pair.t1.sasl(), pair.t2.sasl()
        record.append((client.outcome, server.outcome, pair.t1.authenticated, pair.t2.authenticated))
        record.append((pair.t1.user, pair.t2.user, server.user, server.mech, client.allow_insecure_mechs))
        record.append((_condition(pair.t1.condition), pair.c1.state, pair.c2.state))
        record.append((events(pair.e1), events(pair.e2)))
    return record


def sasl_skipped_or_required(mod: Any) -> Record:
    """A client without SASL: a server takes it unless it requires authentication (then both fail)."""
    record: Record = []
    for required in (False, True):
        client = mod.Transport()
        server = mod.Transport(mod.Transport.SERVER)
        server.sasl()
        server.require_auth(required)
        pump(client, server)
        record.append((_condition(client.condition), _condition(server.condition), server.authenticated))
        record.append((server.sasl().outcome, client.closed, server.closed))
    return record


def sasl_frames_are_transport_work(mod: Any) -> Record:
    """Frames the SASL layer has to write (a mechanism chosen, an outcome) are reported as TRANSPORT events."""
    server_connection = mod.Connection()
    collector = mod.Collector()
    server_connection.collect(collector)
    server = mod.Transport(mod.Transport.SERVER)
    server.bind(server_connection)
    client = mod.Transport()
    client.sasl().allowed_mechs("ANONYMOUS")
    client_connection = mod.Connection()
    client_collector = mod.Collector()
    client_connection.collect(client_collector)
    client.bind(client_connection)
    record: Record = [events(collector), events(client_collector)]
    server.push(output(client))
    record.append(events(collector))
    client.push(output(server))
    record += [events(client_collector), client.sasl().outcome]
    server.push(output(client))
    output(server)
    record += [events(collector), server.sasl().outcome, server.user]
    return record


PROGRAMS: dict[str, Callable[[Any], Record]] = {
    name: function
    for name, function in dict(globals()).items()
    if callable(function)
    and getattr(function, "__module__", None) == __name__
    and not name.startswith("_")
    and name not in ("run", "pump", "events", "output", "Pair")
}
