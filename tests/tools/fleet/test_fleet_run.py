"""Every tool over many datasets (tools/fleet/driver.py, executors.py, worklist.py, tasks.py): the list (a text
file or a mixture spec), SLURM array shares (`--shard K/N`: a pure function of the list, run as separate
processes, killed midway and run again), the local pool (a dying worker fails only its dataset), Ray (a local
cluster), the summary, and the tasks convert, repack, validate and stats."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from episodic.tools.fleet.driver import run_fleet
from episodic.tools.fleet.executors import RAY_MISSING, ExecutorUnavailable
from episodic.tools.fleet.relayout import DONE_RECORD
from episodic.tools.fleet.summary import summary_table
from episodic.tools.fleet.worklist import WorkItem, parse_shard, read_worklist, shard
from episodic.tools.stats_command import dataset_stats, to_json
from episodic.tools.validate import validate

from fleet_checks import items_equal, make_list

BROKEN_ERROR = "observation.images"  # the broken dataset's error names its missing camera's file


def _names(summary: dict, status: str) -> set[str]:
    return {r["name"] for r in summary["results"] if r["status"] == status}


# ------------------------------------------------------------------------------------------------ the list
def test_the_list_names_every_dataset_once(tmp_path):
    listing = make_list(
        tmp_path / "list.txt",
        ["/data/a/ds", "/data/b/ds/", "/data/a/ds", "lerobot/pusht", "s3://bucket/x/y", "/data/../evil", "/data/c/ds"],
    )
    items = read_worklist(listing, "/out", lambda root, name: f"{root}/{name}")
    assert [(i.name, i.source) for i in items] == [
        ("ds", "/data/a/ds"),
        ("ds-2", "/data/b/ds/"),
        ("lerobot/pusht", "lerobot/pusht"),
        ("y", "s3://bucket/x/y"),
        ("evil", "/data/../evil"),
        ("ds-3", "/data/c/ds"),
    ]
    spec = tmp_path / "mix.json"
    spec.write_text(
        json.dumps(
            {
                "entries": [
                    {"source": "/data/a/ds", "name": "first/../one"},
                    {
                        "source": "lerobot/pusht",
                        "revision": "v2",
                        "root": "/hub/pusht",
                        "episodes": [0, 1],
                        "weight": 2.0,
                    },
                ]
            }
        )
    )
    items = read_worklist(spec, "/out", lambda root, name: f"{root}/{name}")
    assert items == [
        WorkItem("first/one", "/data/a/ds", "/out/first/one"),
        WorkItem("lerobot/pusht", "lerobot/pusht", "/out/lerobot/pusht", "v2", "/hub/pusht"),
    ]


def test_shards_split_the_list_without_overlap_whatever_runs_when():
    items = [WorkItem(f"d{i}", f"/s/{i}", f"/o/{i}") for i in range(23)]
    for n in range(1, 8):
        shares = [shard(items, k, n) for k in range(n)]
        assert sorted(i.name for s in shares for i in s) == sorted(i.name for i in items)  # all, each once
        assert max(map(len, shares)) - min(map(len, shares)) <= 1
        assert shares == [shard(list(items), k, n) for k in range(n)]  # a pure function of the list
    assert parse_shard("2/5") == (2, 5) and parse_shard(None) is None
    for bad in ("5/5", "-1/3", "a/b", "3", "1/0"):
        with pytest.raises(ValueError, match="--shard takes K/N"):
            parse_shard(bad)


def test_the_shard_of_a_slurm_array_task(monkeypatch):
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "7")
    monkeypatch.setenv("SLURM_ARRAY_TASK_MIN", "5")
    monkeypatch.setenv("SLURM_ARRAY_TASK_COUNT", "4")
    assert parse_shard("slurm") == (2, 4)
    monkeypatch.delenv("SLURM_ARRAY_TASK_ID")
    with pytest.raises(ValueError, match="not in a SLURM array job"):
        parse_shard("slurm")


# ------------------------------------------------------------------------------------------------ local runs
def test_convert_many_in_a_pool_then_again(fleet_sources, tmp_path):
    listing = make_list(tmp_path / "list.txt", fleet_sources)
    out = tmp_path / "out"
    summary = run_fleet("convert", listing, str(out), workers=2)
    names = [i.name for i in read_worklist(listing, str(out), lambda r, n: n)]
    assert summary["done"] == len(names) - 1 and summary["failed"] == 1 and summary["skipped"] == 0
    (failed,) = [r for r in summary["results"] if r["status"] == "failed"]
    assert failed["name"] == "broken" and BROKEN_ERROR in failed["error"]
    assert "broken" in summary_table(summary) and "1 failed" in summary_table(summary)
    assert json.loads(Path(summary["summary_path"]).read_text())["results"] == summary["results"]
    for name, source in zip(names[:3], fleet_sources):  # v3.0 and v2.1 (the third) sources
        items_equal(source, out / name, windows=False)
    again = run_fleet("convert", listing, str(out), workers=2)
    assert again["skipped"] == len(names) - 1 and again["failed"] == 1 and again["done"] == 0


def test_a_dying_worker_fails_only_its_dataset(tmp_path):
    items = ["/x/a", "/x/b", "/x/crash", "/x/c", "/x/d"]
    summary = run_fleet("fleet_checks:CRASHING", items, str(tmp_path / "out"), workers=2)
    assert _names(summary, "done") == {"a", "b", "c", "d"}
    (failed,) = [r for r in summary["results"] if r["status"] == "failed"]
    assert failed["name"] == "crash" and "died, twice" in failed["error"]


def test_validate_and_stats_over_many(fleet_sources, tmp_path):
    listing = make_list(tmp_path / "list.txt", fleet_sources[:3] + fleet_sources[-1:])
    out = tmp_path / "out"
    summary = run_fleet("validate", listing, str(out), workers=2)
    assert summary["done"] == 3 and _names(summary, "failed") == {"broken"}
    report = json.loads((out / "broken.validate.json").read_text())
    assert not report["ok"] and report["result"]["problems"] == validate(fleet_sources[-1], progress=False).problems
    assert run_fleet("validate", listing, str(out), workers=2)["skipped"] == 3  # done and verified
    stats = run_fleet("stats", listing, str(out), workers=1, options={"keys": ["action"]})
    assert stats["done"] == 4  # the broken dataset's data files are whole: its statistics are
    name = Path(fleet_sources[0]).name
    got = json.loads((out / f"{name}.stats.json").read_text())["result"]
    want = to_json(dataset_stats(fleet_sources[0], keys=["action"], workers=1, cache=False))
    assert got["stats"] == want["stats"] and got["frames"] == want["frames"]
    with pytest.raises(ValueError, match="unknown stats option"):
        run_fleet("stats", listing, str(out), options={"workers": 3})


# ------------------------------------------------------------------------------------------------ SLURM arrays
def _shard_cmd(listing: Path, out: Path, k: int, n: int, summary: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "episodic.cli",
        "convert",
        str(listing),
        str(out),
        "--shard",
        f"{k}/{n}",
        "--workers",
        "1",
        "-q",
        "--summary",
        str(summary),
    ]


def run_shards_killed_and_again(sources: list[str], tmp: Path, n: int, kill_after: int) -> dict:
    """`n` array tasks as separate processes, all killed (SIGKILL, whole process groups) once `kill_after`
    datasets are done, then `n` tasks again to the end. Checks: each task worked on its share of the list; every
    dataset done exactly once over both rounds; the broken one failed, named; the summaries right."""
    listing = make_list(tmp / "list.txt", sources)
    out = tmp / "out"
    items = read_worklist(listing, str(out), lambda r, name: os.path.join(r, name))
    procs = [
        subprocess.Popen(
            _shard_cmd(listing, out, k, n, tmp / f"first-{k}.json"),
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        for k in range(n)
    ]
    deadline = time.monotonic() + 600
    while sum((Path(i.output) / DONE_RECORD).exists() for i in items) < kill_after:
        assert time.monotonic() < deadline and any(p.poll() is None for p in procs)
        time.sleep(0.05)
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()
    done_before = {i.name for i in items if (Path(i.output) / DONE_RECORD).exists()}
    assert kill_after <= len(done_before) < len(items) - 1  # killed midway
    summaries = []
    for k in range(n):
        proc = subprocess.run(
            _shard_cmd(listing, out, k, n, tmp / f"again-{k}.json"), capture_output=True, text=True, timeout=600
        )
        assert proc.returncode == (1 if any(i.name == "broken" for i in shard(items, k, n)) else 0), proc.stderr
        summaries.append(json.loads((tmp / f"again-{k}.json").read_text()))
    for k, s in enumerate(summaries):
        assert [r["name"] for r in s["results"]] == sorted(i.name for i in shard(items, k, n))
        assert s["shard"] == f"{k}/{n}" and s["listed"] == len(items)
    done = [name for s in summaries for name in _names(s, "done")]
    skipped = {name for s in summaries for name in _names(s, "skipped")}
    failed = [r for s in summaries for r in s["results"] if r["status"] == "failed"]
    assert len(done) == len(set(done)) and not set(done) & done_before  # done once: the second round skips
    assert skipped == done_before and set(done) | skipped | {"broken"} == {i.name for i in items}
    assert [r["name"] for r in failed] == ["broken"] and BROKEN_ERROR in failed[0]["error"]
    for i in items:  # none corrupted: every result a finished dataset that checks out
        if i.name != "broken":
            assert not (Path(i.output) / ".episodic-relayout").exists()
            assert validate(i.output, progress=False, decode=False).ok, i.name
    return {"items": items, "out": out, "done_before": done_before}


def test_shards_killed_midway_and_run_again(fleet_sources, tmp_path):
    got = run_shards_killed_and_again(fleet_sources, tmp_path, n=3, kill_after=6)
    for i, source in list(zip(got["items"], fleet_sources))[:2]:
        items_equal(source, i.output, windows=False)


# ------------------------------------------------------------------------------------------------ Ray
def test_ray_missing_says_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` fails
    with pytest.raises(ExecutorUnavailable, match=r'pip install "episodic\[ray\]"'):
        run_fleet("validate", ["/x/a"], str(tmp_path), executor="ray")
    assert RAY_MISSING.count("\n") == 0


def test_many_datasets_on_a_local_ray_cluster(fleet_sources, tmp_path):
    pytest.importorskip("ray", reason='Ray is not installed (pip install "episodic[ray]")')
    listing = make_list(tmp_path / "list.txt", fleet_sources)
    out = tmp_path / "out"
    summary = run_fleet("convert", listing, str(out), executor="ray", workers=2)
    assert summary["done"] == len(fleet_sources) - 1 and _names(summary, "failed") == {"broken"}
    assert len({r["pid"] for r in summary["results"]}) >= 2  # Ray's worker processes, not this one
    assert os.getpid() not in {r["pid"] for r in summary["results"]}
    local = run_fleet("convert", listing, str(out), workers=2)  # the same results, found done
    assert local["skipped"] == len(fleet_sources) - 1
    items_equal(fleet_sources[2], out / Path(fleet_sources[2]).name, windows=False)


def test_reencode_over_many(fleet_sources, tmp_path):
    """`reencode` (tools/reencode.py) plugged in as a fleet task: H.264 copies, skipped when run again."""
    listing = make_list(tmp_path / "list.txt", fleet_sources[:3] + fleet_sources[-1:])
    out = tmp_path / "out"
    summary = run_fleet("reencode", listing, str(out), workers=2, options={"vcodec": "h264"})
    assert summary["done"] == 3 and _names(summary, "failed") == {"broken"}, summary_table(summary)
    for source in fleet_sources[:3]:
        info = json.loads((out / Path(source).name / "meta/info.json").read_text())
        cams = [f for f in info["features"].values() if f["dtype"] == "video"]
        assert cams and all(f["info"]["video.codec"] == "h264" for f in cams)
    assert run_fleet("reencode", listing, str(out), workers=2, options={"vcodec": "h264"})["skipped"] == 3
    with pytest.raises(ValueError, match="vcodec must be one of"):
        run_fleet("reencode", listing, str(out), options={"vcodec": "av1"})
