"""A file source's files listed and read in Python, as blocks of whole lines.

sparkstate's file source lists a local ``FileSource`` directory itself (:func:`list_files`)
and takes its files in one total order, ``(modification time in ms, path)``: a micro-batch
is the files after one position in that order and up to another (:func:`files_between`),
and Spark's offset log records the position, so a replayed batch, a restarted query and a
restored savepoint all read each file once and in that order. The packing step then reads
each file itself, a block at a time, and parses the block's lines in one piece. Reading
files in the Python worker spares Spark's text scan and its transfer of every line from the
JVM to Python, which cost a file source about a quarter of the generator's throughput.

The lines are the ones Spark's text source reads: a line ends at ``\\n``, ``\\r\\n`` or
``\\r`` (Hadoop's line reader), the bytes are UTF-8, and a byte that is not (which Spark's
text source would pass on undecodable) becomes U+FFFD here, so the line is parsed rather
than failing the batch. A block ends at a line break, so no line is split between blocks; a
block starts at a byte offset of its file, which orders a file's blocks.

Only files Python can open are read this way (a local path, or ``file:`` as Spark names
local files); other file systems' files come with their bytes (:func:`blocks_of`). Files
compressed as Spark's text source reads them by their name's ending (Hadoop's codecs) are
decompressed on the way: ``.gz``, ``.bz2`` and ``.deflate``; a file ending in another codec's
(``.zst``, ``.lz4``, ``.snappy``, ``.br``) fails its batch, saying so.

This module does not import pyspark: the packing step runs it in Spark's Python workers.
"""

from __future__ import annotations

import bz2
import gzip
import io
import os
import zlib
from collections.abc import Iterator, Sequence
from typing import BinaryIO, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

#: bytes read from a file at a time: the lines of one block are parsed and packed together
BLOCK_BYTES = 16 * 1024 * 1024


def local_path(path: str) -> str | None:
    """The path Python opens for a file Spark names ``path`` (``file:/tmp/in/a b.json``, as
    Hadoop writes a local path: not percent-encoded), or None when it is on another file
    system (``hdfs://``, ``s3a://``...)."""
    if path.startswith("file:"):
        path = path.removeprefix("file:")
        return "/" + path.lstrip("/") if path.startswith("//") else path
    return path if "://" not in path else None


def reads_locally(directory: str) -> bool:
    """Whether the files of ``directory`` (a FileSource's path) can be opened by Python."""
    return local_path(directory) is not None


class ListedFile(NamedTuple):
    """A file of a FileSource's directory: its place in the source's order is ``(mtime_ms, path)``."""

    mtime_ms: int
    path: str
    size: int

    @property
    def key(self) -> tuple[int, str]:
        return (self.mtime_ms, self.path)


#: the position before every file (a new checkpoint's start)
BEFORE_ALL: tuple[int, str] = (-1, "")


def hidden(name: str) -> bool:
    """Whether Spark's file sources skip a file or directory of this name (``_SUCCESS``,
    ``.crc`` files, a copy in progress), and so does sparkstate's (a partition directory such
    as ``_k=1`` is not hidden)."""
    return (name.startswith("_") and "=" not in name) or name.startswith(".") or name.endswith("._COPYING_")


