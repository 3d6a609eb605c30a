"""A synthetic dataset for the demo, the tests and the benchmarks (written by episodic's own writer)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from .writer import DatasetWriter

TASKS = ("pick up the red cube and place it in the bin", "fold the towel in half", "open the top drawer")
CAMERAS = ("observation.images.top", "observation.images.wrist")
JOINTS = ("waist", "shoulder", "elbow", "forearm_roll", "wrist_angle", "wrist_rotate", "gripper")


def synthetic_episode(
    episode: int, length: int, cameras=CAMERAS, height: int = 96, width: int = 128, dim: int = 14, seed: int = 0
) -> dict[str, np.ndarray]:
    """Smooth joint curves and frames with a moving square, deterministic in (seed, episode)."""
    rng = np.random.default_rng([seed, episode])
    t = np.arange(length, dtype=np.float64)[:, None] / 30.0
    freq, phase = rng.uniform(0.2, 1.0, dim), rng.uniform(0, 2 * np.pi, dim)
    state = (np.sin(t * freq * 2 * np.pi + phase) * rng.uniform(0.2, 1.0, dim)).astype(np.float32)
    action = np.roll(state, -1, axis=0)
    action[-1] = state[-1]
    out: dict[str, np.ndarray] = {"observation.state": state, "action": action.astype(np.float32)}
    yy, xx = np.mgrid[0:height, 0:width]
    for c, key in enumerate(cameras):
        base = np.stack(
            [
                xx * 255 // max(width - 1, 1),
                yy * 255 // max(height - 1, 1),
                np.full_like(xx, (episode * 37 + c * 80) % 256),
            ],
            axis=-1,
        ).astype(np.uint8)
        frames = np.repeat(base[None], length, axis=0)
        size = max(4, min(height, width) // 6)
        for i in range(length):
            y = int((height - size) * (0.5 + 0.5 * np.sin(i / 9.0 + c + episode)))
            x = int((width - size) * (0.5 + 0.5 * np.cos(i / 13.0 + 2 * c + episode)))
            frames[i, y : y + size, x : x + size] = (255, 255 - 60 * c, 40 * c)
        out[key] = frames
    return out


def demo_features(cameras=CAMERAS, height: int = 96, width: int = 128, dim: int = 14) -> dict:
    names = [f"{side}_{j}" for side in ("left", "right") for j in JOINTS][:dim]
    names += [f"joint_{i}" for i in range(len(names), dim)]
    feats = {
        "observation.state": {"dtype": "float32", "shape": [dim], "names": names},
        "action": {"dtype": "float32", "shape": [dim], "names": names},
    }
    for key in cameras:
        feats[key] = {"dtype": "video", "shape": [height, width, 3], "names": ["height", "width", "channels"]}
    return feats


def demo_path(num_episodes: int = 20) -> Path:
    """Where the built-in demo dataset of `num_episodes` episodes lives (`episodic demo`, `episodic bench`)."""
    from . import config

    return config.cache_dir() / "demo" / f"demo-{num_episodes}ep"


def write_demo_dataset(
    root: str | os.PathLike,
    num_episodes: int = 20,
    min_length: int = 60,
    max_length: int = 120,
    cameras=CAMERAS,
    height: int = 96,
    width: int = 128,
    fps: int = 30,
    seed: int = 0,
    vcodec: str = "av1",
    progress: bool = True,
    overwrite: bool = True,
    **writer_kwargs,
) -> Path:
    """Write a synthetic LeRobot v3.0 dataset; returns its root."""
    from .progress import bar

    rng = np.random.default_rng(seed)
    lengths = rng.integers(min_length, max_length + 1, num_episodes)
    w = DatasetWriter(
        root,
        fps=fps,
        features=demo_features(cameras, height, width),
        robot_type="synthetic_bimanual",
        vcodec=vcodec,
        overwrite=overwrite,
        **writer_kwargs,
    )
    with w:
        for ep in bar(range(num_episodes), enabled=progress, desc="writing episodes", unit="ep"):
            w.add_episode(
                synthetic_episode(ep, int(lengths[ep]), cameras, height, width, seed=seed), task=TASKS[ep % len(TASKS)]
            )
    return Path(w.root)
