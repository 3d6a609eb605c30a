"""resolve_source and reopen in storage/: local directories, URLs (a real HTTP server on 127.0.0.1), where
Hub datasets land, and a source reopened in a forked process."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

import pytest

from episodic.format import DatasetFormatError
from episodic.storage import FetchPolicy, reopen, resolve_source
from episodic.storage.hub import hub_root

pytest.importorskip("aiohttp")


def test_local_directory(small_root, tmp_path):
    src = resolve_source(None, small_root, cache_dir=str(tmp_path / "c"))
    assert src.is_local and src.root == str(small_root) and src.location == str(small_root)
    assert src.cache is not None and src.cache.directory == tmp_path / "c" / "files"
    assert src.local_path("meta/info.json") == str(small_root / "meta/info.json")
    assert reopen(src) is src
    with pytest.raises(DatasetFormatError, match="dataset directory not found"):
        resolve_source(None, tmp_path / "nothing")


def test_url_keeps_location_options_and_policy(http_root, small_root, tmp_path):
    policy = FetchPolicy(retries=2, backoff_s=0.001, max_backoff_s=0.001)
    src = resolve_source(
        "ignored/when-root-is-a-url",
        http_root,
        storage_options={"headers": {"X-A": "1"}},
        cache_dir=str(tmp_path),
        policy=policy,
    )
    assert not src.is_local and src.location == http_root and src.storage_options == {"headers": {"X-A": "1"}}
    assert src.policy is policy and src.cache.policy is policy
    meta = src.load_metadata()
    assert meta.info.total_frames == resolve_source(None, small_root).load_metadata().info.total_frames
    cached = src.local_path("meta/info.json")
    assert Path(cached).read_bytes() == (small_root / "meta/info.json").read_bytes() and str(tmp_path) in cached


def _child(src, out) -> None:
    import os

    fresh = reopen(src)
    # fsspec's asynchronous filesystems remember the process that made them (and refuse other processes)
    out.put(
        (
            src.fs._pid == os.getpid(),
            fresh.fs._pid == os.getpid(),
            fresh.location,
            src.read_bytes("meta/info.json"),
            fresh.read_bytes("meta/info.json"),
        )
    )


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_a_source_in_a_child_process_opens_its_own_filesystem(http_root, small_root, method):
    src = resolve_source(None, http_root)
    src.read_bytes("meta/info.json")  # the parent's HTTP session is live when the child starts
    ctx = multiprocessing.get_context(method)
    out = ctx.Queue()
    p = ctx.Process(target=_child, args=(src, out))
    p.start()
    got = out.get(timeout=60)
    p.join(60)
    assert p.exitcode == 0
    info = (small_root / "meta/info.json").read_bytes()
    assert got == (True, True, http_root, info, info)
    assert src.fs._pid == os.getpid()


def test_hub_root_follows_config(monkeypatch, tmp_path):
    monkeypatch.setenv("EPISODIC_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("HF_LEROBOT_HOME", raising=False)
    assert hub_root("user/ds") == tmp_path / "cache" / "hub" / "user/ds"
    assert hub_root("user/ds", "v1") == tmp_path / "cache" / "hub" / "user/ds@v1"
    monkeypatch.setenv("HF_LEROBOT_HOME", str(tmp_path / "lerobot"))
    assert hub_root("user/ds") == tmp_path / "lerobot" / "user/ds"  # LeRobot's own place
    assert hub_root("user/ds", "v1") == tmp_path / "lerobot" / "user/ds@v1"


def test_revisions_never_share_a_download_directory(monkeypatch, tmp_path):
    """Each revision (tags, branches, commit SHAs, refs/pr/N, names that are also dataset folders) gets its own
    directory, none inside another's dataset (HF_LEROBOT_HOME used to ignore the revision)."""
    sha = "3c8e1d0a9b5f4e2a1c0d9e8f7a6b5c4d3e2f1a0b"
    revisions = [
        None,
        "main",
        "v3.0",
        "v2.1",
        sha,
        sha.upper(),
        "refs/pr/1",
        "refs/pr/10",
        "refs",
        "refs_pr_1",
        "data",
        "meta",
        "videos",
        "feature/x",
        "feature_x",
    ]
    for home in (None, tmp_path / "lerobot"):
        if home is None:
            monkeypatch.delenv("HF_LEROBOT_HOME", raising=False)
            monkeypatch.setenv("EPISODIC_CACHE", str(tmp_path / "cache"))
        else:
            monkeypatch.setenv("HF_LEROBOT_HOME", str(home))
        roots = [hub_root("user/ds", r) for r in revisions]
        assert len(set(roots)) == len(roots)
        for a in roots:
            assert not any(b != a and a.is_relative_to(b) for b in roots), a
        assert roots[revisions.index(sha)].name == f"ds@{sha}"  # a commit SHA names its directory as it is
