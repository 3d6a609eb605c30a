#!/usr/bin/env python
"""LeRobot side of episodic's comparisons (LeRobot 0.4.4 and 0.6.1): write synthetic datasets, dump reference
items, benchmark LeRobot's loaders.

One file on purpose (593 lines, more than the project's ~450): it is copied nowhere and imports nothing of
episodic, so a LeRobot venv runs it by path with no package of ours installed; split into modules it would need
episodic on that venv's path.

A standalone script shipped inside the episodic package: it is run by path, with the python of a LeRobot
virtualenv (see benchmarks/LEROBOT_ENV.md and benchmarks/setup_lerobot_venv.sh), as a subprocess
(`episodic bench --compare-lerobot`, benchmarks/bench_loaders.py, tests/e2e/test_parity_lerobot06.py) or by
hand; it works with the LeRobot it finds (`write` passes the codec and file sizes the way each version takes
them; `items --return-uint8` and `--transform` need a LeRobot that has them). It never imports episodic,
and episodic never imports it (`episodic.tools.bench.lerobot_side_script()` gives its path). Being another
program, it reads its own environment (LD_LIBRARY_PATH, below) rather than through episodic.config.

    S=src/episodic/tools/bench/lerobot_side.py   # in a checkout; anywhere: episodic.tools.bench.lerobot_side_script()
    python $S write --root DIR --episodes 12 --min-len 20 --max-len 60 ...
    python $S items --root DIR --out items.npz --n-random 60 --seed 0
    python $S bench-map --root DIR --workers 2 --seconds 20
    python $S bench-stream --root DIR --workers 0 --seconds 20
    python $S compare A.npz B.npz

npz layout of `items` (same as tests fixtures): array "j/KEY" is key KEY of the j-th item, in
LeRobot's key order; camera frames uint8 = round(x * 255); "j/task" the task string; plus
"indices" (int64 positions queried), "delta_timestamps" (JSON string, "null" if none) and
"episodes" (int64 list as given to LeRobotDataset; only present when a subset was requested). Frames stay
float32 (LeRobot's values) with `--transform`, and are LeRobot's uint8 with `--return-uint8`; "options" (JSON)
records both. Depth cameras (LeRobot 0.6; `write --depth N`) stay LeRobot's float32 distances, in the unit of
`items --depth-unit` (recorded in "options", with the depth keys), and their statistics as the dataset hands
them out are "stats/KEY/NAME".
"""

from __future__ import annotations

import os
import sys


def _bootstrap_ffmpeg_libs() -> None:
    """torchcodec needs FFmpeg shared libraries (libavcodec.so.61, ...). setup_lerobot_venv.sh exposes
    the FFmpeg that ships inside the PyAV wheel as <venv>/ffmpeg-libs; the dynamic loader only reads
    LD_LIBRARY_PATH at process start, so re-exec once with it set."""
    libdir = os.path.join(sys.prefix, "ffmpeg-libs")
    if not os.path.isdir(libdir):
        return
    cur = os.environ.get("LD_LIBRARY_PATH", "")
    if libdir in cur.split(os.pathsep):
        return
    os.environ["LD_LIBRARY_PATH"] = libdir + (os.pathsep + cur if cur else "")
    os.execv(sys.executable, [sys.executable, *sys.argv])


def _drop_own_folder() -> None:
    """Run by path, python puts this file's folder first on sys.path: episodic's package folder, whose other
    modules (config.py, report.py, ...) would shadow top-level modules of the same name. Take it out."""
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]


if __name__ == "__main__":
    _drop_own_folder()
    _bootstrap_ffmpeg_libs()

import argparse  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import math  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from collections.abc import Collection  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

