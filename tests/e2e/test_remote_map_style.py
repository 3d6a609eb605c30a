"""fsspec URLs: a dataset served by a real HTTP server on 127.0.0.1 gives the same items as on disk."""

from __future__ import annotations

import pytest
import torch

from episodic import LeRobotDataset

pytest.importorskip("aiohttp")


def test_http_items_equal_local(small_root, http_root, tmp_path):
    deltas = {"action": [0, 1 / 30], "observation.images.top": [-1 / 30, 0]}
    remote = LeRobotDataset("x", root=http_root, delta_timestamps=deltas, cache_dir=str(tmp_path / "cache"))
    local = LeRobotDataset("x", root=small_root, delta_timestamps=deltas)
    assert len(remote) == len(local)
    for idx in [0, 5, len(local) // 2, len(local) - 1]:
        a, b = remote[idx], local[idx]
        assert list(a) == list(b)
        for k in a:
            assert (a[k] == b[k]) if k == "task" else torch.equal(a[k], b[k]), k
    cached = list((tmp_path / "cache").rglob("*.mp4"))
    assert len(cached) == 2  # both cameras fetched once, whole, into the cache


def test_http_missing_dataset_names_the_url(http_root):
    from episodic.format import DatasetFormatError

    with pytest.raises(DatasetFormatError, match=r"127\.0\.0\.1.*nope/meta/info\.json"):
        LeRobotDataset("x", root=http_root.rsplit("/", 1)[0] + "/nope")
