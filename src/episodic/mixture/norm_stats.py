"""Normalisation statistics of a mixture, under its shared item keys: per entry, and pooled over entries that
share a grouping key (e.g. the robot type). numpy only (no torch).

Where an entry's statistics come from (`entry_stats`, ``source``):

- ``"auto"`` (default): an entry's ``meta/stats.json`` when it describes the entry's rows, i.e. the entry
  selects every episode (no ``episodes`` subset, no ``exclude_episodes``) and stats.json has the key with mean,
  std, min, max and the quantiles q01..q99; else computed from the entry's selected rows
  (`tabular.column_stats.compute_stats`: exact, in parallel, cached by content, so only the first use reads data).
- ``"stats.json"``: stats.json alone, whatever episodes the entry selects (no data file read; a key it lacks is
  left out).
- ``"data"``: computed from the data for every entry (what ``episodic stats SPEC`` does).

Cameras always take stats.json's per-channel statistics (3, 1, 1) under ``observation.images.<role>`` (the
whole dataset's: image statistics are not computed from the data).

Per entry: each role's statistics under its shared key (`layout`); the state's (and action's) per-dimension
statistics, with the entry's ``state_indices`` applied (per-dimension statistics: selecting indices of the
dataset's statistics is exact), then padded to the mixture's dimension D like the values are. A padded dimension
(always 0 in the items) gets mean 0, std 1, min -1, max 1 and quantiles -1 (q01, q10), 0 (q50), 1 (q90, q99),
so every usual normalisation (mean/std, min/max to [-1, 1], quantiles) leaves it at 0. A role whose key has no
statistics is left out. The result (`EntryStats`, a `Stats` dict) also says where each key's statistics came
from (``origin``) and keeps, for keys computed from data, their quantile sketches (``sketches``).

Pooled (`pooled_stats`), per group and key, over the entries of the group that have statistics for the key,
dimension by dimension over the entries in which that dimension is real (padding never enters a pool), by
`format.stats.aggregate_stats`: count-weighted mean; variance by the parallel-variance formula
(``sum_e n_e (std_e**2 + (mean_e - mean)**2) / sum_e n_e``, Chan et al.); min of the mins, max of the maxes.
Quantiles: when every entry pooled for a dimension has a sketch (statistics computed from data), the quantiles of
the pooled data from the merged sketches (`format.quantiles.pooled_quantiles`: equal to numpy's on the
concatenated data when each entry has at most 513 frames, else within 1/512 of the rank); otherwise the
count-weighted mean of the entries' quantiles (an approximation). Dimensions real in no entry of the group get
the padding values.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..format.depth import rescale_stats
from ..format.quantiles import pooled_quantiles
from ..format.stats import QUANTILES, Stats, aggregate_stats
from .layout import ACTION, STATE, EntryLayout, MixtureLayout, camera_key

if TYPE_CHECKING:
    from ..tabular.column_stats import StatsJob

__all__ = ["PAD_STATS", "STATS_SOURCES", "EntryStats", "entry_stats", "pooled_stats", "stats_json_describes"]

# what a padded dimension gets: every normalisation mode maps its 0 to 0
PAD_STATS = {
    "mean": 0.0,
    "std": 1.0,
    "min": -1.0,
    "max": 1.0,
    "q01": -1.0,
    "q10": -1.0,
    "q50": 0.0,
    "q90": 1.0,
    "q99": 1.0,
}
STATS_SOURCES = ("auto", "stats.json", "data")
_NEEDED = ("mean", "std", "min", "max", *QUANTILES)


class EntryStats(dict):
    """One entry's statistics under the shared keys (a `Stats` dict: key -> statistic -> array), plus `origin`
    (key -> ``"stats.json"`` or ``"data"``), and for keys computed from the data `sketches` (key -> (count,
    quantile sketch of the entry's real dimensions, (d, m))), `cached` (the keys read from the statistics cache)
    and `seconds` (the computation's time; 0 when all came from the cache)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.origin: dict[str, str] = {}
        self.sketches: dict[str, tuple[int, np.ndarray]] = {}
        self.cached: tuple[str, ...] = ()
        self.seconds = 0.0


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


def _selected(entry, total: int) -> np.ndarray:
    from .checking.entry_checks import selected_episodes

    return selected_episodes(entry, total)


def stats_json_describes(meta, spec_entry, key: str) -> bool:
    """Whether `meta`'s stats.json describes `key` over the rows `spec_entry` (a `MixtureEntry`) selects: every
    episode selected, and the key's mean, std, min, max and quantiles q01..q99 present."""
    if key not in meta.stats or any(n not in meta.stats[key] for n in _NEEDED):
        return False
    return len(_selected(spec_entry, len(meta.episodes))) == len(meta.episodes)


def _vector_roles(layout: MixtureLayout, e: EntryLayout):
    return [
        (shared, key, indices, dim)
        for shared, key, indices, dim in (
            (STATE, e.state_key, e.state_indices, layout.state_dim),
            (ACTION, e.action_key, e.action_indices, layout.action_dim),
        )
        if key is not None and dim
    ]


def entry_stats(
    layout: MixtureLayout,
    report,
    *,
    source: str = "auto",
    workers: int | None = None,
    progress: bool = False,
    cache=True,
) -> list[EntryStats]:
    """Each entry's statistics under the shared keys (one per `layout.entries`, same order), from `report` (the
    `PreflightReport` the layout was built from; a sequence of `DatasetMetadata` (spec entry i's at i) is taken
    as ``source="stats.json"``: without the spec the selection is unknown). `source`, and the rules: see the
    module docstring; `workers`, `progress`, `cache`: `tabular.column_stats.compute_stats`'s."""
    if source not in STATS_SOURCES:
        raise ValueError(f"source must be one of {STATS_SOURCES}, got {source!r}")
    if hasattr(report, "metadata") and hasattr(report, "spec"):
        metadata, spec_entries, sources = report.metadata, report.spec.entries, report.sources
    else:
        metadata, spec_entries, sources, source = report, None, (), "stats.json"
    jobs: list[StatsJob] = []
    job_of: dict[int, int] = {}
    if source != "stats.json":
        from ..tabular.column_stats import StatsJob

        for e in layout.entries:
            meta, spec_entry = metadata[e.index], spec_entries[e.index]
            keys = tuple(
                dict.fromkeys(
                    key
                    for _, key, _, _ in _vector_roles(layout, e)
                    if source == "data" or not stats_json_describes(meta, spec_entry, key)
                )
            )
            if keys:
                job_of[e.index] = len(jobs)
                jobs.append(StatsJob(sources[e.index], meta, keys, _selected(spec_entry, len(meta.episodes)), e.name))
    computed = []
    if jobs:
        from ..tabular.column_stats import compute_stats

        computed = compute_stats(jobs, workers=workers, progress=progress, cache=cache)
    out = []
    for e in layout.entries:
        meta = metadata[e.index]
        stats, total = meta.stats, int(meta.total_frames)
        mine = EntryStats()
        for role, key in e.cameras.items():
            if key in stats:
                mine[camera_key(role)] = {n: np.asarray(v, dtype=np.float64) for n, v in stats[key].items()}
                mine[camera_key(role)].setdefault("count", np.asarray([total], dtype=np.int64))
                mine.origin[camera_key(role)] = "stats.json"
                if role in layout.depth_roles:  # recorded in the camera's depth_unit: in the items' unit
                    rescale_stats(mine, camera_key(role), meta.info.features[key].depth_coding.unit, layout.depth_unit)
        result = computed[job_of[e.index]] if e.index in job_of else None
        for shared, key, indices, dim in _vector_roles(layout, e):
            if result is not None and key in result.keys:
                ks = result.keys[key].select(indices)
                mine[shared] = _vector(ks.stats, None, dim, ks.count)
                mine.origin[shared] = "data"
                mine.sketches[shared] = (ks.count, ks.sketch)
                if key in result.cached:
                    mine.cached += (shared,)
            elif key in stats:
                mine[shared] = _vector(stats[key], indices, dim, total)
                mine.origin[shared] = "stats.json"
        mine.seconds = result.seconds if result is not None else 0.0
        out.append(mine)
    return out


def _pool_vector(parts: list[tuple[dict, int, tuple[int, np.ndarray] | None]], dim: int) -> dict[str, np.ndarray]:
    """Pool per-dimension stats of entries with `d` real dimensions each (and their sketches, or None), band by
    band of dimensions real in the same entries."""
    bands = sorted({d for _, d, _ in parts if d > 0})
    names = set.intersection(*(set(p) for p, _, _ in parts)) - {"count"}
    quantiles = [q for q in QUANTILES if q in names]
    pieces: dict[str, list[np.ndarray]] = {n: [] for n in names}
    lo = 0
    counts = []
    for hi in bands:
        band = [(p, sketch) for p, d, sketch in parts if d >= hi]
        members = [{"x": {n: (p[n][lo:hi] if n != "count" else p[n]) for n in (*names, "count")}} for p, _ in band]
        agg = aggregate_stats(members)["x"]
        sketches = [sketch for _, sketch in band if sketch is not None]
        if quantiles and len(sketches) == len(band):  # every member's sketch: the pooled data's quantiles
            qs = pooled_quantiles([(n, sk[lo:hi]) for n, sk in sketches], [QUANTILES[q] for q in quantiles])
            agg.update(zip(quantiles, qs))
        for n in names:
            pieces[n].append(np.asarray(agg[n], dtype=np.float64).reshape(-1))
        counts.append(int(agg["count"][0]))
        lo = hi
    out = {n: np.concatenate(pieces[n] + [np.full(dim - lo, PAD_STATS.get(n, 0.0))]) for n in names}
    out["count"] = np.asarray([max(counts) if counts else 0], dtype=np.int64)  # the entries with any real dimension
    return out


def pooled_stats(
    layout: MixtureLayout, per_entry: Sequence[Stats], group_of: Callable[[EntryLayout], object] | None = None
) -> dict[object, Stats]:
    """Statistics pooled over the entries of each group (`group_of(entry)`, default the entry's ``group``:
    the spec's ``group`` or the dataset's robot type), by the rule of the module docstring (`per_entry`:
    `entry_stats`'s; the sketches of an `EntryStats` give exact-within-tolerance pooled quantiles)."""
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
        for key, dim, dim_of in (
            (STATE, layout.state_dim, lambda e: e.state_dim),
            (ACTION, layout.action_dim, lambda e: e.action_dim),
        ):
            vectors = [
                (per_entry[i][key], dim_of(layout.entries[i]), getattr(per_entry[i], "sketches", {}).get(key))
                for i in members
                if key in per_entry[i]
            ]
            if vectors and dim:
                pooled[key] = _pool_vector(vectors, dim)
        out[g] = pooled
    return out
