"""Eval splits of single datasets, map-style and streaming: the sides are disjoint, cover the selection, follow
the rule (LeRobot 0.6's rule against the dataset's episodes table read here with pyarrow), are the same on every
world size and worker count (real DataLoader workers), and the eval side is its own dataset: iterating it
leaves the training side's order and resume untouched."""

from __future__ import annotations

import glob
import math
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from episodic import LeRobotDataset, StreamingLeRobotDataset
from episodic.datasets.map_style import EpisodicDataset
from episodic.demo import write_demo_dataset
from episodic.order.eval_split import EvalSplit


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    """14 episodes of 6-12 frames, three tasks (episode e has task e % 3), one 32x32 camera."""
    return write_demo_dataset(
        tmp_path_factory.mktemp("split") / "ds",
        num_episodes=14,
        min_length=6,
        max_length=12,
        cameras=("observation.images.top",),
        height=32,
        width=32,
        progress=False,
    )


def _episodes_table(root: Path) -> tuple[list[int], list[list[str]]]:
    """episode_index and tasks of meta/episodes/*.parquet, read with pyarrow alone."""
    files = sorted(glob.glob(str(root / "meta" / "episodes" / "*" / "*.parquet")))
    rows = sorted(
        (r["episode_index"], r["tasks"])
        for f in files
        for r in pq.read_table(f, columns=["episode_index", "tasks"]).to_pylist()
    )
    return [e for e, _ in rows], [t for _, t in rows]


def _lerobot_held_out(root: Path, fraction: float, episodes: list[int] | None = None) -> tuple[set, set]:
    """LeRobot 0.6.1 `make_train_eval_datasets`: base episodes (the list, or all), grouped by their first task
    ("" without one), the last ceil(n * eval_split) of each group held out."""
    index, tasks = _episodes_table(root)
    base = episodes if episodes is not None else index
    groups: dict[str, list[int]] = {}
    for e in base:
        groups.setdefault(tasks[e][0] if tasks[e] else "", []).append(e)
    train, held = set(), set()
    for members in groups.values():
        k = math.ceil(len(members) * fraction)
        train |= set(members[: len(members) - k])
        held |= set(members[len(members) - k :])
    return train, held


def _episodes_of(ds) -> set[int]:
    return {int(e) for e in ds.rows.columns.episodes} if hasattr(ds, "rows") else {int(e) for e in ds.selected}


@pytest.mark.parametrize("fraction", [0.1, 0.25, 0.5])
@pytest.mark.parametrize("episodes", [None, [13, 2, 5, 7, 0, 9, 11, 4, 1]])
def test_lerobot_rule_holds_out_lerobots_episodes(root, fraction, episodes):
    want_train, want_held = _lerobot_held_out(root, fraction, episodes)
    split = EvalSplit(fraction, rule="lerobot")
    train = LeRobotDataset("x", root=root, episodes=episodes, eval_split=split)
    held = train.eval_dataset()
    assert _episodes_of(train) == want_train and _episodes_of(held) == want_held
    assert held.split == "eval" and train.split == "train"
    # every item of the eval side is of a held-out episode, and all of them are there
    assert {int(held[i]["episode_index"]) for i in range(len(held))} == want_held
    stream = StreamingLeRobotDataset("x", root=root, episodes=episodes, eval_split=split, split="eval")
    assert _episodes_of(stream) == want_held
    assert stream.num_frames == held.num_frames and stream.num_episodes == len(want_held)


def test_stratified_sides_are_disjoint_and_cover_the_selection(root):
    ds = EpisodicDataset(root, eval_split=0.3)
    held = ds.eval_dataset()
    a, b = _episodes_of(ds), _episodes_of(held)
    assert not a & b and a | b == set(range(14))
    assert len(b) == 4  # round(14 * 0.3) = 4, spread over the 3 tasks (5, 5, 4 episodes): 1 or 2 each
    _, tasks = _episodes_table(root)
    per_task = [sum(1 for e in b if tasks[e][0] == t) for t in sorted({t[0] for t in tasks})]
    assert sorted(per_task) == [1, 1, 2]
    assert ds.num_frames + held.num_frames == EpisodicDataset(root).num_frames
    assert ds.num_episodes == 10 and held.num_episodes == 4


def test_bad_split_arguments_are_named(root):
    with pytest.raises(ValueError, match="split must be one of train, eval"):
        EpisodicDataset(root, eval_split=0.2, split="test")
    with pytest.raises(ValueError, match="needs an eval_split"):
        EpisodicDataset(root, split="eval")
    with pytest.raises(ValueError, match="fraction"):
        StreamingLeRobotDataset("x", root=root, eval_split=1.5)
    with pytest.raises(ValueError, match="no train episode"):  # one episode per task, all held out by LeRobot's rule
        EpisodicDataset(root, episodes=[0, 1, 2], eval_split=EvalSplit(0.1, rule="lerobot"))
    with pytest.raises(ValueError, match="without an eval_split"):
        EpisodicDataset(root).eval_dataset()


