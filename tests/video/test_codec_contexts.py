"""Readers of files alike decode through their thread's shared codec contexts (`video.codec_contexts.SharedDecoders`):
frames equal PyAV's own decode whichever reader last used a context, cameras read in turn keep theirs, a context
is never used by two threads, and files with other parameters get contexts of their own."""

from __future__ import annotations

import shutil
import threading

import av
import numpy as np
import pytest

from episodic.video import VideoReader, codec_contexts

from support import LEROBOT_FIXTURE

VIDEO = LEROBOT_FIXTURE / "dataset/videos/observation.images.top/chunk-000/file-000.mp4"


def _all_frames(path):
    with av.open(str(path)) as c:
        return np.stack([f.to_ndarray(format="rgb24") for f in c.decode(video=0)])


def _encode(path, codec, h, w, n, seed=0, pix_fmt="yuv420p"):
    """`n` frames of moving noise, gop 5 (h264 with B-frames: packets out of presentation order)."""
    rng = np.random.default_rng(seed)
    with av.open(str(path), "w") as c:
        s = c.add_stream(codec, rate=30)
        s.width, s.height, s.pix_fmt = w, h, pix_fmt
        s.codec_context.gop_size = 5
        for i in range(n):
            img = np.roll(rng.integers(0, 256, (h, w, 3), dtype=np.uint8), i, axis=1)
            for p in s.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
                c.mux(p)
        for p in s.encode(None):
            c.mux(p)


@pytest.fixture(autouse=True)
def shared(monkeypatch):
    """This process's shared decoders, fresh, and no reader decoding with its own context (the first `own` files
    alike of a process do: `test_the_first_files_alike_decode_with_their_own_contexts`)."""
    fresh = codec_contexts.SharedDecoders(own=0)
    monkeypatch.setattr(codec_contexts, "SHARED", fresh)
    return fresh


def _decoders_of_this_thread(shared):
    return [d for ds in getattr(shared._local, "pools", {}).values() for d in ds]


def test_readers_of_files_alike_share_a_few_contexts_and_decode_exactly(tmp_path, shared):
    ref = _all_frames(VIDEO)
    paths = []
    for i in range(9):
        paths.append(tmp_path / f"copy{i}.mp4")
        shutil.copy(VIDEO, paths[-1])
    other = tmp_path / "odd.mp4"
    _encode(other, "libx264", 48, 424, 24)
    other_ref = _all_frames(other)
    readers = [VideoReader(str(p)) for p in paths]
    odd = VideoReader(str(other))
    rng = np.random.default_rng(0)
    for _ in range(120):  # random frames of random files: every context changes hands many times
        i, f = int(rng.integers(len(readers))), int(rng.integers(len(ref)))
        assert np.array_equal(readers[i].decode(np.array([f]))[0], ref[f])
        g = int(rng.integers(len(other_ref)))
        assert np.array_equal(odd.decode(np.array([g]))[0], other_ref[g])
    used = {id(r._decoder) for r in readers}
    assert len(used) <= 2  # random access: nine files through the most recently used context (rarely another)
    assert odd._decoder is not None and id(odd._decoder) not in used  # another size: a context of its own
    assert all(d.thread == threading.get_ident() for d in _decoders_of_this_thread(shared))


def test_files_read_forward_in_turn_by_more_readers_than_contexts(tmp_path):
    """Six different files alike read forward in turn: each reader's context was taken by another since it last
    read, so it seeks and decodes again from a key frame, never on through a context fed another file."""
    paths = [tmp_path / f"f{i}.mp4" for i in range(6)]
    for i, p in enumerate(paths):
        _encode(p, "libx264", 48, 64, 20, seed=i)
    refs = [_all_frames(p) for p in paths]
    readers = [VideoReader(str(p)) for p in paths]
    for f in range(20):
        for r, ref in zip(readers, refs):
            assert np.array_equal(r.decode(np.array([f]))[0], ref[f])
    assert sum(r.seeks for r in readers) > 2 * len(readers)  # contexts changed hands


def test_cameras_read_in_turn_keep_their_contexts(tmp_path):
    """Two files read forward in turn (a streaming consumer's cameras) each decode on, not seeking every frame,
    also where the thread's contexts were all used before by readers of random frames."""
    ref = _all_frames(VIDEO)
    others = []
    for i in range(6):
        others.append(VideoReader(str(shutil.copy(VIDEO, tmp_path / f"o{i}.mp4"))))
        others[-1].decode(np.array([7 * i]))
    a, b = tmp_path / "a.mp4", tmp_path / "b.mp4"
    shutil.copy(VIDEO, a)
    shutil.copy(VIDEO, b)
    ra, rb = VideoReader(str(a)), VideoReader(str(b))
    for f in range(30):
        assert np.array_equal(ra.decode(np.array([f]))[0], ref[f])
        assert np.array_equal(rb.decode(np.array([f]))[0], ref[f])
    # one more seek at most, once a reader shows it reads forward; then each decodes on through its own context
    assert ra.seeks + rb.seeks <= 3 and ra.frames_decoded + rb.frames_decoded <= 62


