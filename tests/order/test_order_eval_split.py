"""Eval splits (`order.eval_split`): disjoint sides covering the episodes, stratified as the rules state (counts
computed here from the rule's words), independent of list order and of any topology (the topology simulators:
a training side never reaches a held-out episode on any world size or worker count), LeRobot 0.6's rule against
a reference written here, every bad option named."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from episodic.order import EpisodeAwareSampler, Topology, simulate, simulate_stream
from episodic.order.eval_split import EvalSplit, split_episodes
from episodic.order.split_stratified import held_out_count

TASKS = ("pick", "place", "open", "push", "fold")


def _episodes(n: int, seed: int) -> tuple[np.ndarray, list[str]]:
    rng = np.random.default_rng(seed)
    eps = rng.permutation(n * 3)[:n]  # not contiguous, in no particular order
    tasks = [TASKS[i] for i in rng.integers(0, len(TASKS), n)]
    return eps.astype(np.int64), tasks


@pytest.mark.parametrize(
    "n, fraction", [(1, 0.5), (2, 0.01), (3, 0.1), (10, 0.1), (37, 0.2), (200, 0.05), (200, 0.5), (64, 0.99)]
)
def test_stratified_sides_are_disjoint_cover_and_follow_the_stated_counts(n, fraction):
    eps, tasks = _episodes(n, n)
    train, held = split_episodes(EvalSplit(fraction, seed=3), eps, tasks)
    assert not set(train.tolist()) & set(held.tolist())
    assert sorted(train.tolist() + held.tolist()) == sorted(eps.tolist())
    assert list(train) == sorted(train) and list(held) == sorted(held)
    # the entry's total: round half up, at least one and at most n - 1 from two episodes on
    total = 0 if n < 2 else min(max(int(math.floor(n * fraction + 0.5)), 1), n - 1)
    assert len(held) == total == held_out_count(n, fraction)
    # each task's share: floor or ceil of its proportional quota
    task_of = dict(zip(eps.tolist(), tasks))
    sizes, got = Counter(tasks), Counter(task_of[e] for e in held.tolist())
    for t, size in sizes.items():
        quota = size * total / n
        assert math.floor(quota) <= got[t] <= math.ceil(quota), (t, size, got[t], quota)


def test_stratified_is_a_pure_function_of_seed_and_episodes():
    eps, tasks = _episodes(120, 1)
    split = EvalSplit(0.15, seed=11)
    first = split_episodes(split, eps, tasks)
    perm = np.random.default_rng(5).permutation(len(eps))
    again = split_episodes(split, eps[perm], [tasks[i] for i in perm])  # listed in another order
    assert all(np.array_equal(a, b) for a, b in zip(first, again))
    other = split_episodes(EvalSplit(0.15, seed=12), eps, tasks)
    assert not np.array_equal(first[1], other[1])  # the seed picks which episodes
    assert len(first[1]) == len(other[1])


def test_one_episode_per_task_still_holds_out_the_fraction():
    # e.g. a dataset whose every episode has its own instruction: strata of one
    eps = np.arange(100, dtype=np.int64)
    train, held = split_episodes(EvalSplit(0.1), eps, [f"instruction {i}" for i in range(100)])
    assert len(held) == 10 and len(train) == 90


def _lerobot_reference(episodes: list[int], first_tasks: list[str], fraction: float) -> tuple[list[int], list[int]]:
    """LeRobot 0.6.1's make_train_eval_datasets, as its documentation states it: per first task, the last
    ceil(n * eval_split) episodes of the list."""
    by_task: dict[str, list[int]] = {}
    for e, t in zip(episodes, first_tasks):
        by_task.setdefault(t, []).append(e)
    train, held = [], []
    for members in by_task.values():
        k = math.ceil(len(members) * fraction)
        train += members[: len(members) - k]
        held += members[len(members) - k :]
    return sorted(train), sorted(held)


@pytest.mark.parametrize("fraction", [0.1, 0.2, 0.25, 0.3, 0.5, 0.7])
def test_lerobot_rule_equals_its_reference_in_list_order(fraction):
    eps, tasks = _episodes(41, 2)
    want = _lerobot_reference(eps.tolist(), tasks, fraction)
    got = split_episodes(EvalSplit(fraction, rule="lerobot"), eps, tasks)
    assert [g.tolist() for g in got] == list(want)
    # the list order decides which are "last"
    rev = split_episodes(EvalSplit(fraction, rule="lerobot"), eps[::-1], tasks[::-1])
    assert [g.tolist() for g in rev] == list(_lerobot_reference(eps[::-1].tolist(), tasks[::-1], fraction))


def test_bad_options_are_named_all_at_once():
    with pytest.raises(ValueError) as e:
        EvalSplit(1.0, rule="random", seed=-1)
    assert "fraction" in str(e.value) and "rule" in str(e.value) and "seed" in str(e.value)
    for bad in (0, 0.0, 1, float("nan"), True, "0.1"):
        with pytest.raises(ValueError, match="fraction"):
            EvalSplit(bad)
    with pytest.raises(ValueError, match="unknown field"):
        EvalSplit.of({"fraction": 0.1, "frac": 2})
    with pytest.raises(ValueError, match="missing field 'fraction'"):
        EvalSplit.of({"rule": "lerobot"})
    assert EvalSplit.of(0.2) == EvalSplit(0.2) and EvalSplit.of(None) is None
    assert EvalSplit.of(EvalSplit(0.2).to_dict()) == EvalSplit(0.2)


@pytest.mark.parametrize(
    "topology", [Topology(1, 1, 0, 5), Topology(1, 2, 2, 4), Topology(2, 2, 3, 3), Topology(1, 3, 1, 7, drop_last=True)]
)
def test_no_topology_reaches_a_held_out_episode(topology):
    # episodes of 4..12 frames, laid side by side as a dataset's rows
    lengths = np.random.default_rng(0).integers(4, 13, 30)
    ends = np.cumsum(lengths)
    starts = ends - lengths
    tasks = [TASKS[i % 3] for i in range(30)]
    train, held = split_episodes(EvalSplit(0.2, seed=4), np.arange(30), tasks)
    rows_of = lambda eps: {r for e in eps.tolist() for r in range(starts[e], ends[e])}  # noqa: E731
    for side in (train, held):
        sampler = EpisodeAwareSampler(starts, ends, episode_indices_to_use=side, shuffle=True, seed=9)
        sim = simulate(sampler, topology, events=[(3, Topology(1, 1, 2, 4))])
        got = set(sim.indices(0).tolist())
        if topology.drop_last:
            assert got <= rows_of(side)
        else:
            assert got == rows_of(side)
    # streaming: the plan over the training side's episodes, on two topologies one after the other
    lengths_of = {int(e): int(lengths[e]) for e in train.tolist()}
    first = Topology(topology.nodes, topology.ranks_per_node, topology.workers, topology.batch_size)
    sim = simulate_stream(lengths_of, [(first, 2), (Topology(1, 2, 1, 3), None)], seed=2, pool_size=4)
    items = sim.items()
    assert sorted(map(tuple, items.tolist())) == sorted((e, j) for e, n in lengths_of.items() for j in range(n))
    episodes = {int(e) for b in sim.batches for e in b.episodes.tolist()}
    assert episodes == set(train.tolist())
