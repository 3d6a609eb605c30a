"""One consumer's emission order over a pool of whole episodes (shuffle within a bounded window).

The consumer keeps up to ``pool_size`` episodes "open" and emits a uniformly random
remaining frame of the pool each time; the order is generated as it is consumed, in
memory O(pool), and is a pure function of ``(counts, pool_size, rng state)``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["PoolOrder"]


class PoolOrder:
    """One consumer's emission order, generated as it is consumed: memory O(pool), not O(frames).

    List episodes enter a pool of up to `pool_size` in list order; each item is a uniformly random remaining
    frame of the pool (a slot drawn with probability proportional to its remaining frames, then the next frame
    of that episode's random permutation); a finished episode is replaced by the next one. Without shuffle,
    episodes are emitted whole, in list order, frames ascending. The sequence depends only on (counts,
    pool_size, rng), never on how it is taken (`take(3); take(5)` == `take(8)`), so resuming is `take(skip)`.
    """

    _BLOCK = 4096  # uniforms are drawn in fixed blocks, so chunking cannot change the sequence

    def __init__(self, counts: Sequence[int], pool_size: int, rng: np.random.Generator | None, shuffle: bool = True):
        self.counts = [int(c) for c in counts]
        self.total = sum(self.counts)
        if int(pool_size) < 1:
            raise ValueError(f"pool_size must be >= 1, got {pool_size}")
        self.pool_size = int(pool_size)
        self.shuffle = bool(shuffle) and rng is not None
        if rng is not None and self.shuffle:
            self._perm_rng = np.random.default_rng(int(rng.integers(1 << 62)))
            self._u_rng = np.random.default_rng(int(rng.integers(1 << 62)))
        self._u: list[float] = []
        self._ui = 0
        self.pos = 0  # items emitted so far
        self.admitted = 0  # list episodes that have entered the pool
        self.finished: list[int] = []  # list episodes finished (or empty) since the caller last cleared it
        self._k: list[int] = []
        self._perm: list[list[int] | None] = []
        self._rem: list[int] = []
        self._remaining = 0
        self._fill()

    def _fill(self) -> None:
        while len(self._k) < self.pool_size and self.admitted < len(self.counts):
            e, c = self.admitted, self.counts[self.admitted]
            self.admitted += 1
            if c == 0:
                self.finished.append(e)
                continue
            self._k.append(e)
            self._perm.append(self._perm_rng.permutation(c).tolist() if self.shuffle else None)
            self._rem.append(c)
            self._remaining += c

    def _uniform(self) -> float:
        if self._ui == len(self._u):
            self._u, self._ui = self._u_rng.random(self._BLOCK).tolist(), 0
        self._ui += 1
        return self._u[self._ui - 1]

    def take(self, m: int) -> tuple[np.ndarray, np.ndarray]:
        """The next m items (fewer at the end): list-episode index and frame index (in the episode's frames)."""
        m = max(0, min(int(m), self.total - self.pos))
        out_k = np.empty(m, dtype=np.int64)
        out_j = np.empty(m, dtype=np.int64)
        for p in range(m):
            i = 0
            if self.shuffle:
                x = int(self._uniform() * self._remaining)
                while x >= self._rem[i]:
                    x -= self._rem[i]
                    i += 1
            n = self.counts[self._k[i]]
            r = self._rem[i] - 1
            out_k[p] = self._k[i]
            perm = self._perm[i]  # None without shuffle
            out_j[p] = perm[n - 1 - r] if perm is not None else n - 1 - r
            self._remaining -= 1
            if r == 0:
                self.finished.append(self._k[i])
                del self._k[i], self._perm[i], self._rem[i]
                self._fill()
            else:
                self._rem[i] = r
        self.pos += m
        return out_k, out_j
