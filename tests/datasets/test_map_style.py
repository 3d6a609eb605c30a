"""Map-style items on datasets written by episodic's writer, checked against the source arrays and an
independent per-item reference (LeRobot's loop-based window rules)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from episodic import EpisodicDataset, LeRobotDataset
from episodic.demo import synthetic_episode
from episodic.format import EpisodeIndexError, VideoDecodeError

FPS = 30
DELTAS = {
    "action": [i / FPS for i in range(5)],
    "observation.state": [-2 / FPS, -1 / FPS, 0.0],
    "observation.images.top": [-1 / FPS, 0.0],
}


def source_episodes(ds, seed: int = 0) -> list[dict]:
    lengths = ds.meta.episodes.length
    h, w, _ = ds.meta.info.features["observation.images.top"].shape
    return [synthetic_episode(e, int(lengths[e]), height=h, width=w, seed=seed) for e in range(len(lengths))]


def reference_window(ds, src, idx: int, key: str, seconds: list[float]):
    """LeRobot's rule written as a plain loop over global indices."""
    eps = ds.meta.episodes
    item_index = int(ds[idx]["index"])
    ep = int(np.searchsorted(eps.dataset_to_index, item_index, side="right"))
    lo, hi = int(eps.dataset_from_index[ep]), int(eps.dataset_to_index[ep])
    rows, pad = [], []
    for s in seconds:
        d = round(s * FPS)
        rows.append(max(lo, min(hi - 1, item_index + d)) - lo)
        pad.append(item_index + d < lo or item_index + d >= hi)
    return ep, rows, pad


def test_tabular_values_equal_source_everywhere(small_root):
    ds = LeRobotDataset("x", root=small_root)
    src = source_episodes(ds)
    state = np.concatenate([s["observation.state"] for s in src])
    action = np.concatenate([s["action"] for s in src])
    batch = ds.get_batch(np.arange(len(ds)))
    assert np.array_equal(batch["observation.state"].numpy(), state)
    assert np.array_equal(batch["action"].numpy(), action)
    assert batch["index"].tolist() == list(range(len(ds)))
    assert batch["timestamp"].dtype == torch.float32 and batch["index"].dtype == torch.int64


def test_item_layout_matches_lerobot_conventions(small_root):
    ds = LeRobotDataset("x", root=small_root, delta_timestamps=DELTAS)
    item = ds[0]
    assert list(item)[:2] == ["observation.images.top", "observation.images.wrist"]
    assert list(item)[-1] == "task" and isinstance(item["task"], str)
    assert (
        item["observation.images.top"].shape == (2, 3, 48, 64) and item["observation.images.top"].dtype == torch.float32
    )
    assert item["observation.images.wrist"].shape == (3, 48, 64)
    assert item["action"].shape == (5, 14) and item["observation.state"].shape == (3, 14)
    assert item["index"].shape == () and item["timestamp"].shape == ()
    for key in DELTAS:
        assert item[f"{key}_is_pad"].dtype == torch.bool
    assert ds.meta.camera_keys == ["observation.images.top", "observation.images.wrist"]
    assert ds.num_frames == len(ds) and ds.num_episodes == 6
    assert ds.meta.episodes["dataset_from_index"][0] == 0


@pytest.mark.parametrize("episodes", [None, [4, 1, 3], [5], [0, 2]])
def test_windows_and_pads_match_reference_at_every_index(small_root, episodes):
    ds = LeRobotDataset("x", root=small_root, delta_timestamps=DELTAS, episodes=episodes)
    src = source_episodes(ds)
    for idx in range(len(ds)):
        item = ds[idx]
        for key in ("action", "observation.state"):
            ep, rows, pad = reference_window(ds, src, idx, key, DELTAS[key])
            assert np.array_equal(item[key].numpy(), src[ep][key][rows]), (idx, key)
            assert item[f"{key}_is_pad"].tolist() == pad, (idx, key)
        ep, rows, pad = reference_window(ds, src, idx, "observation.images.top", DELTAS["observation.images.top"])
        assert item["observation.images.top_is_pad"].tolist() == pad
        frames = (item["observation.images.top"].numpy() * 255).round().transpose(0, 2, 3, 1)
        err = np.abs(frames - src[ep]["observation.images.top"][rows].astype(np.float64)).mean()
        assert err < 6, (idx, err)  # lossy AV1, but the right frame (neighbouring frames differ far more)


