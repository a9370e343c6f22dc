"""fraud-detection on the harness: injected fraud raises its alert, rules change mid-run, bad
rules go to the dead letters, and randomised runs match a small independent model."""

from __future__ import annotations

import datetime as dt
import random

import pytest

from sparkstate.api.connected import KeyedBroadcastProcessFunction
from sparkstate.connectors.sources import FileSource, SocketSource
from sparkstate.errors import JobDefinitionError
from sparkstate.jobs import JOBS
from sparkstate.jobs.fraud_detection import (
    PROFILE_TTL,
    RECENT_TTL,
    SEED_RULE,
    FraudDetector,
    Rule,
    RuleError,
    build,
    rules_source,
)

T0 = 1_735_689_600_000  # 2025-01-01T00:00:00Z
EXPECTED_RULE = {"velocity": "velocity", "amount-spike": "amount-spike", "new-device": SEED_RULE["rule_id"]}


def pay(payer, amount, t, device="android", merchant="m1"):
    return {"event_time": t, "merchant_id": merchant, "payer_id": payer, "amount": float(amount), "device": device}


def harness(disorder_ms=None):
    """The seed job on the harness; ``disorder_ms``: its watermark bound (the generator's 5 s if None)."""
    job = JOBS["fraud-detection"].job(events=10, max_out_of_orderness_ms=disorder_ms)
    # payments up to days after T0: no bound on how far event time runs ahead of processing time
    return job.harness(processing_time=T0, max_event_time_ahead=None)


def fired(rows):
    return [(r["payer_id"], r["rule"]) for r in rows]


# ------------------------------------------------------------------ the seed job


def test_registered_with_its_generator_and_rules():
    seed = JOBS["fraud-detection"]
    assert seed.generator.__name__ == "FraudPayments" and seed.rules_schema and seed.initial_rules == (SEED_RULE,)
    job = seed.job(events=10)
    assert isinstance(job.function, FraudDetector) and isinstance(job.function, KeyedBroadcastProcessFunction)
    assert job.key_columns == ("payer_id",) and job.connected is not None and job.connected.is_broadcast
    job.validate()


def test_state_ttls_are_90_days_for_the_profile_and_24_hours_for_recent_payments():
    h = harness()
    ttl = {d.name: d.ttl_config for d in h.descriptors}
    assert ttl["profile"] is PROFILE_TTL and PROFILE_TTL.ttl_ms == 90 * 24 * 3600 * 1000
    assert ttl["recent"] is RECENT_TTL and RECENT_TTL.ttl_ms == 24 * 3600 * 1000


def test_every_injected_pattern_raises_its_alert():
    job = JOBS["fraud-detection"].job(events=30_000, fraud=0.004, seed=9)
    events = job.source_spec.events_as_dicts()
    injected = job.source_spec.injected()
    assert {f.kind for f in injected} == set(EXPECTED_RULE) and len(injected) > 100
    h = job.harness()
    out = h.process_batch([], broadcast=[SEED_RULE])  # the job's default rules: seed 004's rule
    for i in range(0, len(events), 5000):
        out += h.process_batch(events[i : i + 5000])
    alerts = {(r["payer_id"], r["rule"]): r for r in out}
    for f in injected:
        alert = alerts.get((f.payer_id, EXPECTED_RULE[f.kind]))
        assert alert is not None, f
        completing = events[f.offset]
        assert (alert["event_time"], alert["amount"]) == (completing["event_time"], completing["amount"])
    assert alerts[next((f.payer_id, SEED_RULE["rule_id"]) for f in injected if f.kind == "new-device")]["action"] == "block"
    # an injected pattern raises only its own alert
    kinds = {f.payer_id: EXPECTED_RULE[f.kind] for f in injected}
    assert all(rule == kinds[payer] for payer, rule in fired(out) if payer in kinds)


def test_velocity_counts_five_payments_within_ten_minutes():
    h = harness()
    minute = 60_000
    out = h.process_batch([pay("a", 10, T0 + i * 2 * minute) for i in range(5)])  # 0..8 min: the 5th alerts
    assert [(r["rule"], r["detail"]) for r in out] == [("velocity", "5 payments in 10 minutes")]
    assert h.process_batch([pay("b", 10, T0 + i * 150_000) for i in range(5)]) == []  # 0..10 min: not within
    # a payment that arrives late with an earlier time counts the later ones (seed 003's test)
    late = h.process_batch([pay("c", 10, T0 + t * minute) for t in (5, 6, 7, 8, 1)])
    assert fired(late) == [("c", "velocity")] and late[0]["event_time"] == T0 + minute


