"""The behavioural cases on the harness, checked against their hand-written expectations.

``tests/integration/test_behaviour_spark.py`` runs the same cases on Spark.
"""

from __future__ import annotations

import pytest
from behaviour_cases import CASES, canonical, per_key, run_on_harness


@pytest.mark.parametrize("case", [c for c in CASES if c.expected is not None], ids=lambda c: c.name)
def test_case_gives_expected_rows(case):
    out = run_on_harness(case)
    assert canonical(out) == canonical(case.expected)
    assert per_key(out, case.out_key) == per_key(case.expected, case.out_key)


def test_both_domains_case():
    out = run_on_harness(next(c for c in CASES if c.name == "both-domains"))
    assert [(r["k"], r["domain"], r["at"], r["count"]) for r in out] == [
        ("a", "PROCESSING_TIME", "now+1", 1),
        ("b", "PROCESSING_TIME", "now+1", 1),
        ("a", "EVENT_TIME", "105", 2),
        ("b", "EVENT_TIME", "105", 1),
        ("a", "PROCESSING_TIME", "now+1", 0),
        ("a", "EVENT_TIME", "205", 0),
    ]


def test_a_rejected_rule_is_a_dead_letter_once_and_leaves_the_broadcast_state_alone():
    from behaviour_cases import CASES_BY_NAME

    case = CASES_BY_NAME["broadcast-rules"]
    h = case.job().harness()
    for batch, rules in zip(case.batches, case.second_batches()):
        h.process_batch(batch, broadcast=rules)
    dead = h.side_output("dead_letters")
    assert [d["reason"] for d in dead] == [
        "Rules.process_broadcast_element rejected it: ValueError: rule neg: negative limit"
    ]
    assert '"neg"' in dead[0]["raw"]
    assert h.broadcast_states == {"rules": {"huge": 25}}
