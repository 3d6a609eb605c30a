"""What `episodic repack` changes for a streaming epoch over HTTP (a real server on 127.0.0.1 that counts the
bytes it sends): a dataset whose data file is one row group (as other tools write parquet) makes every block of
episodes fetch the whole file; repacked (one row group per episode, many small files into one), the epoch fetches
fewer bytes, and its items are the same. The figure at scale: benchmarks/bench_repack.py."""

from __future__ import annotations

import shutil

import pyarrow.parquet as pq
import pytest

from episodic.datasets.streaming import StreamingLeRobotDataset
from episodic.demo import write_demo_dataset
from episodic.storage import open_source
from episodic.tools.fleet.relayout import relayout
from episodic.tools.fleet.relayout_plan import RelayoutOptions

from support import FaultServer, assert_items_equal


@pytest.fixture(scope="module")
def one_row_group(tmp_path_factory):
    """30 episodes (no camera) whose data file is one row group."""
    root = tmp_path_factory.mktemp("stream") / "one"
    write_demo_dataset(root, num_episodes=30, min_length=100, max_length=140, cameras=(), progress=False)
    for path in root.glob("data/*/*.parquet"):
        pq.write_table(pq.read_table(path), path)  # pyarrow's default: one row group
        assert pq.ParquetFile(path).metadata.num_row_groups == 1
    return root


def _epoch(server: FaultServer, name: str, cache) -> tuple[list[dict], int]:
    sent = server.bytes_sent
    ds = StreamingLeRobotDataset(None, root=f"{server.url}/{name}", seed=0, cache_dir=cache)
    items = sorted(ds, key=lambda x: int(x["index"]))
    return items, server.bytes_sent - sent


def test_a_repacked_dataset_streams_with_fewer_bytes(one_row_group, tmp_path):
    relayout(open_source(one_row_group), str(one_row_group.parent / "repacked"), RelayoutOptions(), tool="repack")
    with FaultServer(one_row_group.parent) as server:
        before, before_bytes = _epoch(server, "one", tmp_path / "a")
        after, after_bytes = _epoch(server, "repacked", tmp_path / "b")
    assert len(before) == len(after) == open_source(one_row_group).load_metadata().total_frames
    for a, b in zip(before, after, strict=True):
        assert_items_equal(a, b)
    data = sum(p.stat().st_size for p in one_row_group.glob("data/*/*.parquet"))
    assert before_bytes > 1.5 * data  # several blocks of episodes, each fetching the whole file
    assert after_bytes < 0.7 * before_bytes, (before_bytes, after_bytes)
    shutil.rmtree(one_row_group.parent / "repacked")
