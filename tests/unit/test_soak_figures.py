"""The soak benchmark's figures (benchmarks/soak.py): growth per 1,000 batches after the warm-up."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location("soak", Path(__file__).resolve().parents[2] / "benchmarks" / "soak.py")
assert _spec is not None and _spec.loader is not None
soak = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(soak)

MB = 2**20


def _sample(seconds: float, batches: int, **figures: float) -> dict:
    row = {col: 0 for _, col, _, _, _ in soak.FIGURES}
    return {**row, "seconds": seconds, "batches": batches, **figures}


def test_growth_is_the_slope_after_the_warm_up_per_1000_batches():
    # the warm-up (first third) jumps by 500 MB; then the driver grows 2 MB per 1,000 batches,
    # the checkpoint holds steady and gains a file every 10 batches
    samples = [_sample(0, 10, driver_rss=100 * MB, checkpoint_bytes=5 * MB)]
    for i in range(1, 31):
        batches = 100 * i
        samples.append(_sample(i * 30, batches, driver_rss=600 * MB + 2 * MB * batches / 1000,
                               checkpoint_bytes=50 * MB, checkpoint_files=batches // 10))
    rows, info = soak.growth(samples)
    assert info["soak"]["driver_rss_growth_mb_per_1000_batches"] == pytest.approx(2.0)
    assert info["soak"]["checkpoint_growth_mb_per_1000_batches"] == pytest.approx(0.0, abs=1e-9)
    assert info["soak"]["files_growth_per_1000_batches"] == pytest.approx(100.0, rel=0.01)
    assert info["rate"] == pytest.approx(100 / 30)
    driver = next(r for r in rows if r["label"] == "driver Python RSS")
    # 30 days at 100 batches per 30 s is 8,640,000 batches: 17,280 MB at 2 MB per 1,000
    assert driver["month"] == pytest.approx(17_280.0)
    # a figure never sampled (no JVM heap) has no slope
    assert soak.slope([1, 2, 3], [None, None, None]) is None


def test_the_soak_line_names_every_figure_in_one_line():
    line = soak.soak_line(5_123, 60, {"driver_rss_growth_mb_per_1000_batches": 0.25, "jvm_heap_growth_mb_per_1000_batches": None})
    assert line == ("SOAK batches=5123 minutes=60 driver_rss_growth_mb_per_1000_batches=0.250 "
                    "jvm_heap_growth_mb_per_1000_batches=nan")
