"""What reopening an interrupted writing session found (`Recovery`: a reopened `DatasetWriter`'s `recovery`, what
`episodic repair` reports), and the episode a segment file's name holds (`segment_episode`)."""

from __future__ import annotations

import os
from dataclasses import dataclass

__all__ = ["Recovery", "segment_episode"]


@dataclass
class Recovery:
    """What reopening an interrupted session found: the complete episodes kept, and what was dropped (paths
    relative to the root): the segments of the episode being added when the writer stopped
    (`partial_files`), segments of files already joined (`joined_files`: stopped between writing a file and
    deleting its segments), temporary files, a torn last journal line (`torn_bytes`)."""

    episodes: int
    frames: int
    torn_bytes: int
    partial_files: list[str]
    joined_files: list[str]
    temp_files: list[str]

    def summary(self) -> str:
        parts = [f"{self.episodes} complete episode(s), {self.frames} frames kept"]
        if self.partial_files:
            eps = sorted({segment_episode(p) for p in self.partial_files})
            parts.append(f"incomplete episode {', '.join(map(str, eps))} dropped ({len(self.partial_files)} file(s))")
        if self.torn_bytes:
            parts.append(f"a partial journal line ({self.torn_bytes} bytes) dropped")
        if self.joined_files:
            parts.append(f"{len(self.joined_files)} segment file(s) of already joined files removed")
        if self.temp_files:
            parts.append(f"{len(self.temp_files)} temporary file(s) removed")
        return "; ".join(parts)


def segment_episode(path: str) -> int:
    """The episode index in a segment file name (episode-000000012.mp4 -> 12); -1 for another name."""
    name = os.path.basename(path)
    try:
        return int(name.split(".")[0].split("-")[1]) if name.startswith("episode-") else -1
    except (IndexError, ValueError):
        return -1
