"""`sparkstate run path/to/pipeline.py`: a user's own job gets the CLI (progress, summary,
resume, explain), as a person runs it, in its own process; its classes, a state value's too,
reach Spark's workers from a file they cannot import."""

from __future__ import annotations

import textwrap
from pathlib import Path

from tests.e2e.test_cli_runs import sparkstate

PIPELINE = textwrap.dedent('''
    from dataclasses import dataclass

    from sparkstate import Job, KeyedProcessFunction, ParquetSink, UpiPayments, ValueStateDescriptor


    @dataclass
    class Totals:  # a state value of a class only this file defines
        count: int = 0
        total: float = 0.0


    class RunningSum(KeyedProcessFunction):
        def open(self, ctx):
            self.totals = ctx.get_state(ValueStateDescriptor("totals", Totals))

        def process_element(self, event, ctx):
            t = self.totals.value() or Totals()
            t = Totals(t.count + 1, t.total + event["amount"])
            self.totals.update(t)
            yield {"merchant_id": ctx.get_current_key(), "count": t.count, "total": t.total}


    job = (
        Job("my-running-sum")
        .source(UpiPayments(events=20_000, merchants=300, max_batch=10_000))
        .key_by("merchant_id")
        .process(RunningSum(), output_schema="merchant_id string, count bigint, total double")
        .sink(ParquetSink("out/my-running-sum"))
    )

    if __name__ == "__main__":
        raise SystemExit("the CLI imports the file, it does not run it as a script")
''')


def test_a_pipeline_file_runs_with_the_cli_and_resumes(tmp_path: Path) -> None:
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "pipeline.py").write_text(PIPELINE)
    first = sparkstate(tmp_path, "run", "jobs/pipeline.py", "--partitions", "2")
    assert first.returncode == 0, first.stderr
    out = first.stdout
    assert "my-running-sum: from jobs/pipeline.py" in out
    assert "exactly-once" in out and any(ln.startswith("sink: ") and "out/my-running-sum" in ln for ln in out.splitlines())
    assert "batch 0" in out and "batch 1" in out and "status" in out and "complete" in out and "20,000" in out
    assert (tmp_path / ".sparkstate" / "my-running-sum" / "checkpoint" / "sparkstate.json").exists()
    import pyarrow.parquet as pq

    rows = pq.read_table(tmp_path / "out" / "my-running-sum").to_pylist()
    assert len(rows) == 20_000 and sum(1 for r in rows if r["count"] == 1) == 300
    again = sparkstate(tmp_path, "run", "jobs/pipeline.py:job")
    assert again.returncode == 0, again.stderr
    assert "already ran to the end" in again.stdout
    explained = sparkstate(tmp_path, "explain", "jobs/pipeline.py")
    assert explained.returncode == 0, explained.stderr
    assert "merchant_id" in explained.stdout and "exactly-once" in explained.stdout
    listed = sparkstate(tmp_path, "checkpoints", "jobs/pipeline.py")
    assert listed.returncode == 0, listed.stderr
    assert "my-running-sum: 2 retained checkpoints" in listed.stdout


def test_the_readmes_example_file_runs_as_the_readme_says(tmp_path: Path) -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "pipeline.py"
    run = sparkstate(tmp_path, "run", str(example), "--quiet")
    assert run.returncode == 0, run.stderr
    assert "running-sum: from" in run.stdout and "200,000" in run.stdout
    assert (tmp_path / "out" / "running-sum").is_dir() and (tmp_path / ".sparkstate" / "running-sum" / "checkpoint").is_dir()


def test_a_pipeline_refuses_seed_options_and_says_what_is_wrong(tmp_path: Path) -> None:
    (tmp_path / "pipeline.py").write_text(PIPELINE)
    refused = sparkstate(tmp_path, "run", "pipeline.py", "--events", "10", "--merchants", "5")
    assert refused.returncode == 1
    assert "--events, --merchants: these shape a seed job's input" in refused.stderr
    missing = sparkstate(tmp_path, "run", "nope.py")
    assert missing.returncode == 1 and "no file nope.py" in missing.stderr
    assert "Traceback" not in missing.stderr


