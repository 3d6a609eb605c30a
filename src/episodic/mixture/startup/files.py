"""Which files of a mixture entry training reads: pure, from the entry's metadata and its preflight facts.

An entry's items read, for each selected episode (`entry_checks.selected_episodes`), the episode's data file
(parquet: the tabular columns, and cameras stored as images) and, for each camera the entry maps to a role
that is a video, the episode's video file of that camera. Cameras that no role maps are never decoded, so
their files are not needed. No I/O.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from ...format.metadata import DatasetMetadata
from ..checking.entry_checks import selected_episodes
from ..checking.report import PreflightReport

__all__ = ["entry_files", "needed_files"]


def needed_files(meta: DatasetMetadata, episodes: np.ndarray, camera_keys: Iterable[str]) -> list[str]:
    """The data files of `episodes`, then the video files of each video camera of `camera_keys` for them (each
    file once, in the metadata's order)."""
    episodes = np.asarray(episodes, dtype=np.int64)
    table = meta.episodes
    out = [table.data_files[i] for i in np.unique(table.data_file_id[episodes])] if episodes.size else []
    for key in dict.fromkeys(camera_keys):
        cam = table.cameras.get(key)
        if cam is None or not episodes.size:  # an image camera (in the data files), or no episode
            continue
        out += [cam.files[i] for i in np.unique(cam.file_id[episodes])]
    return list(dict.fromkeys(out))


def entry_files(report: PreflightReport, index: int) -> list[str]:
    """The files entry `index` of a checked mixture needs (its selected episodes, the cameras of its roles);
    [] for an entry that is skipped, failed, or not loaded."""
    facts, meta = report.entries[index], report.metadata[index] if index < len(report.metadata) else None
    if facts.status != "ok" or meta is None:
        return []
    episodes = selected_episodes(report.spec.entries[index], len(meta.episodes))
    return needed_files(meta, episodes, facts.cameras.values())
