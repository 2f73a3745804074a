"""proton's engine model on ``amqp_async.proton``, beside python-qpid-proton: the programs of
``tests/proton_engine_checks.py`` (a transport before it is bound, the frames a transport writes and their order,
credit and queued deliveries, deliveries in parts and aborted, a session's capacity, the references behind
``*_FINAL`` events, delivery states both ways, the idle-timeout clock, settings, termini, SASL's defaults) run with
each implementation; what they record must be the same.
"""

from __future__ import annotations

from typing import Any

import pytest
from proton_engine_checks import PROGRAMS, run

pytest.importorskip("proton")

PROTON = "proton"
OURS = "amqp_async.proton"


@pytest.fixture(scope="module")
def references() -> dict[str, Any]:
    return {name: run(name, PROTON) for name in PROGRAMS}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_same_record_as_proton(name: str, references: dict[str, Any]) -> None:
    assert run(name, OURS) == references[name]


def test_references_show_what_the_programs_claim(references: dict[str, Any]) -> None:
    """A guard against a program that silently does less than its name says (values from the proton runs)."""
    garbage = references["unbound_client_refuses_garbage"]
    assert garbage[:3] == [8, b"AMQP\x00\x01\x00\x00", "amqp:connection:framing-error"]
    assert garbage[-1] == "amqp:connection:framing-error"  # the peer read our close
    credit = references["credit_as_the_application_sees_it"]
    assert credit[0] == (-2, 2, 2)  # advanced without credit: below zero, queued
    assert credit[4][:2] == (4, 1)  # the receiver's credit drops as it advances past one of the two
    parts = references["delivery_in_parts"]
    assert parts[3] is True and parts[5] == b"first"  # readable while partial
    window = references["session_capacity_window"]
    assert any(outgoing > 0 for outgoing, *_ in window[:10])  # the sender waited for the window
    assert window[-1] == (0, 0, 0, 0)  # and everything went once read
    finals = references["unbind_and_free"]
    assert finals[1] == ["on_link_final"] and "on_connection_final" in finals[-1]
    states = references["states_both_ways"]
    assert states[0][0] == 0x27 and states[4][:2] == (0x4444, True) and states[5][2] == [7, "eight"]
    idle = references["idle_timeout_clock"]
    assert idle[0] == 2.0 and idle[-1] == "amqp:resource-limit-exceeded"
    sasl = references["sasl_defaults"]
    assert sasl[0][:2] == (0, 0) and sasl[4][0] != 0  # ANONYMOUS works; PLAIN is not sent in clear
    assert references["sasl_skipped_or_required"][2][1] == "amqp:connection:policy-error"
