"""Bootstrap and inspect on Spark: a job restored from a savepoint written from a DataFrame starts
with that state (opening balances), and its stopped checkpoint reads into the same frames as a
savepoint."""

from __future__ import annotations

import pandas as pd
from click.testing import CliRunner

from sparkstate import Job, KeyedProcessFunction, ListSource, MemorySink, ValueStateDescriptor
from sparkstate.cli import main
from sparkstate.runtime.savepoints.state_frames import read_checkpoint, read_state_spark, write_savepoint
from sparkstate.runtime.savepoints.state_reader import count_keys


class Balance(KeyedProcessFunction):
    def open(self, ctx):
        self.balance = ctx.get_state(ValueStateDescriptor("balance", float, default=0.0))

    def process_element(self, event, ctx):
        self.balance.update(self.balance.value() + event["amount"])
        yield {"account": ctx.get_current_key(), "balance": self.balance.value()}


BATCHES = [[{"account": "a", "amount": 1.0}, {"account": "c", "amount": 2.0}], [{"account": "b", "amount": 5.0}]]


def balance_job(sink: MemorySink) -> Job:
    return (Job("balances")
            .source(ListSource(BATCHES, schema="account string, amount double"))
            .key_by("account")
            .process(Balance(), output_schema="account string, balance double")
            .sink(sink)
            .with_settings(parallelism=2, key_groups=16)
            .with_checkpointing(state_backend="hashmap", interval="100 milliseconds"))


def test_a_job_restored_from_a_bootstrapped_savepoint_starts_with_its_state(spark, tmp_path):
    opening = spark.createDataFrame(pd.DataFrame({"account": ["a", "b"], "value": [100.0, 50.0]}))
    meta = write_savepoint(balance_job(MemorySink()), {"balance": opening}, str(tmp_path / "opening"), spark=spark)
    assert meta["keys"] == 2

    sink = MemorySink()
    result = balance_job(sink).run(checkpoint_dir=tmp_path / "ck", spark=spark,
                                              from_savepoint=tmp_path / "opening", timeout=120)
    assert result.completed
    rows = {(r["account"], r["balance"]) for r in sink.rows()}
    assert rows == {("a", 101.0), ("c", 2.0), ("b", 55.0)}  # the source read from its start, on the opening balances

    # the stopped job's checkpoint reads into the frames a savepoint gives
    reader = read_checkpoint(tmp_path / "ck", spark=spark)
    frame = reader.state("balance")
    assert dict(zip(frame["account"], frame["value"])) == {"a": 101.0, "b": 55.0, "c": 2.0}
    assert reader.key("b").state == {"balance": 55.0}
    assert reader.meta["batch"] == max(c.batch_id for c in result.checkpoints)
    # the hashmap backend's rows nest a group's state in groupState: its key count reads too
    assert count_keys(spark, tmp_path / "ck", "hashmap") == 3

    # the command line reads it too (in the session that runs)
    shown = CliRunner().invoke(main, ["state", str(tmp_path / "ck"), "--key", "b"], terminal_width=200)
    assert shown.exit_code == 0, shown.output
    said = " ".join(shown.output.split())  # the console wraps a long temporary path at 80 columns
    assert "through Spark" in said and 'key "b"' in said and "55.0" in said

    spark_rows = read_state_spark(spark, str(tmp_path / "opening"), "balance").collect()
    assert sorted((r.account, r.value) for r in spark_rows) == [("a", 100.0), ("b", 50.0)]
