"""LeRobot's own training script (`lerobot.scripts.lerobot_train`, LeRobot 0.4.x) on episodic's datasets.

`main(ARGS)` runs LeRobot's `lerobot_train.main()` with the usual `lerobot-train` arguments. The training
loop is LeRobot's, unchanged; for the run, three names that `lerobot_train` looks up in its own module
namespace are replaced:

- `make_dataset`: this module's `make_dataset`, which does what LeRobot's factory
  (`lerobot.datasets.factory.make_dataset`) does, with episodic's datasets: `episodic.LeRobotDataset`
  (map-style), or `episodic.StreamingLeRobotDataset` with `--dataset.streaming=true`.
- `cycle` (streaming only): batches come from the dataset's counting loader (`dataset.loader(...)`, same
  batch size, workers, pinning and prefetch as LeRobot's DataLoader), so the stream's position is known at
  every step.
- `save_checkpoint` (streaming only): after LeRobot's checkpoint, that position (`dataset.state_dict()`) is
  written next to it, `<checkpoint>/training_state/episodic_stream_state.json`; `--resume=true` continues
  the stream from there.

Map-style keeps LeRobot's DataLoader, sampler and shuffling, so a run sees the same frames in the same order
as with LeRobot's own dataset (same seed), and LeRobot's resume behaviour (a new shuffle from the restored
RNG state) is unchanged.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from ..storage.atomic import atomic_write_bytes

__all__ = ["STREAM_STATE_FILE", "main", "make_dataset"]

log = logging.getLogger(__name__)

STREAM_STATE_FILE = "episodic_stream_state.json"
_PATCHED = ("make_dataset", "cycle", "save_checkpoint")


def make_dataset(cfg: Any) -> Any:
    """What `lerobot.datasets.factory.make_dataset(cfg)` does, with episodic's datasets: delta timestamps
    from the policy's delta indices (LeRobot's own `resolve_delta_timestamps`), LeRobot's `ImageTransforms`
    when `dataset.image_transforms.enable`, `revision`, `episodes`, `tolerance_s`, and the ImageNet mean/std
    in the camera stats when `dataset.use_imagenet_stats`. `dataset.video_backend` is not used (episodic
    decodes with PyAV). With `resume`, a streaming dataset continues from the position saved with the
    checkpoint."""
    import torch
    from lerobot.datasets.factory import IMAGENET_STATS, resolve_delta_timestamps
    from lerobot.datasets.transforms import ImageTransforms

    from ..datasets import LeRobotDataset, StreamingLeRobotDataset
    from ..storage.resolve import resolve_source

    dcfg = cfg.dataset
    if not isinstance(dcfg.repo_id, str):
        raise NotImplementedError("The MultiLeRobotDataset isn't supported for now.")  # as LeRobot's factory
    image_transforms = ImageTransforms(dcfg.image_transforms) if dcfg.image_transforms.enable else None
    # the dataset's metadata first (its features and fps decide the delta timestamps); a Hub dataset is
    # fetched here (the episodes it needs) and the dataset then opens that local copy
    source = resolve_source(dcfg.repo_id, dcfg.root, dcfg.revision, dcfg.episodes)
    delta_timestamps = resolve_delta_timestamps(cfg.policy, source.load_metadata())
    if getattr(dcfg, "video_backend", None):
        log.info("dataset.video_backend=%s is not used: episodic decodes videos with PyAV", dcfg.video_backend)
    common = dict(
        root=source.location,
        episodes=dcfg.episodes,
        delta_timestamps=delta_timestamps,
        image_transforms=image_transforms,
        revision=dcfg.revision,
        tolerance_s=cfg.tolerance_s,
    )
    dataset: LeRobotDataset | StreamingLeRobotDataset
    if not dcfg.streaming:
        dataset = LeRobotDataset(dcfg.repo_id, **common)
    else:
        dataset = StreamingLeRobotDataset(dcfg.repo_id, seed=cfg.seed if cfg.seed is not None else 0, **common)
        if cfg.resume and cfg.checkpoint_path is not None:
            _load_stream_state(dataset, Path(cfg.checkpoint_path))
    if dcfg.use_imagenet_stats:
        for key in dataset.meta.camera_keys:
            # tensors among the numpy statistics, as LeRobot's make_dataset puts them (its policies read them)
            camera_stats: dict[str, Any] = dataset.meta.stats.setdefault(key, {})
            for stats_type, stats in IMAGENET_STATS.items():
                camera_stats[stats_type] = torch.tensor(stats, dtype=torch.float32)
    return dataset


def _state_path(checkpoint_dir: Path) -> Path:
    from lerobot.utils.constants import TRAINING_STATE_DIR

    return checkpoint_dir / TRAINING_STATE_DIR / STREAM_STATE_FILE


def _load_stream_state(dataset: Any, checkpoint_dir: Path) -> None:
    path = _state_path(checkpoint_dir)
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


class _Run:
    """One training run: the replacements for `lerobot_train`'s names, and the dataset they share."""

    def __init__(self, lerobot_train: Any):
        self.lt = lerobot_train
        self.originals = {name: getattr(lerobot_train, name) for name in _PATCHED}
        self.dataset: Any = None
        self.cfg: Any = None

    def make_dataset(self, cfg: Any) -> Any:
        self.cfg = cfg
        self.dataset = make_dataset(cfg)
        return self.dataset

    def _streaming(self) -> bool:
        from ..datasets import StreamingLeRobotDataset

        return isinstance(self.dataset, StreamingLeRobotDataset)

    def cycle(self, dataloader: Any) -> Iterator:
        if not self._streaming():
            yield from self.originals["cycle"](dataloader)
            return
        kwargs: dict[str, Any] = {"pin_memory": bool(getattr(dataloader, "pin_memory", False))}
        if self.cfg.num_workers > 0:
            kwargs["prefetch_factor"] = getattr(dataloader, "prefetch_factor", None) or 2
        loader = self.dataset.loader(batch_size=self.cfg.batch_size, num_workers=self.cfg.num_workers, **kwargs)
        while True:  # the loader moves to the next epoch at the end of each
            yield from loader

    def save_checkpoint(self, checkpoint_dir: Path, *args: Any, **kwargs: Any) -> None:
        self.originals["save_checkpoint"](checkpoint_dir, *args, **kwargs)
        if self._streaming():
            path = _state_path(Path(checkpoint_dir))
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_bytes(path, json.dumps(self.dataset.state_dict(), indent=1).encode())

    def __enter__(self) -> _Run:
        for name in _PATCHED:
            setattr(self.lt, name, getattr(self, name))
        return self

    def __exit__(self, *exc: Any) -> None:
        for name, fn in self.originals.items():
            setattr(self.lt, name, fn)


def _import_lerobot_train() -> Any:
    try:
        from lerobot.scripts import lerobot_train
    except ImportError as e:
        raise SystemExit(
            f"episodic lerobot-train: LeRobot's training script cannot be imported ({e}); it runs "
            f"in an environment with LeRobot 0.4.x installed (pip install lerobot)"
        ) from None
    missing = [name for name in _PATCHED if not hasattr(lerobot_train, name)]
    if missing:
        import lerobot

        raise SystemExit(
            f"episodic lerobot-train: lerobot.scripts.lerobot_train (LeRobot "
            f"{getattr(lerobot, '__version__', '?')}) has no {', '.join(missing)}; supported: LeRobot 0.4.x"
        )
    return lerobot_train


def main(argv: Sequence[str] | None = None) -> int:
    """Run LeRobot's `lerobot-train` with `argv` (default: this process's arguments) on episodic's datasets."""
    args = list(sys.argv[1:] if argv is None else argv)
    lerobot_train = _import_lerobot_train()
    saved_argv = sys.argv
    sys.argv = ["lerobot-train", *args]  # LeRobot's config parser reads sys.argv
    try:
        with _Run(lerobot_train):
            lerobot_train.main()
    finally:
        sys.argv = saved_argv
    return 0
