"""The commands that draw PNGs (`show`, `mixture shares`, `bench-summarize`) without matplotlib, as after
`pip install episodic` (the README's install): the console script runs in a fresh interpreter whose import
system refuses matplotlib (a meta-path finder installed by sitecustomize), and must print its text, write its
JSON, and say in one line what to install -- no traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from episodic.cli import main
from episodic.mixture import build_sampler, preflight
from episodic.testing.synthetic import mixture_spec

INSTALL = 'pip install "episodic[plot]"'

_BLOCKER = '''
import sys


class _NoMatplotlib:
    """matplotlib is not installed, as far as this interpreter can tell."""

    def find_spec(self, name, path=None, target=None):
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, _NoMatplotlib())
'''


@pytest.fixture(scope="module")
def no_matplotlib(tmp_path_factory):
    """run(args, cwd) -> CompletedProcess of the `episodic` console script, matplotlib unimportable."""
    site = tmp_path_factory.mktemp("no_matplotlib")
    (site / "sitecustomize.py").write_text(_BLOCKER)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        "EPISODIC_PROGRESS": "0",
    }
    probe = subprocess.run(
        [sys.executable, "-c", "import matplotlib"], env=env, capture_output=True, text=True, timeout=60
    )
    assert probe.returncode != 0 and "ModuleNotFoundError: No module named 'matplotlib'" in probe.stderr
    script = Path(sys.executable).with_name("episodic")
    assert script.exists(), f"no console script at {script}: install episodic into this environment (pip install -e .)"

    def run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
        return subprocess.run([str(script), *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=180)

    return run


def _one_line_note(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert "Traceback" not in stderr and len(lines) == 1, stderr
    assert INSTALL in lines[0] and "matplotlib" in lines[0], lines[0]
    return lines[0]


def _write_spec(synthetic, path: Path) -> Path:
    path.write_text(json.dumps(mixture_spec(synthetic)))
    return path


def _first_draws(spec: Path, samples: int, seed: int) -> np.ndarray:
    """Items per entry among the first `samples` positions of epoch 0, straight from the sampler."""
    report = preflight(str(spec))
    sampler, used = build_sampler(report, seed=seed)
    assert samples <= len(sampler)
    entry, _ = sampler.draws_at(np.arange(samples), 0)
    return np.bincount(entry, minlength=len(used))


def test_mixture_shares_writes_table_and_json_without_matplotlib(synthetic, tmp_path, no_matplotlib):
    spec, out = _write_spec(synthetic, tmp_path / "mix.json"), tmp_path / "shares.json"
    r = no_matplotlib(
        ["mixture", "shares", str(spec), "--samples", "300", "--seed", "2", "--json", str(out), "-q"], tmp_path
    )
    assert r.returncode == 0, r.stderr
    assert r.stderr.splitlines()[0].startswith("episodic mixture shares: ")
    _one_line_note(r.stderr)
    assert "largest |realised - target|" in r.stdout and all(d.robot_type in r.stdout for d in synthetic)
    table = json.loads(out.read_text())
    assert table["items"] == 300
    assert [e["items"] for e in table["entries"]] == _first_draws(spec, 300, seed=2).tolist()
    assert not (tmp_path / "mixture_shares.png").exists() and "chart:" not in r.stdout


def test_mixture_shares_asked_for_png_exits_1_after_writing_json(synthetic, tmp_path, no_matplotlib):
    spec, out, png = _write_spec(synthetic, tmp_path / "mix.json"), tmp_path / "shares.json", tmp_path / "s.png"
    r = no_matplotlib(
        ["mixture", "shares", str(spec), "--samples", "500", "-o", str(png), "--json", str(out), "-q"], tmp_path
    )
    assert r.returncode == 1, r.stderr
    _one_line_note(r.stderr)
    assert json.loads(out.read_text())["items"] == 500 and not png.exists()


def test_show_prints_the_episode_without_matplotlib(small_root, tmp_path, no_matplotlib):
    episode = 3
    r = no_matplotlib(["show", str(small_root), "--episode", str(episode), "-q"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stderr.startswith("episodic show: ")
    _one_line_note(r.stderr)
    assert not (tmp_path / "episode.png").exists() and "chart:" not in r.stdout
    # reference: the episode's rows and task read with pyarrow
    data = pq.read_table(small_root / "data")
    rows = data.filter(pc.equal(data["episode_index"], episode))
    tasks = pq.read_table(small_root / "meta" / "tasks.parquet").to_pylist()
    task = next(t["__index_level_0__"] for t in tasks if t["task_index"] == rows["task_index"][0].as_py())
    lines = r.stdout.splitlines()
    assert lines[0].startswith(f"episode {episode} of {small_root}: {rows.num_rows} frames at 30 fps")
    assert f"task: {task}" in lines
    for key in ("observation.state", "action"):
        v = np.array(rows[key].to_pylist(), dtype=np.float32)
        assert f"{key}: {v.shape[1]} values per frame, from {float(v.min()):.4g} to {float(v.max()):.4g}" in lines


def test_show_asked_for_png_exits_1_without_matplotlib(small_root, tmp_path, no_matplotlib):
    r = no_matplotlib(["show", str(small_root), "--episode", "0", "-o", str(tmp_path / "ep.png"), "-q"], tmp_path)
    assert r.returncode == 1 and r.stdout.startswith("episode 0 of ")
    _one_line_note(r.stderr)
    assert not (tmp_path / "ep.png").exists()


def test_bench_summarize_prints_the_table_without_matplotlib(small_root, tmp_path, no_matplotlib):
    res = tmp_path / "r.json"
    assert (
        main(
            [
                "bench",
                str(small_root),
                "--batches",
                "2",
                "--warmup",
                "1",
                "--batch-size",
                "8",
                "--cameras",
                "none",
                "--json",
                str(res),
                "-q",
            ]
        )
        == 0
    )
    r = no_matplotlib(["bench-summarize", str(res)], tmp_path)
    assert r.returncode == 0, r.stderr
    _one_line_note(r.stderr)
    assert json.loads(res.read_text())["label"] in r.stdout and "frames/s" in r.stdout
    assert not (tmp_path / "bench_summary.png").exists()


def test_with_matplotlib_the_default_png_is_written(synthetic, tmp_path, monkeypatch, capsys):
    pytest.importorskip("matplotlib")
    monkeypatch.chdir(tmp_path)
    spec = _write_spec(synthetic, tmp_path / "mix.json")
    assert main(["mixture", "shares", str(spec), "--samples", "500", "-q"]) == 0
    assert (tmp_path / "mixture_shares.png").stat().st_size > 0
    assert "chart: mixture_shares.png" in capsys.readouterr().out
