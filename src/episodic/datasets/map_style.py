"""Map-style datasets: `EpisodicDataset` (native, batched) and `LeRobotDataset` (drop-in for LeRobot's)."""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from .. import config
from ..counters import Counters
from ..format.metadata import DatasetMetadata
from ..order.eval_split import EvalSplit
from ..storage.fetch import FetchPolicy
from ..storage.resolve import resolve_source
from ..storage.source import Source, is_url
from ..tabular import load_columns
from ..tabular.resample import Resampling
from ..video import DecoderCache
from ..video.decoder_cache import CacheRule
from .access import BatchAccess
from .decode import EntryFrames, camera_files
from .facts import DatasetFacts
from .gather import Rows, gather
from .gpu_frames import gpu_setup
from .item_layout import single_layout
from .item_spec import ItemSpec, select_episodes
from .loader import MapLoader
from .sides import SplitSides, checked_split


class EpisodicDataset(BatchAccess, DatasetFacts, SplitSides, torch.utils.data.Dataset):
    """Random access to the frames of a LeRobot-format dataset, one batch at a time.

    `dataset.get_batch(indices)` returns one dict of batched tensors (cameras (B, [T,] C, H, W)) built with
    vectorised gathers and one decode pass per video file; `dataset[i]` returns one item; `dataset.loader()`
    builds a DataLoader that fetches whole batches in its workers.

    Args:
        source: a local directory, an fsspec URL, or a Hub repo id (fetched into the cache).
        episodes: episodes to use (any order; rows come in ascending episode order).
        delta_timestamps: {key: [seconds, ...]} windows; each item gets `<key>_is_pad` masks.
        video_keys: cameras to decode (default all); others are never opened.
        return_uint8: cameras as uint8 instead of float32 in [0, 1].
        image_size: (H, W): every camera's frames scaled to this size while decoding (default: the
            recorded size). `resize_mode` "stretch" (default; aspect ratio not kept) or "letterbox" (aspect
            ratio kept, centred, zero bars). See `episodic.video.output`.
        cache_dir: episodic's cache (default $EPISODIC_CACHE or ~/.cache/episodic): remote files under
            `files/`, memory-mapped tabular columns (datasets of 1 GiB of columns and more) under `tabular/`.
        decoder_cache_size: open video decoders per process (default: one per video file of the selected
            episodes' cameras, within the process's decoder budget, at least 32:
            `video.decoder_cache.default_cache_size`).
        cache_max_bytes: size of the whole-file cache of remote files (least recently used files evicted
            beyond it; default $EPISODIC_CACHE_MAX_BYTES or 32 GiB).
        fetch_policy: timeouts and retries of remote reads (`storage.fetch.FetchPolicy`; default from
            $EPISODIC_FETCH_TIMEOUT, $EPISODIC_CONNECT_TIMEOUT, $EPISODIC_RETRY_WINDOW).
        on_unknown_task: rows whose task_index the tasks table lacks (metadata drift): "warn" (default: loaded,
            their items' task is "", one `UnknownTaskWarning` naming the episodes and task indices) or "raise"
            (DatasetFormatError naming the file, episode and frame). `episodic validate` reports them either way.
        decode_device: "cpu" (default: frames decoded by PyAV where the batch is built) or "cuda"/"cuda:N":
            decoded by NVDEC in the main process into CUDA tensors, workers still reading, fetching and
            locating (`datasets.gpu_frames`; `pip install "episodic[gpu]"`). A camera NVDEC cannot decode is a
            `GpuDecodeError` here, unless `cpu_fallback` names it (True: every camera). `gpu_decoders`: decoder
            sessions in flight (default: the GPU's NVDEC engines, at most 8). Batches come from `get_batch` and
            `loader()`; a plain DataLoader over the dataset needs num_workers=0.
        eval_split: episodes held out for evaluation (`order.eval_split.EvalSplit`, a fraction, or a dict of its
            fields; per task, by episode); `split`: which side this dataset is, "train" (default) or "eval".
            `eval_dataset()` builds the other side (its own order and state; `datasets.sides`).
        target_fps: rows resampled to this fps (an int): items, windows, lengths and the order are in its frames
            (`tabular.resample`: cameras take the nearest frame); `resample`: {column: "nearest" | "previous" |
            "linear"} per numeric column (default nearest).
        depth_output_unit: depth cameras (`format.depth`) come out as float32 distances (1, H, W) in "mm"
            (default, as LeRobot 0.6) or "m", whatever `return_uint8`; image transforms skip them. Their statistics
            in the metadata's stats are brought to that unit (`DatasetMetadata.rescale_depth_stats`).
    """

    def __init__(
        self,
        source: str | os.PathLike,
        episodes: Sequence[int] | None = None,
        delta_timestamps: Mapping[str, Sequence[float]] | None = None,
        tolerance_s: float = 1e-4,
        video_keys: Sequence[str] | None = None,
        return_uint8: bool = False,
        image_transforms: Callable | None = None,
        revision: str | None = None,
        storage_options: dict | None = None,
        cache_dir: str | None = None,
        decoder_cache_size: int | None = None,
        cache_max_bytes: int | None = None,
        fetch_policy: FetchPolicy | None = None,
        image_size: Sequence[int] | None = None,
        resize_mode: str = "stretch",
        on_unknown_task: str = "warn",
        decode_device: str = "cpu",
        cpu_fallback=False,
        gpu_decoders: int | None = None,
        eval_split: EvalSplit | float | dict | None = None,
        split: str = "train",
        target_fps: int | None = None,
        resample: Mapping[str, str] | None = None,
        depth_output_unit: str = "mm",
        _source: Source | None = None,
    ):
        self.remember(locals())
        self.eval_split, self.split = checked_split(eval_split, split), split
        if _source is None:
            src = os.fspath(source)
            local_or_url = is_url(src) or Path(src).exists()
            _source = resolve_source(
                None if local_or_url else src,
                src if local_or_url else None,
                revision,
                episodes,
                video_keys,
                storage_options,
                cache_dir,
                policy=fetch_policy,
                cache_max_bytes=cache_max_bytes,
            )
        self.source = _source
        self.counters = Counters()
        if self.source.cache is not None:  # remote reads (retries, bytes, files) count as this dataset's
            self.source.cache.stats = self.counters
        self.meta: DatasetMetadata = self.source.load_metadata()
        self.spec = ItemSpec.build(
            self.meta,
            delta_timestamps,
            tolerance_s,
            video_keys,
            image_size,
            resize_mode,
            on_unknown_task=on_unknown_task,
            resampling=Resampling.of(target_fps, resample),
            depth_output_unit=depth_output_unit,
        )
        self.meta.rescale_depth_stats(depth_output_unit)
        cache_root = Path(cache_dir) if cache_dir is not None else config.cache_dir()  # tabular memory maps there
        columns = load_columns(
            self.meta,
            select_episodes(self.meta, episodes, self.eval_split, split),
            list(self.spec.data_keys),
            mmap_dir=cache_root / "tabular",
            open_file=None if self.source.is_local else self.source.open_for_read,
            unknown_tasks=self.spec.unknown_tasks,
        )
        columns = self.spec.resample(columns, self.meta)
        size: int | CacheRule | None = decoder_cache_size
        if size is None:  # sized in each process that decodes
            size = CacheRule(tuple(camera_files(self.meta, self.spec.video_keys, columns.episodes)))
        self.decoders = DecoderCache(max_open=size, counters=self.counters)
        self.layout = single_layout(self.spec, self.meta.info.features)
        gpu_keys, self.gpu = gpu_setup(
            self.layout,
            [(self.meta, self.spec, self.source, columns.episodes)],
            decode_device,
            cpu_fallback,
            gpu_decoders,
            self.spec.frames,
            self.counters,
        )
        self.spec = replace(self.spec, gpu_keys=gpu_keys)
        self.rows = Rows(0, columns, EntryFrames(self.spec, self.meta, self.source, self.decoders, self.counters))
        self.delta_timestamps = dict(delta_timestamps) if delta_timestamps else None
        self.tolerance_s = tolerance_s
        self.return_uint8 = return_uint8
        self.image_transforms = image_transforms
        self.camera_keys = self.spec.camera_keys
        self.depth_keys = self.spec.depth_keys

    @property
    def depth_output_unit(self) -> str:
        """The unit depth cameras' items (and their statistics) are in: "mm" or "m"."""
        return self.spec.depth_unit

    # ------------------------------------------------------------------ sizes
    def __len__(self) -> int:
        return len(self.rows.columns)

    @property
    def num_frames(self) -> int:
        return len(self.rows.columns)

    @property
    def num_episodes(self) -> int:
        return len(self.rows.columns.episodes)

    # ------------------------------------------------------------------ access
    def build(self, indices: Sequence[int] | np.ndarray, dtype: str = "uint8") -> dict:
        """The placed batch of these positions (negative ones count from the end), cameras (B, [T,] C, H, W) of
        `dtype` ("uint8", or "float32" in [0, 1]): `gather` over the dataset's rows."""
        rows = np.asarray(indices).reshape(-1)
        if rows.dtype.kind not in "iu" and len(rows):  # a float (1.7) or bool position is never a silent row 1
            raise TypeError(f"positions must be integers, got {rows.dtype} values {rows[:5].tolist()}")
        rows = rows.astype(np.int64, copy=False)
        n = len(self)
        if len(rows) and (rows.min() < -n or rows.max() >= n):
            raise IndexError(f"index {int(rows[(rows < -n) | (rows >= n)][0])} out of range for {n} frames")
        rows = np.where(rows < 0, rows + n, rows)
        return gather(self.layout, [self.rows], np.zeros(len(rows), np.int64), rows, dtype)

    def loader(
        self,
        batch_size: int = 32,
        shuffle: bool = True,
        num_workers: int = 0,
        seed: int = 0,
        drop_last: bool = False,
        sharing: str = "auto",
        *,
        rank: int | None = None,
        world_size: int | None = None,
        **kwargs,
    ) -> MapLoader:
        """A DataLoader whose workers build whole batches of this rank's share of the order (LeRobot's
        episode-aware order, `order.EpisodeAwareSampler`, shuffled by `seed` per epoch; `rank`/`world_size`
        default to torch.distributed's; on several ranks the last batches are padded by wrapping around, on one
        the last batch is short); iterate it as the training loop: `state_dict()`/`load_state_dict()`
        resume exactly, also on another number of ranks or workers (`loader.MapLoader`). `sharing`: how workers
        share their batches' tensors ("auto", "file_system", "file_descriptor"; see `collate.TensorSharing`)."""
        from ..order import EpisodeAwareSampler, EpisodicBatchSampler
        from ..order.shard import resolve_topology

        starts = self.rows.columns.starts  # positions of this dataset, episode by episode
        sampler = EpisodeAwareSampler(starts[:-1], starts[1:], shuffle=shuffle, seed=seed)
        rank, world_size = resolve_topology(rank, world_size)
        batches = EpisodicBatchSampler(
            sampler, batch_size, rank=rank, world_size=world_size, drop_last=drop_last, pad_last=world_size > 1
        )  # one rank: a short last batch, as a DataLoader's
        return MapLoader(self, batches, num_workers, sharing, **kwargs)

    def stats(self) -> dict:
        """Counters of this dataset summed over this process and its DataLoader workers (see
        `episodic.counters`): decode and item-building seconds, decoder-cache hits/misses/evictions, remote
        bytes fetched, ...; 'processes' counts the processes that contributed."""
        return self.counters.snapshot()

    def video_decoder_cache_stats(self) -> dict:
        """This process's decoder-cache hits, misses, evictions, hit rate and open readers."""
        return self.decoders.stats()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(root={self.source.root!r}, episodes={self.num_episodes}, frames={self.num_frames}, "
            f"fps={self.fps}, cameras={self.camera_keys})"
        )


