"""README.md's Python examples run as written (see tests/readme_examples.py), without Spark:
``Job.run`` only checks the job here. The examples that run a job unconditionally run on
Spark in tests/integration/test_readme_spark.py."""

from __future__ import annotations

from readme_examples import MODULE, python_blocks, run_blocks

from sparkstate.job import Job

#: the sections whose examples run a job on Spark (tests/integration/test_readme_spark.py)
SPARK_SECTIONS = {"Database sinks"}


def test_readme_has_its_examples():
    sections = {b.section for b in python_blocks()}
    assert {"A job", "Windows", "Database sinks", "Checkpoints", "Sources and their guarantees"} <= sections


def test_readme_examples_run_in_order(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # the examples name relative output and checkpoint paths
    runs: list[str] = []
    section = ""

    def checked_run(self, **kwargs):
        self.validate()
        runs.append(section)

    monkeypatch.setattr(Job, "run", checked_run)
    namespace = {"__name__": MODULE}
    for block in python_blocks():
        section = block.section
        run_blocks([block], namespace)
    assert set(runs) == SPARK_SECTIONS, (
        f"README sections running a job outside `if __name__ == '__main__':` {sorted(set(runs))}; "
        f"tests/integration/test_readme_spark.py runs {sorted(SPARK_SECTIONS)} on Spark"
    )
    assert not list(tmp_path.iterdir()), "building the examples' jobs wrote files"


def test_the_first_example_is_the_example_file():
    """examples/pipeline.py is the README's first example (what `sparkstate run` runs in the README)."""
    from pathlib import Path

    from tests.readme_examples import python_blocks

    file = (Path(__file__).resolve().parents[2] / "examples" / "pipeline.py").read_text()
    assert file.split('"""\n\n', 1)[1] == python_blocks()[0].code
