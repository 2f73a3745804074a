"""The types a user's type checker sees on the errors of the awaitable API: ``except MessageRejected as e`` gives
``e.outcome`` as a ``Rejected`` (or None), not ``Any``, so that ``e.outcome.error`` is checked.

The annotations are read with :func:`typing.get_type_hints`, as a type checker resolves them (the codec's
classes are imported by ``amqp_async.errors`` for the type checker only: the codec imports that module).
"""

from __future__ import annotations

import typing

import pytest

import amqp_async
from amqp_async import (
    Accepted,
    DeliveryAlreadySettled,
    DeliveryError,
    MessageModified,
    MessageRejected,
    MessageReleased,
    Modified,
    Rejected,
    Released,
)
from amqp_async.codec.composite import Composite
from amqp_async.codec.transactions import TransactionalState

#: The names the annotations of amqp_async.errors use, as its TYPE_CHECKING block imports them.
_NAMES = {
    "Accepted": Accepted,
    "Composite": Composite,
    "Modified": Modified,
    "Rejected": Rejected,
    "Released": Released,
    "TransactionalState": TransactionalState,
}


def _outcome_type(error_class: type[BaseException]) -> object:
    return typing.get_type_hints(error_class, localns=_NAMES)["outcome"]


@pytest.mark.parametrize(
    ("error_class", "outcome_class"),
    [(MessageRejected, Rejected), (MessageReleased, Released), (MessageModified, Modified)],
)
def test_a_refused_messages_error_names_the_type_of_its_outcome(
    error_class: type[DeliveryError], outcome_class: type[Composite]
) -> None:
    assert _outcome_type(error_class) == outcome_class | None
    outcome = outcome_class()
    assert error_class("refused", outcome=outcome).outcome is outcome


def test_any_delivery_errors_outcome_is_a_delivery_state_or_none() -> None:
    assert _outcome_type(DeliveryError) == Composite | None
    assert _outcome_type(amqp_async.DeliveryInDoubt) == Composite | None


def test_a_second_settlements_error_names_the_first_outcomes_type() -> None:
    hints = typing.get_type_hints(DeliveryAlreadySettled.__init__, localns=_NAMES)
    assert hints["outcome"] == Accepted | Rejected | Released | Modified | TransactionalState | None
