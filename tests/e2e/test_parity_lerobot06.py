"""Items equal LeRobot 0.6.1's on datasets its own writer made (AV1 and H.264; depth cameras, both quantisations and
output units): plain, windows, episode subsets, uint8 frames and image transforms; map-style, streaming and inside a
mixture.

LeRobot runs in its own Python 3.13 venv (benchmarks/setup_lerobot06_venv.sh; found by `support.lerobot06_python`),
through src/episodic/tools/bench/lerobot_side.py, which never imports episodic: `write` makes the dataset with
LeRobot's writer, `items` dumps what LeRobot's LeRobotDataset returns (it decodes with torchcodec). Tabular values
must be equal, RGB frames within 2/255 (episodic decodes with PyAV). Slow (`pytest -m slow`); skipped without the
venv.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from episodic import LeRobotDataset, StreamingLeRobotDataset
from episodic.datasets.mixture import MixtureDataset
from episodic.mixture import MixtureSpec

from support import REPO, lerobot06_python

SIDE = REPO / "src" / "episodic" / "tools" / "bench" / "lerobot_side.py"
FRAME_TOLERANCE = 2  # /255
# the image transforms of lerobot_side.py's TRANSFORMS, by name (the same torch operations on both sides)
TRANSFORMS = {"flip_affine": lambda x: x.flip(-1) * 0.5 + 0.25, "flip": lambda x: x.flip(-1)}
CASES = {
    "plain": [],
    "windows": ["--delta-timestamps", "windows"],
    "subset": ["--episodes", "5,0,2"],
    "subset_windows_uint8": ["--episodes", "4,1,3", "--delta-timestamps", "windows", "--return-uint8"],
    "windows_transform": ["--delta-timestamps", "windows", "--transform", "flip_affine"],
    "uint8_transform": ["--return-uint8", "--transform", "flip"],
}

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        lerobot06_python() is None,
        reason=("no LeRobot 0.6.1 venv: run benchmarks/setup_lerobot06_venv.sh (or set EPISODIC_LEROBOT06_VENV)"),
    ),
]


def _side(*args: str) -> str:
    proc = subprocess.run([str(lerobot06_python()), str(SIDE), *args], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


@pytest.fixture(scope="module", params=["av1", "h264"])
def written(request, tmp_path_factory) -> tuple[Path, dict[str, Path]]:
    """A dataset written by LeRobot 0.6.1 (6 episodes of 10-25 frames, 2 cameras 48x64) and LeRobot's items of each
    case."""
    base = tmp_path_factory.mktemp(f"lerobot06-{request.param}")
    root = base / "ds"
    _side(
        "write",
        "--root",
        str(root),
        "--episodes",
        "6",
        "--min-len",
        "10",
        "--max-len",
        "25",
        "--height",
        "48",
        "--width",
        "64",
        "--vcodec",
        request.param,
    )
    dumps = {}
    for case, args in CASES.items():
        dumps[case] = base / f"items_{case}.npz"
        out = json.loads(
            _side("items", "--root", str(root), "--out", str(dumps[case]), "--n-random", "24", *args)
            .strip()
            .splitlines()[-1]
        )
        assert out["video_backend"] == "torchcodec", out
    return root, dumps


def _reference(npz: Path) -> tuple[dict, dict]:
    """(LeRobotDataset arguments, {index: {key: value}}) of one dump."""
    data = np.load(npz)
    options = json.loads(str(data["options"]))
    kwargs = {
        "delta_timestamps": json.loads(str(data["delta_timestamps"])),
        "episodes": data["episodes"].tolist() if "episodes" in data else None,
        "return_uint8": options["return_uint8"],
        "image_transforms": TRANSFORMS[options["transform"]] if options["transform"] else None,
    }
    items = {}
    for j in range(len(data["indices"])):
        keys = [k.split("/", 1)[1] for k in data.files if k.startswith(f"{j}/")]
        item = {k: data[f"{j}/{k}"] for k in keys}
        items[int(item["index"])] = item
    return kwargs, items


def _compare(want: dict, got: dict, cameras: list[str], float_frames: bool, diffs: list) -> None:
    for key, ref in want.items():
        if key == "task_index" and key not in got:  # a mixture's items name no task_index
            continue
        value = got[key]
        if key == "task":
            assert value == str(ref)
        elif key in cameras:
            value = value.numpy() if isinstance(value, torch.Tensor) else value
            assert value.shape == ref.shape, (key, value.shape, ref.shape)
            if ref.dtype == np.uint8 and value.dtype == np.uint8:  # return_uint8 on both sides
                d = np.abs(value.astype(np.int64) - ref.astype(np.int64))
            elif float_frames:  # transformed float frames, stored as they were
                assert value.dtype == np.float32
                d = np.abs(value.astype(np.float64) - ref.astype(np.float64)) * 255
            else:  # LeRobot's float frames, stored as round(x * 255)
                assert value.dtype == np.float32, (key, value.dtype)
                d = np.abs(value.astype(np.float64) * 255 - ref.astype(np.float64))
            diffs.append((float(d.max()), float(d.mean())))
            assert d.max() <= FRAME_TOLERANCE, f"index {int(want['index'])} {key}: frame differs by {d.max()}/255"
        else:
            value = value.numpy() if isinstance(value, torch.Tensor) else np.asarray(value)
            assert value.dtype == ref.dtype and value.shape == ref.shape, (key, value.dtype, value.shape, ref.dtype)
            assert np.array_equal(value, ref), f"index {int(want['index'])} {key}: values differ"


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("mode", ["map", "streaming", "mixture"])
def test_items_equal_lerobot_061(written, case, mode, tmp_path):
    root, dumps = written
    kwargs, want = _reference(dumps[case])
    float_frames = CASES[case].count("--transform") and not kwargs["return_uint8"]
    diffs: list = []
    if mode == "map":
        ds = LeRobotDataset("lerobot06", root=root, **kwargs)
        cameras = ds.camera_keys
        by_index = {int(ds[i]["index"]): i for i in range(len(ds))}
        for index, ref in want.items():
            item = ds[by_index[index]]
            assert list(item) == list(ref), "keys (or their order) differ"
            _compare(ref, item, cameras, float_frames, diffs)
    elif mode == "streaming":
        ds = StreamingLeRobotDataset("lerobot06", root=root, cache_dir=tmp_path, **kwargs)
        cameras = ds.camera_keys
        seen = set()
        for item in ds:
            index = int(item["index"])
            seen.add(index)
            if index in want:
                assert set(item) == set(want[index]), "keys differ"
                _compare(want[index], item, cameras, float_frames, diffs)
        assert set(want) <= seen
    else:
        entry = {"source": str(root), "name": "lerobot06"}
        if kwargs["episodes"] is not None:
            entry["episodes"] = kwargs["episodes"]
        spec = {"entries": [entry]}
        if kwargs["delta_timestamps"]:  # a mixture's windows are by role: 'state' for observation.state, ...
            spec["delta_timestamps"] = {k.rsplit(".", 1)[-1]: v for k, v in kwargs["delta_timestamps"].items()}
        ds = MixtureDataset(
            MixtureSpec.from_dict(spec),
            return_uint8=kwargs["return_uint8"],
            image_transforms=kwargs["image_transforms"],
            cache_dir=tmp_path,
        )
        cameras = [
            k for k in want[next(iter(want))] if k.startswith("observation.images.") and not k.endswith("_is_pad")
        ]
        seen = set()
        for i in range(len(ds)):
            item = ds[i]
            index = int(item["index"])
            seen.add(index)
            if index in want:
                _compare(want[index], item, cameras, float_frames, diffs)
        assert set(want) <= seen
    assert diffs, "no camera frame compared"
    print(
        f"{root.parent.name} {case} {mode}: frames max {max(d[0] for d in diffs):.3f}/255, "
        f"mean {np.mean([d[1] for d in diffs]):.4f}/255 over {len(diffs)} frames"
    )


def test_pip_install_into_lerobot_061_changes_nothing():
    """`pip install episodic` (this checkout) into LeRobot 0.6.1's environment installs episodic and nothing else:
    every package LeRobot pinned stays at its version (pip's own resolution, `--dry-run --report`)."""
    pip = lerobot06_python().parent / "pip"
    proc = subprocess.run(
        [str(pip), "install", "--dry-run", "--quiet", "--report", "-", str(REPO)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    assert [(i["metadata"]["name"], i["metadata"]["version"]) for i in report["install"]] == [("episodic", "0.1.0")]


DUMP = """
import json, sys
import numpy as np
from episodic import LeRobotDataset
root, out, kwargs = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
ds = LeRobotDataset("lerobot06", root=root, **kwargs)
arrays = {}
for i in range(len(ds)):
    for k, v in ds[i].items():
        arrays[f"{i}/{k}"] = np.array(v) if isinstance(v, str) else v.numpy()
np.savez(out, **arrays)
"""


@pytest.mark.parametrize("case", ["plain", "subset_windows_uint8"])
def test_episodic_in_lerobot_061s_environment_gives_the_same_items(written, case, tmp_path):
    """episodic run in LeRobot 0.6.1's venv (torch 2.11, numpy 2.2, PyAV 15: the versions pip keeps there), from this
    checkout's src/, hands out LeRobot's items there too."""
    root, dumps = written
    kwargs, want = _reference(dumps[case])
    kwargs.pop("image_transforms")
    out = tmp_path / "episodic.npz"
    proc = subprocess.run(
        [str(lerobot06_python()), "-c", DUMP, str(root), str(out), json.dumps(kwargs)],
        env={**os.environ, "PYTHONPATH": str(REPO / "src")},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = np.load(out)
    items = {}
    for name in data.files:
        i, key = name.split("/", 1)
        items.setdefault(int(i), {})[key] = data[name]
    by_index = {int(item["index"]): item for item in items.values()}
    cameras = [k for k in want[next(iter(want))] if k.startswith("observation.images.") and not k.endswith("_is_pad")]
    diffs: list = []
    for index, ref in want.items():
        got = {k: (str(v) if k == "task" else v) for k, v in by_index[index].items()}
        assert list(got) == list(ref)
        _compare(ref, got, cameras, False, diffs)
    assert diffs


# ---------------------------------------------------------------------------------------------- depth cameras
# LeRobot 0.6.1's depth cameras: written by its writer (DepthEncoderConfig: log or linear quantisation, the depth given
# in metres or millimetres), read by its LeRobotDataset in "mm" (its default) or "m". Items must equal LeRobot's:
# tabular exact, RGB within 2/255, depth within float32 rounding (metres: LeRobot's torch and episodic's numpy evaluate
# the same float32 formulas, their exp() differing by an ulp on many pixels) or 1 mm on under 1% of the pixels (such an
# ulp before the rounding to whole millimetres may move a tie). The quantisation step is far larger (>= 0.3 mm).
DEPTH_WRITES = {
    "log_m": ["--depth-quant", "log", "--depth-unit", "m"],
    "linear_mm": ["--depth-quant", "linear", "--depth-unit", "mm", "--depth-min", "0.2", "--depth-max", "6"],
}
DEPTH_CASES = {
    "mm": [],  # LeRobot's default depth_output_unit
    "m": ["--depth-unit", "m"],
    "windows_uint8_transform_m": [
        "--delta-timestamps",
        "windows",
        "--return-uint8",
        "--transform",
        "flip",
        "--depth-unit",
        "m",
    ],
    "subset_transform_mm": ["--episodes", "3,0", "--transform", "flip_affine", "--depth-unit", "mm"],
}


@pytest.fixture(scope="module", params=list(DEPTH_WRITES))
def depth_written(request, tmp_path_factory) -> tuple[Path, dict[str, Path]]:
    """A dataset written by LeRobot 0.6.1 (4 episodes of 8-16 frames, 2 RGB cameras and 2 depth cameras 48x64,
    H.264 and HEVC gray12le) and LeRobot's items of each depth case."""
    base = tmp_path_factory.mktemp(f"lerobot06-depth-{request.param}")
    root = base / "ds"
    _side(
        "write",
        "--root",
        str(root),
        "--episodes",
        "4",
        "--min-len",
        "8",
        "--max-len",
        "16",
        "--height",
        "48",
        "--width",
        "64",
        "--vcodec",
        "h264",
        "--depth",
        "2",
        *DEPTH_WRITES[request.param],
    )
    dumps = {}
    for case, args in DEPTH_CASES.items():
        dumps[case] = base / f"items_{case}.npz"
        _side("items", "--root", str(root), "--out", str(dumps[case]), "--n-random", "16", *args)
    return root, dumps


def _compare_depth(want: dict, got: dict, keys: list[str], unit: str, diffs: list) -> None:
    for key in keys:
        ref = want[key]
        value = got[key].numpy() if isinstance(got[key], torch.Tensor) else got[key]
        assert value.dtype == np.float32 == ref.dtype and value.shape == ref.shape, (
            key,
            value.dtype,
            value.shape,
            ref.dtype,
            ref.shape,
        )
        d = np.abs(value.astype(np.float64) - ref.astype(np.float64))
        bound = 1.0 if unit == "mm" else 4 * np.finfo(np.float32).eps * (ref.max() + 3.5)
        diffs.append((float(d.max()), float(np.mean(d > 0))))
        assert d.max() <= bound, f"index {int(want['index'])} {key}: depth differs by {d.max()} {unit}"
        if unit == "mm":  # whole millimetres: a tie moved by a float32 ulp is rare
            assert np.mean(d > 0) < 0.01, f"index {int(want['index'])} {key}: {np.mean(d > 0):.2%} of pixels differ"


@pytest.mark.parametrize("case", list(DEPTH_CASES))
@pytest.mark.parametrize("mode", ["map", "streaming", "mixture"])
def test_depth_items_equal_lerobot_061(depth_written, case, mode, tmp_path):
    root, dumps = depth_written
    kwargs, want = _reference(dumps[case])
    data = np.load(dumps[case])
    options = json.loads(str(data["options"]))
    unit = options["depth_output_unit"] or "mm"
    depth_keys = options["depth_keys"]
    assert len(depth_keys) == 2
    if case != "mm":
        kwargs["depth_output_unit"] = unit
    float_frames = "--transform" in DEPTH_CASES[case] and not kwargs["return_uint8"]
    diffs, depth_diffs = [], []
    first = want[next(iter(want))]
    cameras = [
        k for k in first if k.startswith("observation.images.") and not k.endswith("_is_pad") and k not in depth_keys
    ]

    def check(ref, item):
        _compare({k: v for k, v in ref.items() if k not in depth_keys}, item, cameras, float_frames, diffs)
        _compare_depth(ref, item, depth_keys, unit, depth_diffs)

    if mode in ("map", "streaming"):
        if mode == "map":
            ds = LeRobotDataset("lerobot06", root=root, **kwargs)
            items = (ds[i] for i in range(len(ds)))
        else:
            ds = StreamingLeRobotDataset("lerobot06", root=root, cache_dir=tmp_path, **kwargs)
            items = iter(ds)
        assert ds.depth_keys == depth_keys == ds.meta.depth_keys
        for key in depth_keys:  # the statistics as LeRobot hands them out: in the output unit
            for name, value in ds.meta.stats[key].items():
                np.testing.assert_allclose(value, data[f"stats/{key}/{name}"], rtol=1e-6, err_msg=f"{key} {name}")
        seen = set()
        for item in items:
            index = int(item["index"])
            seen.add(index)
            if index in want:
                assert list(item) == list(want[index]) if mode == "map" else set(item) == set(want[index])
                check(want[index], item)
        assert set(want) <= seen
    else:
        entry = {"source": str(root), "name": "lerobot06"}
        if kwargs["episodes"] is not None:
            entry["episodes"] = kwargs["episodes"]
        spec = {"entries": [entry]}
        if kwargs["delta_timestamps"]:
            spec["delta_timestamps"] = {k.rsplit(".", 1)[-1]: v for k, v in kwargs["delta_timestamps"].items()}
        ds = MixtureDataset(
            MixtureSpec.from_dict(spec),
            return_uint8=kwargs["return_uint8"],
            image_transforms=kwargs["image_transforms"],
            cache_dir=tmp_path,
            depth_output_unit=unit,
        )
        assert ds.depth_keys == depth_keys
        seen = set()
        for i in range(len(ds)):
            item = ds[i]
            index = int(item["index"])
            seen.add(index)
            if index in want:
                check(want[index], item)
        assert set(want) <= seen
    assert diffs and depth_diffs
    print(
        f"{root.parent.name} {case} {mode}: depth max {max(d[0] for d in depth_diffs):.3g} {unit}, "
        f"pixels differing {max(d[1] for d in depth_diffs):.4%} over {len(depth_diffs)} frames; "
        f"RGB max {max(d[0] for d in diffs):.3f}/255"
    )
