"""Killing a sparkstate job for real: SIGKILL at random points, restart, repeat.

``CrashLoop`` runs ``sparkstate run JOB ...`` as its own process group (the Python driver,
its JVM and the JVM's Python workers), waits until the run has committed a new micro-batch,
and kills the whole group with SIGKILL, then starts the same command again on the same
checkpoint. Two kinds of kill points alternate:

* ``random``: a random delay after a commit, so the kill lands anywhere in a batch
  (reading, the stateful operator, the state store's upload, the sink);
* ``commit``: the moment the sink has committed a batch that Spark's commit log does not
  hold yet, i.e. between the sink's transaction and Spark's own commit, the point where a
  replay must be recognised (``sink_batches`` tells where the sink is).

Before every restart the checkpoint tells what the kill left: a batch planned in the offset
log but missing from the commit log is run again by the restarted query (a replay).
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path


def log_ids(checkpoint: Path, log: str) -> list[int]:
    folder = checkpoint / log
    return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit()) if folder.exists() else []


def last_id(checkpoint: Path, log: str) -> int:
    ids = log_ids(checkpoint, log)
    return ids[-1] if ids else -1


@dataclass
class Kill:
    kind: str  # "random" or "commit"
    #: the last batch in Spark's commit log, the last the sink held, the last planned, at the kill
    committed: int
    in_sink: int
    planned: int

    @property
    def between_sink_and_spark(self) -> bool:
        """The sink had committed a batch that Spark had not: the restart must skip it."""
        return self.in_sink > self.committed


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
    timeout: float = 900.0
    history: list[Kill] = field(default_factory=list)
    #: batches the restarted queries ran again (planned, not committed, at a kill)
    replayed: list[int] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    #: how long each process ran, in seconds (the killed ones, then the final one)
    lifetimes: list[float] = field(default_factory=list)
    _started: float = 0.0
    _proc: subprocess.Popen | None = None
    _stopped: bool = False

    def _start(self, args: list[str] | None = None) -> subprocess.Popen:
        if self._stopped:
            raise AssertionError("the crash loop was stopped")
        cmd = [str(Path(sys.executable).with_name("sparkstate")), *(args or self.args)]
        self._started = time.monotonic()
        self._proc = subprocess.Popen(
            cmd, cwd=self.cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
        )
        return self._proc

    def stop(self) -> None:
        """End the loop from another thread: kill the running job and start no other."""
        self._stopped = True
        if self._proc is not None and self._proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._proc.pid, signal.SIGKILL)

    def _kill(self, proc: subprocess.Popen, kind: str) -> None:
        kill = Kill(kind, last_id(self.checkpoint, "commits"), self.sink_batches(), last_id(self.checkpoint, "offsets"))
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate(timeout=60)
        self.outputs.append(out)
        self.lifetimes.append(time.monotonic() - self._started)
        self.history.append(kill)

    def run(self) -> subprocess.CompletedProcess:
        rnd = random.Random(self.seed)
        deadline = time.monotonic() + self.timeout
        while len(self.history) < self.kills:
            before = last_id(self.checkpoint, "commits")
            self._note_replay()
            proc = self._start()
            kind = "commit" if len(self.history) % 2 else "random"
            delay = rnd.uniform(0.0, 1.5)
            seen_at = None
            while True:
                if proc.poll() is not None:
                    out = proc.stdout.read() if proc.stdout else ""
                    raise AssertionError(
                        f"the job ended (exit {proc.returncode}) before kill {len(self.history) + 1} of {self.kills}: "
                        f"give it more input\n{out[-3000:]}"
                    )
                if time.monotonic() > deadline:
                    os.killpg(proc.pid, signal.SIGKILL)
                    raise AssertionError(f"no kill point reached in {self.timeout} s")
                committed = last_id(self.checkpoint, "commits")
                if committed > before:  # this run has committed a batch of its own
                    if kind == "random":
                        seen_at = seen_at or time.monotonic()
                        if time.monotonic() - seen_at >= delay:
                            self._kill(proc, kind)
                            break
                    elif self.sink_batches() > committed or committed > before + 5:
                        # the sink holds a batch Spark has not committed (or, when the window
                        # was missed five times, anywhere: the kind says which)
                        self._kill(proc, kind if self.sink_batches() > committed else "random")
                        break
                time.sleep(0.005 if kind == "commit" else 0.02)
        self._note_replay()
        proc = self._start(self.final_args)
        out, _ = proc.communicate(timeout=self.timeout)
        self.outputs.append(out)
        self.lifetimes.append(time.monotonic() - self._started)
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, "")

    def _note_replay(self) -> None:
        committed, planned = last_id(self.checkpoint, "commits"), last_id(self.checkpoint, "offsets")
        if planned > committed:
            self.replayed.append(planned)
