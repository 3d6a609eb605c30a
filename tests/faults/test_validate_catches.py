"""`episodic validate` flags every hostile and corrupt case the loader refuses, reports every problem of a file
and of a dataset at once, decodes every frame with --full, never crashes, and prints dataset text escaped."""

from __future__ import annotations

import random
import re
import shutil

import numpy as np
import pyarrow as pa
import pytest

from episodic.cli import main
from episodic.tools.validate import validate

from hostile_data import (
    CORRUPT,
    DATA,
    EPISODES,
    HOSTILE,
    TASKS,
    TOP,
    TOP_MP4,
    Case,
    RecordingServer,
    column_edit,
    edit_info,
    edit_table,
    set_column,
)


def _flagged(report, pattern: str) -> bool:
    return any(re.search(pattern, p) for p in report.problems)


@pytest.mark.parametrize("case", HOSTILE + CORRUPT, ids=lambda c: c.name)
def test_validate_flags_what_the_loader_refuses(small_root, copy_of, case: Case):
    root = copy_of(small_root)
    case.edit(root)
    report = validate(str(root), progress=False)
    assert _flagged(report, case.validate or case.message), report.problems


def test_validate_flags_a_camera_of_another_size_and_its_codec(small_root, copy_of):
    from test_corrupt_files import _reencode

    root = copy_of(small_root)
    _reencode(root / TOP_MP4, 32, 48)
    edit_info(root, lambda info: info["features"]["observation.images.wrist"]["info"].update({"video.codec": "h264"}))
    report = validate(str(root), progress=False)
    assert _flagged(
        report, rf"file-000\.mp4: camera '{TOP}': frames are 32x48 \(height x width\) but info\.json says 48x64"
    )
    assert _flagged(report, r"camera 'observation\.images\.wrist': the stream is \w+, info\.json says h264")


def test_full_decodes_every_frame(small_root, copy_of):
    from test_corrupt_files import _damage_packet

    root = copy_of(small_root)
    _damage_packet(root / TOP_MP4, 60)
    quick = validate(str(root), progress=False)
    full = validate(str(root), progress=False, full=True)
    assert full.checked["frames decoded"] > quick.checked["frames decoded"]
    assert _flagged(
        full, rf"episode \d, camera '{TOP}': a frame not decodable: .*file-000\.mp4: decoding the frame at 2\.0000s"
    )
    assert not _flagged(quick, "decoding the frame at 2.0000s")  # between two episodes' first/last frames: --full only


def test_every_problem_of_one_info_json(small_root, copy_of):
    root = copy_of(small_root)
    edit_info(
        root,
        lambda info: info.update(fps=0, video_path="/abs/{video_key}/{chunk_index}{file_index}.mp4", total_episodes=-1),
    )
    report = validate(str(root), progress=False)
    assert len(report.problems) == 3, report.problems
    for pattern in (
        r"'fps' must be a positive integer",
        r"'video_path'.*absolute",
        r"'total_episodes' has an invalid value",
    ):
        assert _flagged(report, pattern)


def test_every_problem_of_one_dataset(multifile_root, copy_of):
    root = copy_of(multifile_root)
    data = sorted(root.glob("data/*/*.parquet"))
    data[0].unlink()  # 1: a data file missing
    column_edit(str(data[1].relative_to(root)), "task_index", lambda v: np.where(np.arange(len(v)) == 2, -5, v))(
        root
    )  # 2
    column_edit(
        EPISODES,
        "videos/observation.images.wrist/from_timestamp",
        lambda v: np.where(np.arange(len(v)) == 7, np.nan, v),
    )(root)  # 3
    sorted(root.glob(f"videos/{TOP}/*/*.mp4"))[-1].write_bytes(b"not a video")  # 4
    edit_table(root, TASKS, lambda t: set_column(t, "task_index", pa.array([0, 0, 1][: t.num_rows])))  # 5
    report = validate(str(root), progress=False)
    for pattern in (
        rf"{data[0].name}: data file not found",
        rf"{data[1].name}: episode \d+: column 'task_index' .* is -5",
        r"episode\(s\) \[7\]: column 'videos/observation\.images\.wrist/from_timestamp' is nan",
        rf"{TOP}.*cannot open video|cannot open video.*{TOP}",
        r"tasks\.parquet: task_index must number",
    ):
        assert _flagged(report, pattern), (pattern, report.problems)


CORRUPTIONS = {
    "empty": lambda data, rng: b"",
    "half": lambda data, rng: data[: len(data) // 2],
    "garbage": lambda data, rng: bytes(rng.getrandbits(8) for _ in range(max(len(data), 64))),
}


@pytest.mark.parametrize("kind", list(CORRUPTIONS))
def test_validate_never_crashes(small_root, copy_of, kind):
    """Every file of the dataset damaged in turn: a report naming the file, never an exception."""
    rng = random.Random(kind)
    base = copy_of(small_root)
    files = sorted(p.relative_to(base) for p in base.rglob("*") if p.is_file())
    assert len(files) == 7
    for rel in files:
        root = base.parent / f"{kind}-{str(rel).replace('/', '_')}"
        shutil.copytree(base, root)
        (root / rel).write_bytes(CORRUPTIONS[kind]((root / rel).read_bytes(), rng))
        report = validate(str(root), progress=False)
        assert not report.ok, rel
        assert any(str(rel) in p or str(root / "meta") in p for p in report.problems), (rel, report.problems)
        assert not any("unexpected error" in p for p in report.problems), report.problems


def test_validate_over_http_stays_under_the_prefix(small_root, copy_of):
    root = copy_of(small_root)
    edit_info(root, lambda info: info.update(data_path="../outside/{chunk_index}-{file_index}.parquet"))
    with RecordingServer(root.parent) as server:
        report = validate(f"{server.url}/{root.name}", progress=False)
    assert _flagged(report, r"field 'data_path'.*'\.\.' component")
    assert server.requests and all(p.startswith(f"/{root.name}/") for p in server.requests)


@pytest.mark.filterwarnings("ignore:.*not in the tasks table")
def test_terminal_output_escapes_dataset_text(small_root, copy_of, capsys):
    root = copy_of(small_root)
    evil = "pick\x1b[2J\x1b]0;owned\x07\nOK: fake line\u202e"
    edit_table(
        root,
        TASKS,
        lambda t: set_column(
            t, "__index_level_0__", pa.array([evil] + t.column("__index_level_0__").to_pylist()[1:], pa.large_string())
        ),
    )
    assert main(["info", str(root)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out and "\nOK: fake line" not in out
    assert r"pick\x1b[2J\x1b]0;owned\x07\nOK: fake line\u202e" in out
    # validate prints paths (a directory name is text too) and problems the same way
    odd = root.rename(root.parent / "ds\x1b[31mred")
    (odd / DATA).unlink()
    assert main(["validate", str(odd), "-q", "--no-decode"]) == 1
    out = capsys.readouterr().out
    assert "\x1b" not in out and "ds\\x1b[31mred/data/chunk-000/file-000.parquet: data file not found" in out
