"""amqp_async.proton against real Qpid Proton: the same MessagingHandler program, the same peer, the same callbacks.

For each scenario in ``tests/callback_recorder.py`` (written once, against the ``proton``, ``proton.handlers`` and
``proton.reactor`` modules it is given), one recording `MessagingHandler` subclass runs on real python-qpid-proton
and on `amqp_async.proton`, each in a fresh subprocess with a watchdog (a hang fails, it never blocks the suite),
against a fresh instance of the same peer: a real-proton listener that acts by address, our embedded broker (SASL,
round trip), a real-proton client (the listener scenario), a socket that hangs up, or nothing.

Three things are compared, each as its own test, parametrized over the two implementations:

* ``test_callbacks``: the MessagingHandler callbacks with their stable properties (see
  `callback_recorder.describe`), and what the peer saw. On real proton they must equal `EXPECTED` below (so the
  scenarios are known to do what they say, and a change of proton's behaviour shows); on amqp_async.proton they
  must equal what real proton recorded in the same scenario.
* ``test_unhandled_core_events``: the raw core events that reached ``on_unhandled`` (connection / session / link /
  delivery / transport events that MessagingHandler has no callback for), likewise.

Normalizations (only what is legitimately nondeterministic or not part of the API; everything else is exact):

* ``on_sendable`` is taken out of the sequence and compared as the list of links that got it, in order of first
  appearance. proton raises it on every flow frame *and* after each batch of transfers its transport writes while
  credit remains (so "one send per on_sendable" programs keep going: the ``one_per_sendable`` scenario checks
  that they do), so its count and position follow how frames were batched into reads and writes; credit is not
  recorded at all for the same reason.
* Likewise ``on_link_flow`` in the raw events (the event behind on_sendable; its count follows flow frames and
  writes) and ``on_transport`` (raised whenever output is pending), ``on_reactor_quiesced`` and ``on_selectable_*``
  (proton's reactor bookkeeping) are not compared.
* A remote condition is recorded only at ``*_closing``, ``*_closed``, ``*_error`` and ``on_rejected``: at
  ``*_opened`` it is already set only if the peer's closing frame came in the same read as its answer.
* Transport errors are compared by condition name only: the description is written by the local implementation.
* The peer's records are compared per kind (attach, message, send, outcome, detach, close...), each kind in order,
  with outcomes sorted by delivery tag: the interleaving of kinds follows how the client's frames were batched,
  and a proton client writes the dispositions of deliveries settled in one batch in an order of its own (2, 1, 4,
  3 for the four of ``manual_outcomes``), which no callback program can observe.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import callback_recorder  # noqa: E402

pytestmark = [pytest.mark.interop]

IMPLEMENTATIONS = ["proton", "amqp_async.proton"]
SUBPROCESS_TIMEOUT = 30.0  # the runner's own watchdog fires after callback_recorder.RUN_TIMEOUT (10 s)

_results: dict[tuple[str, str], dict[str, Any]] = {}


def record(scenario: str, impl: str, tmp_dir: Path) -> dict[str, Any]:
    """Run ``scenario`` on ``impl`` in a subprocess (once per test session) and return its JSON report."""
    key = (scenario, impl)
    if key not in _results:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(HERE), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        # No connect.json may steer Container.connect (proton reads ./connect.json and ~/.config/messaging/).
        env["HOME"] = str(tmp_dir)
        env.pop("MESSAGING_CONNECT_FILE", None)
        command = [sys.executable, str(HERE / "callback_recorder.py"), "--impl", impl, "--scenario", scenario]
        try:
            done = subprocess.run(
                command, cwd=tmp_dir, env=env, capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT
            )
        except subprocess.TimeoutExpired as exc:
            report: dict[str, Any] = {"error": f"subprocess timed out; stderr: {exc.stderr!r}"}
        else:
            lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
            if lines:
                report = json.loads(lines[-1])
            else:
                report = {"error": f"no report (exit {done.returncode}); stderr:\n{done.stderr[-4000:]}"}
            report["stderr"] = done.stderr[-4000:]
        _results[key] = report
    return _results[key]


def normalize_calls(calls: list[list[Any]]) -> tuple[list[list[Any]], list[str]]:
    """The callbacks without on_sendable, and the links that got on_sendable (first appearance order)."""
    main = [call for call in calls if call[0] != "on_sendable"]
    sendable: list[str] = []
    for call in calls:
        if call[0] == "on_sendable" and call[1] not in sendable:
            sendable.append(call[1])
    return main, sendable


def normalize_unhandled(events: list[list[Any]]) -> str:
    """The raw core events without on_link_flow, as one string (``link_init:snd delivery:snd ...``)."""
    return " ".join(
        event[0][3:] + (f":{event[1]}" if len(event) > 1 else "") for event in events if event[0] != "on_link_flow"
    )


def _tag_key(record: list[Any]) -> Any:
    tag = record[2]
    return (0, int(tag), "") if isinstance(tag, str) and tag.isdigit() else (1, 0, str(tag))


def normalize_peer(records: list[list[Any]]) -> dict[str, list[list[Any]]]:
    """The peer's records per kind, in order within a kind; outcomes sorted by delivery tag."""
    kinds: dict[str, list[list[Any]]] = {}
    for rec in records:
        kinds.setdefault(rec[0], []).append(rec)
    if "outcome" in kinds:
        kinds["outcome"] = sorted(kinds["outcome"], key=_tag_key)
    return kinds


