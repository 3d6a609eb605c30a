"""`episodic doctor`: on this machine without a GPU it says so and why; with a GPU's answers (the driver's
capability query faked as an H100's) it says which backend each camera gets and why; camera facts are PyAV's."""

from __future__ import annotations

import json

import av
import pytest
import torch

from episodic.cli import main
from episodic.tools import doctor as D
from episodic.video import nvdec_caps as C

from support import FIXTURES, H100, FakeNvdecDriver

H264 = FIXTURES / "lerobot_h264" / "dataset"  # written by LeRobot, H.264


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA GPU")
def test_without_a_gpu_it_says_so_and_why():
    r = D.doctor(str(H264))
    text = "\n".join(r.lines())
    assert r.cuda["available"] is False and "no GPU" in text
    assert r.nvdec["why"] and "NVDEC: unavailable" in text
    assert av.__version__ in text and "PyNvVideoCodec" in r.versions
    assert [c["key"] for c in r.cameras] == ["observation.images.top", "observation.images.wrist"]
    for cam in r.cameras:
        path = H264 / cam["file"]
        with av.open(str(path)) as c:  # the facts are the file's, as PyAV reads them
            cc = c.streams.video[0].codec_context
            assert (cam["codec"], cam["pix_fmt"], cam["width"], cam["height"]) == (
                "h264",
                cc.format.name,
                cc.width,
                cc.height,
            )
        assert cam["decode"]["cpu (PyAV)"]["ms"] > 0  # one frame decoded, timed
        assert cam["cuda"].startswith("refused:")


def test_with_a_gpu_each_camera_gets_a_backend_and_a_reason(monkeypatch, small_root):
    monkeypatch.setattr(C, "load_driver", lambda: FakeNvdecDriver())
    monkeypatch.setattr(D, "_cuda", lambda: {"available": True, "why": None, "devices": [f"cuda:0 {H100}"]})
    r = D.doctor(str(small_root), decode=False)  # AV1 cameras
    text = "\n".join(r.lines())
    assert f"NVDEC on GPU 0 ({H100}): h264: yes (7 engines" in text and "av1: no" in text
    for cam in r.cameras:
        assert cam["codec"] == "av1"
        assert "no av1 decoder" in cam["cuda"] and "episodic reencode" in cam["cuda"]
    r = D.doctor(str(H264), decode=False)
    for cam in r.cameras:  # H.264 is decodable; whether it is decoded depends on the library being there
        want = "NVDEC on GPU 0" if r.versions["PyNvVideoCodec"][:1].isdigit() else "PyNvVideoCodec is not installed"
        assert want in cam["cuda"]
    monkeypatch.setattr(D, "_versions", lambda: {"episodic": "x", "PyNvVideoCodec": "2.2.4"})
    r = D.doctor(str(H264), decode=False)
    assert all(c["cuda"] == f"NVDEC on GPU 0 ({H100}), 7 engine(s) for h264" for c in r.cameras)
    r = D.doctor(str(FIXTURES / "lerobot_hevc" / "dataset"), decode=False)  # LeRobot's HEVC: B-frames
    assert "hevc yuv420p 216x160 B-frames" in "\n".join(r.lines())
    for cam in r.cameras:
        assert cam["b_frames"] is True
        assert cam["cuda"].startswith("refused: the stream has B-frames") and "episodic reencode" in cam["cuda"]


def test_cli_writes_json(tmp_path, capsys):
    out = tmp_path / "doctor.json"
    assert main(["doctor", str(H264), "--json", str(out), "--no-decode"]) == 0
    assert "observation.images.top: h264" in capsys.readouterr().out
    record = json.loads(out.read_text())
    assert {"versions", "cuda", "nvdec", "container", "cameras"} <= set(record)
    assert main(["doctor"]) == 0  # no dataset: the machine alone
