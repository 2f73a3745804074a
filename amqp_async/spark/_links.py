"""Opening the data source's connections and links with the awaitable client, as its options say."""

from __future__ import annotations

import logging
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio

from ..client import Backoff, Connection, Receiver, Sender, connect
from ..client._url import _redact as redact_url
from ..codec.delivery_states import Accepted, Released
from ..errors import (
    AuthenticationError,
    ConnectError,
    ConnectionError,
    ConnectionLost,
    ConnectTimeout,
    TLSError,
    TransactionError,
)
from ..protocol.delivery import Delivery as EngineDelivery
from ..protocol.serial import serial_add, serial_diff
from ._options import AmqpOptions

__all__ = [
    "check_alive",
    "check_transactions",
    "close_quietly",
    "open_receiver",
    "open_sender",
    "receive_batch",
    "release_late",
    "settle_all",
    "wait_sent",
]


log = logging.getLogger("amqp_async.spark")

_ACCEPTED = Accepted()
_RELEASED = Released()


def _describe(options: AmqpOptions) -> str:
    """The peer, for an error's text: the ``url`` option with its passwords hidden (the text goes into Spark's
    errors, logs and UI), or where ``connect()`` looks without it."""
    url = options.get("url")
    if not url:
        return "the peer of connect.json (or amqp://localhost)"
    return ",".join(redact_url(part) for part in url.split(","))


#: Errors that retrying cannot mend: the peer answered, and said no (credentials, TLS: a configuration to fix).
_NOT_RETRIED = (AuthenticationError, TLSError)


def _retry_delays() -> Backoff:
    """The pauses between attempts to reach a peer that is down or restarting (the client's reconnect delays: 0,
    0.1, 0.2, 0.4 ... seconds, at most 2, each shortened by up to a tenth at random so that the tasks of a stage do
    not all come back at once)."""
    return Backoff(initial=0.1, factor=2.0, maximum=2.0)


async def _open(options: AmqpOptions, attach: Callable[[Connection], Awaitable[Any]]) -> tuple[Connection, Any]:
    """Connect, and ``attach(connection)`` a link, within ``connectTimeoutMs``: a peer that is down (the
    connection refused, or lost before the link was attached: a broker restarting) is tried again after a pause
    (:func:`_retry_delays`) until that time has passed, so that a short restart of the broker does not fail a Spark
    task. Nothing has been received or sent then: trying again changes nothing but the time.

    Raises:
        ConnectError, ConnectionLost: the last attempt's error (naming the peer's address and the AMQP or IO
            condition), its text saying how many attempts were made over how long. AuthenticationError and
            TLSError at once: the peer answered, and trying again would not change its answer.
        LinkError: the peer refused the link (at once).
    """
    started = anyio.current_time()
    deadline = started + options.connect_timeout
    delays = _retry_delays()
    attempts = 0
    while True:
        attempts += 1
        try:
            connection = await _connect(options, deadline)
            return connection, await _attach(connection, options, attach(connection))
        except (ConnectError, ConnectionLost) as exc:
            if isinstance(exc, _NOT_RETRIED):
                raise
            now = anyio.current_time()
            if now >= deadline:
                _say_how_long(exc, options, attempts, now - started)
                raise
            if attempts == 1:
                log.warning(
                    "cannot reach the peer yet, trying again for up to %g s (connectTimeoutMs): %s",
                    options.connect_timeout,
                    exc,
                )
            await anyio.sleep(min(next(delays), deadline - now))  # the last attempt at the deadline


def _say_how_long(exc: ConnectError | ConnectionLost, options: AmqpOptions, attempts: int, elapsed: float) -> None:
    """Add to the last attempt's error how long the peer was tried (its type, condition, address and errno kept:
    ``except ConnectionRefusedError`` and the condition still tell what happened)."""
    if attempts > 1:
        exc.description += (
            f" (tried {attempts} times over {elapsed:.1f} s: connectTimeoutMs is {options.connect_timeout:g} s)"
        )
        exc.args = (exc.description,)


#: The least time an attempt to connect is given, in seconds (or connectTimeoutMs when less): the last attempt,
#: made at the deadline, fails as the peer makes it fail (refused...), not for want of time.
_LEAST_ATTEMPT = 1.0


