"""Statistics in LeRobot's layout (the contents of stats.json and the `stats/...` columns): per episode
(`array_stats`, what the writer stores), exact statistics of a whole column (`column_stats`, with its quantile
sketch: `format.quantiles`) and their aggregation (`aggregate_stats`)."""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .quantiles import sketch_of_sorted, sorted_quantiles

QUANTILES = {"q01": 0.01, "q10": 0.10, "q50": 0.50, "q90": 0.90, "q99": 0.99}
STAT_NAMES = ("min", "max", "mean", "std", "count", *QUANTILES)

Stats = dict[str, dict[str, np.ndarray]]


def image_stats_sample(frames: np.ndarray) -> np.ndarray:
    """The frames (T, H, W, C) of an episode that its camera statistics are computed from, by LeRobot's rule
    (`lerobot.datasets.compute_stats`: `sample_indices`, `auto_downsample_height_width`): 100 frames evenly spread
    (all of a shorter episode; T**0.75 of a longer one, at most 10,000), each subsampled by a stride of
    max(H, W) // 150 when max(H, W) >= 300 (480x640: every 4th row and column, 120x160). A 480x640 camera's
    statistics then take ~0.3 s per 150-frame episode instead of ~12 s over every pixel of 100 frames."""
    n = len(frames)
    count = max(min(100, n), min(int(n**0.75), 10_000))
    picked = frames[np.round(np.linspace(0, n - 1, count)).astype(int)] if n else frames
    height, width = frames.shape[1], frames.shape[2]
    if max(height, width) < 300:
        return picked
    step = int(width / 150) if width > height else int(height / 150)
    return picked[:, ::step, ::step]


def array_stats(values: np.ndarray, image: bool = False, scale: float = 255.0) -> dict[str, np.ndarray]:
    """Stats of one feature over one episode.

    Vectors (T, N) give per-dimension arrays; images (T, H, W, C) give per-channel (C, 1, 1) arrays of the values
    divided by `scale`: uint8 frames in [0, 1], as LeRobot stores them; a depth camera's distances with scale 1,
    in their recorded unit (LeRobot 0.6).
    """
    if image:
        x = np.asarray(values, dtype=np.float64).reshape(-1, values.shape[-1]) / scale  # (T*H*W, C)
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


@dataclass(frozen=True, eq=False)
class KeyStats:
    """One key's exact statistics over some rows (`column_stats`): `stats` in LeRobot's layout with the feature's
    dimensions flattened (``min``, ``max``, ``mean``, ``std``, the `QUANTILES`: shape (D,); ``count``: [N]) and
    `sketch`, the dimensions' quantile sketch (D, m) (`format.quantiles`), what pooling with other rows needs."""

    stats: dict[str, np.ndarray]
    sketch: np.ndarray

    @property
    def count(self) -> int:
        return int(np.asarray(self.stats["count"]).reshape(-1)[0])

    def select(self, indices: Sequence[int] | None) -> KeyStats:
        """The statistics of the dimensions `indices` (in that order; None: all)."""
        if indices is None:
            return self
        idx = np.asarray(indices, dtype=np.int64)
        return KeyStats(
            {n: (v if n == "count" else np.asarray(v)[idx]) for n, v in self.stats.items()}, self.sketch[idx]
        )

    def shaped(self, shape: Sequence[int]) -> dict[str, np.ndarray]:
        """`stats` with each statistic in the feature's `shape` (as stats.json has them)."""
        return {
            n: (np.asarray(v) if n == "count" else np.asarray(v).reshape(tuple(shape))) for n, v in self.stats.items()
        }

    def to_json(self) -> dict[str, Any]:
        """JSON-serialisable: statistics as lists, the sketch as little-endian float64 bytes in base64."""
        sketch = np.ascontiguousarray(self.sketch, dtype="<f8")
        return {
            "stats": {n: np.asarray(v).tolist() for n, v in self.stats.items()},
            "sketch": {"shape": list(sketch.shape), "float64": base64.b64encode(sketch.tobytes()).decode()},
        }

    @classmethod
    def from_json(cls, raw: Any) -> KeyStats:
        """Back from `to_json`'s form, checked: ValueError when anything is missing or does not fit."""
        if (
            not isinstance(raw, Mapping)
            or not isinstance(raw.get("stats"), Mapping)
            or not isinstance(raw.get("sketch"), Mapping)
        ):
            raise ValueError("expected an object with 'stats' and 'sketch'")
        names = ("min", "max", "mean", "std", "count", *QUANTILES)
        missing = [n for n in names if n not in raw["stats"]]
        if missing:
            raise ValueError(f"missing statistics {missing}")
        stats = {n: np.asarray(raw["stats"][n], dtype=np.int64 if n == "count" else np.float64) for n in names}
        dims = stats["mean"].shape
        if (
            len(dims) != 1
            or any(stats[n].shape != dims for n in names if n != "count")
            or stats["count"].shape != (1,)
            or stats["count"][0] < 1
        ):
            raise ValueError("statistics of inconsistent shapes")
        shape = raw["sketch"].get("shape")
        data = base64.b64decode(str(raw["sketch"].get("float64", "")), validate=True)
        if not (
            isinstance(shape, list)
            and len(shape) == 2
            and shape[0] == dims[0]
            and isinstance(shape[1], int)
            and 1 <= shape[1]
            and len(data) == 8 * shape[0] * shape[1]
        ):
            raise ValueError(f"a sketch of shape {shape!r} and {len(data)} bytes does not fit {dims[0]} dimensions")
        return cls(stats, np.frombuffer(data, dtype="<f8").reshape(shape).astype(np.float64))


