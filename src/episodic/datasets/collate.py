"""Batches that skip per-item re-collation, and cross from DataLoader workers cheaply.

Datasets build a whole batch at once (vectorised gathers, one decode pass per file) as a `Batch`: the
tensors of all items stacked, cameras decoded straight into them in the user's dtype (float32 in [0, 1], or
uint8 with `return_uint8`; see `make_batch` and `memory`). The DataLoader still gets
per-item dicts, as LeRobot's items are: `Item`s, made on demand from the batch (`ItemBatch`). When torch's
`default_collate` receives exactly the items of one batch, in order, it returns that batch instead of
stacking every key again: same keys, dtypes, shapes and values.

In a DataLoader worker, the batch's tensors are views of ONE shared-memory block (one mapping to share, not
one per key), usually a slot of the worker's ring (`memory.SlotRing`) that the main process hands out without
copying when it unpickles the batch (`SlotBatch`, `memory.receive`) and gives back once the batch is dropped;
so the main process, which every batch passes through, neither copies nor converts frames. A batch in a fresh
block (ring full) travels as views (`Own`). The worker shares tensors the way its loader says
(`TensorSharing`). `deliver` is the one place that decides between what a worker sends and what the main
process hands out.

`Item` is registered once, at import, in torch's `default_collate` dispatch table (`runtime.register_collate`):
`default_collate` of a list of Items made from one Batch returns that Batch's tensors.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from .. import config, runtime
from .memory import RING, receive


def own_storage(t: torch.Tensor) -> torch.Tensor:
    """`t` (contiguous) on a storage of its own: a slice of the storage it shares with other tensors (no copy;
    the slice keeps the whole block alive). To a user it is then an ordinary tensor: `torch.save`, pickle and
    deepcopy see one storage per tensor, not one block viewed with several dtypes."""
    storage = t.untyped_storage()
    start, nbytes = t.storage_offset() * t.element_size(), t.numel() * t.element_size()
    if start == 0 and nbytes == storage.nbytes():
        return t
    return torch.empty(0, dtype=t.dtype).set_(storage[start : start + nbytes], 0, t.shape, t.stride())


class SlotBatch:
    """A batch a worker built in a ring slot; unpickles (in the main process) as the collated dict, views of the
    slot, which goes back to the worker once the batch is dropped (`memory.receive`)."""

    __slots__ = ("layout", "slot")

    def __init__(self, slot: torch.Tensor, batch: Batch):
        self.slot = slot
        self.layout = [
            (k, None, list(v), None)
            if isinstance(v, list)
            else (k, v.storage_offset() * v.element_size(), tuple(v.shape), v.numpy().dtype.str)
            for k, v in batch.tensors.items()
        ]

    def __reduce__(self):
        return receive, (self.slot, self.layout)


class Own:
    """A tensor of a shared block that unpickles on a storage of its own (`own_storage`)."""

    __slots__ = ("t",)

    def __init__(self, t: torch.Tensor):
        self.t = t

    def __reduce__(self):
        return own_storage, (self.t,)


class Batch:
    """Batched tensors of several items, in item key order. Text values ('task', string features, a mixture's
    'dataset_name') are lists of strings."""

    __slots__ = ("tensors", "size")

    def __init__(self, tensors: dict):
        self.tensors = tensors
        self.size = len(tensors["task"])

    def collated(self) -> dict:
        """What default_collate would make of the items."""
        return {k: list(v) if isinstance(v, list) else v for k, v in self.tensors.items()}

    def for_transport(self):
        """The same, for a worker to send: every tensor gets a storage of its own in the receiving process (they
        travel as views of one shared block; a block that is a ring slot is handed out there without a copy and
        given back once the batch is dropped: `SlotBatch`)."""
        first = next((v for v in self.tensors.values() if not isinstance(v, list)), None)
        slot = RING.slot_of(first) if first is not None else None
        if slot is not None:
            return SlotBatch(slot, self)
        return {k: list(v) if isinstance(v, list) else Own(v) for k, v in self.tensors.items()}

    def item(self, b: int) -> Item:
        item = Item((k, v[b]) for k, v in self.tensors.items())
        item._batch, item._pos = self, b
        return item

    def items(self) -> list[Item]:
        """All items, with one unbind per key rather than one index per item."""
        cols = [(k, v if isinstance(v, list) else v.unbind(0)) for k, v in self.tensors.items()]
        out = []
        for b in range(self.size):
            item = Item((k, c[b]) for k, c in cols)
            item._batch, item._pos = self, b
            out.append(item)
        return out


class Item(dict):
    """One item (a plain dict of tensors) that remembers the batch it comes from."""

    __slots__ = ("_batch", "_pos")
    _batch: Batch
    _pos: int


class ItemBatch(Sequence):
    """The items of one Batch, made when first looked at."""

    def __init__(self, batch: Batch):
        self.batch = batch
        self._items: dict[int, Item] = {}

    def __len__(self) -> int:
        return self.batch.size

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        i = operator.index(i)
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(f"item {i} out of range for a batch of {len(self)}")
        item = self._items.get(i)
        if item is None:
            # default_collate looks at item 0 only (then hands the batch back whole); whoever asks for a
            # second item in the main process gets all the rest made at once
            if i > 0 and not runtime.in_worker():
                self._items = {**dict(enumerate(self.batch.items())), **self._items}
                return self._items[i]
            item = self._items[i] = self.batch.item(i)
        return item


def deliver(batch: Batch) -> dict:
    """What a Batch becomes when it leaves the dataset: in a DataLoader worker, what crosses to the main
    process (`Batch.for_transport`); in the main process, the collated dict."""
    return batch.for_transport() if runtime.in_worker() else batch.collated()


def as_is(batch):
    """The DataLoader's collate_fn for whole batches a dataset built (tensors already): the batch as it is, not
    walked key by key and string by string as torch's default_convert does."""
    return batch


