"""sparkstate on a Spark standalone cluster (``scripts/cluster.sh``: a master and two one-core
workers on this machine, each executor a JVM and Python workers of its own): seed jobs give
the rows they give on the harness (so in local mode), an executor or a whole worker killed in
the middle of a batch changes no row, and a killed driver's next run resumes from the
checkpoint, whose savepoint carries the state to local mode with another partition count and
back.

Every run is ``sparkstate run --master spark://...`` in its own process, as a user types it;
the reference is the same job on the in-process harness, in the micro-batches Spark reads."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
from spark_helpers import TESTS_JIT, committed_rows, harness_like_spark, same_rows

from sparkstate.jobs import JOBS

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
SPARKSTATE = str(Path(sys.executable).with_name("sparkstate"))
FLAGS = ["--trigger", "200 milliseconds", "--key-groups", "8", "--no-spark-ui"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Cluster:
    master: str
    folder: Path
    env: dict[str, str]

    def script(self, command: str) -> str:
        done = subprocess.run(["bash", str(ROOT / "scripts" / "cluster.sh"), command, str(self.folder)], env=self.env,
                              capture_output=True, text=True, timeout=180)
        assert done.returncode == 0, done.stderr
        return done.stdout

    def pids(self, what: str) -> list[int]:
        """This cluster's running workers (``worker``: their pid files) or executors (``executor``:
        the workers' child JVMs)."""
        workers = [int(f.read_text()) for f in sorted(self.folder.glob("worker-*.pid"))]
        workers = [w for w in workers if Path(f"/proc/{w}").exists()]
        if what == "worker":
            return workers
        found = [subprocess.run(["pgrep", "-P", str(w), "-f", "CoarseGrainedExecutorBackend"], capture_output=True,
                                text=True).stdout.split() for w in workers]
        return [int(p) for pids in found for p in pids]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cluster")
    port = _free_port()
    # the master's, workers' and executors' JVMs: C1 only, as the driver's (tests/conftest.py)
    env = {**os.environ, "SPARKSTATE_MASTER_PORT": str(port), "SPARKSTATE_MASTER_UI_PORT": str(_free_port()),
           "PYTHON": sys.executable, "JAVA_TOOL_OPTIONS": TESTS_JIT}
    c = Cluster(f"spark://127.0.0.1:{port}", folder, env)
    try:
        assert c.script("start").strip() == c.master
        yield c
    finally:
        c.script("stop")


def run(cwd: Path, *args: str, on_line=None, timeout: float = 300) -> subprocess.CompletedProcess:
    """``sparkstate ARGS`` in its own process group; ``on_line(line, proc)`` sees each output line."""
    cmd = [SPARKSTATE, *args]
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "COLUMNS": "250"}, start_new_session=True)
    timer = threading.Timer(timeout, os.killpg, (proc.pid, signal.SIGKILL))
    timer.start()
    out = []
    try:
        for line in proc.stdout:
            out.append(line)
            if on_line is not None:
                on_line(line, proc)
        proc.wait()
    finally:
        timer.cancel()
    return subprocess.CompletedProcess(cmd, proc.returncode, "".join(out), "")


def epoch_ms(rows: list[dict]) -> list[dict]:
    """Rows with their timestamps (Parquet's, read back naive in UTC) as epoch ms, as the harness gives them."""
    def ms(v):
        if isinstance(v, datetime):
            return round((v if v.tzinfo else v.replace(tzinfo=UTC)).timestamp() * 1000)
        return v

    return [{k: ms(v) for k, v in row.items()} for row in rows]


def expected(name: str, events: int, max_batch: int) -> list[dict]:
    job = JOBS[name].job(events=events, merchants=500, max_batch=max_batch)
    return harness_like_spark(job, max_batch)


