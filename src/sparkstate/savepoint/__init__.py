"""Savepoints: a job's state, timers, watermark and source offsets at one committed batch,
in a portable format (``format.py``) written and read with checksums (``files.py``).

Taking a savepoint from a checkpoint and restoring one into a new run need Spark and live in
``runtime/`` (``runtime/savepoints/take.py``, ``runtime/savepoints/restore.py``); this package is plain
Python and pyarrow, so a savepoint can be read, checked and written without Spark.
"""

from sparkstate.savepoint.files import LocalDirectory, Savepoint, SavepointWriter, open_savepoint
from sparkstate.savepoint.format import FORMAT_VERSION, METADATA_FILE

__all__ = ["FORMAT_VERSION", "METADATA_FILE", "LocalDirectory", "Savepoint", "SavepointWriter", "open_savepoint"]
