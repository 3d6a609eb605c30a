"""`episodic bench`, `episodic bench-summarize` and `episodic show` on real (small) datasets."""

from __future__ import annotations

import ast
import csv
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from episodic.cli import main
from episodic.tools.bench import BenchConfig, default_lerobot_python, lerobot_side_script, run_bench

from support import assert_picture as _assert_not_blank, read_png as _png


def test_bench_cli_writes_json_and_csv(tiny_root, tmp_path, capsys):
    js, cs = tmp_path / "r.json", tmp_path / "r.csv"
    rc = main(
        [
            "bench",
            str(tiny_root),
            "--batches",
            "8",
            "--warmup",
            "2",
            "--batch-size",
            "8",
            "--json",
            str(js),
            "--csv",
            str(cs),
            "-q",
        ]
    )
    assert rc == 0
    out = capsys.readouterr().out
    assert "frames/s" in out and "p95" in out
    rec = json.loads(js.read_text())
    r = rec["results"]
    assert r["frames_per_s"] > 0 and np.isfinite(r["frames_per_s"])
    assert r["samples"] == 64 and r["batches"] == 8
    assert r["time_to_first_batch_s"] > 0
    assert 0 < r["latency_ms"]["p50"] <= r["latency_ms"]["p95"] <= r["latency_ms"]["p99"]
    assert r["decode_s"] > 0 and r["fetch_s"] >= r["decode_s"]
    assert r["decoder_cache"]["hits"] + r["decoder_cache"]["misses"] > 0
    assert r["peak_rss_mb"] > 10
    env = rec["environment"]
    for k in ("episodic", "torch", "av", "numpy", "python", "cpu_count", "cpu_model", "hostname", "date"):
        assert env[k], k
    rows = list(csv.DictReader(cs.open()))
    assert len(rows) == 1 and float(rows[0]["results.frames_per_s"]) == pytest.approx(r["frames_per_s"])


def test_bench_workers_and_tabular_only(tiny_root, tmp_path):
    js = tmp_path / "w.json"
    assert (
        main(
            [
                "bench",
                str(tiny_root),
                "--workers",
                "2",
                "--batches",
                "6",
                "--warmup",
                "2",
                "--batch-size",
                "8",
                "--json",
                str(js),
                "-q",
            ]
        )
        == 0
    )
    r = json.loads(js.read_text())["results"]
    assert r["frames_per_s"] > 0
    # counters come back from the workers
    assert r["decode_s"] > 0 and r["decoder_cache"]["processes"] == 2
    assert r["decoder_cache"]["hits"] + r["decoder_cache"]["misses"] > 0
    assert "prefetched" in r["counters_scope"]
    rec = run_bench(BenchConfig(dataset=str(tiny_root), cameras=[], batches=4, warmup=1, batch_size=8, progress=False))
    assert rec["dataset"]["cameras"] == [] and rec["results"]["frames_per_s"] > 0
    assert rec["results"]["decoder_cache"]["hit_rate"] is None


def test_bench_counters_cover_the_measured_batches(tiny_root):
    """Without workers the counter deltas (ds.stats() at the end of warm-up and after the last measured batch)
    are those of exactly the measured batches, in both modes."""
    for mode, built in (("map", "items_built"), ("stream", "frames_emitted")):
        rec = run_bench(
            BenchConfig(dataset=str(tiny_root), mode=mode, batches=5, warmup=2, batch_size=8, progress=False)
        )
        r = rec["results"]
        assert r["samples"] == 40 and r["counters"][built] == 40, (mode, r["counters"])
        assert r["decode_s"] == r["counters"]["decode_seconds"] > 0
        assert r["decoder_cache"]["hits"] == r["counters"]["decoder_hits"]
        assert r["decoder_cache"]["hits"] + r["decoder_cache"]["misses"] > 0
        assert r["decoder_cache"]["processes"] == 1 and "prefetched" not in r["counters_scope"]
        if mode == "map":
            assert r["fetch_s"] == r["counters"]["item_seconds"] >= r["decode_s"]


def test_bench_counts_exactly_the_measured_batches(tiny_root):
    """frames/s is the samples of exactly `batches` batches after the warm-up over the seconds they took (no
    timing comparison here: speed is the benchmarks' business, this checks the arithmetic and the window)."""
    cfg = BenchConfig(dataset=str(tiny_root), batch_size=16, batches=25, warmup=5, progress=False)
    r = run_bench(cfg)["results"]
    assert r["batches"] == cfg.batches and r["samples"] == cfg.batches * cfg.batch_size
    assert r["frames_per_s"] == pytest.approx(r["samples"] / r["elapsed_s"])
    assert 0 < r["elapsed_s"] and r["time_to_first_batch_s"] > 0