class LeRobotDataset(EpisodicDataset):
    """Drop-in for `lerobot.datasets.lerobot_dataset.LeRobotDataset` (0.4.4; of 0.6.x: its depth cameras and
    `depth_output_unit`): same arguments, attributes and items (keys, dtypes, shapes, values, windows with
    `<key>_is_pad`, frames by timestamp, `task`)."""

    def __init__(
        self,
        repo_id: str,
        root: str | os.PathLike | None = None,
        episodes: list[int] | None = None,
        image_transforms: Callable | None = None,
        delta_timestamps: dict[str, list[float]] | None = None,
        tolerance_s: float = 1e-4,
        revision: str | None = None,
        force_cache_sync: bool = False,
        download_videos: bool = True,
        video_backend: str | None = None,
        batch_encoding_size: int = 1,
        return_uint8: bool = False,
        video_keys: Sequence[str] | None = None,
        storage_options: dict | None = None,
        cache_dir: str | None = None,
        cache_max_bytes: int | None = None,
        fetch_policy: FetchPolicy | None = None,
        image_size: Sequence[int] | None = None,
        resize_mode: str = "stretch",
        on_unknown_task: str = "warn",
        decode_device: str = "cpu",
        cpu_fallback=False,
        gpu_decoders: int | None = None,
        eval_split: EvalSplit | float | dict | None = None,
        split: str = "train",
        target_fps: int | None = None,
        resample: Mapping[str, str] | None = None,
        depth_output_unit: str = "mm",
    ):
        self.remember(locals())
        self.repo_id = repo_id
        self.root = root
        self.revision = revision
        self.video_backend = video_backend or "pyav"
        source = resolve_source(
            repo_id,
            root,
            revision,
            episodes,
            video_keys,
            storage_options,
            cache_dir,
            policy=fetch_policy,
            cache_max_bytes=cache_max_bytes,
        )
        super().__init__(
            source.root,
            episodes=episodes,
            delta_timestamps=delta_timestamps,
            tolerance_s=tolerance_s,
            video_keys=video_keys,
            return_uint8=return_uint8,
            image_transforms=image_transforms,
            revision=revision,
            cache_dir=cache_dir,
            image_size=image_size,
            resize_mode=resize_mode,
            on_unknown_task=on_unknown_task,
            decode_device=decode_device,
            cpu_fallback=cpu_fallback,
            gpu_decoders=gpu_decoders,
            eval_split=eval_split,
            split=split,
            target_fps=target_fps,
            resample=resample,
            depth_output_unit=depth_output_unit,
            _source=source,
        )
        self.episodes = episodes  # LeRobot echoes the list as given
        self.delta_indices = self.spec.delta_indices if delta_timestamps is not None else None
        warn_ignored(
            type(self).__name__,
            force_cache_sync=(force_cache_sync, False),
            download_videos=(download_videos, True),
            batch_encoding_size=(batch_encoding_size, 1),
            video_backend=(video_backend if video_backend not in (None, "pyav") else None, None),
        )

    @property
    def absolute_to_relative_idx(self) -> dict[int, int] | None:
        """{global frame `index`: position in this dataset} when the dataset holds some of the episodes (an
        `episodes` list or an eval split), None when it holds all (positions are the indices): LeRobot 0.6's, which
        its `EpisodeAwareSampler` maps the episodes' `dataset_from_index` ranges through."""
        if self.episodes is None and self.eval_split is None:
            return None
        index = self.rows.columns.arrays.get("index")
        if index is None:  # no index column loaded: the episodes' ranges, in this dataset's (ascending) order
            eps = self.rows.columns.episodes
            table = self.meta.episodes
            index = np.concatenate(
                [np.arange(table.dataset_from_index[e], table.dataset_to_index[e]) for e in eps.tolist()]
                or [np.zeros(0, np.int64)]
            )
        return dict(zip(np.asarray(index).reshape(-1).tolist(), range(len(index))))


_WARNED: set[str] = set()


def warn_ignored(owner: str, **given: tuple) -> None:
    """Warn once per process and argument when a LeRobot argument that episodic accepts but does not use is
    given a value other than its default (`name=(value, default)`)."""
    for name, (value, default) in given.items():
        if value != default and name not in _WARNED:
            _WARNED.add(name)
            warnings.warn(
                f"{owner}: argument {name}={value!r} is accepted for LeRobot compatibility and ignored "
                f"(episodic decodes with PyAV, reads whatever files are present)",
                stacklevel=3,
            )
