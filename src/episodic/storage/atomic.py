"""Atomic file creation: write under a temporary name in the same directory, then rename over the final name.

Readers (other processes included) see either no file or the complete file, never a partial one. The
temporary name is hidden (a leading dot), ends in `.tmp` and is unique per process and call, so concurrent
writers of one final path never share a temporary file; the last rename wins and every rename is atomic
(`os.replace`). The temporary file is created with mode 0o666 filtered by the process umask (the mode a
plain `open(path, "w")` gives), not `tempfile.mkstemp`'s 0o600. On any failure it is removed.

- `atomic_path(final)`: a context manager for one-shot writes: `with atomic_path(p) as tmp: write to tmp`.
- `atomic_write_bytes(final, data)`: the whole file from bytes.
- `AtomicFile(final)`: for writers that keep a temporary file open across many calls (`.tmp`, then
  `.commit()` or `.discard()`); also a context manager.

Durability: a rename is visible to every process at once and survives the writer being killed, but not a
power loss or an OS crash until the data and the directory entry reach the disk. `fsync=True` (on
`commit`, `atomic_path`, `atomic_write_bytes`) flushes the file before the rename and its directory after.
`temp_files(root)` finds the temporary files a killed process left behind (they match this module's naming
only: `.<name>.<pid>.<12 hex>.tmp`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = [
    "AtomicFile",
    "atomic_path",
    "atomic_write_bytes",
    "fsync_directory",
    "fsync_file",
    "is_temp_name",
    "temp_files",
]

_TEMP_NAME = re.compile(r"^\..+\.[0-9]+\.[0-9a-f]{12}\.tmp$")


def is_temp_name(name: str) -> bool:
    """True for a file name this module gives temporary files."""
    return _TEMP_NAME.match(name) is not None


def temp_files(root: str | os.PathLike) -> list[str]:
    """Every temporary file of this module's naming under `root` (sorted paths)."""
    found: list[str] = []
    for directory, _, files in os.walk(os.fspath(root)):
        found.extend(os.path.join(directory, f) for f in files if is_temp_name(f))
    return sorted(found)


def fsync_file(path: str | os.PathLike) -> None:
    """Flush a file's data and metadata to the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_directory(path: str | os.PathLike) -> None:
    """Flush a directory's entries (files created, renamed or removed in it) to the disk."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _create_temp(final: str) -> str:
    """Create (empty, exclusively) and return a hidden temporary path next to `final`."""
    directory, name = os.path.split(final)
    while True:
        tmp = os.path.join(directory, f".{name}.{os.getpid()}.{os.urandom(6).hex()}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:  # pragma: no cover - 48 random bits collided
            continue
        os.close(fd)
        return tmp


def _makedirs(directory: str) -> list[str]:
    """Create `directory` and its missing parents; returns the ones created, outermost first."""
    missing = []
    d = os.path.abspath(directory)
    while not os.path.isdir(d):
        missing.append(d)
        parent = os.path.dirname(d)
        if parent == d:
            break
        d = parent
    os.makedirs(directory, exist_ok=True)
    return missing[::-1]


class AtomicFile:
    """A file being written at `tmp` that becomes `final` on `commit()` (an atomic rename) or disappears on
    `discard()`. The parent directory is created when missing; `tmp` exists (empty) from the start, and a
    writer may open, truncate and rewrite it freely (its mode stays)."""

    def __init__(self, final: str | os.PathLike):
        self.final = os.fspath(final)
        self._new_dirs = _makedirs(os.path.dirname(self.final) or ".")
        self.tmp = _create_temp(self.final)
        self.done = False

    def commit(self, fsync: bool = False) -> str:
        """Rename the temporary file to the final path (replacing any file there); returns the final path.
        `fsync`: flush the file before the rename and the directory after it (durable across a power loss).
        When this fails the temporary file is removed and the error raised."""
        if self.done:
            raise RuntimeError(f"{self.final}: already committed or discarded")
        try:
            if fsync:
                fsync_file(self.tmp)
            os.replace(self.tmp, self.final)
        except BaseException:
            self.discard()
            raise
        self.done = True
        if fsync:
            fsync_directory(os.path.dirname(self.final) or ".")
            for d in reversed(self._new_dirs):  # directories this file created: their entries too
                fsync_directory(os.path.dirname(d) or ".")
        return self.final

    def discard(self) -> None:
        """Remove the temporary file (no-op once committed or discarded)."""
        if self.done:
            return
        self.done = True
        try:
            os.unlink(self.tmp)
        except FileNotFoundError:
            pass

    def __enter__(self) -> AtomicFile:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.discard()

    def __repr__(self) -> str:
        return f"AtomicFile({self.final!r}, tmp={self.tmp!r}, done={self.done})"


@contextmanager
def atomic_path(final: str | os.PathLike, fsync: bool = False) -> Iterator[str]:
    """A temporary path to write; renamed to `final` when the block ends normally (flushed to the disk first
    with `fsync`), removed when it raises."""
    f = AtomicFile(final)
    try:
        yield f.tmp
    except BaseException:
        f.discard()
        raise
    f.commit(fsync=fsync)


def atomic_write_bytes(path: str | os.PathLike, data: bytes, fsync: bool = False) -> None:
    """Write `data` to `path` through a temporary file in the same directory and an atomic rename."""
    with atomic_path(path, fsync=fsync) as tmp:
        with open(tmp, "wb") as f:
            f.write(data)
