"""Drop-in replacement for LeRobot's ``EpisodeAwareSampler`` with O(episodes) memory.

Same constructor, same frame set and, with ``shuffle=False``, the same sequence as
LeRobot 0.4.4. With ``shuffle=True`` the order is the keyed permutation of
:mod:`episodic.order.permutation` (a pure function of ``(seed, epoch)``) instead of
``torch.randperm``, so every process derives it independently and any position of
it is reachable in O(log episodes) without iterating.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from episodic.order.frames import EpisodeFrames
from episodic.order.permutation import permute

__all__ = ["EpisodeAwareSampler"]

_CHUNK = 1 << 16


class EpisodeAwareSampler:
    """Frames of the selected episodes, minus ``drop_n_first/last_frames`` per episode.

    Iterating yields this epoch's order from ``start_index`` on; once a pass runs to the
    end the epoch advances and ``start_index`` resets to 0 (``set_epoch`` also works, as
    with ``DistributedSampler``). ``state_dict()`` is ``{"epoch", "start_index"}``.
    For multi-process training and exact resume use :class:`EpisodicBatchSampler`.
    """

    def __init__(
        self,
        dataset_from_indices,
        dataset_to_indices,
        episode_indices_to_use=None,
        drop_n_first_frames: int = 0,
        drop_n_last_frames: int = 0,
        shuffle: bool = False,
        seed: int = 0,
    ):
        self.frames = EpisodeFrames(
            dataset_from_indices, dataset_to_indices, episode_indices_to_use, drop_n_first_frames, drop_n_last_frames
        )
        self.shuffle = bool(shuffle)
        self.seed = int(seed)
        self.epoch = 0
        self.start_index = 0

    @property
    def num_frames(self) -> int:
        return self.frames.num_frames

    def __len__(self) -> int:
        return self.frames.num_frames

    def indices_at(self, positions, epoch: int | None = None, seed: int | None = None):
        """Frame indices at ``positions`` (int or array in ``[0, len)``) of epoch ``epoch``'s order."""
        epoch = self.epoch if epoch is None else epoch
        seed = self.seed if seed is None else seed
        if self.shuffle:
            positions = permute(positions, self.frames.num_frames, seed, epoch)
        return self.frames.frame_at(positions)

    @property
    def indices(self) -> np.ndarray:
        """The unshuffled frame list, materialised on demand (O(frames) memory; for compatibility)."""
        return self.frames.frame_at(np.arange(self.frames.num_frames))

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "start_index": self.start_index}

    def load_state_dict(self, state: dict) -> None:
        start = int(state["start_index"])
        if not 0 <= start <= self.frames.num_frames:
            raise ValueError(f"start_index must be in [0, {self.frames.num_frames}], got {start}")
        self.epoch = int(state["epoch"])
        self.start_index = start

    def __iter__(self) -> Iterator[int]:
        epoch, start, n = self.epoch, self.start_index, self.frames.num_frames
        for lo in range(start, n, _CHUNK):
            yield from self.indices_at(np.arange(lo, min(lo + _CHUNK, n)), epoch).tolist()
        self.epoch, self.start_index = epoch + 1, 0
