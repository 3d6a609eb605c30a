"""The video layer: frame index, frame-accurate decoding in any order, clamping, decoder cache."""

from __future__ import annotations

import av
import numpy as np
import pytest

from episodic.format import FrameTimestampError, VideoDecodeError
from episodic.storage.ranges import mp4_ranges_supported
from episodic.video import VideoReader
from episodic.video.decoder import _container_index, build_index

from support import LEROBOT_FIXTURE

VIDEO = LEROBOT_FIXTURE / "dataset/videos/observation.images.top/chunk-000/file-000.mp4"


def _all_frames(path):
    with av.open(str(path)) as c:
        return np.stack([f.to_ndarray(format="rgb24") for f in c.decode(video=0)])


def test_container_index_equals_packet_index():
    with av.open(str(VIDEO)) as c:
        s = c.streams.video[0]
        # PyAV >= 16 reads the mp4 sample table; older PyAV has no index_entries: the index comes from packets
        assert (_container_index(s) is not None) == mp4_ranges_supported()
        fast = build_index(c, s, str(VIDEO))
    with av.open(str(VIDEO)) as c:
        s = c.streams.video[0]
        pts, key = zip(*[(p.pts, p.is_keyframe) for p in c.demux(s) if p.size])
    assert np.array_equal(fast.pts, np.sort(pts))
    assert np.array_equal(fast.keyframe_of, np.maximum.accumulate(np.where(np.asarray(key), np.arange(len(key)), 0)))


def test_random_and_repeated_access_is_frame_exact():
    ref = _all_frames(VIDEO)
    r = VideoReader(str(VIDEO))
    idx = np.random.default_rng(0).integers(0, len(ref), 60)
    idx = np.concatenate([idx, idx[::-1], [0, len(ref) - 1, 5, 5, 4]])
    got = r.decode(idx)
    assert np.array_equal(got, ref[idx])
    assert r.seeks <= len(np.unique(idx))


@pytest.mark.parametrize("fmt", ["matroska", "mp4"])
def test_a_video_named_mp4_is_read_whatever_its_container(tmp_path, fmt):
    """A ``.mp4`` is opened as mp4 without probing; one that holds another container is still read (probed), and
    both decode PyAV's frames of the file."""
    path = tmp_path / "video.mp4"
    rng = np.random.default_rng(1)
    with av.open(str(path), "w", format=fmt) as c:
        s = c.add_stream("libx264", rate=30)
        s.width, s.height, s.pix_fmt = 64, 48, "yuv420p"
        for _ in range(12):
            c.mux(s.encode(av.VideoFrame.from_ndarray(rng.integers(0, 256, (48, 64, 3), dtype=np.uint8), "rgb24")))
        c.mux(s.encode(None))
    with av.open(str(path)) as c:
        assert fmt in c.format.name
    ref = _all_frames(path)
    idx = np.array([7, 0, 11, 3])
    assert np.array_equal(VideoReader(str(path)).decode(idx), ref[idx])


def test_sequential_access_decodes_without_seeking():
    r = VideoReader(str(VIDEO))
    for i in range(40):
        r.frames_at(np.array([i / 30]))
    assert r.seeks == 1 and r.frames_decoded == 40


def test_clamp_at_file_end_and_tolerance():
    r = VideoReader(str(VIDEO))
    last = r.index.times[-1]
    assert np.array_equal(r.frames_at(np.array([last + 1 / 30])), r.frames_at(np.array([last])))
    with pytest.raises(FrameTimestampError, match="file-000.mp4.*tolerance_s"):
        r.frames_at(np.array([last + 3 / 30]))
    with pytest.raises(FrameTimestampError, match=r"0\.05"):
        r.frames_at(np.array([0.05]), tolerance_s=1e-4)


def test_a_reader_waiting_for_its_next_request_holds_no_picture(monkeypatch):
    """A reader keeps its decoding position between requests (to decode on from there), not the frame it handed
    out: with hundreds of files open, each held picture is ~0.5 MB at 480x640 the codec cannot reuse."""
    import gc

    from episodic.video import codec_contexts

    monkeypatch.setattr(codec_contexts, "SHARED", codec_contexts.SharedDecoders(own=0))
    r = VideoReader(str(VIDEO))
    assert r._signature is not None, "decodes through its thread's shared context"
    r.decode(np.array([0]))
    assert r._frames is not None, "its position is kept"
    seen, todo = set(), [r._frames]
    for _ in range(4):  # what the live generator reaches: its frame's locals, a delegated iterator, their lists
        todo = [x for o in todo for x in gc.get_referents(o) if id(x) not in seen and not seen.add(id(x))]
        assert not [x for x in todo if isinstance(x, av.VideoFrame) and x.width]  # (the codec's next, empty one)
    r.close()


def test_every_truncation_of_a_small_mp4_is_a_named_error(small_root, tmp_path):
    """Cut after any byte: VideoDecodeError naming the file (a cut inside the sample tables used to leave a
    stream without codec parameters: AttributeError), or, when only trailing bytes are gone, frames."""
    data = sorted(small_root.rglob("*.mp4"))[0].read_bytes()
    path = tmp_path / "cut.mp4"
    outcomes = {"ok": 0, "error": 0}
    for n in range(0, len(data), max(1, len(data) // 4000)):
        path.write_bytes(data[:n])
        try:
            r = VideoReader(str(path))
            r.decode(np.arange(len(r.index)))
            r.close()
            outcomes["ok"] += 1
        except VideoDecodeError as e:
            assert str(path) in str(e)
            outcomes["error"] += 1
    assert outcomes["error"] > 0.5 * sum(outcomes.values()) and outcomes["ok"] > 0


def test_frame_index_nearest_equals_a_brute_force_argmin():
    from fractions import Fraction

    from episodic.video.decoder import FrameIndex

    rng = np.random.default_rng(1)
    for n in (1, 2, 3, 17):
        times = np.sort(rng.choice(np.arange(200) / 30.0, size=n, replace=False))
        index = FrameIndex(
            pts=np.arange(n), times=times, keyframe_of=np.zeros(n, np.int64), time_base=Fraction(1, 30), fps=30.0
        )
        queries = np.concatenate([rng.uniform(-1, 8, size=200), times, times + 1e-9, times - 1e-9])
        pick, dist = index.nearest(queries)
        d = np.abs(times[None, :] - queries[:, None])
        assert np.allclose(dist, d.min(axis=1), atol=0)
        assert (d[np.arange(len(queries)), pick] == d.min(axis=1)).all()
        # a few times at once take the Python path: the same frames and distances as the vectorised one
        for size in (1, 2, 5, 8):
            for lo in range(0, len(queries) - size, 7):
                few_pick, few_dist = index.nearest(queries[lo : lo + size])
                assert few_pick.dtype == np.int64 and few_dist.dtype == np.float64
                assert few_pick.tolist() == pick[lo : lo + size].tolist()
                assert few_dist.tolist() == dist[lo : lo + size].tolist()
