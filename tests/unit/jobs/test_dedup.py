"""The dedup seed job and its generator's duplicates, on the harness.

The reference is computed straight from the generated events, not from the job: the unique
transactions are the first event of each ``txn_id`` in stream order; a seen-flag is alive
while its first delivery's time + TTL is after "now" (Flink's rule)."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest
from ttl_stub import has_ttl_handles, stub_for

from sparkstate.connectors.generator import UpiPayments, UpiTransactions
from sparkstate.errors import JobDefinitionError
from sparkstate.jobs import JOBS
from sparkstate.jobs.dedup import OUTPUT, Dedup, build


class StubbedDedup(Dedup):
    """The job's function, its seen-flag written in the stored TTL representation even before
    sparkstate's TTL handles exist (with them, the job's own handle is used)."""

    def seen_state(self, ctx, descriptor):
        return super().seen_state(ctx, descriptor) if has_ttl_handles() else stub_for(ctx, descriptor)


def unique_transactions(events: list[dict]) -> list[dict]:
    seen: set[int] = set()
    out = []
    for e in events:
        if e["txn_id"] not in seen:
            seen.add(e["txn_id"])
            out.append(e)
    return out


def as_rows(events: list[dict]) -> list[dict]:
    """Events as the job's output rows (the harness returns them as dicts of the output schema)."""
    names = [c.split()[0] for c in OUTPUT.split(", ")]
    return [{n: e[n] for n in names} for e in events]


# --------------------------------------------------------------------------- the generator


def test_duplicates_repeat_earlier_transactions_within_the_delay():
    g = UpiTransactions(events=200_000, duplicates=0.05, duplicate_delay_ms=2_000)
    batch = g.generate(0, g.events)
    ids = batch.column("txn_id").to_numpy()
    offsets = np.arange(len(ids))
    repeats = ids != offsets
    assert abs(repeats.mean() - 0.05) < 0.003
    assert (ids[repeats] < offsets[repeats]).all() and (offsets - ids).max() <= 2_000  # at most 2 s of events later
    assert (ids[ids[repeats]] == ids[repeats]).all()  # a repeat repeats a first delivery
    # the same payload as the original; the event time is the arrival's
    for name in ("merchant_id", "payer_id", "amount", "device"):
        column = batch.column(name).to_numpy(zero_copy_only=False)
        assert (column[repeats] == column[ids[repeats]]).all()


def test_duplicates_are_a_pure_function_of_seed_and_offset():
    g = UpiTransactions(events=300_000, duplicates=0.1, seed=3)
    whole = g.generate(0, 300_000)
    for start, end in [(0, 10), (65_530, 65_600), (299_000, 300_000)]:
        assert g.generate(start, end).to_pylist() == whole.slice(start, end - start).to_pylist()
    assert UpiTransactions(events=1000, duplicates=0.1, seed=4).generate(0, 1000) != g.generate(0, 1000)
    # without duplicates every event is its own transaction, with the payload of UpiPayments
    plain = UpiTransactions(events=1000).generate(0, 1000)
    assert plain.column("txn_id").to_pylist() == list(range(1000))


def test_bad_duplicate_settings_are_refused():
    with pytest.raises(JobDefinitionError, match="0 <= duplicates <= 0.25"):
        UpiTransactions(duplicates=0.5)
    with pytest.raises(JobDefinitionError, match="duplicate_delay_ms"):
        UpiTransactions(duplicate_delay_ms=-1)
    with pytest.raises(JobDefinitionError, match="has no setting 'duplicates'"):
        JOBS["running-sum"].job(duplicates=0.1)
    assert UpiPayments.settings() != UpiTransactions.settings()


# --------------------------------------------------------------------------- the job


def test_dedup_emits_each_transaction_once_across_batches():
    job = JOBS["dedup"].job(events=20_000, duplicates=0.1, duplicate_delay_ms=60_000)
    events = job.source_spec.events_as_dicts()
    h = job.harness()
    out = []
    for i in range(0, len(events), 1_500):
        out += h.process_batch(events[i : i + 1_500], processing_time=1_000 + i)
    assert out == as_rows(unique_transactions(events))
    assert len(out) < len(events) * 0.92


def _ttl_run(events: list[dict], batch: int, ttl_s: float) -> tuple[list, list[int], list[int], object]:
    """The job with an event-time TTL on the harness: its output, and per batch the keys in
    state and the keys the model says are alive."""
    source = UpiTransactions(events=len(events))  # only its out-of-orderness matters here
    job = build(source, fn=StubbedDedup(timedelta(seconds=ttl_s), event_time=True))
    h = job.harness()
    out, sizes, alive = [], [], []
    first_seen: dict[int, int] = {}
    for i in range(0, len(events), batch):
        part = events[i : i + batch]
        out += h.process_batch(part)
        for e in part:
            first_seen.setdefault(e["txn_id"], e["event_time"])
        sizes.append(len(h.records))
        # alive at the batch's watermark: last write + TTL after it
        now = h.operator.scope.watermark
        alive.append(sum(1 for t in first_seen.values() if t + int(ttl_s * 1000) > now))
    return out, sizes, alive, h


def test_dedup_state_stops_growing_once_the_ttl_horizon_is_reached():
    # 1,000 events per event-time second, repeats up to 2 s later, a 5 s TTL: 30 s of events
    g = UpiTransactions(events=30_000, duplicates=0.05, duplicate_delay_ms=2_000)
    events = g.events_as_dicts()
    out, sizes, alive, _ = _ttl_run(events, 1_000, 5)
    assert out == as_rows(unique_transactions(events))  # the TTL outlasts every redelivery delay
    # nothing alive is ever dropped (the output above), and the state keeps within twice
    # what is alive: it stops growing at the horizon (about 5,000 + the watermark's 5 s lag)
    assert all(s >= a for s, a in zip(sizes, alive))
    horizon = sizes[12:]
    assert max(horizon) <= 2 * max(alive[12:])
    assert max(sizes[20:]) <= 1.1 * max(sizes[12:20])
    assert sizes[-1] < len(unique_transactions(events)) / 2


# --------------------------------------------------------------------------- the command line


def test_the_command_line_runs_dedup_with_duplicates(monkeypatch, tmp_path):
    from click.testing import CliRunner

    from sparkstate.cli import main
    from sparkstate.job import Job

    def stop(self, **kwargs):
        raise JobDefinitionError(f"stopped before Spark: {self.source_spec.describe()}")

    monkeypatch.setattr(Job, "run", stop)
    result = CliRunner().invoke(main, ["run", "dedup", "--events", "5000", "--duplicates", "0.1",
                                       "--checkpoint", str(tmp_path / "c")], terminal_width=400)
    assert "UPI transaction generator (5,000 events, 10,000 merchants, 10% duplicates" in result.output, result.output
    default = CliRunner().invoke(main, ["run", "dedup", "--checkpoint", str(tmp_path / "d")], terminal_width=400)
    assert "5% duplicates" in default.output  # the job's default
    bad = CliRunner().invoke(main, ["run", "running-sum", "--duplicates", "0.1"])
    assert bad.exit_code == 1 and "UpiPayments, which has no setting 'duplicates'" in bad.output
    assert CliRunner().invoke(main, ["run", "dedup", "--duplicates", "0.5"]).exit_code == 2  # out of range
    listed = CliRunner().invoke(main, ["jobs"], terminal_width=400)
    assert "dedup" in listed.output