def _show(report: dict[str, Any]) -> str:
    lines = [f"--- {report.get('impl')} / {report.get('scenario')}: error={report.get('error')}"]
    lines += ["  " + json.dumps(call) for call in report.get("calls", [])]
    lines.append("  peer: " + json.dumps(report.get("peer")))
    if report.get("stderr"):
        lines.append("  stderr: " + report["stderr"][-2000:])
    return "\n".join(lines)


def _check_ran(report: dict[str, Any]) -> None:
    assert report.get("error") is None, _show(report)


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("scenario", list(callback_recorder.SCENARIOS))
def test_callbacks(scenario: str, impl: str, tmp_path: Path) -> None:
    report = record(scenario, impl, tmp_path)
    _check_ran(report)
    calls, sendable = normalize_calls(report["calls"])
    if impl == "proton":
        expected_calls, expected_sendable, _ = EXPECTED[scenario]
        assert calls == expected_calls, _show(report)
        assert sendable == expected_sendable, _show(report)
        return
    reference = record(scenario, "proton", tmp_path)
    _check_ran(reference)
    ref_calls, ref_sendable = normalize_calls(reference["calls"])
    assert calls == ref_calls, f"callbacks differ from real proton's\n{_show(reference)}\n{_show(report)}"
    assert sendable == ref_sendable, f"links that got on_sendable differ\n{_show(reference)}\n{_show(report)}"
    assert normalize_peer(report["peer"]) == normalize_peer(reference["peer"]), (
        f"the peer saw something else\n{_show(reference)}\n{_show(report)}"
    )


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("scenario", list(callback_recorder.SCENARIOS))
def test_unhandled_core_events(scenario: str, impl: str, tmp_path: Path) -> None:
    report = record(scenario, impl, tmp_path)
    _check_ran(report)
    events = normalize_unhandled(report["unhandled"])
    if impl == "proton":
        assert events == EXPECTED[scenario][2]
        return
    reference = record(scenario, "proton", tmp_path)
    _check_ran(reference)
    expected = normalize_unhandled(reference["unhandled"])
    assert events.split() == expected.split(), f"\nproton:          {expected}\namqp_async.proton: {events}"


