"""Which entry of a weighted mixture owns each position of an endless sequence: an exact quota, random access.

Weights become integer *units* (`quantize`: largest remainder to a total of ``2**32``, every positive weight at
least one unit), so entry ``e``'s target share is ``units[e] / total``. A Huffman tree is built over the
units (the two lightest subtrees merged first, ties by entry index). Every internal node splits the
positions that reach it between its two children by rounding with a phase ``h``: of a node's first ``m``
positions, ``floor((m * a + h) / b)`` go to the first child (``a`` of the node's ``b`` units), the rest to the
second. Position ``m`` of a node goes to the first child iff that count grows from ``m`` to ``m + 1``, and its
index inside the child is the child's count before it, so a lookup walks from the root to a leaf carrying
one integer: O(depth) integer steps, vectorised over positions, no per-position state.

Phases: ``h = b // 2`` (plain rounding) without a seed; with a seed, a keyed value in
``[b // 4, b // 4 + b // 2]`` per node, so seeds give different interleavings of the entries.

Quota bound: for every entry ``e`` and every prefix length ``m`` of the sequence,
``|count_e(m) - m * units[e] / total| < QUOTA_BOUND = 3`` (< 2 without a seed). Each split is off by less
than 3/4 (1/2 without a seed) from its exact share, an error that the splits below scale by
``units[e] / units[node]``; in a Huffman tree every node weighs at least twice its grandchildren, so those
factors sum to less than 4 along any path (1 + 1 for the leaf and its parent, then halving every two
levels). Entries far below one sample per batch are therefore spread evenly (``1 / share`` positions apart,
to within the bound) instead of bunched or dropped. Lookup depth: at most ``2 * log2(total / min units) + 1``;
weighted by how often positions land on each entry, the mean depth is below
``entropy(shares) + 1 <= log2(entries) + 1`` (Huffman's bound). numpy only.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from episodic.order.permutation import GOLDEN, MASK64, MIX1, MIX2

__all__ = ["QUOTA_BOUND", "TOTAL_UNITS", "QuotaTree", "muldiv", "quantize"]

TOTAL_UNITS = 1 << 32  # weights are rounded to multiples of 2**-32
QUOTA_BOUND = 3  # |count_e(m) - m * share_e| < QUOTA_BOUND for every prefix m and entry e (2 without a seed)


def quantize(weights: Sequence[float], total: int = TOTAL_UNITS) -> np.ndarray:
    """Non-negative finite `weights` (at least one positive) as int64 units summing to `total`: largest
    remainder (ties to the lower index), every positive weight at least one unit, zero weights zero units."""
    w = np.asarray(list(weights), dtype=np.float64).reshape(-1)
    if w.size == 0:
        raise ValueError("a mixture needs at least one entry")
    bad = np.flatnonzero(~np.isfinite(w) | (w < 0))
    if bad.size:
        raise ValueError(f"weights must be finite and >= 0, got {w[bad].tolist()} at entries {bad.tolist()}")
    positive = w > 0
    if not positive.any():
        raise ValueError("at least one weight must be > 0")
    if int(positive.sum()) > total:
        raise ValueError(f"{int(positive.sum())} positive weights do not fit in {total} units")
    exact = w / w.sum() * total
    units = np.floor(exact).astype(np.int64)
    lift = positive & (units == 0)
    units[lift] = 1  # a positive weight is never dropped
    left = int(total - units.sum())
    rem = np.where(lift, -np.inf, exact - np.floor(exact))
    if left > 0:  # give the remaining units to the largest remainders
        order = np.lexsort((np.arange(w.size), -rem))
        units[order[:left]] += 1
    elif left < 0:  # the lifted entries took too much: take it back from the largest entries
        for i in np.lexsort((np.arange(w.size), -units)):
            if left == 0:
                break
            take = min(int(units[i]) - 1, -left)
            units[i] -= take
            left += take
    return units


def muldiv(m: np.ndarray, a: np.ndarray, b: np.ndarray, h: np.ndarray) -> np.ndarray:
    """Exact ``floor((m * a + h) / b)`` for int64 arrays with ``0 <= m < 2**52``, ``0 <= a <= b < 2**60`` and
    ``0 <= h < b`` (``m * a`` may exceed int64): a float estimate, corrected by the residual, which is small
    and so exact in wrapping int64 arithmetic."""
    m = np.asarray(m, dtype=np.int64)
    a = np.asarray(a, dtype=np.int64)
    b = np.asarray(b, dtype=np.int64)
    h = np.asarray(h, dtype=np.int64)
    bf = b.astype(np.float64)
    q = np.floor(m.astype(np.float64) * (a.astype(np.float64) / bf) + h.astype(np.float64) / bf).astype(np.int64)
    with np.errstate(over="ignore"):
        r = m * a + h - q * b  # the true residual is within a few b of 0: exact modulo 2**64
    return q + np.floor_divide(r, b)


def _phase(seed: int | None, node: int, b: int) -> int:
    """The rounding phase of internal node `node` (weight `b`): b // 2 without a seed, else keyed in
    [b // 4, b // 4 + b // 2]."""
    if seed is None:
        return b // 2
    x = (int(seed) * GOLDEN + (node + 1) * MIX1) & MASK64
    x = ((x ^ (x >> 31)) * MIX2) & MASK64
    x ^= x >> 29
    return b // 4 + x % (b // 2 + 1)


@dataclass(frozen=True)
class QuotaTree:
    """The split tree of `units` (one int per entry). Node ids ``0..E-1`` are the entries (leaves), internal
    nodes follow; ``first[i]``/``second[i]`` are internal node ``E + i``'s children, ``split[i]`` the units of
    ``first[i]``, ``weight[i]`` the node's units and ``phase[i]`` its rounding phase. Entries with zero units
    are not in the tree. `seed` None: plain rounding."""

    units: np.ndarray
    first: np.ndarray
    second: np.ndarray
    split: np.ndarray
    weight: np.ndarray
    phase: np.ndarray
    root: int

    @classmethod
    def build(cls, units: Iterable[int], seed: int | None = None) -> QuotaTree:
        u = np.asarray(list(units), dtype=np.int64).reshape(-1)
        if u.size == 0 or (u < 0).any() or not (u > 0).any():
            raise ValueError(f"units must be >= 0 with at least one > 0, got {u.tolist()[:10]}")
        n = u.size
        heap = [(int(x), i) for i, x in enumerate(u.tolist()) if x > 0]
        heapq.heapify(heap)
        first: list[int] = []
        second: list[int] = []
        split: list[int] = []
        weight: list[int] = []
        phase: list[int] = []
        while len(heap) > 1:
            wa, a = heapq.heappop(heap)
            wb, b = heapq.heappop(heap)
            node = n + len(first)
            first.append(a)
            second.append(b)
            split.append(wa)
            weight.append(wa + wb)
            phase.append(_phase(seed, node - n, wa + wb))
            heapq.heappush(heap, (wa + wb, node))
        as_array = lambda x: np.asarray(x, dtype=np.int64)  # noqa: E731
        return cls(
            units=u,
            first=as_array(first),
            second=as_array(second),
            split=as_array(split),
            weight=as_array(weight),
            phase=as_array(phase),
            root=heap[0][1],
        )

    @cached_property
    def _ratios(self) -> tuple[np.ndarray, np.ndarray]:
        """Of each internal node, split / weight and phase / weight as floats (`locate`'s estimate)."""
        w = self.weight.astype(np.float64)
        return self.split.astype(np.float64) / w, self.phase.astype(np.float64) / w

    @property
    def total(self) -> int:
        return int(self.units.sum())

    @property
    def num_entries(self) -> int:
        return int(self.units.size)

    def depths(self) -> np.ndarray:
        """Depth of every entry's leaf (-1 for entries with zero units)."""
        n = self.num_entries
        out = np.full(n, -1, dtype=np.int64)
        stack = [(self.root, 0)]
        while stack:
            node, d = stack.pop()
            if node < n:
                out[node] = d
            else:
                stack += [(int(self.first[node - n]), d + 1), (int(self.second[node - n]), d + 1)]
        return out

    def locate(self, positions) -> tuple[np.ndarray, np.ndarray]:
        """(entry, index among that entry's positions) for each position (int64 array, ``0 <= p < 2**52``)."""
        m = np.asarray(positions, dtype=np.int64).reshape(-1)
        if m.size and m.min() < 0:
            raise ValueError(f"positions must be >= 0, got {int(m.min())}")
        n = self.num_entries
        node = np.full(m.size, self.root, dtype=np.int64)
        local = m.copy()
        lanes = np.flatnonzero(node >= n)
        ratio, offset = self._ratios
        with np.errstate(over="ignore"):  # r below wraps in int64: exact modulo 2**64, and small
            while lanes.size:
                k = node[lanes] - n
                lo = local[lanes]
                a, b = self.split[k], self.weight[k]
                # before = muldiv(lo, a, b, h), inlined: a float estimate corrected by the exact residual r, which
                # also tells whether the next position goes first: muldiv(lo + 1, ...) > before iff rem + a >= b
                q = np.floor(lo * ratio[k] + offset[k]).astype(np.int64)
                r = lo * a + self.phase[k] - q * b
                d, rem = np.divmod(r, b)
                before = q + d
                go_first = rem + a >= b
                local[lanes] = np.where(go_first, before, lo - before)
                node[lanes] = np.where(go_first, self.first[k], self.second[k])
                lanes = lanes[node[lanes] >= n]
        shape = np.shape(positions)
        return node.reshape(shape), local.reshape(shape)

    def counts(self, m: int) -> np.ndarray:
        """How many of the first `m` positions each entry owns (int64, one per entry): O(entries)."""
        n = self.num_entries
        out = np.zeros(n, dtype=np.int64)
        stack = [(self.root, int(m))]
        while stack:
            node, c = stack.pop()
            if node < n:
                out[node] = c
                continue
            k = node - n
            c1 = int(muldiv(np.array([c]), self.split[k : k + 1], self.weight[k : k + 1], self.phase[k : k + 1])[0])
            stack += [(int(self.first[k]), c1), (int(self.second[k]), c - c1)]
        return out