def test_bench_corrupt_videos_fails_with_message(tiny_root, tmp_path, capsys):
    bad = tmp_path / "bad"
    shutil.copytree(tiny_root, bad)
    mp4s = sorted(bad.rglob("*.mp4"))
    assert mp4s
    rng = np.random.default_rng(0)
    for p in mp4s:
        p.write_bytes(rng.integers(0, 256, 4000, dtype=np.uint8).tobytes())
    js, cs = tmp_path / "bad.json", tmp_path / "bad.csv"
    for workers in ("0", "2"):
        rc = main(
            [
                "bench",
                str(bad),
                "--workers",
                workers,
                "--batches",
                "4",
                "--batch-size",
                "8",
                "--json",
                str(js),
                "--csv",
                str(cs),
                "-q",
            ]
        )
        err = capsys.readouterr().err
        assert rc != 0
        assert "error" in err and "cannot open video" in err and ".mp4" in err
        assert not js.exists() and not cs.exists()


def test_bench_no_frame_measured(tmp_path, capsys):
    rc = main(["bench", str(tmp_path / "missing"), "--batches", "2", "-q"])
    assert rc != 0 and "error" in capsys.readouterr().err


def test_bench_stream_mode_or_clear_error(tiny_root, tmp_path, capsys):
    try:
        import episodic.datasets.streaming  # noqa: F401
    except ImportError:
        rc = main(["bench", str(tiny_root), "--mode", "stream", "--batches", "2", "-q"])
        assert rc != 0 and "streaming mode not available" in capsys.readouterr().err
    else:
        js = tmp_path / "s.json"
        assert (
            main(
                [
                    "bench",
                    str(tiny_root),
                    "--mode",
                    "stream",
                    "--batches",
                    "3",
                    "--warmup",
                    "1",
                    "--batch-size",
                    "8",
                    "--json",
                    str(js),
                    "-q",
                ]
            )
            == 0
        )
        assert json.loads(js.read_text())["results"]["frames_per_s"] > 0


def test_summarize_writes_chart(tiny_root, tmp_path, capsys):
    files = []
    for workers, bs in (("0", "8"), ("0", "16")):
        js = tmp_path / f"r{workers}-{bs}.json"
        assert (
            main(
                [
                    "bench",
                    str(tiny_root),
                    "--workers",
                    workers,
                    "--batch-size",
                    bs,
                    "--batches",
                    "4",
                    "--warmup",
                    "1",
                    "--json",
                    str(js),
                    "-q",
                ]
            )
            == 0
        )
        files.append(str(js))
    png = tmp_path / "sum.png"
    capsys.readouterr()
    assert main(["bench-summarize", *files, "-o", str(png)]) == 0
    out = capsys.readouterr().out
    assert "map w0 b8" in out and "map w0 b16" in out and "frames/s" in out
    img = _png(png)
    assert img.shape[0] >= 250 and img.shape[1] == 1200
    _assert_not_blank(img)


# a result file as bench wrote it before the dataset counters (no results.counters, per-batch deltas)
OLD_RESULT = {
    "schema": "episodic.bench/1",
    "label": "map w2 b16 a16 s2 cams=all",
    "config": {
        "dataset": "/data/ds",
        "mode": "map",
        "workers": 2,
        "batch_size": 16,
        "action_window": 16,
        "state_window": 2,
        "cameras": ["observation.images.top"],
        "batches": 100,
        "warmup": 5,
        "seed": 0,
        "torch_threads": None,
        "progress": False,
    },
    "dataset": {"root": "/data/ds", "frames": 1846, "episodes": 20, "fps": 30, "cameras": ["observation.images.top"]},
    "results": {
        "frames_per_s": 2100.5,
        "samples": 1600,
        "batches": 100,
        "elapsed_s": 0.76,
        "time_to_first_batch_s": 0.9,
        "latency_ms": {"p50": 6.1, "p95": 14.0, "p99": 20.2, "mean": 7.6, "max": 25.0},
        "fetch_s": 1.2,
        "decode_s": 0.9,
        "decoder_cache": {"hits": 190, "misses": 10, "evictions": 0, "processes": 2, "hit_rate": 0.95},
        "counters_scope": "measured batches",
        "peak_rss_mb": 900.0,
    },
    "environment": {"hostname": "old-host"},
}


