"""The options of a link, checked and resolved once, when ``open_sender`` / ``open_receiver`` is called.

The public methods take them as keyword-only parameters (so a misspelt one is a type error, and a TypeError naming
the method at run time); :func:`sender_options` and :func:`receiver_options` check their values and resolve them
into a frozen :class:`SenderOptions` / :class:`ReceiverOptions`: the termini and settle modes an attach carries,
built once and reused by every attach of the link (the first, and each one after a reconnect). Nothing here runs
per message.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Literal, TypeAlias

import attrs

from ..codec.delivery_states import Accepted, Modified, Rejected, Released
from ..codec.performatives import RCV_FIRST, RCV_SECOND, SND_MIXED, SND_SETTLED, SND_UNSETTLED
from ..codec.terminus import Source, Target
from ..protocol.serial import MASK
from ..types import Described, symbol
from ._arguments import check_address, check_encodable

__all__ = [
    "DeliveryMode",
    "DistributionMode",
    "ExpiryPolicy",
    "OnError",
    "Outcome",
    "ReceiverOptions",
    "SenderOptions",
    "receiver_options",
    "selector",
    "sender_options",
]

DeliveryMode: TypeAlias = Literal["at-most-once", "at-least-once", "exactly-once"]
"""The delivery guarantee of a link (§3.4, §2.6.12): ``"at-most-once"`` (the sender settles first: nothing is
confirmed), ``"at-least-once"`` (the receiver settles first; the default) or ``"exactly-once"`` (the receiver
settles second, once the sender has settled)."""

OnError: TypeAlias = Literal["modify", "release", "reject"]
"""What ``async with delivery:`` does with a delivery when its block raises: ``"modify"`` (modified with
delivery-failed, §3.4.5: the peer counts the failed attempt and delivers it again), ``"release"`` (released, §3.4.4:
delivered again, the attempt not counted) or ``"reject"`` (rejected, §3.4.3, with the exception as the error: not
delivered again)."""

ExpiryPolicy: TypeAlias = Literal["link-detach", "session-end", "connection-close", "never"]
"""A terminus expiry policy (§3.5.6)."""

DistributionMode: TypeAlias = Literal["move", "copy"]
"""A distribution mode (§3.5.7): ``"move"`` takes messages, ``"copy"`` browses them."""

Outcome: TypeAlias = Accepted | Rejected | Released | Modified
"""A terminal outcome of a delivery (§3.4)."""

# Delivery guarantees (§3.4 and §2.6.12) as settle modes.
_GUARANTEES: dict[str, tuple[int, int]] = {
    "at-most-once": (SND_SETTLED, RCV_FIRST),
    "at-least-once": (SND_UNSETTLED, RCV_FIRST),
    "exactly-once": (SND_UNSETTLED, RCV_SECOND),
}
_EXPIRY_POLICIES = ("link-detach", "session-end", "connection-close", "never")
_DISTRIBUTION_MODES = ("move", "copy")
_ON_ERROR = ("modify", "release", "reject")


def selector(expression: str) -> dict[str, Described]:
    """A source filter map holding a JMS message selector (``apache.org:selector-filter:string``), as proton's
    ``Selector`` builds it: pass it as ``filter=`` to :meth:`Session.open_receiver` (or use ``selector=``)."""
    return {symbol("selector"): Described(symbol("apache.org:selector-filter:string"), expression)}


@attrs.frozen(kw_only=True)
class _LinkOptions:
    """What senders and receivers share: the fields of the attach (§2.7.3) besides the termini."""

    #: The link's name; None for a unique one (``<container-id>-<kind>-<uuid>``).
    name: str | None
    snd_settle_mode: int
    rcv_settle_mode: int
    properties: dict[Any, Any] | None
    offered_capabilities: tuple[symbol, ...] | None
    desired_capabilities: tuple[symbol, ...] | None
    max_message_size: int | None

    def link_name(self, container_id: str, kind: str) -> str:
        return self.name or f"{container_id}-{kind}-{uuid.uuid4()}"

    def _attach_fields(self) -> dict[str, Any]:
        return {
            "snd_settle_mode": self.snd_settle_mode,
            "rcv_settle_mode": self.rcv_settle_mode,
            "properties": self.properties,
            "offered_capabilities": self.offered_capabilities,
            "desired_capabilities": self.desired_capabilities,
            "max_message_size": self.max_message_size,
        }


@attrs.frozen(kw_only=True)
class SenderOptions(_LinkOptions):
    """A sender's options, resolved: its termini and settle modes (see :meth:`Session.open_sender`)."""

    target: Target
    source: Source
    initial_delivery_count: int

    @property
    def address(self) -> str | None:
        address = self.target.address
        return None if address is None else str(address)

    def attach_arguments(self) -> dict[str, Any]:
        """The keyword arguments of the engine's ``attach_sender``."""
        return {
            "target": self.target,
            "source": self.source,
            "initial_delivery_count": self.initial_delivery_count,
            **self._attach_fields(),
        }