def test_velocity_counts_a_late_payment_against_every_payment_within_ten_minutes():
    """Issue 32's reproducer: the payment at +600,002 ms arrives after the one at +600,003 ms,
    within the watermark's bound; it still counts the four at +3 ms (599,999 ms before it)."""
    h = harness()
    assert h.process_batch([pay("p1", 10, T0 + 3) for _ in range(4)]) == []
    assert h.process_batch([pay("p1", 10, T0 + 600_003)]) == []  # the four are 600,000 ms before: not within
    out = h.process_batch([pay("p1", 10, T0 + 600_002)])
    assert [(r["rule"], r["detail"], r["event_time"]) for r in out] == [
        ("velocity", "6 payments in 10 minutes", T0 + 600_002)
    ]


def velocity_model(batches):
    """Velocity alerts of batches of payments, by brute force over every payment that arrived
    before: ``(payer, time, count)`` where the payment and the earlier-arrived payments of its
    payer less than 10 minutes before it (or after it) number 5 or more."""
    seen: list = []
    out = []
    for payments in batches:
        for p in payments:
            n = 1 + sum(1 for q in seen if q["payer_id"] == p["payer_id"] and p["event_time"] - q["event_time"] < 600_000)
            if n >= 5:
                out.append((p["payer_id"], p["event_time"], f"{n} payments in 10 minutes"))
            seen.append(p)
    return out


def recent_times(record):
    """The payment times in a payer's ``recent`` list (entries are ``(time, TTL stamp)``)."""
    return [t for t, _ in (record or {}).get("recent") or []]


@pytest.mark.parametrize("seed", range(40))
def test_velocity_on_out_of_order_payments_matches_a_brute_force_model(seed):
    """Dense payments, out of order within the job's watermark bound (each no further behind
    the largest time of the batches before it than the bound allows), in batches: the alerts
    are the brute force's, and the list of recent payments stays bounded."""
    rnd = random.Random(seed)
    bound = rnd.choice([5_000, 60_000, 300_000])  # the job's watermark bound (max out-of-orderness)
    h = harness(disorder_ms=bound)
    payers = [f"p{i}" for i in range(rnd.randint(1, 3))]
    top = T0 + rnd.randrange(1_000)  # the largest time of the batches so far
    batches = []
    for _ in range(rnd.randint(2, 12)):
        payments = []
        for _ in range(rnd.randint(0, 15)):
            # behind the largest time of the batches before by at most bound ms: never late
            t = top - rnd.randrange(bound + 1) + rnd.choice([0, 0, 1, 1000, 60_000, 300_000, 700_000])
            payments.append(pay(rnd.choice(payers), 10, t))
        if payments and rnd.random() < 0.3:  # ties at the window's edge, as in the reproducer
            q = rnd.choice(payments)
            payments.append(pay(q["payer_id"], 10, q["event_time"] + rnd.choice([-600_000, 600_000, -599_999, 599_999])))
            payments = [p for p in payments if p["event_time"] > top - bound]
        batches.append(payments)
        top = max([top] + [p["event_time"] for p in payments])
    got, kept_too_long = [], []
    for payments in batches:
        watermark = h.watermark  # the batch's (the harness advances it after the batch)
        got += [(r["payer_id"], r["event_time"], r["detail"]) for r in h.process_batch(payments) if r["rule"] == "velocity"]
        # bounded: a payment not behind the watermark W cannot count one at W - 10 min or before
        kept_too_long += [(p["payer_id"], t) for p in payments for t in recent_times(h.records.get(p["payer_id"]))
                          if t <= watermark - 600_000]
    assert got == velocity_model(batches)
    assert not kept_too_long


def test_the_recent_payments_stay_bounded_on_a_long_stream():
    job = JOBS["fraud-detection"].job(events=20_000, seed=3, payers=5, events_per_second=2)
    events = job.source_spec.events_as_dicts()
    h = job.harness()
    longest = 0
    for i in range(0, len(events), 500):
        h.process_batch(events[i : i + 500])
        longest = max(longest, *(len(recent_times(r)) for r in h.records.values()))
    # 20,000 payments over 10,000 s by 5 payers: one per payer every 2.5 s. A list of every
    # payment would reach 4,000; 10 minutes, the 5 s bound and a batch's 250 s hold about 340
    assert 240 < longest < 450, longest


