"""Sharding, padding, state and resume, over simulated topologies and a real DataLoader."""

import itertools
import json

import numpy as np
import pytest

from episodic.order import (
    EpisodeAwareSampler,
    EpisodicBatchSampler,
    OrderState,
    Topology,
    TrackedLoader,
    advance,
    simulate,
    steps_in_epoch,
)


def global_order(sampler, epoch, count):
    """The first ``count`` positions of epoch ``epoch``'s global order, wrapping (= padding) past N."""
    return sampler.indices_at(np.arange(count) % len(sampler), epoch)


def uneven_sampler(num_frames, seed=0):
    rng = np.random.default_rng(num_frames)
    lengths = []
    while sum(lengths) < num_frames:
        lengths.append(int(min(rng.integers(1, 9), num_frames - sum(lengths))))
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]) * 2  # gaps between episodes
    return EpisodeAwareSampler(starts, starts + np.array(lengths), shuffle=True, seed=seed)


def check_epoch_is_global_prefix(sim, sampler, epoch, drop_last_expected=None):
    got = sim.indices(epoch)
    n = len(sampler)
    assert np.array_equal(got, global_order(sampler, epoch, got.size)), "consumption is not the global order"
    if drop_last_expected is None:
        assert got.size >= n
        assert np.array_equal(np.sort(got[:n]), np.sort(sampler.indices_at(np.arange(n), epoch)))  # exactly once
    else:
        assert got.size == drop_last_expected and np.unique(got).size == got.size


