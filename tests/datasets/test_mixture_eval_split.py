"""Eval splits of mixtures, map-style and streaming: per entry and per task (the entries' episodes tables read here
with pyarrow / json), each side its own dataset with the whole mixture's item layout, the same sides on every
world size and worker count, shares and sizes per side (also `episodic mixture shares --split`), the training
side's resume untouched by an eval pass, every bad field of the spec's eval_split named."""

from __future__ import annotations

import glob
import json
import math
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from episodic.cli import main
from episodic.datasets.mixture import MixtureDataset
from episodic.datasets.streaming_mixture import StreamingMixtureDataset
from episodic.format.errors import MixtureSpecError
from episodic.mixture import MixtureSpec, preflight
from episodic.order.split_stratified import held_out_count
from episodic.testing.synthetic import mixture_spec

SIZE = (24, 40)


def _first_tasks(path: str) -> list[str]:
    """Each episode's first task, from the dataset's episodes table (v3.0 parquet with pyarrow, v2.1 jsonl)."""
    root = Path(path)
    files = sorted(glob.glob(str(root / "meta" / "episodes" / "*" / "*.parquet")))
    if files:
        rows = [r for f in files for r in pq.read_table(f, columns=["episode_index", "tasks"]).to_pylist()]
    else:
        rows = [json.loads(line) for line in (root / "meta" / "episodes.jsonl").read_text().splitlines() if line]
    rows.sort(key=lambda r: r["episode_index"])
    return [r["tasks"][0] if r["tasks"] else "" for r in rows]


@pytest.fixture(scope="module")
def spec_dict(synthetic):
    spec = mixture_spec(synthetic, delta_timestamps={"action": [0.0, 0.1]}, eval_split={"fraction": 0.3, "seed": 4})
    spec["entries"][2]["exclude_episodes"] = [0]
    return spec


@pytest.fixture(scope="module")
def report(spec_dict):
    return preflight(MixtureSpec.from_dict(spec_dict))


def _pairs(batches) -> set[tuple[int, int]]:
    return {(int(d), int(e)) for b in batches for d, e in zip(b["dataset_index"], b["episode_index"])}


def _sides(report, synthetic) -> tuple[set, set]:
    """(entry, episode) of each side, by the stratified rule's stated counts (checked here) and the report."""
    train, held = set(), set()
    for i, (entry, rep) in enumerate(zip(report.spec.entries, report.entries)):
        n = next(d.episodes for d in synthetic if d.path == entry.source)
        selected = [e for e in range(n) if e not in entry.exclude_episodes]
        assert rep.eval_episodes == held_out_count(len(selected), 0.3)
        assert rep.episodes + rep.eval_episodes == len(selected)
        from episodic.mixture.checking.entry_checks import entry_sides

        a, b = entry_sides(report.spec, entry, report.metadata[i])
        assert len(b) == rep.eval_episodes and not set(a) & set(b) and sorted([*a, *b]) == selected
        train |= {(i, int(e)) for e in a}
        held |= {(i, int(e)) for e in b}
    return train, held


def test_each_side_holds_its_episodes_in_the_whole_mixtures_layout(report, synthetic, tmp_path):
    train_pairs, held_pairs = _sides(report, synthetic)
    ds = MixtureDataset(report, image_size=SIZE, cache_dir=tmp_path)
    ev = ds.eval_dataset()
    assert ds.split == "train" and ev.split == "eval" and ev.report is not ds.report
    assert _pairs([ds.get_batch(np.arange(len(ds)))]) == train_pairs
    assert _pairs([ev.get_batch(np.arange(len(ev)))]) == held_pairs
    assert ds.features == ev.features  # the same keys, shapes and dtypes: a model evaluates on what it trains on
    assert ds.num_frames == sum(r.frames for r in report.entries)
    assert ev.num_frames == sum(r.eval_frames for r in report.entries)
    assert ev.num_episodes == len(held_pairs) and ds.num_episodes == len(train_pairs)
    # an entry without held-out episodes takes no part in the eval side
    none = [r.index for r in report.entries if r.eval_episodes == 0]
    assert [e.index for e in ev.layout.entries] == [r.index for r in report.entries if r.eval_episodes]
    assert all(ev.report.entries[i].status == "skipped" for i in none)
    # shares say what each side holds
    for side, d in (("train", ds), ("eval", ev)):
        table = d.shares()
        assert table["split"] == side and table["eval_split"] == {"fraction": 0.3, "rule": "stratified", "seed": 4}
        want = Counter(i for i, _ in (train_pairs if side == "train" else held_pairs))
        assert {e.index: row["episodes"] for e, row in zip(d.layout.entries, table["entries"])} == want
        assert sum(row["frames"] for row in table["entries"]) == d.num_frames
    # streaming: the same sides
    st = StreamingMixtureDataset(report, image_size=SIZE, cache_dir=tmp_path, split="eval", episode_pool_size=3)
    assert _pairs(st.loader(batch_size=8, num_workers=2)) <= held_pairs
    slots = st.epoch_slots(0)
    assert {(st.layout.entries[e].index, int(x)) for e, x in zip(slots.entry, slots.episode)} <= held_pairs
    assert st.num_frames == ev.num_frames and st.shares()["split"] == "eval"