def test_amount_spike_needs_three_payments_and_more_than_ten_times_the_average():
    h = harness()
    assert h.process_batch([pay("a", 100, T0), pay("a", 1001, T0 + 1)]) == []  # one payment: no average yet
    hour = 3_600_000
    assert h.process_batch([pay("b", 100, T0 + i * hour) for i in range(3)] + [pay("b", 1000, T0 + 3 * hour)]) == []  # 10x
    out = h.process_batch([pay("b", 11_000, T0 + 4 * hour)])
    assert fired(out) == [("b", "amount-spike")] and "the average 325.00" in out[0]["detail"]


# ------------------------------------------------------------------ rules


def test_a_rule_applies_from_the_micro_batch_that_reads_it():
    h = harness()
    big = [pay("a", 60_000, T0, device="ios")]
    assert h.process_batch(big) == []  # no rule yet
    # the rule arrives in this batch: broadcast elements run first, so it applies to every
    # payment of the batch (whatever their order of arrival) and of every later batch
    out = h.process_batch([pay("b", 60_000, T0 + 1)], broadcast=[SEED_RULE])
    assert fired(out) == [("b", SEED_RULE["rule_id"])] and out[0]["action"] == "block"
    assert fired(h.process_batch([pay("c", 70_000, T0 + 2)])) == [("c", SEED_RULE["rule_id"])]
    # "a" now pays from a device it has used: not new
    assert h.process_batch([pay("a", 60_000, T0 + 3, device="ios")]) == []
    # removed, from its own batch on
    off = {"rule_id": SEED_RULE["rule_id"], "active": False}
    assert h.process_batch([pay("d", 60_000, T0 + 4)], broadcast=[off]) == []
    assert h.broadcast_states == {"rules": {}}


def test_a_rule_replaced_by_its_id_and_rules_with_hours():
    h = harness()
    night = {"rule_id": "night", "min_amount": 1000.0, "from_hour": 22, "to_hour": 6, "action": "alert"}
    h.process_batch([], broadcast=[night])
    at = lambda hour: T0 + hour * 3_600_000  # noqa: E731
    out = h.process_batch([pay("a", 2000, at(23)), pay("b", 2000, at(12)), pay("c", 2000, at(3)), pay("d", 500, at(3))])
    assert fired(out) == [("a", "night"), ("c", "night")]
    h.process_batch([], broadcast=[{**night, "min_amount": 5000.0}])
    assert h.process_batch([pay("e", 2000, at(23))]) == []
    assert h.broadcast_states["rules"]["night"].min_amount == 5000.0


BAD_RULES = [
    ({"rule_id": None, "min_amount": 10.0}, "needs a rule_id"),
    ({"rule_id": "x", "min_amount": -5.0}, "min_amount must be a number >= 0, got -5.0"),
    ({"rule_id": "x", "min_amount": 10.0, "action": "delete"}, "action must be one of alert, block, got 'delete'"),
    ({"rule_id": "x", "min_amount": 10.0, "from_hour": 3}, "give both from_hour and to_hour"),
    ({"rule_id": "x", "min_amount": 10.0, "from_hour": 3, "to_hour": 25}, "to_hour must be an hour 0-23"),
    ({"rule_id": "x"}, "has no condition and would fire on every payment"),
    ({"rule_id": "x", "limit": 10.0}, "unknown field(s) limit"),
    ({"active": False}, "needs the rule_id to remove"),
]


@pytest.mark.parametrize(("element", "reason"), BAD_RULES)
def test_a_malformed_rule_goes_to_the_dead_letters_and_the_job_goes_on(element, reason):
    h = harness()
    h.process_batch([], broadcast=[SEED_RULE])
    out = h.process_batch([pay("a", 60_000, T0)], broadcast=[element])
    assert fired(out) == [("a", SEED_RULE["rule_id"])]  # the rules it had still apply
    (dead,) = h.side_output("dead_letters")
    assert "FraudDetector.process_broadcast_element rejected it: RuleError" in dead["reason"] and reason in dead["reason"]
    assert set(h.broadcast_states["rules"]) == {SEED_RULE["rule_id"]}
    assert fired(h.process_batch([pay("b", 60_000, T0 + 1)])) == [("b", SEED_RULE["rule_id"])]


