"""`episodic show`: one episode's frames and curves as a PNG."""

from __future__ import annotations

from episodic.cli import main

from support import assert_picture as _assert_not_blank, read_png as _png


def test_show_writes_episode_picture(tiny_root, tmp_path, capsys):
    png = tmp_path / "ep.png"
    assert main(["show", str(tiny_root), "--episode", "2", "-o", str(png), "-q"]) == 0
    img = _png(png)
    assert img.shape[1] == 1300 and img.shape[0] > 600
    _assert_not_blank(img, min_colours=50)
    # frames strip: the camera pictures are drawn (the demo frames are colour gradients)
    top = img[: img.shape[0] // 3]
    assert (top.max(axis=2) - top.min(axis=2)).max() > 0.5


def test_show_episode_out_of_range(tiny_root, tmp_path, capsys):
    assert main(["show", str(tiny_root), "--episode", "9", "-o", str(tmp_path / "x.png"), "-q"]) != 0
    assert "out of range" in capsys.readouterr().err
    assert not (tmp_path / "x.png").exists()
