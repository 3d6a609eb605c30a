"""LeRobot's dataset factory (`lerobot.datasets.factory`) with episodic's datasets, for `lerobot_train`.

- `make_dataset(cfg)`: what LeRobot's `make_dataset(cfg)` does (0.4.x and 0.6.x): `episodic.LeRobotDataset`
  (map-style), or `episodic.StreamingLeRobotDataset` with `--dataset.streaming=true`. Under LeRobot 0.6 as 0.6's:
  cameras as uint8 (`return_uint8=True`: the script divides by 255 in its loop), depth in
  `--dataset.depth_output_unit`, no ImageNet statistics on depth cameras.
- `make_train_eval_datasets(cfg)` (LeRobot 0.6's `lerobot_train` calls it): `(train, eval)` datasets split by
  `--dataset.eval_split` with LeRobot 0.6's own rule (`order.split_lerobot`, the `EvalSplit` rule "lerobot": the
  last ``ceil(n * eval_split)`` episodes of each task held out), so the same episodes are held out as with
  LeRobot's dataset; `(dataset, None)` without a split.

LeRobot is imported only when these run. The configuration tells the version (0.6's has `dataset.eval_split`):
`ImageTransforms` comes from `lerobot.transforms` in 0.6, `lerobot.datasets.transforms` in 0.4.
"""

from __future__ import annotations

import importlib
import json
import logging
from pathlib import Path
from typing import Any

__all__ = [
    "STREAM_STATE_FILE",
    "is_lerobot06",
    "load_stream_state",
    "make_dataset",
    "make_train_eval_datasets",
    "stream_state_path",
]

log = logging.getLogger(__name__)

STREAM_STATE_FILE = "episodic_stream_state.json"


def is_lerobot06(cfg: Any) -> bool:
    """Whether this LeRobot configuration is LeRobot 0.6's (its dataset config has `eval_split`)."""
    return hasattr(cfg.dataset, "eval_split")


def _image_transforms(cfg: Any) -> Any:
    if not cfg.dataset.image_transforms.enable:
        return None
    # LeRobot 0.6 moved them from lerobot.datasets.transforms (0.4) to lerobot.transforms
    module = importlib.import_module("lerobot.transforms" if is_lerobot06(cfg) else "lerobot.datasets.transforms")
    return module.ImageTransforms(cfg.dataset.image_transforms)


def _trainable(cfg: Any) -> Any:
    """The config the delta timestamps come from: 0.6's `trainable_config` (policy or reward model), else 0.4's
    `policy`."""
    return getattr(cfg, "trainable_config", None) or cfg.policy


def _set_imagenet_stats(dataset: Any, skip_depth: bool) -> None:
    """The ImageNet mean/std in the camera statistics (tensors among the numpy statistics, as LeRobot's factory
    puts them: its policies read them); depth cameras skipped when `skip_depth`."""
    import torch
    from lerobot.datasets.factory import IMAGENET_STATS

    for key in dataset.meta.camera_keys:
        if skip_depth and key in dataset.meta.depth_keys:
            continue
        camera_stats: dict[str, Any] = dataset.meta.stats.setdefault(key, {})
        for stats_type, stats in IMAGENET_STATS.items():
            camera_stats[stats_type] = torch.tensor(stats, dtype=torch.float32)


def make_dataset(cfg: Any) -> Any:
    """What `lerobot.datasets.factory.make_dataset(cfg)` does, with episodic's datasets: delta timestamps from the
    policy's delta indices (LeRobot's own `resolve_delta_timestamps`), LeRobot's `ImageTransforms` when
    `dataset.image_transforms.enable`, `revision`, `episodes`, `tolerance_s`, and the ImageNet mean/std in the
    camera stats when `dataset.use_imagenet_stats`. Under LeRobot 0.6 also `return_uint8=True` and
    `dataset.depth_output_unit`, as 0.6's factory. `dataset.video_backend` is not used (episodic decodes with
    PyAV). With `resume`, a streaming dataset continues from the position saved with the checkpoint."""
    from lerobot.datasets.factory import resolve_delta_timestamps

    from ..datasets import LeRobotDataset, StreamingLeRobotDataset
    from ..storage.resolve import resolve_source

    dcfg = cfg.dataset
    if not isinstance(dcfg.repo_id, str):
        raise NotImplementedError("The MultiLeRobotDataset isn't supported for now.")  # as LeRobot's factory
    v06 = is_lerobot06(cfg)
    if getattr(dcfg, "repo_type", None) == "bucket" and not dcfg.streaming:  # as LeRobot 0.6's factory
        raise ValueError(
            "repo_type='bucket' is streaming-only: set dataset.streaming=true to train from an HF Storage Bucket."
        )
    # the dataset's metadata first (its features and fps decide the delta timestamps); a Hub dataset is
    # fetched here (the episodes it needs) and the dataset then opens that local copy
    source = resolve_source(dcfg.repo_id, dcfg.root, dcfg.revision, dcfg.episodes)
    delta_timestamps = resolve_delta_timestamps(_trainable(cfg), source.load_metadata())
    if getattr(dcfg, "video_backend", None):
        log.info("dataset.video_backend=%s is not used: episodic decodes videos with PyAV", dcfg.video_backend)
    common: dict[str, Any] = dict(
        root=source.location,
        episodes=dcfg.episodes,
        delta_timestamps=delta_timestamps,
        image_transforms=_image_transforms(cfg),
        revision=dcfg.revision,
        tolerance_s=cfg.tolerance_s,
    )
    if v06:
        common["return_uint8"] = True
    dataset: LeRobotDataset | StreamingLeRobotDataset
    if not dcfg.streaming:
        if v06:
            common["depth_output_unit"] = dcfg.depth_output_unit
        dataset = LeRobotDataset(dcfg.repo_id, **common)
    else:
        dataset = StreamingLeRobotDataset(dcfg.repo_id, seed=cfg.seed if cfg.seed is not None else 0, **common)
        if cfg.resume and cfg.checkpoint_path is not None:
            load_stream_state(dataset, Path(cfg.checkpoint_path))
    if dcfg.use_imagenet_stats:
        _set_imagenet_stats(dataset, skip_depth=v06)
    return dataset


