"""Packets copied into a new mp4 (writer/remux.py). The writer's segments joined (`concat_mp4`): the joined file
decodes to exactly the segments' frames, at the times the writer records; segments that cannot be joined are
refused; a failed join leaves nothing. Packet tables and packet runs: the table is what PyAV's own demuxer and
decoder see; copied runs decode to exactly the source's frames (PyAV decodes both), at the shifted times; runs
of other settings are refused and a failed copy leaves nothing."""

from __future__ import annotations

import os

import av
import numpy as np
import pytest

from episodic.format.errors import WriterSessionError
from episodic.writer.remux import PacketRun, concat_mp4, copy_runs, packet_table
from episodic.writer.video import VideoFileWriter

from support import FIXTURES, encode_segment

AV1 = FIXTURES / "lerobot_multifile_av1/dataset/videos/observation.images.top/chunk-000/file-000.mp4"
H264 = FIXTURES / "lerobot_h264/dataset/videos/observation.images.top/chunk-000/file-000.mp4"  # B-frames


def _frames(path) -> dict[int, np.ndarray]:
    """PyAV's decode of every frame, by presentation time (ticks)."""
    with av.open(str(path)) as c:
        return {f.pts: f.to_ndarray(format="rgb24") for f in c.decode(video=0)}


@pytest.mark.parametrize("path", [AV1, H264], ids=["av1", "h264"])
def test_packet_table_is_what_pyav_sees(path):
    table = packet_table(str(path))
    with av.open(str(path)) as c:
        stream = c.streams.video[0]
        ref = [(p.pts, p.dts, p.is_keyframe, p.size) for p in c.demux(stream) if p.dts is not None]
        assert table.time_base == stream.time_base
    assert np.array_equal(table.pts, [r[0] for r in ref]) and np.array_equal(table.dts, [r[1] for r in ref])
    assert np.array_equal(table.key, [r[2] for r in ref]) and np.array_equal(table.size, [r[3] for r in ref])
    assert sorted(_frames(path)) == sorted(table.pts.tolist())  # one frame shown per packet
    assert table.params.startswith(("h264|128x96|yuv420p|1/15360", "libdav1d|128x96|yuv420p|1/15360"))


@pytest.mark.parametrize("path", [AV1, H264], ids=["av1", "h264"])
def test_copied_runs_decode_to_the_source_frames(tmp_path, path):
    table = packet_table(str(path))
    keys = np.flatnonzero(table.key)
    a, b = int(keys[3]), int(keys[10])  # two runs from key frames: packets [a, b) and [b, end), swapped
    end = len(table)
    first = table.pts[b:end].min()
    shift2 = int(table.pts[b:end].max() - first + 512)  # the second run after the first
    runs = [PacketRun(str(path), b, end, int(-first)), PacketRun(str(path), a, b, int(shift2 - table.pts[a:b].min()))]
    out = tmp_path / "out.mp4"
    assert copy_runs(runs, str(out)) == (end - b) + (b - a)
    src, got = _frames(path), _frames(out)
    want = {int(p - first): src[p] for p in table.pts[b:end]}
    want.update({int(p + shift2 - table.pts[a:b].min()): src[p] for p in table.pts[a:b]})
    assert sorted(got) == sorted(want)
    assert all(np.array_equal(got[t], want[t]) for t in want)  # bit-identical: packets copied, not re-encoded
    assert min(got) == 0
    assert sorted(os.listdir(tmp_path)) == ["out.mp4"]


def test_runs_of_other_settings_are_refused_and_leave_nothing(tmp_path):
    other = tmp_path / "other.mp4"
    w = VideoFileWriter(str(other), 64, 48, 30, vcodec="h264")
    w.add(np.zeros((4, 48, 64, 3), np.uint8))
    w.close()
    with pytest.raises(WriterSessionError, match="other settings"):
        copy_runs([PacketRun(str(AV1), 0, 4, 0), PacketRun(str(other), 0, 4, 10_000)], str(tmp_path / "out.mp4"))
    with pytest.raises(Exception, match="fewer than"):
        copy_runs([PacketRun(str(other), 0, 99, 0)], str(tmp_path / "out.mp4"))
    assert sorted(os.listdir(tmp_path)) == ["other.mp4"]  # no output, no temporary file


def _decode(path) -> tuple[list[np.ndarray], list[float]]:
    with av.open(str(path)) as c:
        frames = list(c.decode(video=0))
    return [f.to_ndarray(format="rgb24") for f in frames], [float(f.time) for f in frames]


@pytest.mark.parametrize("vcodec", ["av1", "h264", "hevc"])
def test_joined_file_decodes_to_the_segments_frames(tmp_path, vcodec):
    lengths = [7, 12, 5]
    segs = [encode_segment(tmp_path / f"s{i}.mp4", i, n, vcodec=vcodec, gop=4) for i, n in enumerate(lengths)]
    assert concat_mp4(segs, str(tmp_path / "out.mp4"), 30) == sum(lengths)
    frames, times = _decode(tmp_path / "out.mp4")
    want = [f for s in segs for f in _decode(s)[0]]
    assert len(frames) == sum(lengths)
    assert all(np.array_equal(a, b) for a, b in zip(frames, want, strict=True))  # bit-identical: no re-encoding
    np.testing.assert_allclose(times, np.arange(sum(lengths)) / 30, atol=1e-9)
    assert sorted(os.listdir(tmp_path)) == ["out.mp4", "s0.mp4", "s1.mp4", "s2.mp4"]


def test_segments_with_other_settings_are_refused(tmp_path):
    a = encode_segment(tmp_path / "a.mp4", 0, 4, vcodec="h264")
    b = encode_segment(tmp_path / "b.mp4", 1, 4, vcodec="hevc")
    with pytest.raises(WriterSessionError, match="encoded with other settings"):
        concat_mp4([a, b], str(tmp_path / "out.mp4"), 30)
    assert sorted(os.listdir(tmp_path)) == ["a.mp4", "b.mp4"]  # no output, no temporary file


def test_a_failed_join_leaves_nothing(tmp_path):
    a = encode_segment(tmp_path / "a.mp4", 0, 4)
    (tmp_path / "broken.mp4").write_bytes(b"not an mp4")
    with pytest.raises(av.FFmpegError):
        concat_mp4([a, str(tmp_path / "broken.mp4")], str(tmp_path / "out.mp4"), 30)
    assert sorted(os.listdir(tmp_path)) == ["a.mp4", "broken.mp4"]
