"""Errors raised by sparkstate. Each one says what went wrong, where, and what was expected.

Every error a user can meet derives from :class:`SparkStateError`; most also derive from the
built-in they refine (in brackets), so ``except ValueError`` keeps working::

    SparkStateError (Exception)
    ├── StateDescriptorError (ValueError)      a malformed or conflicting state descriptor
    ├── StateTypeError (TypeError)             a state write of the wrong type
    ├── StateAccessError (RuntimeError)        state or timers used without a current key
    ├── TimerError (ValueError)                a bad timer timestamp, or no on_timer
    ├── KeyColumnError (KeyError)              a missing key column or key value
    ├── OutputSchemaError (ValueError)         a row that does not fit the output schema
    ├── ProcessFunctionError                   a user function raised
    ├── JobDefinitionError (ValueError)        a job built wrongly
    ├── CheckpointMismatchError                a checkpoint of another job or configuration
    ├── CheckpointInUseError                   another run holds the checkpoint directory
    ├── CheckpointLockError                    the checkpoint's lock cannot keep a second run out there
    ├── JobFailedError                         a running job stopped with an error
    │   └── CheckpointStorageError             the checkpoint directory cannot be written
    ├── SinkError                              a sink cannot take the output
    ├── SourceError                            a source cannot deliver
    ├── MissingDependencyError (ImportError)   an optional part used without its extra installed
    └── SavepointError                         a savepoint that cannot be written, read or restored
        └── StateMigrationError                a savepoint's state does not fit the job's descriptors

This module imports nothing of sparkstate, so every layer can raise these.
"""

from __future__ import annotations


class SparkStateError(Exception):
    """Base class of every error sparkstate raises on purpose."""


class StateDescriptorError(SparkStateError, ValueError):
    """A state descriptor is malformed, or its name is reused for another kind of state."""


class StateTypeError(SparkStateError, TypeError):
    """A value written to state does not match the type its descriptor declares."""


class StateAccessError(SparkStateError, RuntimeError):
    """State or timers were used where no key is current (for example in ``open``)."""


class TimerError(SparkStateError, ValueError):
    """A timer was registered with a bad timestamp, or by a function without ``on_timer``."""


class KeyColumnError(SparkStateError, KeyError):
    """A key column does not exist in the input, or an event has no value for it."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0]) if self.args else ""


class OutputSchemaError(SparkStateError, ValueError):
    """A row emitted by a function does not fit the declared output schema."""


class ProcessFunctionError(SparkStateError):
    """A user function raised; the message names the phase, the key and the input."""


class JobDefinitionError(SparkStateError, ValueError):
    """A job is built wrongly (missing source, key, function or sink; bad option)."""


class CheckpointMismatchError(SparkStateError):
    """A checkpoint directory belongs to another job or to an incompatible configuration."""


class CheckpointInUseError(SparkStateError):
    """Another run holds the checkpoint directory's lock; the message names it (job, pid,
    host, start time). One checkpoint takes one run at a time."""


class CheckpointLockError(SparkStateError):
    """The checkpoint directory's lock cannot keep a second run out where the directory lives
    (an NFS mount whose locks stay on one host, an object store without an atomic create);
    the message says why, and what to do."""


class JobFailedError(SparkStateError):
    """A running job stopped with an error; nothing after the last committed batch was kept."""


class CheckpointStorageError(JobFailedError):
    """The checkpoint directory cannot be written: it is not writable, or its disk is full.

    Raised before Spark starts, or when a running job stops on it; the message names the
    directory, the problem and the fix. Batches committed before it are kept, and the next
    run after the fix resumes from the last of them.
    """


class MissingDependencyError(SparkStateError, ImportError):
    """A feature needs a package of one of sparkstate's extras that is not installed (the
    Kafka connector, the PostgreSQL sink, the report's charts); the message names the extra."""


class SinkError(SparkStateError):
    """A sink cannot take the output: its database is unreachable, its table does not fit
    the job's rows, or it refused a batch. Nothing of the failing batch was committed."""


class SourceError(SparkStateError):
    """A source cannot deliver: the server it reads from is unreachable."""


class SavepointError(SparkStateError):
    """A savepoint cannot be taken, read or restored: missing, damaged (checksum), of another
    job, of a newer format, or taken where there is no committed state. Nothing is written
    to the new checkpoint when a restore is refused."""


class StateMigrationError(SavepointError):
    """A savepoint's state does not fit the restoring job's descriptors (a state removed or
    renamed, a value type changed incompatibly, other key columns or key groups); the message
    names the state, the field and both types."""
