"""A damaged ``sparkstate.json`` or ``checkpoints.jsonl`` says what is damaged and what to do;
metadata is written atomically and durably; a failing batch names its input; the files a run
leaves behind (Spark's log, temporary directories) stay bounded."""

from __future__ import annotations

import os
from pathlib import Path

from click.testing import CliRunner

from sparkstate.cli import main


def _checkpoint(root: Path, meta: bytes) -> Path:
    (root / "commits").mkdir(parents=True)
    (root / "commits" / "0").write_text("v1\n{}\n")
    (root / "sparkstate.json").write_bytes(meta)
    return root


def test_a_damaged_sparkstate_json_names_the_file_and_the_fix(tmp_path):
    ckpt = _checkpoint(tmp_path / "ckpt", b'{"job": "running-sum", "function": "RunningS')
    result = CliRunner().invoke(main, ["run", "running-sum", "--events", "10", "--checkpoint", str(ckpt),
                                       "--sink", "noop"], terminal_width=400)
    assert result.exit_code == 1, result.output
    said = " ".join(result.output.split())
    assert f"{ckpt / 'sparkstate.json'} is damaged (Unterminated string" in said
    assert "Spark's offsets and state beside it are not affected" in said
    assert "put back a copy of it from a backup" in said and "--fresh" in said

    listed = CliRunner().invoke(main, ["checkpoints", "running-sum", "--checkpoint", str(ckpt)], terminal_width=400)
    assert listed.exit_code == 0 and "is damaged" in " ".join(listed.output.split())


def test_a_damaged_checkpoint_log_is_skipped_with_a_warning(tmp_path):
    ckpt = _checkpoint(tmp_path / "ckpt", b'{"job": "running-sum"}')
    (ckpt / "sparkstate").mkdir()
    (ckpt / "sparkstate" / "checkpoints.jsonl").write_bytes(
        b'{"batch_id": 0, "time": "2026-11-22T10:00:00.000Z", "duration_ms": 42}\n'
        b'\xff\xfe\x00garbage\n{"batch_id": 1, "time": "t", "duration_ms": "slow"}\nnull\n'
    )
    result = CliRunner().invoke(main, ["checkpoints", "running-sum", "--checkpoint", str(ckpt)], terminal_width=400)
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())
    assert "42 ms" in said  # the good record is still shown
    assert "checkpoints.jsonl is damaged: line 2, 3, 4 is not a checkpoint record" in said
    assert "the checkpoint itself is not affected" in said


def test_metadata_is_synced_before_and_after_its_rename(tmp_path, monkeypatch):
    from sparkstate.runtime.checkpoint.directory import CheckpointDir

    synced: list[str] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    ckpt = CheckpointDir.open(tmp_path / "ckpt")
    ckpt.write_metadata({"job": "j"})
    assert synced == [str(tmp_path / "ckpt" / ".sparkstate.json.tmp"), str(tmp_path / "ckpt")]
    assert ckpt.read_metadata() == {"job": "j"}


def test_the_input_of_a_failing_batch_from_the_offset_and_file_source_logs(tmp_path):
    from sparkstate.runtime.checkpoint.directory import CheckpointDir
    from sparkstate.runtime.run.failures import batch_input, clean_failure

    root = tmp_path / "ckpt"
    (root / "offsets").mkdir(parents=True)
    (root / "sources" / "0").mkdir(parents=True)
    meta = '{"batchWatermarkMs":0}'
    for batch, log in ((4, 9), (5, 12)):
        (root / "offsets" / str(batch)).write_text(f'v1\n{meta}\n{{"logOffset":{log}}}')
    entry = '{{"path":"file:///in/{}.json","timestamp":1,"batchId":{}}}'
    # Spark compacts its file source log every 10 batches: 9.compact holds batches 0-9
    (root / "sources" / "0" / "9.compact").write_text("v1\n" + "\n".join(entry.format(f"f{b}", b) for b in range(10)))
    for b in (10, 11, 12):
        (root / "sources" / "0" / str(b)).write_text(f"v1\n{entry.format(f'f{b}', b)}")
    ckpt = CheckpointDir.open(root)
    assert batch_input(ckpt, 5) == "files /in/f10.json, /in/f11.json, /in/f12.json"
    assert batch_input(ckpt, 6) is None  # not planned yet
    (root / "offsets" / "0").write_text(f'v1\n{meta}\n{{"offset":0}}')
    (root / "offsets" / "1").write_text(f'v1\n{meta}\n{{"offset":5000}}')
    assert batch_input(ckpt, 1) == "source offsets 0 to 5000"
    message = str(clean_failure(RuntimeError("boom"), str(root), 4, batch_input(ckpt, 5)))
    assert "batches up to 4 are committed" in message and "Batch 5 read files /in/f10.json" in message


