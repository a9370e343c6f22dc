"""Data printed on a terminal is text: never Rich markup, never a control sequence."""

from __future__ import annotations

import pyarrow as pa
from click.testing import CliRunner

from sparkstate.cli import main

HOSTILE = ["[/]", "[link=https://evil.example]click[/link]", "\x1b]0;pwned\x07\x1b[2J", "[bold]loud[/bold]"]


def test_console_sink_prints_cells_as_they_are(capsys):
    from sparkstate.connectors.sinks import ConsoleSink
    from sparkstate.runtime.io.sinks import _print_batch

    table = pa.table({"who[/]": HOSTILE, "n": [1, 2, 3, 4]})
    _print_batch(ConsoleSink(truncate=False), table, 7, title="dead_letters[/]: ")
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out  # no escape sequence reaches the terminal
    squashed = "".join(out.split())
    for shown in ("[/]", "[link=https://evil.example]click[/link]", "\\x1b]0;pwned\\x07\\x1b[2J", "[bold]loud[/bold]",
                  "who[/]", "dead_letters[/]:batch7"):
        assert shown in squashed


def test_a_setting_with_brackets_is_an_error_not_a_traceback():
    result = CliRunner().invoke(main, ["run", "running-sum", "--set", "x=[/x]"])
    assert result.exit_code == 1, result.exception
    assert "--set 'x=[/x]': expected NAME=VALUE" in " ".join(result.output.split())


def test_results_and_warnings_print_data_as_text():
    from rich.console import Console

    from sparkstate.metrics.progress import print_summary, results_table
    from sparkstate.runtime.run.result import RunResult

    console = Console(record=True, width=300, highlight=False)
    console.print(results_table([{"merchant": "[/]\x1b[31m", "total": 1.5}], "top 1 [/]"))
    print_summary(RunResult(job="j[/]", checkpoint_dir="/tmp/[/]", warnings=["kept [link=x]it[/link]"]), console)
    out = console.export_text()
    assert "[/]\\x1b[31m" in out and "top 1 [/]" in out and "/tmp/[/]" in out and "kept [link=x]it[/link]" in out