def list_files(directory: str) -> list[ListedFile]:
    """The files under ``directory`` (a local path; subdirectories included, hidden names
    skipped), in the source's order: by modification time (ms, as Hadoop reports it), then path."""
    out: list[ListedFile] = []
    pending = [directory]
    while pending:
        try:
            entries = list(os.scandir(pending.pop()))
        except FileNotFoundError:  # a subdirectory removed while listing
            continue
        for entry in entries:
            if hidden(entry.name):
                continue
            try:
                if entry.is_dir():
                    pending.append(entry.path)
                    continue
                st = entry.stat()
            except FileNotFoundError:  # removed while listing: it is not there
                continue
            out.append(ListedFile(st.st_mtime_ns // 1_000_000, entry.path, st.st_size))
    out.sort()
    return out


def files_between(files: Sequence[ListedFile], after: tuple[int, str], upto: tuple[int, str] | None = None,
                  limit: int | None = None) -> list[ListedFile]:
    """The files (sorted, as :func:`list_files` gives them) after position ``after`` and up to
    ``upto`` (None: no end), at most ``limit`` of them (the first ones)."""
    out = [f for f in files if f.key > after and (upto is None or f.key <= upto)]
    return out[:limit] if limit is not None else out


def spread(files: Sequence[ListedFile], tasks: int) -> list[list[ListedFile]]:
    """``files`` over at most ``tasks`` groups of about equal bytes (largest first into the
    lightest group), each group's files in the source's order; no group is empty."""
    groups: list[list[ListedFile]] = [[] for _ in range(max(1, min(tasks, len(files))))]
    sizes = [0] * len(groups)
    for f in sorted(files, key=lambda f: -f.size):
        i = sizes.index(min(sizes))
        groups[i].append(f)
        sizes[i] += f.size + 4 * 1024 * 1024  # plus the cost of opening a file, as Spark counts it
    return [sorted(g) for g in groups if g]


def blocks(stream: BinaryIO, block_bytes: int = BLOCK_BYTES) -> Iterator[tuple[int, bytes]]:
    """``(offset, data)``: the stream's bytes in blocks of about ``block_bytes`` that end at a
    line break (the last at the end of the stream), with each block's offset. A line longer
    than a block makes its block longer."""
    start, rest = 0, b""
    while True:
        chunk = stream.read(block_bytes)
        if not chunk:
            if rest:
                yield start, rest
            return
        data = rest + chunk if rest else chunk
        cut = max(data.rfind(b"\n"), data.rfind(b"\r")) + 1
        if cut == 0:  # no line break yet
            rest = data
            continue
        yield start, data[:cut]
        start += cut
        rest = data[cut:]


#: the endings of files compressed with a codec Hadoop may have but Python's library lacks
UNREADABLE_CODECS = (".zst", ".lz4", ".snappy", ".br")


class _Inflating(io.RawIOBase):
    """A ``.deflate`` file (Hadoop's default codec: a zlib stream), decompressed as it is read."""

    def __init__(self, raw: BinaryIO) -> None:
        self._raw, self._zlib, self._out = raw, zlib.decompressobj(), b""

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        while (size < 0 or len(self._out) < size) and not self._zlib.eof:
            chunk = self._raw.read(1 << 20)
            self._out += self._zlib.decompress(chunk) if chunk else self._zlib.flush()
            if not chunk:
                break
        size = len(self._out) if size < 0 else size
        out, self._out = self._out[:size], self._out[size:]
        return out


def _decompressed(raw: BinaryIO, path: str) -> BinaryIO:
    """``raw`` decompressed as Spark's text source decompresses the file ``path`` (by its name's
    ending), or as it is."""
    if path.endswith(".gz"):
        return gzip.GzipFile(fileobj=raw)  # type: ignore[return-value]
    if path.endswith(".bz2"):
        return bz2.BZ2File(raw)  # type: ignore[return-value]
    if path.endswith(".deflate"):
        return _Inflating(raw)  # type: ignore[return-value]
    if path.endswith(UNREADABLE_CODECS):
        raise ValueError(
            f"{path}: FileSource reads files compressed as .gz, .bz2 or .deflate (or not at all), not "
            f"{path.rsplit('.', 1)[1]}: decompress it, or read the directory with "
            "DataFrameSource(lambda spark: spark.readStream.text(...)) where Spark has that codec"
        )
    return raw


def blocks_of(path: str, content: pa.Buffer | bytes | None = None, block_bytes: int = BLOCK_BYTES) -> Iterator[tuple[int, bytes]]:
    """A file's :func:`blocks` (of its decompressed bytes, when its name says it is compressed):
    read from ``path`` when Python can open it, else from ``content`` (the file's bytes, as
    Spark's binary-file source read them). Offsets are in the decompressed bytes."""
    local = local_path(path) if content is None else None
    if local is None and content is None:
        raise FileNotFoundError(f"{path}: not on a file system Python can open, and its content was not read")
    with open(local, "rb") if local is not None else io.BytesIO(memoryview(content)) as raw:  # type: ignore[arg-type]
        yield from blocks(_decompressed(raw, path), block_bytes)


def lines_of(block: bytes) -> pa.Array:
    """A block's lines, as an Arrow string array (see the module's docs for line breaks and
    bytes that are not UTF-8); a final line break ends the last line, it starts none."""
    if b"\r" in block:
        block = block.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    if block.endswith(b"\n"):
        block = block[:-1]
    try:
        text = pa.array([block], pa.binary()).cast(pa.string())  # the cast checks the UTF-8
    except pa.ArrowInvalid:
        text = pa.array([block.decode("utf-8", "replace")], pa.string())
    return pc.split_pattern(text, "\n").flatten()
