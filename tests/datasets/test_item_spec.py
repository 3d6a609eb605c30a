"""ItemSpec: what items hold, built once and immutable; LeRobot arguments that episodic ignores warn once."""

from __future__ import annotations

import dataclasses
import warnings

import pytest

from episodic import LeRobotDataset
from episodic.datasets import map_style
from episodic.datasets.item_spec import ItemSpec
from episodic.format import load_metadata


def test_spec_from_metadata_and_arguments(small_root):
    from fsspec.implementations.local import LocalFileSystem

    meta = load_metadata(LocalFileSystem(), str(small_root))
    spec = ItemSpec.build(meta, {"action": [0.0, 1 / 30]}, video_keys=["observation.images.top"])
    assert spec.video_keys == ("observation.images.top",) and spec.delta_indices == {"action": [0, 1]}
    assert spec.camera_keys == ["observation.images.top"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.tolerance_s = 1.0
    with pytest.raises(ValueError, match=r"video_keys \['nope'\] are not cameras"):
        ItemSpec.build(meta, video_keys=["nope"])


def test_ignored_lerobot_arguments_warn_once(small_root, monkeypatch):
    monkeypatch.setattr(map_style, "_WARNED", set())
    with pytest.warns(UserWarning, match="download_videos=False is accepted for LeRobot compatibility and ignored"):
        LeRobotDataset("x", root=small_root, download_videos=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        LeRobotDataset("x", root=small_root, download_videos=False)  # once per process
        LeRobotDataset("x", root=small_root, video_backend="pyav")  # the backend episodic uses: no warning