def test_rule_matching():
    rule = Rule("r", min_amount=100.0, new_device=True)
    assert rule.matches(100.01, True, 0) and not rule.matches(100.0, True, 0) and not rule.matches(500.0, False, 0)
    day = Rule("d", from_hour=9, to_hour=17)
    assert [h for h in range(24) if day.matches(1.0, False, h)] == list(range(9, 17))
    with pytest.raises(RuleError, match="rule 'x': new_device must be true or false"):
        Rule("x", min_amount=1.0, new_device="yes")  # type: ignore[arg-type]
    assert Rule.from_element({"rule_id": "i", "min_amount": 5, "active": True}) == ("i", Rule("i", min_amount=5.0))


# ------------------------------------------------------------------ rules sources and the CLI


def test_rules_sources_and_their_guarantees(tmp_path):
    folder = rules_source(str(tmp_path))
    assert isinstance(folder, FileSource) and folder.path == str(tmp_path) and folder.format == "json"
    assert str(folder.guarantee) == "exactly-once" and rules_source(f"file:{tmp_path}") == folder
    sock = rules_source("socket://localhost:9999")
    assert isinstance(sock, SocketSource) and str(sock.guarantee) == "at-most-once"
    with pytest.raises(JobDefinitionError, match="is not a folder; create it"):
        rules_source(str(tmp_path / "missing"))
    with pytest.raises(JobDefinitionError, match="rule files are JSON lines"):
        rules_source(f"file:{tmp_path}?format=csv")
    job = JOBS["fraud-detection"].job(rules=folder, events=10)
    assert job.connected.source == folder
    with pytest.raises(JobDefinitionError, match="reads no rules; only fraud-detection"):
        JOBS["running-sum"].job(rules=folder)


def test_cli_refuses_rules_for_a_job_without_them_and_a_missing_folder(tmp_path):
    from click.testing import CliRunner

    from sparkstate.cli import main

    result = CliRunner().invoke(main, ["run", "running-sum", "--rules", str(tmp_path)])
    assert result.exit_code == 1 and "job 'running-sum' reads no rules; only fraud-detection" in result.output
    result = CliRunner().invoke(main, ["run", "fraud-detection", "--rules", str(tmp_path / "nope")], terminal_width=200)
    assert result.exit_code == 1 and "is not a folder; create it" in result.output


def test_cli_starts_the_default_rules_folder_with_the_seed_rule(tmp_path, monkeypatch):
    import json

    from sparkstate.cli import _rules_source

    source = _rules_source(JOBS["fraud-detection"], None, tmp_path / "rules")
    assert isinstance(source, FileSource) and source.path == str(tmp_path / "rules")
    (rule_file,) = (tmp_path / "rules").iterdir()
    assert json.loads(rule_file.read_text()) == SEED_RULE
    rule_file.unlink()  # an existing folder is left as it is
    _rules_source(JOBS["fraud-detection"], None, tmp_path / "rules")
    assert list((tmp_path / "rules").iterdir()) == []


# ------------------------------------------------------------------ against an independent model


def model(batches):
    """Expected alerts of batches of ``(rule elements, payments)``, written from the rules'
    statement: rules first in each batch; per payer in arrival order: velocity counts the
    payment and every earlier-arrived one less than 10 minutes before it (or after it), a
    brute force over all of them; a spike is more than 10x the average of all earlier payments
    once there are 3; a device is new if the payer never paid from it before."""
    rules: dict = {}
    history: dict = {}
    out = []
    for elements, payments in batches:
        for e in elements:
            if e.get("active") is False:
                rules.pop(e["rule_id"], None)
                continue
            limit, lo, hi = e.get("min_amount") or 0, e.get("from_hour"), e.get("to_hour")
            no_condition = not (limit or e.get("new_device") or lo is not None)
            if limit < 0 or (lo is not None and lo == hi) or no_condition:
                continue  # not a rule: a dead letter
            rules[e["rule_id"]] = e
        for p in payments:
            past = history.setdefault(p["payer_id"], [])
            t, amount = p["event_time"], p["amount"]
            n = 1 + sum(1 for q in past if t - q["event_time"] < 600_000)
            if n >= 5:
                out.append((p["payer_id"], "velocity", t))
            if len(past) >= 3 and amount > 10 * sum(q["amount"] for q in past) / len(past):
                out.append((p["payer_id"], "amount-spike", t))
            new = p["device"] not in {q["device"] for q in past}
            hour = dt.datetime.fromtimestamp(t / 1000, dt.UTC).hour
            for rid, r in rules.items():  # in the order the rules first arrived
                lo, hi = r.get("from_hour"), r.get("to_hour")
                in_hours = lo is None or (lo <= hour < hi if lo < hi else hour >= lo or hour < hi)
                if amount > (r.get("min_amount") or 0) and (new or not r.get("new_device")) and in_hours:
                    out.append((p["payer_id"], rid, t))
            past.append(p)
    return out


