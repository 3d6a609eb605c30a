"""The frame engine's output: frames written straight into recycled batch memory never change a batch someone
still holds; image_size / resize_mode give LeRobot's items resized the torchvision way, within the documented
tolerance, in every dataset mode; the GPU hand-off conversion equals the CPU one."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from episodic import EpisodicDataset, LeRobotDataset, StreamingLeRobotDataset
from episodic.datasets.device import frames_to_float, to_device

from support import LEROBOT_FIXTURE, add_image_feature

ROOT = LEROBOT_FIXTURE / "dataset"


@pytest.mark.parametrize("workers", [0, 2])
def test_batches_held_by_the_user_never_change(small_root, workers):
    ds = EpisodicDataset(small_root, delta_timestamps={"observation.images.top": [-1 / 30, 0.0]})
    loader = ds.loader(batch_size=8, num_workers=workers, shuffle=True, seed=3)
    held, copies = [], []
    for i, batch in enumerate(loader):
        if i % 3 == 0:  # keep some batches (and a view of one), drop the others: their memory is recycled
            held.append(batch["observation.images.top"][1:])
            copies.append(held[-1].clone())
        if i == 12:
            break
    for h, c in zip(held, copies):
        assert torch.equal(h, c)
    ref = LeRobotDataset("x", root=small_root, delta_timestamps={"observation.images.top": [-1 / 30, 0.0]})
    batch = next(iter(ds.loader(batch_size=8, num_workers=workers, shuffle=False)))
    for j in range(8):
        assert torch.equal(batch["observation.images.top"][j], ref[j]["observation.images.top"])


def _resized(frames: torch.Tensor, size) -> torch.Tensor:
    return F.interpolate(
        frames.reshape(-1, *frames.shape[-3:]), size=size, mode="bilinear", antialias=True, align_corners=False
    ).reshape(*frames.shape[:-2], *size)


@pytest.mark.parametrize("size", [(224, 224), (64, 80)])
def test_stretch_items_are_lerobot_items_resized_by_torchvision(size):
    full = LeRobotDataset("x", root=ROOT)
    small = LeRobotDataset("x", root=ROOT, image_size=size)
    diffs = []
    for i in [0, 17, 250, 1499, 3000]:
        want, got = full[i], small[i]
        assert list(got) == list(want)
        for k in full.camera_keys:
            assert got[k].shape == (3, *size) and got[k].dtype == torch.float32
            diffs.append((got[k] - _resized(want[k], size)).abs().flatten())
        for k in want:
            if k not in full.camera_keys and k != "task":
                assert torch.equal(got[k], want[k]), k
    d = torch.cat(diffs)
    # the tolerance documented in episodic/video/output.py
    assert float(d.mean()) < 2 / 255, float(d.mean())
    assert float(d.kthvalue(int(len(d) * 0.99)).values) < 6 / 255


def test_letterbox_uint8_with_windows_is_the_stretch_to_the_fitted_size_between_zero_bars():
    deltas = {"observation.images.top": [-0.1, 0.0]}
    ds = EpisodicDataset(ROOT, image_size=(96, 96), resize_mode="letterbox", return_uint8=True, delta_timestamps=deltas)
    assert ds.spec.frames.placement((96, 128)) == (72, 96, 12, 0)
    b = ds.get_batch([0, 5, 900])
    assert b["observation.images.top"].shape == (3, 2, 3, 96, 96) and b["observation.images.wrist"].shape == (
        3,
        3,
        96,
        96,
    )
    stretch = EpisodicDataset(ROOT, image_size=(72, 96), return_uint8=True, delta_timestamps=deltas).get_batch(
        [0, 5, 900]
    )
    for k in ds.camera_keys:
        x = b[k]
        assert x.dtype == torch.uint8
        assert not x[..., :12, :].any() and not x[..., 84:, :].any()
        assert torch.equal(x[..., 12:84, :], stretch[k])
        assert x[..., 12:84, :].float().std() > 1


@pytest.mark.parametrize("workers", [0, 2])
def test_streaming_resized_items_equal_map_style(workers):
    stream = StreamingLeRobotDataset("x", root=ROOT, image_size=(48, 64), episode_pool_size=4, seed=1)
    ref = LeRobotDataset("x", root=ROOT, image_size=(48, 64))
    seen = 0
    for batch in stream.loader(batch_size=16, num_workers=workers):
        for j in range(len(batch["index"])):
            want = ref[int(batch["index"][j])]
            for k in ref.camera_keys:
                assert torch.equal(batch[k][j], want[k]), k
        seen += 1
        if seen == 3:
            break
    assert seen == 3


def test_gpu_hand_off_conversion_equals_cpu_items():
    u8 = EpisodicDataset(ROOT, return_uint8=True).get_batch([3, 77])
    f32 = EpisodicDataset(ROOT).get_batch([3, 77])
    moved = to_device(u8, "cpu", float_keys=["observation.images.top"] if "observation.images.top" in u8 else [])
    for k in [k for k in f32 if k != "task"]:
        want = f32[k]
        got = frames_to_float(u8[k]) if u8[k].dtype == torch.uint8 and want.dtype == torch.float32 else u8[k]
        assert torch.equal(got, want), k
    for k, v in moved.items():
        if k != "task":
            assert v.device.type == "cpu"
    # why a 0-dim tensor divisor: a multiplication by the reciprocal (what CUDA does for a Python scalar
    # divisor) differs from the division in the last bit for some byte values
    x = torch.arange(256, dtype=torch.uint8).float()
    assert not torch.equal(x * (1 / torch.tensor(255.0)), x / 255)
    assert torch.equal(frames_to_float(torch.arange(256, dtype=torch.uint8)), x / 255)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_gpu_hand_off_is_bit_identical_on_cuda():
    x = torch.arange(256, dtype=torch.uint8)
    assert torch.equal(frames_to_float(x.cuda()).cpu(), x.float() / 255)


@pytest.mark.parametrize("workers", [0, 2])
def test_pin_memory_loader_gives_the_same_batches(small_root, workers):
    import warnings

    ds = LeRobotDataset("x", root=small_root)
    plain = next(iter(torch.utils.data.DataLoader(ds, batch_size=4, num_workers=workers)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # CPU-only torch: "no accelerator", pinning is skipped
        pinned = next(iter(torch.utils.data.DataLoader(ds, batch_size=4, num_workers=workers, pin_memory=True)))
    for k, v in plain.items():
        if torch.is_tensor(v):
            assert torch.equal(v, pinned[k]), k
            if torch.cuda.is_available():
                assert pinned[k].is_pinned(), k
    import episodic

    assert episodic.to_device is to_device and episodic.frames_to_float is frames_to_float


# ---------------------------------------------------------------------------------------------- several parts
def _parts(ds, cut: int, pooled: bool):
    """The dataset's rows as several parts (`gather.Rows`): its episodes before `cut` and the rest, or (pooled,
    as a streaming consumer holds them) one part per episode; and (part, row) of each dataset position."""
    from episodic.datasets.gather import Rows

    cols, frames = ds.rows.columns, ds.rows.frames
    n = len(cols.episodes)
    spans = [[i] for i in range(n)] if pooled else [list(range(cut)), list(range(cut, n))]
    parts = [Rows(0, cols.span(span[0], span[-1] + 1), frames, pooled=pooled) for span in spans]
    first = np.asarray([cols.starts[span[0]] for span in spans])

    def locate(positions):
        part = np.searchsorted(first, positions, side="right") - 1
        return part, positions - first[part]

    return parts, locate


@pytest.mark.parametrize("pooled", [False, True], ids=["parts", "pooled"])
@pytest.mark.parametrize("threads", ["1", "2"])
@pytest.mark.parametrize("dtype", ["uint8", "float32"])
def test_a_batch_gathered_from_several_parts_equals_the_batch_of_one(
    multifile_root, threads, dtype, pooled, monkeypatch
):
    """What a mixture (an entry's rows) and a streaming pool (one part per episode) gather equals the single
    dataset's one-part batch: windows padded at episode edges, a repeated position, frames of several files."""
    from episodic.datasets.gather import gather

    monkeypatch.setenv("EPISODIC_DECODE_THREADS", threads)
    ds = EpisodicDataset(
        multifile_root, delta_timestamps={"observation.images.top": [-2 / 30, 0.0], "action": [0.0, 1 / 30, 2 / 30]}
    )
    rng = np.random.default_rng(1)
    starts = ds.rows.columns.starts
    edges = np.concatenate([starts[:-1], starts[1:] - 1])
    positions = np.concatenate([rng.integers(0, len(ds), 9), edges[:5], [3, 3]])
    parts, locate = _parts(ds, 4, pooled)
    for pos in (positions, positions[:1], positions[:0]):
        want = ds.build(pos, dtype)
        got = gather(ds.layout, parts, *locate(pos), dtype)
        assert list(got) == list(want)
        for k, v in want.items():
            assert (got[k] == v) if k == "task" else torch.equal(got[k], v), k


def test_image_features_gathered_from_several_parts(small_root, copy_of):
    """An 'image' feature (PNG bytes in the data file) is decoded into each part's rows of the batch too."""
    from episodic.datasets.gather import gather

    root = copy_of(small_root)
    add_image_feature(root, "observation.images.still", 48, 64)
    ds = EpisodicDataset(root, delta_timestamps={"observation.images.still": [-1 / 30, 0.0]})
    assert "observation.images.still" in ds.camera_keys
    positions = np.array([0, 5, 17, 40, 40])
    for pooled in (False, True):
        parts, locate = _parts(ds, 1, pooled)
        want, got = ds.build(positions, "uint8"), gather(ds.layout, parts, *locate(positions), "uint8")
        for k, v in want.items():
            assert (got[k] == v) if k == "task" else torch.equal(got[k], v), k


def test_frame_errors_name_the_episode_camera_and_batch_shape(small_root):
    from dataclasses import replace

    from episodic.datasets.decode import flat_frames, run_jobs
    from episodic.datasets.gather import gather
    from episodic.format.errors import DatasetFormatError, FrameTimestampError

    ds = EpisodicDataset(small_root)
    frames, cols = ds.rows.frames, ds.rows.columns
    key = ds.camera_keys[0]
    ep = cols.episodes[cols.episode_of_rows(np.array([20]))]
    dest = flat_frames(np.zeros((4, 3, 48, 64), np.uint8))
    times = cols.arrays["timestamp"][[[20]]].astype(np.float64)
    (job,) = frames.jobs(key, ep, times, dest, np.array([[2]]), frames.output("uint8", key))
    run_jobs([job])
    late = [job._replace(times=job.times + 0.5 / 30)]  # between two frames: no frame within tolerance
    with pytest.raises(FrameTimestampError, match=rf"episode {int(ep[0])}, camera '{key}': .*no frame within"):
        run_jobs(late)
    small = replace(
        ds.layout, fields=tuple(replace(f, shape=(3, 24, 64)) if f.key == key else f for f in ds.layout.fields)
    )
    with pytest.raises(
        DatasetFormatError,
        match=rf"camera '{key}' gives frames of shape \(3, 48, 64\), "
        r"the batch holds \(3, 24, 64\)",
    ):
        gather(small, [ds.rows], np.zeros(1, np.int64), np.array([20]), "uint8")
    with pytest.raises(IndexError, match="out of range"):
        ds.build([len(ds)])


def test_flat_frames_is_a_view_and_warns_of_nothing():
    """(N, T, H, W, C) frames as (N * T, H, W, C) rows written through to the batch, without the deprecated
    `ndarray.shape = ...` (a DeprecationWarning from numpy 2.5, once per decoded batch); frames that cannot be
    one flat view are refused, never copied (writes would be lost)."""
    import warnings

    from episodic.datasets.decode import flat_frames

    frames = np.zeros((4, 3, 2, 5, 3), np.uint8)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        flat = flat_frames(frames)
        flat[7] = 9
    assert flat.shape == (12, 2, 5, 3) and (frames[2, 1] == 9).all() and frames.sum() == 9 * 30
    with pytest.raises(ValueError, match="cannot be written through one flat view"):
        flat_frames(frames[:, ::2])  # (4, 2) rows 3 apart, then 2 apart: no single stride
    assert flat_frames(frames[:0]).shape == (0, 2, 5, 3)
