"""docs/guides/savepoints.md's Python examples run as written, in order, without Spark (``Job.run``
is under ``if __name__ == "__main__":``, which they do not run)."""

from __future__ import annotations

from pathlib import Path

from docs_examples import python_blocks, run_blocks

DOC = Path(__file__).resolve().parents[3] / "docs" / "guides" / "savepoints.md"


def test_savepoint_docs_examples_run(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    blocks = python_blocks(DOC)
    assert len(blocks) >= 2
    run_blocks(blocks)
    out = capsys.readouterr().out
    assert "alice" in out and "250.0" in out and "ValueState[float]" in out
    assert not list(tmp_path.iterdir()), "the examples write into a temporary directory only"
