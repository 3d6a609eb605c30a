"""Deterministic, shardable, exactly resumable sample order (numpy only).

- :func:`permute` / :func:`unpermute`: keyed O(1)-memory bijection of ``[0, n)``.
- :class:`EpisodeAwareSampler`: LeRobot-compatible episode-aware sampler.
- :class:`EpisodicBatchSampler`: per-rank batches of one global order, resumable on
  any topology from ``{"seed", "epoch", "consumed"}``; :class:`TrackedLoader` counts
  consumed batches.
- :func:`simulate`: topology simulator for tests.
"""

from episodic.order.batch_sampler import EpisodicBatchSampler, TrackedLoader
from episodic.order.frames import EpisodeFrames
from episodic.order.permutation import permute, unpermute
from episodic.order.sampler import EpisodeAwareSampler
from episodic.order.shard import advance, rank_positions, resolve_topology, step_positions, steps_in_epoch
from episodic.order.simulate import ConsumedBatch, Simulation, Topology, simulate
from episodic.order.state import OrderState

__all__ = [
    "ConsumedBatch",
    "EpisodeAwareSampler",
    "EpisodeFrames",
    "EpisodicBatchSampler",
    "OrderState",
    "Simulation",
    "Topology",
    "TrackedLoader",
    "advance",
    "permute",
    "rank_positions",
    "resolve_topology",
    "simulate",
    "step_positions",
    "steps_in_epoch",
    "unpermute",
]
