"""LeRobot's own training script (`lerobot.scripts.lerobot_train`, LeRobot 0.4.x or 0.6.x) on episodic's datasets.

`main(ARGS)` runs LeRobot's `lerobot_train.main()` with the usual `lerobot-train` arguments. The training
loop is LeRobot's, unchanged; for the run, three names that `lerobot_train` looks up in its own module
namespace are replaced (which ones the installed script has tells its version):

- its dataset factory, episodic's (`lerobot.factory`): `make_train_eval_datasets` (LeRobot 0.6: the train and
  held-out datasets of `--dataset.eval_split`, split by LeRobot's rule) or `make_dataset` (LeRobot 0.4), with
  `episodic.LeRobotDataset` (map-style), or `episodic.StreamingLeRobotDataset` with `--dataset.streaming=true`.
- `cycle` (streaming only): batches come from the dataset's counting loader (`dataset.loader(...)`, same
  batch size, workers, pinning, prefetch and start method as LeRobot's DataLoader), so the stream's position is
  known at every step.
- `save_checkpoint` (streaming only): after LeRobot's checkpoint, that position (`dataset.state_dict()`) is
  written next to it, `<checkpoint>/training_state/episodic_stream_state.json`; `--resume=true` continues
  the stream from there.

Map-style keeps LeRobot's DataLoader and sampler (0.6: its deterministic `EpisodeAwareSampler`, fed the dataset's
`absolute_to_relative_idx`, resumed from the checkpoint's step), so a run sees the same frames in the same order
as with LeRobot's own dataset (same seed), and LeRobot's resume behaviour is unchanged.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from ..storage.atomic import atomic_write_bytes
from .factory import STREAM_STATE_FILE, make_dataset, make_train_eval_datasets, stream_state_path

__all__ = ["STREAM_STATE_FILE", "main", "make_dataset", "make_train_eval_datasets"]

# the dataset factory of each supported LeRobot script, newest first, then the names replaced for streaming
_FACTORIES = ("make_train_eval_datasets", "make_dataset")
_STREAMING = ("cycle", "save_checkpoint")
_SUPPORTED = "LeRobot 0.4.x and 0.6.x"


class _Run:
    """One training run: the replacements for `lerobot_train`'s names, and the dataset they share."""

    def __init__(self, lerobot_train: Any):
        self.lt = lerobot_train
        self.factory = _factory_of(lerobot_train)
        self.patched = (self.factory, *_STREAMING)
        self.originals = {name: getattr(lerobot_train, name) for name in self.patched}
        self.dataset: Any = None
        self.cfg: Any = None

    def make_dataset(self, cfg: Any) -> Any:
        self.cfg = cfg
        self.dataset = make_dataset(cfg)
        return self.dataset

    def make_train_eval_datasets(self, cfg: Any) -> tuple[Any, Any]:
        self.cfg = cfg
        self.dataset, held_out = make_train_eval_datasets(cfg)
        return self.dataset, held_out

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
            context = getattr(dataloader, "multiprocessing_context", None)  # LeRobot 0.6: spawn by default
            if context is not None:
                kwargs["multiprocessing_context"] = context
        loader = self.dataset.loader(batch_size=self.cfg.batch_size, num_workers=self.cfg.num_workers, **kwargs)
        while True:  # the loader moves to the next epoch at the end of each
            yield from loader

    def save_checkpoint(self, checkpoint_dir: Path, *args: Any, **kwargs: Any) -> None:
        self.originals["save_checkpoint"](checkpoint_dir, *args, **kwargs)
        if self._streaming():
            path = stream_state_path(Path(checkpoint_dir))
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_bytes(path, json.dumps(self.dataset.state_dict(), indent=1).encode())

    def __enter__(self) -> _Run:
        for name in self.patched:
            setattr(self.lt, name, getattr(self, name))
        return self

    def __exit__(self, *exc: Any) -> None:
        for name, fn in self.originals.items():
            setattr(self.lt, name, fn)


def _version() -> str:
    try:
        import lerobot

        return str(getattr(lerobot, "__version__", "?"))
    except ImportError:  # pragma: no cover - lerobot_train imported, so lerobot is there
        return "?"


def _factory_of(lerobot_train: Any) -> str:
    """The name of the dataset factory `lerobot_train` calls (its version's); SystemExit when it has none of the
    supported ones, or lacks a name replaced for streaming."""
    factory = next((name for name in _FACTORIES if hasattr(lerobot_train, name)), None)
    missing = [name for name in _STREAMING if not hasattr(lerobot_train, name)]
    if factory is None or missing:
        names = missing if factory is not None else [" or ".join(_FACTORIES), *missing]
        raise SystemExit(
            f"episodic lerobot-train: lerobot.scripts.lerobot_train (LeRobot {_version()}) has no "
            f"{', '.join(names)}; supported: {_SUPPORTED}"
        )
    return factory


def _import_lerobot_train() -> Any:
    try:
        from lerobot.scripts import lerobot_train
    except ImportError as e:
        raise SystemExit(
            f"episodic lerobot-train: LeRobot's training script cannot be imported ({e}); it runs "
            f"in an environment with {_SUPPORTED} installed (pip install lerobot)"
        ) from None
    _factory_of(lerobot_train)
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
