"""What a batch's sink function tells the run when it runs in another process.

In Classic mode Spark calls a query's ``foreachBatch`` function in the driver's own Python
process, so it hands the run its figures in memory. Over Spark Connect the function runs in a
Python process of the server: what the run needs from it (the rows a :class:`MemorySink` or a
:class:`ConsoleSink` takes, each side output's row count, the rows a sink refused, warnings)
is posted as files into the checkpoint's ``sparkstate/mailbox/`` folder, which the client's
run loop takes (reads and deletes) each time it looks at the query's progress. A batch posts
before it commits, so its letters are there once its progress report is.

Bounded: the run empties the folder on every look, and a replayed batch's letter replaces the
first attempt's. Letters are Arrow IPC streams and JSON: reading them runs no code.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

#: a letter's file name: ``<batch>.<kind>.<target>``; ``kind`` is ``rows`` (an Arrow table for
#: ``target``, the main sink or a side output's name) or ``notes`` (JSON)
_NAME = re.compile(r"(\d+)\.(rows|notes)\.(.+)")
MAIN = "main"


@dataclass(frozen=True)
class Letter:
    batch: int
    kind: str
    target: str
    payload: Any  # an Arrow table (rows) or a dict (notes)


@dataclass(frozen=True)
class Mailbox:
    """The checkpoint's mailbox folder (a path the client and the server both see)."""

    folder: str

    def post_rows(self, batch_id: int, target: str, table: Any) -> None:
        """Post ``table``, the rows batch ``batch_id`` sends to ``target`` (``MAIN`` or a side output)."""
        import pyarrow as pa

        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        self._post(f"{batch_id}.rows.{target_name(target)}", sink.getvalue().to_pybytes())

    def post_notes(self, batch_id: int, notes: dict[str, Any]) -> None:
        """Post the figures and warnings of batch ``batch_id`` (plain JSON data)."""
        self._post(f"{batch_id}.notes.run", json.dumps(notes).encode())

    def _post(self, name: str, data: bytes) -> None:
        os.makedirs(self.folder, exist_ok=True)
        tmp = os.path.join(self.folder, f".{name}.{uuid.uuid4().hex}.tmp")
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, os.path.join(self.folder, name))  # whole or not there: the run never reads half

    def take(self) -> Iterator[Letter]:
        """The letters posted so far, by batch (each read, then deleted)."""
        import pyarrow as pa

        try:
            names = os.listdir(self.folder)
        except FileNotFoundError:
            return
        found = [(int(m.group(1)), m.group(2), m.group(3), n) for n in names if (m := _NAME.fullmatch(n))]
        for batch, kind, target, name in sorted(found):
            path = os.path.join(self.folder, name)
            try:
                with open(path, "rb") as f:
                    data = f.read()
                os.remove(path)
            except FileNotFoundError:
                continue
            if kind == "rows":
                payload: Any = pa.ipc.open_stream(data).read_all()
            else:
                payload = json.loads(data)
            yield Letter(batch, kind, target, payload)


def target_name(target: str) -> str:
    """``target`` as it appears in a letter's file name."""
    return re.sub(r"[^\w.-]", "_", target)