TASKS = [
    "pick up the red cube and place it in the bin",
    "open the drawer",
    "stack the blue block on the green block",
]
CAMERAS = ["observation.images.top", "observation.images.wrist"]
JOINTS = [
    f"{side}_{j}"
    for side in ("left", "right")
    for j in ("waist", "shoulder", "elbow", "forearm_roll", "wrist_angle", "wrist_rotate", "gripper")
]
VCODECS = {"av1": "libsvtav1", "libsvtav1": "libsvtav1", "h264": "h264", "hevc": "hevc"}
# image transforms `items --transform NAME` gives LeRobotDataset (tests/e2e/test_parity_lerobot06.py gives episodic
# the same): deterministic, torch only, for frames (C, H, W) and windows (T, C, H, W)
TRANSFORMS = {"flip_affine": lambda x: x.flip(-1) * 0.5 + 0.25, "flip": lambda x: x.flip(-1)}


def _lerobot_version() -> tuple[int, ...]:
    from importlib.metadata import version

    return tuple(int(p) for p in version("lerobot").split(".")[:2])


# ----------------------------------------------------------------------------------------------
# write
# ----------------------------------------------------------------------------------------------
def _smooth_curves(rng: np.random.Generator, n: int, dim: int, fps: int) -> np.ndarray:
    """Sum of 3 random sinusoids per dimension: smooth, deterministic from rng."""
    t = np.arange(n, dtype=np.float64)[:, None] / fps
    out = np.zeros((n, dim))
    for _ in range(3):
        amp = rng.uniform(0.1, 1.0, size=dim)
        freq = rng.uniform(0.05, 1.5, size=dim)
        phase = rng.uniform(0, 2 * np.pi, size=dim)
        out += amp * np.sin(2 * np.pi * freq * t + phase)
    out += rng.normal(0, 0.5, size=dim)
    return out.astype(np.float32)


