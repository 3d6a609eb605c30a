"""Byte-range streaming: a consumer fetches only its episodes' bytes of remote mp4s (into sparse mirror
files) and of remote parquets, over a real HTTP server with Range support (and injected failures)."""

from __future__ import annotations

import http.server
import threading
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from fsspec.implementations.local import LocalFileSystem

from episodic import LeRobotDataset
from episodic.datasets.streaming import StreamingLeRobotDataset
from episodic.demo import write_demo_dataset
from episodic.format.errors import VideoDecodeError
from episodic.format.metadata import load_metadata
from episodic.storage.prefetch import Prefetcher
from episodic.storage.ranges import RangeFile, add_range, missing_ranges, mp4_ranges_supported, probe_mp4
from episodic.video import DecoderCache
from episodic.video.decoder import VideoReader

from support import FaultServer, assert_items_equal

FPS = 30
TOP = "observation.images.top"
needs_mp4_ranges = pytest.mark.skipif(
    not mp4_ranges_supported(),
    reason="this PyAV (< 16) has no stream index_entries: mp4 byte ranges are off, whole files are fetched",
)
DELTAS = {"action": [i / FPS for i in range(3)], TOP: [-1 / FPS, 0.0]}


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    """24 episodes, every one of them in the same mp4 per camera; small data files."""
    root = write_demo_dataset(
        tmp_path_factory.mktemp("ranges") / "ds",
        num_episodes=24,
        min_length=25,
        max_length=40,
        height=144,
        width=192,
        progress=False,
        video_files_size_in_mb=2,
        data_files_size_in_mb=0.01,
    )
    meta = load_metadata(LocalFileSystem(), str(root))
    for cam in meta.episodes.cameras.values():
        assert np.bincount(cam.file_id).min() >= 8  # many episodes per video file
    return root


@contextmanager
def serve(directory: Path, fail_rate: float = 0.0):
    with FaultServer(directory, seed=2) as server:
        server.fail_rate = fail_rate
        yield server.url, server


def video_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in (root / "videos").rglob("*.mp4"))


# ------------------------------------------------------------------------------------------ pieces
def test_range_sets():
    r = add_range([], 10, 20)
    r = add_range(r, 30, 40)
    assert missing_ranges(r, 0, 50) == [(0, 10), (20, 30), (40, 50)]
    assert add_range(r, 20, 30) == [(10, 40)]
    assert missing_ranges(r, 12, 18) == [] and missing_ranges(r, 15, 35) == [(20, 30)]


@needs_mp4_ranges
def test_probe_reads_the_header_only_and_spans_are_small(root):
    meta = load_metadata(LocalFileSystem(), str(root))
    rel = meta.video_file_of(0, TOP)
    data = (root / rel).read_bytes()
    calls = []

    def fetch(s, e):
        calls.append((s, e))
        return data[s:e]

    layout = probe_mp4(RangeFile(fetch, len(data)))
    assert layout is not None and layout.size == len(data)
    header = sum(len(b) for _, b in layout.header)
    assert header == sum(e - s for s, e in calls) and header < len(data) // 4
    cam = meta.episodes.cameras[TOP]
    lo, hi = layout.span(cam.from_ts[5], cam.to_ts[5])
    assert 0 < hi - lo < len(data) // 4
    # the span holds every sample of the episode, from a key frame
    t = layout.times
    inside = (t >= cam.from_ts[5] - 1e-6) & (t < cam.to_ts[5] - 1e-6)
    assert (layout.pos[inside] >= lo).all() and (layout.pos[inside] + layout.nbytes[inside] <= hi).all()
    assert layout.key[np.flatnonzero(layout.pos == lo)].all()
    # not an mp4: no layout (the prefetcher then fetches the file whole)
    parquet = (root / meta.data_file_of(0)).read_bytes()
    assert probe_mp4(RangeFile(lambda s, e: parquet[s:e], len(parquet))) is None


