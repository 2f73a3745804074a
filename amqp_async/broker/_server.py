"""The embedded broker: our protocol engine in the server role, one driver task per connection.

Addresses name queues, made on first attach (or first message, for an anonymous sender). Addresses that start
with ``topic://`` (or sources with the ``topic`` capability) are topics: every subscriber gets a copy. A dynamic
source gets a temporary queue, deleted when its link detaches. ANONYMOUS-RELAY is offered: a sender with a null
target routes each message by its ``to`` address; so are ``amqp:local-transactions`` and SHARED-SUBS (shared
topic subscriptions, :mod:`._consumers`).

All connections run on one event loop; a message routed by one connection is transferred by another connection's
engine directly (synchronously, on the loop thread), which then wakes that connection's writer. Each connection is
a :class:`~._connection.ServerConnection`.

Producers get credit from the broker's :class:`~._flow.Flow` (the queue depth and memory limits, the memory one on
by default: :data:`DEFAULT_MAX_MEMORY`); with a data directory the :class:`~._store.Store` keeps queues and durable
messages, and a durable message's outcome waits for its commit. Messages expire (§3.2.1 ttl, §3.2.4
absolute-expiry-time): never delivered once expired, swept every :data:`DEFAULT_EXPIRY_INTERVAL` seconds; what is
given up (rejected, expired, at the delivery limit, refused by a full queue) goes to the dead-letter queue with
annotations saying why (:mod:`._deadletter`), or is dropped.
"""

from __future__ import annotations

import itertools
import logging
import math
import secrets
import socket
import ssl
import time
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
from anyio.streams.tls import TLSListener

from ..codec import conditions
from ..codec.delivery_states import Accepted, Modified, Rejected, Released
from ..codec.performatives import Error
from ..io.websocket import require_wsproto, server_handshake
from ..protocol.connection import LEAST_IDLE_TIMEOUT
from ..protocol.sasl_scram import InMemoryCredentialStore
from ..types import symbol
from ._accept import steady
from ._bodies import BodyFile, BodySpool
from ._connection import DEFAULT_HANDSHAKE_TIMEOUT, DEFAULT_IDLE_TIMEOUT, ServerConnection
from ._consumers import earlier_subscription_key
from ._deadletter import DeadLetters
from ._flow import QUEUE_SHARE, Flow, NoRoomForNode, no_room_within_memory
from ._nodes import Consumer, Entry, Queue, Topic
from ._store import Store, StoredQueue
from ._transactions import DEFAULT_MAX_TRANSACTIONS
from .selector import Selector, SelectorError, compile_selector

__all__ = [
    "DEFAULT_EXPIRY_INTERVAL",
    "DEFAULT_LARGE_MESSAGE_SIZE",
    "DEFAULT_MAX_MEMORY",
    "TOPIC_PREFIX",
    "Broker",
    "ListenError",
]

log = logging.getLogger("amqp_async.broker")

TOPIC_PREFIX = "topic://"
#: The memory messages may take by default (``max_memory``): a development broker stays bounded, as RabbitMQ does
#: with its memory watermark; ``max_memory=None`` (``--max-memory 0``) lifts it.
DEFAULT_MAX_MEMORY = 256 << 20
#: Seconds between two sweeps of expired messages out of the queues.
DEFAULT_EXPIRY_INTERVAL = 1.0
#: With a data directory, messages larger than this are kept on disk as they arrive (``large_message_size``).
DEFAULT_LARGE_MESSAGE_SIZE = 1 << 20
#: The share of the memory limit the messages held must fall to before the broker says there is room again.
ROOM_AGAIN = 0.75
#: What the refusal of a message for a full queue tells the user to change (the broker's command-line option).
MORE_DEPTH = "run the broker with a larger --max-queue-depth, or consume from it"


def _error(condition: str, description: str) -> Error:
    return Error(condition=symbol(condition), description=description)


def _stored_selector(stored: StoredQueue) -> Selector | None:
    """The selector a durable subscription was stored with (None: none, or one that no longer compiles: it then
    takes every message until its subscriber attaches again, as a store written before selectors were kept)."""
    if stored.selector is None:
        return None
    try:
        return compile_selector(stored.selector)
    except SelectorError as exc:
        log.warning("store: the selector of %s does not compile (%s): it takes every message", stored.name, exc)
        return None


