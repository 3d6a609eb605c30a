"""Hub datasets through huggingface_hub, patched at its download functions (no hub is reachable here)."""

from __future__ import annotations

import fnmatch
import shutil
import threading
from pathlib import Path

import huggingface_hub
import pytest

from episodic import LeRobotDataset


class FakeHub:
    """Serves a local dataset directory as repo `user/ds` through snapshot_download / hf_hub_download."""

    def __init__(self, remote: Path):
        self.remote = remote
        self.snapshots: list[dict] = []
        self.files: list[str] = []
        self.threads: set[str] = set()
        self.lock = threading.Lock()

    def snapshot_download(self, repo_id, repo_type=None, revision=None, local_dir=None, allow_patterns=None, **kw):
        assert repo_id == "user/ds" and repo_type == "dataset"
        self.snapshots.append({"revision": revision, "allow_patterns": allow_patterns})
        for f in self.remote.rglob("*"):
            rel = f.relative_to(self.remote).as_posix()
            if f.is_file() and (allow_patterns is None or any(fnmatch.fnmatch(rel, p) for p in allow_patterns)):
                (Path(local_dir) / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(f, Path(local_dir) / rel)
        return local_dir

    def hf_hub_download(self, repo_id, filename, repo_type=None, revision=None, local_dir=None, **kw):
        with self.lock:
            self.files.append(filename)
            self.threads.add(threading.current_thread().name)
        dst = Path(local_dir) / filename
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(self.remote / filename, dst)
        return str(dst)


@pytest.fixture()
def hub(multifile_root, monkeypatch, tmp_path):
    fake = FakeHub(multifile_root)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake.snapshot_download)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake.hf_hub_download)
    monkeypatch.setenv("EPISODIC_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("HF_LEROBOT_HOME", raising=False)
    return fake


def test_whole_dataset_is_one_snapshot(hub, multifile_root):
    ds = LeRobotDataset("user/ds", revision="v1.0")
    assert hub.snapshots == [{"revision": "v1.0", "allow_patterns": None}] and hub.files == []
    assert len(ds) == len(LeRobotDataset("x", root=multifile_root))


def test_subset_downloads_exactly_its_files_then_nothing(hub, multifile_root):
    ds = LeRobotDataset("user/ds", episodes=[5, 1])
    meta = ds.meta
    want = {meta.data_file_of(e) for e in (1, 5)} | {meta.video_file_of(e, k) for e in (1, 5) for k in meta.video_keys}
    assert hub.snapshots[0]["allow_patterns"] == ["meta/**"]
    assert sorted(hub.files) == sorted(want)
    assert len(hub.files) > 1 and len(ds) == int(meta.episodes.length[[1, 5]].sum())
    ds[0], ds[len(ds) - 1]
    hub.files.clear()
    LeRobotDataset("user/ds", episodes=[1])  # everything it needs is already on disk
    assert hub.files == []


def test_hub_errors_name_the_repo(monkeypatch, tmp_path):
    def fail(*a, **k):
        raise huggingface_hub.errors.RepositoryNotFoundError("404 Client Error")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fail)
    monkeypatch.setenv("EPISODIC_CACHE", str(tmp_path))
    from episodic.format import DatasetFormatError

    with pytest.raises(DatasetFormatError, match="user/missing"):
        LeRobotDataset("user/missing")