async def _connect(options: AmqpOptions, deadline: float) -> Connection:
    """One attempt to connect, until ``deadline`` (the loop's clock), or for :data:`_LEAST_ATTEMPT`."""
    least = min(_LEAST_ATTEMPT, options.connect_timeout)
    try:
        with anyio.fail_after(max(deadline - anyio.current_time(), least)):
            return await connect(**options.connect_kwargs())
    except TimeoutError as exc:
        if isinstance(exc, ConnectionError):
            raise  # a ConnectTimeout of connect() itself: it says what timed out
        raise ConnectTimeout(
            f"connecting to {_describe(options)} took longer than connectTimeoutMs ({options.connect_timeout:g} s)"
        ) from None


async def _attach(connection: Connection, options: AmqpOptions, attach: Any) -> Any:
    try:
        with anyio.fail_after(options.connect_timeout):
            return await attach
    except BaseException:
        with anyio.move_on_after(5, shield=True):
            await connection.close()
        raise


async def open_receiver(options: AmqpOptions, *, browse: bool = False) -> tuple[Connection, Receiver]:
    """Connect and attach a receiver from the ``address`` option with manual credit (the caller grants it).

    The receiver takes the ``selector`` and ``subscriptionName`` options; ``browse`` asks for distribution-mode
    copy (§3.5.7: messages are seen, not taken). A receiver that takes messages names released as its source's
    default-outcome (§3.5.3, "the outcome to be used for transfers that have not reached a terminal state at the
    receiver when the transfer is settled, including when the source is destroyed"): the source settles what it
    does not consume as released itself (§3.4.4), and what it leaves unsettled as its link ends (a close that cut
    a settlement short, what came after :func:`release_late` gave up) is then given back without counting a failed
    delivery towards a broker's delivery limit, by a broker that honours it (without it, the outcome is the
    broker's choice: modified with delivery-failed, for some).

    A peer that is down is tried again within ``connectTimeoutMs`` (:func:`_open`).

    Raises:
        ConnectionError: the peer cannot be reached within ``connectTimeoutMs``, refuses the connection (SASL,
            TLS), or takes too long.
        LinkError: the peer refused the link (its condition, e.g. ``amqp:not-found``, is in the error).
    """
    receiver_options: dict[str, Any] = {"credit": 0}
    selector = options.get("selector")
    if selector:
        receiver_options["selector"] = selector
    subscription = options.get("subscriptionName")
    if subscription:
        # §3.5.3: a durable source that never expires keeps the subscription's state between attaches of this name.
        receiver_options.update(name=subscription, durable=True, expiry_policy="never")
    if browse:
        receiver_options["distribution_mode"] = "copy"
    else:
        receiver_options["default_outcome"] = _RELEASED
    connection, receiver = await _open(
        options, lambda connection: connection.open_receiver(options.address, **receiver_options)
    )
    # With manual credit the client cannot know how much a broker that overshoots a top-up (RabbitMQ before 4.0)
    # may send beyond it: at most what the reader ever grants.
    receiver._engine_link.overshoot_tolerance = max(int(options.get("credit", 1000)), 1)
    return connection, receiver


async def open_sender(options: AmqpOptions) -> tuple[Connection, Sender]:
    """Connect and attach a sender to the ``address`` option (none: an anonymous relay, routing by each
    message's ``to``), with the ``deliveryMode`` option's guarantee.

    Raises:
        ConnectionError, LinkError: as :func:`open_receiver`.
    """
    delivery = options.get("deliveryMode", "at-least-once")
    connection, sender = await _open(
        options, lambda connection: connection.open_sender(options.address, delivery=delivery)
    )
    return connection, sender


def _drain_breaks(connection: Connection) -> bool:
    """True for peers known to fail a drain: RabbitMQ 3's AMQP 1.0 plugin closes the session when a drain finds a
    classic queue with credit left (rabbitmq-server#7119, fixed after 3.10.8, the version Debian ships)."""
    properties = connection.remote_properties or {}
    product = str(properties.get("product", ""))
    version = str(properties.get("version", ""))
    return product == "RabbitMQ" and version.startswith("3.")


