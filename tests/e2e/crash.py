"""Killing a sparkstate job for real: SIGKILL at chosen moments of a micro-batch, restart, repeat.

``CrashLoop`` runs ``sparkstate run JOB ...`` (or a job script) as its own process group (the Python driver,
its JVM and the JVM's Python workers), waits until the run has committed a micro-batch of its
own (so that every run makes progress), then kills the whole group with SIGKILL at the next
kill's moment, and starts the same command again on the same checkpoint. The moments take
turns (``MOMENTS``):

* ``random``: a random delay after a commit, so the kill lands anywhere in a batch
  (reading, the stateful operator, the state store's upload, the sink, between batches);
* ``sink committed``: the sink has committed a batch (with rows) that Spark's commit log does
  not hold yet, the point where a replay must be recognised (the test fault point
  ``sink.committed``; a batch that wrote nothing is let go, and the next one held);
* ``offsets written``: Spark has written the batch's offsets and nothing else of it
  (``spark.offsets-written``): the restart must run it as the same batch;
* ``sink transaction``: the sink has written the batch's rows (a database: its transaction with
  the rows and the marker is open) and not committed them (``sink.rows-written``);
* ``state files``: the batch's state store files are being written: a task of the stateful
  operator holds with its key group's state changes uncommitted (``state.updated``) while the
  other tasks commit theirs, so some partitions' new state version is in the checkpoint and
  not all.

The test fault points are in sparkstate (``sparkstate.fault_points``): with the environment
variable ``SPARKSTATE_TEST_FAULT_DIR`` set, the loop arms a point with a file and the process
that reaches it holds there until it is killed. Each kill also records what the kill left
(read from the checkpoint and the sink), so the report says where the kills landed, not only
where they were aimed. Before every restart the checkpoint tells whether the restart replays
a batch: planned in the offset log and missing from the commit log.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sparkstate.fault_points import ENV, OFFSETS_WRITTEN, SINK_COMMITTED, SINK_ROWS_WRITTEN, STATE_UPDATED

RANDOM, SINK_DONE, OFFSETS, SINK_TX, STATE = "random", "sink committed", "offsets written", "sink transaction", "state files"
#: the kill moments, in turn; five kills see each once
MOMENTS = (RANDOM, SINK_DONE, OFFSETS, SINK_TX, STATE)
#: the moments reached by holding at a test fault point, and their points
HOLD_AT = {SINK_DONE: SINK_COMMITTED, OFFSETS: OFFSETS_WRITTEN, SINK_TX: SINK_ROWS_WRITTEN, STATE: STATE_UPDATED}
#: how long a task held at ``state.updated`` waits for the other tasks to write their state
OTHER_TASKS_SECONDS = 5.0
#: a moment not reached within this many of the run's batches is given up: killed at once (a
#: windowed job's sink gets rows only in the batches that close windows, one in seven or so)
MISSED_AFTER = 15
#: what the kills of each moment leave, said the same way in the report
DESCRIBE = {
    RANDOM: "at a random time",
    SINK_DONE: "sink committed, Spark's commit log not yet",
    OFFSETS: "offsets written, batch not run yet",
    SINK_TX: "sink's rows written, its transaction not committed",
    STATE: "state store files being written",
}


def log_ids(checkpoint: Path, log: str) -> list[int]:
    folder = checkpoint / log
    return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit()) if folder.exists() else []


def last_id(checkpoint: Path, log: str) -> int:
    ids = log_ids(checkpoint, log)
    return ids[-1] if ids else -1


def state_partitions(checkpoint: Path) -> list[Path]:
    """The state store's partition folders (``state/<operator>/<partition>``)."""
    state = checkpoint / "state"
    if not state.exists():
        return []
    return [p for op in state.iterdir() if op.name.isdigit() for p in op.iterdir() if p.name.isdigit()]


_STATE_FILE = re.compile(r"(\d+)(_[^.]*)?\.(changelog|zip|delta|snapshot)$")


def state_written(partitions: list[Path], version: int) -> int:
    """How many partitions hold state store version ``version`` (batch ``version - 1``)."""
    def holds(folder: Path) -> bool:
        with contextlib.suppress(FileNotFoundError):
            for name in os.listdir(folder):
                m = _STATE_FILE.match(name)
                if m and int(m.group(1)) == version:
                    return True
        return False

    return sum(holds(p) for p in partitions)


