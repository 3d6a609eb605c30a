"""Scale tests (`pytest -m slow`): the order at a billion frames, checked for correctness, not timed."""

from __future__ import annotations

import numpy as np
import pytest

from episodic.order import EpisodeAwareSampler, permute

pytestmark = pytest.mark.slow


def test_sampler_over_a_billion_frames_seeks_exactly():
    rng = np.random.default_rng(0)
    lengths = rng.integers(500, 1500, 1_000_000)
    ends = np.cumsum(lengths)
    starts = ends - lengths
    s = EpisodeAwareSampler(starts, ends, shuffle=True, seed=3, drop_n_last_frames=1)
    n = len(s)
    assert n == int((lengths - 1).sum()) and n > 9e8
    head = np.fromiter((i for _, i in zip(range(100_000), iter(s))), np.int64, 100_000)
    assert len(np.unique(head)) == len(head)
    # every yielded index is a kept frame: inside its episode, not its last frame
    ep = np.searchsorted(ends, head, side="right")
    assert np.all(head >= starts[ep]) and np.all(head < ends[ep] - 1)


def test_permutation_is_a_bijection_at_ten_million():
    n = 10_000_019
    p = permute(np.arange(n), n, seed=1, epoch=2)
    assert np.array_equal(np.sort(p), np.arange(n))