async def wait_sent(receiver: Receiver, quiet: float, enough: int | None = None) -> None:
    """Return once the sender has sent what it has now (within the credit granted), or once ``enough``
    deliveries are queued, whichever comes first.

    A drain (§2.6.7) says so exactly: the sender sends what it can and gives back the rest of the credit. When
    ``enough`` come first the drain goes on in the background (the receiver grants no credit until it ends). A
    sender that neither sends nor answers for :data:`_PATIENCE` seconds is taken to have nothing more
    (:func:`_call_off_drain`). With a peer whose drains are broken (:func:`_drain_breaks`) the answer is inferred
    instead: no transfer has come for ``quiet`` seconds while credit was left.
    """
    link = receiver._engine_link
    wanted = receiver.queued + receiver.credit if enough is None else enough

    def done() -> bool:
        # A delivery under way has used its credit already: with none left, it is still to come whole (a batch
        # read ended with a message of two frames half received, taken for the queue's end).
        return receiver.queued >= wanted or (receiver.credit <= 0 and link.partial is None)

    if done():
        return
    connection = receiver.connection
    if not _drain_breaks(connection):
        if not link.drain and receiver.credit > 0:
            link.grant_credit(link.link_credit, drain=True)
            connection._kick()
        while (link.drain or link.partial is not None) and not done():
            before = receiver.queued
            with anyio.move_on_after(_PATIENCE) as silence:
                while receiver.queued == before and (link.drain or link.partial is not None) and not done():
                    receiver._check()
                    await connection._wait_state()
            if silence.cancelled_caught and link.partial is None:
                _call_off_drain(receiver)
                break
        receiver._check()
        return
    while not done():
        seen = receiver.queued, link.partial
        with anyio.move_on_after(quiet) as silence:
            while (receiver.queued, link.partial) == seen and not done():
                receiver._check()
                await connection._wait_state()
        if silence.cancelled_caught:
            return  # quiet for that long: nothing more to come now


def _call_off_drain(receiver: Receiver) -> None:
    """The sender neither sent nor answered a drain for :data:`_PATIENCE` seconds: a peer that ignores drains (a
    python-qpid-proton application that never calls ``drained()``) held a batch read, or the driver's receiver, for
    ever (its heartbeats keep the connection alive). Take it as nothing more now, and call the drain off (§2.6.7: a
    flow with drain false), so that credit is granted again as usual."""
    link = receiver._engine_link
    if link.drain and not receiver.is_closed:
        link.grant_credit(link.link_credit)
        receiver.connection._kick()


