"""What a streaming epoch streams: its slots (whole episodes, each of one entry), and the part of the state that
belongs to them.

An epoch source has `lengths(epoch, seed)` (``{slot: frames}``: what the streaming plan, `order.stream_plan`,
splits over consumers), `slots(keys, epoch, seed)` (the entry and episode of each slot key), `state()` (what
`state_dict()` adds to the stream state) and `restore(saved, stream)` (the stream state to continue from).

- `DatasetEpochs`: one dataset's selected episodes, keyed by episode index, the same every epoch.
- `MixtureEpochs`: a mixture's epoch (`order.epoch_episodes`: each entry's frame budget from the quota sequence,
  spent on whole episodes in the entry's keyed order), keyed by slot; its state is ``"mixture"``
  (`order.mixture_state.MixtureState`). Resuming under a mixture that changed since (an entry re-weighted,
  added, retired, ...): the interrupted epoch's remaining slots were computed from the old mixture, so the new
  mixture applies from the start of the next epoch (from the saved epoch itself when nothing of it was consumed),
  by the continuation rule of `order.mixture_state` (kept entries continue their passes); a warning says so.
  ``on_change="refuse"`` raises `SpecChangeError` instead.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import numpy as np

from ..order.mixture_sampler import ON_CHANGE, MixtureSampler
from ..order.mixture_state import MixtureState
from ..order.mixture_stream import EpochEpisodes, epoch_episodes
from ..order.stream_state import StreamState

__all__ = ["DatasetEpochs", "MixtureEpochs"]

logger = logging.getLogger(__name__)


class DatasetEpochs:
    """The epochs of one dataset: its `selected` episodes, every epoch; `lengths`: every episode's frames as items
    count them (`ItemSpec.episode_lengths`: resampled to the dataset's control rate when it has one)."""

    def __init__(self, selected: np.ndarray, lengths: np.ndarray):
        self.selected, self.episode_lengths = selected, lengths

    def lengths(self, epoch: int, seed: int) -> dict[int, int]:
        return {int(e): int(self.episode_lengths[e]) for e in self.selected}

    def slots(self, keys: np.ndarray, epoch: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        keys = np.asarray(keys, dtype=np.int64)
        return np.zeros(len(keys), np.int64), keys

    def state(self) -> dict:
        return {}

    def restore(self, saved: Mapping, stream: StreamState) -> StreamState:
        return stream


class MixtureEpochs:
    """The epochs of the mixture `sampler` orders (see the module docstring); `on_change` ("continue" or
    "refuse"): what `restore` does with a state saved under another mixture. `changes`: what the last
    `restore` reported changed."""

    def __init__(self, sampler: MixtureSampler, on_change: str = "continue"):
        if on_change not in ON_CHANGE:
            raise ValueError(f"on_change must be one of {ON_CHANGE}, got {on_change!r}")
        self.sampler, self.on_change = sampler, on_change
        self.changes: list[str] = []
        self._cache: tuple | None = None

    def epoch(self, epoch: int, seed: int) -> EpochEpisodes:
        """The whole episodes epoch `epoch` takes, entry by entry (`order.epoch_episodes`)."""
        key = (int(epoch), int(seed), self.sampler.state)
        if self._cache is None or self._cache[0] != key:
            self._cache = (key, epoch_episodes(self.sampler, int(epoch), int(seed)))
        return self._cache[1]

    def lengths(self, epoch: int, seed: int) -> dict[int, int]:
        return self.epoch(epoch, seed).lengths()

    def slots(self, keys: np.ndarray, epoch: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        slots = self.epoch(epoch, seed)
        keys = np.asarray(keys, dtype=np.int64)
        return slots.entry[keys], slots.episode[keys]

    def state(self) -> dict:
        return {"mixture": self.sampler.mixture_state()}

    def restore(self, saved: Mapping, stream: StreamState) -> StreamState:
        mixture = saved.get("mixture")
        changed = mixture is not None and not MixtureState.from_dict(mixture).same_spec(self.sampler.fresh)
        if changed and (stream.batches_consumed or stream.history) and self.on_change == "continue":
            logger.warning(
                "mixture changed since the stream state was saved: the rest of epoch %d is skipped, "
                "the new mixture streams from epoch %d",
                stream.epoch,
                stream.epoch + 1,
            )
            stream = stream.at_epoch(stream.epoch + 1)
        self.changes = self.sampler.resume(mixture, stream.epoch, 0, stream.seed, self.on_change)
        return stream
