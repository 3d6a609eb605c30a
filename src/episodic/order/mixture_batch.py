"""Per-rank batches of a mixture's order: `EpisodicBatchSampler` plus the mixture's state in the checkpoint.

Sharding, padding, `advance`, exact and elastic resume are `EpisodicBatchSampler`'s (`order.shard`): the
mixture is one global order of `len(sampler)` positions per epoch. The state is the single-dataset state
``{"seed", "epoch", "consumed"}`` plus ``"mixture"`` (`order.mixture_state.MixtureState.to_dict`), so a state
saved here also loads into a plain `EpisodicBatchSampler`, and a plain state loads here (as this mixture from
its start). Loading a state saved under another mixture continues by the rule of `order.mixture_state`, or
raises `SpecChangeError` with ``on_change="refuse"``.
"""

from __future__ import annotations

from episodic.order.batch_sampler import EpisodicBatchSampler
from episodic.order.mixture_sampler import ON_CHANGE, MixtureSampler
from episodic.order.state import OrderState

__all__ = ["MixtureBatchSampler"]


class MixtureBatchSampler(EpisodicBatchSampler):
    """Rank ``rank``'s batches of flat mixture indices (`MixtureSampler.split` gives (entry, row))."""

    sampler: MixtureSampler

    def __init__(
        self,
        sampler: MixtureSampler,
        batch_size: int,
        *,
        rank: int | None = None,
        world_size: int | None = None,
        drop_last: bool = False,
        seed: int | None = None,
        on_change: str = "continue",
    ):
        if on_change not in ON_CHANGE:
            raise ValueError(f"on_change must be one of {ON_CHANGE}, got {on_change!r}")
        super().__init__(sampler, batch_size, rank=rank, world_size=world_size, drop_last=drop_last, seed=seed)
        self.on_change = on_change
        self.changes: list[str] = []  # what the last loaded state's mixture differed in

    def state_dict(self) -> dict:
        state = super().state_dict()
        state["mixture"] = self.sampler.mixture_state()
        return state

    def load_state_dict(self, state: dict) -> None:
        s = OrderState.from_dict(state)
        self.changes = self.sampler.resume(state.get("mixture"), s.epoch, s.consumed, s.seed, self.on_change)
        super().load_state_dict(state)
