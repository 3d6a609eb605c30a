"""Deterministic, shardable, exactly resumable sample order (numpy only).

- :func:`permute` / :func:`unpermute`: keyed O(1)-memory bijection of ``[0, n)``.
- :class:`EpisodeAwareSampler`: LeRobot-compatible episode-aware sampler.
- :class:`EpisodicBatchSampler`: per-rank batches of one global order, resumable on
  any topology from ``{"seed", "epoch", "consumed"}``; :class:`TrackedLoader` counts
  consumed batches.
- :func:`simulate`: topology simulator for tests; :func:`simulate_stream` its streaming counterpart.
- Streaming order (one consumer per rank x DataLoader worker, whole episodes each):
  :func:`plan_episodes` splits episodes over consumers, :class:`PoolOrder` is one
  consumer's emission order, :func:`worker_batches_consumed` / :func:`round_robin` /
  :func:`consumed_items` model the DataLoader's round-robin over workers,
  :func:`segment_plan` / :func:`remaining_after` compose them over the topologies
  ("segments") of one epoch, keyed by :func:`segment_seed` / :func:`consumer_rng`.
- Mixtures of weighted entries: :class:`QuotaTree` (which entry owns each position of an endless sequence,
  every prefix within :data:`QUOTA_BOUND` of the weights), :class:`MixtureSampler` (position -> (entry,
  frame)), :class:`MixtureBatchSampler` (per-rank batches, state with the mixture), :class:`MixtureState`
  (resume, also after the mixture changed), :func:`epoch_episodes` (the streaming epoch's whole episodes).
- Eval splits: :class:`EvalSplit` and :func:`split_episodes` (which episodes a dataset or mixture entry holds
  out, per task: the stratified rule, or LeRobot 0.6's).
"""

from episodic.order.batch_sampler import EpisodicBatchSampler, TrackedLoader
from episodic.order.episode_split import plan_episodes
from episodic.order.eval_split import EvalSplit, split_episodes
from episodic.order.frames import EpisodeFrames
from episodic.order.mixture_batch import MixtureBatchSampler
from episodic.order.mixture_quota import QUOTA_BOUND, QuotaTree, quantize
from episodic.order.mixture_sampler import MixtureSampler
from episodic.order.mixture_state import MixtureState, SpecChangeError
from episodic.order.mixture_stream import EpochEpisodes, epoch_episodes
from episodic.order.permutation import permute, unpermute
from episodic.order.pool_order import PoolOrder
from episodic.order.round_robin import consumed_items, round_robin, worker_batches_consumed
from episodic.order.sampler import EpisodeAwareSampler
from episodic.order.shard import advance, rank_positions, resolve_topology, step_positions, steps_in_epoch
from episodic.order.simulate import ConsumedBatch, Simulation, Topology, simulate
from episodic.order.simulate_stream import StreamBatch, StreamSimulation, simulate_stream
from episodic.order.state import OrderState
from episodic.order.stream_keys import consumer_rng, segment_seed
from episodic.order.stream_plan import ConsumerPlan, consumer_plan, remaining_after, segment_batches, segment_plan
from episodic.order.stream_state import StreamState

__all__ = [
    "QUOTA_BOUND",
    "ConsumedBatch",
    "ConsumerPlan",
    "EpisodeAwareSampler",
    "EpisodeFrames",
    "EpisodicBatchSampler",
    "EpochEpisodes",
    "EvalSplit",
    "MixtureBatchSampler",
    "MixtureSampler",
    "MixtureState",
    "OrderState",
    "PoolOrder",
    "QuotaTree",
    "Simulation",
    "SpecChangeError",
    "StreamBatch",
    "StreamSimulation",
    "StreamState",
    "Topology",
    "TrackedLoader",
    "advance",
    "consumed_items",
    "consumer_plan",
    "consumer_rng",
    "epoch_episodes",
    "permute",
    "plan_episodes",
    "quantize",
    "rank_positions",
    "remaining_after",
    "resolve_topology",
    "round_robin",
    "segment_batches",
    "segment_plan",
    "segment_seed",
    "split_episodes",
    "simulate",
    "simulate_stream",
    "step_positions",
    "steps_in_epoch",
    "unpermute",
    "worker_batches_consumed",
]