def test_seed_jobs_and_the_behaviour_cases_on_the_cluster_give_the_harness_rows(cluster, tmp_path) -> None:
    """A window and event-time timers (seed jobs; value state: the faults' test), and
    behavioural cases of each family (checked in the driver against the harness), one driver
    process for all."""
    names = ["upi-per-minute", "rate-limit"]  # running-sum: in the faults' test
    done = subprocess.run([sys.executable, str(Path(__file__).with_name("cluster_jobs.py")), cluster.master, *names,
                           "cases"], cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    from cluster_jobs import CASES

    assert all(f"case {name}: " in done.stdout for name in CASES), done.stdout
    for name in names:
        rows = epoch_ms(committed_rows(tmp_path / name / "output"))
        assert rows, name
        same_rows(rows, expected(name, 40_000, 20_000))


def test_killed_executor_worker_and_driver_change_no_row_and_savepoints_move_state_to_local_mode_and_back(
        cluster, tmp_path) -> None:
    """One job through every fault, and through a rescale:

    * an executor is killed with SIGKILL while batch 1 runs, and a whole worker (its executor
      with it) while batch 3 runs: Spark runs their tasks again elsewhere, and the batch completes;
    * the driver is killed (its whole process group) after batch 4: the next run on the cluster
      resumes from the checkpoint, and is stopped with Ctrl-C after a batch;
    * a savepoint of it restores in local mode with 3 partitions instead of 2 (the key groups
      move between tasks), which is stopped after a batch; a savepoint of that restores on the
      cluster with 2, which finishes the input.

    The four outputs together hold the harness's rows, each once."""
    events = 180_000  # 9 batches: 5 in the first run, at least one in each of the others
    args = ["run", "running-sum", "--events", str(events), "--merchants", "500", "--max-batch", "20000", *FLAGS]
    on_cluster = [*args, "--master", cluster.master]
    first = [*on_cluster, "--checkpoint", str(tmp_path / "ckpt"), "--sink", f"parquet:{tmp_path / 'out'}"]
    kills: list[str] = []

    def kill(what: str) -> None:
        pids = cluster.pids(what)
        if pids:
            os.kill(pids[0], signal.SIGKILL)
            kills.append(f"{what} {pids[0]}")

    def faults(line: str, proc) -> None:
        if line.startswith("batch 0 |"):
            threading.Timer(0.5, kill, ("executor",)).start()  # batch 1 is running by then
        elif line.startswith("batch 2 |"):
            threading.Timer(0.5, kill, ("worker",)).start()
        elif line.startswith("batch 4 |"):
            os.killpg(proc.pid, signal.SIGKILL)

    def stop_after_a_batch(line: str, proc) -> None:
        if line.startswith("batch "):
            os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the run stops after a committed batch

    try:
        killed = run(tmp_path, *first, on_line=faults, timeout=420)
    finally:
        cluster.script("start")  # the killed worker again
    assert killed.returncode == -signal.SIGKILL, killed.stdout[-3000:]
    assert len(kills) == 2, kills
    # the driver's log: the tasks Spark lost with the executors, and ran again
    log = (tmp_path / ".sparkstate" / "running-sum" / "spark.log").read_text(errors="replace")
    lost = f"executors lost: {log.count('Lost executor')}, tasks lost: {log.count('Lost task')}"
    resumed = run(tmp_path, *first, on_line=stop_after_a_batch)
    assert resumed.returncode in (0, 130), resumed.stdout[-3000:]
    assert "batch 0 |" not in resumed.stdout  # it resumed after the killed run's batches

    def savepoint(checkpoint: str, target: str) -> None:
        saved = run(tmp_path, "savepoint", "running-sum", "--checkpoint", str(tmp_path / checkpoint),
                    "--target", str(tmp_path / target))
        assert saved.returncode == 0, saved.stdout[-3000:]

    savepoint("ckpt", "sp")
    local = run(tmp_path, *args, "--checkpoint", str(tmp_path / "ckpt-local"), "--from-savepoint", str(tmp_path / "sp"),
                "--partitions", "3", "--sink", f"parquet:{tmp_path / 'out-local'}", on_line=stop_after_a_batch)
    assert local.returncode in (0, 130), local.stdout[-3000:]
    savepoint("ckpt-local", "sp-back")
    back = run(tmp_path, *on_cluster, "--checkpoint", str(tmp_path / "ckpt-back"), "--from-savepoint",
               str(tmp_path / "sp-back"), "--partitions", "2", "--sink", f"parquet:{tmp_path / 'out-back'}")
    assert back.returncode == 0, back.stdout[-3000:]
    outputs = {out: committed_rows(tmp_path / out) for out in ("out", "out-local", "out-back")}
    assert all(outputs.values()), {out: len(rows) for out, rows in outputs.items()}
    rows = [row for found in outputs.values() for row in found]
    same_rows(rows, expected("running-sum", events, 20_000))
    print(f"\nkills: {kills} and the driver; {lost}; rows compared: {len(rows):,}, all equal to the harness's")


def test_a_pipeline_file_into_postgresql_on_the_cluster(cluster, tmp_path, postgres_db) -> None:
    """The README's pipeline file, `sparkstate run examples/pipeline.py --master ...`, into a
    table of a real PostgreSQL server (the executors' rows, written in one transaction per batch
    by the driver)."""
    import psycopg
    from psycopg.rows import dict_row

    from sparkstate.runtime.run.pipeline_file import load_pipeline

    done = run(tmp_path, "run", str(ROOT / "examples" / "pipeline.py"), "--master", cluster.master,
               "--sink", f"{postgres_db}?table=sums", *FLAGS)
    assert done.returncode == 0, done.stdout[-3000:]
    with psycopg.connect(postgres_db, row_factory=dict_row) as conn:
        rows = conn.execute("SELECT merchant_id, count, total FROM sums").fetchall()
    job = load_pipeline(str(ROOT / "examples" / "pipeline.py"))
    same_rows(rows, harness_like_spark(job, job.source_spec.max_batch))
