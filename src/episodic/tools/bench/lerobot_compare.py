"""`episodic bench --compare-lerobot`: LeRobot's own map-style loader on the same data, run in LeRobot's
virtualenv as a subprocess, and the ratios of the two records."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from .options import BenchConfig

DEFAULT_LEROBOT_PYTHON = Path(".bench") / "lerobot-venv" / "bin" / "python"


def lerobot_side_script() -> Path:
    """The LeRobot-side script shipped next to this module (run by path with LeRobot's python; it never
    imports episodic)."""
    return Path(__file__).with_name("lerobot_side.py")


def default_lerobot_python() -> str | None:
    """`.bench/lerobot-venv/bin/python` in the current directory (what benchmarks/setup_lerobot_venv.sh
    makes when run from there) when it exists, else None."""
    p = DEFAULT_LEROBOT_PYTHON
    return str(p.absolute()) if p.exists() else None  # absolute, not resolved: a venv's python is a symlink


def run_lerobot(cfg: BenchConfig, root: str, python: str | None, timeout_s: float = 900) -> tuple[dict | None, str]:
    """LeRobot's map-style loader on the same data (`lerobot_side.py bench-map`, run with `python`, default
    `default_lerobot_python()`); returns (record or None, message)."""
    script = lerobot_side_script()
    if python is None:
        python = default_lerobot_python()
        if python is None:
            return None, (
                f"LeRobot comparison skipped: no LeRobot python (pass --lerobot-python PATH, or run from "
                f"where {DEFAULT_LEROBOT_PYTHON} exists; see benchmarks/LEROBOT_ENV.md)"
            )
    elif not Path(python).exists():
        return None, f"LeRobot comparison skipped: --lerobot-python {python} does not exist"
    if "://" in root:
        return None, "LeRobot comparison skipped: LeRobot reads local datasets only"
    if cfg.mode != "map":
        return None, f"LeRobot comparison skipped: only map mode is compared (got {cfg.mode})"
    cmd = [
        python,
        str(script),
        "bench-map",
        "--root",
        root,
        "--workers",
        str(cfg.workers),
        "--batch-size",
        str(cfg.batch_size),
        "--batches",
        str(cfg.batches),
        "--warmup",
        str(max(cfg.warmup, 1)),
        "--seed",
        str(cfg.seed),
    ]
    if cfg.torch_threads:
        cmd += ["--torch-threads", str(cfg.torch_threads)]
    if cfg.cameras == []:
        cmd.append("--no-video")
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return None, f"LeRobot comparison failed: no result in {timeout_s:.0f} s"
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode != 0 or not lines:
        tail = (out.stderr.strip().splitlines() or ["(no output)"])[-1]
        return None, f"LeRobot comparison failed (exit {out.returncode}): {tail}"
    rec = json.loads(lines[-1])
    if "skipped" in rec:
        return None, f"LeRobot comparison skipped: {rec['skipped']}"
    note = ""
    if cfg.action_window != 16 or cfg.state_window != 2 or cfg.cameras is not None:
        note = " (LeRobot runs action 16 / state 2 / all cameras: the configurations differ)"
    return rec, f"LeRobot comparison: {python} {script} bench-map ({rec.get('batches')} batches){note}"


def ratios(result: dict, lerobot: dict) -> dict:
    r = result["results"]
    out = {}
    if lerobot.get("frames_per_s"):
        out["frames_per_s"] = r["frames_per_s"] / lerobot["frames_per_s"]
    if lerobot.get("time_to_first_batch_s"):
        out["time_to_first_batch_s"] = r["time_to_first_batch_s"] / lerobot["time_to_first_batch_s"]
    if lerobot.get("peak_rss_tree_mb"):
        out["peak_rss_mb"] = r["peak_rss_mb"] / lerobot["peak_rss_tree_mb"]
    return out
