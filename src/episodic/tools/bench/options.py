"""What `episodic bench` runs: the configuration, its error type, the demo dataset and the helpers that turn
command-line values into dataset arguments. Imports neither torch nor the datasets."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ...format.errors import EpisodicError
from ...format.timebase import frames_to_seconds

SCHEMA = "episodic.bench/1"
DEMO_EPISODES = 20


class BenchError(EpisodicError):
    """The benchmark could not produce a measurement."""


@dataclass
class BenchConfig:
    dataset: str | None = None  # path or fsspec URL; None: the built-in demo dataset
    mode: str = "map"
    workers: int = 0
    batch_size: int = 32
    action_window: int = 16  # frames: current + future (0: no window)
    state_window: int = 2  # frames: past + current (0: no window)
    cameras: list[str] | None = None  # None: all cameras; []: tabular only
    batches: int = 100  # measured batches
    warmup: int = 5
    seed: int = 0
    torch_threads: int | None = None
    progress: bool = True

    def label(self) -> str:
        cams = "all" if self.cameras is None else (",".join(c.rsplit(".", 1)[-1] for c in self.cameras) or "none")
        return f"{self.mode} w{self.workers} b{self.batch_size} a{self.action_window} s{self.state_window} cams={cams}"


def demo_root(progress: bool = True) -> Path:
    """The built-in demo dataset (the one `episodic demo` uses), written on first use."""
    from ...demo import demo_path, write_demo_dataset

    root = demo_path(DEMO_EPISODES)
    if not (root / "meta" / "info.json").exists():
        print(f"writing the demo dataset ({DEMO_EPISODES} episodes, 2 cameras) to {root}", file=sys.stderr)
        write_demo_dataset(root, num_episodes=DEMO_EPISODES, progress=progress)
    return root


def bench_delta_timestamps(fps: int, features: Sequence[str], action_window: int, state_window: int) -> dict | None:
    """action: current + (action_window - 1) future frames; observation.state: (state_window - 1) past frames
    + current. Keys the dataset lacks are left out."""
    dt: dict[str, list[float]] = {}
    if action_window > 0 and "action" in features:
        dt["action"] = [frames_to_seconds(i, fps) for i in range(action_window)]
    if state_window > 0 and "observation.state" in features:
        dt["observation.state"] = [frames_to_seconds(i - state_window + 1, fps) for i in range(state_window)]
    return dt or None


def parse_cameras(text: str | None) -> list[str] | None:
    """'--cameras' value: None/'all' -> all, 'none' -> [], else a comma list (full keys or short names)."""
    if text is None or text.strip().lower() in ("", "all"):
        return None
    if text.strip().lower() == "none":
        return []
    return [c.strip() for c in text.split(",") if c.strip()]


def resolve_cameras(wanted: list[str] | None, available: list[str]) -> list[str] | None:
    """Full camera keys for `wanted` (full keys or unambiguous short names); None stays None (all)."""
    if wanted is None:
        return None
    out = []
    for c in wanted:
        if c in available:
            out.append(c)
            continue
        short = [k for k in available if k.rsplit(".", 1)[-1] == c]
        if len(short) != 1:
            raise BenchError(f"--cameras: {c!r} is not a camera of this dataset (cameras: {available})")
        out.append(short[0])
    return out
