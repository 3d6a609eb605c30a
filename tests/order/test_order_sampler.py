"""EpisodeAwareSampler: LeRobot semantics, O(episodes) memory, epochs and state."""

import logging

import numpy as np
import pytest

from episodic.order import EpisodeAwareSampler, EpisodeFrames


def lerobot_reference(starts, ends, episode_indices_to_use=None, drop_n_first_frames=0, drop_n_last_frames=0):
    """LeRobot's list building, as a plain loop."""
    if drop_n_first_frames < 0 or drop_n_last_frames < 0:
        raise ValueError("negative drop")
    indices = []
    for episode_idx, (start_index, end_index) in enumerate(zip(starts, ends, strict=True)):
        if episode_indices_to_use is None or episode_idx in episode_indices_to_use:
            indices.extend(range(start_index + drop_n_first_frames, end_index - drop_n_last_frames))
    if not indices:
        raise ValueError("no frames")
    return indices


def random_layout(rng, num_episodes, gaps=False):
    lengths = rng.integers(0 if gaps else 1, 12, num_episodes)
    spacing = rng.integers(0, 5, num_episodes) if gaps else np.zeros(num_episodes, dtype=int)
    starts = np.cumsum(np.concatenate([[0], (lengths + spacing)[:-1]])) + (spacing[0] if gaps else 0)
    return starts.tolist(), (starts + lengths).tolist()


@pytest.mark.parametrize("case", range(40))
def test_unshuffled_sequence_equals_lerobot(case):
    rng = np.random.default_rng(case)
    starts, ends = random_layout(rng, int(rng.integers(1, 30)), gaps=case % 2 == 1)
    use = None
    if case % 3:
        use = rng.choice(len(starts) + 3, int(rng.integers(1, len(starts) + 3)), replace=False).tolist()
    first, last = int(rng.integers(0, 4)), int(rng.integers(0, 4))
    try:
        expected = lerobot_reference(starts, ends, use, first, last)
    except ValueError:
        with pytest.raises(ValueError):
            EpisodeAwareSampler(starts, ends, use, first, last)
        return
    sampler = EpisodeAwareSampler(starts, ends, use, first, last)
    assert len(sampler) == len(expected)
    assert list(sampler) == expected
    assert sampler.indices.tolist() == expected
    assert list(sampler) == expected  # every epoch is the same without shuffle

    shuffled = EpisodeAwareSampler(starts, ends, use, first, last, shuffle=True, seed=case)
    epoch0, epoch1 = list(shuffled), list(shuffled)
    assert sorted(epoch0) == sorted(expected) == sorted(epoch1)
    if len(expected) >= 8:
        assert epoch0 != expected and epoch0 != epoch1


def test_drop_and_subset_semantics():
    starts, ends = [0, 10, 15, 30], [10, 15, 30, 31]
    s = EpisodeAwareSampler(starts, ends, episode_indices_to_use=[0, 2, 3], drop_n_first_frames=2, drop_n_last_frames=3)
    assert list(s) == [2, 3, 4, 5, 6, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26]
    assert s.frames.episodes.tolist() == [0, 2]  # episode 3 (1 frame) is dropped entirely
    # episode ids refer to positions in the from/to arrays; unknown ids are ignored, numpy input works
    s = EpisodeAwareSampler(np.array(starts), np.array(ends), episode_indices_to_use=np.array([1, 7]))
    assert list(s) == list(range(10, 15))
    assert s.frames.episode_at(np.arange(5)).tolist() == [1] * 5
    assert EpisodeAwareSampler(starts, ends, episode_indices_to_use={3}).indices.tolist() == [30]


