"""The map-style order of a weighted mixture: position -> (entry, frame), a pure function of (seed, epoch, position).

Position ``p`` of epoch ``t`` is global sequence position ``m`` (`MixtureState.position`); the quota tree
(`order.mixture_quota`) gives its entry ``e`` and how many times ``e`` came up before, which plus the state's
offset is ``e``'s draw ``d``. Draw ``d`` reads kept frame ``permute(d mod n_e, n_e, key_e, d div n_e)`` of the
entry (its `EpisodeFrames`: the frames of its selected episodes), with ``key_e`` a 64-bit mix of the seed and
the entry's name, so each pass over an entry's frames is a new keyed permutation and an entry's order does
not depend on the other entries. Without shuffling, entries still interleave by the quota, and each entry's
frames come in order. Memory: the entries' `EpisodeFrames` and one table of all their episodes side by side
(O(episodes)), the tree (O(entries)). A lookup is vectorised over positions whatever entries they land on.

`MixtureSampler` has the interface `EpisodicBatchSampler` uses (``len``, ``seed``, ``indices_at``), so
sharding, padding, exact and elastic resume are the single-dataset ones (`order.shard`); use
`MixtureBatchSampler` (`order.mixture_batch`) to keep the mixture's state in checkpoints. A flat index numbers
the entries' kept frames side by side (entry ``e``'s kept frame ``p`` is ``kept_base[e] + p``, like a
``ConcatDataset`` of the entries' selected frames): ``range(num_indices)``, every one of them a frame the
order can draw, whatever episodes the entries select; `split` turns it into (entry, row), `flat_index` back.
"""

from __future__ import annotations

import hashlib
import logging
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np

from episodic.order.frames import EpisodeFrames
from episodic.order.mixture_quota import QuotaTree, quantize
from episodic.order.mixture_state import MixtureState, SpecChangeError
from episodic.order.permutation import GOLDEN, MASK64, permute, permute_lanes

__all__ = ["MixtureSampler", "entry_key"]

logger = logging.getLogger(__name__)

ON_CHANGE = ("continue", "refuse")
_FEW_KEYS = 8  # up to this many (entry, pass) permutations in one lookup: one `permute` call each
_TABLE_MAX_FRAMES = 4096  # entries of at most this many frames are permuted by whole tables (`_tabled`)
_TABLE_CACHE_FRAMES = 1 << 20  # values of such tables a sampler keeps (8 MB)


def entry_key(seed: int, name: str) -> int:
    """The permutation seed of entry `name`: a 64-bit mix of the order's seed and the name's BLAKE2b digest."""
    digest = int.from_bytes(hashlib.blake2b(name.encode("utf-8"), digest_size=8).digest(), "little")
    return ((int(seed) & MASK64) * GOLDEN ^ digest) & MASK64


