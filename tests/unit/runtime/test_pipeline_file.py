"""Loading a user's job from a pipeline file or module (``sparkstate run|explain PIPELINE``),
and what a user sees when the file is not one."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from sparkstate.errors import JobDefinitionError
from sparkstate.job import Job
from sparkstate.runtime.run.pipeline_file import is_pipeline, load_pipeline

JOB = '''
from sparkstate import Job, KeyedProcessFunction, ListSource, NoopSink

class Echo(KeyedProcessFunction):
    def process_element(self, event, ctx):
        yield {"k": event["k"]}

def make(name="{name}"):
    return (Job(name).source(ListSource([[{"k": "a"}]], "k string")).key_by("k")
            .process(Echo(), output_schema="k string").sink(NoopSink()))
'''


def write(folder: Path, name: str, body: str) -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(body))
    return path


def package(folder: Path, name: str) -> Path:
    """An importable package ``name`` in ``folder``."""
    path = folder / name
    path.mkdir()
    (path / "__init__.py").write_text("")
    return path


def test_seed_job_names_are_not_pipelines() -> None:
    assert not is_pipeline("running-sum") and not is_pipeline("upi-per-minute")
    assert is_pipeline("pipeline.py") and is_pipeline("jobs/pipeline.py:job") and is_pipeline("my.module:job")
    assert is_pipeline("./jobs/pipeline")


def test_the_files_only_job_and_its_run_block_stays_out(tmp_path: Path) -> None:
    body = JOB.replace("{name}", "mine") + '\njob = make()\n\nif __name__ == "__main__":\n    raise SystemExit("ran")\n'
    job = load_pipeline(str(write(tmp_path, "pipeline.py", body)))
    assert isinstance(job, Job) and job.name == "mine"
    assert sys.modules[type(job.function).__module__].__name__.startswith("sparkstate_pipeline_")


def test_a_name_picks_a_job_or_a_function_returning_one(tmp_path: Path) -> None:
    body = JOB.replace("{name}", "x") + '\nfirst = make("first")\nsecond = make("second")\n'
    path = write(tmp_path, "two.py", body)
    assert load_pipeline(f"{path}:second").name == "second"
    assert load_pipeline(f"{path}:make").name == "x"
    with pytest.raises(JobDefinitionError, match=r"defines 2 jobs \(first, second\); name one: .*two.py:first"):
        load_pipeline(str(path))
    with pytest.raises(JobDefinitionError, match=r"has no 'third'; its jobs: first, second"):
        load_pipeline(f"{path}:third")
    with pytest.raises(JobDefinitionError, match="calling it returned Echo, not a sparkstate Job"):
        load_pipeline(f"{path}:Echo")


def test_a_module_by_its_dotted_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(package(tmp_path, "mypipelines"), "daily.py", JOB.replace("{name}", "daily") + "\njob = make()\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert load_pipeline("mypipelines.daily:job").name == "daily"
    with pytest.raises(JobDefinitionError, match="no module 'mypipelines.nightly'"):
        load_pipeline("mypipelines.nightly:job")


def test_what_is_wrong_with_a_file_is_said(tmp_path: Path) -> None:
    with pytest.raises(JobDefinitionError, match="no file .*missing.py"):
        load_pipeline(str(tmp_path / "missing.py"))
    empty = write(tmp_path, "empty.py", "x = 1\n")
    with pytest.raises(JobDefinitionError, match="defines no sparkstate Job"):
        load_pipeline(str(empty))
    broken = write(tmp_path, "broken.py", "import os\n\nraise ValueError('no config')\n")
    with pytest.raises(JobDefinitionError, match=r"importing .*broken.py failed at .*broken.py:3: ValueError: no config"):
        load_pipeline(str(broken))
    bad_job = write(tmp_path, "bad_job.py", "from sparkstate import Job\n\njob = Job('j').key_by()\n")
    with pytest.raises(JobDefinitionError, match=r"bad_job.py:3"):
        load_pipeline(str(bad_job))
    not_python = write(tmp_path, "syntax.py", "def (:\n")
    with pytest.raises(JobDefinitionError, match="SyntaxError"):
        load_pipeline(str(not_python))
    returns_other = write(tmp_path, "other.py", "def make():\n    return 42\n")
    with pytest.raises(JobDefinitionError, match="calling it returned int, not a sparkstate Job"):
        load_pipeline(f"{returns_other}:make")


def test_what_the_files_code_raises_or_a_sys_exit_in_it_names_the_file_and_line(tmp_path: Path) -> None:
    """A factory that raised anything but TypeError printed a traceback, and a sys.exit() in the
    file ended the command with no message: each is an error naming the file and line now."""
    from click.testing import CliRunner

    from sparkstate.cli import main

    def explain(spec: str) -> str:
        result = CliRunner().invoke(main, ["explain", spec], terminal_width=400)
        assert result.exit_code == 1 and not isinstance(result.exception, Exception), result.output
        return " ".join(result.output.split())

    path = write(tmp_path, "factory.py", """\
        import sys

        def config():
            raise KeyError("WAREHOUSE_URL")

        def make():
            config()

        def leave():
            sys.exit(3)

        def bare_exit():
            sys.exit()
        """)
    said = explain(f"{path}:make")
    assert f"error: pipeline '{path}:make': calling make() failed at {path}:4: KeyError: 'WAREHOUSE_URL'" in said
    said = explain(f"{path}:leave")
    assert f"calling leave() failed at {path}:10: it called sys.exit(3). The file is imported, not run" in said
    assert "calling bare_exit() failed at" in explain(f"{path}:bare_exit") and "sys.exit()." in explain(f"{path}:bare_exit")
    at_import = write(tmp_path, "exits.py", "import sys\n\nsys.exit('no config')\n")
    said = explain(str(at_import))
    assert f"importing {at_import} failed at {at_import}:3: it called sys.exit('no config')" in said
    # a TypeError from inside the function is the file's too, not a call with the wrong arguments
    typed = write(tmp_path, "typed.py", "def make():\n    return len(5)\n")
    with pytest.raises(JobDefinitionError, match=rf"calling make\(\) failed at {typed}:2: TypeError: object of type"):
        load_pipeline(f"{typed}:make")
    takes_args = write(tmp_path, "args.py", "def make(name):\n    return name\n")
    with pytest.raises(JobDefinitionError, match="calling it with no arguments failed"):
        load_pipeline(f"{takes_args}:make")


def test_a_module_that_fails_to_import_names_its_file_and_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    failing = package(tmp_path, "failing_pipelines")
    module = write(failing, "nightly.py", "import os\n\nos.environ['NIGHTLY_TOKEN']\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("NIGHTLY_TOKEN", raising=False)
    with pytest.raises(JobDefinitionError, match=rf"importing failing_pipelines.nightly failed at {module}:3: KeyError"):
        load_pipeline("failing_pipelines.nightly:job")
    exits = write(failing, "exits.py", "raise SystemExit(2)\n")
    with pytest.raises(JobDefinitionError, match=rf"failed at {exits}:1: it called sys.exit\(2\)"):
        load_pipeline("failing_pipelines.exits:job")
