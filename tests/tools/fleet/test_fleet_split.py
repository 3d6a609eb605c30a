"""A large dataset split into per-file units (tools/fleet/worklist.plan_units, driver.py, summary.roll_up,
tools/reencode_units.py): reencode runs one unit per video file, then the dataset's final step. The plan is a
pure function of the list and the datasets' file lists; the split copy is byte for byte the whole run's, its
frames and times PyAV's decode of the original's; the units spread over array tasks and Ray workers; array tasks
SIGKILLed midway and run again encode every file once; a broken file is named in the summary."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import av
import numpy as np
import pytest

from episodic.demo import write_demo_dataset
from episodic.tools.fleet.driver import run_fleet
from episodic.tools.fleet.summary import summary_table
from episodic.tools.fleet.tasks import REENCODE
from episodic.tools.fleet.worklist import plan_units, read_worklist, shard
from episodic.tools.reencode import WORK_DIR
from episodic.tools.reencode_units import FILES_DIR

from fleet_checks import make_list, tree_digest

H264 = {"vcodec": "h264"}


@pytest.fixture(scope="module")
def big(tmp_path_factory) -> Path:
    """An AV1 dataset by episodic's writer whose cameras are each in several video files (tiny files: 0.01 MB)."""
    return write_demo_dataset(
        tmp_path_factory.mktemp("split") / "big",
        num_episodes=8,
        min_length=12,
        max_length=30,
        height=48,
        width=64,
        progress=False,
        video_files_size_in_mb=0.01,
    )


