"""StreamingLeRobotDataset: items equal map-style items, exactly-once epochs over workers and ranks, exact
resume at every batch, and a flaky real HTTP server (retries counted, nothing lost or duplicated)."""

from __future__ import annotations

import warnings
from contextlib import nullcontext
from pathlib import Path

import pytest
import torch

from episodic import LeRobotDataset
from episodic.datasets.streaming import StreamingLeRobotDataset
from episodic.demo import write_demo_dataset

from support import FaultServer, assert_items_equal

FPS = 30
DELTAS = {
    "action": [i / FPS for i in range(4)],
    "observation.state": [-1 / FPS, 0.0],
    "observation.images.top": [-1 / FPS, 0.0],
}


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    return write_demo_dataset(
        tmp_path_factory.mktemp("stream") / "ds",
        num_episodes=8,
        min_length=15,
        max_length=30,
        height=48,
        width=64,
        progress=False,
        data_files_size_in_mb=0.004,
        video_files_size_in_mb=0.006,
        chunks_size=3,
    )


def indices(batches) -> list[int]:
    return [int(i) for b in batches for i in b["index"]]


# ------------------------------------------------------------------------------------------ items
def test_items_equal_map_style_items(root):
    ref = LeRobotDataset("x", root=root, delta_timestamps=DELTAS)
    ds = StreamingLeRobotDataset("x", root=root, delta_timestamps=DELTAS, episode_pool_size=3, chunk_size=7)
    seen = []
    for item in ds:
        i = int(item["index"])
        seen.append(i)
        assert_items_equal(ref[i], item)
    assert sorted(seen) == list(range(len(ref)))
    assert seen != sorted(seen)
    stats = ds.timing_stats()
    assert stats["frames_emitted"] == len(ref) and stats["decode_seconds"] > 0
    assert ds.video_decoder_cache_stats()["misses"] > 0


@pytest.mark.parametrize("sync_rows", [None, 0])
def test_small_local_blocks_are_read_in_place_larger_ones_on_the_tabular_thread(root, monkeypatch, sync_rows):
    """A local block of at most `entry_reader.SYNC_READ_ROWS` rows is read on the consumer's thread, a larger one on
    the tabular thread (`sync_rows=0` makes every block larger); the items are LeRobot's either way."""
    import threading

    from episodic.datasets import entry_reader

    if sync_rows is not None:
        monkeypatch.setattr(entry_reader, "SYNC_READ_ROWS", sync_rows)
    threads = []
    load = entry_reader.EntryReader._load_block

    def recorded(self, wanted):
        threads.append(threading.current_thread() is threading.main_thread())
        return load(self, wanted)

    monkeypatch.setattr(entry_reader.EntryReader, "_load_block", recorded)
    ref = LeRobotDataset("x", root=root, delta_timestamps=DELTAS)
    ds = StreamingLeRobotDataset(
        "x", root=root, delta_timestamps=DELTAS, episode_pool_size=2, chunk_size=5, tabular_block=2
    )
    n = 0
    for item in ds:
        assert_items_equal(ref[int(item["index"])], item)
        n += 1
    assert n == len(ref)
    assert len(threads) == 4  # 8 episodes in blocks of 2
    assert all(threads) if sync_rows is None else not any(threads)


def test_episode_subset_and_uint8(root):
    ref = LeRobotDataset("x", root=root, episodes=[5, 1, 6], return_uint8=True)
    ds = StreamingLeRobotDataset("x", root=root, episodes=[5, 1, 6], return_uint8=True, episode_pool_size=2)
    by_index = {int(ref[i]["index"]): ref[i] for i in range(len(ref))}
    got = list(ds)
    assert sorted(int(x["index"]) for x in got) == sorted(by_index)
    for item in got[:10]:
        want = by_index[int(item["index"])]
        assert all(torch.equal(want[k], item[k]) for k in want if k != "task")


