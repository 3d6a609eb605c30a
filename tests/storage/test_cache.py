"""The whole-file cache of remote files (storage/cache.py) against a real HTTP server on 127.0.0.1: keys
that change with the remote file's version, names free of URL text, the LRU bound, and several processes
sharing one cache directory."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import fsspec
import pytest

from episodic.counters import Counters
from episodic.storage import FetchPolicy, FileCache
from episodic.storage.fetch import timeout_options

from support import FaultServer

pytest.importorskip("aiohttp")

POLICY = FetchPolicy(backoff_s=0.001, max_backoff_s=0.01, retry_window_s=2, timeout_s=5, connect_timeout_s=5)
KB = 1024


def _http():
    return fsspec.filesystem("http", **timeout_options("http", {}, POLICY))


def _files(n: int, size: int = 4 * KB) -> dict[str, bytes]:
    return {f"/v/f{i}.mp4": bytes([i]) * size for i in range(n)}


def _cached(directory) -> list[str]:
    return sorted(p.name for p in directory.rglob("*") if p.is_file() and not p.name.startswith("."))


def test_a_changed_remote_file_gets_a_new_key(tmp_path):
    with FaultServer(files={"/v/a.mp4": b"1" * 100}) as srv:
        url = srv.url + "/v/a.mp4"
        first = FileCache(tmp_path, POLICY)
        old = first.fetch(_http(), url)
        assert open(old, "rb").read() == b"1" * 100
        srv.files["/v/a.mp4"] = b"2" * 100  # re-published, same size: the ETag tells
        assert first.fetch(_http(), url) == old  # one dataset keeps the version it started with
        n = len(srv.requests)
        again = FileCache(tmp_path, POLICY)  # a new dataset asks for the version
        new = again.fetch(_http(), url)
        assert new != old and open(new, "rb").read() == b"2" * 100
        assert [m for m, _, _ in srv.requests[n:]] == ["HEAD", "GET"]
        assert again.fetch(_http(), url) == new and len(srv.requests) == n + 2  # then no request at all
        assert FileCache(tmp_path, POLICY).fetch(_http(), url) == new and srv.requests[-1][0] == "HEAD"


def test_without_validators_the_size_still_counts(tmp_path):
    with FaultServer(files={"/v/a.mp4": b"1" * 100}, validators=False) as srv:
        url = srv.url + "/v/a.mp4"
        old = FileCache(tmp_path, POLICY).fetch(_http(), url)
        srv.files["/v/a.mp4"] = b"2" * 101
        new = FileCache(tmp_path, POLICY).fetch(_http(), url)
        assert new != old and open(new, "rb").read() == b"2" * 101


def test_cache_names_hold_no_url_text(tmp_path):
    name = "/v/evil name; rm -rf ~ $(id).mp4"
    weird = "/v/x.mp4;..;.bashrc"
    with FaultServer(files={name: b"a", weird: b"b", "/v/plain": b"c"}) as srv:
        cache = FileCache(tmp_path / "c", POLICY)
        paths = [cache.fetch(_http(), srv.url + p) for p in (name, weird, "/v/plain")]
    for p in paths:
        assert os.path.dirname(os.path.dirname(p)) == str(tmp_path / "c")
        assert re.fullmatch(r"[0-9a-f]{32}(\.[A-Za-z0-9]{1,8})?", os.path.basename(p)), p
    assert [open(p, "rb").read() for p in paths] == [b"a", b"b", b"c"]


def test_least_recently_used_files_are_evicted_beyond_the_bound(tmp_path):
    with FaultServer(files=_files(4)) as srv:
        stats = Counters()
        cache = FileCache(tmp_path, POLICY, stats=stats, max_bytes=10 * KB, grace_s=0)  # 2 files fit, not 3
        paths = {}
        for i in (0, 1):
            paths[i] = cache.fetch(_http(), f"{srv.url}/v/f{i}.mp4")
            time.sleep(0.02)
        cache.fetch(_http(), f"{srv.url}/v/f0.mp4")  # f0 used again: f1 is now the least recently used
        time.sleep(0.02)
        paths[2] = cache.fetch(_http(), f"{srv.url}/v/f2.mp4")
        assert os.path.exists(paths[0]) and not os.path.exists(paths[1]) and os.path.exists(paths[2])
        assert stats.cache_evictions == 1 and len(_cached(tmp_path)) == 2
        again = cache.fetch(_http(), f"{srv.url}/v/f1.mp4")  # gone from disk: fetched again
        assert open(again, "rb").read() == _files(4)["/v/f1.mp4"] and srv.gets("/v/f1.mp4") == 2


def test_files_in_use_are_kept_above_the_bound(tmp_path):
    with FaultServer(files=_files(3)) as srv:
        cache = FileCache(tmp_path, POLICY, max_bytes=1, grace_s=60)
        for i in range(3):
            cache.fetch(_http(), f"{srv.url}/v/f{i}.mp4")
        assert len(_cached(tmp_path)) == 3  # a soft bound: all used within the last minute
        cache.grace_s = 0
        assert cache.evict() == 3 and _cached(tmp_path) == []


def test_temporary_files_of_dead_processes_are_removed(tmp_path):
    (tmp_path / "ab").mkdir()
    old, fresh = tmp_path / "ab" / ".x.mp4.123.abc.tmp", tmp_path / "ab" / ".y.mp4.456.def.tmp"
    old.write_bytes(b"x")
    fresh.write_bytes(b"y")
    os.utime(old, (time.time() - 7200, time.time() - 7200))
    FileCache(tmp_path, POLICY).evict()
    assert not old.exists() and fresh.exists()


def test_cache_size_option_and_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("EPISODIC_CACHE_MAX_BYTES", "3M")
    assert FileCache(tmp_path).max_bytes == 3 << 20
    assert FileCache(tmp_path, max_bytes=5).max_bytes == 5
    monkeypatch.setenv("EPISODIC_CACHE_MAX_BYTES", "lots")
    with pytest.raises(ValueError, match="EPISODIC_CACHE_MAX_BYTES"):
        FileCache(tmp_path)


_WORKER = """
import random, sys, time
import fsspec
from episodic.storage import FetchPolicy, FileCache
from episodic.storage.fetch import timeout_options
policy = FetchPolicy(backoff_s=0.001, max_backoff_s=0.01, retry_window_s=5, timeout_s=10, connect_timeout_s=10)
fs = fsspec.filesystem("http", **timeout_options("http", {}, policy))
base, directory, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
rng = random.Random(seed)
evicted = 0
for step in range(40):
    i = rng.randrange(8)
    # a new dataset: versions asked again. grace_s: the time a fetched file is safe from the others' evictions,
    # from fetch() to the open below (0.05 s was exceeded on a loaded machine)
    cache = FileCache(directory, policy, max_bytes=3 * 4096, grace_s=0.3)
    path = cache.fetch(fs, f"{base}/v/f{i}.mp4")
    with open(path, "rb") as f:  # read at once, as a decoder opens its file
        data = f.read()
    assert data == bytes([i]) * 4096, (step, i, len(data))
    evicted += cache.stats.cache_evictions
    time.sleep(0.05)  # each file idle for longer than grace_s now and then: evictions happen while they run
print("ok", evicted)
"""


def test_processes_sharing_one_bounded_cache(tmp_path):
    with FaultServer(files=_files(8)) as srv:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", _WORKER, srv.url, str(tmp_path), str(seed)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
            )
            for seed in range(3)
        ]
        outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 and out.startswith("ok ") for p, (out, _) in zip(procs, outs)), outs
    assert sum(int(out.split()[1]) for out, _ in outs) > 0  # the bound was enforced while they ran
    assert not [p for p in tmp_path.rglob(".*.tmp")]
    cache = FileCache(tmp_path, POLICY, max_bytes=3 * 4096, grace_s=0)
    cache.evict()
    assert 1 <= len(_cached(tmp_path)) <= 3