def test_proton_peer_sees_the_same_in_every_scenario(tmp_path: Path) -> None:
    """On real proton, the peer sees what EXPECTED_PEER says (so each scenario does reach the peer as intended)."""
    for scenario, expected in EXPECTED_PEER.items():
        report = record(scenario, "proton", tmp_path)
        _check_ran(report)
        assert normalize_peer(report["peer"]) == normalize_peer(expected), scenario


# ---------------------------------------------------------------------------------------------------------------
# What real proton (python-qpid-proton 0.40) does in each scenario: (callbacks without on_sendable, links that got
# on_sendable, raw core events that reached on_unhandled without on_link_flow).

EXPECTED: dict[str, tuple[list[list[Any]], list[str], str]] = {
    "send_n": (
        [
            ["on_start"],
            ["on_connection_opened"],
            ["on_session_opened"],
            ["on_link_opened", "snd", "sender"],
            ["on_accepted", "snd", "1", "ACCEPTED", True],
            ["on_settled", "snd", "1", "ACCEPTED", True],
            ["on_accepted", "snd", "2", "ACCEPTED", True],
            ["on_settled", "snd", "2", "ACCEPTED", True],
            ["on_accepted", "snd", "3", "ACCEPTED", True],
            ["on_settled", "snd", "3", "ACCEPTED", True],
            ["on_accepted", "snd", "4", "ACCEPTED", True],
            ["on_settled", "snd", "4", "ACCEPTED", True],
            ["on_accepted", "snd", "5", "ACCEPTED", True],
            ["on_settled", "snd", "5", "ACCEPTED", True],
            ["on_connection_closed", None],
        ],
        ["snd"],
        "connection_init connection_local_open session_init session_local_open link_init:snd "
        "link_local_open:snd connection_bound connection_remote_open session_remote_open link_remote_open:snd "
        "delivery:snd delivery:snd delivery:snd delivery:snd delivery:snd connection_local_close "
        "transport_head_closed connection_remote_close transport_tail_closed transport_closed "
        "connection_unbound",
    ),
    "one_per_sendable": (
        [
            ["on_start"],
            ["on_connection_opened"],
            ["on_session_opened"],
            ["on_link_opened", "snd", "sender"],
            ["on_accepted", "snd", "1", "ACCEPTED", True],
            ["on_settled", "snd", "1", "ACCEPTED", True],
            ["on_accepted", "snd", "2", "ACCEPTED", True],
            ["on_settled", "snd", "2", "ACCEPTED", True],
            ["on_accepted", "snd", "3", "ACCEPTED", True],
            ["on_settled", "snd", "3", "ACCEPTED", True],
            ["on_accepted", "snd", "4", "ACCEPTED", True],
            ["on_settled", "snd", "4", "ACCEPTED", True],
            ["on_accepted", "snd", "5", "ACCEPTED", True],
            ["on_settled", "snd", "5", "ACCEPTED", True],
            ["on_connection_closed", None],
        ],
        ["snd"],
        "connection_init connection_local_open session_init session_local_open link_init:snd "
        "link_local_open:snd connection_bound connection_remote_open session_remote_open link_remote_open:snd "
        "delivery:snd delivery:snd delivery:snd delivery:snd delivery:snd connection_local_close "
        "transport_head_closed connection_remote_close transport_tail_closed transport_closed "
        "connection_unbound",
    ),
    "receive_n": (
        [
            ["on_start"],
            ["on_connection_opened"],
            ["on_session_opened"],
            ["on_link_opened", "rcv", "receiver"],
            ["on_message", "rcv", "1", "m-0"],
            ["on_message", "rcv", "2", "m-1"],
            ["on_message", "rcv", "3", "m-2"],
            ["on_message", "rcv", "4", "m-3"],
            ["on_message", "rcv", "5", "m-4"],
            ["on_connection_closed", None],
        ],
        [],
        "connection_init connection_local_open session_init session_local_open link_init:rcv "
        "link_local_open:rcv connection_bound connection_remote_open session_remote_open link_remote_open:rcv "
        "delivery:rcv delivery:rcv delivery:rcv delivery:rcv delivery:rcv connection_local_close "
        "transport_head_closed connection_remote_close transport_tail_closed transport_closed "
        "connection_unbound",
    ),
    "manual_outcomes": (
        [
            ["on_start"],
            ["on_connection_opened"],
            ["on_session_opened"],
            ["on_link_opened", "rcv", "receiver"],
            ["on_message", "rcv", "1", "m-0"],
            ["on_message", "rcv", "2", "m-1"],
            ["on_message", "rcv", "3", "m-2"],
            ["on_message", "rcv", "4", "m-3"],
            ["on_connection_closed", None],
        ],
        [],
        "connection_init connection_local_open session_init session_local_open link_init:rcv "
        "link_local_open:rcv connection_bound connection_remote_open session_remote_open link_remote_open:rcv "
        "delivery:rcv delivery:rcv delivery:rcv delivery:rcv connection_local_close transport_head_closed "
        "connection_remote_close transport_tail_closed transport_closed connection_unbound",
    ),
    "sender_outcomes": (
        [
            ["on_start"],
            ["on_connection_opened"],
            ["on_session_opened"],
            ["on_link_opened", "snd", "sender"],
            ["on_accepted", "snd", "1", "ACCEPTED", True],
            ["on_settled", "snd", "1", "ACCEPTED", True],
            ["on_rejected", "snd", "2", "REJECTED", True, ["amqp:precondition-failed", "rejected by peer"]],
            ["on_settled", "snd", "2", "REJECTED", True],
            ["on_released", "snd", "3", "RELEASED", True],
            ["on_settled", "snd", "3", "RELEASED", True],
            ["on_released", "snd", "4", "MODIFIED", True],
            ["on_settled", "snd", "4", "MODIFIED", True],
            ["on_connection_closed", None],
        ],
        ["snd"],
        "connection_init connection_local_open session_init session_local_open link_init:snd "
        "link_local_open:snd connection_bound connection_remote_open session_remote_open link_remote_open:snd "
        "delivery:snd delivery:snd delivery:snd delivery:snd connection_local_close transport_head_closed "
        "connection_remote_close transport_tail_closed transport_closed connection_unbound",
    ),
    "auto_settle_off": (
        [
            ["on_start"],
            ["on_connection_opened"],
            ["on_session_opened"],
            ["on_link_opened", "snd", "sender"],
            ["on_accepted", "snd", "1", "ACCEPTED", True],
            ["unsettled", 3],
            ["on_settled", "snd", "1", "ACCEPTED", True],
            ["on_accepted", "snd", "2", "ACCEPTED", True],
            ["unsettled", 3],
            ["on_settled", "snd", "2", "ACCEPTED", True],
            ["on_accepted", "snd", "3", "ACCEPTED", True],
            ["unsettled", 3],
            ["on_settled", "snd", "3", "ACCEPTED", True],
            ["unsettled", 3],
            ["unsettled", 0],
            ["on_connection_closed", None],
        ],
        ["snd"],
        "connection_init connection_local_open session_init session_local_open link_init:snd "
        "link_local_open:snd connection_bound connection_remote_open session_remote_open link_remote_open:snd "
        "delivery:snd delivery:snd delivery:snd connection_local_close transport_head_closed "
        "connection_remote_close transport_tail_closed transport_closed connection_unbound",
    ),
    "auto_settle_on": (
        [
            ["on_start"],
            ["on_connection_opened"],
            ["on_session_opened"],
            ["on_link_opened", "snd", "sender"],
            ["on_accepted", "snd", "1", "ACCEPTED", True],
            ["unsettled", 3],
            ["on_settled", "snd", "1", "ACCEPTED", True],
            ["on_accepted", "snd", "2", "ACCEPTED", True],
            ["unsettled", 2],
            ["on_settled", "snd", "2", "ACCEPTED", True],
            ["on_accepted", "snd", "3", "ACCEPTED", True],
            ["unsettled", 1],
            ["on_settled", "snd", "3", "ACCEPTED", True],
            ["unsettled", 1],
            ["unsettled", 0],
            ["on_connection_closed", None],
        ],
        ["snd"],
        "connection_init connection_local_open session_init session_local_open link_init:snd "
        "link_local_open:snd connection_bound connection_remote_open session_remote_open link_remote_open:snd "
        "delivery:snd delivery:snd delivery:snd connection_local_close transport_head_closed "
        "connection_remote_close transport_tail_closed transport_closed connection_unbound",
    ),
    "link_refused": (
        [
            ["on_start"],
            ["on_connection_opened"],
            ["on_session_opened"],
            ["on_link_opened", "snd", "sender"],
            ["on_link_error", "snd", "sender", ["amqp:not-found", "no such node"]],
            ["on_link_closed", "snd", "sender", ["amqp:not-found", "no such node"]],
            ["on_connection_closed", None],
        ],
        [],
        "connection_init connection_local_open session_init session_local_open link_init:snd "
        "link_local_open:snd connection_bound connection_remote_open session_remote_open link_remote_open:snd "
        "link_remote_close:snd connection_local_close link_local_close:snd transport_head_closed "
        "connection_remote_close transport_tail_closed transport_closed connection_unbound",
    ),
    "link_refused_handled": (
        [
            ["on_start"],
            ["on_connection_opened"],
            ["on_session_opened"],
            ["on_link_opened", "rcv", "receiver"],
            ["on_link_error", "rcv", "receiver", ["amqp:not-found", "no such node"]],
            ["on_link_closed", "rcv", "receiver", ["amqp:not-found", "no such node"]],
            ["on_link_opened", "snd", "sender"],
            ["on_accepted", "snd", "1", "ACCEPTED", True],
            ["on_settled", "snd", "1", "ACCEPTED", True],
            ["on_connection_closed", None],
        ],
        ["snd"],
        "connection_init connection_local_open session_init session_local_open link_init:rcv "
        "link_local_open:rcv connection_bound connection_remote_open session_remote_open link_remote_open:rcv "
        "link_remote_close:rcv link_local_close:rcv link_init:snd link_local_open:snd link_remote_open:snd "
        "delivery:snd connection_local_close transport_head_closed connection_remote_close "
        "transport_tail_closed transport_closed connection_unbound",
    ),
    "peer_detach": (
        [
            ["on_start"],
            ["on_connection_opened"],
            ["on_session_opened"],
            ["on_link_opened", "rcv", "receiver"],
            ["on_link_closing", "rcv", "receiver", None],
            ["on_link_closed", "rcv", "receiver", None],
            ["on_connection_closed", None],
        ],
        [],
        "connection_init connection_local_open session_init session_local_open link_init:rcv "
        "link_local_open:rcv connection_bound connection_remote_open session_remote_open link_remote_open:rcv "
        "link_remote_close:rcv link_local_close:rcv connection_local_close transport_head_closed "
        "connection_remote_close transport_tail_closed transport_closed connection_unbound",
    ),
    "peer_close_is_error": (
        [
            ["on_start"],
            ["on_connection_opened"],
            ["on_session_opened"],
            ["on_link_opened", "rcv", "receiver"],
            ["on_link_closing", "rcv", "receiver", None],
            ["on_link_closed", "rcv", "receiver", None],
            ["on_connection_closed", None],
        ],
        [],
        "connection_init connection_local_open session_init session_local_open link_init:rcv "
        "link_local_open:rcv connection_bound connection_remote_open session_remote_open link_remote_open:rcv "
        "link_remote_close:rcv link_local_close:rcv connection_local_close transport_head_closed "
        "connection_remote_close transport_tail_closed transport_closed connection_unbound",
    ),
    "session_error": (
        [
            ["on_start"],
            ["on_connection_opened"],
            ["on_session_opened"],
            ["on_link_opened", "snd", "sender"],
            ["on_session_error", ["amqp:internal-error", "session ended by peer"]],
            ["on_session_closed", ["amqp:internal-error", "session ended by peer"]],
            ["on_connection_closed", None],
        ],
        [],
        "connection_init connection_local_open session_init session_local_open link_init:snd "
        "link_local_open:snd connection_bound connection_remote_open session_remote_open link_remote_open:snd "
        "session_remote_close connection_local_close session_local_close transport_head_closed "
        "connection_remote_close transport_tail_closed transport_closed connection_unbound",
    ),
    "connection_error": (
        [
            ["on_start"],
            ["on_connection_opened"],
            ["on_session_opened"],
            ["on_link_opened", "snd", "sender"],
            ["on_connection_error", ["amqp:internal-error", "connection closed by peer"]],
            ["on_connection_closed", ["amqp:internal-error", "connection closed by peer"]],
        ],
        [],
        "connection_init connection_local_open session_init session_local_open link_init:snd "
        "link_local_open:snd connection_bound connection_remote_open session_remote_open link_remote_open:snd "
        "connection_remote_close transport_tail_closed connection_local_close transport_head_closed "
        "transport_closed connection_unbound",
    ),
    "connection_forced": (
        [
            ["on_start"],
            ["on_connection_opened"],
            ["on_session_opened"],
            ["on_link_opened", "snd", "sender"],
            ["on_disconnected"],
            ["on_connection_closed", ["amqp:connection:forced", "shutting down"]],
        ],
        [],
        "connection_init connection_local_open session_init session_local_open link_init:snd "
        "link_local_open:snd connection_bound connection_remote_open session_remote_open link_remote_open:snd "
        "connection_remote_close transport_tail_closed connection_local_close transport_head_closed "
        "transport_closed connection_unbound",
    ),
    "peer_vanishes": (
        [
            ["on_start"],
            ["on_connection_opened"],
            ["on_session_opened"],
            ["on_link_opened", "snd", "sender"],
            ["on_disconnected"],
            ["on_disconnected"],
            ["on_transport_error", "amqp:connection:framing-error"],
        ],
        [],
        "connection_init connection_local_open session_init session_local_open link_init:snd "
        "link_local_open:snd connection_bound connection_remote_open session_remote_open link_remote_open:snd "
        "transport_head_closed transport_tail_closed transport_closed connection_unbound",
    ),
    "hangup_at_header": (
        [
            ["on_start"],
            ["on_disconnected"],
            ["on_disconnected"],
            ["on_transport_error", "amqp:connection:framing-error"],
        ],
        [],
        "connection_init connection_local_open session_init session_local_open link_init:snd "
        "link_local_open:snd connection_bound transport_head_closed transport_tail_closed transport_closed "
        "connection_unbound",
    ),
    "connection_refused": (
        [
            ["on_start"],
            ["on_disconnected"],
            ["on_transport_error", "proton.pythonio"],
            ["on_disconnected"],
        ],
        [],
        "connection_init connection_local_open session_init session_local_open link_init:snd "
        "link_local_open:snd connection_bound transport_tail_closed transport_head_closed transport_closed "
        "connection_unbound",
    ),
    "sasl_bad_password": (
        [
            ["on_start"],
            ["on_transport_error", "amqp:unauthorized-access"],
        ],
        [],
        "connection_init connection_local_open session_init session_local_open link_init:snd "
        "link_local_open:snd connection_bound transport_tail_closed transport_head_closed transport_closed "
        "connection_local_close connection_unbound",
    ),
    "broker_round_trip": (
        [
            ["on_start"],
            ["on_connection_opened"],
            ["on_session_opened"],
            ["on_link_opened", "snd", "sender"],
            ["on_accepted", "snd", "1", "ACCEPTED", True],
            ["on_settled", "snd", "1", "ACCEPTED", True],
            ["on_accepted", "snd", "2", "ACCEPTED", True],
            ["on_settled", "snd", "2", "ACCEPTED", True],
            ["on_accepted", "snd", "3", "ACCEPTED", True],
            ["on_settled", "snd", "3", "ACCEPTED", True],
            ["on_link_closed", "snd", "sender", None],
            ["on_link_opened", "rcv", "receiver"],
            ["on_message", "rcv", "\x00\x00\x00\x00", "rt-0"],
            ["on_message", "rcv", "\x00\x00\x00\x01", "rt-1"],
            ["on_message", "rcv", "\x00\x00\x00\x02", "rt-2"],
            ["on_connection_closed", None],
        ],
        ["snd"],
        "connection_init connection_local_open session_init session_local_open link_init:snd "
        "link_local_open:snd connection_bound connection_remote_open session_remote_open link_remote_open:snd "
        "delivery:snd delivery:snd delivery:snd link_local_close:snd link_init:rcv link_local_open:rcv "
        "link_remote_close:snd link_remote_open:rcv delivery:rcv delivery:rcv delivery:rcv "
        "connection_local_close transport_head_closed connection_remote_close transport_tail_closed "
        "transport_closed connection_unbound",
    ),
    "prefetch_0": (
        [
            ["on_start"],
            ["on_connection_opened"],
            ["on_session_opened"],
            ["on_link_opened", "rcv", "receiver"],
            ["credit", 0],
            ["on_message", "rcv", "1", "m-0"],
            ["on_message", "rcv", "2", "m-1"],
            ["on_message", "rcv", "3", "m-2"],
            ["on_connection_closed", None],
        ],
        [],
        "connection_init connection_local_open session_init session_local_open link_init:rcv "
        "link_local_open:rcv connection_bound connection_remote_open session_remote_open link_remote_open:rcv "
        "delivery:rcv delivery:rcv delivery:rcv connection_local_close transport_head_closed "
        "connection_remote_close transport_tail_closed transport_closed connection_unbound",
    ),
    "listener": (
        [
            ["on_start"],
            ["on_connection_opening"],
            ["on_connection_opened"],
            ["on_session_opening"],
            ["on_session_opened"],
            ["on_link_opening", "peer-snd", "receiver"],
            ["on_link_opened", "peer-snd", "receiver"],
            ["on_message", "peer-snd", "1", "in-0"],
            ["on_message", "peer-snd", "2", "in-1"],
            ["on_link_opening", "peer-rcv", "sender"],
            ["on_link_opened", "peer-rcv", "sender"],
            ["on_accepted", "peer-rcv", "1", "ACCEPTED", True],
            ["on_settled", "peer-rcv", "1", "ACCEPTED", True],
            ["on_connection_closing", None],
            ["on_connection_closed", None],
        ],
        ["peer-rcv"],
        "connection_init connection_bound connection_remote_open connection_local_open session_init "
        "session_remote_open session_local_open link_init:peer-snd link_remote_open:peer-snd "
        "link_local_open:peer-snd delivery:peer-snd delivery:peer-snd link_init:peer-rcv "
        "link_remote_open:peer-rcv link_local_open:peer-rcv delivery:peer-rcv connection_remote_close "
        "transport_tail_closed connection_local_close transport_head_closed transport_closed "
        "connection_unbound",
    ),
    "timers": (
        [
            ["on_start"],
            ["tick", "a"],
            ["on_timer_task", "self"],
            ["tick", "a"],
            ["tick", "d"],
            ["tick", "a"],
        ],
        [],
        "",
    ),
}

