"""The streaming order of a mixture: whole episodes per epoch, budgets kept over epochs, exactly once on any
topology."""

import numpy as np

from episodic.order import QUOTA_BOUND, EpisodeFrames, MixtureSampler, Topology, epoch_episodes, simulate_stream


def mixture(seed=0, shuffle=True):
    rng = np.random.default_rng(7)
    entries, names = [], []
    for i in range(6):
        lengths = rng.integers(3, 25, int(rng.integers(1, 7)))
        ends = np.cumsum(lengths + 1)
        entries.append(EpisodeFrames(ends - lengths, ends))
        names.append(f"e{i}")
    weights = [5, 1, 0.2, 3, 1, 0.05]  # e2, e5: oversampled/undersampled relative to their size
    return MixtureSampler(entries, weights, names, seed=seed, shuffle=shuffle, samples_per_epoch=300)


def test_budgets_over_epochs_follow_the_weights_without_drift():
    s = mixture()
    longest = max(int(np.diff(np.r_[0, f.cum_end]).max()) for f in s.entries)
    share = s.units / s.units.sum()
    total = np.zeros(6, dtype=np.int64)
    for epoch in range(40):
        ep = epoch_episodes(s, epoch)
        got = ep.frames_per_entry(6)
        budget = s.tree().counts((epoch + 1) * 300) - s.tree().counts(epoch * 300)
        assert np.all(np.abs(got - budget) <= longest)  # whole episodes: off by less than one episode
        total += got
        assert np.all(np.abs(total - share * 300 * (epoch + 1)) <= longest + QUOTA_BOUND)  # no drift


def test_each_pass_over_an_entry_streams_every_episode_once():
    s = mixture(seed=3)
    slots = [epoch_episodes(s, e) for e in range(30)]
    for i in range(6):
        seq = np.concatenate([x.episode[x.entry == i] for x in slots])
        k = s.entries[i].episodes.size
        for p in range(seq.size // k):
            assert np.array_equal(np.sort(seq[p * k : (p + 1) * k]), s.entries[i].episodes)


def test_pure_and_seeded():
    a, b = epoch_episodes(mixture(1), 4), epoch_episodes(mixture(1), 4)
    assert np.array_equal(a.entry, b.entry) and np.array_equal(a.episode, b.episode)
    c = epoch_episodes(mixture(2), 4)
    assert not (np.array_equal(a.entry, c.entry) and np.array_equal(a.episode, c.episode))
    plain = mixture(shuffle=False)
    slots = [epoch_episodes(plain, e) for e in range(10)]
    for i in range(6):  # without shuffling every pass streams the entry's episodes in order
        seq = np.concatenate([x.episode[x.entry == i] for x in slots])
        k = plain.entries[i].episodes.size
        for p in range(seq.size // k):
            assert np.array_equal(seq[p * k : (p + 1) * k], plain.entries[i].episodes)


def test_streaming_plan_on_slots_is_exactly_once_under_elastic_restarts():
    ep = epoch_episodes(mixture(5), 2)
    lengths = ep.lengths()
    want = sorted((slot, f) for slot, n in lengths.items() for f in range(n))
    rng = np.random.default_rng(1)
    for trial in range(6):
        runs = [
            (
                Topology(1, int(rng.integers(1, 3)), int(rng.integers(0, 3)), int(rng.integers(1, 5))),
                int(rng.integers(1, 6)),
            )
            for _ in range(2)
        ]
        runs.append((Topology(1, int(rng.integers(1, 3)), int(rng.integers(0, 3)), int(rng.integers(1, 5))), None))
        sim = simulate_stream(lengths, runs, seed=5, epoch=2, pool_size=4, shuffle=True)
        got = sorted(map(tuple, sim.items().tolist()))
        assert got == want, trial