@pytest.mark.parametrize("workers", [0, 2])
def test_one_epoch_covers_every_frame_once(root, workers):
    ds = StreamingLeRobotDataset("x", root=root, video_keys=["observation.images.top"], episode_pool_size=4)
    loader = ds.loader(batch_size=16, num_workers=workers)
    got = indices(loader)
    assert sorted(got) == list(range(ds.num_frames))
    assert ds.epoch == 1  # an exhausted iteration moves on to the next epoch
    got2 = indices(loader)
    assert sorted(got2) == list(range(ds.num_frames)) and got2 != got
    stats = ds.timing_stats()
    assert stats["frames_emitted"] == 2 * ds.num_frames  # aggregated over the worker processes
    assert stats["processes"] >= max(workers, 1)


# ------------------------------------------------------------------------------------------ resume
@pytest.mark.parametrize("workers", [0, 2])
def test_resume_at_every_batch_is_exact(root, workers):
    kw = dict(video_keys=[], episode_pool_size=3, seed=7)
    ds = StreamingLeRobotDataset("x", root=root, **kw)
    ds.set_epoch(1)
    full = [b["index"].tolist() for b in ds.loader(batch_size=24, num_workers=workers)]
    assert sorted(i for b in full for i in b) == list(range(ds.num_frames))
    for k in range(len(full) + 1):
        a = StreamingLeRobotDataset("x", root=root, **kw)
        a.set_epoch(1)
        before = []
        if k:
            for b in a.loader(batch_size=24, num_workers=workers):
                before.append(b["index"].tolist())
                if len(before) == k:
                    break
        state = a.state_dict()
        assert state["batches_consumed"] == k and state["epoch"] == 1
        b = StreamingLeRobotDataset("x", root=root, **kw)
        b.load_state_dict(state)
        after = [x["index"].tolist() for x in b.loader(batch_size=24, num_workers=workers)] if k < len(full) else []
        assert before + after == full, k


def test_elastic_two_ranks_to_one(root):
    kw = dict(video_keys=[], episode_pool_size=3, seed=3)
    consumed, states = [], []
    for rank in range(2):
        ds = StreamingLeRobotDataset("x", root=root, rank=rank, world_size=2, **kw)
        with pytest.warns(UserWarning, match="does not divide the epoch evenly") if rank == 0 else nullcontext():
            for n, b in enumerate(ds.loader(batch_size=8, even_batches=False), 1):
                consumed += b["index"].tolist()
                if n == 3:
                    break
        states.append(ds.state_dict())
    assert states[0] == states[1]
    one = StreamingLeRobotDataset("x", root=root, rank=0, world_size=1, **kw)
    one.load_state_dict(states[0])
    rest = indices(one.loader(batch_size=5))
    assert sorted(consumed + rest) == list(range(one.num_frames))
    # and once more, 1 -> 2 ranks after a few batches of the one-rank segment
    one = StreamingLeRobotDataset("x", root=root, rank=0, world_size=1, **kw)
    one.load_state_dict(states[0])
    part = []
    for n, b in enumerate(one.loader(batch_size=5), 1):
        part += b["index"].tolist()
        if n == 2:
            break
    state = one.state_dict()
    assert len(state["history"]) == 1
    tail = []
    for rank in range(2):
        ds = StreamingLeRobotDataset("x", root=root, rank=rank, world_size=2, **kw)
        ds.load_state_dict(state)
        with pytest.warns(UserWarning, match="does not divide the epoch evenly") if rank == 0 else nullcontext():
            tail += indices(ds.loader(batch_size=4, even_batches=False))
    assert sorted(consumed + part + tail) == list(range(one.num_frames))


