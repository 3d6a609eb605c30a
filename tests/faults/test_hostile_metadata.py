"""Hostile metadata (info.json templates and fields, episodes and tasks tables, v2.1 jsonl) ends in an error that
names the file and the field, raised before any file outside the dataset root is opened; map-style and
streaming alike."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from episodic import LeRobotDataset, StreamingLeRobotDataset
from episodic.format import DatasetFormatError

from hostile_data import DATA, HOSTILE, Case, OpenRecorder, to_v21


def _outside_opens(opened: list[str], root: Path) -> list[str]:
    """Files opened under the test's directory but outside the dataset root (the sentinels live there)."""
    base, real_root = str(root.parent.resolve()), str(root.resolve())
    out = []
    for p in opened:
        real = os.path.realpath(p)
        if real.startswith(base + os.sep) and not real.startswith(real_root + os.sep):
            out.append(real)
    return out


def _sentinels(root: Path) -> None:
    """Valid data files next to the root, where a template escaping through '..' would find them."""
    out = root.parent / "outside"
    out.mkdir(exist_ok=True)
    for name in ("file-000.parquet", "0-0.parquet"):
        shutil.copy(root / DATA, out / name)


@pytest.mark.filterwarnings("ignore:.*not in the tasks table")
@pytest.mark.parametrize("case", HOSTILE, ids=lambda c: c.name)
def test_map_style_names_the_problem_and_stays_inside(small_root, copy_of, case: Case):
    root = copy_of(small_root)
    _sentinels(root)
    case.edit(root)
    with OpenRecorder() as opened:
        with pytest.raises(case.error, match=case.message):
            ds = LeRobotDataset("x", root=root, **case.options)
            ds[0]
    assert not _outside_opens(opened, root)


@pytest.mark.parametrize(
    "case",
    [
        c
        for c in HOSTILE
        if c.name in ("data_path parent", "camera key '..'", "negative task_index", "NaN from_timestamp")
    ],
    ids=lambda c: c.name,
)
def test_streaming_names_the_problem_and_stays_inside(small_root, copy_of, case: Case, tmp_path):
    root = copy_of(small_root)
    _sentinels(root)
    case.edit(root)
    with OpenRecorder() as opened:
        with pytest.raises(case.error, match=case.message):
            ds = StreamingLeRobotDataset("x", root=root, cache_dir=tmp_path / "cache", **case.options)
            next(iter(ds.loader(batch_size=4)))
    assert not _outside_opens(opened, root)


def test_info_json_lists_all_its_problems(small_root, copy_of):
    root = copy_of(small_root)
    info = json.loads((root / "meta/info.json").read_text())
    info.update(fps=-3, data_path="../{chunk_index}/{file_index}", total_frames="many")
    info["features"]["task"] = {"dtype": "string", "shape": [1]}
    (root / "meta/info.json").write_text(json.dumps(info))
    with pytest.raises(DatasetFormatError) as err:
        LeRobotDataset("x", root=root)
    assert len(err.value.problems) == 4
    for pattern in ("'fps'", "'total_frames'", "'data_path'", "feature 'task'"):
        assert pattern in str(err.value)


# ---------------------------------------------------------------------------------------------- v2.1 jsonl
def _v21(small_root, tmp_path) -> Path:
    return to_v21(small_root, tmp_path / "v21")


def _lines(path: Path, edit) -> None:
    rows = path.read_text().splitlines()
    path.write_text("\n".join(edit(rows)) + "\n")


V21_CASES = [
    (
        "episodes.jsonl",
        lambda rows: rows[:2] + ["[1, 2, 3]"] + rows[3:],
        r"episodes\.jsonl:3: expected a JSON object, got list",
    ),
    (
        "episodes.jsonl",
        lambda rows: rows[:1] + [json.dumps({"episode_index": 1, "tasks": []})] + rows[2:],
        r"episodes\.jsonl: row 2: field 'length' must be an integer, got None",
    ),
    (
        "episodes.jsonl",
        lambda rows: [rows[0].replace('"episode_index": 0', '"episode_index": "0"')] + rows[1:],
        r"episodes\.jsonl: row 1: field 'episode_index' must be an integer, got '0'",
    ),
    (
        "episodes.jsonl",
        lambda rows: [rows[0].replace('"length": ', '"length": 1.5 + ').replace("1.5 + ", '1.5, "x": ')] + rows[1:],
        r"episodes\.jsonl: row 1: field 'length' must be an integer, got 1\.5",
    ),
    (
        "episodes.jsonl",
        lambda rows: [json.dumps({**json.loads(rows[0]), "tasks": "pick"})] + rows[1:],
        r"episodes\.jsonl: episode 0: field 'tasks' must be a list of strings, got 'pick'",
    ),
    (
        "tasks.jsonl",
        lambda rows: [json.dumps({"task_index": 0})] + rows[1:],
        r"tasks\.jsonl: row 0: task None is not a string",
    ),
    ("tasks.jsonl", lambda rows: rows + ["{not json"], r"tasks\.jsonl:4: not valid JSON"),
    (
        "tasks.jsonl",
        lambda rows: [json.dumps({"task_index": 10**15, "task": "x"})] + rows[1:],
        r"tasks\.jsonl: task_index must number the 3 tasks 0\.\.2 once each",
    ),
]


@pytest.mark.parametrize("name, edit, pattern", V21_CASES, ids=[f"{n}-{i}" for i, (n, _, _) in enumerate(V21_CASES)])
def test_malformed_v21_jsonl(small_root, tmp_path, name, edit, pattern):
    root = _v21(small_root, tmp_path)
    assert len(LeRobotDataset("x", root=root)) == 119  # the conversion itself is good
    _lines(root / "meta" / name, edit)
    with pytest.raises(DatasetFormatError, match=pattern):
        LeRobotDataset("x", root=root)
