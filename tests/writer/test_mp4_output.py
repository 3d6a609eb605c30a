"""A new mp4 written safely (writer/mp4_output.py): the file is renamed into place only once PyAV reads it back
as the frames the muxer wrote; a muxer that fails, or a file that reads back short, leaves nothing behind."""

from __future__ import annotations

import os

import av
import numpy as np
import pytest

from episodic.writer.mp4_output import write_mp4

from support import encode_segment


def _source(tmp_path, n: int) -> str:
    return encode_segment(tmp_path / "src.mp4", 0, n, vcodec="h264", gop=2)


def _copy(src: str, claim: int | None = None):
    """A mux function copying every packet of `src`; returns `claim` frames when given, else the packets copied."""

    def mux(out) -> int:
        count = 0
        with av.open(src) as inp:
            ist = inp.streams.video[0]
            ost = out.add_stream_from_template(ist, opaque=True)
            ost.time_base = ist.time_base
            for p in inp.demux(ist):
                if p.dts is None:
                    continue
                p.stream = ost
                out.mux(p)
                count += 1
        return count if claim is None else claim

    return mux


def test_written_file_decodes_to_the_source_frames(tmp_path):
    src = _source(tmp_path, 6)
    final = str(tmp_path / "out" / "copy.mp4")
    os.makedirs(os.path.dirname(final))
    assert write_mp4(final, _copy(src)) == 6
    with av.open(src) as a, av.open(final) as b:
        want = [f.to_ndarray(format="rgb24") for f in a.decode(video=0)]
        got = [f.to_ndarray(format="rgb24") for f in b.decode(video=0)]
    assert len(got) == 6 and all(np.array_equal(x, y) for x, y in zip(got, want, strict=True))
    assert os.listdir(os.path.dirname(final)) == ["copy.mp4"]  # no temporary file left


def test_a_file_reading_back_short_is_never_renamed(tmp_path):
    src = _source(tmp_path, 4)
    final = tmp_path / "out.mp4"
    with pytest.raises(OSError, match=r"reads back as 4 frames after writing 5"):
        write_mp4(str(final), _copy(src, claim=5))
    assert sorted(os.listdir(tmp_path)) == ["src.mp4"]


def test_a_failing_muxer_leaves_nothing(tmp_path):
    src = _source(tmp_path, 4)

    def mux(out) -> int:
        _copy(src)(out)
        raise RuntimeError("source went away")

    with pytest.raises(RuntimeError, match="source went away"):
        write_mp4(str(tmp_path / "out.mp4"), mux)
    assert sorted(os.listdir(tmp_path)) == ["src.mp4"]
