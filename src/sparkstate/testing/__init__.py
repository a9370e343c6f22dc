"""Fast, Spark-free testing of keyed functions."""

from sparkstate.testing.harness import KeyedHarness

__all__ = ["KeyedHarness"]
