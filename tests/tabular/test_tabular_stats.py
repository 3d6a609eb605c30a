"""Statistics of selected episodes computed from the data files: equal to numpy on the concatenated rows (the
arrays the test itself wrote with episodic's DatasetWriter), in parallel, cached by content (a re-run reads no
data file; a changed file recomputes its dataset only)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from episodic.format.errors import DatasetFormatError
from episodic.format.stats import QUANTILES
from episodic.storage import open_source
from episodic.tabular.column_stats import StatsJob, compute_stats, numeric_keys
from episodic.writer import DatasetWriter

FEATURES = {
    "observation.state": {"dtype": "float32", "shape": [14]},
    "action": {"dtype": "float32", "shape": [7]},
    "observation.effort": {"dtype": "int16", "shape": [2, 3]},
}


def write_dataset(root: Path, seed: int, episodes: int = 9, nan_at: tuple[int, int, int] | None = None) -> list[dict]:
    """A tabular dataset of several data files; returns the arrays written, per episode."""
    rng = np.random.default_rng(seed)
    written = []
    with DatasetWriter(root, fps=30, features=FEATURES, data_files_size_in_mb=0.02, overwrite=True) as w:
        for e in range(episodes):
            n = int(rng.integers(40, 160))
            ep = {
                "observation.state": rng.normal(e, 1 + e, (n, 14)).astype(np.float32),
                "action": (rng.standard_t(2, (n, 7)) * 10).astype(np.float32),
                "observation.effort": rng.integers(-300, 300, (n, 2, 3)).astype(np.int16),
            }
            if nan_at is not None and nan_at[0] == e:
                ep["action"][nan_at[1], nan_at[2]] = np.nan
            written.append(ep)
            w.add_episode(ep, task="move")
    return written


@pytest.fixture()
def dataset(tmp_path):
    root = tmp_path / "ds"
    return root, write_dataset(root, seed=0)


def _job(root, keys=None, episodes=None, label=""):
    source = open_source(root)
    meta = source.load_metadata()
    return StatsJob(
        source, meta, tuple(keys or numeric_keys(meta)), None if episodes is None else np.asarray(episodes), label
    )


def _check_against_numpy(result, written, episodes, keys=("observation.state", "action", "observation.effort")):
    for key in keys:
        x = (
            np.concatenate([written[e][key] for e in episodes])
            .astype(np.float64)
            .reshape(-1, int(np.prod(written[0][key].shape[1:])))
        )
        s = result.keys[key].stats
        np.testing.assert_allclose(s["mean"], x.mean(0), rtol=1e-12, atol=1e-12, err_msg=key)
        np.testing.assert_allclose(s["std"], x.std(0), rtol=1e-12, atol=1e-12, err_msg=key)
        assert np.array_equal(s["min"], x.min(0)) and np.array_equal(s["max"], x.max(0)), key
        for name, q in QUANTILES.items():
            assert np.array_equal(s[name], np.quantile(x, q, axis=0)), (key, name)
        assert int(s["count"][0]) == len(x)
    assert result.frames == sum(len(written[e]["action"]) for e in episodes)


def test_statistics_equal_numpy_on_the_selected_rows(dataset, tmp_path):
    root, written = dataset
    meta = open_source(root).load_metadata()
    assert len(meta.episodes.data_files) > 2  # several files: the selection spans some of them
    assert numeric_keys(meta)[:3] == ["observation.state", "action", "observation.effort"]
    selections = [None, [0], [1, 4, 5, 8], [7]]
    jobs = [_job(root, episodes=sel) for sel in selections]
    results = compute_stats(jobs, workers=2, cache=tmp_path / "cache")  # a process pool
    for sel, res in zip(selections, results):
        _check_against_numpy(res, written, range(9) if sel is None else sel)
        assert res.computed and not res.cached
    # the bookkeeping columns too, against numpy on what the writer stored (frame_index counts frames)
    fi = results[2].keys["frame_index"].stats
    x = np.concatenate([np.arange(len(written[e]["action"])) for e in [1, 4, 5, 8]]).astype(np.float64)
    assert np.isclose(fi["mean"][0], x.mean()) and fi["max"][0] == x.max()
    # LeRobot's layout in the feature's shape
    shaped = results[0].keys["observation.effort"].shaped(meta.info.features["observation.effort"].shape)
    assert shaped["mean"].shape == (2, 3) and shaped["count"].shape == (1,)
    # in this process (one worker) the same numbers
    again = compute_stats(jobs[2:3], workers=1, cache=False)[0]
    for key, ks in results[2].keys.items():
        assert all(np.array_equal(ks.stats[n], again.keys[key].stats[n]) for n in ks.stats), key


def _garble_keeping_identity(path: Path) -> None:
    """Overwrite a file with zeros of the same size and give it back its modification time: reading it now
    fails, but its size and mtime (what the cache keys on) are unchanged."""
    st = path.stat()
    path.write_bytes(b"\0" * st.st_size)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_second_run_reads_only_the_cache(tmp_path):
    roots = [tmp_path / f"ds{i}" for i in range(3)]
    written = [write_dataset(r, seed=i, episodes=4) for i, r in enumerate(roots)]
    cache = tmp_path / "cache"
    jobs = [_job(r, ["observation.state", "action"], [0, 2, 3], label=r.name) for r in roots]
    first = compute_stats(jobs, workers=2, cache=cache)
    assert all(r.computed == ("observation.state", "action") for r in first)
    data_files = [p for r in roots for p in (r / "data").rglob("*.parquet")]
    for p in data_files:  # any data read now fails
        _garble_keeping_identity(p)
    with pytest.raises(DatasetFormatError):  # (they really are unreadable)
        compute_stats(jobs[:1], cache=False)
    second = compute_stats(jobs, workers=2, cache=cache)
    for a, b, w in zip(first, second, written):
        assert b.from_cache and b.cached == ("observation.state", "action") and b.seconds == 0
        _check_against_numpy(b, w, [0, 2, 3], keys=("observation.state", "action"))
        for key in a.keys:
            assert np.array_equal(a.keys[key].sketch, b.keys[key].sketch)
    # another selection of the same dataset is not in the cache
    with pytest.raises(DatasetFormatError, match="not a readable parquet file"):
        compute_stats([_job(roots[0], ["action"], [0, 1])], cache=cache)
    # the cache is JSON files (no pickle), one per selection
    files = list(cache.rglob("*.json"))
    assert len(files) == 3 and all(f.read_bytes().startswith(b"{") for f in files)


def test_a_changed_data_file_recomputes_its_dataset_only(tmp_path):
    roots = [tmp_path / f"ds{i}" for i in range(3)]
    for i, r in enumerate(roots):
        write_dataset(r, seed=i, episodes=3)
    cache = tmp_path / "cache"
    jobs = [_job(r, ["action"]) for r in roots]
    compute_stats(jobs, cache=cache)
    new = write_dataset(roots[1], seed=99, episodes=3)  # rewritten: other values, same layout
    jobs = [_job(r, ["action"]) for r in roots]
    results = compute_stats(jobs, cache=cache)
    assert [r.from_cache for r in results] == [True, False, True]
    _check_against_numpy(results[1], new, range(3), keys=("action",))
    # a damaged cache file is a miss: recomputed and replaced
    for f in cache.rglob("*.json"):
        f.write_text("{not json")
    results = compute_stats(jobs, cache=cache)
    assert not any(r.from_cache for r in results)
    assert all(r.from_cache for r in compute_stats(jobs, cache=cache))


def test_keys_computed_later_join_their_selection(dataset, tmp_path):
    root, written = dataset
    cache = tmp_path / "cache"
    assert compute_stats([_job(root, ["action"], [1, 2])], cache=cache)[0].computed == ("action",)
    res = compute_stats([_job(root, ["observation.state", "action"], [1, 2])], cache=cache)[0]
    assert res.cached == ("action",) and res.computed == ("observation.state",)
    assert list(res.keys) == ["observation.state", "action"]
    res = compute_stats([_job(root, ["action", "observation.state"], [1, 2])], cache=cache)[0]
    assert res.from_cache and list(res.keys) == ["action", "observation.state"]
    _check_against_numpy(res, written, [1, 2], keys=("observation.state", "action"))
    assert len(list(cache.rglob("*.json"))) == 1


def test_non_finite_values_are_named_by_file_episode_frame_and_dimension(tmp_path):
    root = tmp_path / "ds"
    write_dataset(root, seed=3, episodes=4, nan_at=(2, 5, 3))
    with pytest.raises(
        DatasetFormatError,
        match=r"\.parquet: episode 2: column 'action' at frame 5, dimension 3 is "
        r"nan",
    ):
        compute_stats([_job(root, ["action"])], cache=False)
    # the other episodes are fine
    assert compute_stats([_job(root, ["action"], [0, 1, 3])], cache=False)[0].frames > 0


def test_failures_are_listed_together_and_the_others_cached(tmp_path):
    good, bad = tmp_path / "good", tmp_path / "bad"
    write_dataset(good, seed=1, episodes=2)
    write_dataset(bad, seed=2, episodes=2)
    jobs = [_job(good, ["action"], label="good"), _job(bad, ["action", "nope"], label="bad")]
    with pytest.raises(DatasetFormatError, match=r"1 of 2 selection\(s\):\n  - .*bad.*'nope' is not a numeric feature"):
        compute_stats(jobs, cache=tmp_path / "cache")
    assert compute_stats(jobs[:1], cache=tmp_path / "cache")[0].from_cache
    with pytest.raises(ValueError, match="workers"):
        compute_stats(jobs, workers=0)


def test_remote_dataset_keyed_by_version_token(dataset, tmp_path):
    """Over HTTP (a real server on 127.0.0.1): the same numbers; the cache keyed by the files' version tokens;
    a re-run makes metadata requests only (no GET of a data file)."""
    from support import FaultServer

    root, written = dataset
    with FaultServer(root.parent) as srv:
        url = f"{srv.url}/{root.name}"
        cache = tmp_path / "cache"
        first = compute_stats([_job(url, ["action"], [2, 3, 6])], workers=1, cache=cache)[0]
        _check_against_numpy(first, written, [2, 3, 6], keys=("action",))
        gets = [p for m, p, _ in srv.requests if m == "GET" and p.endswith(".parquet") and "/data/" in p]
        assert gets
        n = len(srv.requests)
        second = compute_stats([_job(url, ["action"], [2, 3, 6])], workers=1, cache=cache)[0]
        assert second.from_cache
        later = srv.requests[n:]
        assert not [p for m, p, _ in later if m == "GET" and "/data/" in p], later


def _in_daemon(root, queue):
    res = compute_stats([_job(root, ["action"], [0]), _job(root, ["action"], [1])], workers=2, cache=False)
    queue.put([float(r.keys["action"].stats["mean"][0]) for r in res])


def test_a_daemonic_caller_computes_in_its_own_process(dataset):
    """A DataLoader worker (a daemonic process) may not start a pool: it computes the jobs itself."""
    import multiprocessing as mp

    root, written = dataset
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    p = ctx.Process(target=_in_daemon, args=(root, queue), daemon=True)
    p.start()
    got = queue.get(timeout=60)
    p.join(60)
    assert p.exitcode == 0
    assert np.allclose(
        got,
        [written[0]["action"][:, 0].astype(np.float64).mean(), written[1]["action"][:, 0].astype(np.float64).mean()],
        rtol=1e-12,
    )


def test_unwritable_cache_and_bad_selections(dataset, tmp_path, caplog):
    root, written = dataset
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("x")
    with caplog.at_level("WARNING"):
        res = compute_stats([_job(root, ["action"], [3])], cache=blocker / "stats")
    assert res[0].computed == ("action",) and "statistics not cached" in caplog.text
    _check_against_numpy(res[0], written, [3], keys=("action",))
    for bad in ([3, 1], [2, 2], [0, 9]):
        with pytest.raises(ValueError, match="ascending, distinct and in 0..8"):
            compute_stats([_job(root, ["action"], bad)], cache=False)


def test_a_missing_data_file_is_named(dataset, tmp_path):
    """A data file that is not on disk (e.g. a Hub entry whose data was never downloaded): its path, whether the
    cache is asked first (the file's identity) or not (the read)."""
    from episodic.format.errors import MissingFileError

    root, _ = dataset
    meta = open_source(root).load_metadata()
    rel = meta.data_file_of(4)
    (root / rel).unlink()
    for cache in (tmp_path / "cache", False):
        with pytest.raises(MissingFileError, match=rf"{rel}: data file not found"):
            compute_stats([_job(root, ["action"], [4])], cache=cache)
    with pytest.raises(DatasetFormatError, match=rf"1 of 2 selection\(s\):\n  - .*{rel}: data file not found"):
        compute_stats([_job(root, ["action"], [4]), _job(root, ["action"], [0])], cache=tmp_path / "cache")
