"""Target vs realised shares of a mixture's entries and groups: from counts of items (a dataset's stats), or
from the first samples of the order itself (`order_counts`, what ``episodic mixture shares`` plots). numpy only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

__all__ = ["order_counts", "share_table"]


def share_table(
    names: Sequence[str],
    groups: Sequence[object],
    target: ArrayLike,
    counts,
    sizes: Sequence[tuple[int, int]] | None = None,
) -> dict:
    """Per entry and per group: target share, items counted, realised share (items / all items; 0 before any),
    and the largest absolute difference between the two over entries and over groups; with `sizes` ((episodes,
    frames) per entry: what the mixture, or its side of an eval split, holds), those too, summed per group.

    ``{"items": N, "entries": [{"name", "group", "target", "items", "realised"[, "episodes", "frames"]}],
    "groups": [{"group", "entries", "target", "items", "realised"[, "episodes", "frames"]}], "max_abs_error": ...,
    "max_abs_error_groups": ...}``"""
    counts = np.asarray(counts, dtype=np.int64).reshape(-1)
    want = np.asarray(target, dtype=np.float64).reshape(-1)
    if not len(names) == len(groups) == want.size == counts.size:
        raise ValueError(
            f"one name, group, target and count per entry: got {len(names)}, {len(groups)}, {want.size}, {counts.size}"
        )
    total = int(counts.sum())
    realised = counts / total if total else np.zeros(counts.size)
    entries: list[dict[str, Any]] = [
        {"name": str(n), "group": g, "target": float(t), "items": int(c), "realised": float(r)}
        for n, g, t, c, r in zip(names, groups, want, counts, realised)
    ]
    by: dict[object, list[int]] = {}
    for i, g in enumerate(groups):
        by.setdefault(g, []).append(i)
    rows: list[dict[str, Any]] = [
        {
            "group": g,
            "entries": len(ix),
            "target": float(want[ix].sum()),
            "items": int(counts[ix].sum()),
            "realised": float(realised[ix].sum()),
        }
        for g, ix in by.items()
    ]
    if sizes is not None:
        if len(sizes) != counts.size:
            raise ValueError(f"one (episodes, frames) per entry: got {len(sizes)} for {counts.size} entries")
        for row, (e, f) in zip(entries, sizes):
            row["episodes"], row["frames"] = int(e), int(f)
        for row, ix in zip(rows, by.values()):
            row["episodes"], row["frames"] = sum(int(sizes[i][0]) for i in ix), sum(int(sizes[i][1]) for i in ix)
    err = float(np.abs(realised - want).max()) if total and want.size else 0.0
    gerr = max((abs(r["realised"] - r["target"]) for r in rows), default=0.0) if total else 0.0
    return {"items": total, "entries": entries, "groups": rows, "max_abs_error": err, "max_abs_error_groups": gerr}


def order_counts(sampler, samples: int, epoch: int = 0, chunk: int = 1 << 16) -> np.ndarray:
    """Items per entry among the first `samples` positions of `sampler`'s order (an `order.MixtureSampler`),
    epoch after epoch from `epoch` (positions looked up `chunk` at a time; nothing is read or decoded)."""
    counts = np.zeros(len(sampler.entries), dtype=np.int64)
    n = len(sampler)
    done = 0
    while done < samples:
        e, start = epoch + done // n, done % n
        stop = min(n, start + samples - done, start + chunk)
        entry, _ = sampler.draws_at(np.arange(start, stop, dtype=np.int64), e)
        counts += np.bincount(entry, minlength=counts.size)
        done += stop - start
    return counts
