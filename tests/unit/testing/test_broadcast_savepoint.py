"""A broadcast job's savepoint on the harness: the broadcast state written once, restored into
a harness (or a Spark run) of any number of partitions; what changed in the job is checked."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from behaviour_cases import CASES_BY_NAME, canonical

from sparkstate import MapStateDescriptor, SavepointError, StateMigrationError

CASE = CASES_BY_NAME["broadcast-rules"]


def run(h, batches, rules):
    out = []
    for batch, r in zip(batches, rules):
        out += h.process_batch(batch, broadcast=r)
    return out


def test_restored_harness_goes_on_as_if_never_stopped(tmp_path):
    rules = CASE.second_batches()
    whole = run(CASE.job().harness(), CASE.batches, rules)
    h = CASE.job().harness()
    before = run(h, CASE.batches[:3], rules[:3])
    meta = h.savepoint(tmp_path / "sp", source_offset=3, connected_offset=3)
    assert meta["broadcast"]["states"] == {"rules": "MapState[str, int]"}
    assert meta["connected"] == {"source": {"type": "ListSource"}, "source_offset": {"offset": 3}}
    assert (tmp_path / "sp" / "broadcast.json").exists() and meta["broadcast"]["encoding"] == "json"
    restored = CASE.job().harness(from_savepoint=tmp_path / "sp")
    assert restored.broadcast_states == {"rules": {"huge": 25}}
    after = run(restored, CASE.batches[3:], rules[3:])
    assert canonical(before + after) == canonical(whole)


def test_a_damaged_broadcast_file_is_refused(tmp_path):
    h = CASE.job().harness()
    run(h, CASE.batches[:1], CASE.second_batches()[:1])
    h.savepoint(tmp_path / "sp")
    (tmp_path / "sp" / "broadcast.json").write_bytes(b"not the rules")
    with pytest.raises(SavepointError, match="broadcast.json \\(its broadcast state\\) is damaged"):
        CASE.job().harness(from_savepoint=tmp_path / "sp")


def test_broadcast_state_the_job_no_longer_declares_is_refused_or_dropped(tmp_path):
    h = CASE.job().harness()
    run(h, CASE.batches[:1], CASE.second_batches()[:1])
    h.savepoint(tmp_path / "sp")
    other = MapStateDescriptor("limits", str, int)
    job = CASE.job()
    job = replace(job, connected=replace(job.connected, broadcast=(other,)))
    with pytest.raises(StateMigrationError, match="broadcast state 'rules' .* that the job no longer declares"):
        job.harness(from_savepoint=tmp_path / "sp")
    h2 = job.harness(from_savepoint=tmp_path / "sp", allow_non_restored_state=True)
    assert h2.broadcast_states == {}
    assert any("broadcast state 'rules'" in n and "dropped" in n for n in h2.restore_notes)
    assert any("broadcast state 'limits'" in n and "new" in n for n in h2.restore_notes)


def test_a_savepoint_without_broadcast_state_has_no_file(tmp_path):
    meta = CASE.job().harness().savepoint(tmp_path / "sp")
    assert "broadcast" not in meta and not (tmp_path / "sp" / "broadcast.pkl").exists()
    assert json.loads((tmp_path / "sp" / "_savepoint.json").read_text())["connected"]["source_offset"] is None
