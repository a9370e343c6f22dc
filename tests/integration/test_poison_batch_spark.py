"""A batch that fails says what it read: the message names the input files of the failing batch."""

from __future__ import annotations

import json
import os

import pytest
from spark_helpers import FAST

from sparkstate import FileSource, Job, JobFailedError, KeyedProcessFunction, MemorySink, UpiPayments


class Picky(KeyedProcessFunction):
    def process_element(self, e, ctx):
        if e["amount"] == 13.0:
            raise ValueError("unlucky amount")
        yield {"merchant_id": ctx.get_current_key(), "amount": e["amount"]}


def test_a_failing_batch_names_its_files(spark, checkpoint, tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    for i, (name, amount) in enumerate((("good.json", 1.0), ("poison.json", 13.0))):
        path = folder / name
        path.write_text(json.dumps({"merchant_id": f"m{i}", "amount": amount}) + "\n")
        os.utime(path, (1_700_000_000 + i, 1_700_000_000 + i))  # one file per batch, oldest first
    job = (
        Job("picky").source(FileSource(str(folder), UpiPayments.schema_ddl, max_files_per_trigger=1))
        .key_by("merchant_id").process(Picky(), output_schema="merchant_id string, amount double")
        .sink(MemorySink()).with_settings(state_backend="hashmap", **FAST)
    )
    with pytest.raises(JobFailedError) as failure:
        job.run(checkpoint_dir=checkpoint, spark=spark, timeout=180)
    message = " ".join(str(failure.value).split())
    assert "unlucky amount" in message and "'m1'" in message  # the error, with its key
    assert f"batches up to 0 are committed in {checkpoint}. Batch 1 read file {folder / 'poison.json'}." in message
    assert "batch 1 is run again on the same input" in message