def test_subset_rows_come_in_ascending_episode_order(small_root):
    ds = LeRobotDataset("x", root=small_root, episodes=[4, 1, 3])
    eps = [int(ds[i]["episode_index"]) for i in range(len(ds))]
    lengths = ds.meta.episodes.length
    assert eps == [1] * lengths[1] + [3] * lengths[3] + [4] * lengths[4]
    assert ds.episodes == [4, 1, 3] and ds.num_episodes == 3


def test_frames_are_the_right_ones(small_root):
    """Each decoded frame is closer to its source frame than to the neighbouring source frames."""
    ds = LeRobotDataset("x", root=small_root, return_uint8=True)
    src = source_episodes(ds)
    for idx in [0, 1, 7, len(ds) // 2, len(ds) - 1]:
        item = ds[idx]
        ep, f = int(item["episode_index"]), int(item["frame_index"])
        got = item["observation.images.wrist"].numpy().transpose(1, 2, 0).astype(np.float64)
        assert item["observation.images.wrist"].dtype == torch.uint8
        errs = {g: np.abs(got - src[ep]["observation.images.wrist"][g]).mean() for g in range(len(src[ep]["action"]))}
        assert min(errs, key=errs.get) == f


def test_unselected_cameras_are_never_decoded(small_root):
    ds = LeRobotDataset("x", root=small_root, video_keys=["observation.images.wrist"])
    item = ds[3]
    assert "observation.images.top" not in item and "observation.images.wrist" in item
    opened = list(ds.decoders._readers)
    assert opened and all("observation.images.wrist" in p for p in opened)
    tab = LeRobotDataset("x", root=small_root, video_keys=[])
    tab.get_batch(np.arange(len(tab)))
    assert tab.decoders.stats()["misses"] == 0


def test_multifile_multichunk_dataset(multifile_root):
    ds = LeRobotDataset("x", root=multifile_root, delta_timestamps=DELTAS)
    assert len(ds.meta.episodes.data_files) > 3
    assert len({f.split("/")[-2] for f in ds.meta.episodes.data_files}) >= 2  # several chunk dirs
    assert len(ds.meta.episodes.cameras["observation.images.top"].files) > 2
    src = source_episodes(ds, seed=1)
    for idx in range(0, len(ds), 7):
        item = ds[idx]
        ep, f = int(item["episode_index"]), int(item["frame_index"])
        assert np.array_equal(item["observation.state"][-1].numpy(), src[ep]["observation.state"][f])
        frame = (item["observation.images.top"][-1].numpy() * 255).transpose(1, 2, 0)
        assert np.abs(frame - src[ep]["observation.images.top"][f]).mean() < 6


def test_dataloader_with_forked_workers_equals_serial(small_root):
    ds = LeRobotDataset("x", root=small_root, delta_timestamps=DELTAS)
    ds[0]  # the parent opens decoders before forking: children must not reuse them
    assert ds.decoders.stats()["open"] > 0
    serial = torch.utils.data.DataLoader(ds, batch_size=8, shuffle=False, num_workers=0)
    forked = torch.utils.data.DataLoader(ds, batch_size=8, shuffle=False, num_workers=2, multiprocessing_context="fork")
    for a, b in zip(serial, forked, strict=True):
        for k in a:
            if k != "task":
                assert torch.equal(a[k], b[k]), k
        assert a["task"] == b["task"]


def test_decode_threads_give_the_same_batches(multifile_root, small_root, copy_of, monkeypatch):
    """Cameras and files decoded on 2 threads equal one thread's decode, bit for bit (multi-file: a batch
    spans several files per camera); a decode error on a thread still names file, episode and camera."""
    rng = np.random.default_rng(0)
    one = LeRobotDataset("x", root=multifile_root, delta_timestamps=DELTAS, return_uint8=True)
    two = LeRobotDataset("x", root=multifile_root, delta_timestamps=DELTAS, return_uint8=True)
    for _ in range(3):
        idx = rng.choice(len(one), 24, replace=False)
        monkeypatch.setenv("EPISODIC_DECODE_THREADS", "1")
        a = one.get_batch(idx)
        monkeypatch.setenv("EPISODIC_DECODE_THREADS", "2")
        b = two.get_batch(idx)
        assert a.keys() == b.keys()
        for k in a:
            assert (a[k] == b[k]) if k == "task" else torch.equal(a[k], b[k]), k
    root = copy_of(small_root)
    (root / "videos/observation.images.top/chunk-000/file-000.mp4").write_bytes(b"\x00garbage" * 1000)
    bad = LeRobotDataset("x", root=root)
    with pytest.raises(VideoDecodeError, match=r"episode \d+, camera 'observation.images.top'.*file-000\.mp4"):
        bad.get_batch([0, 1])


def test_native_batches_and_loader(small_root):
    ds = EpisodicDataset(small_root, delta_timestamps=DELTAS, return_uint8=True)
    batch = ds.get_batch([0, 5, 9])
    assert (
        batch["observation.images.top"].shape == (3, 2, 3, 48, 64)
        and batch["observation.images.top"].dtype == torch.uint8
    )
    seen = []
    for b in ds.loader(batch_size=16, shuffle=True, num_workers=0, seed=3):
        seen.extend(b["index"].tolist())
    assert sorted(seen) == list(range(len(ds)))


def test_loader_order_is_lerobots_episode_aware_order(small_root):
    """The loader's batches are consecutive slices of LeRobot's episode-aware order (`EpisodeAwareSampler`), epoch
    after epoch (a new permutation each epoch), as a torch BatchSampler over that sampler gives them."""
    from episodic.order import EpisodeAwareSampler

    ds = EpisodicDataset(small_root, video_keys=[])
    starts = ds.rows.columns.starts
    want = torch.utils.data.BatchSampler(EpisodeAwareSampler(starts[:-1], starts[1:], shuffle=True, seed=5), 16, False)
    loader = ds.loader(batch_size=16, seed=5)
    for epoch in range(2):
        got = [b["index"].tolist() for b in loader]
        assert got == [list(b) for b in want], epoch


@pytest.mark.parametrize("workers", [0, 2])
def test_loader_resumes_exactly_from_its_state_dict(small_root, workers):
    """Interrupted after 3 batches of epoch 1: a new loader (another worker count too) given the state_dict hands
    out exactly the batches the uninterrupted loader would have, then the next epoch."""
    ds = EpisodicDataset(small_root, delta_timestamps=DELTAS, return_uint8=True)
    full = ds.loader(batch_size=8, seed=1, num_workers=workers)
    epochs = [[b["index"].tolist() for b in full] for _ in range(3)]
    first = ds.loader(batch_size=8, seed=1, num_workers=workers)
    assert [b["index"].tolist() for b in first] == epochs[0]
    it = iter(first)
    head = [next(it)["index"].tolist() for _ in range(3)]
    state = json.loads(json.dumps(first.state_dict()))
    del it
    resumed = EpisodicDataset(small_root, delta_timestamps=DELTAS, return_uint8=True).loader(
        batch_size=8, seed=1, num_workers=2 - workers
    )
    resumed.load_state_dict(state)
    rest = [b["index"].tolist() for b in resumed]
    assert head + rest == epochs[1]
    assert [b["index"].tolist() for b in resumed] == epochs[2]
    assert len(resumed) == len(epochs[2])


def test_index_out_of_range(small_root):
    ds = LeRobotDataset("x", root=small_root)
    with pytest.raises(IndexError, match="out of range"):
        ds[len(ds)]
    with pytest.raises(EpisodeIndexError, match=r"episode\(s\) \[99\].*6 episodes"):
        LeRobotDataset("x", root=small_root, episodes=[1, 99])


def test_memory_mapped_columns_give_the_same_items(small_root, tmp_path, monkeypatch):
    monkeypatch.setenv("EPISODIC_FORCE_MMAP", "1")
    mm = LeRobotDataset("x", root=small_root, delta_timestamps=DELTAS, video_keys=[], cache_dir=str(tmp_path))
    assert isinstance(mm.rows.columns.arrays["action"], np.memmap)
    assert list(tmp_path.rglob("*-action.npy")) and not list(tmp_path.rglob("*.tmp"))
    monkeypatch.delenv("EPISODIC_FORCE_MMAP")
    ram = LeRobotDataset("x", root=small_root, delta_timestamps=DELTAS, video_keys=[])
    assert not isinstance(ram.rows.columns.arrays["action"], np.memmap)
    a, b = mm.get_batch(np.arange(len(mm))), ram.get_batch(np.arange(len(ram)))
    for k in a:
        assert a[k] == b[k] if k == "task" else torch.equal(a[k], b[k]), k


def test_image_transforms_apply_through_the_dataloader(small_root):
    flip = lambda x: x.flip(-1)  # noqa: E731
    plain = LeRobotDataset("x", root=small_root)
    ds = LeRobotDataset("x", root=small_root, image_transforms=flip)
    for workers in (0, 2):
        batch = next(iter(torch.utils.data.DataLoader(ds, batch_size=4, num_workers=workers)))
        ref = torch.stack([plain[i]["observation.images.top"].flip(-1) for i in range(4)])
        assert torch.equal(batch["observation.images.top"], ref), workers
    native = EpisodicDataset(small_root, image_transforms=flip)
    for batch in native.loader(batch_size=4, shuffle=False, num_workers=2):
        ref = torch.stack([plain[int(i)]["observation.images.top"].flip(-1) for i in batch["index"]])
        assert (
            torch.equal(batch["observation.images.top"], ref) and batch["observation.images.top"].dtype == torch.float32
        )
        break


@pytest.mark.parametrize(
    "kwargs",
    [{"episodes": [4, 0, 2]}, {"eval_split": {"fraction": 0.34, "rule": "lerobot"}}, {"episodes": [5, 1]}],
    ids=["episodes", "eval-split", "two"],
)
def test_absolute_to_relative_idx_maps_each_index_to_its_position(small_root, kwargs):
    """LeRobot 0.6's `absolute_to_relative_idx` (its training script's sampler maps the episodes'
    dataset_from_index ranges through it): {global index: position} of a subset, checked against the dataset's own
    index column read here with pyarrow, and against the items; None for the whole dataset."""
    import pyarrow.parquet as pq

    ds = LeRobotDataset("local/small", root=small_root, **kwargs)
    table = pq.read_table(sorted((small_root / "data").rglob("*.parquet"))[0], columns=["episode_index", "index"])
    episode_index = table.column("episode_index").to_numpy()
    kept = np.unique([int(ds[p]["episode_index"]) for p in range(len(ds))])
    assert 0 < len(kept) < 6
    want = table.column("index").to_numpy()[np.isin(episode_index, kept)]  # ascending episodes, as LeRobot's rows
    mapping = ds.absolute_to_relative_idx
    assert list(mapping) == want.tolist() and list(mapping.values()) == list(range(len(ds)))
    for index, position in list(mapping.items())[::7]:
        assert int(ds[position]["index"]) == index
    assert LeRobotDataset("local/small", root=small_root).absolute_to_relative_idx is None
