"""Opening the data source's connections and links with the awaitable client, as its options say."""

from __future__ import annotations

from typing import Any

import anyio

from ..client import Connection, Receiver, Sender, connect
from ..errors import ConnectionError
from ._options import AmqpOptions

__all__ = ["close_quietly", "open_receiver", "open_sender", "wait_sent"]


def _describe(options: AmqpOptions) -> str:
    return options.get("url") or "the peer of connect.json (or amqp://localhost)"


async def _connect(options: AmqpOptions) -> Connection:
    try:
        with anyio.fail_after(options.connect_timeout):
            return await connect(**options.connect_kwargs())
    except TimeoutError as exc:
        if isinstance(exc, ConnectionError):
            raise  # a ConnectTimeout of connect() itself: it says what timed out
        raise ConnectionError(
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
    copy (§3.5.7: messages are seen, not taken).

    Raises:
        ConnectionError: the peer cannot be reached, refuses the connection, or takes too long.
        LinkError: the peer refused the link (its condition, e.g. ``amqp:not-found``, is in the error).
    """
    connection = await _connect(options)
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
    receiver = await _attach(connection, options, connection.open_receiver(options.address, **receiver_options))
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
    connection = await _connect(options)
    delivery = options.get("deliveryMode", "at-least-once")
    sender = await _attach(connection, options, connection.open_sender(options.address, delivery=delivery))
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
    ``enough`` come first the drain goes on in the background (the receiver grants no credit until it ends). With
    a peer whose drains are broken (:func:`_drain_breaks`) the answer is inferred instead: no transfer has come for
    ``quiet`` seconds while credit was left.
    """
    link = receiver._engine_link
    wanted = receiver.queued + receiver.credit if enough is None else enough

    def done() -> bool:
        return receiver.queued >= wanted or receiver.credit <= 0

    if done():
        return
    connection = receiver.connection
    if not _drain_breaks(connection):
        if not link.drain:
            link.grant_credit(link.link_credit, drain=True)
            connection._kick()
        while link.drain and not done():
            receiver._check()
            await connection._wait_state()
        receiver._check()
        return
    while not done():
        seen = receiver.queued
        with anyio.move_on_after(quiet) as silence:
            while receiver.queued == seen and not done():
                receiver._check()
                await connection._wait_state()
        if silence.cancelled_caught:
            return  # quiet for that long: nothing more to come now


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