#: What the peer saw in each scenario on real proton (compared per kind: see normalize_peer).
EXPECTED_PEER: dict[str, list[list[Any]]] = {
    "send_n": [
        ["attach", "snd", "receiver", "queue-a"],
        ["message", "snd", "msg-0", False],
        ["message", "snd", "msg-1", False],
        ["message", "snd", "msg-2", False],
        ["message", "snd", "msg-3", False],
        ["message", "snd", "msg-4", False],
        ["close", None],
        ["closed"],
    ],
    "one_per_sendable": [
        ["attach", "snd", "receiver", "queue-a"],
        ["message", "snd", "msg-0", False],
        ["message", "snd", "msg-1", False],
        ["message", "snd", "msg-2", False],
        ["message", "snd", "msg-3", False],
        ["message", "snd", "msg-4", False],
        ["close", None],
        ["closed"],
    ],
    "receive_n": [
        ["attach", "rcv", "sender", "src-5"],
        ["outcome", "rcv", "1", "ACCEPTED", True],
        ["outcome", "rcv", "2", "ACCEPTED", True],
        ["outcome", "rcv", "3", "ACCEPTED", True],
        ["outcome", "rcv", "4", "ACCEPTED", True],
        ["outcome", "rcv", "5", "ACCEPTED", True],
        ["close", None],
        ["closed"],
    ],
    "manual_outcomes": [
        ["attach", "rcv", "sender", "src-4"],
        ["outcome", "rcv", "2", "REJECTED", True],
        ["outcome", "rcv", "1", "ACCEPTED", True],
        ["outcome", "rcv", "4", "MODIFIED", True],
        ["outcome", "rcv", "3", "RELEASED", True],
        ["close", None],
        ["closed"],
    ],
    "sender_outcomes": [
        ["attach", "snd", "receiver", "queue-b"],
        ["message", "snd", "accept", False],
        ["message", "snd", "reject", False],
        ["message", "snd", "release", False],
        ["message", "snd", "modify", False],
        ["close", None],
        ["closed"],
    ],
    "auto_settle_off": [
        ["attach", "snd", "receiver", "queue-c"],
        ["message", "snd", "s-0", False],
        ["message", "snd", "s-1", False],
        ["message", "snd", "s-2", False],
        ["close", None],
        ["closed"],
    ],
    "auto_settle_on": [
        ["attach", "snd", "receiver", "queue-c"],
        ["message", "snd", "s-0", False],
        ["message", "snd", "s-1", False],
        ["message", "snd", "s-2", False],
        ["close", None],
        ["closed"],
    ],
    "link_refused": [
        ["attach", "snd", "receiver", "refuse"],
        ["close", None],
        ["closed"],
    ],
    "link_refused_handled": [
        ["attach", "rcv", "sender", "refuse"],
        ["attach", "snd", "receiver", "queue-g"],
        ["message", "snd", "after-error", False],
        ["close", None],
        ["closed"],
    ],
    "peer_detach": [
        ["attach", "rcv", "sender", "detach"],
        ["close", None],
        ["closed"],
    ],
    "peer_close_is_error": [
        ["attach", "rcv", "sender", "detach"],
        ["close", None],
        ["closed"],
    ],
    "session_error": [
        ["attach", "snd", "receiver", "end-session"],
        ["close", None],
        ["closed"],
    ],
    "connection_error": [
        ["attach", "snd", "receiver", "close-connection"],
        ["closed"],
    ],
    "connection_forced": [
        ["attach", "snd", "receiver", "forced"],
        ["closed"],
    ],
    "peer_vanishes": [
        ["attach", "snd", "receiver", "vanish"],
        ["dropped"],
        ["transport_error", "amqp:connection:framing-error"],
    ],
    "hangup_at_header": [
        ["header", "AMQP"],
    ],
    "prefetch_0": [
        ["attach", "rcv", "sender", "src-3"],
        ["send", "m-0", 1],
        ["send", "m-1", 1],
        ["outcome", "rcv", "1", "ACCEPTED", True],
        ["send", "m-2", 1],
        ["outcome", "rcv", "2", "ACCEPTED", True],
        ["outcome", "rcv", "3", "ACCEPTED", True],
        ["close", None],
        ["closed"],
    ],
    "listener": [
        ["accepted", "1"],
        ["accepted", "2"],
        ["message", "reply-0"],
        ["closed"],
    ],
}
