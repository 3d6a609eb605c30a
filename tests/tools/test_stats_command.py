"""`episodic stats DATASET|SPEC`: the table, the JSON (LeRobot's stats layout) against numpy on the rows read
with pyarrow, the cache on a re-run, errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from episodic.cli import main
from episodic.format.stats import QUANTILES
from episodic.testing.synthetic import mixture_spec


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EPISODIC_CACHE", str(tmp_path / "cache"))


def _rows(root, key, episodes):
    table = pa.concat_tables(
        [pq.read_table(p, columns=[key, "episode_index"]) for p in sorted(Path(root, "data").rglob("*.parquet"))]
    )
    keep = np.isin(table.column("episode_index").to_numpy(), episodes)
    x = table.column(key).to_numpy(zero_copy_only=False)[keep]
    return np.stack(x).astype(np.float64) if x.dtype == object else x.astype(np.float64)[:, None]


def test_dataset_statistics_json_and_cache(multifile_root, tmp_path, capsys):
    out = tmp_path / "stats.json"
    assert main(["stats", str(multifile_root), "--episodes", "0,2-4,9", "--json", str(out), "-q"]) == 0
    text = capsys.readouterr().out
    assert "5 episodes" in text and "computed" in text and "frames/s" in text
    got = json.loads(out.read_text())
    assert set(got["stats"]) == {
        "observation.state",
        "action",
        "timestamp",
        "frame_index",
        "episode_index",
        "index",
        "task_index",
    }
    for key in ("observation.state", "action", "timestamp"):
        x = _rows(multifile_root, key, [0, 2, 3, 4, 9])
        s = {n: np.asarray(v) for n, v in got["stats"][key].items()}
        np.testing.assert_allclose(s["mean"], x.mean(0), rtol=1e-12)
        np.testing.assert_allclose(s["std"], x.std(0), rtol=1e-12, atol=1e-15)
        assert np.array_equal(s["min"], x.min(0)) and np.array_equal(s["max"], x.max(0))
        for name, q in QUANTILES.items():
            assert np.array_equal(s[name], np.quantile(x, q, axis=0)), (key, name)
        assert s["count"].tolist() == [len(x)]
    assert main(["stats", str(multifile_root), "--episodes", "0,2-4,9", "-q"]) == 0
    again = capsys.readouterr().out
    assert "from the cache" in again and "0 frames computed" in again


def test_dataset_errors(multifile_root, capsys):
    assert main(["stats", str(multifile_root), "--keys", "action,nope", "-q"]) == 2
    err = capsys.readouterr().err
    assert "no numeric feature ['nope']" in err and "\n" not in err.strip()
    assert main(["stats", str(multifile_root), "--episodes", "0,99", "-q"]) == 2
    assert "episodes [99] do not exist" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="--episodes takes"):
        main(["stats", str(multifile_root), "--episodes", "a-b"])
    with pytest.raises(SystemExit, match="--workers"):
        main(["stats", str(multifile_root), "--workers", "0"])


def test_mixture_statistics_per_entry_and_group_then_cached(synthetic, tmp_path, capsys):
    spec = mixture_spec(synthetic[:6])
    spec["entries"][0]["episodes"] = [0, 1]
    spec["entries"][1]["state_indices"] = [2, 0]
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    out = tmp_path / "stats.json"
    assert main(["stats", str(path), "--json", str(out), "--group-by", "all", "--workers", "2", "-q"]) == 0
    text = capsys.readouterr().out
    assert "6 entries (0 from the cache), 1 group(s) (by all)" in text
    got = json.loads(out.read_text())
    assert [e["name"] for e in got["entries"]] == [d.name for d in synthetic[:6]]
    first = got["entries"][1]
    x = _rows(synthetic[1].path, synthetic[1].state_key, np.arange(synthetic[1].episodes))[:, [2, 0]]
    assert np.array_equal(first["stats"]["observation.state"]["q90"][:2], np.quantile(x, 0.9, axis=0))
    assert got["entries"][0]["episodes"] == 2 and got["entries"][0]["origin"]["action"] == "data"
    # the one group: every entry's action rows, dimension 0
    x = np.concatenate(
        [
            _rows(d.path, "action", [0, 1] if i == 0 else np.arange(d.episodes))[:, 0]
            for i, d in enumerate(synthetic[:6])
        ]
    )
    pooled = got["groups"]["all"]["action"]
    assert np.isclose(pooled["mean"][0], x.mean(), rtol=1e-12) and pooled["q01"][0] == np.quantile(x, 0.01)
    assert main(["stats", str(path), "-q"]) == 0
    again = capsys.readouterr().out
    assert "6 entries (6 from the cache)" in again and "0 frames computed" in again
    with pytest.raises(SystemExit, match="apply to a dataset"):
        main(["stats", str(path), "--keys", "action"])


def test_mixture_problems_one_a_line(synthetic, tmp_path, capsys):
    spec = mixture_spec(synthetic[:3])
    spec["entries"][1]["roles"]["state"] = "observation.stat"
    spec["entries"][2]["episodes"] = [0, 99]
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    assert main(["stats", str(path), "-q"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("episodic stats: error: ") and "preflight failed" in err[0]
    assert any("roles.state" in line for line in err[1:]) and any("episodes" in line for line in err[1:])
