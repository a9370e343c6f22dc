"""The two stream-join seed jobs on the harness: enrich (a KeyedCoProcessFunction) and
click-purchase-join (an interval join), over their generators in micro-batches."""

from __future__ import annotations

from collections import Counter

import pytest
from click.testing import CliRunner
from interval_join_model import MIN_WATERMARK, Element, late, watermarks

from sparkstate.cli import main
from sparkstate.connectors import MerchantProfiles, Purchases
from sparkstate.connectors.generator import GENERATORS
from sparkstate.jobs import JOBS
from sparkstate.jobs.enrich import PAYMENT_COLUMNS, EnrichPayments

MAX_WAIT = 300_000


def batches_of(job):
    """The job's two generators read in step, each ``max_batch`` events a micro-batch."""
    g1, g2 = job.source_spec, job.connected.source
    o1 = o2 = 0
    out = []
    while o1 < g1.events or o2 < g2.events:
        out.append((g1.events_as_dicts(o1, min(o1 + g1.max_batch, g1.events)),
                    g2.events_as_dicts(o2, min(o2 + g2.max_batch, g2.events))))
        o1, o2 = o1 + g1.max_batch, o2 + g2.max_batch
    return out


def run(job, batches):
    h = job.harness()
    marks, h.batch_rows = [], []
    for first, second in batches:
        marks.append(h.watermark)
        h.batch_rows.append(h.process_batch(first, second=second))
    h.batch_rows.append(h.finish())
    return h, marks, [r for rows in h.batch_rows for r in rows]


# --------------------------------------------------------------------------- enrich


def expected_enrichment(batches, marks, max_wait=MAX_WAIT):
    """Per payment (its columns), the profile revision it should carry (None: none in time),
    from the job's rule: per batch, waits that ran out, then profiles, then payments."""
    latest: dict[str, dict] = {}
    waiting: dict[str, list[dict]] = {}
    want: list[tuple] = []

    def emit(p, profile):
        want.append((tuple(p[c] for c in PAYMENT_COLUMNS), None if profile is None else profile["revision"]))

    for (payments, profiles), wm in zip(batches, marks):
        for m, ps in waiting.items():
            due = [p for p in ps if wm != MIN_WATERMARK and p["event_time"] + max_wait <= wm]
            for p in due:
                emit(p, None)
            waiting[m] = [p for p in ps if p not in due]
        for prof in profiles:
            m = prof["merchant_id"]
            held = latest.get(m)
            if held is None or (prof["event_time"], prof["revision"]) >= (held["event_time"], held["revision"]):
                latest[m] = prof
            for p in waiting.pop(m, []):
                emit(p, latest[m])
        for p in payments:
            m = p["merchant_id"]
            if m in latest:
                emit(p, latest[m])
            else:
                waiting.setdefault(m, []).append(p)
    for ps in waiting.values():  # the end of the input: every wait runs out
        for p in ps:
            emit(p, None)
    return Counter(want)


@pytest.mark.parametrize(("settings", "waited", "without"), [
    # every first profile in the first batch, 9 updates per merchant over the run
    ({"merchants": 300}, False, False),
    # first profiles over 4 batches: payments wait for them, and some give up after 2 s
    ({"merchants": 1000, "profile_updates": 1, "max_wait_s": 2}, True, True),
])
def test_enrich_emits_every_payment_once_with_the_latest_profile_it_could_see(settings, waited, without):
    job = JOBS["enrich"].job(events=12_000, max_batch=1500, **settings)
    wait = job.function.max_wait_ms
    batches = batches_of(job)
    h, marks, out = run(job, batches)
    payments = [p for first, _ in batches for p in first]
    assert len(out) == len(payments) == 12_000
    got = Counter((tuple(r[c] for c in PAYMENT_COLUMNS), r["profile_revision"]) for r in out)
    assert got == expected_enrichment(batches, marks, wait)
    assert (sum(r["profile_revision"] is None for r in out) > 0) == without
    # a payment released by its merchant's first profile comes out in a later batch than its own
    batch_of = {tuple(p[c] for c in PAYMENT_COLUMNS): i for i, (first, _) in enumerate(batches) for p in first}
    emitted_in = [i for i, rows in enumerate(h.batch_rows) for _ in rows]
    released = [r for r, i in zip(out, emitted_in)
                if r["profile_revision"] is not None and batch_of[tuple(r[c] for c in PAYMENT_COLUMNS)] < i]
    assert bool(released) == waited
    # the profile columns are those of the revision named, or all null
    profiles = {p["revision"]: p for _, second in batches for p in second}
    for r in out:
        p = profiles.get(r["profile_revision"])
        assert (r["merchant_name"], r["risk_tier"]) == ((p["merchant_name"], p["risk_tier"]) if p else (None, None))
    assert all("waiting" not in h.state(k) for k in h.keys()), "no payment left waiting"
    assert len({r["profile_revision"] for r in out}) > settings["merchants"], "profiles change during the run"




