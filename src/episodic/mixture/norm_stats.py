"""Normalisation statistics of a mixture, under its shared item keys: per entry, and pooled over entries that
share a grouping key (e.g. the robot type). From the entries' stats (``meta/stats.json``: the whole dataset's,
whatever episodes the entry selects); no data file is read. numpy only.

Per entry (`entry_stats`): each role's statistics under its shared key (`layout`): a camera's per-channel
(3, 1, 1) statistics under ``observation.images.<role>``; the state's (and action's) per-dimension statistics,
with the entry's ``state_indices`` applied, then padded to the mixture's dimension D like the values are. A
padded dimension (always 0 in the items) gets mean 0, std 1, min -1, max 1 and quantiles -1 (q01, q10), 0
(q50), 1 (q90, q99), so every usual normalisation (mean/std, min/max to [-1, 1], quantiles) leaves it at 0.
A role whose key has no statistics in the entry's stats is left out.

Pooled (`pooled_stats`), per group and key, over the entries of the group that have statistics for the key,
dimension by dimension over the entries in which that dimension is real (padding never enters a pool), by
`format.stats.aggregate_stats`: count-weighted mean; variance by the parallel-variance formula
(``sum_e n_e (std_e**2 + (mean_e - mean)**2) / sum_e n_e``); min of the mins, max of the maxes; quantiles the
count-weighted mean of the entries' quantiles (an approximation: exact quantiles need the data). Dimensions
real in no entry of the group get the padding values.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ..format.stats import Stats, aggregate_stats
from .layout import ACTION, STATE, EntryLayout, MixtureLayout, camera_key

__all__ = ["PAD_STATS", "entry_stats", "pooled_stats"]

# what a padded dimension gets: every normalisation mode maps its 0 to 0
PAD_STATS = {"mean": 0.0, "std": 1.0, "min": -1.0, "max": 1.0, "q01": -1.0, "q10": -1.0, "q50": 0.0, "q90": 1.0,
             "q99": 1.0}


def _vector(raw: dict, indices: Sequence[int] | None, dim: int, count: int) -> dict[str, np.ndarray]:
    """A vector key's stats with `indices` applied and padded to `dim` dimensions."""
    out: dict[str, np.ndarray] = {}
    for name, value in raw.items():
        if name == "count":
            continue
        v = np.asarray(value, dtype=np.float64).reshape(-1)
        if indices is not None:
            v = v[np.asarray(indices, dtype=np.int64)]
        pad = PAD_STATS.get(name, 0.0)
        out[name] = np.concatenate([v, np.full(dim - v.size, pad)])
    out["count"] = np.asarray(raw.get("count", [count]), dtype=np.int64).reshape(1)
    return out


def entry_stats(layout: MixtureLayout, metadata: Sequence) -> list[Stats]:
    """Each entry's statistics under the shared keys (one dict per `layout.entries`, same order); `metadata[i]`
    is spec entry i's `DatasetMetadata`."""
    out = []
    for e in layout.entries:
        meta = metadata[e.index]
        stats, total = meta.stats, int(meta.total_frames)
        mine: Stats = {}
        for role, key in e.cameras.items():
            if key in stats:
                mine[camera_key(role)] = {n: np.asarray(v, dtype=np.float64) for n, v in stats[key].items()}
                mine[camera_key(role)].setdefault("count", np.asarray([total], dtype=np.int64))
        for shared, key, indices, dim in ((STATE, e.state_key, e.state_indices, layout.state_dim),
                                          (ACTION, e.action_key, e.action_indices, layout.action_dim)):
            if key is not None and key in stats and dim:
                mine[shared] = _vector(stats[key], indices, dim, total)
        out.append(mine)
    return out


def _pool_vector(parts: list[tuple[dict, int]], dim: int) -> dict[str, np.ndarray]:
    """Pool per-dimension stats of entries with `d` real dimensions each, band by band of dimensions real in
    the same entries."""
    bands = sorted({d for _, d in parts if d > 0})
    names = set.intersection(*(set(p) for p, _ in parts)) - {"count"}
    pieces: dict[str, list[np.ndarray]] = {n: [] for n in names}
    lo = 0
    counts = []
    for hi in bands:
        members = [{"x": {n: (p[n][lo:hi] if n != "count" else p[n]) for n in (*names, "count")}}
                   for p, d in parts if d >= hi]
        agg = aggregate_stats(members)["x"]
        for n in names:
            pieces[n].append(np.asarray(agg[n], dtype=np.float64).reshape(-1))
        counts.append(int(agg["count"][0]))
        lo = hi
    out = {n: np.concatenate(pieces[n] + [np.full(dim - lo, PAD_STATS.get(n, 0.0))]) for n in names}
    out["count"] = np.asarray([max(counts) if counts else 0], dtype=np.int64)  # the entries with any real dimension
    return out


def pooled_stats(layout: MixtureLayout, per_entry: Sequence[Stats],
                 group_of: Callable[[EntryLayout], object] | None = None) -> dict[object, Stats]:
    """Statistics pooled over the entries of each group (`group_of(entry)`, default the entry's ``group``:
    the spec's ``group`` or the dataset's robot type), by the rule of the module docstring."""
    group_of = group_of or (lambda e: e.group)
    groups: dict[object, list[int]] = {}
    for i, e in enumerate(layout.entries):
        groups.setdefault(group_of(e), []).append(i)
    out: dict[object, Stats] = {}
    for g, members in groups.items():
        pooled: Stats = {}
        for key in layout.camera_keys:
            parts = [per_entry[i][key] for i in members if key in per_entry[i]]
            if parts:
                pooled[key] = aggregate_stats([{"x": p} for p in parts])["x"]
        for key, dim, dim_of in ((STATE, layout.state_dim, lambda e: e.state_dim),
                                 (ACTION, layout.action_dim, lambda e: e.action_dim)):
            parts = [(per_entry[i][key], dim_of(layout.entries[i])) for i in members if key in per_entry[i]]
            if parts and dim:
                pooled[key] = _pool_vector(parts, dim)
        out[g] = pooled
    return out