@pytest.mark.parametrize("num_frames", [1, 7, 13, 50, 97])
def test_exactly_once_coverage_world_1_to_8_workers_0_to_4(num_frames):
    sampler = uneven_sampler(num_frames)
    all_frames = np.sort(sampler.indices_at(np.arange(num_frames), 0))
    for world, workers, batch in itertools.product(range(1, 9), range(0, 5), (1, 3)):
        topo = Topology(
            nodes=1 if world % 2 else 2,
            ranks_per_node=world if world % 2 else world // 2,
            workers=workers,
            batch_size=batch,
        )
        sim = simulate(sampler, topo)
        gb = world * batch
        steps = -(-num_frames // gb)
        assert len(sim.batches) == steps * world
        assert {b.step for b in sim.batches} == set(range(steps))
        check_epoch_is_global_prefix(sim, sampler, 0)
        padded = steps * gb - num_frames
        assert np.unique(sim.indices(0)).size == num_frames
        assert np.array_equal(np.sort(sim.indices(0)[:num_frames]), all_frames)
        assert padded < gb or num_frames < gb
        # per rank disjointness within the un-padded part and per-step blocks
        for b in sim.batches:
            assert b.indices.size == batch
            assert b.worker == (b.step % workers if workers else -1)
            assert (b.node, b.local_rank) == divmod(b.rank, topo.ranks_per_node)
        if num_frames % gb == 0:
            assert padded == 0


@pytest.mark.parametrize("world,batch,num_frames", [(3, 2, 23), (4, 4, 64), (2, 5, 9), (8, 1, 13)])
def test_drop_last(world, batch, num_frames):
    sampler = uneven_sampler(num_frames, seed=5)
    topo = Topology(ranks_per_node=world, batch_size=batch, drop_last=True)
    if num_frames < world * batch:
        with pytest.raises(ValueError, match="drop_last"):
            simulate(sampler, topo)
        return
    sim = simulate(sampler, topo, epochs=2)
    kept = num_frames // (world * batch) * world * batch
    for epoch in (0, 1):
        check_epoch_is_global_prefix(sim, sampler, epoch, drop_last_expected=kept)


def test_resume_at_every_step_same_topology_is_identical():
    sampler = uneven_sampler(23, seed=1)
    topo = Topology(nodes=1, ranks_per_node=3, workers=2, batch_size=2)
    ref = simulate(sampler, topo, epochs=2)
    total_steps = max(b.step for b in ref.batches) + 1

    def key(sim):
        return [(b.step, b.epoch, b.rank, b.indices.tolist()) for b in sim.batches]

    for stop in range(1, total_steps):
        resumed = simulate(sampler, topo, [(stop, topo)], epochs=2)
        assert key(resumed) == key(ref), f"stream differs after a restart at step {stop}"
        # also stop twice
        resumed = simulate(sampler, topo, [(stop, topo), (min(stop + 2, total_steps - 1), topo)], epochs=2)
        assert key(resumed) == key(ref)


@pytest.mark.parametrize(
    "chain",
    [
        [Topology(1, 4, 2, 2), (2, Topology(1, 2, 2, 2))],
        [Topology(1, 2, 2, 3), (3, Topology(1, 3, 2, 3))],
        [Topology(1, 3, 2, 2), (2, Topology(1, 1, 0, 2))],
        [Topology(1, 4, 2, 2), (1, Topology(1, 2, 2, 3)), (3, Topology(1, 3, 0, 1)), (6, Topology(1, 1, 0, 4))],
        [Topology(2, 2, 3, 1), (5, Topology(2, 1, 0, 5))],
    ],
)
def test_resume_on_a_different_topology_is_exactly_once(chain):
    sampler = uneven_sampler(61, seed=2)
    sim = simulate(sampler, chain[0], chain[1:], epochs=2)
    assert len(sim.states) == len(chain)  # one save per stop, plus the final state
    for epoch in (0, 1):
        check_epoch_is_global_prefix(sim, sampler, epoch)
        got = sim.indices(epoch)
        # padding only at the very end, and never more than one global batch
        assert np.unique(got).size == len(sampler)
        assert got.size - len(sampler) < max(
            t.world_size * t.batch_size for t in [chain[0]] + [e[1] for e in chain[1:]]
        )


def test_hundreds_of_random_topology_chains():
    rng = np.random.default_rng(123)
    for trial in range(200):
        sampler = uneven_sampler(int(rng.integers(1, 80)), seed=trial)

        def topo():
            return Topology(
                int(rng.integers(1, 3)), int(rng.integers(1, 5)), int(rng.integers(0, 4)), int(rng.integers(1, 6))
            )

        stops = np.sort(rng.choice(np.arange(1, 30), int(rng.integers(0, 4)), replace=False))
        events = [(int(s), topo()) for s in stops]
        sim = simulate(sampler, topo(), events, epochs=2)
        for epoch in (0, 1):
            check_epoch_is_global_prefix(sim, sampler, epoch)


def test_prefetched_batches_do_not_count_and_advance_is_additive():
    sampler = uneven_sampler(40)
    a = EpisodicBatchSampler(sampler, 3, rank=1, world_size=2)
    it = iter(a)
    pulled = [next(it) for _ in range(5)]  # the DataLoader prefetches
    assert a.state_dict() == {"seed": 0, "epoch": 0, "consumed": 0}
    a.advance(2)
    assert a.state_dict() == {"seed": 0, "epoch": 0, "consumed": 12}
    assert next(iter(a)) == pulled[2]  # a new iterator starts at the consumed position
    # advance(k) == k x advance(1), across epoch boundaries, with and without drop_last
    for drop_last in (False, True):
        for k in range(0, 40):
            state = (0, 6)
            for _ in range(k):
                state = advance(*state, 1, 40, 6, drop_last)
            assert advance(0, 6, k, 40, 6, drop_last) == state
    assert steps_in_epoch(40, 36, 6) == 1 and steps_in_epoch(40, 36, 6, drop_last=True) == 0


def test_state_is_json_and_validated():
    sampler = uneven_sampler(30, seed=9)
    a = EpisodicBatchSampler(sampler, 4, rank=0, world_size=2)
    a.advance(3)
    text = json.dumps(a.state_dict())
    b = EpisodicBatchSampler(sampler, 5, rank=2, world_size=3)
    b.load_state_dict(json.loads(text))
    assert b.state_dict() == {"seed": 9, "epoch": 0, "consumed": 24}
    assert OrderState.from_json(OrderState(1, 2, 3).to_json()) == OrderState(1, 2, 3)
    with pytest.raises(KeyError):
        b.load_state_dict({"epoch": 0, "consumed": 0})
    with pytest.raises(ValueError):
        b.load_state_dict({"seed": 0, "epoch": -1, "consumed": 0})
    with pytest.raises(ValueError):
        EpisodicBatchSampler(sampler, 4, rank=2, world_size=2)
    with pytest.raises(ValueError):
        EpisodicBatchSampler(sampler, 0, rank=0, world_size=1)
    # a state saved at an epoch's tail under one topology is the next epoch under another
    c = EpisodicBatchSampler(sampler, 4, rank=0, world_size=2, drop_last=True)
    c.load_state_dict({"seed": 9, "epoch": 0, "consumed": 24})
    assert c.state_dict() == {"seed": 9, "epoch": 1, "consumed": 0}
    # the seed travels with the state
    d = EpisodicBatchSampler(sampler, 4, rank=0, world_size=1)
    d.load_state_dict({"seed": 77, "epoch": 0, "consumed": 0})
    assert next(iter(d)) == sampler.indices_at(np.arange(4), 0, seed=77).tolist()


class IndexWithWorker:
    def __len__(self):
        return 10**6

    def __getitem__(self, i):
        import torch
        from torch.utils.data import get_worker_info

        info = get_worker_info()
        return torch.tensor([i, -1 if info is None else info.id])


@pytest.mark.parametrize("workers", [0, 2])
def test_real_dataloader_matches_the_simulator_and_resumes(workers):
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader

    sampler = uneven_sampler(45, seed=4)
    ranks, batch, stop = 2, 3, 4
    sim = simulate(sampler, Topology(1, ranks, workers, batch), epochs=1)
    seen = []
    for rank in range(ranks):
        bs = EpisodicBatchSampler(sampler, batch, rank=rank, world_size=ranks)
        kw = {"num_workers": workers, "prefetch_factor": 4} if workers else {}
        loader = DataLoader(IndexWithWorker(), batch_sampler=bs, **kw)
        got = []
        for step, b in enumerate(TrackedLoader(loader, bs)):
            got.append(b)
            if step + 1 == stop:
                break
        assert bs.state_dict()["consumed"] == stop * ranks * batch  # prefetching did not count
        resumed = EpisodicBatchSampler(sampler, batch, rank=rank, world_size=ranks)
        resumed.load_state_dict(json.loads(json.dumps(bs.state_dict())))
        got += list(TrackedLoader(DataLoader(IndexWithWorker(), batch_sampler=resumed, **kw), resumed))
        assert resumed.state_dict()["epoch"] == 1
        expected = [b for b in sim.batches if b.rank == rank]
        assert [g[:, 0].tolist() for g in got] == [e.indices.tolist() for e in expected]
        # the worker of each batch restarts its round-robin at the resume, like the simulator's restart
        workers_seen = [int(g[0, 1]) for g in got]
        assert (
            workers_seen == [-1] * len(got)
            if not workers
            else workers_seen[:stop] == [s % workers for s in range(stop)]
        )
        seen += [g[:, 0] for g in got]
    assert np.unique(torch.cat(seen).numpy()).size == len(sampler)


@pytest.mark.parametrize("kind", ["frames", "mixture"])
@pytest.mark.parametrize(
    "world,rank,batch,consumed,pad_last", [(1, 0, 3, 0, False), (1, 0, 4, 8, True), (3, 2, 2, 6, True)]
)
def test_batches_looked_up_in_blocks_are_each_steps_own_lookup(kind, world, rank, batch, consumed, pad_last):
    """The batch sampler looks indices up many steps at a time; each batch must be what its step's positions
    give alone, written here from the definition: rank r's batch at step s is positions
    (consumed + (s * world + r) * batch + [0, batch)) mod N, the last one cut at N without padding."""
    if kind == "frames":
        sampler = uneven_sampler(211, seed=3)
    else:
        from episodic.order import EpisodeFrames, MixtureSampler

        rng = np.random.default_rng(4)
        entries = []
        for _ in range(40):
            lengths = rng.integers(1, 9, size=int(rng.integers(1, 4)))
            ends = np.cumsum(lengths + 2)
            entries.append(EpisodeFrames(ends - lengths, ends))
        sampler = MixtureSampler(entries, rng.uniform(0.5, 2, 40).tolist(), [f"e{i}" for i in range(40)], seed=9)
    bs = EpisodicBatchSampler(sampler, batch, rank=rank, world_size=world, pad_last=pad_last, seed=11)
    bs.consumed = consumed
    got = list(bs)
    n = len(sampler)
    assert len(got) > 16, "more steps than one block"
    for step, indices in enumerate(got):
        start = consumed + (step * world + rank) * batch
        positions = np.arange(start, start + batch)
        if not pad_last:
            positions = positions[positions < n]
        want = [int(sampler.indices_at(p, 0, 11)) for p in (positions % n).tolist()]
        assert indices == want, f"step {step}"
    assert len(got[-1]) == (batch if pad_last else (n - consumed - 1) % batch + 1)