class ListenError(OSError):
    """The broker cannot listen on its address: the port is in use, the host does not resolve or is not this
    machine's, the port needs privileges. ``errno`` is the operating system's; the message names the address."""

    def __str__(self) -> str:
        return str(self.strerror)


def check_dead_letter_queue(address: str | None) -> None:
    """A dead-letter queue must be a queue: messages dead-lettered to a topic address went to a queue of that name
    that no receiver could read (a receiver on it subscribes to the topic), and a topic keeps nothing for later
    inspection when no one is subscribed.

    Raises:
        ValueError: an empty address, or one with the topic prefix.
    """
    if address is None:
        return
    if not address:
        raise ValueError("the dead-letter queue needs an address")
    if address.startswith(TOPIC_PREFIX):
        raise ValueError(
            f"the dead-letter queue {address!r} names a topic: give a queue's address (a topic keeps no message "
            "for later inspection)"
        )


def check_ws_path(path: str | None) -> None:
    """A WebSocket path is an HTTP request's absolute path (RFC 7230 §5.3.1: origin-form starts with "/"): one
    without the slash matched no request (every upgrade got 404), and the URL printed for it was broken
    (``ws://127.0.0.1:5672ws``).

    Raises:
        ValueError: a path (an empty one too) that does not start with "/".
    """
    if path is not None and not path.startswith("/"):
        raise ValueError(f"the WebSocket path {path!r} does not start with '/' (e.g. '/ws')")


