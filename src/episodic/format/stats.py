"""Per-episode statistics and their aggregation (the contents of stats.json and the `stats/...` columns)."""

from __future__ import annotations

from typing import Iterable, Mapping

import numpy as np

QUANTILES = {"q01": 0.01, "q10": 0.10, "q50": 0.50, "q90": 0.90, "q99": 0.99}
STAT_NAMES = ("min", "max", "mean", "std", "count", *QUANTILES)

Stats = dict[str, dict[str, np.ndarray]]


def array_stats(values: np.ndarray, image: bool = False) -> dict[str, np.ndarray]:
    """Stats of one feature over one episode.

    Vectors (T, N) give per-dimension arrays; images (T, H, W, C) uint8 give per-channel (C, 1, 1) arrays in
    [0, 1], as LeRobot stores them.
    """
    if image:
        x = np.asarray(values, dtype=np.float64).reshape(-1, values.shape[-1]) / 255.0  # (T*H*W, C)
        reshape = lambda a: np.asarray(a, dtype=np.float64).reshape(-1, 1, 1)  # noqa: E731
    else:
        x = np.asarray(values, dtype=np.float64).reshape(len(values), -1)
        reshape = lambda a: np.asarray(a, dtype=np.float64)  # noqa: E731
    out = {
        "min": reshape(x.min(axis=0)),
        "max": reshape(x.max(axis=0)),
        "mean": reshape(x.mean(axis=0)),
        "std": reshape(x.std(axis=0)),
        "count": np.array([len(values)], dtype=np.int64),
    }
    qs = np.quantile(x, list(QUANTILES.values()), axis=0)
    for name, q in zip(QUANTILES, qs):
        out[name] = reshape(q)
    return out


def aggregate_stats(per_episode: Iterable[Mapping[str, Mapping[str, np.ndarray]]]) -> Stats:
    """Combine per-episode stats: exact min/max/mean/std (parallel variance), count-weighted quantiles."""
    items = list(per_episode)
    keys: list[str] = []
    for s in items:
        keys.extend(k for k in s if k not in keys)
    out: Stats = {}
    for key in keys:
        parts = [s[key] for s in items if key in s]
        counts = np.array([float(np.asarray(p["count"]).reshape(-1)[0]) for p in parts])
        total = counts.sum()
        w = counts / total if total > 0 else np.full(len(parts), 1.0 / max(len(parts), 1))
        shape_w = lambda a: w.reshape((-1,) + (1,) * (np.asarray(a).ndim - 1))  # noqa: E731
        means = np.stack([np.asarray(p["mean"], dtype=np.float64) for p in parts])
        mean = (means * shape_w(means)).sum(axis=0)
        var_parts = np.stack([np.asarray(p["std"], dtype=np.float64) ** 2 for p in parts])
        var = ((var_parts + (means - mean) ** 2) * shape_w(means)).sum(axis=0)
        agg = {
            "min": np.min(np.stack([np.asarray(p["min"]) for p in parts]), axis=0),
            "max": np.max(np.stack([np.asarray(p["max"]) for p in parts]), axis=0),
            "mean": mean,
            "std": np.sqrt(np.maximum(var, 0.0)),
            "count": np.array([int(total)], dtype=np.int64),
        }
        for q in QUANTILES:
            if all(q in p for p in parts):
                qv = np.stack([np.asarray(p[q], dtype=np.float64) for p in parts])
                agg[q] = (qv * shape_w(qv)).sum(axis=0)
        out[key] = agg
    return out


def stats_to_json(stats: Stats) -> dict:
    return {k: {s: np.asarray(v).tolist() for s, v in d.items()} for k, d in stats.items()}


def stats_from_json(raw: Mapping) -> Stats:
    return {k: {s: np.asarray(v) for s, v in d.items()} for k, d in raw.items() if isinstance(d, Mapping)}
