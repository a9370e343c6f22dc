"""`sparkstate run --fresh` deletes only what sparkstate made for the job, and one checkpoint
takes one run at a time: through the command line, each case stopping before Spark starts."""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from sparkstate.cli import main


def run(cwd: Path, *args: str):
    old = os.getcwd()
    os.chdir(cwd)
    try:
        return CliRunner().invoke(main, ["run", "running-sum", "--events", "10", "--quiet", *args], terminal_width=300)
    finally:
        os.chdir(old)


def said(result) -> str:
    return " ".join(result.output.split())


def test_fresh_keeps_a_directory_that_is_not_a_checkpoint(tmp_path):
    folder = tmp_path / "photos"
    folder.mkdir()
    (folder / "holiday.jpg").write_bytes(b"not ours")
    result = run(tmp_path, "--checkpoint", str(folder), "--fresh")
    assert result.exit_code == 1, result.output
    assert f"--fresh keeps {folder}: it is not a sparkstate checkpoint" in said(result)
    assert "holiday.jpg" in said(result) and "nothing was deleted" in said(result)
    assert (folder / "holiday.jpg").read_bytes() == b"not ours"


def _users_folder(folder: Path) -> dict[str, bytes]:
    """A folder of someone's work: what must never be deleted."""
    (folder / "src").mkdir(parents=True)
    (folder / "thesis.tex").write_bytes(b"\\section{Results}")
    (folder / "src" / "app.py").write_bytes(b"print('mine')")
    return _files(folder)


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_run_refuses_a_folder_that_is_not_a_checkpoint_and_fresh_deletes_only_the_checkpoints_names(tmp_path):
    """The repro of issue 32 item 1: a first run on someone's folder was not refused, and
    `--fresh` then took the whole folder for the job's checkpoint and emptied it."""
    folder = tmp_path / "work"
    mine = _users_folder(folder)
    db = tmp_path / "shop.db"
    _sqlite_table(db)  # a table that does not fit the job's rows: the run stops before Spark starts
    sink = ("--sink", f"sqlite:///{db}?table=customers")
    first = run(tmp_path, "--checkpoint", str(folder), *sink)
    assert first.exit_code == 1, first.output
    assert f"checkpoint directory {folder} is not empty and not a sparkstate checkpoint" in said(first)
    assert "it holds src, thesis.tex" in said(first) and "give the job a new or empty directory" in said(first)
    assert sorted(p.name for p in folder.iterdir()) == ["src", "thesis.tex"]  # not even the lock's file was written
    # the folder as an older sparkstate left it after that run: its checkpoint among the user's files
    for name in ("offsets", "commits", "sources/0", "state/0/0", "sparkstate", "side-outputs/late", "output"):
        (folder / name).mkdir(parents=True)
    (folder / "commits" / "0").write_text("v1\n{}\n")
    (folder / "metadata").write_text('{"id":"q"}')
    (folder / ".metadata.crc").write_bytes(b"crc")
    (folder / "sparkstate.json").write_text(json.dumps({"job": "running-sum"}))
    (folder / "output" / "_sparkstate.json").write_text(json.dumps({"job": "running-sum", "checkpoint": str(folder)}))
    fresh = run(tmp_path, "--checkpoint", str(folder), *sink, "--fresh")
    assert f"note: --fresh kept src, thesis.tex in {folder}: not part of a checkpoint" in said(fresh), fresh.output
    assert _files(folder) == {**mine, "sparkstate.lock": (folder / "sparkstate.lock").read_bytes()}
    assert sorted(p.name for p in folder.iterdir()) == ["sparkstate.lock", "src", "thesis.tex"]


def test_fresh_deletes_the_names_of_the_checkpoint_layout_and_nothing_else(tmp_path):
    """`CheckpointDir.clear`, without Spark: Spark's and sparkstate's entries (with checksums and
    temporary files) go, the lock stays, and so does everything else, `output/` included
    unless it holds the claim of a job run on this checkpoint."""
    from sparkstate.runtime.checkpoint.directory import CheckpointDir

    root = tmp_path / "ckpt"
    theirs = _users_folder(root)
    (root / "notes").mkdir()
    (root / "notes" / "metadata").write_text("a user's file of a layout name, in a folder that is not")
    (root / "output").mkdir()  # a folder of the user's that happens to be called output
    (root / "output" / "figure.png").write_bytes(b"png")
    (root / "sparkstate.lock").write_text("{}")
    layout = ["metadata", ".metadata.crc", ".metadata.0b9c2f1e-5d7a-4c3b-9e8f-1a2b3c4d5e6f.tmp",
              "..metadata.0b9c2f1e-5d7a-4c3b-9e8f-1a2b3c4d5e6f.tmp.crc", "sparkstate.json", ".sparkstate.json.tmp"]
    for name in layout:
        (root / name).write_text("x")
    for name in ("offsets", "commits", "sources", "state", "sparkstate", "side-outputs", "sparkstate-sources"):
        (root / name).mkdir()
        (root / name / "0").write_text("x")
    checkpoint = CheckpointDir.open(root)
    assert checkpoint.clear() == ["notes", "output", "src", "thesis.tex"]
    assert sorted(p.name for p in root.iterdir()) == ["notes", "output", "sparkstate.lock", "src", "thesis.tex"]
    assert _files(root) == {**theirs, "notes/metadata": (root / "notes" / "metadata").read_bytes(),
                            "output/figure.png": b"png", "sparkstate.lock": b"{}"}
    # the default output of `run --checkpoint DIR`, claimed for this checkpoint, is the job's
    (root / "output" / "_sparkstate.json").write_text(json.dumps({"job": "j", "checkpoint": checkpoint.root}))
    assert checkpoint.clear() == ["notes", "src", "thesis.tex"] and not (root / "output").exists()


