"""A 400-entry mixture's statistics (issue 23's bar): computed from the data in parallel, equal to numpy on each
group's pooled rows, cached; the second run reads only the cache (every data file is unreadable by then)."""

import json
import os
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from episodic.format.stats import QUANTILES
from episodic.testing.synthetic import mixture_spec, write_synthetic_datasets
from episodic.tools.stats_command import mixture_stats

pytestmark = pytest.mark.slow


def _rows(path, key, episodes, indices):
    table = pa.concat_tables(
        [pq.read_table(p, columns=[key, "episode_index"]) for p in sorted(Path(path, "data").rglob("*.parquet"))]
    )
    keep = np.isin(table.column("episode_index").to_numpy(), episodes)
    x = np.stack(table.column(key).to_numpy(zero_copy_only=False)[keep]).astype(np.float64)
    return x if indices is None else x[:, indices]


def test_statistics_of_400_entries_computed_then_cached(tmp_path):
    datasets = write_synthetic_datasets(tmp_path / "data", 400, seed=11, cameras=(0, 0))
    spec = mixture_spec(datasets)
    for i, entry in enumerate(spec["entries"]):
        if i % 5 == 1:
            entry["episodes"] = [0, 1]
        if i % 7 == 3:
            entry["state_indices"] = [4, 2, 0]
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    cache = tmp_path / "cache"
    t0 = time.perf_counter()
    first = mixture_stats(path, cache=cache, workers=2)
    cold = time.perf_counter() - t0
    assert len(first["entries"]) == 400 and not any(e["cached"] for e in first["entries"])
    # numpy on each group's pooled rows (action dimension 0, state dimension 2: real in every entry)
    for g, stats in first["groups"].items():
        members = [i for i, e in enumerate(first["entries"]) if e["group"] == g]
        for shared, key_of, dim in (("action", lambda d: "action", 0), ("observation.state", lambda d: d.state_key, 2)):
            x = np.concatenate(
                [
                    _rows(
                        datasets[i].path,
                        key_of(datasets[i]),
                        [0, 1] if i % 5 == 1 else np.arange(datasets[i].episodes),
                        [4, 2, 0] if i % 7 == 3 and shared != "action" else None,
                    )[:, dim]
                    for i in members
                ]
            )
            s = stats[shared]
            assert np.isclose(s["mean"][dim], x.mean(), rtol=1e-12) and np.isclose(s["std"][dim], x.std(), rtol=1e-9)
            assert s["min"][dim] == x.min() and s["max"][dim] == x.max()
            for name, q in QUANTILES.items():
                assert s[name][dim] == np.quantile(x, q), (g, shared, name)
    # every data file unreadable (zeros), size and mtime kept: only the cache can answer now
    for d in datasets:
        for p in Path(d.path, "data").rglob("*.parquet"):
            st = p.stat()
            p.write_bytes(b"\0" * st.st_size)
            os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    t0 = time.perf_counter()
    second = mixture_stats(path, cache=cache, workers=2)
    cached = time.perf_counter() - t0
    assert all(e["cached"] for e in second["entries"]) and second["frames_computed"] == 0
    for a, b in zip(first["entries"], second["entries"]):
        for key in ("observation.state", "action"):
            assert all(np.array_equal(a["stats"][key][n], b["stats"][key][n]) for n in a["stats"][key])
    for g in first["groups"]:
        assert np.array_equal(first["groups"][g]["action"]["q99"], second["groups"][g]["action"]["q99"])
    print(
        f"\n400 entries, {first['frames']} frames: first run {cold:.2f} s (statistics {first['seconds']:.2f} s), "
        f"cached run {cached:.2f} s (statistics {second['seconds']:.2f} s)"
    )