class Broker:
    """An AMQP 1.0 broker, in memory (with ``data_dir``, its queues and durable messages also kept on disk).

    Use it in-process as an async context manager (``async with Broker() as broker: broker.url``), which serves
    on a free port when ``port`` is 0, or run ``python -m amqp_async.broker``.

    Args:
        host: the address to listen on.
        port: the port to listen on (0: a free port; see :attr:`url`).
        users: user name to password; when given, SASL PLAIN and SCRAM authenticate them.
        allow_anonymous: also offer SASL ANONYMOUS (default: only when no users are given).
        ssl_context: a server-side SSL context (certificate and key loaded) to serve amqps.
        max_connections: refuse connections opened beyond this many (``amqp:resource-limit-exceeded``); sockets that
            have not opened yet do not count (``handshake_timeout`` bounds them).
        max_queue_depth: the most messages waiting in a queue: producers get no more credit than the room left
            (or, with ``when_full="reject"``, messages beyond it are refused with ``amqp:resource-limit-exceeded``).
        max_memory: the most memory the messages held may take (queued, or delivered and not settled: their bytes
            and :data:`~._nodes.ENTRY_OVERHEAD` each), with the nodes made (queues, topics, subscriptions:
            :data:`~._flow.NODE_SIZE` each) and the sessions and links peers make (:data:`~._flow.ENDPOINT_SIZE` each,
            at most half the limit): producers get no more credit than the room left, and a node, session or link
            the room does not take is not made (its attach, or a message to its address, is refused, a session
            ended, with ``amqp:resource-limit-exceeded``).
            By default :data:`DEFAULT_MAX_MEMORY`; None: no limit.
        when_full: ``"block"`` (withhold credit, the default) or ``"reject"``: what a full queue does to producers.
        queue_share: the part of ``max_memory`` one queue (or topic subscription) may hold, of what the other queues
            leave (default :data:`~._flow.QUEUE_SHARE`, half; 1: the whole): a queue whose consumer is stuck or slow,
            or that has none, stops its own producers there, and the producers of the other queues keep room.
        data_dir: keep queues, durable subscriptions and durable messages in this directory (SQLite), across
            restarts; a durable message is accepted once it is stored. Messages larger than ``large_message_size``
            are kept in files there (``bodies/``) as they arrive, only their leading sections in memory, and are
            streamed from there to consumers. None: in memory only (a message larger than what ``max_memory``
            leaves is then refused with ``amqp:resource-limit-exceeded``).
        large_message_size: with ``data_dir``, the size past which a message is kept on disk rather than in
            memory (default :data:`DEFAULT_LARGE_MESSAGE_SIZE`).
        max_message_size: the largest message accepted (announced in attach, §2.7.3; a larger one detaches its
            link with ``amqp:link:message-size-exceeded``, the limit named).
        dead_letter_queue: where messages given up go, annotated with why (rejected, expired, at the delivery
            limit, refused by a full queue; see :mod:`amqp_async.broker._deadletter`); None: they are dropped.
        delivery_limit: give a message up after this many failed deliveries (its header's delivery-count: modified
            with delivery-failed, rolled-back transactions, held by a consumer whose connection was lost); None: no
            limit. The dead-letter queue keeps its messages whatever their count.
        expiry_interval: seconds between sweeps of expired messages out of the queues (expired messages are also
            taken out whenever a queue delivers); the same sweep gives credit to producers held back since the last
            one by credit other producers hold and do not use.
        transaction_timeout: roll back transactions open longer than this many seconds (checked when they are
            next used or discharged, which then fail with ``amqp:transaction:timeout``); None: no limit.
        max_transactions: the most transactions one connection may hold open at once (default
            :data:`~._transactions.DEFAULT_MAX_TRANSACTIONS`; None: no limit); a declare beyond it, or one the
            memory limit has no room for (an open transaction counts as a node does), is rejected with
            ``amqp:resource-limit-exceeded`` (§4.3).
        handshake_timeout: seconds a connection has from its accept to the peer's open (protocol header, SASL,
            open; after a TLS handshake or a WebSocket upgrade, from its end; each of those has as long) before
            its socket is closed (default
            :data:`~._connection.DEFAULT_HANDSHAKE_TIMEOUT`; None: no limit).
        idle_timeout: seconds of silence after which an open connection is closed with
            ``amqp:resource-limit-exceeded`` (§2.4.5); the broker's open asks the peer for a frame at least every
            half of it (default :data:`~._connection.DEFAULT_IDLE_TIMEOUT`; None: never, and none asked).
        container_id: the broker's container id.
        ws_port: also serve AMQP over WebSocket (AMQP WebSocket Binding, subprotocol ``amqp``) on this port (0: a
            free one, see :attr:`ws_url`); over TLS (``wss``) when ``ssl_context`` is given. None: no WebSocket.
        ws_path: the only WebSocket path served (e.g. ``"/ws"``; others are answered 404); None serves any path.
            One that does not start with "/" raises ValueError.
    """

    # Slots: the broker's fields are read for every message routed. Its 34 would pass the 29 CPython 3.11 and 3.12
    # keep inline in an instance (a dict is made for them), and neither specialises a method call on such an
    # instance (``self.queue(...)``, ``self._is_topic(...)``).
    __slots__ = (
        "__weakref__",
        "_dynamic_names",
        "_group",
        "_listener",
        "_memory_full",
        "_store",
        "allow_anonymous",
        "connections",
        "container_id",
        "data_dir",
        "dead_letter_queue",
        "dead_letters",
        "delivery_limit",
        "expiry_interval",
        "flow",
        "handling",
        "handshake_timeout",
        "host",
        "idle_timeout",
        "large_message_size",
        "max_connections",
        "max_memory",
        "max_message_size",
        "max_queue_depth",
        "max_transactions",
        "opened_connections",
        "port",
        "queue_share",
        "queues",
        "spool",
        "ssl_context",
        "storage",
        "topics",
        "touched",
        "transaction_timeout",
        "users",
        "ws_path",
        "ws_port",
    )

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 5672,
        *,
        users: dict[str, str] | None = None,
        allow_anonymous: bool | None = None,
        ssl_context: ssl.SSLContext | None = None,
        max_connections: int | None = None,
        max_queue_depth: int | None = None,
        max_message_size: int | None = None,
        dead_letter_queue: str | None = None,
        transaction_timeout: float | None = None,
        container_id: str = "amqp_async-broker",
        ws_port: int | None = None,
        ws_path: str | None = None,
        max_memory: int | None = DEFAULT_MAX_MEMORY,
        when_full: str = "block",
        queue_share: float = QUEUE_SHARE,
        data_dir: str | Path | None = None,
        delivery_limit: int | None = None,
        expiry_interval: float = DEFAULT_EXPIRY_INTERVAL,
        large_message_size: int = DEFAULT_LARGE_MESSAGE_SIZE,
        max_transactions: int | None = DEFAULT_MAX_TRANSACTIONS,
        handshake_timeout: float | None = DEFAULT_HANDSHAKE_TIMEOUT,
        idle_timeout: float | None = DEFAULT_IDLE_TIMEOUT,
    ) -> None:
        if when_full not in ("block", "reject"):
            raise ValueError(f"when_full must be 'block' or 'reject', not {when_full!r}")
        if max_memory is not None and max_memory <= 0:
            raise ValueError(f"max_memory must be above 0 (None: no limit), not {max_memory!r}")
        if delivery_limit is not None and delivery_limit <= 0:
            raise ValueError(f"delivery_limit must be above 0 (None: no limit), not {delivery_limit!r}")
        if not expiry_interval > 0:
            raise ValueError(f"expiry_interval must be above 0 seconds, not {expiry_interval!r}")
        if large_message_size < 1:
            raise ValueError(f"large_message_size must be at least 1 byte, not {large_message_size!r}")
        if max_transactions is not None and max_transactions < 1:
            raise ValueError(f"max_transactions must be at least 1 (None: no limit), not {max_transactions!r}")
        # As the command line refuses them: a depth of 0 had every send wait for ever with nothing logged, and 0
        # connections refused every client.
        for name, limit in (("max_queue_depth", max_queue_depth), ("max_connections", max_connections)):
            if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
                raise ValueError(f"{name} must be a whole number of at least 1 (None: no limit), not {limit!r}")
        if transaction_timeout is not None and not 0 < transaction_timeout < math.inf:
            raise ValueError(
                f"transaction_timeout must be above 0 seconds (None: no limit), not {transaction_timeout!r}"
            )
        for name, number in (("port", port), ("ws_port", ws_port)):
            if number is not None and not 0 <= number <= 65535:
                raise ValueError(f"{name} must be from 0 (a free port) to 65535, not {number!r}")
        if handshake_timeout is not None and not 0 < handshake_timeout < math.inf:
            raise ValueError(f"handshake_timeout must be above 0 seconds (None: no limit), not {handshake_timeout!r}")
        if idle_timeout is not None and not 2 * LEAST_IDLE_TIMEOUT <= idle_timeout < math.inf:
            # the open asks for half: below LEAST_IDLE_TIMEOUT, our clients and proton containers refuse the ask
            raise ValueError(
                f"idle_timeout must be at least {2 * LEAST_IDLE_TIMEOUT} seconds (None: none), not {idle_timeout!r}"
            )
        check_dead_letter_queue(dead_letter_queue)
        check_ws_path(ws_path)
        self.host = host
        self.port = port
        self.users = users
        self.allow_anonymous = not users if allow_anonymous is None else allow_anonymous
        self.ssl_context = ssl_context
        self.max_connections = max_connections
        self.max_queue_depth = max_queue_depth
        self.max_message_size = max_message_size
        self.dead_letter_queue = dead_letter_queue
        self.delivery_limit = delivery_limit
        self.expiry_interval = expiry_interval
        #: the memory limit held producers back at the last sweep (logged when that changes: _report_memory).
        self._memory_full = False
        #: the dead-letter handling (counts of what it moved and dropped, by reason).
        # (the dead-letter queue is made when needed even with the memory limit reached: one node, and dead letters
        # never fail)
        self.dead_letters = DeadLetters(dead_letter_queue, lambda name: self.queue(name, refusable=False))
        self.transaction_timeout = transaction_timeout
        self.max_transactions = max_transactions
        self.handshake_timeout = handshake_timeout
        self.idle_timeout = idle_timeout
        self.container_id = container_id
        self.ws_port = ws_port
        self.ws_path = ws_path
        self.max_memory = max_memory
        self.queue_share = queue_share
        self.data_dir = data_dir
        self.large_message_size = large_message_size
        #: where large messages are written as they arrive (with a data directory; see :mod:`._bodies`).
        self.spool: BodySpool | None = None
        self.flow = Flow(max_memory, block_full_queues=when_full == "block", queue_share=queue_share)
        #: the durable store (opened by :meth:`serve` when there is a ``data_dir``).
        self.storage: Store | None = None
        self.queues: dict[str, Queue] = {}
        self.topics: dict[str, Topic] = {}
        self.connections: set[ServerConnection] = set()
        #: how many of them the peer opened (what ``max_connections`` bounds: a socket still in its handshake is
        #: bounded by ``handshake_timeout``, and does not keep a client out).
        self.opened_connections = 0
        #: The connection whose input (or timer) is being handled, and the others it gave output to meanwhile (a
        #: message routed to their consumers, say): see ServerConnection.kick.
        self.handling: ServerConnection | None = None
        self.touched: dict[ServerConnection, None] = {}
        self._store = InMemoryCredentialStore(users) if users else None
        self._dynamic_names = itertools.count(1)
        self._group: anyio.abc.TaskGroup | None = None
        self._listener: anyio.abc.Listener[Any] | None = None

    @property
    def _netloc_host(self) -> str:
        return f"[{self.host}]" if ":" in self.host else self.host  # an IPv6 address, as URLs write it

    @property
    def url(self) -> str:
        """The URL clients connect to (with the real port once listening)."""
        scheme = "amqps" if self.ssl_context is not None else "amqp"
        return f"{scheme}://{self._netloc_host}:{self.port}"

    @property
    def ws_url(self) -> str | None:
        """The WebSocket URL clients connect to (``ws://`` or ``wss://``), or None when no WebSocket is served."""
        if self.ws_port is None:
            return None
        scheme = "wss" if self.ssl_context is not None else "ws"
        return f"{scheme}://{self._netloc_host}:{self.ws_port}{self.ws_path or '/'}"

    # --- nodes -------------------------------------------------------------------------------------------

    def queue(self, name: str, *, dynamic: bool = False, refusable: bool = True) -> Queue:
        """The queue named ``name``, made on first use (kept in the store, if any, unless it is ``dynamic``).

        Raises:
            NoRoomForNode: the memory limit leaves no room for a new queue (unless not ``refusable``: one loaded
                from the store, the dead-letter queue).
        """
        queue = self.queues.get(name)
        if queue is None:
            self._node_made(f"queue {name!r}", refusable)
            store = None if dynamic else self.storage
            queue = self.queues[name] = Queue(
                name,
                max_depth=self.max_queue_depth,
                dynamic=dynamic,
                store=store,
                flow=self.flow,
                # The dead-letter queue keeps what it holds for someone to look at (as it keeps expired messages):
                # given up there, a message would be dropped, and an inspecting consumer that crashed twice (a
                # lost connection counts, see _connection) lost it.
                delivery_limit=None if name == self.dead_letter_queue else self.delivery_limit,
                dead_letter=self.dead_letters,
            )
            if store is not None:
                store.add_queue(name)
        return queue

    def _open_store(self) -> Store:
        """Open the store and load what it kept: queues, durable subscriptions, their messages."""
        assert self.data_dir is not None
        store = self.storage = Store(self.data_dir)
        store.upgrade(earlier_subscription_key)  # an earlier version's subscription keys (once)
        self.spool = BodySpool(store.bodies)
        loaded = nodes = 0
        known: set[str] = set()
        for stored in store.load():
            nodes += 1  # a queue, or a topic's durable subscription (the log said queues, and left those out)
            if stored.topic is not None and stored.subscription is not None:
                queue = self.topic(stored.topic, refusable=False).subscription(
                    stored.subscription,
                    max_depth=self.max_queue_depth,
                    durable=True,
                    store=store,
                    flow=self.flow,
                    refusable=False,
                    selector=_stored_selector(stored),
                )
            else:
                queue = self.queue(stored.name, refusable=False)
            for identifier, payload, expires, body_name, body_at in stored.messages:
                body = None
                if body_name is not None:
                    path = store.bodies / body_name
                    try:
                        size = path.stat().st_size
                    except OSError as exc:
                        log.warning("store: message %d's file %s is missing (%s): not loaded", identifier, path, exc)
                        continue
                    body = BodyFile(path, size, body_at or 0, kept=True)
                    known.add(body_name)
                entry = Entry(payload, body=body)
                entry.stored = identifier
                entry.expires = expires  # computed at its arrival: a restart neither extends nor forgets it
                queue.load(entry)
                loaded += 1
        removed = self.spool.remove_unknown(known)
        if removed:
            log.info("store %s: %d large-message files of messages not kept removed", store.path, removed)
        log.info("store %s: %d queues and durable subscriptions, %d messages loaded", store.path, nodes, loaded)
        return store

    def topic(self, name: str, *, refusable: bool = True) -> Topic:
        """The topic named ``name``, made on first use (raises :class:`NoRoomForNode` as :meth:`queue` does)."""
        topic = self.topics.get(name)
        if topic is None:
            self._node_made(f"topic {name!r}", refusable)
            topic = self.topics[name] = Topic(name, delivery_limit=self.delivery_limit, dead_letter=self.dead_letters)
        return topic

    def _node_made(self, what: str, refusable: bool) -> None:
        """Count a node about to be made in the memory limit, or refuse it (see :mod:`._flow`)."""
        flow = self.flow
        if refusable and not flow.room_for_node():
            raise NoRoomForNode(no_room_within_memory(f"a new {what}", flow.max_memory))
        flow.hold_node()

    def _is_topic(self, address: str, capabilities: Any = None) -> bool:
        return address.startswith(TOPIC_PREFIX) or (capabilities is not None and symbol("topic") in tuple(capabilities))

    def route(self, address: str, entry: Entry, topic: bool = False) -> Error | None:
        """Put a message on the node at ``address`` (a topic when ``topic``, or when its prefix says so); return the
        error that refuses it, if any."""
        try:
            if topic or self._is_topic(address):
                self.topic(address).publish(entry)
                return None
            queue = self.queue(address)
        except NoRoomForNode as exc:
            return _error(conditions.RESOURCE_LIMIT_EXCEEDED, str(exc))
        if queue.full:
            # named so that the user knows which option to change (--max-queue-depth, of the command line)
            depth = queue.max_depth
            description = f"queue {address!r} is full ({depth} message{'' if depth == 1 else 's'}): {MORE_DEPTH}"
            condition = conditions.RESOURCE_LIMIT_EXCEEDED
            # the producer hears of it (rejected); with a dead-letter queue the message is kept there too
            self.dead_letters(None, entry, "queue-full", description, condition=condition, source=address)
            return _error(condition, description)
        queue.put(entry)
        return None

    def _has_room(self, address: str, count: int, topic: bool = False) -> bool:
        """Whether the node at ``address`` takes ``count`` more messages (a topic always does, once it is made).

        The node is made here, as the first message would make it: a commit checks first, and must not find only
        when it routes that the memory limit has no room for the node (its messages would be lost).
        """
        try:
            if topic or self._is_topic(address):
                self.topic(address)
                return True
            queue = self.queue(address)
        except NoRoomForNode:
            return False
        return queue.max_depth is None or len(queue.entries) + count <= queue.max_depth

    def _settle_entry(self, queue: Queue, consumer: Consumer | None, entry: Entry, state: Any) -> None:
        """Apply the outcome a consumer gave a delivered message (now, or at the commit of its transaction)."""
        if state.__class__ is Accepted:
            queue.release(entry)  # the common case first: done with
        elif isinstance(state, Released):
            queue.put_back([entry])
        elif isinstance(state, Modified):
            if state.message_annotations:
                entry.annotate(state.message_annotations)  # §3.4.5: combined with the message's annotations
            if state.undeliverable_here and consumer is not None:
                consumer.refuse(entry)  # §3.4.5: not to this link again (others may have it, new ones too)
            if state.delivery_failed:
                queue.failed([entry])  # delivery-count + 1; given up at the delivery limit
            else:
                queue.put_back([entry])
        elif isinstance(state, Rejected):
            # §3.4.3: "the receiving node has rejected the message ... the message is considered invalid"
            error = state.error
            condition = str(error.condition) if error is not None and error.condition else None
            description = error.description if error is not None and error.description else ""
            self.dead_letters(queue, entry, "rejected", description, condition=condition)
        else:
            queue.release(entry)  # an outcome of another kind: done with

    def _temporary_address(self) -> str:
        """A fresh address for a dynamic node (§3.5.3: a node made for that link): no node has it, and no client
        can guess it beforehand (a counter alone let a client attach to the next names first, and so receive the
        replies meant for another's temporary queue)."""
        while True:
            address = f"temp-queue://{self.container_id}/{next(self._dynamic_names)}.{secrets.token_hex(8)}"
            if address not in self.queues and address not in self.topics:
                return address

    # --- serving -----------------------------------------------------------------------------------------

    def expire_messages(self, now: float | None = None) -> int:
        """Take the messages expired at ``now`` (default: now) out of every queue and topic subscription, and give
        them up (dead-lettered or dropped); return how many. The broker calls it every ``expiry_interval``."""
        now = time.time() if now is None else now
        expired = 0
        queues = list(self.queues.values())
        for topic in self.topics.values():
            queues.extend(topic.subscriptions.values())
        for queue in queues:
            next_expiry = queue.next_expiry
            if next_expiry is not None and next_expiry <= now:
                expired += queue.expire(now)
        return expired

    def _report_memory(self) -> None:
        """Say when the memory limit starts holding producers back, and when it no longer does (once each).

        Its producers' sends simply wait for credit (a client sees a send that does not complete, or its own
        timeout): without a word from the broker, a flood with no consumer looked like a hung broker. RabbitMQ
        logs its memory alarm likewise. "Room again" waits for the messages held to fall to :data:`ROOM_AGAIN` of
        the limit, no producer waiting: producers a little faster than their consumers keep the memory at the
        limit, and each grant and refill would otherwise log the pair again at every sweep."""
        flow = self.flow
        if self._memory_full:
            if flow.starved or flow.held_bytes > (flow.max_memory or 0) * ROOM_AGAIN:
                return
            self._memory_full = False
            log.info("memory limit: room again (%s of messages held): producers get credit", _mib(flow.held_bytes))
            return
        if not flow.memory_full():
            return
        self._memory_full = True
        queues = list(self.queues.values())
        for topic in self.topics.values():
            queues.extend(topic.subscriptions.values())
        fullest = sorted((queue for queue in queues if len(queue)), key=len, reverse=True)[:3]
        log.warning(
            "memory limit reached: %d messages (%s) held within the %s the limit leaves messages "
            "(--max-memory, Broker(max_memory=...))%s; producers waiting for credit until consumers take messages: %d; "
            "most held by: %s",
            flow.held_count,
            _mib(flow.held_bytes),
            _mib(flow.max_memory or 0),
            # a queue at its share holds its producers back before the whole limit is reached: say so
            f", one queue holding {flow.queue_share:.0%} at most of what the others leave (--queue-share)"
            if flow.queue_share < 1
            else "",
            len(flow.starved),
            ", ".join(f"{queue.name} ({len(queue)})" for queue in fullest) or "none",
        )

    async def _sweep(self) -> None:
        """Every ``expiry_interval``: expired messages out of the queues, and credit to producers starved since the
        last sweep by credit other producers hold and do not use (:meth:`Flow.unstall`)."""
        while True:
            await anyio.sleep(self.expiry_interval)
            try:
                self.expire_messages()
                self.flow.unstall()
                self._report_memory()
            except Exception:  # a bug of ours must not stop the sweeps (nor the broker)
                log.exception("the broker's periodic sweep")

    async def _listen(self, port: int | None = None) -> anyio.abc.Listener[Any]:
        websocket = port is not None
        local_port = self.port if port is None else port
        try:
            sockets = await anyio.create_tcp_listener(local_host=self.host, local_port=local_port)
        except OSError as exc:
            where = f"{self._netloc_host}:{local_port}"
            reason = exc.strerror or str(exc)
            reason = reason[:1].lower() + reason[1:]
            if isinstance(exc, socket.gaierror):
                reason = f"the host {self.host!r} does not resolve ({reason})"
            raise ListenError(exc.errno, f"cannot listen on {where}: {reason}") from exc
        # anyio's accept loop ends at the first failed accept: a client holding all the descriptors stopped the broker
        listener: anyio.abc.Listener[Any] = steady(sockets)
        local_port = listener.extra(anyio.abc.SocketAttribute.local_port)
        if websocket:
            self.ws_port = local_port
        else:
            self.port = local_port
        if self.ssl_context is not None:
            # The TLS handshake is the first part of the handshake the time-out bounds (anyio's own bound, 30 s,
            # is not the broker's); the AMQP handshake then has as long again from the TLS one's end.
            tls_timeout = math.inf if self.handshake_timeout is None else self.handshake_timeout
            listener = TLSListener(listener, self.ssl_context, standard_compatible=False, handshake_timeout=tls_timeout)
        return listener

    async def serve(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Listen and serve until cancelled (with a ``data_dir``, the store is loaded before the first client is
        served).

        Raises:
            ListenError: the broker cannot listen on its address (before ``task_status.started()``).
        """
        if self.ws_port is not None:
            require_wsproto()
        listener = self._listener = await self._listen()
        ws_listener = None
        store = None
        try:
            if self.ws_port is not None:
                ws_listener = await self._listen(self.ws_port)
            store = self._open_store() if self.data_dir is not None and self.storage is None else self.storage
            # debug: `python -m amqp_async.broker` prints these on stdout, once
            log.debug("listening on %s%s", self.url, f" and {self.ws_url}" if ws_listener is not None else "")
            async with anyio.create_task_group() as group:
                if store is not None:
                    await group.start(store.run)
                group.start_soon(self._sweep)
                task_status.started()
                if ws_listener is not None:
                    group.start_soon(ws_listener.serve, self._handle_websocket)
                await listener.serve(self._handle)
        finally:
            if store is not None:
                store.close()
            with anyio.CancelScope(shield=True):
                await listener.aclose()
                if ws_listener is not None:
                    await ws_listener.aclose()

    async def _handle_websocket(self, stream: anyio.abc.ByteStream) -> None:
        """A WebSocket client: its upgrade request answered within ``handshake_timeout`` (as a TLS handshake is),
        then an AMQP connection as any."""
        # Before, a fixed 30 s whatever handshake_timeout said: under --handshake-timeout 3, a client trickling its
        # upgrade request (or saying nothing) still held its socket 30 s; None lifts this bound as it does TLS's.
        limit = math.inf if self.handshake_timeout is None else self.handshake_timeout
        try:
            with anyio.fail_after(limit):
                websocket = await server_handshake(stream, self.ws_path)
        except (OSError, anyio.BrokenResourceError, ssl.SSLError) as exc:
            if isinstance(exc, TimeoutError):
                log.info("WebSocket upgrade not received within %g s (handshake timeout): closed", limit)
            else:
                log.info("WebSocket handshake failed: %r", exc)
            with anyio.CancelScope(shield=True):
                await stream.aclose()
            return
        await self._handle(websocket)

    async def _handle(self, stream: anyio.abc.ByteStream) -> None:
        connection = ServerConnection(self, stream)
        self.connections.add(connection)
        try:
            await connection.run()
        except (anyio.BrokenResourceError, OSError, ssl.SSLError) as exc:
            log.info("connection %s failed: %r", connection.peer, exc)
        except Exception as exc:
            connection.fail(exc)
        finally:
            self.connections.discard(connection)
            connection.release()

    async def __aenter__(self) -> Broker:
        """Start serving; returns once the broker listens.

        Raises:
            ListenError: the broker cannot listen on its address.
        """
        group = anyio.create_task_group()
        await group.__aenter__()
        try:
            await group.start(self.serve)
        except BaseException as exc:
            group.cancel_scope.cancel()
            try:
                await group.__aexit__(type(exc), exc, exc.__traceback__)
            except BaseException:
                pass  # the same failure, wrapped by the task group: the caller gets it unwrapped
            raise
        self._group = group
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        assert self._group is not None
        self._group.cancel_scope.cancel()
        await self._group.__aexit__(None, None, None)


def _mib(count: int) -> str:
    """Bytes in MiB, for the log."""
    return f"{count / (1 << 20):.1f} MiB"
