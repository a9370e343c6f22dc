"""Running a job on Spark, as the phases of a run:

    open -> bind -> query -> loop -> finish

``open.py`` checks the job, opens and locks its checkpoint, plans the run and prepares a
savepoint's restore and ``--fresh``; ``bind.py`` binds and checks the sinks and records the
job in the checkpoint's metadata; ``query.py`` sets the session and builds the streaming query;
``loop.py`` starts it and watches it; ``finish.py`` stops it. Each phase hands the next a
:class:`~sparkstate.runtime.run.open.Run`. The run holds the checkpoint's lock from before
anything is deleted or set up until its query has stopped.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sparkstate.api.job import JobDescription as Job
from sparkstate.errors import SparkStateError
from sparkstate.runtime.run.bind import bind
from sparkstate.runtime.run.loop import already_complete, input_ends, watch
from sparkstate.runtime.run.open import Options, open_checkpoint, open_run
from sparkstate.runtime.run.query import build
from sparkstate.runtime.run.result import RunResult
from sparkstate.runtime.session.classic import active_session
from sparkstate.runtime.session.connect import abandon, server_lost, server_lost_error
from sparkstate.runtime.session.driver import driver


def run_job(
    job: Job,
    *,
    checkpoint_dir: str | os.PathLike[str] | None,
    spark: Any = None,
    on_progress: Callable[[dict], None] | None = None,
    timeout: float | None = None,
    log_file: str | Path | None = None,
    until: Callable[[RunResult], bool] | None = None,
    fresh: bool = False,
    on_notice: Callable[[str], None] | None = None,
    from_savepoint: str | None = None,
    allow_non_restored_state: bool = False,
    trust_savepoint: bool = False,
    spark_ui: bool = False,
) -> RunResult:
    """Run ``job`` until its bounded source is done, ``until(result)`` holds, ``timeout``
    passes, or Ctrl-C. ``fresh`` first deletes the job's checkpoint and outputs (only what
    sparkstate made for the job: see ``checkpoint/fresh.py``); what it kept goes to
    ``on_notice`` at once, and to ``result.warnings``.

    The run holds the checkpoint directory's lock (``checkpoint/run_lock.py``) from before
    anything is deleted or set up until its query has stopped: a second run on the checkpoint
    fails at once, naming this one.

    ``from_savepoint`` starts the new checkpoint from a savepoint's state, watermark and
    source offsets (``savepoints/restore.py``); it is checked before anything is written, and a
    run that resumes a checkpoint restored from that savepoint just resumes. A savepoint that
    stores pickled values is restored only with ``trust_savepoint`` (``savepoint/values.py``)."""
    options = Options(on_progress=on_progress, timeout=timeout, log_file=log_file, until=until, fresh=fresh,
                      on_notice=on_notice, from_savepoint=from_savepoint,
                      allow_non_restored_state=allow_non_restored_state, trust_savepoint=trust_savepoint,
                      spark_ui=spark_ui)
    try:
        checkpoint, spark = open_checkpoint(job, checkpoint_dir, spark, options)
        with checkpoint.lock(job.name) as lock:
            run = open_run(job, checkpoint, lock, spark, options)
            bind(run)
            ends = input_ends(run.job, run.spec)
            if already_complete(checkpoint, ends):
                run.result.completed = run.result.already_complete = True
                return run.result
            checkpoint.ensure_writable()
            writer, mailbox = build(run)
            return watch(run, writer, mailbox, ends)
    except SparkStateError:
        raise
    except Exception as exc:
        # a Spark Connect server lost before the query runs (the loop reports one lost after)
        session = spark or active_session()
        if session is None or not driver(session).connect or not server_lost(exc):
            raise
        abandon(session)
        raise server_lost_error(exc, job.name, str(checkpoint_dir)) from None