def column_stats(values: np.ndarray, block_bytes: int = 32 << 20, threads: int = 1) -> KeyStats:
    """Exact statistics of each dimension of `values` ((N, ...) numeric, N >= 1; the dimensions after the first
    flattened to D): ``min``, ``max``, ``mean``, ``std`` (population, float64 accumulation), the `QUANTILES`
    (``np.quantile``'s default method, `quantiles.sorted_quantiles`), each of shape (D,), and ``count`` [N];
    with the dimensions' quantile sketch (`quantiles.sketch_of_sorted`). The dimensions are taken in blocks of
    about `block_bytes` of float64 (so a long column never needs a float64 copy of all of it), `threads` blocks
    at a time (numpy's sorts and reductions release the GIL)."""
    x = np.asarray(values)
    n = len(x)
    if n == 0:
        raise ValueError("column_stats: no values")
    x = x.reshape(n, -1)
    d = x.shape[1]
    out = {name: np.empty(d) for name in ("min", "max", "mean", "std", *QUANTILES)}
    step = max(1, min(int(block_bytes) // (8 * n), -(-d // max(1, int(threads)))))
    blocks = [(lo, min(d, lo + step)) for lo in range(0, d, step)]

    def one(span: tuple[int, int]) -> np.ndarray:
        lo, hi = span
        block = np.ascontiguousarray(x[:, lo:hi].astype(np.float64).T)  # (b, n): one dimension per row
        out["mean"][lo:hi] = block.mean(axis=1)
        out["std"][lo:hi] = block.std(axis=1)
        block.sort(axis=1)
        out["min"][lo:hi], out["max"][lo:hi] = block[:, 0], block[:, -1]
        for name, q in zip(QUANTILES, sorted_quantiles(block, list(QUANTILES.values()))):
            out[name][lo:hi] = q
        return sketch_of_sorted(block)

    if threads > 1 and len(blocks) > 1:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=min(int(threads), len(blocks))) as pool:
            sketches = list(pool.map(one, blocks))
    else:
        sketches = [one(b) for b in blocks]
    out["count"] = np.array([n], dtype=np.int64)
    return KeyStats(out, np.concatenate(sketches, axis=0) if sketches else np.zeros((0, 1)))


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
        means = np.stack([np.asarray(p["mean"], dtype=np.float64) for p in parts])
        mean = (means * _per_part(w, means)).sum(axis=0)
        var_parts = np.stack([np.asarray(p["std"], dtype=np.float64) ** 2 for p in parts])
        var = ((var_parts + (means - mean) ** 2) * _per_part(w, means)).sum(axis=0)
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
                agg[q] = (qv * _per_part(w, qv)).sum(axis=0)
        out[key] = agg
    return out


def _per_part(w: np.ndarray, a: np.ndarray) -> np.ndarray:
    """The weights `w` (one per part) shaped to broadcast over `a` (the parts stacked on its first axis)."""
    return w.reshape((-1,) + (1,) * (np.asarray(a).ndim - 1))


def stats_to_json(stats: Stats) -> dict:
    return {k: {s: np.asarray(v).tolist() for s, v in d.items()} for k, d in stats.items()}


def stats_from_json(raw: Mapping) -> Stats:
    return {k: {s: np.asarray(v) for s, v in d.items()} for k, d in raw.items() if isinstance(d, Mapping)}