def test_fresh_keeps_another_jobs_checkpoint(tmp_path):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "sparkstate.json").write_text(json.dumps({"job": "rate-limit"}))
    result = run(tmp_path, "--checkpoint", str(ckpt), "--fresh")
    assert result.exit_code == 1
    assert "it is the checkpoint of job 'rate-limit', not 'running-sum'" in said(result)
    assert (ckpt / "sparkstate.json").exists()


def test_fresh_keeps_an_output_folder_the_job_did_not_write(tmp_path):
    out = tmp_path / "reports"
    out.mkdir()
    (out / "q3.csv").write_text("a,b\n")
    (out / "_spark_metadata").mkdir()  # another job's file sink log
    result = run(tmp_path, "--checkpoint", str(tmp_path / "ckpt"), "--sink", f"parquet:{out}", "--fresh")
    assert result.exit_code == 1, result.output
    assert f"--fresh keeps output folder {out}" in said(result) and "does not say it was written for job" in said(result)
    assert (out / "q3.csv").exists() and (out / "_spark_metadata").is_dir()


def _sqlite_table(db: Path) -> None:
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL)")
        conn.execute("INSERT INTO customers VALUES (1, 'Asha')")


def test_fresh_keeps_a_table_the_job_did_not_create_though_the_run_then_fails(tmp_path):
    db = tmp_path / "shop.db"
    _sqlite_table(db)
    ckpt = tmp_path / "ckpt"
    (ckpt / "commits").mkdir(parents=True)
    (ckpt / "commits" / "0").write_text("v1\n{}\n")
    (ckpt / "sparkstate.json").write_text(json.dumps({"job": "running-sum"}))
    result = run(tmp_path, "--checkpoint", str(ckpt), "--sink", f"sqlite:///{db}?table=customers", "--fresh")
    # the table does not fit the job's output: the run fails before batch 0, and the table is as it was
    assert result.exit_code == 1, result.output
    assert "table customers" in said(result) and "does not fit the job's output" in said(result)
    # what --fresh kept is said at once, before the run goes on (here: to fail)
    assert "note: --fresh kept table customers in SQLite database" in said(result)
    assert "it existed before sparkstate wrote to it, and --fresh drops only tables the job created" in said(result)
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT * FROM customers").fetchall() == [(1, "Asha")]
    # the job's own checkpoint did go (its lock file stays: the run held it)
    assert sorted(p.name for p in ckpt.iterdir()) == ["sparkstate.lock"]


def _hold_lock(ckpt: Path) -> subprocess.Popen:
    code = (
        "import sys, time\n"
        "from sparkstate.runtime.checkpoint.directory import CheckpointDir\n"
        f"lock = CheckpointDir.open({str(ckpt)!r}).lock('running-sum')\n"
        "print('locked', flush=True)\n"
        "time.sleep(120)\n"
    )
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
    return holder


def test_a_second_run_on_a_checkpoint_fails_at_once_naming_the_first(tmp_path):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "sparkstate.json").write_text(json.dumps({"job": "running-sum"}))
    holder = _hold_lock(ckpt)
    try:
        started = time.monotonic()
        result = run(tmp_path, "--checkpoint", str(ckpt), "--fresh")
        assert time.monotonic() - started < 10
        assert result.exit_code == 1, result.output
        text = said(result)
        assert f"checkpoint directory {ckpt} is in use by another run (job 'running-sum', pid {holder.pid} " \
               f"on host {socket.gethostname()}, started " in text
        assert f"kill {holder.pid}" in text and "nothing was changed" in text
        assert (ckpt / "sparkstate.json").exists()  # --fresh deleted nothing under a live run
    finally:
        holder.kill()
        holder.wait()
    # the kernel drops a killed holder's lock: the next run gets past it (and stops on the missing table's
    # database here, before Spark)
    again = run(tmp_path, "--checkpoint", str(ckpt), "--sink", "postgresql://app@127.0.0.1:1/shop")
    assert "in use" not in said(again) and "cannot connect" in said(again)


