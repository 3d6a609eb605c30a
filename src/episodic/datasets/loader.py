"""The loaders every dataset's `loader()` returns: DataLoaders that count the batches they hand to the training
loop (a batch counts as consumed when it is handed out), with `state_dict()` / `load_state_dict()` for exact
resume (also on another number of ranks or workers), `set_epoch()`, `stats()` and `len()`.

- `MapLoader` (map-style datasets, one or a mixture): a batch sampler of this rank's share of the order
  (`order.EpisodicBatchSampler`, `order.MixtureBatchSampler`) runs in the main process; workers build whole
  batches (`access.BatchedView`).
- `StreamingLoader` (streaming datasets): each iteration hands a snapshot of the dataset's state (`Iteration`)
  to fresh workers; when it runs to its end the dataset moves to the next epoch; with `even_batches` every rank
  hands out the same number of batches.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from .. import runtime
from ..order.batch_sampler import TrackedLoader
from ..order.shard import resolve_topology
from ..order.stream_plan import segment_batches
from ..order.stream_state import StreamState
from .access import BatchedView, finish_batch
from .collate import TensorSharing, as_is

if TYPE_CHECKING:
    from .streaming import StreamingDataset

__all__ = ["Iteration", "MapLoader", "StreamingLoader"]


@dataclass(frozen=True)
class Iteration:
    """What one iteration of a streaming dataset runs from (a snapshot the DataLoader's workers receive)."""

    state: StreamState  # with the open segment of this iteration's topology
    chunk_size: int
    whole_batches: bool = False  # hand out whole batches as they are (loader()), not items
    sharing: TensorSharing = field(default_factory=TensorSharing)
    even_batches: bool = False


class MapLoader(TrackedLoader):
    """A DataLoader over map-style `dataset` whose batches are `batch_sampler`'s (this rank's share of the order),
    built whole in its workers; `sharing`: how workers share batch tensors (`collate.TensorSharing`); other
    keyword arguments go to the DataLoader. Iterate it as the training loop: each batch handed out advances the
    order by one step; `state_dict()` is the order's (a mixture's with the mixture's state)."""

    def __init__(self, dataset, batch_sampler, num_workers: int = 0, sharing: str = "auto", **kwargs):
        loader = torch.utils.data.DataLoader(
            BatchedView(dataset, TensorSharing(sharing)),
            batch_size=None,
            sampler=batch_sampler,
            num_workers=num_workers,
            persistent_workers=num_workers > 0,
            **{"collate_fn": as_is, **kwargs},
        )
        super().__init__(loader, batch_sampler)
        self.dataset = dataset

    def __iter__(self):
        gpu = getattr(self.dataset, "gpu", None)
        if gpu is None:
            yield from super().__iter__()
            return
        # frames decoded on the GPU here, in the main process, a few batches ahead; a batch counts as consumed
        # when it is handed out, as TrackedLoader counts
        for batch in gpu.ahead(iter(self.loader), self.dataset.finish):
            self.batch_sampler.advance(1)
            yield batch

    def set_epoch(self, epoch: int) -> None:
        self.batch_sampler.set_epoch(epoch)

    def stats(self) -> dict:
        return self.dataset.stats()


class _StreamView(torch.utils.data.IterableDataset):
    """The dataset as a StreamingLoader hands it to its DataLoader: one iteration snapshot, no state."""

    def __init__(self, dataset: StreamingDataset, iteration: Iteration):
        self.dataset, self.iteration = dataset, iteration

    def __iter__(self):
        return self.dataset.iterate(self.iteration)


class StreamingLoader:
    """A DataLoader over a streaming dataset (one dataset or a mixture) that counts the batches it hands out.

    Iterate it like a DataLoader; `state_dict()` / `load_state_dict()` are the dataset's. Workers are not
    persistent: each iteration hands a snapshot of the dataset's state (epoch, resume position) to fresh
    workers. When an iteration runs to its end, the dataset moves to the next epoch."""

    def __init__(
        self,
        dataset: StreamingDataset,
        batch_size: int = 32,
        num_workers: int = 0,
        even_batches: bool | None = None,
        sharing: str = "auto",
        **kwargs,
    ):
        if kwargs.get("persistent_workers"):
            raise ValueError("StreamingLoader workers cannot be persistent: each epoch's state goes to new workers")
        self.dataset = dataset
        self.batch_size = int(batch_size)
        self.num_workers = int(num_workers)
        self.even_batches = even_batches
        self.sharing = TensorSharing(sharing)
        self.kwargs = kwargs

    def __iter__(self):
        ds = self.dataset
        rank, ws = resolve_topology(ds.rank, ds.world_size)
        ds.state = state = ds.state.open_segment(ws, self.num_workers, self.batch_size)
        even = self.even_batches if self.even_batches is not None else ws > 1
        limit = None
        if even:
            per_rank = segment_batches(
                ds.epochs.lengths(state.epoch, state.seed), state, ds.episode_pool_size, ds.shuffle
            )
            limit = min(per_rank)
            if max(per_rank) > limit and rank == 0 and state.batches_consumed < limit:
                warnings.warn(
                    f"streaming: ranks have {limit}..{max(per_rank)} batches in this epoch; all stop after "
                    f"{limit} (even_batches), skipping {sum(per_rank) - limit * ws} batches' frames of this "
                    f"epoch",
                    stacklevel=2,
                )
        kw = dict(self.kwargs)
        # the dataset hands out whole batches (no per-item dicts) unless items must be collated or transformed
        # one by one; frames decoded on the GPU: always whole, finished here (transforms too)
        gpu = getattr(ds, "gpu", None) is not None
        if gpu and (kw.get("collate_fn") or kw.get("drop_last")):
            raise ValueError(
                "decode_device='cuda': the loader hands out whole batches; collate_fn and drop_last do not apply"
            )
        whole = gpu or not (kw.get("collate_fn") or kw.get("drop_last") or ds.image_transforms)
        view = _StreamView(
            ds,
            Iteration(state, chunk_size=self.batch_size, whole_batches=whole, sharing=self.sharing, even_batches=even),
        )
        if whole:
            kw.pop("drop_last", None)
            kw["collate_fn"] = as_is
            dl = torch.utils.data.DataLoader(view, batch_size=None, num_workers=self.num_workers, **kw)
        else:
            dl = torch.utils.data.DataLoader(view, batch_size=self.batch_size, num_workers=self.num_workers, **kw)
        it = iter(dl)
        # frames decoded on the GPU: finished here, a few batches ahead (counted when handed out)
        batches = ds.gpu.ahead(it, lambda b: finish_batch(ds, b)) if gpu else it
        try:
            while limit is None or ds.state.batches_consumed < limit:
                try:
                    batch = next(batches)
                except StopIteration:
                    break
                ds.state = ds.state.advanced(1)
                yield batch
        finally:  # also when the caller stops early (close()): stop the workers now, not at garbage collection
            if gpu:
                batches.close()
            runtime.shutdown_workers(it)
        ds.set_epoch(ds.epoch + 1)

    def state_dict(self) -> dict:
        return self.dataset.state_dict()

    def load_state_dict(self, state: Mapping) -> None:
        self.dataset.load_state_dict(state)

    def set_epoch(self, epoch: int) -> None:
        self.dataset.set_epoch(epoch)
