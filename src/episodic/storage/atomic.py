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
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["AtomicFile", "atomic_path", "atomic_write_bytes"]


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


class AtomicFile:
    """A file being written at `tmp` that becomes `final` on `commit()` (an atomic rename) or disappears on
    `discard()`. The parent directory is created when missing; `tmp` exists (empty) from the start, and a
    writer may open, truncate and rewrite it freely (its mode stays)."""

    def __init__(self, final: str | os.PathLike):
        self.final = os.fspath(final)
        os.makedirs(os.path.dirname(self.final) or ".", exist_ok=True)
        self.tmp = _create_temp(self.final)
        self.done = False

    def commit(self) -> str:
        """Rename the temporary file to the final path (replacing any file there); returns the final path.
        When the rename fails the temporary file is removed and the error raised."""
        if self.done:
            raise RuntimeError(f"{self.final}: already committed or discarded")
        try:
            os.replace(self.tmp, self.final)
        except BaseException:
            self.discard()
            raise
        self.done = True
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

    def __enter__(self) -> "AtomicFile":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.discard()

    def __repr__(self) -> str:
        return f"AtomicFile({self.final!r}, tmp={self.tmp!r}, done={self.done})"


@contextmanager
def atomic_path(final: str | os.PathLike) -> Iterator[str]:
    """A temporary path to write; renamed to `final` when the block ends normally, removed when it raises."""
    with AtomicFile(final) as f:
        yield f.tmp


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write `data` to `path` through a temporary file in the same directory and an atomic rename."""
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            f.write(data)