@pytest.fixture
def storage(tmp_path):
    from sparkstate.runtime.checkpoint.storage import LocalStorage

    return LocalStorage(str(tmp_path))


def test_lease_of_a_live_run_is_refused_and_a_stale_one_taken_over(storage, monkeypatch):
    """The lease that guards a checkpoint on HDFS or S3, exercised on a local directory."""
    from sparkstate.errors import CheckpointInUseError
    from sparkstate.runtime.checkpoint import run_lock

    first = run_lock.RunLock(storage, "job-a")
    first._lease()
    try:
        with pytest.raises(CheckpointInUseError, match=f"job 'job-a', pid {os.getpid()} on host"):
            run_lock.RunLock(storage, "job-b")._lease()
    finally:
        first.release()
    assert not storage.exists(run_lock.LEASE_FILE)

    # a run on another host that stopped renewing its lease long ago
    stale = {"job": "job-a", "pid": 1, "host": "elsewhere", "started": "then", "renewed": time.time() - 3600,
             "token": "x"}
    storage.write_atomic(json.dumps(stale).encode(), run_lock.LEASE_FILE)
    second = run_lock.RunLock(storage, "job-b")
    second._lease()
    assert json.loads(storage.read_text(run_lock.LEASE_FILE))["token"] == second.owner["token"]
    second.release()

    # a run of this host whose process is gone, however recently it renewed
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = {**stale, "host": socket.gethostname(), "pid": int(done.stdout), "renewed": time.time()}
    storage.write_atomic(json.dumps(dead).encode(), run_lock.LEASE_FILE)
    third = run_lock.RunLock(storage, "job-c")
    third._lease()
    third.release()

    # a run whose lease another run took over learns it at its next renewal, and stops
    monkeypatch.setattr(run_lock, "RENEW_SECONDS", 0.05)
    fourth = run_lock.RunLock(storage, "job-d")
    fourth._lease()
    storage.write_atomic(json.dumps({**stale, "renewed": time.time()}).encode(), run_lock.LEASE_FILE)
    assert fourth.lost.wait(5)
    with pytest.raises(CheckpointInUseError, match="was taken over by"):
        fourth.check()
    fourth.release()
    assert storage.exists(run_lock.LEASE_FILE)  # the new holder's lease stays


def test_a_table_the_job_created_is_dropped_by_fresh_and_one_it_found_is_kept(tmp_path):
    import pyarrow as pa

    from sparkstate.connectors import database
    from sparkstate.connectors.sinks import parse_sink

    db = tmp_path / "shop.db"
    _sqlite_table(db)
    schema = pa.schema([("id", pa.int64()), ("name", pa.string())])
    made = parse_sink(f"sqlite:///{db}?table=made").for_job("j")
    found = parse_sink(f"sqlite:///{db}?table=customers").for_job("k")
    for sink in (made, found):
        database.prepare(sink, schema, None)
        database.write(sink, pa.table({"id": [7], "name": ["Ravi"]}), 0)
    assert database.reset(made) is None
    kept = database.reset(found)
    assert kept is not None and "--fresh kept table customers" in kept and "existed before" in kept
    with sqlite3.connect(db) as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert "made" not in tables
        assert conn.execute("SELECT * FROM customers ORDER BY id").fetchall() == [(1, "Asha"), (7, "Ravi")]
        assert conn.execute("SELECT count(*) FROM sparkstate_batches").fetchone() == (0,)


def test_fresh_deletes_an_output_folder_only_when_the_job_claimed_it(tmp_path):
    from sparkstate.connectors.sinks import ParquetSink
    from sparkstate.jobs import get_job
    from sparkstate.runtime.checkpoint.directory import CheckpointDir
    from sparkstate.runtime.checkpoint.fresh import CLAIM_FILE, claim_outputs, start_fresh

    ckpt = CheckpointDir.open(tmp_path / "ckpt")
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "notes.txt").write_text("mine")
    job = get_job("running-sum").job(events=10)
    claim_outputs(job.sink(ParquetSink(str(ours))), ckpt)
    claim_outputs(job.sink(ParquetSink(str(theirs))), ckpt)
    assert json.loads((ours / CLAIM_FILE).read_text())["job"] == "running-sum"
    assert not (theirs / CLAIM_FILE).exists()  # a folder holding other files is never claimed
    (ours / "part-0.parquet").write_bytes(b"rows")
    assert start_fresh(job.sink(ParquetSink(str(ours))), ckpt) == []
    assert not ours.exists()
    with pytest.raises(Exception, match="it holds files sparkstate did not write"):
        start_fresh(job.sink(ParquetSink(str(theirs))), ckpt)
    assert (theirs / "notes.txt").exists()