def test_enrich_waits_for_a_first_profile_and_then_gives_up():
    job = JOBS["enrich"].job(events=10, merchants=2)
    h = job.harness()
    pay = {"merchant_id": "m1", "payer_id": "p", "amount": 1.0, "device": "ios"}
    prof = {"merchant_id": "m1", "merchant_name": "one", "category": "fuel", "risk_tier": "low", "daily_limit": 9.0}
    assert h.process_batch([{**pay, "event_time": 10_000}]) == []
    assert [r["event_time"] for r in h.state("m1")["waiting"]] == [10_000]
    # the first profile releases the waiting payment
    out = h.process_batch([], second=[{**prof, "event_time": 11_000, "revision": 5}])
    assert [(r["event_time"], r["profile_revision"]) for r in out] == [(10_000, 5)]
    # an older update arriving late is ignored; a newer one replaces the profile
    h.process_batch([], second=[{**prof, "event_time": 9_000, "revision": 3, "risk_tier": "high"}])
    assert h.state("m1")["profile"]["revision"] == 5
    out = h.process_batch([{**pay, "event_time": 12_000}], second=[{**prof, "event_time": 12_500, "revision": 6}])
    assert [(r["event_time"], r["profile_revision"]) for r in out] == [(12_000, 6)]
    # another merchant's payment waits max_wait of event time, then goes out without profile
    assert h.process_batch([{**pay, "merchant_id": "m2", "event_time": 20_000}]) == []
    h.process_batch([], watermark=20_000 + MAX_WAIT - 1)
    assert "waiting" in h.state("m2")
    out = h.process_batch([], watermark=20_000 + MAX_WAIT)
    assert [(r["merchant_id"], r["profile_revision"], r["merchant_name"]) for r in out] == [("m2", None, None)]
    assert "waiting" not in h.state("m2")


def test_enrich_options_and_profile_stream():
    job = JOBS["enrich"].job(events=100_000, merchants=1000, profile_updates=3, max_wait_s=60, max_batch=10_000)
    profiles = job.connected.source
    assert isinstance(profiles, MerchantProfiles)
    # every merchant's first profile, then 3 updates each, over the payments' event time, in step
    assert (profiles.events, profiles.merchants, profiles.max_batch) == (4000, 1000, 400)
    first = profiles.events_as_dicts(0, 1000)
    assert [p["merchant_id"] for p in first] == [f"m{i:06d}" for i in range(1000)]
    last = profiles.events_as_dicts(3999, 4000)[0]
    payments_end = job.source_spec.start_ms + 100_000 * 1000 / job.source_spec.events_per_second
    assert abs(last["event_time"] - payments_end) < 6_000
    assert isinstance(job.function, EnrichPayments) and job.function.max_wait_ms == 60_000
    assert {"MerchantProfiles", "Purchases"} <= set(GENERATORS)


# --------------------------------------------------------------------------- click-purchase-join


def test_click_purchase_join_matches_a_brute_force_join():
    job = JOBS["click-purchase-join"].job(events=30_000, max_batch=3000, active_users=200)
    assert isinstance(job.connected.source, Purchases)
    batches = batches_of(job)
    _, _, out = run(job, batches)
    # the model: the ids are the events' places in their streams
    ids = iter(range(10**9))
    model = [([Element(next(ids), c["user_id"], c["event_time"]) for c in first],
              [Element(next(ids), p["user_id"], p["event_time"]) for p in second]) for first, second in batches]
    event = {e.id: ev for (first, second), (ls, rs) in zip(batches, model) for e, ev in zip(ls + rs, first + second)}
    late_l, late_r = late(model, job.watermark.max_out_of_orderness_ms)
    lefts = [e for ls, _ in model for e in ls if e.id not in late_l]
    rights = [e for _, rs in model for e in rs if e.id not in late_r]
    want = sorted(
        (a.key, a.ts, b.ts, event[a.id]["item_id"], event[b.id]["item_id"])
        for a in lefts for b in rights
        if a.key == b.key and a.ts <= b.ts <= a.ts + 600_000 and event[a.id]["category"] == event[b.id]["category"]
    )
    got = sorted((r["user_id"], r["click_time"], r["purchase_time"], r["clicked_item"], r["purchased_item"]) for r in out)
    assert got == want
    assert len(want) > 200
    assert watermarks(model, job.watermark.max_out_of_orderness_ms)[-1] > 0


def test_cli_lists_the_join_jobs_and_takes_their_options(monkeypatch):
    from sparkstate import cli

    monkeypatch.setattr(cli.console, "width", 300)
    listed = CliRunner().invoke(main, ["jobs"])
    assert listed.exit_code == 0
    assert "enrich" in listed.output and "UpiPayments + MerchantProfiles" in listed.output
    assert "click-purchase-join" in listed.output and "ClickEvents + Purchases" in listed.output
    shown = CliRunner().invoke(main, ["explain", "click-purchase-join", "--events", "100"])
    assert shown.exit_code == 0 and "ClickToPurchase (interval join function)" in shown.output
    assert "connected:  interval join with Purchases by user_id [0 ms, 600000 ms]" in shown.output
    bad = CliRunner().invoke(main, ["run", "enrich", "--set", "profile_updates=many"])
    assert bad.exit_code == 1 and "'many' is not a valid int" in bad.output
    assert JOBS["click-purchase-join"].job(events=100, window_minutes=5).connected.join_bounds == (0, 300_000)


def test_cli_run_shows_the_second_input_and_passes_the_job_options(monkeypatch, tmp_path):
    from sparkstate.errors import JobDefinitionError
    from sparkstate.job import Job

    def stop(self, **kwargs):
        raise JobDefinitionError(f"stopped before Spark (max wait {self.function.max_wait_ms} ms)")

    monkeypatch.setattr(Job, "run", stop)
    result = CliRunner().invoke(main, ["run", "enrich", "--events", "1000", "--set", "max_wait_s=60",
                                       "--checkpoint", str(tmp_path / "c")], terminal_width=400)
    out = " ".join(result.output.split())
    assert "connected: merchant profile generator (100,000 events, 10,000 merchants, seed 8)" in out
    assert "connected MerchantProfiles by merchant_id" in out and "max wait 60000 ms" in out
