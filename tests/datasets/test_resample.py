"""One control rate: datasets at 10, 15, 30 and 50 fps resampled to a target fps, map-style and streaming, alone and
in a mixture. Every item equals a reference resampling written here independently: exact fractions for the
grid, numpy on the raw parquet columns (read with pyarrow) for the values (nearest, previous, ``np.interp`` for
linear) and PyAV's own decode for the frames; windows mean the same steps in every entry; the order, the shares
and exact and elastic resume count resampled frames; every bad option named."""

from __future__ import annotations

import glob
import math
from collections import Counter
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from episodic import DatasetWriter, LeRobotDataset, StreamingLeRobotDataset
from episodic.datasets.mixture import MixtureDataset
from episodic.datasets.streaming_mixture import StreamingMixtureDataset
from episodic.format.errors import MixtureSpecError
from episodic.mixture import MixtureSpec, preflight

RATES = (10, 15, 30, 50)
CAM = "observation.images.cam"
H = W = 32
RULES = {"action": "linear", "observation.gripper": "previous"}  # observation.state: nearest (the default)


def _write(root: Path, fps: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    feats = {
        "observation.state": {"dtype": "float32", "shape": [4]},
        "action": {"dtype": "float32", "shape": [3]},
        "observation.gripper": {"dtype": "int64", "shape": [1]},
        CAM: {"dtype": "video", "shape": [H, W, 3]},
    }
    with DatasetWriter(root, fps=fps, features=feats) as w:
        for ep in range(3):
            n = int(rng.integers(fps // 2, fps + 5))  # 0.5 s to 1 s and a bit
            t, y, x, c = np.ogrid[:n, :H, :W, :3]
            frames = ((x * 5 + y * 3 + t * 23 + c * 70 + ep * 17) % 256).astype(np.uint8)
            w.add_episode(
                {
                    "observation.state": rng.normal(size=(n, 4)).astype(np.float32),
                    "action": rng.normal(size=(n, 3)).astype(np.float32),
                    "observation.gripper": rng.integers(0, 5, (n, 1)),
                    CAM: frames,
                },
                task=("pick", "place")[ep % 2],
            )


@pytest.fixture(scope="module")
def roots(tmp_path_factory) -> dict[int, Path]:
    base = tmp_path_factory.mktemp("rates")
    out = {}
    for i, fps in enumerate(RATES):
        out[fps] = base / f"ds{fps}"
        _write(out[fps], fps, i)
    return out


class Reference:
    """One dataset resampled to `target` fps, independently: pyarrow, fractions, numpy, PyAV."""

    def __init__(self, root: Path, fps: int, target: int):
        table = pa.concat_tables([pq.read_table(f) for f in sorted(glob.glob(str(root / "data" / "*" / "*.parquet")))])
        cols = {k: np.asarray(table.column(k).to_pylist()) for k in table.column_names}
        (video,) = glob.glob(str(root / "videos" / CAM / "*" / "*.mp4"))
        with av.open(video) as container:
            frames = np.stack([f.to_ndarray(format="rgb24") for f in container.decode(video=0)])
        self.rows = []  # one dict per resampled row, in episode order
        episodes = cols["episode_index"]
        first_index = 0
        for e in np.unique(episodes):
            src = np.flatnonzero(episodes == e)
            n = len(src)
            last = Fraction(n - 1, fps)  # the episode's last frame's time
            m = 0
            while Fraction(m, target) <= last:
                m += 1
            times = np.arange(n) / fps
            for j in range(m):
                x = Fraction(j, target) * fps  # the target frame's position on the source grid
                near, prev = src[math.floor(x + Fraction(1, 2))], src[math.floor(x)]
                self.rows.append(
                    {
                        "episode_index": int(e),
                        "frame_index": j,
                        "index": first_index + j,
                        "timestamp": np.float32(j / target),
                        "observation.state": cols["observation.state"][near],
                        "observation.gripper": cols["observation.gripper"][prev],
                        "action": np.stack(
                            [np.interp(j / target, times, cols["action"][src][:, d]) for d in range(3)]
                        ).astype(np.float32),
                        "task_index": int(cols["task_index"][near]),
                        "frame": frames[near],  # the one mp4 holds every frame in index order
                        "episode_rows": (first_index, first_index + m),
                    }
                )
            first_index += m

    def window(self, i: int, key: str, offsets) -> tuple[np.ndarray, np.ndarray]:
        lo, hi = self.rows[i]["episode_rows"]
        at = [min(max(i + o, lo), hi - 1) for o in offsets]
        return np.stack([self.rows[a][key] for a in at]), np.asarray([not lo <= i + o < hi for o in offsets])


def _frame(ref: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(ref).permute(2, 0, 1).contiguous()


def _check_single(item: dict, ref: Reference, target: int, linear_exact: bool = False) -> None:
    i = int(item["index"])
    want = ref.rows[i]
    for key in ("episode_index", "frame_index", "task_index"):
        assert int(item[key]) == want[key], key
    assert item["timestamp"].numpy() == want["timestamp"]
    assert np.array_equal(item["observation.state"].numpy(), want["observation.state"])
    assert np.array_equal(item["observation.gripper"].numpy().reshape(-1), np.reshape(want["observation.gripper"], -1))
    actions, pad = ref.window(i, "action", (0, 1, 2))
    np.testing.assert_allclose(item["action"].numpy(), actions, rtol=0, atol=2e-6)  # float64 interpolation, to f32
    assert np.array_equal(item["action_is_pad"].numpy(), pad)
    cams, cam_pad = ref.window(i, "frame", (-1, 0))
    assert torch.equal(item[CAM], torch.stack([_frame(c) for c in cams]))
    assert np.array_equal(item[f"{CAM}_is_pad"].numpy(), cam_pad)


def _deltas(target: int) -> dict:
    return {"action": [0.0, 1 / target, 2 / target], CAM: [-1 / target, 0.0]}


@pytest.mark.parametrize("target", [20, 30])
@pytest.mark.parametrize("fps", RATES)
def test_map_style_items_equal_the_reference(roots, fps, target):
    ref = Reference(roots[fps], fps, target)
    ds = LeRobotDataset(
        "x", root=roots[fps], target_fps=target, resample=RULES, delta_timestamps=_deltas(target), return_uint8=True
    )
    assert len(ds) == len(ref.rows) and ds.fps == target and ds.meta.fps == fps
    for i in range(len(ds)):
        _check_single(ds[i], ref, target)


@pytest.mark.parametrize("fps", RATES)
def test_streaming_items_equal_the_reference(roots, fps, tmp_path):
    ref = Reference(roots[fps], fps, 20)
    ds = StreamingLeRobotDataset(
        "x",
        root=roots[fps],
        target_fps=20,
        resample=RULES,
        delta_timestamps=_deltas(20),
        return_uint8=True,
        episode_pool_size=2,
        cache_dir=tmp_path,
    )
    seen = []
    for item in ds:
        _check_single(item, ref, 20)
        seen.append(int(item["index"]))
    assert sorted(seen) == list(range(len(ref.rows))) and ds.num_frames == len(ref.rows)


def _spec(roots, target: int | None = 20, **extra) -> MixtureSpec:
    entries = [
        {
            "source": str(roots[f]),
            "name": f"fps{f}",
            "roles": {"cam": CAM, "state": "observation.state", "action": "action"},
        }
        for f in RATES
    ]
    spec = {"entries": entries, "delta_timestamps": {"action": [0.0, 0.05, 0.1], "cam": [-0.05, 0.0]}, **extra}
    if target is not None:
        spec.update(target_fps=target, resample={"action": "linear"})
    return MixtureSpec.from_dict(spec)


def _check_mixture(item: dict, refs: dict, report) -> None:
    entry = report.spec.entries[int(item["dataset_index"])]
    ref = refs[int(entry.name[3:])]
    i = int(item["index"])
    want = ref.rows[i]
    assert int(item["episode_index"]) == want["episode_index"] and int(item["frame_index"]) == want["frame_index"]
    assert item["timestamp"].numpy() == want["timestamp"]
    assert np.array_equal(item["observation.state"].numpy(), want["observation.state"])
    actions, pad = ref.window(i, "action", (0, 1, 2))  # 0.05 s at 20 fps: one step, in every entry
    np.testing.assert_allclose(item["action"].numpy(), actions, rtol=0, atol=2e-6)
    assert np.array_equal(item["action_is_pad"].numpy(), pad)
    cams, cam_pad = ref.window(i, "frame", (-1, 0))
    assert torch.equal(item["observation.images.cam"], torch.stack([_frame(c) for c in cams]))
    assert np.array_equal(item["observation.images.cam_is_pad"].numpy(), cam_pad)


def test_mixture_items_equal_the_reference_map_style_and_streaming(roots, tmp_path):
    report = preflight(_spec(roots))
    refs = {f: Reference(roots[f], f, 20) for f in RATES}
    # sizes, weights, the order: resampled frames
    for f, rep in zip(RATES, report.entries):
        assert rep.frames == len(refs[f].rows) and rep.fps == f
    assert [e.offsets for e in MixtureDataset(report, return_uint8=True).layout.entries] == [
        {"observation.images.cam": (-1, 0), "action": (0, 1, 2)}
    ] * 4  # the same steps in every entry
    ds = MixtureDataset(report, return_uint8=True, cache_dir=tmp_path)
    assert ds.fps == 20 and len(ds) == sum(len(r.rows) for r in refs.values())
    for i in range(len(ds)):
        _check_mixture(ds[i], refs, report)
    stream = StreamingMixtureDataset(report, return_uint8=True, cache_dir=tmp_path, episode_pool_size=3)
    got = Counter()
    for item in stream:
        _check_mixture(item, refs, report)
        got[int(item["dataset_index"])] += 1
    slots = stream.epoch_slots(0)
    assert sum(got.values()) == int(slots.length.sum())
    assert dict(got) == {int(e): int(n) for e, n in enumerate(slots.frames_per_entry(4)) if n}


def test_shares_follow_resampled_frames(roots):
    report = preflight(_spec(roots, 20))
    plain = preflight(_spec(roots, None))
    resampled = np.asarray([r.frames for r in report.entries], dtype=np.float64)
    assert np.allclose(report.shares, resampled / resampled.sum())  # frames rule, in resampled frames
    assert not np.allclose(report.shares, plain.shares)
    ds = MixtureDataset(report, return_uint8=True)
    assert ds.num_frames == resampled.sum() and ds.shares()["entries"][0]["frames"] == resampled[0]


def _ids(batches) -> list[tuple[int, int]]:
    return [(int(d), int(i)) for b in batches for d, i in zip(b["dataset_index"], b["index"])]


@pytest.mark.parametrize("workers", [0, 2])
def test_map_style_mixture_resume_exact_and_elastic(roots, tmp_path, workers):
    report = preflight(_spec(roots, 30))
    kw = dict(seed=3, cache_dir=tmp_path, return_uint8=True)
    full = _ids(MixtureDataset(report, **kw).loader(batch_size=8, num_workers=workers))
    sizes = {r.index: r.frames for r in report.entries}  # resampled frames: every index the order draws is one
    assert all(0 <= i < sizes[d] for d, i in full) and len(full) >= sum(sizes.values())
    loader = MixtureDataset(report, **kw).loader(batch_size=8, num_workers=workers)
    head = []
    for b in loader:
        head.append(b)
        if len(head) == 5:
            break
    state = loader.state_dict()
    again = MixtureDataset(report, **kw).loader(batch_size=8, num_workers=workers)
    again.load_state_dict(state)
    assert _ids(head) + _ids(again) == full
    ranks = [MixtureDataset(report, **kw).loader(batch_size=4, rank=r, world_size=2) for r in range(2)]
    for r in ranks:
        r.load_state_dict(state)
    steps = [list(r) for r in ranks]
    merged = [x for a, b in zip(*steps) for x in _ids([a]) + _ids([b])]
    assert merged[: len(full) - 40] == full[40:]


@pytest.mark.filterwarnings("ignore:streaming. ranks have")
@pytest.mark.parametrize("workers", [0, 2])
def test_streaming_resume_exact_and_elastic(roots, tmp_path, workers):
    kw = dict(video_keys=[], target_fps=20, resample=RULES, episode_pool_size=2, seed=7, cache_dir=tmp_path)
    root = roots[50]
    full = [
        b["index"].tolist()
        for b in StreamingLeRobotDataset("x", root=root, **kw).loader(batch_size=6, num_workers=workers)
    ]
    n = StreamingLeRobotDataset("x", root=root, **kw).num_frames
    assert sorted(i for b in full for i in b) == list(range(n))
    for k in (1, len(full) // 2, len(full) - 1):
        a = StreamingLeRobotDataset("x", root=root, **kw)
        before = []
        for b in a.loader(batch_size=6, num_workers=workers):
            before.append(b["index"].tolist())
            if len(before) == k:
                break
        b2 = StreamingLeRobotDataset("x", root=root, **kw)
        b2.load_state_dict(a.state_dict())
        assert before + [x["index"].tolist() for x in b2.loader(batch_size=6, num_workers=workers)] == full, k
    # elastic: 2 ranks, then the rest on one
    consumed, states = [], []
    for rank in range(2):
        d = StreamingLeRobotDataset("x", root=root, rank=rank, world_size=2, **kw)
        for m, b in enumerate(d.loader(batch_size=4, num_workers=workers, even_batches=True), 1):
            consumed += b["index"].tolist()
            if m == 2:
                break
        states.append(d.state_dict())
    assert states[0] == states[1]
    one = StreamingLeRobotDataset("x", root=root, **kw)
    one.load_state_dict(states[0])
    rest = [i for b in one.loader(batch_size=5) for i in b["index"].tolist()]
    assert sorted(consumed + rest) == list(range(n))
    # and the mixture streams resume the same way
    report = preflight(_spec(roots, 20))
    skw = dict(cache_dir=tmp_path, episode_pool_size=2, seed=1, return_uint8=True)
    sfull = _ids(StreamingMixtureDataset(report, **skw).loader(batch_size=8, num_workers=workers))
    s = StreamingMixtureDataset(report, **skw)
    shead = []
    for b in s.loader(batch_size=8, num_workers=workers):
        shead.append(b)
        if len(shead) == 4:
            break
    resumed = StreamingMixtureDataset(report, **skw)
    resumed.load_state_dict(s.state_dict())
    assert _ids(shead) + _ids(resumed.loader(batch_size=8, num_workers=workers)) == sfull


def test_bad_resampling_options_are_named(roots):
    root = roots[30]
    for bad in (0, 2.5, True, "30"):
        with pytest.raises(ValueError, match="target_fps must be an int"):
            LeRobotDataset("x", root=root, target_fps=bad)
    with pytest.raises(ValueError, match="needs a target_fps"):
        LeRobotDataset("x", root=root, resample={"action": "linear"})
    with pytest.raises(ValueError, match="rules must be one of nearest, previous, linear"):
        LeRobotDataset("x", root=root, target_fps=20, resample={"action": "cubic"})
    with pytest.raises(ValueError) as e:
        LeRobotDataset(
            "x",
            root=root,
            target_fps=20,
            resample={"observation.gripper": "linear", CAM: "nearest", "index": "previous", "nope": "linear"},
        )
    text = str(e.value)
    assert "'observation.gripper' is int64" in text and "camera" in text and "set by the resampling" in text
    assert "'nope' is not a feature" in text
    with pytest.raises(ValueError, match="not multiples of 1/fps"):  # windows are on the target grid
        LeRobotDataset("x", root=root, target_fps=20, delta_timestamps={"action": [0.0, 1 / 30]})
    with pytest.raises(MixtureSpecError) as e:
        MixtureSpec.from_dict(
            {"entries": [str(root)], "target_fps": 0, "resample": {"cam": "linear", "state": "spline"}}
        )
    assert len(e.value.problems) == 3
    with pytest.raises(MixtureSpecError, match="needs a 'target_fps'"):
        MixtureSpec.from_dict({"entries": [str(root)], "resample": {"action": "linear"}})
    spec = _spec(roots, 20)
    assert MixtureSpec.from_dict(spec.to_dict()).target_fps == 20


def test_an_eval_split_at_a_control_rate(roots, tmp_path):
    report = preflight(_spec(roots, 20, eval_split={"fraction": 0.4, "seed": 1}))
    refs = {f: Reference(roots[f], f, 20) for f in RATES}
    ds = MixtureDataset(report, return_uint8=True, cache_dir=tmp_path)
    ev = ds.eval_dataset()
    for f, rep in zip(RATES, report.entries):
        per_episode = Counter(r["episode_index"] for r in refs[f].rows)  # resampled frames of each episode
        assert rep.eval_episodes == 1 and rep.episodes == 2
        assert rep.frames + rep.eval_frames == sum(per_episode.values())
    seen = {
        (int(d), int(e))
        for d, e in zip(
            ev.get_batch(np.arange(len(ev)))["dataset_index"], ev.get_batch(np.arange(len(ev)))["episode_index"]
        )
    }
    assert len(seen) == 4 and ev.num_frames == sum(r.eval_frames for r in report.entries)
    for i in range(0, len(ev), 3):
        _check_mixture(ev[i], refs, report)