MOUNTS = """\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw,errors=remount-ro
40 22 0:50 / /mnt/shared rw,relatime shared:5 - nfs filer:/export rw,vers=3,hard,nolock,proto=tcp,local_lock=all
41 40 8:2 / /mnt/shared/scratch rw,relatime shared:6 - ext4 /dev/sdb1 rw
42 22 0:51 / /mnt/team\\040data rw,relatime shared:7 - nfs4 filer:/team rw,vers=4.2,local_lock=flock
43 22 0:52 / /mnt/locked rw,relatime shared:8 - nfs4 filer:/ok rw,vers=4.2,hard,local_lock=none
44 22 0:53 / /mnt/smb rw,relatime shared:9 - cifs //filer/share rw,vers=3.0,nobrl
"""


@pytest.mark.parametrize("path, problem", [
    ("/mnt/shared/ckpt", "/mnt/shared (nfs, mounted with local_lock=all, nolock)"),
    ("/mnt/shared", "/mnt/shared (nfs"),
    ("/mnt/team data/jobs/ckpt", "/mnt/team data (nfs4, mounted with local_lock=flock)"),
    ("/mnt/smb/ckpt", "/mnt/smb (cifs, mounted with nobrl)"),
    ("/mnt/shared/scratch/ckpt", None),  # a local disk mounted inside the share
    ("/mnt/locked/ckpt", None),  # NFS with its locks on the server
    ("/mnt/sharedother/ckpt", None),
    ("/home/me/ckpt", None),
])
def test_a_mount_whose_locks_stay_on_this_host_is_found(path, problem):
    from sparkstate.runtime.checkpoint.run_lock import flock_problem

    found = flock_problem(path, MOUNTS)
    assert (found is None) if problem is None else (found is not None and problem in found), found


def test_the_lock_is_refused_where_it_cannot_keep_another_hosts_run_out(tmp_path, monkeypatch):
    """The lock off local disk: on an NFS mount without locking flock stays on one host, and on
    an object store the lease file's create is not exclusive. Such a run is refused unless the
    user says one run at a time uses the checkpoint."""
    from sparkstate.errors import SparkStateError
    from sparkstate.runtime.checkpoint import run_lock
    from sparkstate.runtime.checkpoint.storage import LocalStorage, Storage

    monkeypatch.delenv("SPARKSTATE_UNSAFE_LOCK", raising=False)
    shared = os.path.realpath(tmp_path)
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(f"22 1 8:1 / / rw - ext4 /dev/sda1 rw\n"
                         f"40 22 0:50 / {shared} rw - nfs filer:/export rw,vers=3,nolock,local_lock=all\n")
    monkeypatch.setattr(run_lock, "MOUNTINFO", str(mountinfo), raising=False)
    local = LocalStorage(str(tmp_path / "ckpt"))
    with pytest.raises(SparkStateError, match=r"cannot be locked against a second run: it is on .* \(nfs, mounted with "
                                              r"local_lock=all, nolock\), where flock locks only this host") as refused:
        run_lock.lock_checkpoint(local, "j")
    assert "SPARKSTATE_UNSAFE_LOCK=1" in str(refused.value) and not (tmp_path / "ckpt").exists()

    class ObjectStore(Storage):  # an s3a:// checkpoint, kept on the local disk
        def __init__(self, root: str, disk: LocalStorage) -> None:
            super().__init__(root)
            self.disk = disk

        def list(self, *parts):
            return self.disk.list(*parts)

        def read_bytes(self, *parts):
            return self.disk.read_bytes(*parts)

        def write_atomic(self, data, *parts):
            self.disk.write_atomic(data, *parts)

        def create_new(self, data, *parts):
            return self.disk.create_new(data, *parts)

        def exists(self, *parts):
            return self.disk.exists(*parts)

        def delete(self, *parts):
            self.disk.delete(*parts)

    s3 = ObjectStore("s3a://bucket/ckpt", LocalStorage(str(tmp_path / "bucket")))
    with pytest.raises(SparkStateError, match="it is on s3a://, whose create is not known to be exclusive: two runs"):
        run_lock.lock_checkpoint(s3, "j")
    assert not s3.exists(run_lock.LEASE_FILE)

    monkeypatch.setenv("SPARKSTATE_UNSAFE_LOCK", "1")  # the user keeps to one run at a time
    run_lock.lock_checkpoint(local, "j").release()
    lease = run_lock.lock_checkpoint(s3, "j")
    assert s3.exists(run_lock.LEASE_FILE)
    lease.release()
