"""Map-style access shared by the single-dataset and mixture datasets: a batch of positions is built whole
(`build(indices, dtype)`, the dataset's own), made a `collate.Batch`, and handed out as one dict (`get_batch`),
as items for torch's DataLoader (`__getitem__`, `__getitems__`), or whole to a DataLoader with batch_size=None
(`BatchedView`, what the datasets' `loader()` uses)."""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np
import torch

from .collate import Batch, TensorSharing, deliver, make_batch, unbatch


class BatchAccess:
    """Needs `build(indices, dtype) -> dict` (a placed batch), `camera_keys`, `return_uint8`,
    `image_transforms` and `counters`."""

    def get_batch(self, indices: Sequence[int] | np.ndarray) -> dict:
        """One dict of batched tensors for these positions (text values are lists of strings)."""
        batch = self._batch(indices).collated()
        if self.image_transforms is not None:
            for k in self.camera_keys:
                batch[k] = torch.stack([self.image_transforms(x) for x in batch[k]])
        return batch

    def _batch(self, indices, sharing: TensorSharing | None = None) -> Batch:
        t0 = time.perf_counter()
        batch = make_batch(lambda dtype: self.build(indices, dtype), self.return_uint8,
                           sharing=sharing)
        self.counters.add(item_seconds=time.perf_counter() - t0, items_built=batch.size)
        return batch

    def __getitem__(self, idx: int) -> dict:
        if not isinstance(idx, (int, np.integer)) and not (torch.is_tensor(idx) and idx.ndim == 0):
            raise TypeError(f"index must be an int, got {type(idx).__name__}")
        return dict(self.__getitems__([int(idx)])[0])

    def __getitems__(self, indices: Sequence[int]) -> Sequence[dict]:
        """Items for a DataLoader batch, built together (one decode pass per file)."""
        return unbatch(self._batch(indices), self.image_transforms, self.camera_keys)


class BatchedView(torch.utils.data.Dataset):
    """A `BatchAccess` dataset as its `loader()` hands it to a DataLoader: one whole batch per sampler entry."""

    def __init__(self, ds: BatchAccess, sharing: TensorSharing):
        self.ds, self.sharing = ds, sharing

    def __len__(self) -> int:
        return len(self.ds)

    def __getitem__(self, indices):
        if self.ds.image_transforms is not None:
            return self.ds.get_batch(indices)
        return deliver(self.ds._batch(indices, self.sharing))