@dataclass
class Kill:
    #: the moment the kill was aimed at (``MOMENTS``), and the fault point that held, if any
    aim: str
    hit: str | None
    #: the last batch in Spark's commit log, the last the sink held, the last planned, at the kill
    committed: int
    in_sink: int
    planned: int
    #: partitions holding the state of the planned batch, of all the state's partitions
    state_written: int = 0
    partitions: int = 0

    @property
    def between_sink_and_spark(self) -> bool:
        """The sink had committed a batch that Spark had not: the restart must skip it."""
        return self.in_sink > self.committed

    @property
    def landed(self) -> str:
        """Where the kill landed, from what it left (and the fault point that held)."""
        if self.planned <= self.committed:
            return "between batches"
        if self.in_sink >= self.planned:
            return DESCRIBE[SINK_DONE]
        if self.hit == SINK_ROWS_WRITTEN:
            return DESCRIBE[SINK_TX]
        if self.hit == OFFSETS_WRITTEN:
            return DESCRIBE[OFFSETS]
        if self.hit == STATE_UPDATED or 0 < self.state_written < self.partitions:
            return f"{DESCRIBE[STATE]} ({self.state_written} of {self.partitions} partitions written)"
        if self.partitions and self.state_written == self.partitions:
            return "state written, sink not yet"
        return "batch running, no state written yet"

    @property
    def on_target(self) -> bool:
        """The kill landed at the moment it was aimed at (a random one always does)."""
        if self.aim == RANDOM:
            return True
        return self.landed.startswith(DESCRIBE[self.aim])