def test_range_file_prefetch_and_parquet_tail_cache(root, tmp_path):
    """RangeFile.prefetch fetches far-apart spans (merging near ones), after which reads of them fetch
    nothing; a parquet file opened twice through the prefetcher fetches its footer once."""
    data = bytes(range(256)) * 4096  # 1 MiB
    calls = []

    def fetch(s, e):
        calls.append((s, e))
        return data[s:e]

    rf = RangeFile(fetch, len(data))
    rf.prefetch([(700_000, 710_000), (100, 200), (300, 400), (500_000, 500_100)])
    assert sorted(calls) == [(100, 400), (500_000, 500_100), (700_000, 710_000)]  # 100-200 and 300-400 merged
    rf.seek(700_500)
    assert rf.read(1000) == data[700_500:701_500] and len(calls) == 3
    meta = load_metadata(LocalFileSystem(), str(root))
    rel = meta.data_file_of(0)
    pf = Prefetcher(LocalFileSystem(), str(root), tmp_path, 1 << 30, local=False)
    try:
        first = pf.open_remote(f"{root}/{rel}")
        n = pf.stats.ranges_fetched
        assert n >= 1
        again = pf.open_remote(f"{root}/{rel}")
        assert pf.stats.ranges_fetched == n  # the tail came from the cache
        again.seek(0, 2)
        size = again.tell()
        again.seek(size - 8)
        assert again.read() == (root / rel).read_bytes()[-8:] and pf.stats.ranges_fetched == n
        first.close()
        again.close()
    finally:
        pf.close()


# ------------------------------------------------------------------------------------------ over HTTP
@needs_mp4_ranges
def test_subset_over_http_equals_map_style_and_fetches_a_fraction(root, tmp_path):
    ref = LeRobotDataset("x", root=root, episodes=[3, 11], delta_timestamps=DELTAS, return_uint8=True)
    by_index = {int(ref[i]["index"]): ref[i] for i in range(len(ref))}
    with serve(root.parent) as (base, _):
        ds = StreamingLeRobotDataset(
            None,
            root=f"{base}/{root.name}",
            episodes=[3, 11],
            delta_timestamps=DELTAS,
            return_uint8=True,
            episode_pool_size=2,
            chunk_size=5,
            cache_dir=tmp_path,
        )
        got = list(ds)
    assert sorted(int(x["index"]) for x in got) == sorted(by_index)
    for item in got:
        assert_items_equal(by_index[int(item["index"])], item)
    stats = ds.timing_stats()
    ratio = stats["bytes_fetched"] / video_bytes(root)  # data parquets included in bytes_fetched
    print(f"bytes fetched / video bytes: {stats['bytes_fetched']} / {video_bytes(root)} = {ratio:.3f}")
    assert stats["ranges_fetched"] > 0 and ratio < 0.5, stats
    # a local source is read in place: nothing fetched
    local = StreamingLeRobotDataset("x", root=root, episodes=[3, 11], return_uint8=True, cache_dir=tmp_path)
    assert len(list(local)) == len(ref) and local.timing_stats()["bytes_fetched"] == 0


def test_server_without_range_requests_falls_back_to_whole_files(root, tmp_path):
    """Python's own http.server ignores Range headers (it sends whole files): the stream notices, fetches
    whole files instead, and the items are still the map-style items."""
    ref = LeRobotDataset("x", root=root, episodes=[3, 11], delta_timestamps=DELTAS, return_uint8=True)
    by_index = {int(ref[i]["index"]): ref[i] for i in range(len(ref))}
    quiet = type("Quiet", (http.server.SimpleHTTPRequestHandler,), {"log_message": lambda *a: None})
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), lambda *a, **k: quiet(*a, directory=str(root.parent), **k)
    )
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        ds = StreamingLeRobotDataset(
            None,
            root=f"http://127.0.0.1:{server.server_address[1]}/{root.name}",
            episodes=[3, 11],
            delta_timestamps=DELTAS,
            return_uint8=True,
            episode_pool_size=2,
            cache_dir=tmp_path,
            fetch_retries=1,
        )
        got = list(ds)
    finally:
        server.shutdown()
        server.server_close()
    assert sorted(int(x["index"]) for x in got) == sorted(by_index)
    for item in got:
        assert_items_equal(by_index[int(item["index"])], item)
    stats = ds.timing_stats()
    assert stats["retries"] == 0 and stats["files_fetched"] > 0 and stats["bytes_fetched"] >= video_bytes(root)