@pytest.fixture(scope="module")
def broken_file(big, tmp_path_factory) -> tuple[Path, str]:
    """A copy of `big` with one video file cut to half its bytes (its index is lost); (root, the file)."""
    import shutil

    root = tmp_path_factory.mktemp("split-broken") / "broken"
    shutil.copytree(big, root)
    victim = sorted(root.rglob("*.mp4"))[1]
    data = victim.read_bytes()
    victim.write_bytes(data[: len(data) // 2])
    return root, victim.relative_to(root).as_posix()


def _mp4s(root: Path) -> list[str]:
    """The dataset's video files, found on disk (not through episodic's metadata)."""
    return sorted(p.relative_to(root).as_posix() for p in Path(root).rglob("*.mp4"))


def _pyav_times(path: Path) -> tuple[str, np.ndarray]:
    with av.open(str(path)) as c:
        name = c.streams.video[0].codec_context.name
        return name, np.array([float(f.pts * f.time_base) for f in c.decode(video=0)])


def _same_frames_as_source(src: Path, dst: Path) -> None:
    """Every video of `dst` is H.264 with the frames (count and times) PyAV decodes from `src`'s."""
    assert _mp4s(src) == _mp4s(dst)
    for rel in _mp4s(src):
        _, want = _pyav_times(src / rel)
        codec, got = _pyav_times(dst / rel)
        assert codec == "h264" and np.array_equal(want, got), rel


def _records(out: Path) -> set[str]:
    """The video files whose unit finished (its record in the unfinished copy's work directory)."""
    found = set()
    for d in out.iterdir() if out.is_dir() else []:
        files = d / WORK_DIR / FILES_DIR
        if files.is_dir():
            found |= {f"{d.name}:{p.name[: -len('.done')].replace('--', '/')}" for p in files.glob("*.done")}
    return found


# ------------------------------------------------------------------------------------------------ the plan
def test_the_plan_splits_large_datasets_per_file_and_the_shards_cover_it(big, fleet_sources, tmp_path):
    small = Path(fleet_sources[0])
    listing = make_list(tmp_path / "list.txt", [small, big, fleet_sources[1]])
    items = read_worklist(listing, str(tmp_path / "out"), REENCODE.output)
    video_bytes = sum(os.path.getsize(big / rel) for rel in _mp4s(big))
    units = plan_units(items, REENCODE, REENCODE.options(H264), video_bytes - 1)
    assert [u["name"] for u in units] == [small.name] + ["big"] * len(_mp4s(big)) + [Path(fleet_sources[1]).name]
    assert [u["part"] for u in units if "part" in u] == _mp4s(big)  # every video file, once, in path order
    assert len(_mp4s(big)) >= 4
    assert plan_units(items, REENCODE, REENCODE.options(H264), video_bytes - 1) == units  # a pure function
    assert all("part" not in u for u in plan_units(items, REENCODE, REENCODE.options(H264), video_bytes))
    assert all("part" not in u for u in plan_units(items, REENCODE, REENCODE.options(H264), None))
    for n in (2, 3):
        shares = [shard(units, k, n) for k in range(n)]
        assert sorted(map(json.dumps, (u for s in shares for u in s))) == sorted(map(json.dumps, units))
        assert sum(any(u.get("part") for u in s) for s in shares) == n  # big's files in every array task


# ------------------------------------------------------------------------------------------------ local pool
def test_the_split_copy_is_the_whole_runs_and_a_rerun_skips_it(big, tmp_path):
    before = tree_digest(big)
    whole = run_fleet("reencode", [str(big)], str(tmp_path / "whole"), workers=2, options=H264, split_above=None)
    split = run_fleet("reencode", [str(big)], str(tmp_path / "split"), workers=2, options=H264, split_above=0)
    assert whole["units"] == 1 and split["units"] == len(_mp4s(big)) + 1  # its files, then its final step
    (row,) = split["results"]
    assert row["status"] == "done" and row["facts"]["files_encoded"] == len(_mp4s(big)), summary_table(split)
    assert sorted(u["part"] for u in row["units"] if "part" in u) == _mp4s(big)
    assert row["units"][-1].get("finish") and row["units"][-1]["status"] == "done"
    assert tree_digest(big) == before  # the source untouched
    a, b = tmp_path / "whole/big", tmp_path / "split/big"
    whole_files, split_files = tree_digest(a), tree_digest(b)
    assert whole_files.keys() == split_files.keys()  # the same files, no work directory left
    for rel in whole_files:  # byte for byte, the re-encoded videos too (x264 capped at AVX2 on AVX-512 CPUs:
        # before, ~1 run in 6 of this test wrote some video of one copy with other bytes)
        assert whole_files[rel].split(":")[0] == split_files[rel].split(":")[0], rel
    # the videos: each the original's frames at its times, in both copies
    _same_frames_as_source(big, a)
    _same_frames_as_source(big, b)
    again = run_fleet("reencode", [str(big)], str(tmp_path / "split"), workers=2, options=H264, split_above=0)
    assert again["skipped"] == 1 and again["done"] == 0
    assert {u["status"] for u in again["results"][0]["units"]} == {"skipped"}


def test_a_broken_file_is_named_and_the_rest_of_its_dataset_done(big, broken_file, tmp_path):
    root, rel = broken_file
    before = tree_digest(root)
    out = tmp_path / "out"
    summary = run_fleet("reencode", [str(big), str(root)], str(out), workers=2, options=H264, split_above=0)
    assert summary["done"] == 1 and summary["failed"] == 1, summary_table(summary)
    (failed,) = [r for r in summary["results"] if r["status"] == "failed"]
    assert failed["name"] == "broken" and failed["failed_parts"] == [rel]
    assert rel in failed["error"] and "1 of" in failed["error"]
    table = summary_table(summary)
    assert "broken" in table and rel in table
    assert _records(out) == {f"broken:{r}" for r in _mp4s(root) if r != rel}  # the other files done, once
    assert not (out / "broken/meta/info.json").exists()  # not a dataset: its final step never ran
    assert tree_digest(root) == before
    _same_frames_as_source(big, out / "big")


# ------------------------------------------------------------------------------------------------ SLURM arrays
def _cmd(listing: Path, out: Path, k: int, n: int, summary: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "episodic.cli",
        "fleet",
        "reencode",
        str(listing),
        str(out),
        "--option",
        "vcodec=h264",
        "--split-above",
        "0",
        "--shard",
        f"{k}/{n}",
        "--workers",
        "1",
        "-q",
        "--summary",
        str(summary),
    ]


def test_split_shards_killed_midway_and_run_again(big, broken_file, fleet_sources, tmp_path):
    """2 array tasks over a list whose datasets are split per file, SIGKILLed once some files are done, then run
    again side by side: every file encoded once, every dataset finished by whichever task did its last file."""
    root, rel = broken_file
    sources = [str(big), *fleet_sources[:6], str(root)]
    listing = make_list(tmp_path / "list.txt", sources)
    out = tmp_path / "out"
    items = read_worklist(listing, str(out), REENCODE.output)
    units = plan_units(items, REENCODE, REENCODE.options(H264), 0)
    assert len(units) > len(items) + 8
    n = 2
    procs = [
        subprocess.Popen(
            _cmd(listing, out, k, n, tmp_path / f"first-{k}.json"),
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        for k in range(n)
    ]
    deadline = time.monotonic() + 300
    while len(_records(out)) < 3:
        assert time.monotonic() < deadline and any(p.poll() is None for p in procs)
        time.sleep(0.01)
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()
    done_before = _records(out)
    split_files = {f"{u['name']}:{u['part']}" for u in units if "part" in u}
    assert 3 <= len(done_before) < len(split_files) - 1  # killed midway
    procs = [
        subprocess.Popen(
            _cmd(listing, out, k, n, tmp_path / f"again-{k}.json"),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for k in range(n)
    ]
    summaries = []
    for k, p in enumerate(procs):
        _, err = p.communicate(timeout=600)
        mine = shard(units, k, n)
        summary = tmp_path / f"again-{k}.json"
        assert p.returncode == (1 if any(u.get("part") == rel and u["name"] == "broken" for u in mine) else 0), err + (
            summary.read_text() if summary.exists() else "(no summary)"
        )
        summaries.append(json.loads((tmp_path / f"again-{k}.json").read_text()))
    again: dict[str, str] = {}  # file -> its unit's status in the second round
    for k, s in enumerate(summaries):
        mine = shard(units, k, n)
        assert s["units"] == len(mine) + sum(
            1 for r in s["results"] if any(u.get("finish") for u in r.get("units", []))
        )
        assert sorted(r["name"] for r in s["results"]) == sorted({u["name"] for u in mine})
        for r in s["results"]:
            for u in r.get("units", []):
                if "part" in u:
                    again[f"{r['name']}:{u['part']}"] = u["status"]
    assert set(again) == split_files  # each file's unit ran in exactly one array task (no overlap: a dict)
    assert {f for f, s in again.items() if s == "skipped"} == done_before  # done before: not encoded again
    broken = f"broken:{rel}"
    assert {f for f, s in again.items() if s == "failed"} == {broken}
    assert {f for f, s in again.items() if s == "done"} == split_files - done_before - {broken}
    assert sum(any(r["name"] == "big" for r in s["results"]) for s in summaries) == n  # big's files in both tasks
    for s in summaries:  # what a dataset's line counts as encoded is what its units encoded (none by a final step)
        for r in s["results"]:
            if "units" in r:
                encoded = sum(u.get("detail", "").endswith(": encoded") for u in r["units"] if "part" in u)
                assert r["facts"].get("files_encoded", 0) == encoded, r
    failed = [r for s in summaries for r in s["results"] if r["status"] == "failed"]
    assert [r["name"] for r in failed] == ["broken"] and failed[0]["failed_parts"] == [rel], failed
    for i, source in zip(items, sources):  # every other dataset finished (by one task or the other), and right
        if i.name != "broken":
            assert (Path(i.output) / "meta/info.json").exists() and not (Path(i.output) / WORK_DIR).exists(), i.name
            _same_frames_as_source(Path(source), Path(i.output))
    statuses = {r["name"]: r["status"] for s in summaries for r in s["results"]}
    assert set(statuses.values()) <= {"done", "skipped", "pending", "failed"}


# ------------------------------------------------------------------------------------------------ Ray
def test_split_units_on_a_local_ray_cluster(big, tmp_path):
    pytest.importorskip("ray", reason='Ray is not installed (pip install "episodic[ray]")')
    out = tmp_path / "out"
    summary = run_fleet("reencode", [str(big)], str(out), executor="ray", workers=2, options=H264, split_above=0)
    (row,) = summary["results"]
    assert row["status"] == "done", summary_table(summary)
    pids = {u["pid"] for u in row["units"] if "part" in u}
    assert len(pids) >= 2 and os.getpid() not in pids  # the files of one dataset on several Ray workers
    _same_frames_as_source(big, out / "big")
