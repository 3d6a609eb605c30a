"""No dataset makes episodic touch a path outside its root, its URL prefix or its cache: symbolic links out of a
local root, templates that point an HTTP root at other paths or another host, hostile repo ids, cache and
mirror files. Each case asserts the named error and that nothing outside was read, requested or written."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from concurrent.futures import Future
from pathlib import Path

import huggingface_hub
import pytest
from fsspec.implementations.local import LocalFileSystem

from episodic import EpisodicDataset, LeRobotDataset, StreamingLeRobotDataset
from episodic.format import DatasetFormatError
from episodic.format.errors import UnsafePathError
from episodic.storage.cache import FileCache
from episodic.storage.fetch import file_info
from episodic.storage.prefetch import Prefetcher
from episodic.storage.versions import version_token

from hostile_data import DATA, HOSTILE, TOP, TOP_MP4, OpenRecorder, RecordingServer, edit_info

pytest.importorskip("aiohttp")


# ---------------------------------------------------------------------------------------------- symlinks
def test_symlinked_data_file_pointing_outside(small_root, copy_of, tmp_path):
    root = copy_of(small_root)
    secret = tmp_path / "secret.parquet"
    shutil.copy(root / DATA, secret)
    (root / DATA).unlink()
    (root / DATA).symlink_to(secret)
    with OpenRecorder() as opened:
        with pytest.raises(UnsafePathError, match=rf"{root}/{DATA} resolves to {secret}, outside {root}"):
            LeRobotDataset("x", root=root)
    assert str(secret) not in [os.path.realpath(p) for p in opened]


def test_symlinked_camera_directory_pointing_outside(small_root, copy_of, tmp_path):
    root = copy_of(small_root)
    outside = tmp_path / "elsewhere"
    shutil.move(root / "videos" / TOP, outside)
    (root / "videos" / TOP).symlink_to(outside, target_is_directory=True)
    ds = LeRobotDataset("x", root=root)  # tabular files are inside: construction works
    with pytest.raises(UnsafePathError, match=rf"file-000\.mp4 resolves to {outside}/chunk-000/file-000\.mp4, outside"):
        ds[0]
    assert LeRobotDataset("x", root=root, video_keys=["observation.images.wrist"])[0]


def test_symlinked_info_json_pointing_outside(small_root, copy_of, tmp_path):
    root = copy_of(small_root)
    shutil.move(root / "meta/info.json", tmp_path / "info.json")
    (root / "meta/info.json").symlink_to(tmp_path / "info.json")
    with OpenRecorder() as opened:
        with pytest.raises(UnsafePathError, match=r"meta/info\.json resolves to .*outside"):
            LeRobotDataset("x", root=root)
    assert str(tmp_path / "info.json") not in opened


def test_links_inside_the_root_and_a_hub_snapshot_load(small_root, tmp_path):
    """A Hugging Face cache snapshot links every file into the repository's blobs/: allowed (and links that
    stay inside the root are always fine); a snapshot link out of the repository is not."""
    repo = tmp_path / "datasets--user--ds"
    snap = repo / "snapshots" / "0123abcd"
    for f in small_root.rglob("*"):
        if f.is_file():
            rel = f.relative_to(small_root)
            blob = repo / "blobs" / hashlib.sha1(str(rel).encode()).hexdigest()
            blob.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(f, blob)
            (snap / rel).parent.mkdir(parents=True, exist_ok=True)
            (snap / rel).symlink_to(os.path.relpath(blob, (snap / rel).parent))
    ds = LeRobotDataset("x", root=snap)
    assert len(ds) == 119 and ds[len(ds) - 1]["observation.images.top"].shape == (3, 48, 64)
    (snap / DATA).unlink()
    (snap / DATA).symlink_to(small_root / DATA)
    with pytest.raises(UnsafePathError, match="outside"):
        LeRobotDataset("x", root=snap)


# ---------------------------------------------------------------------------------------------- HTTP roots
def _serve(root: Path):
    """The test directory (the dataset and its sentinels beside it) on 127.0.0.1, and a second server on
    127.0.0.2 that no request may reach."""
    return RecordingServer(root.parent, "127.0.0.1"), RecordingServer(root.parent, "127.0.0.2")


def _assert_inside(server: RecordingServer, other: RecordingServer, root: Path) -> None:
    assert server.requests, "the dataset was never requested"
    assert all(p.startswith(f"/{root.name}/") for p in server.requests), server.requests
    assert other.requests == []


@pytest.mark.parametrize(
    "case",
    [
        c
        for c in HOSTILE
        if c.name in ("data_path parent", "camera key '..'", "percent-encoded parent", "data_path absolute")
    ],
    ids=lambda c: c.name,
)
@pytest.mark.parametrize("mode", ["map", "stream"])
def test_http_root_requests_stay_under_the_prefix(small_root, copy_of, tmp_path, case, mode):
    root = copy_of(small_root)
    (tmp_path / "outside").mkdir()
    shutil.copy(root / DATA, tmp_path / "outside" / "file-000.parquet")
    case.edit(root)
    server, other = _serve(root)
    with server, other:
        url = f"{server.url}/{root.name}"
        with pytest.raises(case.error, match=case.message.replace(r"info\.json", r"info\.json")):
            if mode == "map":
                LeRobotDataset("x", root=url, cache_dir=str(tmp_path / "cache"))[0]
            else:
                next(iter(StreamingLeRobotDataset("x", root=url, cache_dir=tmp_path / "cache").loader(batch_size=4)))
    _assert_inside(server, other, root)


def test_http_root_template_naming_another_host(small_root, copy_of, tmp_path):
    root = copy_of(small_root)
    server, other = _serve(root)
    with server, other:
        port = other.url.rsplit(":", 1)[1]
        edit_info(
            root,
            lambda info: info.update(
                video_path=f"//127.0.0.2:{port}/{root.name}/videos/{{video_key}}/"
                f"chunk-{{chunk_index:03d}}/file-{{file_index:03d}}.mp4"
            ),
        )
        with pytest.raises(UnsafePathError, match=r"field 'video_path'.*absolute"):
            LeRobotDataset("x", root=f"{server.url}/{root.name}", cache_dir=str(tmp_path / "cache"))[0]
    _assert_inside(server, other, root)
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").rglob("*.mp4"))


# ---------------------------------------------------------------------------------------------- cache, mirror
def test_cache_file_names_are_escaped_and_inside(tmp_path):
    cache = FileCache(tmp_path / "files")
    for url in (
        "http://h/ds/..",
        "http://h/ds/%2e%2e%2f%2e%2e%2fetc",
        "http://h/a/\x1b[2J\nx.mp4",
        "http://h/" + "é" * 300,
    ):
        p = cache.key_path(url, "size=1")
        assert p.parent.parent == tmp_path / "files" and p.name.isascii() and p.name.isprintable()
        assert len(p.name) < 100 and not p.name.startswith(".")
    assert cache.key_path("http://h/a.mp4", "v") != cache.key_path("http://h/b/a.mp4", "v")


def test_cache_directory_link_out_is_refused(small_root, tmp_path):
    """A cache whose subdirectory is a link out of it (another user's cache, a swapped directory): nothing is
    written through it."""
    cache = FileCache(tmp_path / "files")
    url_path = str(small_root / DATA)
    url = LocalFileSystem().unstrip_protocol(url_path)
    key = cache.key_path(url, version_token(file_info(LocalFileSystem(), url_path, url, cache.policy)))
    outside = tmp_path / "outside"
    outside.mkdir()
    key.parent.parent.mkdir(parents=True, exist_ok=True)
    key.parent.symlink_to(outside, target_is_directory=True)
    with pytest.raises(UnsafePathError, match="outside"):
        cache.fetch(LocalFileSystem(), url_path)
    assert list(outside.iterdir()) == []


def _prefetcher(root: Path, mirror: Path) -> Prefetcher:
    return Prefetcher(LocalFileSystem(), str(root), mirror, 1 << 30, local=False, threads=2)  # local fs read as remote


@pytest.mark.parametrize("rel", ["../escape.parquet", "/tmp/escape.parquet", "data/../../escape.parquet"])
def test_mirror_writes_stay_in_the_mirror(small_root, tmp_path, rel):
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    pf = _prefetcher(small_root, mirror)
    try:
        for fut in (pf.acquire(rel), pf.acquire_span(rel.replace(".parquet", ".mp4"), 0.0, 0.1)):
            with pytest.raises(UnsafePathError):
                fut.result(timeout=30)
    finally:
        pf.close()
    assert not (tmp_path / "escape.parquet").exists() and not (tmp_path / "escape.mp4").exists()
    assert not Path("/tmp/escape.parquet").exists()


def test_mirror_link_out_is_refused_for_write_sparse_write_and_unlink(small_root, tmp_path):
    mirror, outside = tmp_path / "mirror", tmp_path / "outside"
    (mirror / "videos").mkdir(parents=True)
    outside.mkdir()
    (mirror / "videos" / TOP).symlink_to(outside, target_is_directory=True)
    (mirror / "data").symlink_to(outside, target_is_directory=True)
    pf = _prefetcher(small_root, mirror)
    try:
        futs: list[Future] = [pf.acquire_span(TOP_MP4, 0.0, 0.2), pf.acquire(DATA)]
        for fut in futs:
            with pytest.raises(UnsafePathError, match="outside"):
                fut.result(timeout=30)
    finally:
        pf.close()
    assert list(outside.rglob("*")) == []
    # an eviction never unlinks through a link either: the mirror path is checked there too
    (outside / "victim").write_bytes(b"x")
    with pytest.raises(UnsafePathError):
        pf.mirror_path("data/victim")
    assert (outside / "victim").exists()


# ---------------------------------------------------------------------------------------------- repo ids, roots
@pytest.fixture()
def no_hub(monkeypatch, tmp_path):
    """The Hub functions record calls (none may happen) and the cache is the test's."""
    calls: list = []
    monkeypatch.setattr(huggingface_hub, "snapshot_download", lambda *a, **k: calls.append((a, k)))
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", lambda *a, **k: calls.append((a, k)))
    monkeypatch.setenv("EPISODIC_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("HF_LEROBOT_HOME", raising=False)
    return calls


@pytest.mark.parametrize("repo_id", ["../../escape", "user/../../escape", "/abs/escape", "user/ds/extra", "us er/ds"])
def test_hostile_repo_ids(no_hub, tmp_path, repo_id):
    with pytest.raises(UnsafePathError, match="not a Hub repo id"):
        LeRobotDataset(repo_id)
    assert no_hub == [] and not (tmp_path / "escape").exists()


def test_hostile_revision(no_hub, tmp_path):
    with pytest.raises(UnsafePathError, match="revision"):
        LeRobotDataset("user/ds", revision="../../../escape")
    assert no_hub == [] and not (tmp_path / "escape").exists()


def test_local_root_without_info_json_is_not_a_hub_download(no_hub, small_root, copy_of):
    root = copy_of(small_root)
    (root / "meta/info.json").unlink()
    with pytest.raises(DatasetFormatError, match=r"not a dataset \(no meta/info\.json\)"):
        LeRobotDataset("user/ds", root=root)
    with pytest.raises(UnsafePathError, match="nor an existing local directory"):
        EpisodicDataset(str(root / "typo"))
    assert no_hub == []


def test_empty_root_is_where_the_hub_download_goes(no_hub, tmp_path, caplog):
    root = tmp_path / "new"
    root.mkdir()
    with pytest.raises(DatasetFormatError):  # the recording stub downloads nothing
        LeRobotDataset("user/ds", root=root)
    assert len(no_hub) == 1 and no_hub[0][1]["local_dir"] == str(root)
    assert "downloading Hub repo 'user/ds'" in caplog.text


def test_info_json_with_nothing_to_escape_still_loads(small_root, copy_of):
    """Custom templates that stay inside the root are fine."""
    root = copy_of(small_root)
    (root / "custom").mkdir()
    shutil.move(root / "data", root / "custom" / "data")
    edit_info(
        root, lambda info: info.update(data_path="custom/data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet")
    )
    assert len(LeRobotDataset("x", root=root)) == 119
    assert json.loads((root / "meta/info.json").read_text())["data_path"].startswith("custom/")


def test_hub_home_links_of_the_user_are_kept(monkeypatch, tmp_path):
    """The repo id is checked, not the user's own layout: a download root linked to another disk stays usable."""
    from episodic.storage.hub import hub_root

    (tmp_path / "disk2").mkdir()
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "lerobot").symlink_to(tmp_path / "disk2", target_is_directory=True)
    monkeypatch.setenv("HF_LEROBOT_HOME", str(tmp_path / "home"))
    assert hub_root("lerobot/pusht") == tmp_path / "home" / "lerobot" / "pusht"
    with pytest.raises(UnsafePathError):
        hub_root("lerobot/../../x")


# ---------------------------------------------------------------------------------------------- special files
_SPECIAL_CHILD = """
import json, sys
from episodic import LeRobotDataset, StreamingLeRobotDataset
from episodic.tools.validate import validate
root, cache = sys.argv[1], sys.argv[2]
out = {}
for name, run in [("map-style", lambda: LeRobotDataset("x", root=root)[0]),
                  ("streaming", lambda: next(iter(StreamingLeRobotDataset(None, root=root, shuffle=False,
                                                                          cache_dir=cache))))]:
    try:
        run()
        out[name] = "no error"
    except Exception as e:
        out[name] = type(e).__name__ + ": " + str(e)
out["validate"] = validate(root, progress=False).problems
print(json.dumps(out))
"""


@pytest.mark.parametrize("rel", ["meta/info.json", DATA, TOP_MP4])
def test_a_fifo_in_place_of_a_dataset_file_is_refused_not_opened(small_root, copy_of, tmp_path, rel):
    """open() of a FIFO blocks until a writer comes (forever): only regular files are opened; the loaders and
    `validate` name the file instead (a fresh interpreter, so that a blocked open() ends in a timeout)."""
    import subprocess
    import sys

    root = copy_of(small_root)
    (root / rel).unlink()
    os.mkfifo(root / rel)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run(
        [sys.executable, "-c", _SPECIAL_CHILD, str(root), str(tmp_path / "cache")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    said = f"{root}/{rel} is a FIFO (named pipe), not a regular file"
    assert got["map-style"].startswith("UnsafePathError: ") and said in got["map-style"], got
    assert got["streaming"].startswith("UnsafePathError: ") and said in got["streaming"], got
    assert any(said in p for p in got["validate"]), got["validate"]