@pytest.mark.parametrize("workers", [0, 2])
def test_sides_are_the_same_on_every_world_size_and_worker_count(report, synthetic, tmp_path, workers):
    train_pairs, held_pairs = _sides(report, synthetic)
    for ws in (1, 2, 3):
        for rank in range(ws):
            for split, want in (("train", train_pairs), ("eval", held_pairs)):
                d = MixtureDataset(report, image_size=SIZE, cache_dir=tmp_path, split=split, seed=rank)
                got = _pairs(d.loader(batch_size=8, num_workers=workers, rank=rank, world_size=ws))
                assert got <= want and len(got) > len(want) // 2, (split, ws, rank)
                s = StreamingMixtureDataset(
                    report,
                    image_size=SIZE,
                    cache_dir=tmp_path,
                    split=split,
                    rank=rank,
                    world_size=ws,
                    episode_pool_size=2,
                )
                slots = s.epoch_slots(0)
                assert {(s.layout.entries[e].index, int(x)) for e, x in zip(slots.entry, slots.episode)} <= want


def _ids(batches) -> list[tuple[int, int]]:
    return [(int(d), int(i)) for b in batches for d, i in zip(b["dataset_index"], b["index"])]


@pytest.mark.parametrize("workers", [0, 2])
def test_an_eval_pass_leaves_the_training_sides_resume_exact(report, tmp_path, workers):
    kw = dict(image_size=SIZE, cache_dir=tmp_path, seed=2)
    full = _ids(MixtureDataset(report, **kw).loader(batch_size=8, num_workers=workers))
    ds = MixtureDataset(report, **kw)
    loader = ds.loader(batch_size=8, num_workers=workers)
    head = []
    for b in loader:
        head.append(b)
        if len(head) == 4:
            break
    state = loader.state_dict()
    ev = ds.eval_dataset()
    assert set(_ids(ev.loader(batch_size=8, num_workers=workers))).isdisjoint(full)
    assert loader.state_dict() == state
    again = MixtureDataset(report, **kw).loader(batch_size=8, num_workers=workers)
    again.load_state_dict(state)
    assert _ids(head) + _ids(again) == full
    # streaming
    skw = dict(image_size=SIZE, cache_dir=tmp_path, seed=2, episode_pool_size=3)
    sfull = _ids(StreamingMixtureDataset(report, **skw).loader(batch_size=8, num_workers=workers))
    s = StreamingMixtureDataset(report, **skw)
    shead = []
    for b in s.loader(batch_size=8, num_workers=workers):
        shead.append(b)
        if len(shead) == 3:
            break
    before = s.state_dict()
    list(s.eval_dataset().loader(batch_size=8, num_workers=workers))
    assert s.state_dict() == before
    resumed = StreamingMixtureDataset(report, **skw)
    resumed.load_state_dict(before)
    assert _ids(shead) + _ids(resumed.loader(batch_size=8, num_workers=workers)) == sfull


