"""s3:// as users have it: a dataset written by episodic, uploaded to a real S3 server process (moto) on
127.0.0.1 that checks credentials, read through s3fs with the credentials and the endpoint in the usual AWS_*
environment variables (or the endpoint in storage_options), map-style and streaming, with and without
DataLoader workers: every item equals the item of the local copy."""

from __future__ import annotations

import time

import pytest
import torch

from episodic import LeRobotDataset
from episodic.datasets.streaming import StreamingLeRobotDataset
from episodic.format import FetchError, MissingFileError

from support import assert_items_equal

pytest.importorskip("s3fs")
pytest.importorskip("moto")

FPS = 30
DELTAS = {
    "action": [i / FPS for i in range(3)],
    "observation.state": [-1 / FPS, 0.0],
    "observation.images.top": [-1 / FPS, 0.0],
    "observation.images.wrist": [0.0],
}
URL = "s3://data/small"


@pytest.fixture()
def env(s3_env, monkeypatch, tmp_path):
    monkeypatch.setenv("EPISODIC_CACHE", str(tmp_path / "cache"))  # streaming mirrors, tabular maps
    return s3_env


@pytest.fixture(scope="module")
def local(small_root):
    return LeRobotDataset("x", root=small_root, delta_timestamps=DELTAS)


def rows(batches):
    """The items of DataLoader batches, one dict per frame."""
    for batch in batches:
        for j in range(len(batch["index"])):
            yield {k: v[j] for k, v in batch.items()}


def check_epoch(local: LeRobotDataset, batches) -> list[int]:
    """Every item of one epoch equals the local dataset's item of its index; each index comes once."""
    seen = []
    for item in rows(batches):
        i = int(item["index"])
        assert_items_equal(local[i], item)
        seen.append(i)
    assert sorted(seen) == list(range(len(local)))
    return seen


@pytest.mark.parametrize("endpoint_from", ["AWS_ENDPOINT_URL", "storage_options"])
@pytest.mark.parametrize("workers", [0, 2])
def test_map_style_items_equal_local(env, local, monkeypatch, tmp_path, endpoint_from, workers):
    options = None
    if endpoint_from == "storage_options":
        monkeypatch.delenv("AWS_ENDPOINT_URL")
        options = {"client_kwargs": {"endpoint_url": env.endpoint}}
    ds = LeRobotDataset(
        "x", root=URL, delta_timestamps=DELTAS, storage_options=options, cache_dir=str(tmp_path / "files")
    )
    assert not ds.source.is_local and len(ds) == len(local) and ds.meta.fps == local.meta.fps
    loader = torch.utils.data.DataLoader(
        ds, batch_size=8, shuffle=True, num_workers=workers, generator=torch.Generator().manual_seed(0)
    )
    check_epoch(local, loader)
    assert len(list((tmp_path / "files").rglob("*.mp4"))) == 2  # both cameras fetched whole, once


@pytest.mark.parametrize("workers", [0, 2])
def test_streaming_items_equal_local(env, local, workers):
    ds = StreamingLeRobotDataset("x", root=URL, delta_timestamps=DELTAS, episode_pool_size=2, seed=3)
    seen = check_epoch(local, ds.loader(batch_size=8, num_workers=workers))
    assert seen != sorted(seen)
    stats = ds.stats()
    assert stats["bytes_fetched"] > 0 and stats["processes"] >= max(workers, 1)


def test_missing_dataset_and_missing_file_name_the_url_at_once(env):
    t0 = time.monotonic()
    with pytest.raises(MissingFileError, match=r"s3://data/nothing-here/meta/info\.json: file not found"):
        LeRobotDataset("x", root="s3://data/nothing-here")
    ds = LeRobotDataset("x", root="s3://data/broken")  # its top camera's mp4 was never uploaded
    with pytest.raises(
        MissingFileError,
        match=r"s3://data/broken/videos/observation\.images\.top/chunk-000/"
        r"file-000\.mp4: file not found",
    ):
        ds[0]
    assert time.monotonic() - t0 < 20  # not retried through the 30 s retry window


@pytest.mark.parametrize("variable", ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"])
def test_wrong_credentials_are_refused_naming_the_url(env, monkeypatch, variable):
    monkeypatch.setenv(variable, "wrong")
    t0 = time.monotonic()
    with pytest.raises(FetchError, match=r"s3://data/small/meta/info\.json: refused, not retried") as info:
        LeRobotDataset("x", root=URL)
    assert info.value.attempts == 1 and time.monotonic() - t0 < 20