def test_errors(caplog):
    with pytest.raises(ValueError, match="drop_n_first_frames"):
        EpisodeAwareSampler([0], [10], drop_n_first_frames=-1)
    with pytest.raises(ValueError, match="drop_n_last_frames"):
        EpisodeAwareSampler([0], [10], drop_n_last_frames=-2)
    with pytest.raises(ValueError, match="same length"):
        EpisodeAwareSampler([0, 10], [10])
    with pytest.raises(ValueError, match="No valid frames"):
        EpisodeAwareSampler([0, 5], [5, 9], drop_n_first_frames=2, drop_n_last_frames=3)
    with pytest.raises(ValueError, match="No valid frames"):
        EpisodeAwareSampler([0, 5], [5, 9], episode_indices_to_use=[])
    with pytest.raises(ValueError, match="No valid frames"):
        EpisodeAwareSampler([], [])
    with caplog.at_level(logging.WARNING):
        EpisodeAwareSampler([0, 5], [5, 6], drop_n_first_frames=1)
    assert "skipping" in caplog.text
    with pytest.raises(ValueError, match="start_index"):
        EpisodeAwareSampler([0], [10]).load_state_dict({"epoch": 0, "start_index": 11})


def test_epochs_state_and_seek():
    starts, ends = random_layout(np.random.default_rng(1), 50)
    s = EpisodeAwareSampler(starts, ends, drop_n_first_frames=1, shuffle=True, seed=3)
    n = len(s)
    assert s.state_dict() == {"epoch": 0, "start_index": 0}
    epoch0 = list(s)
    assert s.state_dict() == {"epoch": 1, "start_index": 0}  # a full pass advances the epoch
    epoch1 = list(s)
    assert epoch0 != epoch1 and sorted(epoch0) == sorted(epoch1)
    # an abandoned pass does not advance
    it = iter(s)
    next(it)
    assert s.state_dict()["epoch"] == 2
    # resume inside epoch 0
    s.load_state_dict({"epoch": 0, "start_index": n // 3})
    assert list(s) == epoch0[n // 3 :]
    assert s.state_dict() == {"epoch": 1, "start_index": 0}
    s.set_epoch(0)
    assert list(s) == epoch0
    # O(1) seek: any position of any epoch, vectorised, equals iteration
    pos = np.array([0, n - 1, n // 2, 7])
    assert s.indices_at(pos, epoch=1).tolist() == [epoch1[p] for p in pos]
    assert s.indices_at(int(pos[1]), epoch=0) == epoch0[n - 1]
    # same seed -> same order in a fresh object; different seed -> different order
    assert list(EpisodeAwareSampler(starts, ends, drop_n_first_frames=1, shuffle=True, seed=3)) == epoch0
    assert list(EpisodeAwareSampler(starts, ends, drop_n_first_frames=1, shuffle=True, seed=4)) != epoch0


def test_memory_is_per_episode_not_per_frame():
    num_episodes = 10_000
    starts = np.arange(num_episodes, dtype=np.int64) * 100_000
    frames = EpisodeFrames(starts, starts + 100_000)
    assert len(frames) == 10**9
    stored = sum(v.nbytes for v in vars(frames).values() if isinstance(v, np.ndarray))
    assert stored <= 3 * 8 * num_episodes
    p = np.array([0, 99_999, 100_000, 10**9 - 1])
    assert frames.frame_at(p).tolist() == p.tolist()
    assert frames.episode_at(p).tolist() == [0, 0, 1, num_episodes - 1]


def test_large_vectorised_lookup_matches_a_plain_search():
    rng = np.random.default_rng(5)
    lengths = rng.integers(1, 50, 40_000)
    starts = np.cumsum(lengths) * 3
    frames = EpisodeFrames(starts, starts + lengths, drop_n_first_frames=1)
    p = rng.integers(0, len(frames), (200, 150))  # big enough for the sorted-search path
    kept = np.maximum(lengths - 1, 0)
    cum = np.cumsum(kept)
    k = np.searchsorted(cum, p, side="right")
    assert np.array_equal(frames.frame_at(p), starts[k] + 1 + p - (cum[k] - kept[k]))