@needs_mp4_ranges
def test_reader_opened_before_a_neighbour_range_is_written_is_stale(root, tmp_path):
    """Why `_Run` discards readers: FFmpeg buffers the hole after episode A's range, so a reader opened
    before the next episode's range was written cannot decode it; a reader opened after can. (Episodes far
    enough into the file that the probe's header reads do not reach them.)"""
    fs = LocalFileSystem()
    meta = load_metadata(fs, str(root))
    cam = meta.episodes.cameras[TOP]
    A, B = 15, 16
    rel = meta.video_file_of(A, TOP)
    assert meta.video_file_of(B, TOP) == rel
    whole = VideoReader(str(root / rel))
    p = Prefetcher(fs, str(root), tmp_path, 1 << 30, local=False)  # a local fs read like a remote one
    try:
        path = p.acquire_span(rel, cam.from_ts[A], cam.to_ts[A]).result()
        gen = p.generation(rel)
        old = VideoReader(path)
        t3 = cam.from_ts[A] + np.arange(meta.episodes.length[A]) / FPS
        assert np.array_equal(old.frames_at(t3), whole.frames_at(t3))
        assert p.acquire_span(rel, cam.from_ts[B], cam.to_ts[B]).result() == path
        assert p.generation(rel) != gen
        t4 = cam.from_ts[B] + np.arange(meta.episodes.length[B]) / FPS
        try:
            stale_ok = np.array_equal(old.frames_at(t4), whole.frames_at(t4))
        except VideoDecodeError:
            stale_ok = False
        assert not stale_ok
        assert np.array_equal(VideoReader(path).frames_at(t4), whole.frames_at(t4))
        assert p.bytes_on_disk < (root / rel).stat().st_size // 2  # sparse: only the header and two ranges
    finally:
        p.close()


def test_streaming_discards_readers_of_rewritten_files(root, tmp_path):
    """Episodes 15 then 16 (adjacent in one mp4, beyond the header the probe reads), one at a time: 15 is
    decoded (its reader open) before 16's range is fetched into the same sparse file; 16's frames must still
    be right."""
    ref = LeRobotDataset("x", root=root, episodes=[15, 16], return_uint8=True)
    by_index = {int(ref[i]["index"]): ref[i] for i in range(len(ref))}
    with serve(root.parent) as (base, _):
        ds = StreamingLeRobotDataset(
            None,
            root=f"{base}/{root.name}",
            episodes=[15, 16],
            return_uint8=True,
            episode_pool_size=1,
            prefetch_episodes=0,
            chunk_size=1,
            shuffle=False,
            cache_dir=tmp_path,
        )
        got = list(ds)
    assert [int(x["index"]) for x in got] == sorted(by_index)
    for item in got:
        assert_items_equal(by_index[int(item["index"])], item)


def test_decoder_cache_discard(root):
    meta = load_metadata(LocalFileSystem(), str(root))
    path = str(root / meta.video_file_of(0, TOP))
    cache = DecoderCache(max_open=4)
    first = cache.get(path)
    assert cache.get(path) is first
    assert cache.discard(path) and not cache.discard(path)
    assert cache.get(path) is not first and cache.stats()["misses"] == 2


def test_idle_files_and_their_layouts_are_bounded(multifile_root, tmp_path):
    """Unreferenced mirror files go (with the sample layouts kept in memory) beyond max_idle_files, even
    when their bytes fit the budget; referenced ones stay."""
    import fsspec

    meta = load_metadata(LocalFileSystem(), str(multifile_root))
    cam = meta.episodes.cameras[TOP]
    firsts = [int(np.flatnonzero(cam.file_id == f)[0]) for f in range(len(cam.files))]
    assert len(firsts) >= 3
    with serve(multifile_root) as (url, _):
        fs, base = fsspec.core.url_to_fs(url)
        pf = Prefetcher(fs, base, tmp_path / "mirror", max_bytes=1 << 30, local=False, threads=2, max_idle_files=1)
        try:
            held = meta.video_file_of(firsts[0], TOP)
            pf.acquire_span(held, float(cam.from_ts[firsts[0]]), float(cam.to_ts[firsts[0]])).result()
            for ep in firsts[1:]:
                rel = meta.video_file_of(ep, TOP)
                pf.acquire_span(rel, float(cam.from_ts[ep]), float(cam.to_ts[ep])).result()
                pf.release(rel)
            assert set(pf._layouts) == {held, meta.video_file_of(firsts[-1], TOP)}
            assert pf.stats.local()["cache_evictions"] == len(firsts) - 2
            assert (tmp_path / "mirror" / held).exists()
        finally:
            pf.close()