@pytest.mark.parametrize("workers", [0, 2])
def test_even_batches_every_rank_stops_together(root, workers):
    """Under world_size > 1 the loader's default gives every rank the same number of batches (the smallest
    any rank has), with no frame twice; resuming mid-epoch keeps that count; even_batches=False gives each
    rank all of its frames."""
    kw = dict(video_keys=[], episode_pool_size=3, seed=5)
    per_rank, full = [], []
    for rank in range(3):
        ds = StreamingLeRobotDataset("x", root=root, rank=rank, world_size=3, **kw)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            per_rank.append([b["index"].tolist() for b in ds.loader(batch_size=7, num_workers=workers)])
        if rank == 0:
            assert any("all stop after" in str(w.message) for w in caught)
        assert ds.epoch == 1  # the shortened epoch still ends the epoch
        with pytest.warns(UserWarning, match="does not divide") if rank == 0 and workers == 0 else nullcontext():
            full.append(
                [
                    b["index"].tolist()
                    for b in StreamingLeRobotDataset("x", root=root, rank=rank, world_size=3, **kw).loader(
                        batch_size=7, num_workers=workers, even_batches=False
                    )
                ]
            )
    n = len(per_rank[0])
    assert all(len(r) == n for r in per_rank) and max(len(f) for f in full) > n
    assert per_rank == [f[:n] for f in full]  # the same batches, cut at the shortest rank's count
    flat = [i for r in per_rank for b in r for i in b]
    assert len(flat) == len(set(flat))
    # resume after 2 batches: the same count in all
    for rank in range(3):
        ds = StreamingLeRobotDataset("x", root=root, rank=rank, world_size=3, **kw)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            it = iter(ds.loader(batch_size=7, num_workers=workers))
            head = [next(it)["index"].tolist() for _ in range(2)]
            it.close()
            again = StreamingLeRobotDataset("x", root=root, rank=rank, world_size=3, **kw)
            again.load_state_dict(ds.state_dict())
            tail = [b["index"].tolist() for b in again.loader(batch_size=7, num_workers=workers)]
        assert head + tail == per_rank[rank]


# ------------------------------------------------------------------------------------------ http
@pytest.fixture()
def http_root(root):
    with FaultServer(root.parent, seed=1) as server:
        yield f"{server.url}/{root.name}", server


@pytest.mark.parametrize("workers", [0, 2])
def test_flaky_http_epoch_exactly_once_with_retries(root, http_root, tmp_path, workers):
    url, handler = http_root
    ref = LeRobotDataset("x", root=root, delta_timestamps=DELTAS)
    ds = StreamingLeRobotDataset(
        None,
        root=url,
        delta_timestamps=DELTAS,
        episode_pool_size=3,
        cache_dir=tmp_path,
        mirror_max_bytes=20_000,
        fetch_backoff_s=0.005,
        fetch_max_backoff_s=0.05,
        seed=workers,
    )
    handler.fail_rate = 0.1  # after the metadata: data and video files are fetched through the prefetcher
    seen = []
    for batch in ds.loader(batch_size=16, num_workers=workers):
        for b, i in enumerate(batch["index"].tolist()):
            seen.append(i)
            if len(seen) % 13 == 0:
                want = ref[i]
                assert torch.equal(want["observation.images.top"], batch["observation.images.top"][b])
                assert torch.equal(want["action"], batch["action"][b])
    handler.fail_rate = 0.0
    assert sorted(seen) == list(range(len(ref)))
    stats = ds.timing_stats()
    assert handler.failures > 0 and stats["retries"] > 0, (handler.failures, stats)
    assert stats["bytes_fetched"] > 0 and stats["ranges_fetched"] > 0 and stats["frames_emitted"] == len(ref)
    assert stats["cache_evictions"] > 0  # a 20 kB budget: released files are evicted
    assert not any(p.is_file() for p in Path(tmp_path).rglob("*"))  # the private mirrors are removed


def test_permanent_http_failure_names_the_url(root, http_root, tmp_path):
    url, handler = http_root
    ds = StreamingLeRobotDataset(
        None, root=url, video_keys=[], cache_dir=tmp_path, fetch_retries=2, fetch_backoff_s=0.001
    )
    handler.fail_rate = 1.0
    with pytest.raises(Exception, match=r"127\.0\.0\.1.*data/chunk-.*parquet"):
        list(ds)
    handler.fail_rate = 0.0