def test_random_access_takes_the_most_recently_used_context_no_forward_reader_holds(tmp_path):
    """Three readers read forward in turn (a context each), then each jumps back (no longer reading forward): a
    fourth reader's random access takes the context used last, its pictures still in the CPU's caches."""
    ref = _all_frames(VIDEO)
    a, b, c, r = (VideoReader(str(shutil.copy(VIDEO, tmp_path / f"{n}.mp4"))) for n in "abcr")
    for f in range(6):
        for x in (a, b, c):
            assert np.array_equal(x.decode(np.array([f]))[0], ref[f])
    assert len({id(x._decoder) for x in (a, b, c)}) == 3
    for x in (a, b, c):
        assert np.array_equal(x.decode(np.array([1]))[0], ref[1])
        assert not x.reads_forward
    last = c._decoder
    assert np.array_equal(r.decode(np.array([20]))[0], ref[20])
    assert r._decoder is last


def test_a_reader_used_from_another_thread_takes_that_threads_context(tmp_path):
    ref = _all_frames(VIDEO)
    path = tmp_path / "a.mp4"
    shutil.copy(VIDEO, path)
    r = VideoReader(str(path))
    assert np.array_equal(r.decode(np.array([3]))[0], ref[3])
    mine = r._decoder
    got: dict = {}

    def other():
        got["frame"] = r.decode(np.array([4]))[0]  # would decode on from frame 3, but not through mine
        got["decoder"] = r._decoder

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert np.array_equal(got["frame"], ref[4])
    assert got["decoder"] is not mine and got["decoder"].thread == t.ident and r.seeks == 2


def test_b_frames_decode_exactly_through_a_shared_context(tmp_path):
    """h264 with B-frames (packets in decode order, pts reordered) at an odd width, several files alike."""
    paths = [tmp_path / f"b{i}.mp4" for i in range(3)]
    for i, p in enumerate(paths):
        _encode(p, "libx264", 40, 56, 30, seed=i)
    refs = [_all_frames(p) for p in paths]
    readers = [VideoReader(str(p)) for p in paths]
    rng = np.random.default_rng(1)
    for _ in range(60):
        i, f = int(rng.integers(3)), rng.integers(0, 30, 3)
        assert np.array_equal(readers[i].decode(f), refs[i][f])


def test_a_thread_keeps_at_most_per_thread_contexts(tmp_path, monkeypatch):
    """Files of three sizes (three signatures) with room for two contexts: the least recently used is dropped,
    its reader takes another when it next decodes, and every frame is still exact."""
    small = codec_contexts.SharedDecoders(per_signature=4, per_thread=2, own=0)
    monkeypatch.setattr(codec_contexts, "SHARED", small)
    paths = [tmp_path / f"s{w}.mp4" for w in (32, 48, 424)]
    for i, (p, w) in enumerate(zip(paths, (32, 48, 424))):
        _encode(p, "libx264", 24, w, 12, seed=i)
    refs = [_all_frames(p) for p in paths]
    readers = [VideoReader(str(p)) for p in paths]
    for f in (0, 5, 2, 11, 7):
        for r, ref in zip(readers, refs):
            assert np.array_equal(r.decode(np.array([f]))[0], ref[f])
            assert sum(map(len, small._local.pools.values())) <= 2
    assert len({r._signature for r in readers}) == 3


def test_the_first_files_alike_decode_with_their_own_contexts(tmp_path, monkeypatch):
    """A process's first `own` open readers of files alike keep their own codec context (PyAV's decode loop: a
    dataset of a few files); the next share; closing one lets the next reader have its own again."""
    few = codec_contexts.SharedDecoders(own=2)
    monkeypatch.setattr(codec_contexts, "SHARED", few)
    ref = _all_frames(VIDEO)
    readers = [VideoReader(str(shutil.copy(VIDEO, tmp_path / f"c{i}.mp4"))) for i in range(3)]
    assert [r._signature is None for r in readers] == [True, True, False]
    for f in (3, 9, 1):
        for r in readers:
            assert np.array_equal(r.decode(np.array([f]))[0], ref[f])
    assert readers[0]._decoder is None and readers[2]._decoder is not None
    readers[0].close()
    again = VideoReader(str(tmp_path / "c0.mp4"))
    assert again._signature is None
    assert VideoReader(str(tmp_path / "c1.mp4"))._signature is not None
    del again  # collected without close: its place goes too
    assert VideoReader(str(tmp_path / "c1.mp4"))._signature is None
