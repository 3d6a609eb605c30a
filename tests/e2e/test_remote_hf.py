"""hf:// as users have it: a dataset repo at two revisions (two datasets written by episodic), served on
127.0.0.1 by a small real HTTP server that answers the part of the Hugging Face Hub API that huggingface_hub's
HfFileSystem uses (revision info, tree listings, paths-info, file downloads with ranges); episodic reads
metadata and data through HfFileSystem (`hf://datasets/<repo>@<revision>/...`), the endpoint given in
storage_options or, as users set it, in HF_ENDPOINT."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from episodic import LeRobotDataset
from episodic.datasets.streaming import StreamingLeRobotDataset
from episodic.demo import write_demo_dataset
from episodic.format import DatasetFormatError, MissingFileError

from support import HubRepo, HubServer, assert_items_equal

pytest.importorskip("huggingface_hub.hf_file_system")

REPO = "user/robot"
DELTAS = {"action": [0.0, 1 / 30], "observation.images.top": [-1 / 30, 0.0]}


@pytest.fixture(scope="module")
def v2_root(tmp_path_factory) -> Path:
    """The repo's later revision: another dataset (other episodes, lengths, values)."""
    return write_demo_dataset(
        tmp_path_factory.mktemp("hf-v2") / "ds",
        num_episodes=4,
        min_length=10,
        max_length=16,
        height=48,
        width=64,
        progress=False,
        seed=5,
    )


@pytest.fixture(scope="module")
def hub(small_root, v2_root):
    """The Hub on 127.0.0.1: REPO with revision "v1" (= small_root) and "main" (= v2_root)."""
    with HubServer({REPO: HubRepo({"v1": small_root, "main": v2_root})}) as server:
        yield server


@pytest.fixture()
def options(hub, monkeypatch, tmp_path):
    monkeypatch.setenv("EPISODIC_CACHE", str(tmp_path / "cache"))
    return {"endpoint": hub.endpoint, "token": False}


def check_equal(want: LeRobotDataset, got_items) -> None:
    seen = []
    for item in got_items:
        i = int(item["index"])
        assert_items_equal(want[i], item)
        seen.append(i)
    assert sorted(seen) == list(range(len(want)))


@pytest.mark.parametrize("workers", [0, 2])
def test_each_revision_loads_its_own_dataset_map_style(small_root, v2_root, hub, options, tmp_path, workers):
    sha_v1 = hub.repos[REPO].refs["v1"][0]
    for rev, root in [("v1", small_root), (sha_v1, small_root), ("main", v2_root), (None, v2_root)]:
        url = f"hf://datasets/{REPO}" + (f"@{rev}" if rev else "")
        remote = LeRobotDataset(
            "x", root=url, delta_timestamps=DELTAS, storage_options=options, cache_dir=str(tmp_path / "files")
        )
        local = LeRobotDataset("x", root=root, delta_timestamps=DELTAS)
        assert remote.num_episodes == local.num_episodes and remote.meta.tasks == local.meta.tasks
        loader = torch.utils.data.DataLoader(remote, batch_size=8, num_workers=workers)
        check_equal(local, ({k: v[j] for k, v in b.items()} for b in loader for j in range(len(b["index"]))))
    assert LeRobotDataset("x", root=small_root).num_frames != LeRobotDataset("x", root=v2_root).num_frames
    assert any(path.endswith(".mp4") and "/resolve/v1/" in path for _, path in hub.requests)


@pytest.mark.parametrize("workers", [0, 2])
def test_streaming_a_revision(small_root, hub, options, workers):
    ds = StreamingLeRobotDataset(
        "x",
        root=f"hf://datasets/{REPO}@v1",
        delta_timestamps=DELTAS,
        storage_options=options,
        episode_pool_size=2,
        seed=1,
    )
    local = LeRobotDataset("x", root=small_root, delta_timestamps=DELTAS)
    loader = ds.loader(batch_size=8, num_workers=workers)
    check_equal(local, ({k: v[j] for k, v in b.items()} for b in loader for j in range(len(b["index"]))))


def test_missing_revision_and_missing_file_are_named(hub, options, v2_root, tmp_path):
    with pytest.raises(DatasetFormatError, match=rf"hf://datasets/{REPO}@nope/meta/info\.json"):
        LeRobotDataset("x", root=f"hf://datasets/{REPO}@nope", storage_options=options)
    with pytest.raises(DatasetFormatError, match=r"hf://datasets/user/absent@v1/meta/info\.json"):
        LeRobotDataset("x", root="hf://datasets/user/absent@v1", storage_options=options)
    broken = tmp_path / "broken"
    shutil.copytree(v2_root, broken)
    (broken / "videos/observation.images.top/chunk-000/file-000.mp4").unlink()
    hub.repos["user/broken"] = HubRepo({"main": broken})
    ds = LeRobotDataset(
        "x", root="hf://datasets/user/broken", storage_options=options, cache_dir=str(tmp_path / "files")
    )
    with pytest.raises(
        MissingFileError,
        match=r"hf://datasets/user/broken/videos/observation\.images\.top/"
        r"chunk-000/file-000\.mp4: file not found",
    ):
        ds[0]


_SCRIPT = """
import sys, torch
from episodic import LeRobotDataset
out = {}
ds = LeRobotDataset("x", root="hf://datasets/%(repo)s@v1", cache_dir=sys.argv[2])  # HfFileSystem
out["hf_v1"] = ds[len(ds) - 1]
out["hub_v1_episode_1"] = LeRobotDataset("%(repo)s", revision="v1", episodes=[1])[0]  # Hub downloads
out["hub_main"] = LeRobotDataset("%(repo)s")[3]
torch.save(out, sys.argv[1])
"""


def test_hf_endpoint_variable_and_hub_downloads_by_revision(small_root, v2_root, hub, tmp_path):
    """HF_ENDPOINT is read when huggingface_hub is imported: a fresh interpreter, as a user's script has. There
    the same server also serves the Hub downloads of `LeRobotDataset(repo_id, revision=...)`."""
    env = dict(
        os.environ,
        HF_ENDPOINT=hub.endpoint,
        HF_HUB_DISABLE_IMPLICIT_TOKEN="1",
        HF_HUB_DISABLE_TELEMETRY="1",
        HF_HOME=str(tmp_path / "hf"),
        EPISODIC_CACHE=str(tmp_path / "cache"),
        PYTHONPATH=os.pathsep.join(sys.path),
    )
    for name in ("HF_TOKEN", "HF_LEROBOT_HOME", "HF_HUB_OFFLINE"):
        env.pop(name, None)
    out = subprocess.run(
        [sys.executable, "-c", _SCRIPT % {"repo": REPO}, str(tmp_path / "items.pt"), str(tmp_path / "files")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    got = torch.load(tmp_path / "items.pt")
    v1, v1_episode_1, main = (
        LeRobotDataset("x", root=small_root),
        LeRobotDataset("x", root=small_root, episodes=[1]),
        LeRobotDataset("x", root=v2_root),
    )
    assert_items_equal(v1[len(v1) - 1], got["hf_v1"])
    assert_items_equal(v1_episode_1[0], got["hub_v1_episode_1"])
    assert_items_equal(main[3], got["hub_main"])
    assert not torch.equal(v1[3]["action"], main[3]["action"])
    fetched = {path for method, path in hub.requests if method == "GET" and "/resolve/" in path}
    assert any(
        p.endswith("videos/observation.images.top/chunk-000/file-000.mp4") and "/resolve/v1/" in p for p in fetched
    )
