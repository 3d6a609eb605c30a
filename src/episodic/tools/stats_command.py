"""`episodic stats DATASET|SPEC`: normalisation statistics computed from the data, per dataset or per mixture
entry and group, cached by content (`tabular.column_stats`), as a compact table and as JSON in LeRobot's stats layout.

- A dataset (directory or fsspec URL): every numeric feature (or `keys`) over its episodes (or `episodes`);
  the JSON's ``stats`` is what a stats.json of those episodes holds (cameras aside).
- A mixture spec (JSON/YAML file): every entry's state and action over its selected episodes, with its index
  selections, under the mixture's shared keys and padded to its dimension (`mixture.norm_stats.entry_stats` with
  ``source="data"``), cameras from stats.json; and pooled per group (`group_by`: the entry's ``group``, else its
  robot type; ``robot_type``; ``fps``; ``all``: one pool).

Both say how many frames were computed, in how many seconds (frames/s), and which results came from the cache.
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np

from ..format.stats import Stats, stats_to_json

__all__ = ["GROUP_BY", "dataset_stats", "is_spec", "mixture_stats", "stats_table"]

GROUP_BY = ("group", "robot_type", "fps", "all")


def is_spec(target: str) -> bool:
    """A mixture spec is a file (JSON or YAML); a dataset is a directory or a URL."""
    return os.path.isfile(os.path.expanduser(target))


def dataset_stats(
    location: str,
    *,
    keys: list[str] | None = None,
    episodes: Any = None,
    workers: int | None = None,
    progress: bool = False,
    cache: Any = True,
) -> dict:
    """Statistics of one dataset's numeric features (`keys`, default all) over `episodes` (default all)."""
    from ..checks import episode_list
    from ..format.errors import DatasetFormatError
    from ..storage import open_source
    from ..tabular.column_stats import StatsJob, compute_stats, numeric_keys

    source = open_source(location)
    meta = source.load_metadata()
    keys = list(keys) if keys else numeric_keys(meta)
    unknown = [k for k in keys if k not in numeric_keys(meta)]
    if unknown:
        raise DatasetFormatError(f"{meta.root}: no numeric feature {unknown} (numeric: {numeric_keys(meta)})")
    sel = None
    if episodes is not None:
        sel = np.unique(episode_list(episodes))
        bad = sel[(sel < 0) | (sel >= len(meta.episodes))]
        if bad.size:
            raise DatasetFormatError(
                f"{meta.root}: episodes {bad.tolist()[:10]} do not exist (0..{len(meta.episodes) - 1})"
            )
    t0 = time.perf_counter()
    (res,) = compute_stats(
        [StatsJob(source, meta, tuple(keys), sel, str(meta.root))], workers=workers, progress=progress, cache=cache
    )
    seconds = time.perf_counter() - t0
    feats = meta.info.features
    stats = {k: ks.shaped(feats[k].shape) for k, ks in res.keys.items()}
    return {
        "kind": "dataset",
        "dataset": str(meta.root),
        "episodes": res.episodes,
        "frames": res.frames,
        "keys": keys,
        "cached": res.from_cache,
        "seconds": seconds,
        "frames_computed": 0 if res.from_cache else res.frames,
        "stats": stats,
    }


def _group_of(group_by: str, report):
    if group_by not in GROUP_BY:
        raise ValueError(f"group_by must be one of {GROUP_BY}, got {group_by!r}")
    if group_by == "group":
        return None
    if group_by == "all":
        return lambda e: "all"
    if group_by == "fps":
        return lambda e: e.fps
    return lambda e: report.entries[e.index].robot_type


def mixture_stats(
    spec: Any,
    *,
    group_by: str = "group",
    workers: int | None = None,
    progress: bool = False,
    cache: Any = True,
    on_error: str | None = None,
) -> dict:
    """Every entry's statistics (computed from its selected rows, index selections applied, under the shared
    keys) and each group's (pooled), for the mixture `spec` (a file, dict or `MixtureSpec`)."""
    from ..mixture import preflight
    from ..mixture.checking.split_sides import side_report
    from ..mixture.layout import MixtureLayout
    from ..mixture.norm_stats import entry_stats, pooled_stats

    # with an eval split, the training side's (what a mixture dataset normalises both sides with)
    report = side_report(preflight(spec, on_error=on_error, progress=progress), "train")
    group_of = _group_of(group_by, report)
    # the cameras' image size plays no part in statistics: any valid one lets entries of several sizes share a layout
    layout = MixtureLayout.from_report(report, image_size=(1, 1))
    t0 = time.perf_counter()
    per_entry = entry_stats(layout, report, source="data", workers=workers, progress=progress, cache=cache)
    seconds = time.perf_counter() - t0
    pooled = pooled_stats(layout, per_entry, group_of)
    entries = []
    for e, st in zip(layout.entries, per_entry):
        rep = report.entries[e.index]
        vectors = [k for k, o in st.origin.items() if o == "data"]
        entries.append(
            {
                "name": e.name,
                "group": (group_of or (lambda x: x.group))(e),
                "episodes": rep.episodes,
                "frames": rep.frames,
                "state_dim": e.state_dim,
                "action_dim": e.action_dim,
                "cached": bool(vectors) and set(st.cached) == set(vectors),
                "origin": dict(st.origin),
                "stats": dict(st),
            }
        )
    computed = sum(x["frames"] for x in entries if not x["cached"])
    return {
        "kind": "mixture",
        "spec": report.spec.origin,
        "group_by": group_by,
        "seconds": seconds,
        "frames": sum(x["frames"] for x in entries),
        "frames_computed": computed,
        "entries": entries,
        "groups": {str(g): s for g, s in pooled.items()},
        "state_dim": layout.state_dim,
        "action_dim": layout.action_dim,
    }


