"""`StreamingMixtureDataset`: a weighted mixture streamed episode by episode (docs/mixtures.md), a
`streaming.StreamingDataset` over the mixture's epochs (`epochs.MixtureEpochs`) and its entries' engines."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

import numpy as np

from ..counters import Counters, Tally
from ..mixture.sampling import build_sampler
from ..storage.fetch import FetchPolicy
from ..video.output import FrameOutput, check_image_size
from .epochs import MixtureEpochs
from .facts import MixtureFacts
from .gpu_frames import gpu_setup
from .item_layout import mixture_layout
from .mixture import mixture_side
from .mixture_entry import EntryEngines
from .sides import SplitSides
from .stream_options import UNSET, StreamOptions, stream_options
from .streaming import StreamingDataset, local_for_gpu

__all__ = ["StreamingMixtureDataset"]


class StreamingMixtureDataset(MixtureFacts, SplitSides, StreamingDataset):
    """Items of a weighted mixture, streamed episode by episode from all entries: whole episodes of every entry
    per epoch (`epochs.MixtureEpochs`), everything else as a single dataset streams (plan, exact and elastic
    resume, `loader()`), items in the mixture's layout, each equal to `MixtureDataset`'s for the same frame.

    `spec`: a `MixtureSpec`, a spec dict or file, or a `PreflightReport`. `image_size`/`resize_mode`,
    `return_uint8`, `image_transforms` as in `MixtureDataset`; the streaming arguments as in
    `StreamingLeRobotDataset` (`StreamOptions`, or `options=` one whole); `depth_output_unit` as in `MixtureDataset`.
    `on_change`: what `load_state_dict`
    does with a state saved under another mixture ("continue" or "refuse"). `split` and `eval_dataset()` as in
    `MixtureDataset`.
    """

    epochs: MixtureEpochs

    def __init__(
        self,
        spec,
        *,
        seed: int = 0,
        shuffle: bool = True,
        episode_pool_size: int = UNSET,
        image_size: Sequence[int] | None = None,
        resize_mode: str = "stretch",
        return_uint8: bool = False,
        image_transforms: Callable | None = None,
        rank: int | None = None,
        world_size: int | None = None,
        cache_dir: str | os.PathLike | None = None,
        chunk_size: int = UNSET,
        prefetch_episodes: int = UNSET,
        prefetch_threads: int = UNSET,
        tabular_block: int = UNSET,
        mirror_max_bytes: int = UNSET,
        decoder_cache_size: int | None = UNSET,
        fetch_policy: FetchPolicy | None = None,
        on_error: str | None = None,
        concurrency: int = 16,
        on_change: str = "continue",
        options: StreamOptions | None = None,
        cache_max_bytes: int = UNSET,
        decode_device: str = "cpu",
        cpu_fallback=False,
        gpu_decoders: int | None = None,
        split: str = "train",
        depth_output_unit: str = "mm",
    ):
        self.remember(locals())
        options = stream_options(
            options,
            cache_max_bytes,
            episode_pool_size=episode_pool_size,
            chunk_size=chunk_size,
            prefetch_episodes=prefetch_episodes,
            prefetch_threads=prefetch_threads,
            tabular_block=tabular_block,
            mirror_max_bytes=mirror_max_bytes,
            decoder_cache_size=decoder_cache_size,
            fetch=UNSET if fetch_policy is None else fetch_policy,
        )
        mixture_side(self, spec, split, on_error, concurrency, image_size, resize_mode, depth_output_unit)
        self.sampler, used = build_sampler(self.report, seed=seed, shuffle=shuffle)
        assert used == [e.index for e in self.layout.entries], (used, self.layout.entries)
        counters = Counters()
        self.engines = EntryEngines(self.report, self.layout, counters, None, cache_dir)  # specs only
        item_layout = mixture_layout(self.layout)
        gpu_keys, gpu = gpu_setup(
            item_layout,
            self.engines.entries(),
            decode_device,
            cpu_fallback,
            gpu_decoders,
            FrameOutput(size=check_image_size(image_size, resize_mode), resize_mode=resize_mode),
            counters,
        )
        local_for_gpu(gpu, self.engines.sources)
        self.engines.decode_on_gpu(gpu_keys)
        self.items_per_entry = Tally(len(self.layout.entries))
        self.target_shares = np.asarray([self.report.entries[e.index].share for e in self.layout.entries])
        self.delta_indices = None
        super().__init__(
            MixtureEpochs(self.sampler, on_change),
            item_layout,
            self.engines.stream_entry,
            options,
            seed=seed,
            shuffle=shuffle,
            return_uint8=return_uint8,
            image_transforms=image_transforms,
            rank=rank,
            world_size=world_size,
            cache_dir=cache_dir,
            cameras=self.engines.camera_sizes(),
            tally=self.items_per_entry,
            counters=counters,
        )
        self.gpu = gpu

    @property
    def changes(self) -> list[str]:
        """What the last `load_state_dict` found changed in the mixture (`order.mixture_state`)."""
        return self.epochs.changes

    def epoch_slots(self, epoch: int):
        """The whole episodes streaming epoch `epoch` takes, entry by entry (`order.epoch_episodes`)."""
        return self.epochs.epoch(epoch, self.seed)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.num_entries} entries, {self.num_frames} frames, pool "
            f"{self.episode_pool_size}, cameras={list(self.layout.cameras)})"
        )
