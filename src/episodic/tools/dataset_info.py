"""`episodic info`: a human summary of a dataset."""

from __future__ import annotations

import numpy as np

from ..format.metadata import DatasetMetadata
from .text import printable as P


def summary(meta: DatasetMetadata) -> str:
    """The summary, every dataset-provided string escaped for the terminal (tools.text.printable)."""
    info, eps = meta.info, meta.episodes
    lengths = eps.length
    lines = [
        f"dataset      {P(meta.root)}",
        f"format       LeRobot {P(info.codebase_version)}   robot: {P(info.robot_type or '-')}",
        f"episodes     {len(eps)}   frames: {info.total_frames}   fps: {info.fps}   "
        f"duration: {info.total_frames / info.fps / 60:.1f} min",
    ]
    if len(lengths):
        lines.append(f"lengths      min {lengths.min()}  median {int(np.median(lengths))}  max {lengths.max()} frames")
    lines.append(
        f"tasks        {len(meta.tasks)}" + "".join(f"\n  [{i}] {P(t)}" for i, t in enumerate(meta.tasks[:10]))
    )
    if len(meta.tasks) > 10:
        lines.append(f"  ... {len(meta.tasks) - 10} more")
    lines.append(
        f"files        {len(eps.data_files)} data file(s)"
        + "".join(f", {len(c.files)} video file(s) for {P(k)}" for k, c in eps.cameras.items())
    )
    lines.append("features")
    for name, f in info.features.items():
        extra = ""
        if f.is_video:
            vi = f.info
            extra = P(f"  {vi.get('video.codec', '?')} {vi.get('video.pix_fmt', '')}".rstrip())
        names = f.names if isinstance(f.names, list) and not f.is_camera else None
        shown = f"  names: {P(', '.join(map(str, names[:6])))}{' ...' if len(names) > 6 else ''}" if names else ""
        lines.append(f"  {P(name):<32} {P(f.dtype):<8} {str(list(f.shape)):<14}{extra}{shown}")
    return "\n".join(lines)
