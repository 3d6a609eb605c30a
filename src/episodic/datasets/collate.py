"""Batches that skip per-item re-collation in DataLoader workers.

`LeRobotDataset.__getitems__` builds a whole batch at once (vectorised gathers, one decode pass per file)
and hands the DataLoader per-item dicts, as LeRobot's items are. Those items are `Item`s: plain dicts that
remember the batch they are views of. When torch's `default_collate` receives exactly the items of one
`__getitems__` call, in order, it returns that batch instead of stacking every key again: same keys, dtypes,
shapes and values, without a second copy. In DataLoader workers the batch tensors are allocated in shared
memory from the start, and the worker shares them through the file system (not one file descriptor
hand-shake per tensor), which is what limits throughput on small batches. Set
EPISODIC_WORKER_SHARING=file_descriptor to keep torch's default.
"""

from __future__ import annotations

import os

import numpy as np
import torch
from torch.utils.data import get_worker_info


class Batch(dict):
    """A batched item dict; `wire` holds uint8 shared-memory copies of float cameras for the trip from a
    worker to the main process."""

    __slots__ = ("wire",)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.wire: dict = {}

    def for_transport(self) -> dict:
        """The dict a worker sends: float cameras travel as uint8 and turn into float32 on arrival."""
        return {k: (UnitFloat(self.wire[k]) if k in self.wire else (list(v) if k == "task" else v)) for k, v in self.items()}


def unit_float(u8: torch.Tensor) -> torch.Tensor:
    """uint8 -> float32 in [0, 1], bit-identical to `u8.float() / 255`."""
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


class Item(dict):
    """One item of a batch (a dict; `_batch` and `_pos` are bookkeeping for collation)."""

    __slots__ = ("_batch", "_pos")


def items_of(batch: dict, size: int) -> list[Item]:
    items = []
    for b in range(size):
        item = Item((k, v[b]) for k, v in batch.items())
        item._batch, item._pos = batch, b
        items.append(item)
    return items


def collate_items(batch, *, collate_fn_map=None):
    first = batch[0]
    source = first._batch
    if len(batch) == len(source["task"]) and all(isinstance(x, Item) and x._batch is source and x._pos == i
                                                  for i, x in enumerate(batch)):
        if get_worker_info() is not None and isinstance(source, Batch):
            return source.for_transport()
        return {k: (list(v) if k == "task" else v) for k, v in source.items()}
    from torch.utils.data._utils.collate import collate

    return collate([dict(x) for x in batch], collate_fn_map=collate_fn_map)


def register_collate() -> None:
    try:
        from torch.utils.data._utils.collate import default_collate_fn_map
    except ImportError:  # an older/newer torch without the dispatch table: items still collate as dicts
        return
    default_collate_fn_map.setdefault(Item, collate_items)


_worker_pid = None


def in_worker() -> bool:
    """True inside a DataLoader worker; the first call there also selects file-system tensor sharing."""
    global _worker_pid
    if get_worker_info() is None:
        return False
    if _worker_pid != os.getpid():
        _worker_pid = os.getpid()
        if os.environ.get("EPISODIC_WORKER_SHARING", "file_system") == "file_system":
            torch.multiprocessing.set_sharing_strategy("file_system")
    return True


register_collate()
