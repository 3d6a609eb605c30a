"""Hub datasets through huggingface_hub, patched at its download functions (no hub is reachable here)."""

from __future__ import annotations

import fnmatch
import io
import shutil
import threading
import time
from pathlib import Path

import huggingface_hub
import pytest

from episodic import LeRobotDataset


class FakeHub:
    """Serves a local dataset directory as repo `user/ds` through snapshot_download / hf_hub_download."""

    def __init__(self, remote: Path):
        self.remote = remote
        self.snapshots: list[dict] = []
        self.files: list[str] = []  # files asked for
        self.copied: list[str] = []  # files written (absent, or different from the hub's: huggingface_hub's check)
        self.failures: list[BaseException] = []  # raised by the next calls, in order
        self.kwargs: list[dict] = []
        self.threads: set[str] = set()
        self.lock = threading.Lock()

    def _maybe_fail(self, kw: dict) -> None:
        with self.lock:
            self.kwargs.append(kw)
            if self.failures:
                raise self.failures.pop(0)

    def snapshot_download(self, repo_id, repo_type=None, revision=None, local_dir=None, allow_patterns=None, **kw):
        assert repo_id == "user/ds" and repo_type == "dataset"
        self._maybe_fail(kw)
        self.snapshots.append({"revision": revision, "allow_patterns": allow_patterns})
        for f in self.remote.rglob("*"):
            rel = f.relative_to(self.remote).as_posix()
            if f.is_file() and (allow_patterns is None or any(fnmatch.fnmatch(rel, p) for p in allow_patterns)):
                (Path(local_dir) / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(f, Path(local_dir) / rel)
        return local_dir

    def hf_hub_download(self, repo_id, filename, repo_type=None, revision=None, local_dir=None, **kw):
        self._maybe_fail(kw)
        dst = Path(local_dir) / filename
        with self.lock:
            self.files.append(filename)
            self.threads.add(threading.current_thread().name)
            if not dst.exists() or dst.read_bytes() != (self.remote / filename).read_bytes():
                self.copied.append(filename)
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(self.remote / filename, dst)
        return str(dst)


def _http_errors(status: int):
    """(an HTTP `status` error of huggingface_hub, a connection error) of the HTTP client it uses (httpx2
    from huggingface_hub 1.0, requests before)."""
    try:
        import httpx2

        request = httpx2.Request("GET", "https://hub.invalid/x")
        response = httpx2.Response(status, request=request)
        refused = httpx2.ConnectError("refused", request=request)
    except ImportError:
        import requests

        response = requests.Response()
        response.status_code, response.url = status, "https://hub.invalid/x"
        refused = requests.ConnectionError("refused")
    return response, refused


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
    assert sorted(hub.files) == sorted(want) == sorted(hub.copied)
    assert len(hub.files) > 1 and len(ds) == int(meta.episodes.length[[1, 5]].sum())
    ds[0], ds[len(ds) - 1]
    hub.files.clear(), hub.copied.clear()
    LeRobotDataset("user/ds", episodes=[1])  # everything it needs is on disk, unchanged: nothing copied
    want1 = {meta.data_file_of(1)} | {meta.video_file_of(1, k) for k in meta.video_keys}
    assert sorted(hub.files) == sorted(want1) and hub.copied == []


def test_a_copy_on_disk_is_synced_with_the_hub_every_time(hub, multifile_root, copy_of):
    """A whole dataset on disk, then a subset after the dataset was re-published (new metadata, new files
    of that subset), then the whole dataset again: it is synced again, never new metadata with old files."""
    hub.remote = copy_of(multifile_root)
    LeRobotDataset("user/ds")
    rel = LeRobotDataset("x", root=hub.remote).meta.data_file_of(5)
    import pyarrow.parquet as pq

    pq.write_table(pq.read_table(hub.remote / rel), hub.remote / rel, compression="gzip")  # re-published
    LeRobotDataset("user/ds", episodes=[1])
    ds = LeRobotDataset("user/ds")
    assert [s["allow_patterns"] for s in hub.snapshots] == [None, ["meta/**"], None]
    assert (Path(ds.source.root) / rel).read_bytes() == (hub.remote / rel).read_bytes()


def test_subset_files_on_disk_are_checked_against_the_hub(hub, multifile_root, copy_of, monkeypatch):
    """A re-published dataset: files already on disk are not used blindly (huggingface_hub compares each
    with the Hub and fetches it again), so new metadata never meets old data files."""
    hub.remote = copy_of(multifile_root)
    LeRobotDataset("user/ds", episodes=[1])
    rel = LeRobotDataset("x", root=hub.remote).meta.data_file_of(1)
    path = hub.remote / rel
    path.write_bytes(path.read_bytes())  # the same bytes: nothing to copy
    hub.copied.clear()
    LeRobotDataset("user/ds", episodes=[1])
    assert hub.copied == []
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    pq.write_table(table, path, compression="gzip")  # re-published: the same rows, other bytes
    ds = LeRobotDataset("user/ds", episodes=[1])
    assert hub.copied == [rel] and (Path(ds.source.root) / rel).read_bytes() == path.read_bytes()


def test_hub_calls_are_retried_with_the_policy_timeout(hub, multifile_root):
    from episodic.storage import FetchPolicy

    response, refused = _http_errors(503)
    busy = huggingface_hub.errors.HfHubHTTPError("503 busy", response=response)
    hub.failures = [busy, refused, busy]
    policy = FetchPolicy(backoff_s=0.001, max_backoff_s=0.01, retry_window_s=5, timeout_s=3, connect_timeout_s=2)
    ds = LeRobotDataset("user/ds", episodes=[2], fetch_policy=policy)
    assert len(ds) == int(ds.meta.episodes.length[2]) and not hub.failures
    assert all(kw["etag_timeout"] == 5 for kw in hub.kwargs)  # connect + read timeout: a HEAD's whole limit


def test_hub_errors_name_the_repo(monkeypatch, tmp_path):
    calls = []

    def fail(*a, **k):
        calls.append(1)
        raise huggingface_hub.errors.RepositoryNotFoundError("404 Client Error", response=_http_errors(404)[0])

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fail)
    monkeypatch.setenv("EPISODIC_CACHE", str(tmp_path))
    from episodic.format import DatasetFormatError

    with pytest.raises(DatasetFormatError, match="user/missing.*not found on the Hub"):
        LeRobotDataset("user/missing")
    assert len(calls) == 1  # not retried