@attrs.frozen(kw_only=True)
class ReceiverOptions(_LinkOptions):
    """A receiver's options, resolved: its termini, settle modes, prefetch and failure outcome (see
    :meth:`Session.open_receiver`)."""

    source: Source
    target: Target
    credit: int
    on_error: OnError

    @property
    def address(self) -> str | None:
        address = self.source.address
        return None if address is None else str(address)

    def attach_arguments(self) -> dict[str, Any]:
        """The keyword arguments of the engine's ``attach_receiver``."""
        return {"source": self.source, "target": self.target, **self._attach_fields()}


# ---------------------------------------------------------------------------------------------------------------
# Checking and resolving


def _symbols(value: str | Sequence[str] | None, name: str) -> tuple[symbol, ...] | None:
    """Capabilities (§2.7.3, §3.5.3): one symbol or several; a str is one capability, not its letters."""
    if value is None:
        return None
    if isinstance(value, str):
        return (symbol(value),)
    if not isinstance(value, Sequence) or not all(isinstance(item, str) for item in value):
        raise TypeError(f"{name} must be a str or a sequence of str, got {value!r}")
    return tuple(symbol(item) for item in value)


def _fields(value: Mapping[str, object] | None, name: str) -> dict[Any, Any] | None:
    """A ``fields`` map (§2.8.19: symbol keys; str keys are sent as symbols)."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise TypeError(f"{name} must be a mapping with str keys, got {type(value).__name__}")
    fields = dict(value)
    check_encodable(fields, name)
    return fields


def _settle_modes(
    delivery: str, snd_settle_mode: int | None, rcv_settle_mode: int | None, *, sender: bool
) -> tuple[int, int]:
    try:
        snd, rcv = _GUARANTEES[delivery]
    except KeyError:
        raise ValueError(f"delivery must be one of {sorted(_GUARANTEES)}, got {delivery!r}") from None
    if snd_settle_mode is not None:
        if snd_settle_mode not in (SND_UNSETTLED, SND_SETTLED, SND_MIXED):
            raise ValueError(
                f"snd_settle_mode must be 0 (unsettled), 1 (settled) or 2 (mixed), got {snd_settle_mode!r}"
            )
        # A sender's result type follows its delivery guarantee (send() gives the outcome, or None unconfirmed):
        # the settle mode may refine it, not contradict it.
        if sender and delivery == "at-most-once" and snd_settle_mode != SND_SETTLED:
            # Its own advice: telling one who passed delivery='at-most-once' to pass it (as below) would help none.
            raise ValueError(
                "delivery='at-most-once' sends every message settled (snd_settle_mode=1): leave snd_settle_mode out, "
                "or choose a confirmed delivery ('at-least-once', 'exactly-once') for settle mode 0 or 2 "
                f"(got delivery={delivery!r}, snd_settle_mode={snd_settle_mode})"
            )
        if sender and snd_settle_mode == SND_SETTLED and delivery != "at-most-once":
            raise ValueError(
                "snd_settle_mode=1 (settled) is what delivery='at-most-once' means, and only that: "
                f"pass delivery='at-most-once' instead (got delivery={delivery!r}, snd_settle_mode={snd_settle_mode})"
            )
        snd = snd_settle_mode
    if rcv_settle_mode is not None:
        if rcv_settle_mode not in (RCV_FIRST, RCV_SECOND):
            raise ValueError(f"rcv_settle_mode must be 0 (first) or 1 (second), got {rcv_settle_mode!r}")
        rcv = rcv_settle_mode
    return snd, rcv


def _terminus_fields(
    durable: bool | int | None,
    expiry_policy: str | None,
    timeout: int | None,
    dynamic: bool,
    dynamic_node_properties: Mapping[str, object] | None,
) -> dict[str, Any]:
    """The terminus fields (§3.5.3, §3.5.4) given; ``durable=True`` means unsettled-state durability (2, as proton's
    DurableSubscription sets it) and ``False`` none (0), §3.5.5."""
    fields: dict[str, Any] = {}
    if durable is not None:
        if isinstance(durable, bool):
            durable = 2 if durable else 0
        if durable not in (0, 1, 2):
            raise ValueError(f"durable must be True, False, 0, 1 or 2 (§3.5.5), got {durable!r}")
        fields["durable"] = durable
    if expiry_policy is not None:
        if expiry_policy not in _EXPIRY_POLICIES:
            raise ValueError(f"expiry_policy must be one of {list(_EXPIRY_POLICIES)} (§3.5.6), got {expiry_policy!r}")
        fields["expiry_policy"] = symbol(expiry_policy)
    if timeout is not None:
        if isinstance(timeout, bool) or not isinstance(timeout, int):
            raise TypeError(f"timeout must be whole seconds (an int), got {type(timeout).__name__}")
        if not 0 <= timeout <= 0xFFFFFFFF:
            raise ValueError(f"timeout must be seconds from 0 to 2**32 - 1 (a uint, §3.5.3), got {timeout!r}")
        fields["timeout"] = timeout
    if dynamic:
        fields["dynamic"] = True
    if dynamic_node_properties is not None:
        fields["dynamic_node_properties"] = _fields(dynamic_node_properties, "dynamic_node_properties")
    return fields


def sender_options(
    target: str | None,
    *,
    name: str | None = None,
    delivery: DeliveryMode = "at-least-once",
    snd_settle_mode: int | None = None,
    rcv_settle_mode: int | None = None,
    source: str | Source | None = None,
    durable: bool | int | None = None,
    expiry_policy: ExpiryPolicy | None = None,
    timeout: int | None = None,
    dynamic: bool = False,
    dynamic_node_properties: Mapping[str, object] | None = None,
    capabilities: str | Sequence[str] | None = None,
    properties: Mapping[str, object] | None = None,
    offered_capabilities: str | Sequence[str] | None = None,
    desired_capabilities: str | Sequence[str] | None = None,
    max_message_size: int | None = None,
    initial_delivery_count: int = 0,
) -> SenderOptions:
    """Check the options of ``open_sender`` and resolve them (see :meth:`Session.open_sender` for each).

    Raises:
        ValueError, TypeError: an option out of its range or of the wrong type, naming it.
    """
    snd, rcv = _settle_modes(delivery, snd_settle_mode, rcv_settle_mode, sender=True)
    check_address(target, "target")
    _check_name(name)
    if not isinstance(source, Source):
        check_address(source, "source")
        source = Source(address=source)
    if isinstance(initial_delivery_count, bool) or not isinstance(initial_delivery_count, int):
        raise TypeError(f"initial_delivery_count must be an int, got {type(initial_delivery_count).__name__}")
    if not 0 <= initial_delivery_count <= 0xFFFFFFFF:
        raise ValueError(
            f"initial_delivery_count must be a sequence number (0 to 2**32 - 1), got {initial_delivery_count}"
        )
    terminus = Target(
        address=target,
        capabilities=_symbols(capabilities, "capabilities"),
        **_terminus_fields(durable, expiry_policy, timeout, dynamic, dynamic_node_properties),
    )
    check_encodable(terminus, "the target")
    check_encodable(source, "source")
    return SenderOptions(
        name=name,
        target=terminus,
        source=source,
        snd_settle_mode=snd,
        rcv_settle_mode=rcv,
        properties=_fields(properties, "properties"),
        offered_capabilities=_symbols(offered_capabilities, "offered_capabilities"),
        desired_capabilities=_symbols(desired_capabilities, "desired_capabilities"),
        max_message_size=_message_size(max_message_size),
        initial_delivery_count=initial_delivery_count,
    )


def _check_name(name: object) -> None:
    """A link's name (§2.6.1: a string, unique among the links between the two containers), or None for one made
    up."""
    if name is not None and not isinstance(name, str):
        raise TypeError(f"name must be a str or None, got {type(name).__name__}")


def _message_size(value: int | None) -> int | None:
    """A max-message-size option: None or 0 for no limit (§2.7.3: "If this field is zero or unset, there is no
    maximum size imposed by the link endpoint"), else a positive number of bytes (a uint: below 2**64)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"max_message_size must be an int (bytes) or None, got {value!r}")
    if not 0 <= value < 1 << 64:
        raise ValueError(f"max_message_size must be between 0 and 2**64 - 1 bytes (0: no limit), got {value!r}")
    return value or None


def receiver_options(
    source: str | None,
    *,
    credit: int = 100,
    name: str | None = None,
    delivery: DeliveryMode = "at-least-once",
    snd_settle_mode: int | None = None,
    rcv_settle_mode: int | None = None,
    on_error: OnError = "modify",
    dynamic: bool = False,
    dynamic_node_properties: Mapping[str, object] | None = None,
    durable: bool | int | None = None,
    expiry_policy: ExpiryPolicy | None = None,
    timeout: int | None = None,
    distribution_mode: DistributionMode | None = None,
    filter: Mapping[str, object] | None = None,  # noqa: A002 - the source's field (§3.5.3)
    selector: str | None = None,
    capabilities: str | Sequence[str] | None = None,
    default_outcome: Outcome | None = None,
    outcomes: Sequence[str] | None = None,
    properties: Mapping[str, object] | None = None,
    offered_capabilities: str | Sequence[str] | None = None,
    desired_capabilities: str | Sequence[str] | None = None,
    max_message_size: int | None = None,
    target: str | Target | None = None,
) -> ReceiverOptions:
    """Check the options of ``open_receiver`` and resolve them (see :meth:`Session.open_receiver` for each).

    Raises:
        ValueError, TypeError: an option out of its range or of the wrong type, naming it.
    """
    snd, rcv = _settle_modes(delivery, snd_settle_mode, rcv_settle_mode, sender=False)
    if isinstance(credit, bool) or not isinstance(credit, int) or credit < 0:
        raise ValueError(f"credit must be an int >= 0, got {credit!r}")
    if credit > MASK:  # §2.7.4: link-credit is a uint
        raise ValueError(f"credit must be at most 2**32 - 1 (link-credit is a uint, §2.7.4), got {credit}")
    if on_error not in _ON_ERROR:
        raise ValueError(f"on_error must be one of {list(_ON_ERROR)}, got {on_error!r}")
    if distribution_mode is not None and distribution_mode not in _DISTRIBUTION_MODES:
        raise ValueError(f"distribution_mode must be 'move' or 'copy' (§3.5.7), got {distribution_mode!r}")
    filters = _fields(filter, "filter")
    if selector is not None:
        filters = {**(filters or {}), **_selector(selector)}
    if default_outcome is not None and not isinstance(default_outcome, (Accepted, Rejected, Released, Modified)):
        raise TypeError(f"default_outcome must be an outcome (Accepted(), Released()...), got {default_outcome!r}")
    check_address(source, "source")
    _check_name(name)
    if not isinstance(target, Target):
        check_address(target, "target")
        target = Target(address=target)
    terminus = Source(
        address=source,
        capabilities=_symbols(capabilities, "capabilities"),
        filter=filters,
        distribution_mode=None if distribution_mode is None else symbol(distribution_mode),
        default_outcome=default_outcome,
        outcomes=_symbols(outcomes, "outcomes"),
        **_terminus_fields(durable, expiry_policy, timeout, dynamic, dynamic_node_properties),
    )
    check_encodable(terminus, "the source")
    check_encodable(target, "target")
    return ReceiverOptions(
        name=name,
        source=terminus,
        target=target,
        snd_settle_mode=snd,
        rcv_settle_mode=rcv,
        properties=_fields(properties, "properties"),
        offered_capabilities=_symbols(offered_capabilities, "offered_capabilities"),
        desired_capabilities=_symbols(desired_capabilities, "desired_capabilities"),
        max_message_size=_message_size(max_message_size),
        credit=credit,
        on_error=on_error,
    )


_selector = selector  # receiver_options has a parameter of that name