SUBMITTED = textwrap.dedent('''
    import json
    from pathlib import Path

    from sparkstate import Job, KeyedProcessFunction, NoopSink, UpiPayments, ValueStateDescriptor
    from sparkstate.runtime.session.classic import active_session


    class Count(KeyedProcessFunction):
        def open(self, ctx):
            self.count = ctx.get_state(ValueStateDescriptor("count", int, default=0))

        def process_element(self, event, ctx):
            self.count.update(self.count.value() + 1)
            yield {"merchant_id": ctx.get_current_key(), "count": self.count.value()}


    job = (Job("submitted").source(UpiPayments(events=5_000, merchants=50, max_batch=5_000)).key_by("merchant_id")
           .process(Count(), output_schema="merchant_id string, count bigint").sink(NoopSink()))

    if __name__ == "__main__":
        result = job.run(checkpoint_dir="ckpt")
        spark = active_session()
        print("RESULT", json.dumps({"events": result.events, "master": spark.sparkContext.master,
                                    "app": spark.sparkContext.appName,
                                    "partitions": spark.conf.get("spark.sql.shuffle.partitions")}))
''')


def test_a_pipeline_file_under_spark_submit_takes_the_submits_master_and_settings(tmp_path: Path) -> None:
    import json
    import os
    import subprocess
    import sys

    (tmp_path / "pipeline.py").write_text(SUBMITTED)
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", "PYSPARK_PYTHON": sys.executable}
    env.pop("SPARK_HOME", None)
    proc = subprocess.run(
        [str(bin_dir / "spark-submit"), "--master", "local[1]", "--name", "mine", "--conf", "spark.sql.shuffle.partitions=3",
         "pipeline.py"], cwd=tmp_path, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))
    assert json.loads(line.removeprefix("RESULT ")) == {"events": 5000, "master": "local[1]", "app": "mine", "partitions": "3"}
    # the checkpoint records the submit's partitions, which a later run keeps
    assert json.loads((tmp_path / "ckpt" / "sparkstate.json").read_text())["settings"]["parallelism"] == 3


def test_curl_of_the_endpoints_during_a_cli_run(tmp_path: Path) -> None:
    """The README's `--metrics-port` example: the three endpoints answer while the job runs,
    and the last figures read agree with the run's summary."""
    import json
    import os
    import socket
    import subprocess
    import sys
    import time
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [str(Path(sys.executable).with_name("sparkstate")), "run", "running-sum", "--events", "300000",
           "--max-batch", "30000", "--rate", "60000", "--sink", "noop", "--metrics-port", str(port)]
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "COLUMNS": "250"})
    base = f"http://127.0.0.1:{port}"
    answers: dict = {}
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"{base}/jobs/running-sum/metrics?get=numRecordsIn,lastCheckpointDuration",
                                            timeout=5) as r:
                    values = {m["id"]: m["value"] for m in json.loads(r.read())}
                if values["numRecordsIn"] not in (None, "0"):
                    for path in ("/jobs", "/jobs/running-sum/checkpoints", "/metrics", "/"):
                        with urllib.request.urlopen(base + path, timeout=5) as r:
                            answers[path] = r.read().decode()
                    answers["values"] = values
                    break
            except OSError:
                pass
            time.sleep(0.2)
        out, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert f"dashboard: {base}/ (metrics: {base}/jobs/" in out
    assert "Spark UI: http://" in out  # on by default, with its address
    assert "<title>running-sum - sparkstate</title>" in answers["/"]
    assert answers, "the endpoint answered with figures while the job ran"
    assert json.loads(answers["/jobs"])["jobs"][0]["name"] == "running-sum"
    assert 0 < int(answers["values"]["numRecordsIn"]) <= 300_000 and answers["values"]["lastCheckpointDuration"]
    assert json.loads(answers["/jobs/running-sum/checkpoints"])["counts"]["completed"] >= 1
    assert 'sparkstate_records_in_total{job="running-sum"}' in answers["/metrics"]