def _indices(batches) -> list[int]:
    return [int(i) for b in batches for i in b["index"]]


@pytest.mark.filterwarnings("ignore:streaming. world_size")
@pytest.mark.parametrize("workers", [0, 2])
def test_sides_are_the_same_on_every_world_size_and_worker_count(root, workers):
    split = EvalSplit(0.3, seed=5)
    full = EpisodicDataset(root, video_keys=[])

    def rows(eps):
        return {
            int(full.meta.episodes.dataset_from_index[e]) + j
            for e in eps
            for j in range(int(full.meta.episodes.length[e]))
        }

    for side in ("train", "eval"):
        want = rows(_episodes_of(EpisodicDataset(root, video_keys=[], eval_split=split, split=side)))
        for ws in (1, 2, 3):
            got = []
            for rank in range(ws):
                ds = EpisodicDataset(root, video_keys=[], eval_split=split, split=side)
                got += _indices(ds.loader(batch_size=4, num_workers=workers, rank=rank, world_size=ws, seed=1))
            assert set(got) == want, (side, ws)
            stream = []
            for rank in range(ws):
                ds = StreamingLeRobotDataset(
                    "x",
                    root=root,
                    video_keys=[],
                    eval_split=split,
                    split=side,
                    rank=rank,
                    world_size=ws,
                    episode_pool_size=2,
                )
                stream += _indices(ds.loader(batch_size=4, num_workers=workers, even_batches=False))
            assert sorted(stream) == sorted(want), (side, ws)


@pytest.mark.parametrize("workers", [0, 2])
def test_iterating_the_eval_side_leaves_training_resume_exact(root, workers):
    kw = dict(video_keys=[], eval_split=EvalSplit(0.25, seed=2))
    ds = EpisodicDataset(root, **kw)
    full = _indices(EpisodicDataset(root, **kw).loader(batch_size=5, num_workers=workers, seed=3))
    loader = ds.loader(batch_size=5, num_workers=workers, seed=3)
    head = []
    for b in loader:
        head += b["index"].tolist()
        if len(head) >= 15:
            break
    state = loader.state_dict()
    held = ds.eval_dataset()
    seen = _indices(held.loader(batch_size=5, num_workers=workers, shuffle=False))
    assert not set(seen) & set(full) and len(seen) == held.num_frames
    assert loader.state_dict() == state  # the training order did not move
    again = EpisodicDataset(root, **kw).loader(batch_size=5, num_workers=workers, seed=3)
    again.load_state_dict(state)
    assert head + _indices(again) == full
    # streaming: the eval side's epoch leaves the training side's stream state as it was
    s = StreamingLeRobotDataset("x", root=root, episode_pool_size=3, **kw)
    stream_full = _indices(
        StreamingLeRobotDataset("x", root=root, episode_pool_size=3, **kw).loader(batch_size=5, num_workers=workers)
    )
    first = []
    for b in s.loader(batch_size=5, num_workers=workers):
        first += b["index"].tolist()
        if len(first) >= 10:
            break
    before = s.state_dict()
    ev = s.eval_dataset()
    assert sorted(_indices(ev.loader(batch_size=5, num_workers=workers))) == sorted(seen)
    assert s.state_dict() == before and ev.state_dict()["epoch"] == 1
    resumed = StreamingLeRobotDataset("x", root=root, episode_pool_size=3, **kw)
    resumed.load_state_dict(before)
    assert first + _indices(resumed.loader(batch_size=5, num_workers=workers)) == stream_full


def test_eval_items_equal_the_full_datasets_items(root):
    full = LeRobotDataset("x", root=root)
    held = LeRobotDataset("x", root=root, eval_split=0.3).eval_dataset()
    for i in range(0, len(held), 5):
        item = held[i]
        want = full[int(item["index"])]
        assert all(torch.equal(want[k], item[k]) for k in want if k != "task") and want["task"] == item["task"]
    assert np.isin(held.rows.columns.episodes, np.arange(14)).all()


@pytest.mark.parametrize("fixture", ["lerobot-0.4.4", "lerobot_multifile_av1"])
@pytest.mark.parametrize("fraction", [0.1, 0.2, 0.35])
def test_lerobot_rule_on_datasets_lerobot_wrote(fixture, fraction):
    """LeRobot's own datasets (written by LeRobot 0.4.4's writer): its rule, computed here from their episodes
    tables, holds out the same episodes as the dataset's eval side, map-style and streaming."""
    from support import FIXTURES

    root = FIXTURES / fixture / "dataset"
    want_train, want_held = _lerobot_held_out(root, fraction)
    assert want_held and want_train
    split = EvalSplit(fraction, rule="lerobot")
    ds = LeRobotDataset("x", root=root, eval_split=split, video_keys=[])
    assert _episodes_of(ds) == want_train and _episodes_of(ds.eval_dataset()) == want_held
    stream = StreamingLeRobotDataset("x", root=root, eval_split=split, split="eval", video_keys=[])
    assert {int(i["episode_index"]) for i in stream} == want_held
