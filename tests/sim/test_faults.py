"""The ``--faults`` spec: every kind of rule parses, and a wrong one says what is allowed."""

from __future__ import annotations

import pytest

from gpusched.sim.faults import LOST, FaultRule, parse_faults


def test_every_kind_of_rule_parses() -> None:
    faults = parse_faults(
        "create=0.1:500,patch/pods=0.05:429,*=0.01:409,create/pods/binding=0.5:lost,"
        "latency=20ms,watch-events=100,watch-seconds=30,seed=7"
    )
    assert faults.rules == [
        FaultRule("create", "", 0.1, 500),
        FaultRule("patch", "pods", 0.05, 429),
        FaultRule("*", "", 0.01, 409),
        FaultRule("create", "pods/binding", 0.5, LOST),
    ]
    assert (faults.latency, faults.watch_events, faults.watch_seconds, faults.seed) == (
        0.02,
        100,
        30.0,
        7,
    )


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("create=0.1:503", "'503' is not one of 409, 429, 500, lost"),
        ("create=0.1:0", "'0' is not one of 409, 429, 500, lost"),
        ("create=2:500", "the fraction must be between 0 and 1"),
        ("fetch=0.1:500", "unknown verb 'fetch'"),
        ("create", "expected KEY=VALUE"),
    ],
)
def test_a_wrong_rule_says_what_is_allowed(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_faults(spec)


def test_a_lost_rule_answers_after_applying() -> None:
    faults = parse_faults("create/pods/binding=1:lost")
    after = faults.check("create", "pods/binding", "p", "")
    assert after is not None
    assert after.status["code"] == 504
    assert faults.injected == {("create", LOST): 1}