def test_offline_without_a_copy_fails_at_once(hub, monkeypatch):
    from huggingface_hub import constants

    def offline(*a, **k):
        raise huggingface_hub.errors.LocalEntryNotFoundError("cannot find the requested files in the local cache")

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", offline)
    from episodic.format import MissingFileError

    t0 = time.monotonic()
    with pytest.raises(MissingFileError, match="user/ds.*data/.*not on disk, and huggingface_hub is offline"):
        LeRobotDataset("user/ds", episodes=[0])
    assert time.monotonic() - t0 < 5


def test_two_snapshots_at_once_keep_the_progress_bars_lock(monkeypatch):
    """huggingface_hub's snapshot_download runs tqdm's thread_map, whose `ensure_lock` deletes the bar class's lock
    on its way out when it made it. Two snapshots at once (a mixture's Hub entries, on threads): the first one out
    deleted the lock under the second one's bars, which failed closing (seen in CI, tqdm 4.66). Here the two
    snapshots' `ensure_lock`s interleave as the threads did, after what `download` does first."""
    from huggingface_hub.utils import tqdm as hub_bar
    from tqdm.contrib.concurrent import ensure_lock
    from tqdm.std import tqdm as base_bar

    from episodic.storage import hub

    for cls in (hub_bar, base_bar):  # no lock yet, as in a fresh process
        monkeypatch.delattr(cls, "_lock", raising=False)
    hub._keep_bars_lock()  # what `download` does before huggingface_hub is called
    first, second = ensure_lock(hub_bar), ensure_lock(hub_bar)
    first.__enter__()
    second.__enter__()
    bar = hub_bar(total=1, file=io.StringIO(), disable=False)  # the second snapshot's, open as the first one ends
    first.__exit__(None, None, None)
    bar.close()  # raised AttributeError: type object 'tqdm' has no attribute '_lock'
    second.__exit__(None, None, None)
    assert hasattr(hub_bar, "_lock")