#: the disorder of the randomised payments, and the watermark bound of the job they run in
DISORDER_MS = 200_000


@pytest.mark.parametrize("seed", range(30))
def test_randomised_runs_match_the_model(seed):
    """Payments out of order by up to DISORDER_MS, all within the job's watermark bound."""
    rnd = random.Random(seed)
    payers = [f"p{i}" for i in range(rnd.randint(1, 4))]
    t = T0 + rnd.randrange(24) * 3_600_000
    batches = []
    for _ in range(rnd.randint(3, 8)):
        elements = []
        for _ in range(rnd.choice([0, 0, 1, 2])):
            rid = rnd.choice(["r1", "r2", "r3"])
            elements.append(rnd.choice([
                {"rule_id": rid, "min_amount": float(rnd.choice([0, 500, 5000])), "new_device": rnd.random() < 0.5}
                | ({"from_hour": rnd.randrange(24), "to_hour": rnd.randrange(24)} if rnd.random() < 0.3 else {}),
                {"rule_id": rid, "active": False},
                {"rule_id": rid, "min_amount": -1.0},
            ]))
        payments = []
        for _ in range(rnd.randint(0, 12)):
            t += rnd.choice([1000, 30_000, 120_000, 400_000, 900_000])
            amount = rnd.choice([50.0, 100.0, 100.0, 200.0, 300.0, 2500.0, 4000.0, 9000.0])
            payments.append(pay(rnd.choice(payers), amount, t - rnd.randrange(DISORDER_MS), rnd.choice(["a", "i", "w"])))
        batches.append((elements, payments))
    h = harness(disorder_ms=DISORDER_MS)
    got = []
    for elements, payments in batches:
        for r in h.process_batch(payments, broadcast=elements):
            got.append((r["payer_id"], r["rule"], r["event_time"]))
    assert got == model(batches)


def test_build_takes_a_rules_source():
    from sparkstate.connectors.generator import FraudPayments
    from sparkstate.connectors.sources import ListSource

    rules = ListSource([[SEED_RULE]], schema="rule_id string, min_amount double, new_device boolean, "
                       "from_hour int, to_hour int, action string, active boolean")
    assert build(FraudPayments(events=5), rules=rules).connected.source == rules


def test_the_keyed_part_alone_gives_the_alerts_of_the_job_without_rules():
    from sparkstate.jobs.fraud_detection import PayerChecks
    from sparkstate.testing.harness import KeyedHarness

    job = JOBS["fraud-detection"].job(events=20_000, fraud=0.004, seed=2)
    events = job.source_spec.events_as_dicts()
    alone = KeyedHarness(PayerChecks(), "payer_id", watermark_strategy=job.watermark)
    full = job.harness()
    a, b = [], []
    for i in range(0, len(events), 4000):
        a += alone.process_batch(events[i : i + 4000])
        b += full.process_batch(events[i : i + 4000])
    assert fired(a) == fired(b) and {rule for _, rule in fired(b)} == {"velocity", "amount-spike"}


def test_cli_run_with_a_rules_folder_stops_once_every_payment_is_read():
    from types import SimpleNamespace

    from sparkstate.cli import _until_events_read
    from sparkstate.connectors.generator import FraudPayments

    done = _until_events_read(FraudPayments(events=100))
    at = lambda offset: SimpleNamespace(progress=[{"sources": [{"endOffset": f'{{"offset": {offset}}}'}, {}]}])  # noqa: E731
    assert not done(SimpleNamespace(progress=[])) and not done(at(99)) and done(at(100)) and done(at(102))
