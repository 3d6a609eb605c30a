"""Weighting rules and the re-spread of skipped entries' shares."""

import numpy as np
import pytest

from episodic.mixture import MixtureEntry, MixtureSpec, Weighting
from episodic.mixture.checking.weights import raw_weights, shares

FRAMES = [100, 400, 900, 0]
EPISODES = [1, 4, 3, 0]


def spec(rule, alpha=1.0, size="frames", weights=(None, None, 2.0, None)):
    entries = [MixtureEntry(f"org/d{i}", weight=w) for i, w in enumerate(weights)]
    return MixtureSpec.build(entries, weighting=Weighting(rule, alpha, size))


@pytest.mark.parametrize(
    "rule, want",
    [
        ("frames", [100, 400, 1800, 0]),
        ("episodes", [1, 4, 6, 0]),
        ("uniform", [1, 1, 2, 1]),
    ],
)
def test_size_rules_times_the_entry_weight(rule, want):
    assert np.allclose(raw_weights(spec(rule), FRAMES, EPISODES), want)


def test_temperature_between_uniform_and_proportional():
    assert np.allclose(raw_weights(spec("temperature", 0.5), FRAMES, EPISODES), [10, 20, 60, 0])
    assert np.allclose(raw_weights(spec("temperature", 0.5, "episodes"), FRAMES, EPISODES), [1, 2, 2 * 3**0.5, 0])
    assert np.allclose(raw_weights(spec("temperature", 0.0), FRAMES, EPISODES), [1, 1, 2, 1])
    assert np.allclose(
        raw_weights(spec("temperature", 1.0), FRAMES, EPISODES), raw_weights(spec("frames"), FRAMES, EPISODES)
    )


def test_explicit_weights_alone():
    s = spec("explicit", weights=(1.0, 0.0, 3.0, 4.0))
    assert np.allclose(raw_weights(s, FRAMES, EPISODES), [1, 0, 3, 4])


def test_shares_renormalise_over_the_entries_that_remain():
    raw = np.array([1.0, 3.0, 4.0, 2.0])
    assert np.allclose(shares(raw), raw / 10)
    kept = shares(raw, [True, False, True, True])
    assert np.allclose(kept, [1 / 7, 0, 4 / 7, 2 / 7])  # the skipped share goes to the others in proportion
    assert np.allclose(kept[[0, 2, 3]] / kept[[0, 2, 3]].sum(), shares(raw[[0, 2, 3]]))
    assert not shares([0.0, 0.0]).any()