async def receive_batch(
    receiver: Receiver,
    budget: int,
    window: int,
    first_wait: float,
    quiet: float,
    taken: list[EngineDelivery] | None = None,
    max_bytes: int | None = None,
) -> tuple[list[EngineDelivery], bool]:
    """Up to ``budget`` deliveries: what the sender has now. Returns them, and True when the sender was found to
    have no more (drained: fewer than ``budget`` came because there were no more). ``taken``: the list to append
    them to as they come (another thread may read it meanwhile: appends are atomic).

    The deliveries are the engine's (``.payload``, settled with :func:`settle_all`): a task handles tens of
    thousands at a time, and the awaitable API's per-delivery object and settlement would double the cost of
    receiving. Deliveries the sender aborted (§2.6.14) are dropped: they carry no message.

    With ``first_wait`` > 0 it waits that long for a first delivery (none, and the sender says it has none: an idle
    source, drained). Then it keeps
    up to ``window`` credit out, topped up as deliveries come, so that the sender streams without waiting for a round
    trip, and never more than ``budget`` less what was taken and what waits, so nothing beyond the budget is sent.
    When no transfer comes for a moment it asks the sender whether it has more (:func:`_nothing_more`).

    ``max_bytes``: stop once the payloads taken reach that many bytes (not drained: the rest is for a later
    batch), and keep the credit out to about what the bytes left allow (one credit until the first message shows
    the size), so that a backlog of large messages is not all held in one task's memory. The first delivery is
    always taken, however large: the batch moves on. Deliveries that come beyond the bound stay in the link's
    queue, not taken: :func:`settle_all` releases them, and :func:`release_late` those still on their way then.
    """
    link = receiver._engine_link
    connection = receiver.connection
    drains = not _drain_breaks(connection)
    if taken is None:
        taken = []
    incoming = link.incoming
    room = [max_bytes]  # bytes left to take (None: no bound), in a list for the closures to change

    def full() -> bool:
        left = room[0]
        return len(taken) >= budget or (left is not None and left <= 0)

    def take() -> None:
        while incoming and not full():
            delivery = incoming.popleft()
            if not delivery.aborted:
                taken.append(delivery)
                if room[0] is not None:
                    room[0] -= len(delivery.payload)

    def top_up() -> None:
        """Grant credit up to the window once half of it is used (one flow frame per half window)."""
        wanted = min(window, budget - len(taken))
        left = room[0]
        if left is not None:
            if taken:
                # As many more as the bytes left hold, at the average size so far (at least one: the bound is
                # checked as they are taken).
                average = max(1, ((max_bytes or 0) - left) // len(taken))
                wanted = min(wanted, max(1, -(-left // average)))
            else:
                # The size not known yet: one message shows it. A window granted blind let a backlog of large
                # messages arrive whole (credit x size) before the first was taken and the bound could apply.
                wanted = min(wanted, 1)
        wanted -= len(incoming)
        if wanted > link.link_credit and 2 * link.link_credit <= wanted:
            link.grant_credit(wanted, drain=link.drain)  # a drain asked for stays asked for
            connection._kick()

    if first_wait > 0:
        top_up()
        with anyio.move_on_after(first_wait):
            while not incoming:
                receiver._check()
                await connection._wait_state()
        # Nothing came: ask the sender rather than take the credit back blind. A message it sent as the wait ended
        # is on its way, and comes before the answer (then it is taken, as any first message); taken back blind,
        # the credit left it to come after the batch was settled, with no outcome until the connection closed.
        if not incoming and await _nothing_more(receiver, quiet, drains, top_up):
            _stop_credit(receiver, drains and not link.drain)
            return taken, True
    drained = False
    answered = True  # the last drain asked for was answered, or none is under way
    while True:
        take()
        if full():
            break
        if await _nothing_more(receiver, quiet, drains, top_up):
            answered = not link.drain  # still under way: unanswered for _PATIENCE, a peer that ignores drains
            take()
            drained = not full()
            break
    _stop_credit(receiver, drains and answered)
    return taken, drained


#: Seconds without a transfer after which a receiver asks the sender whether it has more.
_PAUSE = 0.05
#: Seconds without a transfer after which a sender that keeps saying it has more is taken to have none.
_PATIENCE = 30.0


async def _nothing_more(receiver: Receiver, quiet: float, drains: bool, top_up: Callable[[], None]) -> bool:
    """Wait for the next transfer; True when the sender has nothing more to send now. ``top_up`` grants credit up
    to the window: called before each wait (a drain may have taken the credit back meanwhile).

    The receiver streams with plain credit, and only after a pause of :data:`_PAUSE` seconds without a transfer asks
    the sender (draining all the while would cost a round trip each time a busy sender runs short):

    - with a drain (§2.6.7): the sender sends what it has and gives back the rest of the credit. Giving credit back
      is not by itself "nothing more": a sender also gives back what its session window (§2.5.6) held back (the
      embedded broker does), so only a drain that brought not one message, with our window open, means it;
    - with a peer whose drains are broken (:func:`_drain_breaks`), a flow with echo (§2.7.4): an answer with
      ``available`` 0 (RabbitMQ 3 reports its queue's ready messages there; the answer follows every transfer it
      sent before) means it. One that says more are available, or does not answer within ``quiet`` seconds (a busy
      peer), is asked again.

    Either way, :data:`_PATIENCE` seconds without a transfer end the wait.
    """
    link = receiver._engine_link
    connection = receiver.connection
    seen = len(link.incoming)
    started = anyio.current_time()

    def transfer() -> bool:
        return len(link.incoming) > seen

    async def wait_until(ready: Any, timeout: float) -> bool:
        with anyio.move_on_after(timeout):
            while not ready():
                receiver._check()
                await connection._wait_state()
            return True
        return False

    while True:
        top_up()
        if await wait_until(transfer, _PAUSE):
            return False
        if drains:
            link.drained_credit = 0
            link.grant_credit(link.link_credit, drain=True)
            connection._kick()
            answered = await wait_until(lambda: not link.drain or transfer(), _PATIENCE)
            if transfer():
                return False
            if answered and link.drained_credit:
                return True
        else:
            link.available = -1  # no flow has answered yet (a flow always sets it, to 0 when it says nothing)
            link._write_flow(echo=True)
            connection._kick()
            answered = await wait_until(lambda: link.available >= 0 or transfer(), quiet)
            if transfer():
                return False
            if answered and link.available == 0:
                return True
        if anyio.current_time() - started >= _PATIENCE:
            return True  # nothing for that long, whatever the sender says


@dataclass(frozen=True)
class _TakenBack:
    """How :func:`_stop_credit` took a receiver's credit back, for :func:`release_late` to know when nothing more
    can come.

    Attributes:
        limit: the link's delivery-count once every credit the sender could still use is used (§2.6.7: the sender
            sends no more than its link-credit): the delivery-count plus the credit when it was taken back.
        limit_holds: the sender keeps to its credit (not RabbitMQ 3, which overshoots it: rabbitmq-server#2597).
        drains: the sender answers drains (it did during the batch).
    """

    limit: int
    limit_holds: bool
    drains: bool


#: What :func:`_stop_credit` did, by receiver, until :func:`release_late` reads it.
_TAKEN_BACK: weakref.WeakKeyDictionary[Receiver, _TakenBack] = weakref.WeakKeyDictionary()


def _stop_credit(receiver: Receiver, drains: bool) -> None:
    """Take back the credit still out (a sender that has not used it could send more than was asked), and ask the
    sender to answer at once (a flow with echo, §2.7.4): transfers it sent before it saw the credit taken back are
    still on their way (§2.6.7: "the receiver MAY either handle the excess messages normally or detach the
    link"), and its answer comes after them, so once the answer is here nothing more can come
    (:func:`release_late`, which asks again with a drain a sender that does not answer: ``drains``). With no credit
    left (all of it used, or given back by a drain), nothing is on its way but the rest of a delivery under way,
    and no answer is asked for."""
    link = receiver._engine_link
    credit = link.link_credit
    _TAKEN_BACK[receiver] = _TakenBack(
        serial_add(link.delivery_count, credit), not _drain_breaks(receiver.connection), drains
    )
    if credit and not receiver.is_closed:
        link.grant_credit(0)
        link.available = -1  # no answer yet: a flow always sets it, to 0 when it says nothing
        link._write_flow(echo=True)
        receiver.connection._kick()


async def check_alive(receiver: Receiver) -> None:
    """Raise the error that ended ``receiver``'s link, session or connection, if one has (settling would fail)."""
    receiver._check()


async def settle_all(
    receiver: Receiver, deliveries: list[EngineDelivery], accept: bool, *, release_unread: bool = True
) -> None:
    """Accept every delivery of :func:`receive_batch` (§3.4.2), or release it (§3.4.4: not processed; the broker
    delivers it again, and its delivery-count does not grow): settled at once (receiver settle mode first), in
    dispositions that cover runs of them. The deliveries that came after the batch was taken (in flight when its
    credit was taken back, or beyond its byte bound) are released too: left unsettled, they would come back only
    as the link closes, and a broker may count that as a failed delivery (RabbitMQ's quorum queues do, towards
    their delivery limit). Those still on their way are for :func:`release_late`; with ``release_unread`` False,
    so are those (the caller calls it next): released once nothing more can come, a drain it may ask cannot bring
    them again.

    Raises:
        LinkDetached, ConnectionError...: the link or its connection has ended (the peer settles them: it delivers
            them again).
    """
    receiver._check()
    link = receiver._engine_link
    state = _ACCEPTED if accept else _RELEASED
    for delivery in deliveries:
        link.settle(delivery, state)
    receiver.connection._kick()
    if release_unread:
        _release_incoming(receiver)


#: Seconds to wait for the sender's answer once the credit was taken back, at most: a round trip for a sender that
#: answers; what a task's end waits for one that answers neither the echo nor the drain it was asked (a
#: python-qpid-proton application that ignores drains), while Spark takes its rows.
_IN_FLIGHT_PATIENCE = 2.0
#: Seconds without an answer to the echo after which the sender is asked with a drain instead (python-qpid-proton's
#: engine answers no echo).
_ECHO_PATIENCE = 0.2


async def release_late(receiver: Receiver, patience: float | None = None) -> int:
    """Release (§3.4.4) the deliveries that come after :func:`settle_all`: those the sender sent before it saw
    the credit taken back (:func:`_stop_credit`), and the rest of one under way. Returns how many.

    Left unsettled to the connection's close, their outcome was the broker's (the embedded broker and
    python-qpid-proton put them back; a broker may count a delivery left unsettled at a link's end as a failed one,
    towards its delivery limit): every delivery a task receives gets an outcome of its own, released for those
    that are not in its batch. Waits until nothing more can come, and no delivery is under way:

    - the sender answered the echo :func:`_stop_credit` asked for (its answer follows every transfer it sent
      before): the embedded broker and RabbitMQ answer at once;
    - or the link's delivery-count reached the end of the credit taken back (§2.6.7: the sender sends no more than
      its credit): every credit was used (a sender with more messages than credit);
    - or, asked after :data:`_ECHO_PATIENCE` seconds without an answer (python-qpid-proton's engine answers no
      echo), the sender answered a drain of the credit it may still use (the credit's end less the
      delivery-count: never more than it had): it used that credit, or gave it back by advancing its
      delivery-count to the credit's end (§2.6.7).

    At most ``patience`` seconds (:data:`_IN_FLIGHT_PATIENCE` unless given); what a sender sends after that is left
    to the close, as before. A link or connection that has ended settles nothing (its peer decides)."""
    link = receiver._engine_link
    if patience is None:
        patience = _IN_FLIGHT_PATIENCE
    taken_back = _TAKEN_BACK.pop(receiver, None)

    def nothing_on_its_way() -> bool:
        if link.partial is not None:
            return False
        if link.available >= 0:
            return True  # the answer to the echo (or to the drain asked since: it too follows the transfers)
        # Exactly at the credit's end: past it, the sender overshoots its credit (a python-qpid-proton application
        # sending "while sender.credit", which goes negative once credit is taken back below what is on its way),
        # and only its answer, or the patience, ends the wait.
        return taken_back is not None and taken_back.limit_holds and link.delivery_count == taken_back.limit

    with anyio.move_on_after(patience):
        if taken_back is not None and taken_back.drains and taken_back.limit_holds:
            await _wait_until(receiver, nothing_on_its_way, _ECHO_PATIENCE)
            if not nothing_on_its_way() and not receiver.is_closed:
                _drain_the_rest(receiver, taken_back.limit)
        await _wait_until(receiver, nothing_on_its_way, patience)
    # Released once nothing more comes, not as they come: a message released goes back to the queue, and the drain
    # would bring it again.
    return 0 if receiver.is_closed else _release_incoming(receiver)


def _drain_the_rest(receiver: Receiver, limit: int) -> None:
    """Ask the sender with a drain (§2.6.7) to use the credit it may still use of the credit taken back, or give it
    back: a grant of the credit's end (``limit``) less the link's delivery-count, on which the sender's credit is
    that end less its own delivery-count (its transfers still on their way counted): never more than it had."""
    link = receiver._engine_link
    rest = serial_diff(limit, link.delivery_count)
    if rest > 0:
        link.grant_credit(rest, drain=True)
        receiver.connection._kick()


async def _wait_until(receiver: Receiver, done: Callable[[], bool], timeout: float) -> None:
    """Wait until ``done()`` (or the link ends), for at most ``timeout`` seconds."""
    connection = receiver.connection
    with anyio.move_on_after(timeout):
        while not done() and not receiver.is_closed:
            await connection._wait_state()


def _release_incoming(receiver: Receiver) -> int:
    """Release what waits in ``receiver``'s queue, and send the dispositions; return how many."""
    link = receiver._engine_link
    released = 0
    incoming = link.incoming
    while incoming:
        delivery = incoming.popleft()
        if not delivery.aborted:  # (an aborted delivery is settled: it carries no message)
            link.settle(delivery, _RELEASED)
            released += 1
    if released:
        receiver.connection._kick()
    return released


async def check_transactions(options: AmqpOptions) -> None:
    """Make sure the peer has a transaction coordinator (§4.2): declare a transaction and roll it back.

    Raises:
        TransactionError: it has none (RabbitMQ 3.x), or refused the declare; the message says what to do.
        ConnectionError: the peer cannot be reached.
    """
    connection, _ = await _open(options, _nothing_to_attach)
    try:
        with anyio.fail_after(options.connect_timeout):
            transaction = await connection.transaction()
            await transaction.rollback()
    except TransactionError as exc:
        raise TransactionError(
            f"option 'transactional': the peer at {_describe(options)} cannot run AMQP transactions ({exc}); "
            "RabbitMQ 3.x, for one, has no transaction coordinator. Write without 'transactional' (at-least-once, "
            "with deterministic message ids to drop duplicates)",
            condition=exc.condition,
        ) from exc
    except TimeoutError:
        raise TransactionError(
            f"option 'transactional': the peer at {_describe(options)} did not answer a transaction declare within "
            f"connectTimeoutMs ({options.connect_timeout:g} s)"
        ) from None
    finally:
        await close_quietly(connection)


async def _nothing_to_attach(connection: Connection) -> None:
    """No link: a connection of its own is all :func:`check_transactions` opens with :func:`_open`."""


async def close_quietly(connection: Connection | None) -> None:
    """Close ``connection`` without raising (within 5 s): the data source is already ending, maybe on an error
    that must not be hidden."""
    if connection is None:
        return
    with anyio.move_on_after(5):
        try:
            await connection.close()
        except Exception:
            pass
