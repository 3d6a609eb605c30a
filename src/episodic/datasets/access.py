"""Map-style access shared by the single-dataset and mixture datasets: a batch of positions is built whole
(`build(indices, dtype)`, the dataset's own), made a `collate.Batch`, and handed out as one dict (`get_batch`),
as items for torch's DataLoader (`__getitem__`, `__getitems__`), or whole to a DataLoader with batch_size=None
(`BatchedView`, what the datasets' `loader()` uses)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch

from .collate import Batch, TensorSharing, deliver, make_batch, unbatch

if TYPE_CHECKING:
    from ..counters import Counters
    from .gpu_frames import GpuFrames


def transformed_keys(ds) -> list[str]:
    """The camera keys of dataset `ds` its image transforms apply to: every camera but the depth cameras
    (`ds.depth_keys`), as LeRobot 0.6's."""
    depth = set(getattr(ds, "depth_keys", ()))
    return [k for k in ds.camera_keys if k not in depth]


def finish_batch(ds, batch: dict, transforms: bool = True) -> dict:
    """A collated batch of dataset `ds` (map-style or streaming) as the user gets it, in the main process:
    frames decoded on the GPU when `ds.gpu` decodes there, `ds.image_transforms` applied with `transforms`."""
    if ds.gpu is not None:
        batch = ds.gpu.finish(batch, ds.camera_keys, ds.return_uint8)
    if transforms and ds.image_transforms is not None:
        for k in transformed_keys(ds):
            batch[k] = torch.stack([ds.image_transforms(x) for x in batch[k]])
    return batch


class BatchAccess:
    """Needs `build(indices, dtype) -> dict` (a placed batch), `camera_keys`, `return_uint8`,
    `image_transforms`, `counters` and `gpu` (a `gpu_frames.GpuFrames` with decode_device="cuda", else None)."""

    build: Callable[[Sequence[int] | np.ndarray, str], dict]
    camera_keys: Sequence[str]
    return_uint8: bool
    image_transforms: Callable | None
    counters: Counters
    gpu: GpuFrames | None = None

    def __len__(self) -> int:
        raise NotImplementedError  # the dataset's

    def get_batch(self, indices: Sequence[int] | np.ndarray) -> dict:
        """One dict of batched tensors for these positions (text values are lists of strings)."""
        return self.finish(self._batch(indices).collated())

    def finish(self, batch: dict, transforms: bool = True) -> dict:
        return finish_batch(self, batch, transforms)

    def _batch(self, indices, sharing: TensorSharing | None = None) -> Batch:
        t0 = time.perf_counter()
        # frames for the GPU leave as uint8 (references, and image features a quarter of the bytes)
        batch = make_batch(
            lambda dtype: self.build(indices, dtype), self.return_uint8 or self.gpu is not None, sharing=sharing
        )
        self.counters.add(item_seconds=time.perf_counter() - t0, items_built=batch.size)
        return batch

    def __getitem__(self, idx: int) -> dict:
        if not isinstance(idx, (int, np.integer)) and not (torch.is_tensor(idx) and idx.ndim == 0):
            raise TypeError(f"index must be an int, got {type(idx).__name__}")
        return dict(self.__getitems__([int(idx)])[0])

    def __getitems__(self, indices: Sequence[int]) -> Sequence[dict]:
        """Items for a DataLoader batch, built together (one decode pass per file)."""
        if self.gpu is not None:  # GPU frames are decoded here, in the main process (a worker refuses)
            return unbatch(
                Batch(self.finish(self._batch(indices).collated(), transforms=False)),
                self.image_transforms,
                transformed_keys(self),
            )
        return unbatch(self._batch(indices), self.image_transforms, transformed_keys(self))


class BatchedView(torch.utils.data.Dataset):
    """A `BatchAccess` dataset as its `loader()` hands it to a DataLoader: one whole batch per sampler entry."""

    def __init__(self, ds: BatchAccess, sharing: TensorSharing):
        self.ds, self.sharing = ds, sharing

    def __len__(self) -> int:
        return len(self.ds)

    def __getitem__(self, indices):
        if self.ds.image_transforms is not None and self.ds.gpu is None:
            return self.ds.get_batch(indices)
        return deliver(self.ds._batch(indices, self.sharing))  # GPU frames: `MapLoader` finishes it
