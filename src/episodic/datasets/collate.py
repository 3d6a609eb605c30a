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

import torch
from torch.utils.data import get_worker_info


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
