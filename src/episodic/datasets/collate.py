"""Batches that skip per-item re-collation, and cross from DataLoader workers cheaply.

Datasets build a whole batch at once (vectorised gathers, one decode pass per file) as a `Batch`: the
tensors of all items stacked, cameras kept as uint8 until someone needs float32. The DataLoader still gets
per-item dicts, as LeRobot's items are: `Item`s, made on demand from the batch (`ItemBatch`). When torch's
`default_collate` receives exactly the items of one batch, in order, it returns that batch instead of
stacking every key again: same keys, dtypes, shapes and values.

In a DataLoader worker, the batch's tensors are views of ONE shared-memory block (one mapping to share, not
one per key), float cameras travel as their uint8 frames (a quarter of the bytes) and become float32 when
the main process unpickles them (`UnitFloat`), and after its first batches the worker shares tensors through
the file system rather than one file-descriptor hand-shake per batch (see `worker_sharing`). Set
EPISODIC_WORKER_SHARING=file_descriptor to keep torch's default there.
"""

from __future__ import annotations

import operator
import os
from collections.abc import Sequence

import numpy as np
import torch
from torch.utils.data import get_worker_info


def unit_float(u8: torch.Tensor) -> torch.Tensor:
    """uint8 -> float32 in [0, 1], bit-identical to `u8.float() / 255` (LeRobot's conversion)."""
    out = torch.empty(u8.shape, dtype=torch.float32)
    np.divide(u8.numpy(), np.float32(255), out=out.numpy(), dtype=np.float32)
    return out


class UnitFloat:
    """A uint8 camera batch that unpickles as its float32 [0, 1] tensor (in the receiving process)."""

    __slots__ = ("u8",)

    def __init__(self, u8: torch.Tensor):
        self.u8 = u8

    def __reduce__(self):
        return unit_float, (self.u8,)


class Batch:
    """Batched tensors of several items, in item key order; keys in `to_float` hold uint8 frames that users
    see as float32 in [0, 1]. 'task' is a list of strings."""

    __slots__ = ("tensors", "to_float", "size", "_floats")

    def __init__(self, tensors: dict, to_float: set[str] | frozenset = frozenset()):
        self.tensors, self.to_float = tensors, set(to_float)
        self.size = len(tensors["task"])
        self._floats: dict = {}

    def float(self, key: str) -> torch.Tensor:
        """The float32 frames of camera `key`, converted once."""
        if key not in self._floats:
            self._floats[key] = unit_float(self.tensors[key])
        return self._floats[key]

    def collated(self) -> dict:
        """What default_collate would make of the items."""
        return {k: (self.float(k) if k in self.to_float else list(v) if k == "task" else v) for k, v in self.tensors.items()}

    def for_transport(self) -> dict:
        """The same, for a worker to send: float cameras become float32 in the receiving process."""
        return {k: (UnitFloat(v) if k in self.to_float else list(v) if k == "task" else v) for k, v in self.tensors.items()}

    def item(self, b: int) -> "Item":
        # in a worker, items are rarely looked at (the batch travels whole): convert only this one
        per_item = get_worker_info() is not None
        item = Item((k, (unit_float(v[b]) if per_item else self.float(k)[b]) if k in self.to_float else v[b])
                    for k, v in self.tensors.items())
        item._batch, item._pos = self, b
        return item

    def items(self) -> list["Item"]:
        """All items (float cameras converted), with one unbind per key rather than one index per item."""
        cols = [(k, self.float(k).unbind(0) if k in self.to_float else v.unbind(0) if k != "task" else v)
                for k, v in self.tensors.items()]
        out = []
        for b in range(self.size):
            item = Item((k, c[b]) for k, c in cols)
            item._batch, item._pos = self, b
            out.append(item)
        return out


class Item(dict):
    """One item (a plain dict of tensors) that remembers the batch it comes from."""

    __slots__ = ("_batch", "_pos")


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
            if i > 0 and get_worker_info() is None:
                self._items = {**dict(enumerate(self.batch.items())), **self._items}
                return self._items[i]
            item = self._items[i] = self.batch.item(i)
        return item


def collate_items(batch, *, collate_fn_map=None):
    """default_collate for Items: the whole batch they came from when they are exactly its items, in order."""
    source = batch.batch if isinstance(batch, ItemBatch) else batch[0]._batch
    if isinstance(batch, ItemBatch) or (
            len(batch) == source.size and all(isinstance(x, Item) and x._batch is source and x._pos == i
                                              for i, x in enumerate(batch))):
        return source.for_transport() if get_worker_info() is not None else source.collated()
    from torch.utils.data._utils.collate import collate

    return collate([dict(x) for x in batch], collate_fn_map=collate_fn_map)


def register_collate() -> None:
    try:
        from torch.utils.data._utils.collate import default_collate_fn_map
    except ImportError:  # a torch without the dispatch table: items still collate as plain dicts
        return
    default_collate_fn_map.setdefault(Item, collate_items)


_worker = {"pid": None, "batches": 0}


def in_worker() -> bool:
    """True inside a DataLoader worker."""
    return get_worker_info() is not None


def worker_sharing(batches: int = 2) -> None:
    """Called once per batch a worker shares. After its first `batches` batches, the worker shares tensors
    through the file system (one name per batch) rather than torch's default, a file descriptor handed over
    through a socket per batch (~7% more batches/s with 2 workers on 2 cores). Not from the start: starting
    the worker's torch_shm_manager takes ~0.15 s holding the worker's GIL, which also stalls the hand-over of
    the batch before (the parent fetches its descriptor from a thread of the worker), so switching at once
    would delay the run's first batch by that much."""
    if _worker["pid"] != os.getpid():
        _worker.update(pid=os.getpid(), batches=0)
    _worker["batches"] += 1
    if _worker["batches"] == batches + 1 and os.environ.get("EPISODIC_WORKER_SHARING", "file_system") == "file_system":
        torch.multiprocessing.set_sharing_strategy("file_system")


register_collate()
