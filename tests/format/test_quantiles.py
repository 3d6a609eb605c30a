"""Exact column statistics and quantile sketches against numpy on the concatenated data."""

import json

import numpy as np
import pytest

from episodic.format.quantiles import (
    QUANTILE_RANK_TOLERANCE,
    SKETCH_SIZE,
    pooled_quantiles,
    sketch_of_sorted,
    sorted_quantiles,
)
from episodic.format.stats import QUANTILES, KeyStats, column_stats

LEVELS = list(QUANTILES.values())


def _reference(x: np.ndarray) -> dict:
    x = np.asarray(x, dtype=np.float64).reshape(len(x), -1)
    out = {"mean": x.mean(0), "std": x.std(0), "min": x.min(0), "max": x.max(0)}
    for name, q in QUANTILES.items():
        out[name] = np.quantile(x, q, axis=0)
    return out


@pytest.mark.parametrize("n,threads", [(1, 1), (2, 1), (7, 2), (513, 1), (514, 3), (5000, 4)])
def test_column_stats_equal_numpy(n, threads):
    rng = np.random.default_rng(n)
    x = np.concatenate(
        [rng.normal(3, 2, (n, 3)), rng.standard_t(2, (n, 2)) * 100, rng.integers(-5, 5, (n, 1))], axis=1
    ).astype(np.float32)
    ks = column_stats(x, block_bytes=8 * n * 2, threads=threads)  # blocks of <= two dimensions, on threads
    want = _reference(x)
    for name, v in want.items():
        np.testing.assert_allclose(ks.stats[name], v, rtol=1e-12, atol=1e-12, err_msg=name)
    assert int(ks.stats["count"][0]) == n
    for name in ("min", "max", *QUANTILES):  # order statistics and numpy's interpolation: bit for bit
        assert np.array_equal(ks.stats[name], want[name]), name
    assert ks.sketch.shape == (6, min(n, SKETCH_SIZE + 1))


def test_sorted_quantiles_are_numpys_bit_for_bit():
    rng = np.random.default_rng(1)
    for n in (1, 2, 3, 10, 101, 1000):
        rows = np.sort(rng.normal(size=(4, n)) * 1e3, axis=1)
        levels = np.linspace(0, 1, 37)
        assert np.array_equal(sorted_quantiles(rows, levels), np.quantile(rows, levels, axis=1))


def test_pooled_quantiles_of_exact_parts_equal_numpy_on_the_concatenation():
    rng = np.random.default_rng(2)
    parts = [rng.normal(i, 1 + i, (int(rng.integers(1, 400)), 3)) for i in range(9)]
    sketches = [(len(p), sketch_of_sorted(np.sort(p.T, axis=1))) for p in parts]
    got = pooled_quantiles(sketches, LEVELS)
    assert np.array_equal(got, np.quantile(np.concatenate(parts), LEVELS, axis=0))


def test_pooled_quantiles_of_summarised_parts_are_within_the_stated_rank_tolerance():
    """Parts larger than the sketch, of very different distributions and sizes: each pooled quantile q lies
    between numpy's quantiles of the concatenated data at q -+ 1/K."""
    rng = np.random.default_rng(3)
    parts = [
        rng.normal(0, 1, 20_000),
        rng.exponential(5, 3_000) + 2,
        rng.uniform(-10, 10, 50_000),
        rng.standard_t(1.5, 7_000),
        rng.normal(4, 0.1, 600),
        np.repeat([1.0, 2.0, 3.0], 900),
        rng.normal(-3, 2, 100),
    ]  # the last one small enough to be kept exactly
    sketches = [(len(p), sketch_of_sorted(np.sort(p)[None])) for p in parts]
    assert sketches[-1][1].shape[1] == 100 and sketches[0][1].shape[1] == SKETCH_SIZE + 1
    x = np.concatenate(parts)
    levels = np.linspace(0, 1, 201)
    got = pooled_quantiles(sketches, levels)[:, 0]
    lo = np.quantile(x, np.clip(levels - QUANTILE_RANK_TOLERANCE, 0, 1))
    hi = np.quantile(x, np.clip(levels + QUANTILE_RANK_TOLERANCE, 0, 1))
    assert ((got >= lo - 1e-12) & (got <= hi + 1e-12)).all(), levels[(got < lo) | (got > hi)]
    # and the tolerance is not vacuous: a rank error much larger than 1/K would be outside it
    assert not (np.quantile(x, 0.5 + 5 * QUANTILE_RANK_TOLERANCE) <= hi[100])


def test_pooled_quantiles_refuse_parts_that_do_not_fit():
    with pytest.raises(ValueError, match="different dimensions"):
        pooled_quantiles([(3, np.zeros((2, 3))), (3, np.zeros((1, 3)))], [0.5])
    with pytest.raises(ValueError, match="expected 1000 .exact. or 513"):
        pooled_quantiles([(1000, np.zeros((1, 17))), (3, np.zeros((1, 3)))], [0.5])
    with pytest.raises(ValueError, match="no values"):
        pooled_quantiles([], [0.5])


def test_key_stats_json_round_trip_and_damage():
    ks = column_stats(np.random.default_rng(4).normal(size=(700, 5)))
    raw = json.loads(json.dumps(ks.to_json()))
    back = KeyStats.from_json(raw)
    for name, v in ks.stats.items():
        assert np.array_equal(back.stats[name], v)
    assert np.array_equal(back.sketch, ks.sketch)
    sel = ks.select([4, 0, 0])
    assert np.array_equal(sel.stats["mean"], ks.stats["mean"][[4, 0, 0]]) and sel.sketch.shape[0] == 3
    for damage in (
        lambda r: r["stats"].pop("q10"),
        lambda r: r["stats"].__setitem__("mean", [1.0]),
        lambda r: r["sketch"].__setitem__("float64", r["sketch"]["float64"][:-8]),
        lambda r: r["sketch"].__setitem__("shape", [5, 2]),
        lambda r: r.pop("sketch"),
    ):
        bad = json.loads(json.dumps(ks.to_json()))
        damage(bad)
        with pytest.raises(ValueError):
            KeyStats.from_json(bad)