def make_train_eval_datasets(cfg: Any) -> tuple[Any, Any]:
    """What LeRobot 0.6's `make_train_eval_datasets(cfg)` does, with episodic's datasets: `(make_dataset(cfg),
    None)` when `dataset.eval_split` is 0; else map-style `(train, eval)` datasets of the episodes LeRobot's rule
    keeps and holds out (`order.EvalSplit(fraction, rule="lerobot")` over `dataset.episodes` in the order given,
    all episodes without a list), each with `episodes` the list of its side, cameras as uint8; image transforms on
    the training side only, the ImageNet statistics on both (on every camera, as LeRobot 0.6.1's split does)."""
    from lerobot.datasets.factory import resolve_delta_timestamps

    from ..datasets import LeRobotDataset
    from ..datasets.item_spec import listed_episodes
    from ..order import EvalSplit, split_episodes
    from ..storage.resolve import resolve_source

    dcfg = cfg.dataset
    if dcfg.eval_split == 0.0:
        return make_dataset(cfg), None
    if not isinstance(dcfg.repo_id, str):
        raise NotImplementedError("The MultiLeRobotDataset isn't supported for now.")  # as LeRobot's factory
    source = resolve_source(dcfg.repo_id, dcfg.root, dcfg.revision, dcfg.episodes)
    meta = source.load_metadata()
    listed = listed_episodes(meta, dcfg.episodes)  # in the order given (all, ascending, without a list)
    first_tasks = meta.episodes.first_tasks(listed)
    kept, held_out = split_episodes(EvalSplit(float(dcfg.eval_split), rule="lerobot"), listed, first_tasks)
    if not len(kept):  # LeRobot's message
        raise ValueError(f"eval_split={dcfg.eval_split} leaves 0 training episodes from {len(listed)} total.")
    log.info(
        "Train/eval split: %d train, %d eval (eval_split=%s, %d tasks)",
        len(kept),
        len(held_out),
        dcfg.eval_split,
        len(set(first_tasks)),
    )
    if getattr(dcfg, "video_backend", None):
        log.info("dataset.video_backend=%s is not used: episodic decodes videos with PyAV", dcfg.video_backend)
    common: dict[str, Any] = dict(
        root=source.location,
        delta_timestamps=resolve_delta_timestamps(_trainable(cfg), meta),
        revision=dcfg.revision,
        return_uint8=True,
        tolerance_s=cfg.tolerance_s,
    )  # (no depth_output_unit: LeRobot 0.6.1's split datasets take their default, millimetres)
    train = LeRobotDataset(dcfg.repo_id, episodes=kept.tolist(), image_transforms=_image_transforms(cfg), **common)
    held = LeRobotDataset(dcfg.repo_id, episodes=held_out.tolist(), image_transforms=None, **common)
    if getattr(cfg, "max_eval_samples", 0) > 0:  # LeRobot's subset of the held-out frames reads `hf_dataset`
        held.hf_dataset = TaskIndexTable(held.rows.columns.arrays["task_index"])  # type: ignore[attr-defined]
    if dcfg.use_imagenet_stats:
        for ds in (train, held):
            _set_imagenet_stats(ds, skip_depth=False)
    return train, held


class TaskIndexTable:
    """What LeRobot 0.6.1's `--max_eval_samples` reads of the held-out dataset, `hf_dataset.data.column(
    "task_index").to_numpy()`: every item's task index, in item order (its first frames of each task are
    evaluated)."""

    def __init__(self, task_index: Any):
        import pyarrow as pa

        self.data = pa.table({"task_index": pa.array(task_index)})


def stream_state_path(checkpoint_dir: Path) -> Path:
    """Where `episodic lerobot-train` keeps a streaming dataset's position next to LeRobot's checkpoint."""
    from lerobot.utils.constants import TRAINING_STATE_DIR

    return checkpoint_dir / TRAINING_STATE_DIR / STREAM_STATE_FILE


def load_stream_state(dataset: Any, checkpoint_dir: Path) -> None:
    """Continue `dataset` (streaming) from the position saved with the checkpoint (a warning when there is none)."""
    path = stream_state_path(checkpoint_dir)
    if not path.exists():
        log.warning(
            "%s not found: the stream starts its epoch from the beginning (the checkpoint was not made "
            "by episodic lerobot-train)",
            path,
        )
        return
    dataset.load_state_dict(json.loads(path.read_text()))
    log.info(
        "streaming: continuing from %s (epoch %d, %d batches consumed)",
        path,
        dataset.epoch,
        dataset.state.batches_consumed,
    )
