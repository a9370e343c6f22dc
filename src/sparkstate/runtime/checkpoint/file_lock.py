"""An exclusive, non-blocking ``flock`` on a local file: the run lock and the class cache's
recording lock. The kernel drops it however the holder ends, so no lock is ever stale."""

from __future__ import annotations

import os


def try_flock(path: str | os.PathLike[str], note: bytes) -> int | None:
    """An exclusive ``flock`` on ``path`` (its file descriptor, to close to release it), or None
    when another process holds it; ``note`` is written into the file for a person looking
    (best effort: on a full disk the lock holds all the same)."""
    import fcntl

    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    except BaseException:
        os.close(fd)
        raise
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, note, 0)
    except OSError:
        pass
    return fd
