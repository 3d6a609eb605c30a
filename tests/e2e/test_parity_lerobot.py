"""Items equal what LeRobot 0.4.4 returns on datasets written by LeRobot's own writer.

Each fixture directory holds `dataset/` (written by LeRobot 0.4.4) and `items_*.npz` (LeRobot's items for
`indices`; array `j/KEY` is key KEY of item j; cameras stored as uint8 = LeRobot's float * 255). Arrays
`episodes` and `delta_timestamps` (JSON), when present, say how LeRobot's dataset was built.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from episodic import LeRobotDataset

from support import FIXTURES, LEROBOT_FIXTURE

FRAME_TOLERANCE = 2  # /255


def _shared_fixture_deltas() -> dict:
    text = (LEROBOT_FIXTURE / "README.md").read_text()
    return json.loads(text.split("delta_timestamps = ", 1)[1].strip().splitlines()[0])


def _cases():
    for npz in sorted(FIXTURES.glob("*/items_*.npz")):
        yield pytest.param(npz, id=f"{npz.parent.name}/{npz.stem}")


def _query(npz: Path, data) -> tuple[dict | None, list[int] | None]:
    deltas = json.loads(str(data["delta_timestamps"])) if "delta_timestamps" in data else None
    if npz.parent == LEROBOT_FIXTURE and npz.stem == "items_windows":
        deltas = _shared_fixture_deltas()
    episodes = None
    if "episodes" in data:
        raw = data["episodes"]
        episodes = json.loads(str(raw)) if raw.dtype.kind in "US" else raw.tolist()
    return deltas, episodes


@pytest.mark.parametrize("npz", list(_cases()))
def test_items_equal_lerobot(npz: Path):
    data = np.load(npz)
    deltas, episodes = _query(npz, data)
    ds = LeRobotDataset("fixture", root=npz.parent / "dataset", delta_timestamps=deltas, episodes=episodes)
    if episodes is not None:
        assert ds.episodes == episodes  # echoed as given, like LeRobot
    worst = 0.0
    for j, idx in enumerate(data["indices"]):
        item = ds[int(idx)]
        ref_keys = [k.split("/", 1)[1] for k in data.keys() if k.startswith(f"{j}/")]
        assert list(item) == ref_keys, f"item {idx}: keys differ"
        for key in ref_keys:
            ref, got = data[f"{j}/{key}"], item[key]
            if key == "task":
                assert got == str(ref)
            elif key in ds.camera_keys:
                assert got.dtype == torch.float32 and tuple(got.shape) == ref.shape, key
                diff = np.abs(got.numpy().astype(np.float64) * 255 - ref.astype(np.float64)).max()
                worst = max(worst, diff)
                assert diff <= FRAME_TOLERANCE, f"item {idx} {key}: frame differs by {diff}/255"
            else:
                assert got.numpy().dtype == ref.dtype and tuple(got.shape) == ref.shape, (key, got.dtype, got.shape)
                assert np.array_equal(got.numpy(), ref), f"item {idx} {key}: values differ"


def test_batched_access_equals_single_items():
    ds = LeRobotDataset("fixture", root=LEROBOT_FIXTURE / "dataset", delta_timestamps=_shared_fixture_deltas())
    idx = [3102, 0, 198, 199, 1500, 0]
    batch = ds.__getitems__(idx)
    for i, item in zip(idx, batch):
        single = ds[i]
        for k in single:
            if k == "task":
                assert item[k] == single[k]
            else:
                assert torch.equal(item[k], single[k]), k
