"""`sparkstate nexmark generate` and the Nexmark jobs in `sparkstate jobs`."""

from __future__ import annotations

import json

from click.testing import CliRunner

from sparkstate.cli import main


def test_generate_writes_the_stream_as_json_lines_and_replaces_only_its_own_files(tmp_path):
    out = tmp_path / "nexmark"
    result = CliRunner().invoke(main, ["nexmark", "generate", "--events", "3000", "--out", str(out), "--files", "3",
                                       "--set", "seed=11", "--quiet"])
    assert result.exit_code == 0, result.output
    assert "wrote 3,000 Nexmark events" in result.output
    lines = [json.loads(x) for f in sorted(out.glob("part-*.json")) for x in f.read_text().splitlines()]
    assert len(lines) == 3000 and lines[0]["event_type"] == 1
    assert json.loads((out / "_nexmark.json").read_text())["seed"] == 11
    # again, smaller: the old run's files go, so the folder holds this run's events only
    result = CliRunner().invoke(main, ["nexmark", "generate", "--events", "100", "--out", str(out), "--files", "1",
                                       "--quiet"])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == ["_nexmark.json", "part-00000.json"]
    (out / "notes.txt").write_text("mine")
    result = CliRunner().invoke(main, ["nexmark", "generate", "--events", "100", "--out", str(out)])
    assert result.exit_code == 1
    assert "holds files that are not Nexmark events (notes.txt)" in result.output
    assert (out / "notes.txt").read_text() == "mine"


def test_generate_refuses_an_unknown_setting(tmp_path):
    result = CliRunner().invoke(main, ["nexmark", "generate", "--events", "10", "--out", str(tmp_path / "x"),
                                       "--set", "hot_ratio=3"])
    assert result.exit_code == 1
    assert "--set 'hot_ratio=3': expected NAME=VALUE with NAME one of" in result.output


def test_jobs_lists_the_nexmark_queries():
    result = CliRunner().invoke(main, ["jobs"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    for query in (0, 4, 5, 7, 9, 15, 20):
        assert f"nexmark-q{query} " in result.output
