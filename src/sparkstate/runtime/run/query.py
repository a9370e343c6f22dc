"""The third phase of a run: Spark's session set for the job (its partitions, state store and
RocksDB options) and the job's streaming query built (``streaming/query.py``; the native path's
in ``streaming/native_windows.py``), not yet started."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from sparkstate.runtime.checkpoint.fresh import claim_outputs
from sparkstate.runtime.io.mailbox import Mailbox
from sparkstate.runtime.run.open import Run
from sparkstate.runtime.streaming.planner import NATIVE

#: the RocksDB options (``CheckpointConfig.rocksdb``) runs of this process set on their session
_ROCKSDB_SET: set[str] = set()


def build(run: Run) -> tuple[Any, Mailbox | None]:
    """The run's ``DataStreamWriter``, and the mailbox its batches post to when they run in
    another process than the run's (Spark Connect: ``io/mailbox.py``)."""
    from sparkstate.runtime.session.classic import state_store_class
    from sparkstate.runtime.session.driver import driver
    from sparkstate.runtime.streaming.query import build_query, output_arrow

    job, checkpoint, result = run.job, run.checkpoint, run.result
    spark = run.session(run.partitions)
    ui = driver(spark).ui_url()
    if ui and run.options.on_notice is not None:
        run.options.on_notice(f"Spark UI: {ui}")
    claim_outputs(job, checkpoint, spark)
    run.spec = replace(run.spec, output_arrow=output_arrow(job))

    spark.conf.set("spark.sql.shuffle.partitions", str(run.partitions))
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", state_store_class(job.settings.state_backend))
    conf = job.settings.checkpoint.spark_conf()
    # a RocksDB option an earlier job of this session set, and this one does not, is Spark's default again
    for key in _ROCKSDB_SET - set(conf):
        spark.conf.unset(key)
    for key, value in conf.items():
        spark.conf.set(key, value)
    _ROCKSDB_SET.update(k for k in conf if k.startswith("spark.sql.streaming.stateStore.rocksdb.") and
                        "changelogCheckpointing" not in k)
    # over Spark Connect the batches' sink functions run on the server: they post what the run needs
    mailbox = Mailbox(checkpoint.mailbox_dir) if driver(spark).connect else None
    if run.plan.path == NATIVE:
        from sparkstate.runtime.streaming.native_windows import build_native_query

        writer = build_native_query(job, spark, checkpoint, run.spec.end_watermark is not None, result.batch_side_outputs,
                                    result.warnings, refused_counts=result.batch_refused, mailbox=mailbox)
    else:
        writer = build_query(job, run.spec, spark, checkpoint, result.batch_side_outputs, result.warnings, run.restore,
                             refused_counts=result.batch_refused, mailbox=mailbox)
    return writer, mailbox