def test_summarize_imports_no_torch(tiny_root, tmp_path):
    """bench-summarize only reads result files: in a fresh interpreter it never imports torch (nor the
    datasets), and result files written before the dataset counters still summarize."""
    new, old, png = tmp_path / "new.json", tmp_path / "old.json", tmp_path / "sum.png"
    assert (
        main(
            ["bench", str(tiny_root), "--batches", "2", "--warmup", "1", "--batch-size", "8", "--json", str(new), "-q"]
        )
        == 0
    )
    old.write_text(json.dumps(OLD_RESULT))
    code = (
        "import sys\n"
        "from episodic.cli import main\n"
        "assert 'torch' not in sys.modules, 'episodic.cli imports torch'\n"
        "rc = main(['bench-summarize', *sys.argv[1:]])\n"
        "assert rc == 0, rc\n"
        "loaded = [m for m in ('torch', 'episodic.datasets') if m in sys.modules]\n"
        "assert not loaded, loaded\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(new), str(old), "-o", str(png)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert "map w0 b8" in out.stdout and "map w2 b16" in out.stdout and "95%" in out.stdout
    _assert_not_blank(_png(png))


def test_summarize_rejects_non_results(tmp_path, capsys):
    p = tmp_path / "x.json"
    p.write_text("{}")
    assert main(["bench-summarize", str(p), "-o", str(tmp_path / "x.png")]) != 0
    assert "not an episodic bench result" in capsys.readouterr().err


def test_lerobot_side_script_is_packaged_and_standalone(tmp_path):
    """The LeRobot-side script ships inside the package, imports nothing of episodic (it runs in LeRobot's
    venv), is imported by no episodic module, and runs by path (its `compare` command needs numpy only)."""
    import episodic

    script = lerobot_side_script()
    pkg = Path(episodic.__file__).parent
    assert script.is_file() and script.parent == pkg / "tools" / "bench"
    tree = ast.parse(script.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            assert node.level == 0 and not (node.module or "").startswith("episodic"), ast.unparse(node)
        elif isinstance(node, ast.Import):
            assert not any(a.name.startswith("episodic") for a in node.names), ast.unparse(node)
    for src in pkg.rglob("*.py"):
        if src != script:
            assert "import lerobot_side" not in src.read_text() and "lerobot_side import" not in src.read_text(), src
    a, b = tmp_path / "a.npz", tmp_path / "b.npz"
    np.savez(a, **{"0/action": np.arange(4.0), "0/observation.images.top": np.zeros((2, 2), np.uint8)})
    np.savez(b, **{"0/action": np.arange(4.0), "0/observation.images.top": np.ones((2, 2), np.uint8)})
    out = subprocess.run(
        [sys.executable, "-X", "importtime", str(script), "compare", str(a), str(b)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.splitlines()[-1]) == {"mismatches": 0, "max_frame_diff": 1, "key_order_same": True}
    imported = [ln.rsplit("|", 1)[-1].strip() for ln in out.stderr.splitlines() if ln.startswith("import time:")]
    assert imported and not [m for m in imported if m.split(".")[0] == "episodic"]


def test_default_lerobot_python_is_relative_to_cwd(tmp_path, monkeypatch):
    """`.bench/lerobot-venv/bin/python` in the current directory, and nowhere else (no walking up)."""
    py = tmp_path / ".bench" / "lerobot-venv" / "bin" / "python"
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    assert default_lerobot_python() is None
    py.parent.mkdir(parents=True)
    py.write_text("")
    assert default_lerobot_python() is None
    monkeypatch.chdir(tmp_path)
    assert default_lerobot_python() == str(py)


def test_compare_lerobot_runs_the_packaged_script(tiny_root, tmp_path, capsys):
    """--compare-lerobot runs lerobot_side.py by path with --lerobot-python (here a stand-in that echoes its
    arguments in a LeRobot-like record) and puts its record and the ratios in the result."""
    fake = tmp_path / "python"
    fake.write_text(
        '#!/bin/sh\nprintf \'{"loader": "lerobot-map", "frames_per_s": 100.0, '
        '"time_to_first_batch_s": 0.5, "peak_rss_tree_mb": 500.0, "batches": 4, '
        '"argv": "%s"}\\n\' "$*"\n'
    )
    fake.chmod(0o755)
    js = tmp_path / "r.json"
    assert (
        main(
            [
                "bench",
                str(tiny_root),
                "--batches",
                "4",
                "--warmup",
                "1",
                "--batch-size",
                "8",
                "--compare-lerobot",
                "--lerobot-python",
                str(fake),
                "--json",
                str(js),
                "-q",
            ]
        )
        == 0
    )
    out = capsys.readouterr()
    assert "lerobot" in out.out and "LeRobot comparison:" in out.err
    rec = json.loads(js.read_text())
    argv = rec["lerobot"]["argv"].split()
    assert argv[:4] == [str(lerobot_side_script()), "bench-map", "--root", str(tiny_root)]
    assert rec["ratios"]["frames_per_s"] == pytest.approx(rec["results"]["frames_per_s"] / 100.0)
    capsys.readouterr()
    assert (
        main(
            [
                "bench",
                str(tiny_root),
                "--batches",
                "2",
                "--batch-size",
                "8",
                "--compare-lerobot",
                "--lerobot-python",
                str(tmp_path / "missing"),
                "-q",
            ]
        )
        == 0
    )
    assert "LeRobot comparison skipped" in capsys.readouterr().err