def test_a_commit_lost_midway_is_not_reported_as_committing_nothing():
    """A sink that lost its connection in the commit cannot know whether it went through: the
    run's message must not contradict it (the batch's marker settles it on the next run)."""
    from sparkstate.runtime.run.failures import clean_failure

    lost = RuntimeError(
        "sparkstate.errors.SinkError: lost the connection to db while committing batch 3 to table t: gone. "
        "Whether the commit went through is unknown; the next run settles it"
    )
    message = str(clean_failure(lost, "/ckpt", 2))
    assert "is unknown" in message and "committed nothing" not in message
    assert "Spark did not commit the failing batch" in message


def test_a_grown_spark_log_is_moved_aside_when_spark_starts(tmp_path, monkeypatch):
    from sparkstate.runtime.session import classic as spark_session

    log = tmp_path / "spark.log"
    log.write_bytes(b"old run\n" * 1000)
    monkeypatch.setattr(spark_session, "LOG_ROTATE_BYTES", 4000)
    with spark_session._redirect_fds(log):
        os.write(2, b"new run\n")
    assert log.read_bytes() == b"new run\n"
    assert (tmp_path / "spark.log.1").read_bytes().startswith(b"old run\n")
    with spark_session._redirect_fds(log):  # small: appended to
        os.write(2, b"again\n")
    assert log.read_bytes() == b"new run\nagain\n"


def test_the_log_of_a_running_jvm_stays_bounded_while_it_is_written(tmp_path, monkeypatch):
    from sparkstate.runtime.session import classic as spark_session

    log = tmp_path / "spark.log"
    monkeypatch.setattr(spark_session, "LOG_ROTATE_BYTES", 4000)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND)  # as the JVM holds it: open all along
    try:
        for i in range(1000):  # 1000 checks of a log that takes 1 KB between two of them: 1 MB written
            os.write(fd, f"line {i:04d} ".encode() * 100)
            spark_session.trim_log(log)
            assert log.stat().st_size <= 4000 + 1000
        os.write(fd, b"last\n")
    finally:
        os.close(fd)
    assert log.read_bytes().endswith(b"last\n") and log.stat().st_size <= 5000
    assert (tmp_path / "spark.log.1").read_bytes().startswith(b"line ")
    assert [p.name for p in tmp_path.iterdir()] in (["spark.log", "spark.log.1"], ["spark.log.1", "spark.log"])


def test_list_source_temp_dirs_go_with_their_process(tmp_path, monkeypatch):
    import subprocess
    import sys
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    code = (f"import tempfile; tempfile.tempdir = {str(tmp_path)!r}\n"
            "from sparkstate.runtime.io.sources import scratch_temp_dir\n"
            "print(scratch_temp_dir())")
    ended = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert ended.startswith(str(tmp_path)) and not os.path.exists(ended)  # deleted at exit
    killed = tmp_path / "sparkstate-list-999999999-abc"  # left by a process killed before it could delete it
    killed.mkdir()
    (killed / "list-source.json").write_text("[]")
    from sparkstate.runtime.io.sources import scratch_temp_dir

    mine = scratch_temp_dir()
    assert os.path.isdir(mine) and not killed.exists()
