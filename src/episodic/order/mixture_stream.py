"""The streaming order of a mixture: which whole episodes of which entries one epoch streams.

Streaming consumers take whole episodes (their decoders and byte ranges are reused), so the quota is applied
to episodes: entry ``e``'s frame budget in epoch ``t`` is the number of positions it owns among the epoch's
positions of the map-style sequence (`order.mixture_quota`, so budgets are exact integers whose running sums
follow the weights within the quota bound), spent on ``e``'s episodes in its own keyed order (a new
permutation of its selected episodes per pass, keyed by the seed and the entry's name). Episode ``k`` of that
order belongs to the epoch whose draw range holds its first frame's draw number, so every episode lands in
exactly one epoch and an epoch's frames per entry differ from its budget by less than one episode, with no
drift over epochs (the draws telescope).

`epoch_episodes` lists the epoch's episodes as *slots* (entry, episode, length); the streaming plan
(`order.stream_plan`: episodes split over consumers, pools, exact and elastic resume) runs unchanged on
``{slot: length}``. An entry drawn more than once per pass gets several slots for one episode. Draws below 0
(possible right after a spec change, `order.mixture_state`) count from 0. numpy only; memory O(episodes of
the epoch).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from episodic.order.mixture_sampler import MixtureSampler, entry_key
from episodic.order.permutation import permute

__all__ = ["EpochEpisodes", "epoch_episodes"]


@dataclass(frozen=True)
class EpochEpisodes:
    """The episodes (slots) of one streaming epoch, grouped by entry: entry index, episode number (in the
    entry's dataset) and number of kept frames, one row per slot."""

    entry: np.ndarray
    episode: np.ndarray
    length: np.ndarray

    def __len__(self) -> int:
        return int(self.entry.size)

    def lengths(self) -> dict[int, int]:
        """``{slot: length}``: the `lengths` argument of the streaming plan."""
        return dict(enumerate(self.length.tolist()))

    def frames_per_entry(self, num_entries: int) -> np.ndarray:
        return np.bincount(self.entry, weights=self.length, minlength=num_entries).astype(np.int64)


def _pass_order(sampler: MixtureSampler, e: int, cycle: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Entry e's kept episodes (slots in its EpisodeFrames) in pass `cycle`'s order, and the cumulative frames
    before each (length K + 1)."""
    frames = sampler.entries[e]
    k = frames.episodes.size
    order = np.arange(k, dtype=np.int64)
    if sampler.shuffle and k > 1:
        order = permute(order, k, entry_key(seed, "episodes:" + sampler.names[e]), cycle)
    lengths = np.diff(np.concatenate([[0], frames.cum_end]))[order]
    return order, np.concatenate([[0], np.cumsum(lengths)])


def _episodes_before(sampler: MixtureSampler, e: int, draw: int, seed: int) -> tuple[int, int]:
    """(pass, episodes of that pass) whose first frame's draw number lies below `draw`."""
    n = int(sampler.frames[e])
    cycle, rest = divmod(max(int(draw), 0), n)
    if rest == 0:
        return cycle, 0
    _, cum = _pass_order(sampler, e, cycle, seed)
    return cycle, int(np.searchsorted(cum, rest, side="left"))


def epoch_episodes(sampler: MixtureSampler, epoch: int, seed: int | None = None) -> EpochEpisodes:
    """The slots of streaming epoch `epoch` of `sampler`'s mixture, entry by entry (a pure function of the
    mixture, its state, `seed` and `epoch`)."""
    seed = sampler.seed if seed is None else int(seed)
    state = sampler.state
    tree = sampler.tree(seed)
    m0 = int(state.position(epoch, [0])[0])
    base = np.asarray(state.base, dtype=np.int64)
    lo = base + tree.counts(m0)
    hi = base + tree.counts(m0 + state.samples_per_epoch)
    entries, episodes, lengths = [], [], []
    for e in np.flatnonzero(hi > lo).tolist():
        c0, k0 = _episodes_before(sampler, e, int(lo[e]), seed)
        c1, k1 = _episodes_before(sampler, e, int(hi[e]), seed)
        frames = sampler.entries[e]
        all_lengths = np.diff(np.concatenate([[0], frames.cum_end]))
        for c in range(c0, c1 + 1):
            a = k0 if c == c0 else 0
            b = k1 if c == c1 else frames.episodes.size
            if b <= a:
                continue
            order, _ = _pass_order(sampler, e, c, seed)
            pick = order[a:b]
            entries.append(np.full(pick.size, e, dtype=np.int64))
            episodes.append(frames.episodes[pick])
            lengths.append(all_lengths[pick])
    cat = lambda parts: np.concatenate(parts) if parts else np.zeros(0, np.int64)  # noqa: E731
    return EpochEpisodes(entry=cat(entries), episode=cat(episodes), length=cat(lengths))
