"""An entry's read-ahead (`datasets.entry_reader`): rows are read in blocks of `tabular_block` episodes, but only the
video files of the episodes in reach (pool + read-ahead) are opened, so that the decoder cache, sized for those,
never closes a file still in use (each file is opened once per epoch)."""

from __future__ import annotations

import pytest

from episodic import StreamingLeRobotDataset, StreamingMixtureDataset
from episodic.demo import write_demo_dataset

POOL, AHEAD, BLOCK, BATCH = 6, 2, 16, 4
# the files in reach: each camera's pooled and read-ahead episodes, and the episodes a batch may finish before they
# are released (episodes of 4-7 frames, batches of 4)
CACHE = 2 * (POOL + AHEAD + BATCH)


def _one_file_per_episode(root, episodes: int):
    """`episodes` episodes of 4-7 frames, two 16x32 cameras, every episode in files of its own (LeRobot v2.1's
    layout)."""
    return write_demo_dataset(
        root,
        num_episodes=episodes,
        min_length=4,
        max_length=7,
        height=16,
        width=32,
        progress=False,
        data_files_size_in_mb=1e-6,
        video_files_size_in_mb=1e-6,
    )


@pytest.fixture(scope="module")
def per_episode_files(tmp_path_factory):
    return _one_file_per_episode(tmp_path_factory.mktemp("files") / "ds", 40)


def _files(root) -> int:
    return len(list(root.glob("videos/*/chunk-*/*.mp4")))


def _epoch(ds) -> int:
    """Items of one epoch, iterated in this process (one consumer)."""
    return sum(len(b["index"]) for b in ds.loader(batch_size=BATCH, num_workers=0))


def test_each_file_of_a_dataset_of_one_file_per_episode_is_opened_once(per_episode_files):
    ds = StreamingLeRobotDataset(
        "x",
        root=per_episode_files,
        episode_pool_size=POOL,
        prefetch_episodes=AHEAD,
        tabular_block=BLOCK,
        decoder_cache_size=CACHE,
    )
    assert _epoch(ds) == ds.num_frames
    stats = ds.video_decoder_cache_stats()
    assert _files(per_episode_files) == 80
    assert stats["misses"] == 80, stats  # a block's 16 episodes' files opened at once would evict files in use


def test_each_file_of_a_mixture_entry_is_opened_once(per_episode_files, tmp_path):
    """The same in a mixture: one entry of many episodes, beside another (its reader's blocks as above)."""
    other = _one_file_per_episode(tmp_path / "other", 3)
    spec = {"entries": [{"source": str(per_episode_files)}, {"source": str(other)}]}
    ds = StreamingMixtureDataset(
        spec,
        episode_pool_size=POOL,
        prefetch_episodes=AHEAD,
        tabular_block=BLOCK,
        decoder_cache_size=CACHE,
    )
    assert _epoch(ds) == ds.num_frames
    assert _files(other) == 6
    assert ds.video_decoder_cache_stats()["misses"] == 86
