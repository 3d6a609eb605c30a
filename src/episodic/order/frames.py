"""The kept frames of a LeRobot dataset as a compact, seekable sequence.

LeRobot's ``EpisodeAwareSampler`` materialises one Python int per kept frame. Here
only three int64 arrays of one entry per kept episode are stored (episode number,
cumulative kept length, frame offset); logical position ``p`` of the unshuffled sequence maps to
its frame by one ``np.searchsorted`` (O(log episodes)), vectorised over arrays.
"""

from __future__ import annotations

import logging

import numpy as np

__all__ = ["EpisodeFrames"]

logger = logging.getLogger(__name__)

_SORT_MIN = 1 << 14


class EpisodeFrames:
    """Frames ``range(from[e] + drop_first, to[e] - drop_last)`` of the selected episodes, in order.

    Semantics are LeRobot's: episode ``e`` is the e-th entry of the from/to arrays,
    ``episode_indices_to_use`` selects by that position (unknown entries are ignored),
    episodes left empty by the drops are skipped with a warning, and ``ValueError`` is
    raised for negative drop counts, mismatched arrays, or when no frame remains.
    """

    def __init__(
        self,
        dataset_from_indices,
        dataset_to_indices,
        episode_indices_to_use=None,
        drop_n_first_frames: int = 0,
        drop_n_last_frames: int = 0,
    ):
        if drop_n_first_frames < 0:
            raise ValueError(f"drop_n_first_frames must be >= 0, got {drop_n_first_frames}")
        if drop_n_last_frames < 0:
            raise ValueError(f"drop_n_last_frames must be >= 0, got {drop_n_last_frames}")
        starts = np.asarray(dataset_from_indices, dtype=np.int64).reshape(-1)
        ends = np.asarray(dataset_to_indices, dtype=np.int64).reshape(-1)
        if starts.shape != ends.shape:
            raise ValueError(
                "dataset_from_indices and dataset_to_indices must have the same length, "
                f"got {starts.size} and {ends.size}"
            )
        used = np.ones(starts.size, dtype=bool)
        if episode_indices_to_use is not None:
            wanted = np.asarray(list(episode_indices_to_use), dtype=np.int64).reshape(-1)
            used = np.isin(np.arange(starts.size), wanted)
        first = starts + drop_n_first_frames
        lengths = ends - drop_n_last_frames - first
        empty = used & (lengths <= 0)
        if empty.any():
            logger.warning(
                "%d episode(s) (first: %d) have no frame left after drop_n_first_frames=%d and "
                "drop_n_last_frames=%d; skipping them.",
                int(empty.sum()),
                int(np.flatnonzero(empty)[0]),
                drop_n_first_frames,
                drop_n_last_frames,
            )
        used &= lengths > 0
        if not used.any():
            raise ValueError(
                "No valid frames remain after applying episode_indices_to_use, drop_n_first_frames and "
                "drop_n_last_frames: all episodes were either filtered out or had too few frames."
            )
        lengths = lengths[used]
        self.episodes = np.flatnonzero(used)  # kept episode numbers (positions in the from/to arrays)
        self.cum_end = np.cumsum(lengths)  # exclusive end position of each kept episode
        # frame = offset[k] + position for positions inside kept episode k
        self.offset = first[used] - (self.cum_end - lengths)
        self.num_frames = int(self.cum_end[-1])

    def __len__(self) -> int:
        return self.num_frames

    def _episode_slot(self, p: np.ndarray) -> np.ndarray:
        """Kept-episode slot of each position: binary search over the cumulative lengths."""
        if p.size < _SORT_MIN or self.cum_end.size < _SORT_MIN:
            return np.searchsorted(self.cum_end, p, side="right")
        # many random positions over many episodes: searching sorted keys is cache friendly
        flat = p.reshape(-1)
        order = np.argsort(flat)
        slot = np.empty(flat.shape, dtype=np.intp)
        slot[order] = np.searchsorted(self.cum_end, flat[order], side="right")
        return slot.reshape(p.shape)

    def frame_at(self, positions):
        """Frame index at logical position(s) ``positions`` in ``[0, num_frames)`` (int or array)."""
        p = np.asarray(positions, dtype=np.int64)
        out = self.offset[self._episode_slot(p)] + p
        return int(out) if out.ndim == 0 else out

    def episode_at(self, positions):
        """Episode number (index into the from/to arrays) at logical position(s) ``positions``."""
        out = self.episodes[self._episode_slot(np.asarray(positions, dtype=np.int64))]
        return int(out) if out.ndim == 0 else out
