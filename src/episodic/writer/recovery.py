"""What reopening an interrupted writing session found (`Recovery`: a reopened `DatasetWriter`'s `recovery`, what
`episodic repair` reports)."""

from __future__ import annotations

from dataclasses import dataclass

from .session import segment_episode

__all__ = ["Recovery"]


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