class MixtureSampler:
    """The order of a mixture of `entries` (one `EpisodeFrames` each) with `weights` and unique `names`.

    `samples_per_epoch` defaults to the entries' total frames. `skipped` names entries that were left out
    (recorded in the state). `own_weights`: each entry's own weight before normalising (default
    `weights`), recorded in the state so that a resume names the entries whose own weight changed (not every
    entry whose share moved because another one changed). The state (`mixture_state`, `resume`) says where the
    sequence stands.
    """

    def __init__(
        self,
        entries: Sequence[EpisodeFrames],
        weights: Sequence[float],
        names: Sequence[str],
        *,
        samples_per_epoch: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        skipped: Sequence[str] = (),
        own_weights: Sequence[float] | None = None,
    ):
        self.entries = list(entries)
        self.names = tuple(str(n) for n in names)
        if len(self.names) != len(self.entries) or len(weights) != len(self.entries):
            raise ValueError(
                f"need one name and one weight per entry: {len(self.entries)} entries, "
                f"{len(self.names)} names, {len(weights)} weights"
            )
        if len(set(self.names)) != len(self.names):
            dup = sorted({n for n in self.names if self.names.count(n) > 1})
            raise ValueError(f"entry names must be unique, repeated: {dup[:5]}")
        self.units = quantize(weights)
        self.frames = np.asarray([len(f) for f in self.entries], dtype=np.int64)
        total = int(self.frames.sum())
        n = total if samples_per_epoch is None else samples_per_epoch
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 1 <= n < 1 << 40:
            raise ValueError(f"samples_per_epoch must be an int in [1, 2**40), got {samples_per_epoch!r}")
        self.num_samples = int(n)
        self.shuffle = bool(shuffle)
        self.seed = int(seed)
        self.epoch = 0
        own = list(weights if own_weights is None else own_weights)
        if len(own) != len(self.entries):
            raise ValueError(f"own_weights needs one value per entry, got {len(own)}")
        self.fresh = MixtureState.fresh(
            self.names, self.units.tolist(), self.frames.tolist(), self.num_samples, skipped, own
        )
        self.state = self.fresh
        self._trees: dict[int | None, QuotaTree] = {}
        self._entry_keys: dict[int, np.ndarray] = {}
        self._tables: OrderedDict[tuple[int, int, int], np.ndarray] = OrderedDict()  # `_tabled`'s
        self._tabled_values = 0
        # every entry's kept frames side by side (the flat indices): kept position kept_base[e] + p of entry e -> its
        # row offset[slot] + kept, slot its kept episode among all entries' (cum_end: their exclusive ends)
        self.kept_base = np.concatenate([[0], np.cumsum(self.frames)]).astype(np.int64)
        self._slot_base = np.concatenate([[0], np.cumsum([len(f.cum_end) for f in self.entries])]).astype(np.int64)
        self._cum_end = np.concatenate([f.cum_end + b for f, b in zip(self.entries, self.kept_base)]).astype(np.int64)
        self._offset = np.concatenate([f.offset - b for f, b in zip(self.entries, self.kept_base)]).astype(np.int64)

    def __len__(self) -> int:
        return self.num_samples

    @property
    def num_indices(self) -> int:
        """How many flat indices there are: every entry's kept frames (`len` of a map-style mixture)."""
        return int(self.kept_base[-1])

    def tree(self, seed: int | None = None) -> QuotaTree:
        """The quota tree of the current weights for `seed` (plain rounding without shuffling)."""
        key = self._tree_seed(seed)
        if key not in self._trees:
            self._trees = {key: QuotaTree.build(self.units, key)}
        return self._trees[key]

    def _tree_seed(self, seed: int | None) -> int | None:
        return (self.seed if seed is None else int(seed)) if self.shuffle else None

    # ------------------------------------------------------------------ the order
    def draws_at(self, positions, epoch: int | None = None, seed: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(entry, draw) at `positions` of epoch `epoch`'s order (int64 arrays shaped like `positions`)."""
        epoch = self.epoch if epoch is None else int(epoch)
        m = self.state.position(epoch, positions)
        entry, local = self.tree(seed).locate(m)
        return entry, local + np.asarray(self.state.base, dtype=np.int64)[entry]

    def locate(self, positions, epoch: int | None = None, seed: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(entry, row in that entry's dataset) at `positions` of epoch `epoch`'s order: vectorised over the
        positions whatever entries they land on (tree walk, lane-wise permutation, one binary search)."""
        entry, flat = self._flat(positions, epoch, seed)
        return entry, self._rows(flat).reshape(entry.shape)

    def _flat(self, positions, epoch: int | None, seed: int | None) -> tuple[np.ndarray, np.ndarray]:
        """(entry, flat index) at `positions`: the tree walk and the entries' keyed permutations."""
        seed = self.seed if seed is None else int(seed)
        entry, draw = self.draws_at(positions, epoch, seed)
        flat_e, flat_d = entry.reshape(-1), draw.reshape(-1)
        n = self.frames[flat_e]
        cycle, j = np.divmod(flat_d, n)
        if self.shuffle:
            few = flat_e.size and len(np.unique(flat_e)) <= _FEW_KEYS  # (more entries: more (entry, pass) pairs)
            keys = np.unique(np.stack([flat_e, cycle]), axis=1) if few else np.zeros((2, 0), np.int64)
            if few and keys.shape[1] <= _FEW_KEYS:  # few permutations: one call each (small domains use tables)
                for e, c in keys.T.tolist():
                    lanes = np.flatnonzero((flat_e == e) & (cycle == c))
                    j[lanes] = permute(j[lanes], int(self.frames[e]), entry_key(seed, self.names[e]), c)
            else:
                small = n <= _TABLE_MAX_FRAMES
                big = np.flatnonzero(~small)
                if big.size:
                    j[big] = permute_lanes(j[big], n[big], self._keys(seed)[flat_e[big]], cycle[big])
                if big.size < j.size:
                    lanes = np.flatnonzero(small)
                    j[lanes] = self._tabled(seed, flat_e[lanes], cycle[lanes], j[lanes])
        return entry, (self.kept_base[flat_e] + j).reshape(entry.shape)

    def _rows(self, flat: np.ndarray) -> np.ndarray:
        """The dataset row of each flat index (one binary search over all entries' kept episodes)."""
        return self._offset[np.searchsorted(self._cum_end, flat, side="right")] + flat

    def _tabled(self, seed: int, entry: np.ndarray, cycle: np.ndarray, j: np.ndarray) -> np.ndarray:
        """``permute(j, n_e, key_e, cycle)`` lane by lane for entries of at most `_TABLE_MAX_FRAMES` frames, by
        lookups in whole permutation tables of (entry, pass), kept (least recently used first out) up to
        `_TABLE_CACHE_FRAMES` values: consecutive batches draw from the same passes of the same entries, and one
        table costs less than a vectorised permutation of a few lanes."""
        out = np.empty_like(j)
        order = np.lexsort((cycle, entry))
        e_sorted, c_sorted = entry[order], cycle[order]
        cuts = np.flatnonzero((np.diff(e_sorted) != 0) | (np.diff(c_sorted) != 0)) + 1
        cache = self._tables
        for lo, hi in zip([0, *cuts.tolist()], [*cuts.tolist(), len(order)]):
            e, c = int(e_sorted[lo]), int(c_sorted[lo])
            key = (seed, e, c)
            table = cache.get(key)
            if table is None:
                size = int(self.frames[e])
                table = cache[key] = permute(np.arange(size, dtype=np.int64), size, entry_key(seed, self.names[e]), c)
                self._tabled_values += size
                while self._tabled_values > _TABLE_CACHE_FRAMES and len(cache) > 1:
                    self._tabled_values -= len(cache.pop(next(iter(cache))))
            else:
                cache.move_to_end(key)
            lanes = order[lo:hi]
            out[lanes] = table[j[lanes]]
        return out

    def _keys(self, seed: int) -> np.ndarray:
        if seed not in self._entry_keys:
            self._entry_keys = {
                seed: np.asarray([entry_key(seed, n) for n in self.names], dtype=np.uint64).view(np.int64)
            }
        return self._entry_keys[seed]

    def indices_at(self, positions, epoch: int | None = None, seed: int | None = None):
        """Flat indices at `positions` (int or array) of epoch `epoch`'s order."""
        _, out = self._flat(np.asarray(positions), epoch, seed)
        return int(out) if out.ndim == 0 else out

    def split(self, flat) -> tuple[np.ndarray, np.ndarray]:
        """(entry, row in its dataset) of flat indices in ``range(num_indices)`` (IndexError outside it)."""
        flat = np.asarray(flat, dtype=np.int64)
        bad = (flat < 0) | (flat >= self.num_indices)
        if bad.any():
            raise IndexError(
                f"flat index {int(flat[bad].reshape(-1)[0])} out of range: the mixture has "
                f"{self.num_indices} (its entries' kept frames)"
            )
        entry = np.searchsorted(self.kept_base, flat, side="right") - 1
        return entry, self._rows(flat)

    def flat_index(self, entry, rows) -> np.ndarray:
        """The flat indices of dataset rows `rows` (``index`` values) of entry `entry` (an int, or one per row):
        the inverse of `split`. IndexError naming the entry for a row that is not one of its kept frames."""
        rows = np.asarray(rows, dtype=np.int64)
        entry = np.broadcast_to(np.asarray(entry, dtype=np.int64), rows.shape)
        out = np.empty(rows.shape, dtype=np.int64)
        ends = self._offset + self._cum_end  # one past each kept episode's last row
        starts = ends - np.diff(np.concatenate([[0], self._cum_end]))
        for e in np.unique(entry).tolist():
            if not 0 <= e < len(self.entries):
                raise IndexError(f"entry {e} out of range: the mixture has {len(self.entries)} entries")
            lanes = entry == e
            r = rows[lanes]
            lo, hi = int(self._slot_base[e]), int(self._slot_base[e + 1])
            slot = np.minimum(lo + np.searchsorted(ends[lo:hi], r, side="right"), hi - 1)
            bad = (r < starts[slot]) | (r >= ends[slot])
            if bad.any():
                raise IndexError(f"entry {self.names[e]!r}: row {int(r[bad][0])} is not one of its kept frames")
            out[lanes] = r - self._offset[slot]
        return out

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    # ------------------------------------------------------------------ state
    def mixture_state(self) -> dict:
        return self.state.to_dict()

    def resume(
        self, saved: Mapping | None, epoch: int, consumed: int, seed: int | None = None, on_change: str = "continue"
    ) -> list[str]:
        """Adopt a saved mixture state for a run resuming at (`epoch`, `consumed`); returns what changed in the
        mixture since it was saved (empty when nothing). A changed mixture continues by the rule of
        `order.mixture_state` (logged as a warning), or raises `SpecChangeError` with ``on_change="refuse"``.
        `saved=None` (a state from before mixtures, or a fresh run) means this mixture from epoch 0."""
        if on_change not in ON_CHANGE:
            raise ValueError(f"on_change must be one of {ON_CHANGE}, got {on_change!r}")
        if saved is None:
            self.state = self.fresh
            return []
        old = MixtureState.from_dict(saved)
        changes = old.changes(self.fresh)
        if not changes and old.same_spec(self.fresh):
            self.state = replace(
                old, weights=self.fresh.weights
            )  # the same order; weights recorded (old states lack them)
            return []
        if on_change == "refuse":
            raise SpecChangeError(
                "the mixture differs from the one the order state was saved with ("
                + "; ".join(changes)
                + "); resume with on_change='continue' to apply the new "
                "mixture from the resume point, or restore the old mixture"
            )
        logger.warning(
            "mixture changed since the order state was saved (%s): the new mixture applies from epoch "
            "%d position %d on; kept entries continue their draws",
            "; ".join(changes),
            epoch,
            consumed,
        )
        self.state = old.continued(self.fresh, self._tree_seed(seed), int(epoch), int(consumed))
        return changes
