"""The streaming order over simulated topologies: stops and restarts on other world sizes, workers and
batch sizes emit every frame of the epoch exactly once, whatever the chunking; and the simulator hands out
the same batches as the real StreamingLeRobotDataset."""

import warnings

import numpy as np
import pytest

from episodic.order import Topology, remaining_after, simulate_stream


def random_lengths(rng) -> dict[int, int]:
    episodes = rng.choice(60, int(rng.integers(1, 14)), replace=False)
    return {int(e): int(rng.integers(0, 30)) for e in episodes}


def random_topology(rng) -> Topology:
    return Topology(
        nodes=int(rng.integers(1, 3)),
        ranks_per_node=int(rng.integers(1, 4)),
        workers=int(rng.integers(0, 4)),
        batch_size=int(rng.integers(1, 7)),
    )


def random_runs(rng) -> list:
    runs = [(random_topology(rng), int(rng.integers(0, 7))) for _ in range(int(rng.integers(0, 4)))]
    return runs + [(random_topology(rng), None)]


def all_frames(lengths) -> list[tuple[int, int]]:
    return sorted((e, f) for e, n in lengths.items() for f in range(n))


def handed_out(sim) -> list[tuple[int, int]]:
    return [tuple(x) for x in sim.items().tolist()]


def per_rank(sim, run) -> dict[int, list]:
    out = {}
    for b in sim.batches:
        if b.run == run:
            out.setdefault(b.rank, []).append((b.consumer, b.episodes.tolist(), b.frames.tolist()))
    return out


def test_every_frame_once_over_random_restarts():
    rng = np.random.default_rng(0)
    for case in range(200):
        lengths, runs = random_lengths(rng), random_runs(rng)
        seed, epoch, pool = int(rng.integers(1 << 63)), int(rng.integers(4)), int(rng.integers(1, 5))
        shuffle = bool(rng.integers(4))  # mostly shuffled
        sim = simulate_stream(lengths, runs, seed=seed, epoch=epoch, pool_size=pool, shuffle=shuffle)
        got = handed_out(sim)
        assert sorted(got) == all_frames(lengths), (case, lengths, runs)
        for run, (topo, k) in enumerate(runs[:-1]):  # a stopped run: every rank stopped at the same count
            counts = [len(sim.rank_batches(run, r)) for r in range(topo.world_size)]
            assert len(set(counts)) == 1 and counts[0] <= k
            assert all(len(b.episodes) <= topo.batch_size for b in sim.batches if b.run == run)
        assert sim.states[-1]["epoch"] == epoch + 1 and sim.states[-1]["batches_consumed"] == 0


def test_result_does_not_depend_on_how_orders_are_taken():
    rng = np.random.default_rng(1)
    for _ in range(60):
        lengths, runs = random_lengths(rng), random_runs(rng)
        kw = dict(seed=int(rng.integers(1 << 40)), epoch=1, pool_size=int(rng.integers(1, 4)))
        ref = simulate_stream(lengths, runs, **kw)
        for take in (1, 5, 10**6, rng.integers(1, 9, 7).tolist()):
            sim = simulate_stream(lengths, runs, take_size=take, **kw)
            assert [
                (b.step, b.rank, b.worker, b.consumer, b.episodes.tolist(), b.frames.tolist()) for b in sim.batches
            ] == [(b.step, b.rank, b.worker, b.consumer, b.episodes.tolist(), b.frames.tolist()) for b in ref.batches]
            assert sim.states == ref.states


def test_restart_on_the_same_topology_continues_batch_for_batch():
    rng = np.random.default_rng(2)
    for _ in range(80):
        lengths, topo = random_lengths(rng), random_topology(rng)
        kw = dict(seed=int(rng.integers(1 << 40)), epoch=0, pool_size=int(rng.integers(1, 4)))
        whole = simulate_stream(lengths, [(topo, None)], **kw)
        k = int(rng.integers(0, 8))
        stopped = simulate_stream(lengths, [(topo, k), (topo, k), (topo, None)], **kw)
        assert all(s["history"] == [] for s in stopped.states[:2])  # one segment throughout
        want = per_rank(whole, 0)
        got = {
            r: per_rank(stopped, 0).get(r, []) + per_rank(stopped, 1).get(r, []) + per_rank(stopped, 2).get(r, [])
            for r in want
        }
        assert got == want