def to_json(result: dict) -> dict:
    """`result` (`dataset_stats` / `mixture_stats`) with its statistics as lists (LeRobot's stats layout)."""
    out = {k: v for k, v in result.items() if k not in ("stats", "entries", "groups")}
    if "stats" in result:
        out["stats"] = stats_to_json(result["stats"])
    if "entries" in result:
        out["entries"] = [{**e, "stats": stats_to_json(e["stats"])} for e in result["entries"]]
        out["groups"] = {g: stats_to_json(s) for g, s in result["groups"].items()}
    return out


def _short(v: Any, k: int = 4) -> str:
    a = np.asarray(v, dtype=np.float64).reshape(-1)
    text = ", ".join(f"{x:.4g}" for x in a[:k])
    return f"[{text}{', ...' if a.size > k else ''}]" if a.size > 1 else text


def _range(stats: Stats, key: str, dims: int | None = None) -> str:
    """A key's smallest min and largest max over its (real) dimensions."""
    if key not in stats:
        return "-"
    lo, hi = np.asarray(stats[key]["min"]).reshape(-1), np.asarray(stats[key]["max"]).reshape(-1)
    if dims is not None:  # the real dimensions only (a mixture pads to its largest)
        lo, hi = lo[:dims], hi[:dims]
    return f"{lo.min():.4g}..{hi.max():.4g}" if lo.size else "-"


def _grid(heads: tuple[str, ...], rows: list[tuple[str, ...]], right: set[int]) -> list[str]:
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(heads)]

    def line(cells) -> str:
        return "  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    return [line(heads), line(["-" * w for w in widths])] + [line(r) for r in rows]


def stats_table(result: dict) -> str:
    """A compact table of `result`: per key (a dataset), or per entry and per group (a mixture), then the time."""
    lines: list[str] = []
    rows: list[tuple[str, ...]]
    if result["kind"] == "dataset":
        rows = [
            (
                k,
                "x".join(str(n) for n in np.asarray(s["mean"]).shape),
                _short(s["mean"]),
                _short(s["std"]),
                _short(s["min"]),
                _short(s["max"]),
                _short(s["q01"]),
                _short(s["q99"]),
            )
            for k, s in result["stats"].items()
        ]
        lines += _grid(("key", "shape", "mean", "std", "min", "max", "q01", "q99"), rows, set())
        where = "from the cache" if result["cached"] else "computed"
        lines.append(f"{result['episodes']} episodes, {result['frames']:,} frames, {len(rows)} keys: {where}")
    else:
        from ..mixture.layout import ACTION, STATE

        rows = [
            (
                e["name"],
                str(e["group"]),
                str(e["episodes"]),
                f"{e['frames']:,}",
                "cache" if e["cached"] else "computed",
                _range(e["stats"], STATE, e["state_dim"]),
                _range(e["stats"], ACTION, e["action_dim"]),
            )
            for e in result["entries"]
        ]
        lines += _grid(
            ("entry", "group", "episodes", "frames", "from", "state min..max", "action min..max"), rows, {2, 3}
        )
        lines.append("")
        rows = []
        for g, s in result["groups"].items():
            members = [e for e in result["entries"] if str(e["group"]) == g]
            frames = sum(e["frames"] for e in members)
            q01, q99 = (_short(s[STATE][q]) if STATE in s else "-" for q in ("q01", "q99"))
            rows.append(
                (
                    g,
                    str(len(members)),
                    f"{frames:,}",
                    _range(s, STATE, max(e["state_dim"] for e in members)),
                    _range(s, ACTION, max(e["action_dim"] for e in members)),
                    q01,
                    q99,
                )
            )
        lines += _grid(
            ("group", "entries", "frames", "state min..max", "action min..max", "state q01", "state q99"), rows, {1, 2}
        )
        cached = sum(1 for e in result["entries"] if e["cached"])
        lines.append(
            f"{len(result['entries'])} entries ({cached} from the cache), {len(result['groups'])} group(s) "
            f"(by {result['group_by']}), {result['frames']:,} frames"
        )
    rate = result["frames_computed"] / result["seconds"] if result["seconds"] > 0 else 0.0
    lines.append(
        f"{result['frames_computed']:,} frames computed in {result['seconds']:.2f} s"
        + (f" ({rate:,.0f} frames/s)" if result["frames_computed"] else "")
    )
    return "\n".join(lines)