def test_lerobot_rule_per_entry_holds_out_lerobots_episodes(synthetic, tmp_path):
    spec = mixture_spec(synthetic, eval_split={"fraction": 0.25, "rule": "lerobot"}, on_error="skip")
    spec["entries"][3]["episodes"] = [2, 0, 1]  # list order decides which are "last"
    report = preflight(MixtureSpec.from_dict(spec))
    for i, (entry, rep) in enumerate(zip(report.spec.entries, report.entries)):
        tasks = _first_tasks(entry.source)
        base = list(entry.episodes) if entry.episodes is not None else list(range(len(tasks)))
        groups: dict[str, list[int]] = {}
        for e in base:
            groups.setdefault(tasks[e], []).append(e)
        held = {e for g in groups.values() for e in g[len(g) - math.ceil(len(g) * 0.25) :]}
        assert rep.eval_episodes == len(held)
        if len(held) == len(base):  # LeRobot refuses a split that leaves nothing to train on: so does preflight
            assert rep.status == "skipped" and any(p.field == "eval_split" for p in report.problems_of(i))
            continue
        assert rep.status == "ok" and rep.episodes == len(base) - len(held)
        ev = MixtureDataset(report, image_size=SIZE, cache_dir=tmp_path, split="eval")
        slot = next(e.slot for e in ev.layout.entries if e.index == i)
        rows = ev.engines.rows(slot)
        assert set(rows.columns.episodes.tolist()) == held


def test_mixture_shares_command_counts_a_side(spec_dict, report, tmp_path, capsys):
    (tmp_path / "mix.json").write_text(json.dumps(spec_dict))
    out = tmp_path / "shares.json"
    assert (
        main(
            [
                "mixture",
                "shares",
                str(tmp_path / "mix.json"),
                "--samples",
                "3000",
                "--split",
                "eval",
                "--json",
                str(out),
                "-o",
                str(tmp_path / "shares.png"),
                "-q",
            ]
        )
        == 0
    )
    table = json.loads(out.read_text())
    assert table["split"] == "eval" and table["items"] == 3000
    assert sum(e["episodes"] for e in table["entries"]) == sum(r.eval_episodes for r in report.entries)
    assert "eval side" in capsys.readouterr().out
    (tmp_path / "plain.json").write_text(json.dumps({k: v for k, v in spec_dict.items() if k != "eval_split"}))
    with pytest.raises(SystemExit, match="needs the mixture spec's eval_split"):
        main(
            ["mixture", "shares", str(tmp_path / "plain.json"), "--split", "eval", "-o", str(tmp_path / "x.png"), "-q"]
        )


def test_bad_eval_split_fields_are_named_all_at_once(spec_dict):
    with pytest.raises(MixtureSpecError) as e:
        MixtureSpec.from_dict({**spec_dict, "eval_split": {"fraction": 1.5, "rule": "last"}})
    assert len([p for p in e.value.problems if "eval_split" in p]) == 2
    with pytest.raises(MixtureSpecError, match="unknown field"):
        MixtureSpec.from_dict({**spec_dict, "eval_split": {"fraction": 0.1, "ratio": 0.1}})
    spec = MixtureSpec.from_dict({**spec_dict, "eval_split": 0.2})
    assert MixtureSpec.from_dict(spec.to_dict()).eval_split == spec.eval_split
    with pytest.raises(ValueError, match="needs the mixture spec's eval_split"):
        MixtureDataset({k: v for k, v in spec_dict.items() if k != "eval_split"}, split="eval", image_size=SIZE)


def test_both_sides_normalise_with_the_training_sides_statistics(report, tmp_path, monkeypatch):
    monkeypatch.setenv("EPISODIC_CACHE", str(tmp_path / "cache"))
    ds = MixtureDataset(report, image_size=SIZE, cache_dir=tmp_path)
    ev = ds.eval_dataset()
    train_stats = {e.index: s for e, s in zip(ds.layout.entries, ds.entry_stats())}
    for e, s in zip(ev.layout.entries, ev.entry_stats()):
        want = train_stats[e.index]
        assert int(want["action"]["count"][0]) == report.entries[e.index].frames  # the training side's rows
        for stat in ("mean", "std", "min", "max"):
            assert np.array_equal(s["action"][stat], want["action"][stat])
