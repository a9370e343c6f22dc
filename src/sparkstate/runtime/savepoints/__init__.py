"""Savepoints on Spark: taking one from a checkpoint, requests from other processes, restoring
one, reading state."""
