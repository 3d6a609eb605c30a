"""The bar of issue 24 at its scale (slow: `pytest -m slow`): a 400-entry mixture spec (400 datasets written by
episodic's writer, v3.0 and v2.1, and one broken) converted on a local Ray cluster (`ray.init` with 2 CPUs,
started by the run; killed midway and run again), and as `--shard K/N` SLURM array tasks run as separate
processes, killed midway and run again: every dataset done once, none corrupted, the broken one named in the
summary, the rest done. Smaller versions of each run in the default suite (test_fleet_run.py)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from episodic.tools.fleet.relayout import DONE_RECORD
from episodic.tools.fleet.worklist import read_worklist
from episodic.tools.validate import validate

from fleet_checks import items_equal
from test_fleet_run import BROKEN_ERROR, run_shards_killed_and_again

pytestmark = pytest.mark.slow
ENTRIES = 400


@pytest.fixture(scope="module")
def sources400(tmp_path_factory) -> list[str]:
    """400 datasets (40 written by the writer, each copied 10 times under other names) and a broken one."""
    from episodic.testing.synthetic import write_synthetic_datasets

    root = tmp_path_factory.mktemp("fleet400")
    written = write_synthetic_datasets(root / "written", 40, seed=4)
    out = []
    for k in range(ENTRIES):
        d = root / f"ds{k:03d}"
        shutil.copytree(written[k % 40].path, d)
        out.append(str(d))
    broken = root / "broken"
    shutil.copytree(written[0].path, broken)
    shutil.rmtree(next((broken / "videos").iterdir()))
    return out + [str(broken)]


def _descendants(pid: int) -> list[int]:
    """Every process below `pid` (from /proc): Ray's raylet, GCS and workers run in sessions of their own, so
    killing the driver's process group leaves them finishing their tasks."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _spec(path: Path, sources: list[str]) -> Path:
    path.write_text(json.dumps({"entries": [{"source": s, "name": Path(s).name} for s in sources]}))
    return path


def test_400_as_slurm_array_tasks_killed_midway_and_run_again(sources400, tmp_path):
    t0 = time.perf_counter()
    got = run_shards_killed_and_again(sources400, tmp_path, n=4, kill_after=100)
    print(
        f"\n400 entries as 4 array tasks, killed after {len(got['done_before'])} done, run again: "
        f"{time.perf_counter() - t0:.1f} s"
    )
    for item, source in list(zip(got["items"], sources400))[:40:13]:
        items_equal(source, item.output, windows=False)


def test_400_on_a_local_ray_cluster_killed_midway_and_run_again(sources400, tmp_path):
    pytest.importorskip("ray", reason='Ray is not installed (pip install "episodic[ray]")')
    spec = _spec(tmp_path / "spec.json", sources400)
    out = tmp_path / "out"
    items = read_worklist(spec, str(out), lambda r, name: os.path.join(r, name))
    cmd = [
        sys.executable,
        "-m",
        "episodic.cli",
        "convert",
        str(spec),
        str(out),
        "--executor",
        "ray",
        "--workers",
        "2",
        "-q",
        "--summary",
    ]
    t0 = time.perf_counter()
    first = subprocess.Popen(
        cmd + [str(tmp_path / "first.json")],
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 900
    while sum((Path(i.output) / DONE_RECORD).exists() for i in items) < 100:
        assert time.monotonic() < deadline and first.poll() is None
        time.sleep(0.1)
    for pid in [first.pid, *_descendants(first.pid)]:  # the driver and the Ray it started (its own sessions)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    first.wait()
    killed_at = time.perf_counter() - t0
    done_before = {i.name for i in items if (Path(i.output) / DONE_RECORD).exists()}
    assert 100 <= len(done_before) < ENTRIES
    proc = subprocess.run(cmd + [str(tmp_path / "again.json")], capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 1, proc.stderr[-3000:]
    summary = json.loads((tmp_path / "again.json").read_text())
    print(
        f"\n400 entries on a local Ray (2 CPUs): killed after {len(done_before)} done at {killed_at:.1f} s, run "
        f"again in {summary['seconds']:.1f} s ({summary['done']} done, {summary['skipped']} skipped)"
    )
    done = {r["name"] for r in summary["results"] if r["status"] == "done"}
    skipped = {r["name"] for r in summary["results"] if r["status"] == "skipped"}
    failed = [r for r in summary["results"] if r["status"] == "failed"]
    assert skipped == done_before and not done & done_before
    assert done | skipped | {"broken"} == {i.name for i in items}
    assert [r["name"] for r in failed] == ["broken"] and BROKEN_ERROR in failed[0]["error"]
    assert summary["executor"] == "ray" and summary["datasets"] == ENTRIES + 1
    for i in items:
        if i.name != "broken":
            assert validate(i.output, progress=False, decode=False).ok, i.name
