"""`episodic show`: a picture of one episode (camera frames at evenly spaced times, state/action curves)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import numpy as np

from ..format.features import DEFAULT_FEATURES
from ..progress import bar
from .text import printable

_BOOKKEEPING = set(DEFAULT_FEATURES)
MAX_CURVE_PANELS = 4


def curve_keys(meta) -> list[str]:
    """Vector float features to plot: observation.state and action first, then other float vectors."""
    feats = meta.info.features
    keys = [k for k, f in feats.items() if k not in _BOOKKEEPING and not f.is_camera
            and str(f.dtype).startswith("float") and len(f.shape) == 1]
    first = [k for k in ("observation.state", "action") if k in keys]
    return (first + [k for k in keys if k not in first])[:MAX_CURVE_PANELS]


def show_episode(dataset: str | os.PathLike, episode: int, out: str | os.PathLike, num_frames: int = 6,
                 cameras: Sequence[str] | None = None, progress: bool = True) -> Path:
    """Write a PNG of episode `episode` of `dataset` (path or fsspec URL) to `out`; returns its path."""
    from ..datasets import LeRobotDataset
    from .plots import episode_figure

    if num_frames < 1:
        raise ValueError("num_frames must be >= 1")
    ds = LeRobotDataset("show", root=dataset, episodes=[episode], video_keys=cameras, return_uint8=True)
    n = len(ds)
    picks = np.unique(np.linspace(0, n - 1, min(num_frames, n)).round().astype(np.int64))
    frames: dict[str, list[np.ndarray]] = {k: [] for k in ds.camera_keys}
    task = ""
    for i in bar(picks.tolist(), enabled=progress, desc=f"episode {episode} frames", unit="frame"):
        item = ds[i]
        task = item["task"]
        for k in ds.camera_keys:
            frames[k].append(item[k].permute(1, 2, 0).numpy())
    tab = LeRobotDataset("show", root=dataset, episodes=[episode], video_keys=[])
    keys = curve_keys(tab.meta)
    batch = tab.get_batch(np.arange(n))
    times = batch["timestamp"].numpy().astype(np.float64).reshape(-1)
    if not task:
        task = batch["task"][0] if batch["task"] else ""
    curves = {k: batch[k].numpy() for k in keys}
    names = {k: tab.meta.info.features[k].names for k in keys}
    # the task is dataset text: control characters escaped, '$' kept literal (matplotlib would read mathtext)
    shown_task = printable(task).replace("$", r"\$")
    title = f"{shown_task}\nepisode {episode}: {n} frames at {ds.fps} fps ({n / ds.fps:.1f} s)"
    return episode_figure({k: np.stack(v) for k, v in frames.items()}, times[picks], curves, names, times, title, out)
