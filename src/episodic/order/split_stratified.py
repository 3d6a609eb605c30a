"""episodic's eval split of one dataset's (or one mixture entry's) episodes: stratified by task, keyed by a seed.

The episodes are grouped into strata by their task (the caller gives each episode's stratum: its first task).
With ``N`` episodes and fraction ``f``:

- the entry holds out ``T = round(N * f)`` episodes (halves up), but at least 1 and at most ``N - 1`` when
  ``N >= 2`` (every entry of two episodes or more is on both sides), and none when ``N == 1``;
- ``T`` is spread over the strata in proportion to their sizes (largest remainders): stratum ``s`` of ``n_s``
  episodes holds out ``floor(n_s * T / N)`` or one more, the extra ones going to the strata with the largest
  remainders ``(n_s * T) mod N``, ties broken by each stratum's key (below), then its text;
- within a stratum, the episodes held out are the first of a keyed permutation (`order.permutation.permute`)
  of the stratum's episodes in ascending order, keyed by ``entry_key(seed, "eval:" + task)``.

So the split is a pure function of (seed, fraction, the episodes and their tasks): the same whatever order the
episodes are listed in, whatever rank, worker or process computes it, and the same for one dataset alone and
as a mixture entry with the same episodes. Integer arithmetic only (no float rounding decides a count). numpy
only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from episodic.order.mixture_sampler import entry_key
from episodic.order.permutation import permute

__all__ = ["held_out_count", "stratified_split"]


def held_out_count(total: int, fraction: float) -> int:
    """How many of `total` episodes the stratified rule holds out at `fraction` (see the module docstring)."""
    if total < 2:
        return 0
    t = math.floor(total * fraction + 0.5)
    return min(max(t, 1), total - 1)


def stratified_split(
    episodes: np.ndarray, strata: Sequence[str], fraction: float, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """(kept, held out) episodes, each ascending: `episodes` with `strata[i]` the stratum (task) of
    `episodes[i]`, split at `fraction` by the rule of the module docstring."""
    episodes = np.asarray(episodes, dtype=np.int64).reshape(-1)
    if len(strata) != episodes.size:
        raise ValueError(f"one stratum per episode: {episodes.size} episodes, {len(strata)} strata")
    total = int(episodes.size)
    target = held_out_count(total, fraction)
    if target == 0:
        return np.sort(episodes), np.zeros(0, np.int64)
    groups: dict[str, list[int]] = {}
    for e, s in zip(episodes.tolist(), strata):
        groups.setdefault(str(s), []).append(e)
    names = sorted(groups)
    sizes = np.asarray([len(groups[s]) for s in names], dtype=np.int64)
    keys = [entry_key(seed, "eval:" + s) for s in names]
    counts = sizes * target // total
    extra = target - int(counts.sum())
    if extra:
        remainder = (sizes * target) % total
        by = sorted(range(len(names)), key=lambda i: (-int(remainder[i]), keys[i], names[i]))
        for i in by[:extra]:
            counts[i] += 1
    held = []
    for name, key, k in zip(names, keys, counts.tolist()):
        if k:
            members = np.sort(np.asarray(groups[name], dtype=np.int64))
            n = members.size
            held.append(members[permute(np.arange(k, dtype=np.int64), n, key, 0)])
    out = np.sort(np.concatenate(held)) if held else np.zeros(0, np.int64)
    return np.sort(episodes[~np.isin(episodes, out)]), out
