"""A new mp4 file written safely: the muxer writes to a descriptor we own (`open_output`), the file is checked to
read back as the frames written (`finish_output`) and only then renamed into place (`write_mp4`); after a
failure the muxer and its file are closed without raising (`close_output`) and nothing is left at the final
path. Used by the writer's encoder (`video.VideoFileWriter`) and by every copy of packets into a new file
(`remux`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import av

from ..storage.atomic import AtomicFile

__all__ = ["close_output", "finish_output", "open_output", "write_mp4"]


class _Sink:
    """The file an mp4 muxer writes to, a descriptor we own. FFmpeg takes a short write for a complete one and
    may drop an error raised while it writes the trailer: here every write is complete or raises, the first
    error is kept (`error`) for the caller to raise after closing, and closing never writes (so it cannot
    fail for lack of space), which releases the descriptor whatever the muxer's state."""

    def __init__(self, path: str):
        self._f = open(path, "wb", buffering=0)
        self.error: OSError | None = None

    def write(self, data) -> int:
        view = memoryview(data)
        try:
            done = 0
            while done < len(view):
                n = self._f.write(view[done:])
                if not n:
                    raise OSError(f"{self._f.name}: write made no progress")
                done += n
        except OSError as e:
            self.error = self.error or e
            raise
        return len(view)

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._f.seek(offset, whence)

    def tell(self) -> int:
        return self._f.tell()

    def close(self) -> None:
        self._f.close()


def open_output(path: str):
    """(sink, muxer) of a new mp4 file at `path` (a temporary path: see `AtomicFile`)."""
    sink = _Sink(path)
    try:
        return sink, av.open(sink, mode="w", format="mp4")
    except BaseException:
        sink.close()
        raise


def finish_output(sink: _Sink, container, path: str, frames: int) -> None:
    """Close a muxer that wrote `frames` frames, raise what went wrong while writing, and check that the file
    reads back as that many frames (never rename a file that does not)."""
    container.close()
    sink.close()
    if sink.error is not None:
        raise sink.error
    with av.open(path) as check:
        streams = check.streams.video
        got = streams[0].frames if streams else 0
    if got != frames:
        raise OSError(f"{path}: reads back as {got} frames after writing {frames}")


def close_output(sink, container) -> None:
    """Close a muxer and its file after a failure (never raises: the first error is the one to report)."""
    for close in (container.close if container is not None else None, sink.close if sink is not None else None):
        if close is not None:
            try:
                close()
            except Exception:  # noqa: BLE001
                pass


def write_mp4(final: str, mux: Callable[[Any], int], fsync: bool = False) -> int:
    """A new mp4 at `final` whose packets `mux(muxer)` writes, returning how many frames: written under a temporary
    name, checked to read back as that many frames, then renamed; on any error nothing is left at `final` (nor a
    temporary file)."""
    out_file = AtomicFile(final)
    try:
        sink, out = open_output(out_file.tmp)
        try:
            total = mux(out)
            finish_output(sink, out, out_file.tmp, total)
        except BaseException:
            close_output(sink, out)
            raise
        out_file.commit(fsync=fsync)
    except BaseException:
        out_file.discard()
        raise
    return total
