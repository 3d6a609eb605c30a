"""A map-style dataset over a weighted mixture of LeRobot datasets (docs/mixtures.md, "Mixture datasets").

`MixtureDataset(spec)` preflights the spec (or takes a `PreflightReport`), fixes the shared item layout
(`mixture.layout`), and orders the mixture by its `MixtureSampler` (`mixture.build_sampler`). Indices are the
sampler's flat indices: the entries' selected frames side by side, like a ``ConcatDataset`` of the entries
(``len(ds)`` of them, every one valid, so a plain ``DataLoader(ds, shuffle=True)`` draws uniformly over frames;
`loader()` follows the mixture's weighted order);
`get_batch(indices)` groups them by entry and gathers the batch in the shared layout (`gather`, the item table
`item_layout.mixture_layout`) from each entry's rows (its fps, tolerance, windows, cameras, selected episodes:
`mixture_entry`), in the order of `indices`. An entry's rows are read on first use in each process, so building
the dataset reads no data file and a process holds O(episodes) until it loads entries.

`loader()` is a DataLoader whose batches come from a `MixtureBatchSampler` (sharding, exact and elastic resume
of `order.EpisodicBatchSampler`, the mixture's state in the checkpoint) through a `TrackedLoader`, with whole
batches built in the workers.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

import numpy as np
import torch

from ..counters import Counters, Tally
from ..mixture.checking.report import PreflightReport
from ..mixture.layout import MixtureLayout
from ..mixture.sampling import build_sampler
from ..order.mixture_batch import MixtureBatchSampler
from ..video import DecoderCache
from ..video.output import FrameOutput, check_image_size
from .access import BatchAccess
from .facts import MixtureFacts
from .gather import gather
from .gpu_frames import gpu_setup
from .item_layout import mixture_layout
from .loader import MapLoader
from .mixture_entry import MMAP_MIN_BYTES, EntryEngines
from .sides import SplitSides

__all__ = ["MixtureDataset", "MixtureLoader", "load_report", "mixture_side"]


def load_report(spec, on_error: str | None = None, concurrency: int = 16) -> PreflightReport:
    """`spec` as a preflight report: a report as it is, else preflight of the spec (object, dict or file)."""
    if isinstance(spec, PreflightReport):
        return spec
    from ..mixture.checking import preflight

    return preflight(spec, on_error=on_error, concurrency=concurrency)


def mixture_side(
    dataset,
    spec,
    split: str,
    on_error: str | None,
    concurrency: int,
    image_size,
    resize_mode: str,
    depth_unit: str = "mm",
) -> None:
    """Set up `dataset` (a mixture dataset) as side `split` of `spec`'s mixture: ``full_report`` (the checked
    mixture), ``report`` (its side, `split_sides.side_report`: what the order and the rows hold),
    ``stats_report`` (the training side: normalisation statistics are the same on both sides), ``layout`` (the
    whole mixture's item layout, with the side's entries), ``eval_split`` and ``split``."""
    from ..mixture.checking.split_sides import side_report

    full = dataset.full_report = load_report(spec, on_error, concurrency)
    dataset._given["spec"] = full  # the other side reuses the checked mixture (no second preflight)
    dataset.report = side_report(full, split)
    dataset.stats_report = side_report(full, "train")
    dataset.eval_split, dataset.split = full.spec.eval_split, split
    layout = MixtureLayout.from_report(full, image_size, resize_mode, depth_unit)
    dataset.layout = layout.restricted([r.index for r in dataset.report.entries if r.status == "ok"])


class MixtureDataset(BatchAccess, MixtureFacts, SplitSides, torch.utils.data.Dataset):
    """Items of a weighted mixture of datasets, all in one layout (see `mixture.layout` for the keys).

    Args:
        spec: a `MixtureSpec`, a spec dict or file, or a `PreflightReport` (preflight is not run again).
        seed, shuffle: the order's (`order.MixtureSampler`); `drop_n_first_frames`/`drop_n_last_frames` per episode.
        image_size: (H, W) every camera is brought to while decoding (needed when cameras come in several
            sizes); `resize_mode`: ``stretch`` (default) or ``letterbox`` (`episodic.video.output`).
        return_uint8: cameras as uint8 instead of float32 in [0, 1]. `image_transforms`: applied per camera frame.
        on_error, concurrency: preflight's, when `spec` is not a report.
        cache_dir: episodic's cache (memory-mapped columns under ``tabular/``); `mmap_min_bytes`: entries with
            fewer bytes of columns are kept in RAM (default 64 KiB, `mixture_entry.MMAP_MIN_BYTES`; 0: every entry
            memory-mapped).
        decoder_cache_size: open video decoders per process, shared by all entries (default: one per video file
            of the mapped cameras, within the process's decoder budget: `EntryEngines.decoder_cache_rule`).
        decode_device, cpu_fallback, gpu_decoders: as in `EpisodicDataset` (every entry's cameras are checked).
        split: with the spec's ``eval_split``, which side this dataset is: "train" (default) or "eval";
            `eval_dataset()` builds the other (`datasets.sides`; `mixture.checking.split_sides`).
        depth_output_unit: depth camera roles' distances in "mm" (default) or "m" (`mixture.layout`).
    """

    def __init__(
        self,
        spec,
        *,
        seed: int = 0,
        shuffle: bool = True,
        image_size: Sequence[int] | None = None,
        resize_mode: str = "stretch",
        return_uint8: bool = False,
        image_transforms: Callable | None = None,
        on_error: str | None = None,
        concurrency: int = 16,
        cache_dir: str | os.PathLike | None = None,
        mmap_min_bytes: int = MMAP_MIN_BYTES,
        decoder_cache_size: int | None = None,
        drop_n_first_frames: int = 0,
        drop_n_last_frames: int = 0,
        decode_device: str = "cpu",
        cpu_fallback=False,
        gpu_decoders: int | None = None,
        split: str = "train",
        depth_output_unit: str = "mm",
    ):
        self.remember(locals())
        mixture_side(self, spec, split, on_error, concurrency, image_size, resize_mode, depth_output_unit)
        self.item_layout = mixture_layout(self.layout)
        self.sampler, used = build_sampler(
            self.report,
            seed=seed,
            shuffle=shuffle,
            drop_n_first_frames=drop_n_first_frames,
            drop_n_last_frames=drop_n_last_frames,
        )
        assert used == [e.index for e in self.layout.entries], (used, self.layout.entries)
        self.counters = Counters()
        self.engines = EntryEngines(self.report, self.layout, self.counters, None, cache_dir, mmap_min_bytes)
        self.decoders = self.engines.decoders = DecoderCache(
            max_open=self.engines.decoder_cache_rule() if decoder_cache_size is None else decoder_cache_size,
            counters=self.counters,
        )
        gpu_keys, self.gpu = gpu_setup(
            self.item_layout,
            self.engines.entries(),
            decode_device,
            cpu_fallback,
            gpu_decoders,
            FrameOutput(size=check_image_size(image_size, resize_mode), resize_mode=resize_mode),
            self.counters,
        )
        self.engines.decode_on_gpu(gpu_keys)
        self.items_per_entry = Tally(len(self.layout.entries))
        self.return_uint8 = return_uint8
        self.image_transforms = image_transforms
        self.camera_keys = self.layout.camera_keys
        self.depth_keys = self.item_layout.depth_keys
        self.target_shares = np.asarray([self.report.entries[e.index].share for e in self.layout.entries])

    # ------------------------------------------------------------------ sizes
    def __len__(self) -> int:
        """How many flat indices (every entry's selected frames, minus drop_n_first/last_frames, side by side: each
        index in ``range(len(ds))`` is an item); an epoch of the weighted order is `len(self.sampler)` samples."""
        return self.sampler.num_indices

    # ------------------------------------------------------------------ items
    def build(self, indices: Sequence[int] | np.ndarray, dtype: str = "uint8") -> dict:
        """The batch of flat indices, in their order, as placed tensors (`gather`), cameras
        (B, [T,] C, H, W) of `dtype` ("uint8", or "float32" in [0, 1])."""
        flat = np.asarray(indices).reshape(-1)
        if flat.dtype.kind not in "iu" and len(flat):
            raise TypeError(f"indices must be integers, got {flat.dtype} values {flat[:5].tolist()}")
        flat = flat.astype(np.int64, copy=False)
        if len(flat) and (flat.min() < 0 or flat.max() >= len(self)):
            raise IndexError(
                f"index {int(flat[(flat < 0) | (flat >= len(self))][0])} out of range for a mixture of "
                f"{len(self)} flat indices"
            )
        slots, rows = self.sampler.split(flat)
        used, part = np.unique(slots, return_inverse=True)
        part = part.reshape(-1)
        positions = self.engines.positions_of(slots, rows, used, part)
        out = gather(self.item_layout, [self.engines.rows(s) for s in used.tolist()], part, positions, dtype)
        self.items_per_entry.add(slots)
        return out

    # ------------------------------------------------------------------ order and loading
    def batch_sampler(
        self,
        batch_size: int,
        *,
        rank: int | None = None,
        world_size: int | None = None,
        drop_last: bool = False,
        on_change: str = "continue",
    ) -> MixtureBatchSampler:
        """Rank `rank`'s batches of this mixture's order (`order.MixtureBatchSampler`)."""
        return MixtureBatchSampler(
            self.sampler, batch_size, rank=rank, world_size=world_size, drop_last=drop_last, on_change=on_change
        )

    def loader(
        self,
        batch_size: int = 32,
        num_workers: int = 0,
        *,
        rank: int | None = None,
        world_size: int | None = None,
        drop_last: bool = False,
        on_change: str = "continue",
        sharing: str = "auto",
        **kwargs,
    ) -> MapLoader:
        """A DataLoader whose workers build whole batches of this rank's share of the order; iterate it as the
        training loop (each batch handed out counts as consumed); `state_dict()`/`load_state_dict()` resume
        exactly, also on another number of ranks or workers."""
        sampler = self.batch_sampler(
            batch_size, rank=rank, world_size=world_size, drop_last=drop_last, on_change=on_change
        )
        return MapLoader(self, sampler, num_workers, sharing, **kwargs)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.num_entries} entries, {self.num_frames} frames, cameras="
            f"{list(self.layout.cameras)}, state/action dims {self.layout.state_dim}/{self.layout.action_dim})"
        )


MixtureLoader = MapLoader  # the name earlier versions used
