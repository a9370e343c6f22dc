"""The documentation's code blocks work as written (see tests/docs_examples.py), without Spark:
every page's Python blocks run (``Job.run`` only checks the job here; the pages whose examples
run a job unconditionally run on Spark in tests/integration/test_docs_spark.py), every shell
block parses, every ``sparkstate`` command in one is a command line the CLI takes, and the
cheap ones (``jobs``, ``explain``, ``--help``, ``--version``) run."""

from __future__ import annotations

import json
import subprocess
import tomllib

import click
import pytest
from click.testing import CliRunner
from docs_examples import DOCS, MODULE, README, ROOT, blocks, commands, pages, python_blocks, run_blocks

from sparkstate.cli import main
from sparkstate.job import Job

#: the pages whose examples run a job on Spark (tests/integration/test_docs_spark.py)
SPARK_PAGES = {DOCS / "guides" / "sinks.md"}
#: the fences a page may use; python and bash run (or parse), json, yaml and toml parse
LANGUAGES = {"python", "bash", "text", "sql", "json", "yaml", "toml", "ini", "console", "pycon", "mermaid", "csv"}
#: CLI commands cheap enough to run for every occurrence (no Spark, no server)
CHEAP = {"jobs", "explain"}

PAGES = pages()
PYTHON_PAGES = [p for p in PAGES if python_blocks(p)]


def _id(path) -> str:
    return str(path.relative_to(ROOT))


def test_the_readme_stays_short():
    """The README is the pitch, the two commands, one job, the comparison and the figures; the
    rest lives on the site."""
    assert len(README.read_text().splitlines()) <= 250


def test_the_site_and_the_readme_have_examples():
    assert python_blocks(README), "README.md shows one job"
    assert len(PYTHON_PAGES) >= 10, [_id(p) for p in PYTHON_PAGES]


@pytest.mark.parametrize("page", PYTHON_PAGES, ids=_id)
def test_a_pages_python_examples_run_in_order(page, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # the examples name relative output and checkpoint paths
    runs: list[str] = []

    def checked_run(self, **kwargs):
        self.validate()
        runs.append(self.name)

    monkeypatch.setattr(Job, "run", checked_run)
    run_blocks(python_blocks(page), {"__name__": MODULE})
    if page in SPARK_PAGES:
        assert runs, f"{_id(page)} runs no job any more: take it out of SPARK_PAGES"
    else:
        assert not runs, (
            f"{_id(page)} runs jobs {runs} outside `if __name__ == '__main__':`; "
            f"tests/integration/test_docs_spark.py runs only {sorted(map(_id, SPARK_PAGES))} on Spark"
        )
        assert not list(tmp_path.iterdir()), f"building {_id(page)}'s jobs wrote files"


@pytest.mark.parametrize("page", PAGES, ids=_id)
def test_a_pages_other_blocks_parse(page):
    for block in blocks(page):
        assert block.lang in LANGUAGES, f"{block.where}: a ```{block.lang or ''} block (say what it is: {sorted(LANGUAGES)})"
        if block.lang == "bash":
            checked = subprocess.run(["bash", "-n"], input=block.code, text=True, capture_output=True)
            assert checked.returncode == 0, f"{block.where}: {checked.stderr}"
        elif block.lang == "json":
            json.loads(block.code)
        elif block.lang == "yaml":
            import yaml  # mkdocs' (requirements-docs.txt)

            yaml.safe_load(block.code)
        elif block.lang == "toml":
            tomllib.loads(block.code)


def _cli_commands():
    for page in PAGES:
        for block in blocks(page, "bash"):
            for words in commands(block.code):
                if words[0].endswith("sparkstate") and not words[0].endswith(".py"):
                    yield block, words[1:]


CLI_COMMANDS = list(_cli_commands())


def _resolve(args: list[str]) -> tuple[click.Command, list[str], list[str]]:
    """The command ``args`` name (through groups), its path, and the words after it."""
    command, path, rest = main, [], list(args)
    while isinstance(command, click.Group) and rest and not rest[0].startswith("-"):
        name = rest.pop(0)
        assert name in command.commands, f"no command `sparkstate {' '.join([*path, name])}`"
        command, path = command.commands[name], [*path, name]
    return command, path, rest


def _check_options(command: click.Command, words: list[str]) -> None:
    options = {name: param for param in command.get_params(click.Context(command)) if isinstance(param, click.Option)
               for name in (*param.opts, *param.secondary_opts)}
    arguments = [p for p in command.params if isinstance(p, click.Argument)]
    positional, takes = 0, 0
    for word in words:
        if takes:
            takes -= 1
        elif word.startswith("-") and word != "-":
            name = word.split("=", 1)[0]
            assert name in options, f"no option {name}"
            option = options[name]
            if not (option.is_flag or option.count) and "=" not in word:
                takes = option.nargs
        else:
            positional += 1
    most = sum(1 if a.nargs > 0 else 10**6 for a in arguments)
    assert positional <= most, f"{positional} arguments, the command takes {most}"


@pytest.mark.parametrize("block, args", CLI_COMMANDS, ids=[f"{b.where}:{' '.join(a)[:40]}" for b, a in CLI_COMMANDS])
def test_a_documented_command_line_is_the_clis(block, args):
    try:
        command, path, rest = _resolve(args)
        _check_options(command, rest)
    except AssertionError as exc:
        raise AssertionError(f"{block.where}: `sparkstate {' '.join(args)}`: {exc}") from None


def _cheap(args: list[str]) -> bool:
    if "--help" in args or "-h" in args or args in (["--version"], []):
        return True
    if not args or args[0] not in CHEAP:
        return False
    if args[0] == "explain":
        from sparkstate.jobs import JOBS

        target = args[1].split(":")[0] if len(args) > 1 else ""
        return target in JOBS or (ROOT / target).is_file()
    return True


@pytest.mark.parametrize("args", sorted({tuple(a) for _, a in CLI_COMMANDS if _cheap(a)}), ids=" ".join)
def test_a_cheap_documented_command_runs(args, monkeypatch):
    monkeypatch.chdir(ROOT)  # the pages' paths (examples/pipeline.py) are the checkout's
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 0, f"`sparkstate {' '.join(args)}`:\n{result.output}"


def test_the_first_example_is_the_example_file():
    """examples/pipeline.py is the README's example (what `sparkstate run` runs in the README)."""
    file = (ROOT / "examples" / "pipeline.py").read_text()
    assert file.split('"""\n\n', 1)[1] == python_blocks(README)[0].code
