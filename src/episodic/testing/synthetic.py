"""Many tiny, heterogeneous datasets and a mixture spec over them, for tests and benchmarks.

Each dataset is written by episodic's writer (`DatasetWriter`; v2.1 ones are converted from its output: one
parquet and one mp4 per episode, jsonl metadata), with what differs between community datasets: state and
action dimensions 6-14 (the state key sometimes not ``observation.state``), fps 10-50, 1-4 cameras of
different small sizes under names of a public SO-101 mixture (``front``, ``wrist``, ``top`` ...), in shuffled
order. Frames are flat colours (tiny mp4s encode in milliseconds); values are deterministic in (seed, index).
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..format.metadata import INFO_PATH
from ..writer import DatasetWriter
from ..writer.video import VideoFileWriter

__all__ = ["SyntheticDataset", "camera_frames", "mixture_spec", "write_synthetic_datasets"]

CAMERA_NAMES = (
    "front",
    "wrist",
    "top",
    "side",
    "overhead",
    "handeye",
    "head",
    "up",
    "laptop",
    "phone",
    "fixed",
    "gripper",
)
CAMERA_SIZES = ((16, 32), (32, 32), (24, 32), (32, 48))  # (height, width); AV1 needs width >= 32
FPS_CHOICES = (10, 15, 20, 25, 30, 50)
ROBOTS = ("so101_follower", "koch_follower", "aloha", "xarm")
TASKS = ("pick the cube", "place it in the bin", "open the drawer", "push the block")


@dataclass(frozen=True)
class SyntheticDataset:
    """What was written: where, and the facts a mixture spec and its checks need."""

    name: str
    path: str
    version: str
    fps: int
    robot_type: str
    state_key: str
    state_dim: int
    action_dim: int
    cameras: tuple[str, ...]  # keys, in info.json order
    slots: dict = field(default_factory=dict)  # OpenTau-style camera0..N -> key, in a shuffled order
    episodes: int = 0
    frames: int = 0


def _features(d: SyntheticDataset, sizes: dict[str, tuple[int, int]]) -> dict:
    feats = {
        d.state_key: {"dtype": "float32", "shape": [d.state_dim]},
        "action": {"dtype": "float32", "shape": [d.action_dim]},
    }
    for key in d.cameras:
        h, w = sizes[key]
        feats[key] = {"dtype": "video", "shape": [h, w, 3], "names": ["height", "width", "channels"]}
    return feats


def _episode(d: SyntheticDataset, sizes: dict, rng: np.random.Generator, e: int, n: int) -> dict[str, np.ndarray]:
    t = np.arange(n, dtype=np.float32)[:, None] / d.fps
    out = {
        d.state_key: (np.sin(t + np.arange(d.state_dim, dtype=np.float32)) + e).astype(np.float32),
        "action": (np.cos(t + np.arange(d.action_dim, dtype=np.float32)) + e).astype(np.float32),
    }
    for c, key in enumerate(d.cameras):
        h, w = sizes[key]
        frames = np.empty((n, h, w, 3), dtype=np.uint8)
        frames[:] = np.array([(e * 50 + c * 90) % 256, (c * 60) % 256, 128], dtype=np.uint8)
        frames[:, :, :, 2] = (np.arange(n, dtype=np.int64) * 255 // max(n - 1, 1)).astype(np.uint8)[:, None, None]
        out[key] = frames
    return out


def _to_v21(root: Path, d: SyntheticDataset, sizes: dict, episodes: list[dict], tasks: list[str], vcodec: str) -> None:
    """Rewrite the v3.0 dataset at `root` (written from `episodes`) in the v2.1 layout."""
    info = json.loads((root / INFO_PATH).read_text())
    data = pq.read_table(root / "data/chunk-000/file-000.parquet")
    shutil.rmtree(root / "data")
    shutil.rmtree(root / "videos", ignore_errors=True)
    shutil.rmtree(root / "meta/episodes")
    (root / "meta/tasks.parquet").unlink()
    ep_col = data.column("episode_index").to_numpy()
    lines = []
    for e, frames in enumerate(episodes):
        part = data.filter(pa.array(ep_col == e))
        out = root / f"data/chunk-000/episode_{e:06d}.parquet"
        out.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(part, out)
        for key in d.cameras:
            h, w = sizes[key]
            path = root / f"videos/chunk-000/{key}/episode_{e:06d}.mp4"
            path.parent.mkdir(parents=True, exist_ok=True)
            vw = VideoFileWriter(str(path), w, h, d.fps, vcodec=vcodec)
            vw.add(frames[key])
            vw.close()
        lines.append({"episode_index": e, "tasks": [tasks[e % len(tasks)]], "length": int(part.num_rows)})
    (root / "meta/episodes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    (root / "meta/tasks.jsonl").write_text(
        "".join(json.dumps({"task_index": i, "task": t}) + "\n" for i, t in enumerate(tasks))
    )
    info.update(
        codebase_version="v2.1",
        total_chunks=1,
        total_videos=len(d.cameras) * len(episodes),
        data_path="data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet",
        video_path=(
            "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4" if d.cameras else None
        ),
    )
    for k in ("data_files_size_in_mb", "video_files_size_in_mb"):
        info.pop(k, None)
    (root / INFO_PATH).write_text(json.dumps(info, indent=2))


def write_synthetic_datasets(
    root: str | os.PathLike,
    count: int,
    *,
    seed: int = 0,
    episodes: tuple[int, int] = (2, 4),
    length: tuple[int, int] = (5, 16),
    cameras: tuple[int, int] = (1, 4),
    v21_every: int = 4,
    vcodec: str = "av1",
) -> list[SyntheticDataset]:
    """Write `count` datasets under `root` (``root/ds000``, ...): every `v21_every`-th one (from the third) in
    the v2.1 layout (0: none). Episodes per dataset and frames per episode are drawn from the inclusive
    ranges `episodes` and `length`, camera counts from `cameras` (0 allowed: tabular only)."""
    root = Path(root)
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        n_cam = int(rng.integers(cameras[0], cameras[1] + 1))
        names = [str(x) for x in rng.choice(CAMERA_NAMES, size=n_cam, replace=False)]
        keys = tuple(f"observation.images.{n}" for n in names)
        sizes = {k: CAMERA_SIZES[int(rng.integers(len(CAMERA_SIZES)))] for k in keys}
        slot_order = rng.permutation(n_cam)
        state_dim = int(rng.integers(6, 15))
        d = SyntheticDataset(
            name=f"synthetic/ds{i:03d}",
            path=str(root / f"ds{i:03d}"),
            version="v2.1" if v21_every and i % v21_every == 2 else "v3.0",
            fps=int(rng.choice(FPS_CHOICES)),
            robot_type=str(rng.choice(ROBOTS)),
            state_key="observation.joints" if i % 7 == 5 else "observation.state",
            state_dim=state_dim,
            action_dim=state_dim if rng.random() < 0.8 else int(rng.integers(6, 15)),
            cameras=keys,
            slots={f"camera{j}": keys[int(s)] for j, s in enumerate(slot_order)},
        )
        n_ep = int(rng.integers(episodes[0], episodes[1] + 1))
        lens = [int(x) for x in rng.integers(length[0], length[1] + 1, n_ep)]
        frames = [_episode(d, sizes, rng, e, n) for e, n in enumerate(lens)]
        tasks = list(TASKS[: 1 + i % len(TASKS)])
        with DatasetWriter(
            d.path, fps=d.fps, features=_features(d, sizes), robot_type=d.robot_type, vcodec=vcodec, overwrite=True
        ) as w:
            for e, fr in enumerate(frames):
                w.add_episode(fr, task=tasks[e % len(tasks)])
        if d.version == "v2.1":
            _to_v21(Path(d.path), d, sizes, frames, tasks, vcodec)
        out.append(SyntheticDataset(**{**d.__dict__, "episodes": n_ep, "frames": sum(lens)}))
    return out


def mixture_spec(datasets: list[SyntheticDataset], style: str = "episodic", **options) -> dict:
    """A mixture spec (as a dict) over `datasets`: episodic's format with named camera roles (a camera's name
    is its role) and explicit state/action roles, or OpenTau's (``style="opentau"``: ``camera0..N`` in each
    dataset's shuffled slot order). `options` are added to the top level (episodic's format)."""
    if style == "opentau":
        return {
            "datasets": [
                {
                    "repo_id": d.name,
                    "root": d.path,
                    "data_features_name_mapping": {
                        **d.slots,
                        "state": d.state_key,
                        "actions": "action",
                        "prompt": "task",
                    },
                }
                for d in datasets
            ]
        }
    entries = []
    for d in datasets:
        roles = {k.rsplit(".", 1)[-1]: k for k in d.cameras}
        roles.update(state=d.state_key, action="action")
        entries.append({"source": d.path, "name": d.name, "roles": roles})
    return {**options, "entries": entries}


_FRAMES: dict = {}


def camera_frames(h: int, w: int, n: int, seed: int) -> np.ndarray:
    """Frames like a fixed robot camera's (uint8 (n, h, w, 3)): a static low-frequency texture, four moving blobs,
    sensor noise; for GPU benchmarks and codec-loss figures (the demo's frames are flat colours and stripes).
    Made once per (size, length, seed) in a process and shared: callers must not write into them."""
    key = (h, w, n, seed)
    if key in _FRAMES:
        return _FRAMES[key]
    rng = np.random.default_rng(seed)
    bg = (np.kron(rng.random((h // 16 + 1, w // 16 + 1, 3)), np.ones((16, 16, 1)))[:h, :w] * 180 + 30).astype(
        np.float32
    )
    noise = rng.normal(0, 3, (4, h, w, 3)).astype(np.float32)
    out = np.empty((n, h, w, 3), np.uint8)
    for t in range(n):
        img = bg + noise[t % 4]
        for k in range(4):
            r = int((h / 16) * (1 + k / 3))
            cx = int(w / 2 + (w / 3) * np.sin(0.05 * (t + 40 * seed) + k * 1.7))
            cy = int(h / 2 + (h / 3) * np.cos(0.04 * (t + 40 * seed) + k))
            y0, y1, x0, x1 = max(cy - r, 0), min(cy + r, h), max(cx - r, 0), min(cx + r, w)
            yy, xx = np.ogrid[y0:y1, x0:x1]
            img[y0:y1, x0:x1][((xx - cx) ** 2 + (yy - cy) ** 2) < r * r] = [200 - 40 * k, 60 + 40 * k, 90 + 30 * k]
        np.clip(img, 0, 255, out=img)
        out[t] = img
    _FRAMES[key] = out
    return out