def _make_frame(h: int, w: int, cam: int, ep: int, fi: int, n: int) -> np.ndarray:
    """HWC uint8 frame made of flat regions (compresses well even after lossy coding, so the
    reference npz files stay small) that change with (camera, episode, frame): a 4x4 grid of flat
    blocks whose colours drift over time, a moving square, and a bar whose length encodes
    frame_index % 16. Neighbouring frames differ visibly, so off-by-one frame errors are detectable."""
    img = np.empty((h, w, 3), dtype=np.int64)
    by, bx = np.arange(h)[:, None] * 4 // h, np.arange(w)[None, :] * 4 // w
    block = by * 4 + bx  # 0..15
    img[..., 0] = 16 * block + 40 * cam + 4 * fi
    img[..., 1] = 255 - 12 * block + 9 * ep
    img[..., 2] = 60 * ((block + cam + ep + fi // 8) % 4) + 20
    img %= 256
    s = max(h // 6, 4)
    # square moves along a Lissajous path; position is a function of (ep, cam, frame)
    cx = int((w - s) * (0.5 + 0.45 * math.sin(0.15 * fi + ep + 1.3 * cam)))
    cy = int((h - s) * (0.5 + 0.45 * math.cos(0.11 * fi + 2 * ep + cam)))
    img[cy : cy + s, cx : cx + s] = [(37 * ep + 80 * cam) % 256, 255 - (5 * fi) % 256, (17 * fi + 50) % 256]
    img[0:8, 0 : 8 * (1 + fi % 16)] = [255, 255, 255]
    return img.astype(np.uint8)


def _make_depth(h: int, w: int, ep: int, fi: int, unit: str) -> np.ndarray:
    """(H, W, 1) depth of a tilted floor with a moving box in front of it: metres (float32) from about 0.005 to 12
    (beyond the default range on both sides, so clamping shows), or millimetres (uint16) with `unit` "mm"."""
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    d = 0.3 + 11.7 * (y / max(h - 1, 1)) ** 2 + 0.2 * np.sin(0.3 * x + 0.5 * ep + 0.2 * fi)
    cx, cy = (w / 2) * (1 + 0.6 * math.sin(0.2 * fi + ep)), (h / 2) * (1 + 0.5 * math.cos(0.15 * fi + 2 * ep))
    box = (np.abs(x - cx) < w / 6) & (np.abs(y - cy) < h / 6)
    d[box] = 0.005 + 0.1 * ((fi + ep) % 5)
    d = d.astype(np.float32)[..., None]
    return np.round(d * 1000).astype(np.uint16) if unit == "mm" else d


def cmd_write(a: argparse.Namespace) -> None:
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    root = Path(a.root)
    if root.exists():
        sys.exit(f"{root} exists; refusing to overwrite")
    features: dict[str, dict] = {
        "observation.state": {"dtype": "float32", "shape": (14,), "names": JOINTS},
        "action": {"dtype": "float32", "shape": (14,), "names": JOINTS},
    }
    cams = CAMERAS[: a.cameras]
    for cam in cams:
        features[cam] = {
            "dtype": "video",
            "shape": (a.height, a.width, 3),
            "names": ["height", "width", "channels"],
        }
    depth_cams = [f"observation.images.depth{i}" for i in range(a.depth)]
    for cam in depth_cams:  # LeRobot 0.6's depth cameras: one channel, info.is_depth_map
        features[cam] = {
            "dtype": "video",
            "shape": (a.height, a.width, 1),
            "names": ["height", "width", "channels"],
            "info": {"is_depth_map": True},
        }
    kw: dict = {"vcodec": VCODECS[a.vcodec]}
    if _lerobot_version() >= (0, 5):  # LeRobot 0.6: encoder settings in an RGBEncoderConfig
        from lerobot.configs.video import DepthEncoderConfig, RGBEncoderConfig

        kw = {"rgb_encoder": RGBEncoderConfig(vcodec=VCODECS[a.vcodec])}
        if depth_cams:
            kw["depth_encoder"] = DepthEncoderConfig(
                use_log=a.depth_quant == "log", depth_min=a.depth_min, depth_max=a.depth_max
            )
    elif depth_cams:
        sys.exit("depth cameras need LeRobot 0.6")
    ds = LeRobotDataset.create(
        repo_id=a.repo_id,
        fps=a.fps,
        features=features,
        root=root,
        robot_type="synthetic_bimanual",
        use_videos=True,
        streaming_encoding=a.streaming_encoding,
        **kw,
    )
    if a.data_mb is not None or a.video_mb is not None or a.chunks_size is not None:
        # LeRobot 0.4.4 and 0.6.1: LeRobotDatasetMetadata.update_chunk_settings writes them into info.json
        ds.meta.update_chunk_settings(
            chunks_size=a.chunks_size, data_files_size_in_mb=a.data_mb, video_files_size_in_mb=a.video_mb
        )
    rng = np.random.default_rng(a.seed)
    lengths = rng.integers(a.min_len, a.max_len + 1, size=a.episodes)
    t0 = time.time()
    for ep in range(a.episodes):
        n = int(lengths[ep])
        ep_rng = np.random.default_rng([a.seed, ep])
        state = _smooth_curves(ep_rng, n + 1, 14, a.fps)
        action = state[1:] + 0.01 * _smooth_curves(ep_rng, n, 14, a.fps)
        task = TASKS[int(ep_rng.integers(0, len(TASKS)))]
        for fi in range(n):
            frame = {
                "observation.state": state[fi],
                "action": action[fi].astype(np.float32),
                "task": task,
            }
            for ci, cam in enumerate(cams):
                frame[cam] = _make_frame(a.height, a.width, ci, ep, fi, n)
            for ci, cam in enumerate(depth_cams):
                frame[cam] = _make_depth(a.height, a.width, ep + 7 * ci, fi, a.depth_unit)
            ds.add_frame(frame)
        ds.save_episode()
        if (ep + 1) % 10 == 0 or ep + 1 == a.episodes:
            print(f"episode {ep + 1}/{a.episodes} ({time.time() - t0:.0f}s)", file=sys.stderr, flush=True)
    ds.finalize()
    print(json.dumps({"root": str(root), "episodes": a.episodes, "frames": int(lengths.sum())}))


# ----------------------------------------------------------------------------------------------
# items
# ----------------------------------------------------------------------------------------------
def _window_delta_timestamps(fps: int, cams: list[str]) -> dict[str, list[float]]:
    dt = {"action": [i / fps for i in range(16)], "observation.state": [-1 / fps, 0.0]}
    for cam in cams:
        dt[cam] = [-2 / fps, 0.0]
    return dt


def _parse_delta(arg: str | None, fps: int, cams: list[str]):
    if arg is None:
        return None
    if arg == "windows":
        return _window_delta_timestamps(fps, cams)
    if os.path.exists(arg):
        return json.loads(Path(arg).read_text())
    return json.loads(arg)


def _to_numpy(key: str, v, camera_keys: set[str], float_frames: bool = False, depth_keys: Collection[str] = ()):
    import torch

    if isinstance(v, str):
        return np.array(v)
    if isinstance(v, torch.Tensor):
        if key in camera_keys and key not in depth_keys and v.dtype != torch.uint8 and not float_frames:
            return torch.round(v * 255).clamp(0, 255).to(torch.uint8).numpy()
        return v.numpy()
    return np.asarray(v)


def cmd_items(a: argparse.Namespace) -> None:
    from lerobot.datasets.lerobot_dataset import LeRobotDataset, LeRobotDatasetMetadata

    meta = LeRobotDatasetMetadata(a.repo_id, root=a.root)
    episodes = [int(e) for e in a.episodes.split(",")] if a.episodes else None
    delta = _parse_delta(a.delta_timestamps, meta.fps, list(meta.camera_keys))
    extra: dict = {}
    if a.return_uint8:
        extra["return_uint8"] = True
    if a.transform:
        extra["image_transforms"] = TRANSFORMS[a.transform]
    if a.depth_unit:
        extra["depth_output_unit"] = a.depth_unit
    if a.video_backend:
        extra["video_backend"] = a.video_backend
    ds = LeRobotDataset(a.repo_id, root=a.root, episodes=episodes, delta_timestamps=delta, **extra)
    n = len(ds)
    if a.indices:
        indices = [int(i) for i in a.indices.split(",")]
    else:
        ep_col = np.asarray(ds.hf_dataset.with_format("numpy")["episode_index"]).reshape(-1)
        change = np.flatnonzero(np.diff(ep_col)) + 1
        starts = np.concatenate([[0], change])
        ends = np.concatenate([change, [n]]) - 1
        picks = set(starts.tolist()) | set(ends.tolist())
        if a.first_last_max is not None and len(starts) > a.first_last_max:
            sel = np.random.default_rng(a.seed).choice(len(starts), a.first_last_max, replace=False)
            picks = set(starts[sel].tolist()) | set(ends[sel].tolist())
        rng = np.random.default_rng(a.seed)
        n_extra = max(a.n_random - len(picks), 0)
        pool = np.setdiff1d(np.arange(n), np.fromiter(picks, int))
        picks |= set(rng.choice(pool, size=min(n_extra, len(pool)), replace=False).tolist())
        indices = sorted(picks)
    camera_keys = set(meta.camera_keys)
    depth_keys = set(getattr(meta, "depth_keys", ()))  # LeRobot 0.6: float32 distances, kept as they are
    out: dict[str, np.ndarray] = {"indices": np.asarray(indices, dtype=np.int64)}
    out["delta_timestamps"] = np.array(json.dumps(delta))
    out["options"] = np.array(
        json.dumps(
            {
                "return_uint8": a.return_uint8,
                "transform": a.transform,
                "depth_output_unit": a.depth_unit,
                "depth_keys": sorted(depth_keys),
            }
        )
    )
    if depth_keys:  # the statistics as the dataset hands them out (rescaled to the output unit)
        for key in sorted(depth_keys):
            for name, value in ds.meta.stats[key].items():
                out[f"stats/{key}/{name}"] = np.asarray(value)
    if episodes is not None:
        out["episodes"] = np.asarray(episodes, dtype=np.int64)
    for j, i in enumerate(indices):
        item = ds[i]
        for k, v in item.items():
            out[f"{j}/{k}"] = _to_numpy(k, v, camera_keys, float_frames=a.transform is not None, depth_keys=depth_keys)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    # numpy's stub types **kwds as if a key could be its allow_pickle flag; these keys are array names
    np.savez_compressed(a.out, **out)  # type: ignore[arg-type]
    keys0 = [k.split("/", 1)[1] for k in out if k.startswith("0/")]
    backend = getattr(ds, "video_backend", None) or getattr(ds, "_video_backend", None)
    print(json.dumps({"out": a.out, "len": n, "items": len(indices), "keys": keys0, "video_backend": backend}))


def cmd_compare(a: argparse.Namespace) -> None:
    """Compare two items npz files (e.g. a fixture vs a fresh `items` dump)."""
    za, zb = np.load(a.a), np.load(a.b)
    meta_keys = {"delta_timestamps", "episodes", "options"}  # replay info, absent from older fixtures
    fa = [k for k in za.files if k not in meta_keys]
    fb = [k for k in zb.files if k not in meta_keys]
    bad = 0
    if set(fa) != set(fb):
        print("key sets differ:", sorted(set(fa) ^ set(fb))[:20])
        bad += 1
    worst = 0
    for k in fa:
        if k not in zb.files:
            continue
        x, y = za[k], zb[k]
        if x.dtype != y.dtype or x.shape != y.shape:
            print(f"{k}: {x.dtype}{x.shape} vs {y.dtype}{y.shape}")
            bad += 1
            continue
        if x.dtype == np.uint8:
            d = int(np.abs(x.astype(int) - y.astype(int)).max()) if x.size else 0
            worst = max(worst, d)
            if d > a.frame_tol:
                print(f"{k}: max frame diff {d}")
                bad += 1
        elif not np.array_equal(x, y):
            print(f"{k}: values differ")
            bad += 1
    item_keys = lambda fs: [k for k in fs if "/" in k]  # noqa: E731
    order_same = item_keys(fa) == item_keys(fb)
    print(json.dumps({"mismatches": bad, "max_frame_diff": worst, "key_order_same": order_same}))
    sys.exit(1 if bad else 0)


# ----------------------------------------------------------------------------------------------
# benchmarks
# ----------------------------------------------------------------------------------------------
class RssSampler(threading.Thread):
    """Peak over time of the summed RSS of this process and all its descendants."""

    def __init__(self, interval: float = 0.05):
        super().__init__(daemon=True)
        self.interval = interval
        self.peak = 0
        self._stop_evt = threading.Event()

    @staticmethod
    def _tree_rss() -> int:
        """RSS of this process and its descendants from /proc, the way episodic's side counts it."""
        page = os.sysconf("SC_PAGE_SIZE")
        total, stack = 0, [os.getpid()]
        while stack:
            pid = stack.pop()
            try:
                with open(f"/proc/{pid}/statm") as f:
                    total += int(f.read().split()[1]) * page
                for t in os.listdir(f"/proc/{pid}/task"):
                    with open(f"/proc/{pid}/task/{t}/children") as f:
                        stack += [int(c) for c in f.read().split()]
            except OSError:
                pass
        return total

    def run(self):
        while not self._stop_evt.is_set():
            self.peak = max(self.peak, self._tree_rss())
            self._stop_evt.wait(self.interval)

    def stop(self) -> float:
        self._stop_evt.set()
        self.join()
        self.peak = max(self.peak, self._tree_rss())
        return self.peak / 2**20


def _bench_loop(loader, a, rss: RssSampler, t_start: float) -> dict:
    it = iter(loader)
    first = next(it)
    ttfb = time.perf_counter() - t_start
    batches = 1
    bs = lambda b: int(b["index"].shape[0])  # noqa: E731
    for _ in range(a.warmup - 1):
        next(it)
        batches += 1
    samples = 0
    timed_batches = 0
    t0 = time.perf_counter()
    while True:
        if a.batches is not None and timed_batches >= a.batches:
            break
        if a.batches is None and time.perf_counter() - t0 >= a.seconds:
            break
        try:
            b = next(it)
        except StopIteration:
            break
        samples += bs(b)
        timed_batches += 1
    wall = time.perf_counter() - t0
    del first
    return {
        "frames_per_s": samples / wall if wall > 0 else float("nan"),
        "time_to_first_batch_s": ttfb,
        "batches": timed_batches,
        "warmup_batches": a.warmup,
        "timed_s": wall,
    }


def _bench(a: argparse.Namespace, streaming: bool) -> None:
    import torch
    from lerobot.datasets.lerobot_dataset import LeRobotDatasetMetadata

    logging.disable(logging.WARNING)
    if a.torch_threads is not None:
        torch.set_num_threads(a.torch_threads)
    rss = RssSampler()
    rss.start()
    t_start = time.perf_counter()
    meta = LeRobotDatasetMetadata(a.repo_id, root=a.root)
    fps = meta.fps
    delta = {"action": [i / fps for i in range(16)], "observation.state": [-1 / fps, 0.0]}
    name = "lerobot-stream" if streaming else "lerobot-map"
    if a.no_video:
        # LeRobot 0.4.4 has no switch to skip camera decoding in LeRobotDataset/Streaming.
        rss.stop()
        print(json.dumps({"loader": name, "skipped": "LeRobot 0.4.4 cannot drop video features"}))
        return
    if streaming:
        from lerobot.datasets.streaming_dataset import StreamingLeRobotDataset

        ds = StreamingLeRobotDataset(a.repo_id, root=a.root, delta_timestamps=delta, seed=a.seed)
        loader = torch.utils.data.DataLoader(ds, batch_size=a.batch_size, num_workers=a.workers)
    else:
        from lerobot.datasets.lerobot_dataset import LeRobotDataset

        ds = LeRobotDataset(a.repo_id, root=a.root, delta_timestamps=delta)
        g = torch.Generator().manual_seed(a.seed)
        loader = torch.utils.data.DataLoader(
            ds,
            batch_size=a.batch_size,
            shuffle=True,
            num_workers=a.workers,
            generator=g,
            drop_last=True,
            persistent_workers=False,
        )
    init_s = time.perf_counter() - t_start
    res = _bench_loop(loader, a, rss, t_start)
    del loader
    peak = rss.stop()
    out = {
        "loader": name,
        **res,
        "peak_rss_tree_mb": round(peak, 1),
        "workers": a.workers,
        "batch_size": a.batch_size,
        "init_s": init_s,
        "frames_total": meta.total_frames,
        "video_backend": getattr(ds, "video_backend", "torchcodec"),
        "torch_threads": torch.get_num_threads(),
    }
    print(json.dumps(out))


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)

    w = sub.add_parser("write", help="write a synthetic dataset with LeRobot's own writer")
    w.add_argument("--root", required=True)
    w.add_argument("--repo-id", default="synthetic/episodic-bench")
    w.add_argument("--episodes", type=int, default=12)
    w.add_argument("--min-len", type=int, default=20)
    w.add_argument("--max-len", type=int, default=60)
    w.add_argument("--cameras", type=int, default=2, choices=[0, 1, 2])
    w.add_argument("--height", type=int, default=96)
    w.add_argument("--width", type=int, default=128)
    w.add_argument("--fps", type=int, default=30)
    w.add_argument("--vcodec", default="av1", choices=sorted(VCODECS))
    w.add_argument("--data-mb", type=float, default=None, help="data_files_size_in_mb")
    w.add_argument("--video-mb", type=float, default=None, help="video_files_size_in_mb")
    w.add_argument("--chunks-size", type=int, default=None)
    w.add_argument("--depth", type=int, default=0, help="depth cameras (LeRobot 0.6: HEVC gray12le)")
    w.add_argument("--depth-quant", default="log", choices=["log", "linear"], help="depth quantisation")
    w.add_argument(
        "--depth-unit",
        default="m",
        choices=["m", "mm"],
        help="the depth given to the writer: metres (float32) or millimetres (uint16)",
    )
    w.add_argument("--depth-min", type=float, default=0.01)
    w.add_argument("--depth-max", type=float, default=10.0)
    w.add_argument(
        "--streaming-encoding",
        action="store_true",
        help="LeRobot's streaming encoder instead of PNG + encode at save_episode",
    )
    w.add_argument("--seed", type=int, default=0)
    w.set_defaults(fn=cmd_write)

    it = sub.add_parser("items", help="dump LeRobotDataset items to npz")
    it.add_argument("--root", required=True)
    it.add_argument("--repo-id", default="synthetic/episodic-bench")
    it.add_argument("--out", required=True)
    it.add_argument("--indices", default=None, help="comma-separated positions")
    it.add_argument("--n-random", type=int, default=60, help="total number of items (incl. first/last)")
    it.add_argument(
        "--first-last-max",
        type=int,
        default=None,
        help="include first/last frames of at most this many episodes (default: all)",
    )
    it.add_argument("--seed", type=int, default=0)
    it.add_argument("--episodes", default=None, help="comma-separated episode subset, e.g. 7,2,11,3")
    it.add_argument(
        "--delta-timestamps",
        default=None,
        help="JSON dict, a path to a JSON file, or 'windows' (action 16 future, state [-1,0], cameras [-2,0] frames)",
    )
    it.add_argument("--return-uint8", action="store_true", help="LeRobotDataset(return_uint8=True)")
    it.add_argument(
        "--transform", default=None, choices=sorted(TRANSFORMS), help="image_transforms (frames then stored float32)"
    )
    it.add_argument(
        "--depth-unit",
        default=None,
        choices=["m", "mm"],
        help="LeRobotDataset(depth_output_unit=...) (LeRobot 0.6; default its own, mm)",
    )
    it.add_argument(
        "--video-backend",
        default=None,
        choices=["torchcodec", "pyav"],
        help="LeRobotDataset(video_backend=...) (default LeRobot's own: torchcodec where installed)",
    )
    it.set_defaults(fn=cmd_items)

    for name, streaming in (("bench-map", False), ("bench-stream", True)):
        b = sub.add_parser(name)
        b.add_argument("--root", required=True)
        b.add_argument("--repo-id", default="synthetic/episodic-bench")
        b.add_argument("--workers", type=int, default=0)
        b.add_argument("--batch-size", type=int, default=32)
        b.add_argument("--no-video", action="store_true")
        b.add_argument("--seconds", type=float, default=20.0)
        b.add_argument("--batches", type=int, default=None)
        b.add_argument("--warmup", type=int, default=3)
        b.add_argument("--seed", type=int, default=0)
        b.add_argument(
            "--torch-threads",
            type=int,
            default=None,
            help="torch.set_num_threads in the main process (DataLoader workers always use 1). "
            "Default: leave torch's default. On a 2-core box the default made workers=0 ~25x "
            "slower than 1 thread.",
        )
        b.set_defaults(fn=lambda a, s=streaming: _bench(a, s))

    c = sub.add_parser("compare", help="compare two items npz files")
    c.add_argument("a")
    c.add_argument("b")
    c.add_argument("--frame-tol", type=int, default=2)
    c.set_defaults(fn=cmd_compare)

    a = p.parse_args(argv)
    a.fn(a)


if __name__ == "__main__":
    main()