def test_stopped_runs_consume_what_remaining_after_leaves_out():
    """The frames handed out before a stop are exactly the frames remaining_after removes for the saved
    state's closed segments plus its open one."""
    rng = np.random.default_rng(3)
    for _ in range(100):
        lengths, runs = random_lengths(rng), random_runs(rng)[:-1]
        if not runs:
            continue
        kw = dict(seed=int(rng.integers(1 << 40)), epoch=2, pool_size=int(rng.integers(1, 4)), shuffle=True)
        sim = simulate_stream(lengths, runs, **kw)
        state = sim.states[-1]
        history = state["history"] + [
            [state["world_size"], state["num_workers"], state["batch_size"], state["batches_consumed"]]
        ]
        left = remaining_after(lengths, history, kw["seed"], kw["epoch"], kw["pool_size"], True)
        unconsumed = sorted((e, int(f)) for e, fs in left.items() for f in fs)
        got = handed_out(sim)
        assert len(got) == len(set(got))
        assert sorted(got + unconsumed) == all_frames(lengths)


def test_bad_runs_are_refused():
    with pytest.raises(ValueError, match="last run"):
        simulate_stream({0: 3}, [(Topology(), None), (Topology(), None)])
    with pytest.raises(ValueError, match="k >= 0"):
        simulate_stream({0: 3}, [(Topology(), -1), (Topology(), None)])
    with pytest.raises(ValueError, match="drop_last"):
        simulate_stream({0: 3}, [(Topology(drop_last=True), None)])
    with pytest.raises(ValueError, match="take sizes"):
        simulate_stream({0: 3}, [(Topology(), None)], take_size=0)


# ------------------------------------------------------------------------------------ against the dataset
RUNS = [
    (Topology(1, 2, 2, 5), 2),
    (Topology(1, 2, 2, 5), 1),
    (Topology(1, 1, 0, 7), 2),
    (Topology(1, 3, 1, 4), 1),
    (Topology(1, 2, 0, 6), None),
]  # the second run continues the first one's segment


def test_simulation_matches_the_streaming_dataset(multifile_root):
    """Each rank of the real dataset, restarted on each topology from the state the previous run saved, hands
    out the simulated batches, and saves the simulated state."""
    pytest.importorskip("torch")
    from episodic.datasets.streaming import StreamingLeRobotDataset

    kw = dict(video_keys=[], episode_pool_size=3, seed=11)
    probe = StreamingLeRobotDataset("x", root=multifile_root, **kw)
    lengths = {e: int(n) for e, n in enumerate(probe.meta.episodes.length)}
    start = probe.meta.episodes.dataset_from_index
    sim = simulate_stream(lengths, RUNS, seed=11, epoch=1, pool_size=3)
    state = None
    for run, (topo, k) in enumerate(RUNS):
        saved = None
        for rank in range(topo.world_size):
            want = [(start[b.episodes] + b.frames).tolist() for b in sim.rank_batches(run, rank)]
            ds = StreamingLeRobotDataset("x", root=multifile_root, rank=rank, world_size=topo.world_size, **kw)
            if state is None:
                ds.set_epoch(1)
            else:
                ds.load_state_dict(state)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # uneven ranks: expected, even_batches is off
                it = iter(ds.loader(batch_size=topo.batch_size, num_workers=topo.workers, even_batches=False))
                if k is None:
                    got = [batch["index"].tolist() for batch in it]
                else:  # stop after the simulated count (k, cut to the fewest batches a rank has)
                    got = [next(it)["index"].tolist() for _ in range(len(want))]
                    it.close()
            assert got == want, (run, rank)
            saved = saved or ds.state_dict()
            assert ds.state_dict() == saved  # identical on every rank
        assert saved == sim.states[run]
        state = saved
    assert sorted(i for b in sim.batches for i in (start[b.episodes] + b.frames).tolist()) == list(
        range(sum(lengths.values()))
    )