def collate_items(batch, *, collate_fn_map=None):
    """default_collate for Items: the whole batch they came from when they are exactly its items, in order."""
    source = batch.batch if isinstance(batch, ItemBatch) else batch[0]._batch
    if isinstance(batch, ItemBatch) or (
        len(batch) == source.size
        and all(isinstance(x, Item) and x._batch is source and x._pos == i for i, x in enumerate(batch))
    ):
        return deliver(source)
    return runtime.collate_plain([dict(x) for x in batch], collate_fn_map=collate_fn_map)


# ---------------------------------------------------------------------------------------------- transport
@dataclass(frozen=True)
class TensorSharing:
    """How a DataLoader worker shares the tensors it sends: "file_descriptor" (torch's default: one
    descriptor handed over a socket per batch), "file_system" (one name per batch, ~7% more batches/s with 2
    workers on 2 cores), or "auto": file descriptors for the worker's first `warmup` batches, then the file
    system. Not from the start, because starting a worker's torch_shm_manager takes ~0.15 s holding its GIL,
    which would delay the run's first batch by that much. "auto" uses $EPISODIC_WORKER_SHARING after the
    warm-up (default file_system)."""

    strategy: str = "auto"
    warmup: int = 2

    def __post_init__(self):
        if self.strategy not in ("auto", *config.SHARING_STRATEGIES):
            raise ValueError(f"sharing must be 'auto', 'file_system' or 'file_descriptor', got {self.strategy!r}")

    def before_batch(self, batches_sent: int) -> None:
        """Called in the worker before it shares its batch number `batches_sent` (0-based)."""
        if self.strategy != "auto":
            if batches_sent == 0:
                runtime.set_tensor_sharing(self.strategy)
        elif batches_sent == self.warmup:
            runtime.set_tensor_sharing(config.worker_sharing())


class _SharedBlocks:
    """Counts the batches this process has shared (reset in a forked child)."""

    def __init__(self):
        self.sent = 0
        runtime.after_fork(self)

    def _after_fork(self) -> None:
        self.sent = 0


_SHARED = _SharedBlocks()


def make_batch(build: Callable[[str], dict], return_uint8: bool = False, sharing: TensorSharing | None = None) -> Batch:
    """The Batch of `build(frame_dtype)` (a `gather`: tensors placed by `memory.place`), frames float32 in
    [0, 1] (uint8 with `return_uint8`) converted in the decoding pass, in whatever process builds it. In a
    DataLoader worker, the batch's block is shared as `sharing` says (default "auto")."""
    if runtime.in_worker():
        (sharing or TensorSharing()).before_batch(_SHARED.sent)
        _SHARED.sent += 1
    return Batch(build("uint8" if return_uint8 else "float32"))


def unbatch(batch: Batch, transforms: Callable | None = None, camera_keys: Sequence[str] = ()) -> Sequence[dict]:
    """The items of a batch: made on demand (default_collate then returns the batch whole), or, with
    transforms, transformed one by one."""
    if transforms is None:
        return ItemBatch(batch)
    items = [dict(batch.item(b)) for b in range(batch.size)]
    for item in items:
        for k in camera_keys:
            if k in item:
                item[k] = transforms(item[k])
    return items


runtime.register_collate(Item, collate_items)
runtime.stop_workers_at_exit()
