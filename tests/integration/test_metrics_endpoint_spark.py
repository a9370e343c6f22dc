"""The metrics endpoint during a real run: read while the job runs, from another thread than
the job's, and checked against the run's own result at the end."""

from __future__ import annotations

import json
import re
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families
from spark_helpers import FAST

from sparkstate import Job, KeyedProcessFunction, ListSource, MemorySink, NoopSink, UpiPayments
from sparkstate.errors import JobFailedError
from sparkstate.jobs.running_sum import OUTPUT, RunningSum
from sparkstate.metrics.report import write_report
from sparkstate.runtime.checkpoint.directory import CheckpointDir
from sparkstate.runtime.checkpoint.run_record import last_run

pytestmark = pytest.mark.spark


def test_the_endpoint_answers_while_the_job_runs(spark, tmp_path) -> None:
    notices: list[str] = []
    seen: list[dict] = []

    def read(url: str) -> bytes:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.read()

    def during(p: dict) -> None:  # after each batch, as a person with curl would
        base, job_id = re.search(r"(http://\S+)/jobs/(\w+)/metrics", notices[0]).groups()
        names = "numRecordsIn,numberOfCompletedCheckpoints,lastCheckpointDuration,stateSizeBytes,batchDuration"
        values = {m["id"]: m["value"] for m in json.loads(read(f"{base}/jobs/{job_id}/metrics?get={names}"))}
        jobs = json.loads(read(f"{base}/jobs"))["jobs"]
        prom = {s.name: s.value for f in text_string_to_metric_families(read(f"{base}/metrics").decode()) for s in f.samples}
        history = json.loads(read(f"{base}/jobs/{job_id}/checkpoints"))["history"]
        seen.append({"values": values, "status": jobs[0]["status"], "prom": prom, "history": history})

    job = (
        Job("metrics-w1").source(UpiPayments(events=30_000, merchants=500, max_batch=10_000)).key_by("merchant_id")
        .process(RunningSum(), output_schema=OUTPUT).sink(NoopSink())
    )
    result = job.run(checkpoint_dir=tmp_path / "ckpt", spark=spark, metrics_port=0, on_notice=notices.append,
                     on_progress=during)
    assert notices and "metrics: http://127.0.0.1:" in notices[0]
    assert len(seen) == result.batches >= 3
    last = seen[-1]
    assert last["status"] == "RUNNING"
    assert int(last["values"]["numRecordsIn"]) == result.events == 30_000
    assert int(last["values"]["numberOfCompletedCheckpoints"]) == len(result.checkpoints) == len(last["history"])
    assert int(last["values"]["lastCheckpointDuration"]) == result.checkpoints[-1].duration_ms
    assert int(last["values"]["stateSizeBytes"]) == result.state_bytes
    assert last["prom"]["sparkstate_records_in_total"] == 30_000
    assert [int(s["values"]["numRecordsIn"]) for s in seen] == sorted(int(s["values"]["numRecordsIn"]) for s in seen)
    # the endpoint ends with the run; how the run ended is in its checkpoint, for the report
    with pytest.raises(OSError):
        read(re.search(r"(http://\S+)/jobs", notices[0]).group(1) + "/jobs")
    assert last_run(CheckpointDir.open(tmp_path / "ckpt")).status == "FINISHED"


class FailsOnBad(KeyedProcessFunction):
    def process_element(self, e, ctx):
        if e["v"] == "bad":
            raise ValueError("a bad event")
        yield {"k": ctx.get_current_key(), "v": e["v"]}


def test_a_failed_run_s_status_and_failed_checkpoints_reach_the_report(spark, tmp_path) -> None:
    """The endpoint stops with the run, so a failed run's FAILED and numberOfFailedCheckpoints
    are read from the checkpoint by `sparkstate report`, over the checkpoint's runs."""
    job = (Job("fails").source(ListSource([[{"k": "a", "v": "ok"}], [{"k": "a", "v": "bad"}]], "k string, v string"))
           .key_by("k").process(FailsOnBad(), output_schema="k string, v string").sink(MemorySink())
           .with_settings(**FAST))
    for _ in range(2):  # the second run replays the failed batch, and fails again
        with pytest.raises(JobFailedError, match="a bad event"):
            job.run(checkpoint_dir=tmp_path / "ckpt", spark=spark, metrics_port=0)
    checkpoint = CheckpointDir.open(tmp_path / "ckpt")
    report = write_report(checkpoint, tmp_path / "report", "fails")
    assert report.batches == 1 and report.last_run is not None
    assert report.last_run.status == "FAILED" and report.last_run.failed_checkpoints == 2
    page = report.html.read_text()
    config = json.loads(re.search(r"window\.SPARKSTATE = (.*?);</script>", page).group(1))
    assert config["job"]["state"] == "FAILED" and config["values"]["numberOfFailedCheckpoints"] == 2
