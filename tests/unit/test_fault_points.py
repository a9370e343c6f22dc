"""The test fault points the crash tests kill runs at (sparkstate/fault_points.py): nothing
unless the environment names a directory; there, an armed point holds the first process that
reaches it, and only that one."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from sparkstate import fault_points
from sparkstate.fault_points import ENV, SINK_COMMITTED, SINK_ROWS_WRITTEN

REACH = "from sparkstate.fault_points import fault_point; fault_point({!r}); print('passed', flush=True)"


def reach(point: str, faults: Path | None) -> subprocess.Popen:
    """A process that reaches ``point`` (fault points on in ``faults``, off for None) and says so."""
    env = {k: v for k, v in os.environ.items() if k != ENV}
    if faults is not None:
        env[ENV] = str(faults)
    return subprocess.Popen([sys.executable, "-c", REACH.format(point)], env=env, stdout=subprocess.PIPE, text=True)


def test_off_without_the_variable(tmp_path):
    assert fault_points._DIR is None, "the test suite runs without fault points"
    (tmp_path / f"{SINK_COMMITTED}.armed").touch()
    done = reach(SINK_COMMITTED, None)
    assert done.communicate(timeout=60)[0] == "passed\n"
    assert (tmp_path / f"{SINK_COMMITTED}.armed").exists()


def test_an_unarmed_point_passes(tmp_path):
    (tmp_path / f"{SINK_COMMITTED}.armed").touch()  # another point is armed
    done = reach(SINK_ROWS_WRITTEN, tmp_path)
    assert done.communicate(timeout=60)[0] == "passed\n"
    assert not (tmp_path / f"{SINK_ROWS_WRITTEN}.hit").exists()


def test_removing_the_hit_file_lets_the_held_process_go_on(tmp_path):
    (tmp_path / f"{SINK_COMMITTED}.armed").touch()
    held = reach(SINK_COMMITTED, tmp_path)
    wait_for(tmp_path / f"{SINK_COMMITTED}.hit", held)
    (tmp_path / f"{SINK_COMMITTED}.hit").unlink()
    assert held.communicate(timeout=60)[0] == "passed\n"


def wait_for(hit: Path, held: subprocess.Popen) -> None:
    deadline = time.monotonic() + 60
    while not hit.exists():
        assert time.monotonic() < deadline and held.poll() is None, "the point was not reached"
        time.sleep(0.05)


def test_an_armed_point_holds_one_process_until_it_is_killed(tmp_path):
    (tmp_path / f"{SINK_COMMITTED}.armed").touch()
    held = reach(SINK_COMMITTED, tmp_path)
    try:
        wait_for(tmp_path / f"{SINK_COMMITTED}.hit", held)
        # the point is taken: a second process passes it
        assert reach(SINK_COMMITTED, tmp_path).communicate(timeout=60)[0] == "passed\n"
        time.sleep(0.5)
        assert held.poll() is None, "the first holds"
    finally:
        held.kill()
        held.communicate()
    assert not (tmp_path / f"{SINK_COMMITTED}.armed").exists()
