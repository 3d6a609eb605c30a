"""Matplotlib figures for `episodic bench-summarize`, `episodic show` and `episodic mixture shares` (Agg backend,
PNG files). matplotlib is optional (`pip install "episodic[plot]"`): without it every figure raises
`PlottingUnavailable`, whose message is one line saying what to install, and `plotting_unavailable()` says so
before any work is done."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

PLOT_INSTALL = 'pip install "episodic[plot]"'


class PlottingUnavailable(ImportError):
    """matplotlib cannot be imported; the message is one line naming what to install."""


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg", force=True)
        import matplotlib.pyplot as plt
    except ImportError as e:
        reason = " ".join(str(e).split()) or type(e).__name__
        raise PlottingUnavailable(
            f"no chart: matplotlib cannot be imported ({reason}); to draw charts: {PLOT_INSTALL}"
        ) from None
    return plt


def require_plotting() -> None:
    """Raise `PlottingUnavailable` (one line: what to install) unless figures can be drawn."""
    _pyplot()


def plotting_unavailable() -> str | None:
    """None when figures can be drawn, else the one line saying why not and what to install."""
    try:
        require_plotting()
    except PlottingUnavailable as e:
        return str(e)
    return None


def bench_summary_chart(rows: Sequence[dict], path: str | os.PathLike, title: str = "episodic bench") -> Path:
    """Two panels: frames/s by configuration (horizontal bars) and batch latency p50/p95 (ms)."""
    plt = _pyplot()
    labels = [r["label"] for r in rows]
    y = np.arange(len(rows))
    colors = ["#d98c2b" if r.get("loader") == "lerobot" else "#2b6cb0" for r in rows]
    h = max(2.8, 0.55 * len(rows) + 1.6)
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, h), sharey=True, gridspec_kw={"width_ratios": [1.1, 1]})
    fps = [r["frames_per_s"] for r in rows]
    a1.barh(y, fps, color=colors)
    for yi, v in zip(y, fps):
        a1.text(v, yi, f" {v:,.0f}", va="center", fontsize=8)
    if fps and min(fps) > 0 and max(fps) / min(fps) > 30:  # very different speeds: log scale keeps all bars visible
        a1.set_xscale("log")
        a1.set_xlim(min(fps) / 2, max(fps) * 3)
        a1.set_xlabel("frames / s, log scale (higher is better)")
    else:
        a1.set_xlim(0, max(fps) * 1.2 if fps else 1)
        a1.set_xlabel("frames / s (higher is better)")
    a1.set_yticks(y, labels, fontsize=8)
    a1.invert_yaxis()
    a1.set_title("throughput")
    a1.grid(axis="x", alpha=0.3)
    p50 = np.array([np.nan if r.get("p50_ms") is None else r["p50_ms"] for r in rows], dtype=float)
    p95 = np.array([np.nan if r.get("p95_ms") is None else r["p95_ms"] for r in rows], dtype=float)
    bh = 0.38
    a2.barh(y - bh / 2, np.nan_to_num(p50), height=bh, color="#38a169", label="p50")
    a2.barh(y + bh / 2, np.nan_to_num(p95), height=bh, color="#e53e3e", label="p95")
    for yi, a in zip(y, p50):
        if np.isnan(a):
            a2.text(0, yi, " n/a", va="center", fontsize=8, color="grey")
    a2.set_xlabel("batch latency, ms (lower is better)")
    a2.set_title("latency between batches")
    a2.legend(loc="lower right", fontsize=8)
    a2.grid(axis="x", alpha=0.3)
    fig.suptitle(title)
    return _save(fig, path)


def _names(names, dim: int, key: str) -> list[str]:
    """Feature names from info.json: a list, or a dict of lists (older datasets: {"motors": [...]})."""
    flat: list[str] = []
    if isinstance(names, dict):
        for v in names.values():
            flat += list(v) if isinstance(v, (list, tuple)) else [str(v)]
    elif isinstance(names, (list, tuple)):
        flat = [str(n) for n in names]
    if len(flat) != dim:
        flat = [f"{key}[{i}]" for i in range(dim)]
    return flat


def episode_figure(
    frames: dict[str, np.ndarray],
    frame_times: np.ndarray,
    curves: dict[str, np.ndarray],
    curve_names: dict[str, object],
    times: np.ndarray,
    title: str,
    path: str | os.PathLike,
) -> Path:
    """One row of frames (HWC uint8) per camera at `frame_times`, then one panel per curve (T, D) against
    `times` with a legend of its feature names."""
    plt = _pyplot()
    cams = list(frames)
    ncols = max([len(frame_times)] + [1])
    n_rows = len(cams) + len(curves)
    if n_rows == 0:
        raise ValueError("nothing to draw: the episode has no camera and no state/action feature")
    cam_h = 1.6
    heights = [cam_h] * len(cams) + [2.6] * len(curves)
    fig = plt.figure(figsize=(13, sum(heights) + 0.9))
    gs = fig.add_gridspec(n_rows, ncols + 1, height_ratios=heights, width_ratios=[1] * ncols + [0.55])
    for r, cam in enumerate(cams):
        for c in range(len(frame_times)):
            ax = fig.add_subplot(gs[r, c])
            ax.imshow(frames[cam][c])
            ax.set_xticks([])
            ax.set_yticks([])
            ax.set_title(f"t={frame_times[c]:.2f}s", fontsize=8)
            if c == 0:
                ax.set_ylabel(cam.replace("observation.images.", ""), fontsize=9)
    for j, (key, vals) in enumerate(curves.items()):
        ax = fig.add_subplot(gs[len(cams) + j, :ncols])
        vals = np.asarray(vals, dtype=np.float64).reshape(len(times), -1)
        names = _names(curve_names.get(key), vals.shape[1], key)
        cmap = plt.get_cmap("tab20" if vals.shape[1] > 10 else "tab10")
        for d in range(vals.shape[1]):
            ax.plot(times, vals[:, d], lw=1.2, color=cmap(d % cmap.N), label=names[d])
        for t in frame_times:
            ax.axvline(t, color="grey", lw=0.6, ls=":")
        ax.set_ylabel(key, fontsize=9)
        ax.set_xlim(times[0], times[-1] if len(times) > 1 else times[0] + 1)
        ax.grid(alpha=0.3)
        if j == len(curves) - 1:
            ax.set_xlabel("time (s)")
        leg = fig.add_subplot(gs[len(cams) + j, ncols])
        leg.axis("off")
        handles, labels = ax.get_legend_handles_labels()
        leg.legend(handles, labels, loc="center left", fontsize=6.5, ncol=2 if len(labels) > 8 else 1, frameon=False)
    fig.suptitle(title, fontsize=11)
    return _save(fig, path)


def share_chart(shares: dict, path: str | os.PathLike, title: str = "mixture shares") -> Path:
    """Target vs realised share of a mixture (`mixture.shares.share_table`): entries as points against the
    diagonal (log-log: shares span orders of magnitude), and groups as paired bars."""
    plt = _pyplot()
    entries, groups = shares["entries"], shares["groups"]
    fig, (a1, a2) = plt.subplots(
        1, 2, figsize=(13, max(4.5, 0.35 * len(groups) + 2)), gridspec_kw={"width_ratios": [1, 1.1]}
    )
    t = np.array([e["target"] for e in entries], dtype=float)
    r = np.array([e["realised"] for e in entries], dtype=float)
    pos = (t > 0) & (r > 0)
    a1.scatter(t[pos], r[pos], s=12, alpha=0.7, color="#2b6cb0", label=f"entries ({int(pos.sum())})")
    if (~pos).any():
        a1.scatter(
            np.maximum(t[~pos], 1e-9),
            np.full(int((~pos).sum()), 1e-9),
            s=14,
            marker="x",
            color="#e53e3e",
            label=f"never drawn ({int((~pos).sum())})",
        )
    lo = min([v for v in (*t[t > 0], *r[r > 0])] or [1e-6]) / 2
    a1.plot([lo, 1], [lo, 1], color="grey", lw=0.8, ls="--", label="realised = target")
    a1.set_xscale("log")
    a1.set_yscale("log")
    a1.set_xlim(lo, 1)
    a1.set_ylim(lo, 1)
    a1.set_xlabel("target share")
    a1.set_ylabel("realised share")
    a1.set_title(f"entries: {shares['items']:,} items, largest |realised - target| {shares['max_abs_error']:.3%}")
    a1.legend(loc="upper left", fontsize=8)
    a1.grid(alpha=0.3, which="both")
    y = np.arange(len(groups))
    bh = 0.38
    a2.barh(y - bh / 2, [g["target"] for g in groups], height=bh, color="#a0aec0", label="target")
    a2.barh(y + bh / 2, [g["realised"] for g in groups], height=bh, color="#2b6cb0", label="realised")
    a2.set_yticks(y, [f"{g['group']} ({g['entries']})" for g in groups], fontsize=8)
    a2.invert_yaxis()
    a2.set_xlabel("share")
    a2.set_title(f"groups: largest |realised - target| {shares['max_abs_error_groups']:.3%}")
    a2.legend(loc="lower right", fontsize=8)
    a2.grid(axis="x", alpha=0.3)
    fig.suptitle(title)
    return _save(fig, path)


def _save(fig, path) -> Path:
    """Lay out, write as PNG (creating the folder), close."""
    plt = _pyplot()
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