@dataclass
class CrashLoop:
    """Run ``args`` (after ``sparkstate``) with kills until ``kills`` have happened, then to the end."""

    args: list[str]
    checkpoint: Path
    cwd: Path
    #: the last batch id the sink has committed (-1: none), read from the sink itself
    sink_batches: Callable[[], int]
    kills: int = 5
    #: the final run's arguments, when they differ (e.g. without the rate cap the kills needed)
    final_args: list[str] | None = None
    seed: int = 7
    #: the moments the kills take turns at
    moments: tuple[str, ...] = MOMENTS
    timeout: float = 900.0
    #: the program ``args`` go to (default: the ``sparkstate`` command); e.g. a job script's
    #: ``[python, script]``
    command: list[str] | None = None
    history: list[Kill] = field(default_factory=list)
    #: batches the restarted queries ran again (planned, not committed, at a kill)
    replayed: list[int] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    #: how long each process ran, in seconds (the killed ones, then the final one)
    lifetimes: list[float] = field(default_factory=list)
    _started: float = 0.0
    _proc: subprocess.Popen | None = None
    _stopped: bool = False

    @property
    def faults(self) -> Path:
        return self.cwd / "fault-points"

    def _start(self, args: list[str] | None = None, faults: bool = True) -> subprocess.Popen:
        if self._stopped:
            raise AssertionError("the crash loop was stopped")
        cmd = [*(self.command or [str(Path(sys.executable).with_name("sparkstate"))]), *(args or self.args)]
        env = dict(os.environ)
        env.pop(ENV, None)
        if faults:
            self.faults.mkdir(exist_ok=True)
            for f in self.faults.iterdir():
                f.unlink()
            env[ENV] = str(self.faults)
        self._started = time.monotonic()
        self._proc = subprocess.Popen(
            cmd, cwd=self.cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
            env=env,
        )
        return self._proc

    def stop(self) -> None:
        """End the loop from another thread: kill the running job and start no other."""
        self._stopped = True
        if self._proc is not None and self._proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._proc.pid, signal.SIGKILL)

    def _kill(self, proc: subprocess.Popen, aim: str) -> None:
        in_sink = self.sink_batches()  # before the kill: a killed SQLite writer leaves a journal to roll back
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate(timeout=60)
        hit = next((p for p in HOLD_AT.values() if (self.faults / f"{p}.hit").exists()), None)
        planned = last_id(self.checkpoint, "offsets")
        partitions = state_partitions(self.checkpoint)
        self.history.append(Kill(
            aim, hit, last_id(self.checkpoint, "commits"), in_sink, planned,
            state_written(partitions, planned + 1), len(partitions),
        ))
        self.outputs.append(out)
        self.lifetimes.append(time.monotonic() - self._started)

    def _fail_if_ended(self, proc: subprocess.Popen, deadline: float) -> None:
        if proc.poll() is not None:
            out = proc.stdout.read() if proc.stdout else ""
            raise AssertionError(
                f"the job ended (exit {proc.returncode}) before kill {len(self.history) + 1} of {self.kills}: "
                f"give it more input\n{out[-3000:]}"
            )
        if time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            raise AssertionError(f"no kill point reached in {self.timeout} s")

    def run(self) -> subprocess.CompletedProcess:
        rnd = random.Random(self.seed)
        deadline = time.monotonic() + self.timeout
        while len(self.history) < self.kills:
            before = last_id(self.checkpoint, "commits")
            self._note_replay()
            proc = self._start()
            aim = self.moments[len(self.history) % len(self.moments)]
            delay = rnd.uniform(0.0, 1.5)
            armed_at = None  # the commit after which the kill's moment is looked for
            while True:
                self._fail_if_ended(proc, deadline)
                committed = last_id(self.checkpoint, "commits")
                if committed > before:  # this run has committed a batch of its own
                    if armed_at is None:
                        armed_at = committed, time.monotonic()
                        if aim in HOLD_AT:
                            (self.faults / f"{HOLD_AT[aim]}.armed").touch()
                    if committed > armed_at[0] + MISSED_AFTER:  # the moment was missed: kill anywhere
                        self._kill(proc, aim)
                        break
                    if aim == RANDOM and time.monotonic() - armed_at[1] >= delay:
                        self._kill(proc, aim)
                        break
                    hit = self.faults / f"{HOLD_AT.get(aim)}.hit"
                    if aim in HOLD_AT and hit.exists():
                        if aim == SINK_DONE and self.sink_batches() < last_id(self.checkpoint, "offsets"):
                            # the batch wrote nothing to the sink: let it go on, and hold the next
                            (self.faults / f"{HOLD_AT[aim]}.armed").touch()
                            hit.unlink()
                            continue
                        if aim == STATE:
                            self._await_other_tasks()
                        self._kill(proc, aim)
                        break
                time.sleep(0.01)
        self._note_replay()
        proc = self._start(self.final_args, faults=False)
        out, _ = proc.communicate(timeout=self.timeout)
        self.outputs.append(out)
        self.lifetimes.append(time.monotonic() - self._started)
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, "")

    def _await_other_tasks(self) -> None:
        """While one task holds with its state uncommitted, let the other tasks of the batch
        write their state versions (all but the held one's)."""
        planned = last_id(self.checkpoint, "offsets")
        partitions = state_partitions(self.checkpoint)
        until = time.monotonic() + OTHER_TASKS_SECONDS
        while state_written(partitions, planned + 1) < len(partitions) - 1 and time.monotonic() < until:
            time.sleep(0.01)

    def _note_replay(self) -> None:
        committed, planned = last_id(self.checkpoint, "commits"), last_id(self.checkpoint, "offsets")
        if planned > committed:
            self.replayed.append(planned)

    def summary(self, title: str, figures: dict[str, int]) -> str:
        """The loop's figures, to print (and paste into a note)."""
        aimed = Counter(k.aim for k in self.history)
        on_target = Counter(k.aim for k in self.history if k.on_target)
        landed = Counter(k.landed for k in self.history)
        width = max(len(label) for label in [*(DESCRIBE[m] for m in self.moments), *landed])
        lines = [f"{title}: {len(self.history)} kills (SIGKILL to the whole process group), then a final run to the end"]
        lines.append("  kills aimed at each moment (landed there):")
        lines += [f"    {DESCRIBE[m]:<{width}}  {aimed[m]:>3} ({on_target[m]})" for m in self.moments if aimed[m]]
        lines.append("  where the kills landed, read from the checkpoint and the sink:")
        lines += [f"    {where:<{width}}  {n:>3}" for where, n in landed.most_common()]
        lines.append(f"  restarts that replayed an unfinished batch: {len(self.replayed)} {self.replayed}")
        lines.append(
            f"  rows compared with an uninterrupted run: {figures['rows']:,}; duplicates {figures['duplicates']}, "
            f"gaps {figures['gaps']}, rows not in it {figures['extra']}, differing values {figures['differing']}"
        )
        lines.append(f"  seconds each run lived: {', '.join(f'{t:.0f}' for t in self.lifetimes)}")
        return "\n".join(lines)
