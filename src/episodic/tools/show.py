"""`episodic show`: one episode in text (length, task, cameras, the range of each state/action curve) and as a
picture (camera frames at evenly spaced times, state/action curves; needs matplotlib)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..format.features import DEFAULT_FEATURES
from ..format.metadata import DatasetMetadata
from ..progress import bar
from .text import printable

_BOOKKEEPING = set(DEFAULT_FEATURES)
MAX_CURVE_PANELS = 4


def curve_keys(meta) -> list[str]:
    """Vector float features to plot: observation.state and action first, then other float vectors."""
    feats = meta.info.features
    keys = [
        k
        for k, f in feats.items()
        if k not in _BOOKKEEPING and not f.is_camera and str(f.dtype).startswith("float") and len(f.shape) == 1
    ]
    first = [k for k in ("observation.state", "action") if k in keys]
    return (first + [k for k in keys if k not in first])[:MAX_CURVE_PANELS]


@dataclass
class EpisodeTable:
    """The tabular part of one episode: its frames' times, task and curves (no video read)."""

    dataset: str
    episode: int
    meta: DatasetMetadata
    fps: int
    times: np.ndarray  # (T,) seconds
    task: str
    curves: dict[str, np.ndarray]  # key -> (T, D)

    def __len__(self) -> int:
        return len(self.times)


def read_episode(dataset: str | os.PathLike, episode: int) -> EpisodeTable:
    """Episode `episode` of `dataset` (path or fsspec URL), tabular columns only."""
    from ..datasets import LeRobotDataset

    tab = LeRobotDataset("show", root=dataset, episodes=[episode], video_keys=[])
    batch = tab.get_batch(np.arange(len(tab)))
    keys = curve_keys(tab.meta)
    return EpisodeTable(
        dataset=os.fspath(dataset),
        episode=episode,
        meta=tab.meta,
        fps=tab.fps,
        times=batch["timestamp"].numpy().astype(np.float64).reshape(-1),
        task=batch["task"][0] if batch["task"] else "",
        curves={k: batch[k].numpy().reshape(len(tab), -1) for k in keys},
    )


def episode_text(ep: EpisodeTable) -> str:
    """Lines for the terminal: length, task, cameras, each curve's size and range (dataset text escaped)."""
    n = len(ep)
    feats = ep.meta.info.features
    cams = [f"{k} {'x'.join(map(str, f.shape[:2]))}" for k, f in feats.items() if f.is_camera]
    lines = [
        f"episode {ep.episode} of {ep.dataset}: {n} frames at {ep.fps} fps ({n / ep.fps:.1f} s)",
        f"task: {ep.task}",
        f"cameras: {', '.join(cams) if cams else 'none'}",
    ]
    for k, v in ep.curves.items():
        lines.append(
            f"{k}: {v.shape[1]} values per frame"
            + (f", from {float(v.min()):.4g} to {float(v.max()):.4g}" if v.size else "")
        )
    return "\n".join(printable(line) for line in lines)


def show_episode(
    dataset: str | os.PathLike,
    episode: int,
    out: str | os.PathLike,
    num_frames: int = 6,
    cameras: Sequence[str] | None = None,
    progress: bool = True,
    table: EpisodeTable | None = None,
) -> Path:
    """Write a PNG of episode `episode` of `dataset` (path or fsspec URL) to `out`; returns its path. `table`:
    its `read_episode`, when already read. Needs matplotlib (`plots.PlottingUnavailable` without it, before any
    frame is decoded)."""
    from ..datasets import LeRobotDataset
    from .plots import episode_figure, require_plotting

    if num_frames < 1:
        raise ValueError("num_frames must be >= 1")
    require_plotting()
    ep = table if table is not None else read_episode(dataset, episode)
    ds = LeRobotDataset("show", root=dataset, episodes=[episode], video_keys=cameras, return_uint8=True)
    n = len(ds)
    picks = np.unique(np.linspace(0, n - 1, min(num_frames, n)).round().astype(np.int64))
    frames: dict[str, list[np.ndarray]] = {k: [] for k in ds.camera_keys}
    for i in bar(picks.tolist(), enabled=progress, desc=f"episode {episode} frames", unit="frame"):
        item = ds[i]
        for k in ds.camera_keys:
            frames[k].append(item[k].permute(1, 2, 0).numpy())
    names = {k: ep.meta.info.features[k].names for k in ep.curves}
    # the task is dataset text: control characters escaped, '$' kept literal (matplotlib would read mathtext)
    shown_task = printable(ep.task).replace("$", r"\$")
    title = f"{shown_task}\nepisode {episode}: {n} frames at {ds.fps} fps ({n / ds.fps:.1f} s)"
    return episode_figure(
        {k: np.stack(v) for k, v in frames.items()}, ep.times[picks], ep.curves, names, ep.times, title, out
    )
