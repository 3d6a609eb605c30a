"""`episodic bench` and `episodic bench-summarize`.

- `config`: what a run measures (`BenchConfig`), `BenchError`, the demo dataset, command-line helpers.
- `runner`: the run loop (`run_bench`, `make_loader`); imports torch and the datasets only when a run starts.
- `report`: the table of one run, JSON/CSV output, and the summary of result files; no torch, no numpy.
- `lerobot_compare`: LeRobot's loader on the same data, in LeRobot's virtualenv, and the ratios.
- `lerobot_side.py`: the script that runs there: standalone, run by path, never imported by episodic.

Importing this package imports no torch, so `episodic bench-summarize` does not either.
"""

from .lerobot_compare import default_lerobot_python, lerobot_side_script, ratios, run_lerobot
from .options import (
    DEMO_EPISODES,
    SCHEMA,
    BenchConfig,
    BenchError,
    bench_delta_timestamps,
    demo_root,
    parse_cameras,
    resolve_cameras,
)
from .runner import counter_deltas, environment, make_loader, run_bench
from .tables import concise_error, flatten, format_table, load_results, summary_table, write_csv, write_json

__all__ = [
    "DEMO_EPISODES",
    "SCHEMA",
    "BenchConfig",
    "BenchError",
    "bench_delta_timestamps",
    "concise_error",
    "counter_deltas",
    "default_lerobot_python",
    "demo_root",
    "environment",
    "flatten",
    "format_table",
    "lerobot_side_script",
    "load_results",
    "make_loader",
    "parse_cameras",
    "ratios",
    "resolve_cameras",
    "run_bench",
    "run_lerobot",
    "summary_table",
    "write_csv",
    "write_json",
]
