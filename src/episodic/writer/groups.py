"""Which episodes go into which file: the rotating file series of the data files and of each camera.

A series is a sequence of groups, one per final file (`chunk_index`, `file_index`); the open group receives
new episodes and is closed when its bytes reach the size limit (then the next file index, and the next chunk
after `chunks_size` files). Closed groups wait to be joined into their final file. Everything here is a
pure function of the episodes added (in order), so replaying a session's journal rebuilds the same state.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..format.info import DEFAULT_DATA_PATH, DEFAULT_VIDEO_PATH


@dataclass
class Group:
    """The episodes of one final file. `camera` is None for a data file."""

    camera: str | None
    chunk: int
    file: int
    episodes: list[int] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)
    bytes: int = 0

    @property
    def frames(self) -> int:
        return sum(self.lengths)

    @property
    def rel(self) -> str:
        """The final file's path inside the dataset."""
        if self.camera is None:
            return DEFAULT_DATA_PATH.format(chunk_index=self.chunk, file_index=self.file)
        return DEFAULT_VIDEO_PATH.format(video_key=self.camera, chunk_index=self.chunk, file_index=self.file)

    @property
    def label(self) -> str:
        return self.rel


class Series:
    """The groups of one kind of file (data, or one camera), by size limit and chunk size."""

    def __init__(self, camera: str | None, limit_bytes: float, chunks_size: int):
        self.camera, self.limit, self.chunks_size = camera, limit_bytes, chunks_size
        self.open = Group(camera, 0, 0)
        self.pending: list[Group] = []  # closed, not yet joined into their final file

    def add(self, episode: int, length: int, nbytes: int) -> None:
        """Record an episode added to the open group; close the group when it is full."""
        g = self.open
        g.episodes.append(episode)
        g.lengths.append(length)
        g.bytes += nbytes
        if g.bytes >= self.limit:
            self.close_open()

    def close_open(self) -> None:
        """Close the open group (it waits in `pending` unless empty) and open the next file."""
        g = self.open
        if g.episodes:
            self.pending.append(g)
        chunk, file = g.chunk, g.file + 1
        if file >= self.chunks_size:
            chunk, file = chunk + 1, 0
        self.open = Group(self.camera, chunk, file)

    def joined(self, group: Group) -> None:
        """`group`'s final file is written: it is no longer pending (or, for the open group, closed)."""
        if group is self.open:
            self.close_open()
        self.pending = [g for g in self.pending if g is not group]
