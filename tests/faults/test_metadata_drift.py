"""Metadata drift: a dataset whose data rows name task indices its tasks table lacks (here: a tasks table that lost
a row after the data was written, or a row edited to name an index past the table) loads in every mode, with one
`UnknownTaskWarning` per dataset naming the episodes and task indices, the documented task "" for those items,
`episodic validate` still reporting it, and ``on_unknown_task="raise"`` refusing it."""

from __future__ import annotations

import json
import re
import shutil
import warnings
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from episodic import LeRobotDataset, StreamingLeRobotDataset, UnknownTaskWarning
from episodic.datasets.mixture import MixtureDataset
from episodic.datasets.streaming_mixture import StreamingMixtureDataset
from episodic.format import DatasetFormatError
from episodic.mixture import preflight
from episodic.tools.validate import validate

from hostile_data import DATA, TASKS, _put, column_edit, drop_tasks_row, to_v21


def _reference_tasks(root: Path) -> dict[tuple[int, int], str]:
    """(episode, frame) -> the task text an item must carry, from the parquet files read with pyarrow alone: the
    tasks table's text for a task_index it holds, "" for one it lacks."""
    if (root / TASKS).exists():
        t = pq.read_table(root / TASKS)
        table = dict(zip(t.column("task_index").to_pylist(), t.column("__index_level_0__").to_pylist()))
        data = [pq.read_table(root / DATA)]
    else:  # v2.1
        rows = [json.loads(x) for x in (root / "meta/tasks.jsonl").read_text().splitlines()]
        table = {r["task_index"]: r["task"] for r in rows}
        data = [pq.read_table(p) for p in sorted((root / "data").rglob("*.parquet"))]
    out = {}
    for d in data:
        for e, f, t in zip(
            d.column("episode_index").to_pylist(),
            d.column("frame_index").to_pylist(),
            d.column("task_index").to_pylist(),
        ):
            out[(e, f)] = table.get(t, "")
    return out


def _unknown(root: Path) -> dict[int, set[int]]:
    """episode -> task indices the tasks table lacks, from the files."""
    if (root / TASKS).exists():
        known = set(pq.read_table(root / TASKS).column("task_index").to_pylist())
        data = [pq.read_table(root / DATA)]
    else:
        known = {json.loads(x)["task_index"] for x in (root / "meta/tasks.jsonl").read_text().splitlines()}
        data = [pq.read_table(p) for p in sorted((root / "data").rglob("*.parquet"))]
    out: dict[int, set[int]] = {}
    for d in data:
        for e, t in zip(d.column("episode_index").to_pylist(), d.column("task_index").to_pylist()):
            if t not in known:
                out.setdefault(e, set()).add(t)
    assert out, "the edit must leave rows naming a task the table lacks"
    return out


def _drift_warnings(caught) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, UnknownTaskWarning)]


def _names_all(message: str, unknown: dict[int, set[int]]) -> bool:
    return all(re.search(rf"\b{e} \({', '.join(map(str, sorted(ts)))}\)", message) for e, ts in unknown.items())


def _items_match(tasks, episodes, frames, want, drifted: bool = True) -> None:
    """The items' tasks, by (episode, frame), are the reference's (some "" when `drifted`, never otherwise)."""
    got = {(int(e), int(f)): t for e, f, t in zip(episodes, frames, tasks)}
    assert got and got == {k: want[k] for k in got}
    assert ("" in got.values()) == drifted and len(set(got.values())) > 1


def _dropped(small_root, copy_of) -> Path:
    root = copy_of(small_root)
    drop_tasks_row(root)  # tasks.parquet loses task 2, which episodes 2 and 5 use
    return root


EDITS = {
    "tasks row dropped": drop_tasks_row,
    "row past the table": column_edit(DATA, "task_index", lambda v: _put(v, len(v) - 1, 7)),
    "negative row": column_edit(DATA, "task_index", lambda v: _put(v, 3, -1)),
}


@pytest.mark.parametrize("edit", list(EDITS))
def test_map_style_loads_warns_once_and_gives_empty_task(small_root, copy_of, edit):
    root = copy_of(small_root)
    EDITS[edit](root)
    want, unknown = _reference_tasks(root), _unknown(root)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ds = LeRobotDataset("x", root=root)
        batch = ds.get_batch(np.arange(len(ds)))
        ds[0], ds[len(ds) - 1]
    msgs = _drift_warnings(caught)
    assert len(msgs) == 1 and str(root) in msgs[0] and _names_all(msgs[0], unknown), msgs
    assert len(ds) == len(want)
    _items_match(batch["task"], batch["episode_index"], batch["frame_index"], want)
    # the item's task_index stays the file's value
    assert set(int(t) for t in batch["task_index"]) >= {t for ts in unknown.values() for t in ts}


def test_v21_dataset_with_a_tasks_line_dropped(small_root, tmp_path):
    root = to_v21(small_root, tmp_path / "v21")
    lines = (root / "meta/tasks.jsonl").read_text().splitlines()
    (root / "meta/tasks.jsonl").write_text("\n".join(lines[:2]) + "\n")
    want, unknown = _reference_tasks(root), _unknown(root)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ds = LeRobotDataset("x", root=root)
    assert len(_drift_warnings(caught)) == 1 and _names_all(_drift_warnings(caught)[0], unknown)
    batch = ds.get_batch(np.arange(len(ds)))
    _items_match(batch["task"], batch["episode_index"], batch["frame_index"], want)
    assert any("task_index" in p for p in validate(str(root), progress=False).problems)


def test_a_dataloader_with_workers_gives_the_same_tasks(small_root, copy_of):
    root = _dropped(small_root, copy_of)
    want = _reference_tasks(root)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnknownTaskWarning)
        ds = LeRobotDataset("x", root=root, video_keys=[])
    got = []
    for b in torch.utils.data.DataLoader(ds, batch_size=16, shuffle=True, num_workers=2):
        got += list(zip(b["episode_index"].tolist(), b["frame_index"].tolist(), b["task"]))
    assert len(got) == len(want)
    _items_match([t for *_, t in got], [e for e, *_ in got], [f for _, f, _ in got], want)


def test_strict_option_refuses_and_bad_values_are_named(small_root, copy_of, tmp_path):
    root = _dropped(small_root, copy_of)
    message = r"file-000\.parquet: episode 2: column 'task_index' at frame 0 is 2: the tasks table has 2 task"
    with pytest.raises(DatasetFormatError, match=message):
        LeRobotDataset("x", root=root, on_unknown_task="raise")
    with pytest.raises(DatasetFormatError, match=message):
        ds = StreamingLeRobotDataset("x", root=root, on_unknown_task="raise", cache_dir=tmp_path, shuffle=False)
        list(ds)
    for make in (
        lambda: LeRobotDataset("x", root=root, on_unknown_task="ignore"),
        lambda: StreamingLeRobotDataset("x", root=root, on_unknown_task=True),
    ):
        with pytest.raises(ValueError, match="on_unknown_task must be one of warn, raise"):
            make()


def test_validate_still_reports_it(small_root, copy_of):
    root = _dropped(small_root, copy_of)
    report = validate(str(root), progress=False)
    assert not report.ok
    assert any(
        re.search(r"file-000\.parquet: episode 2: column 'task_index' .* is 2: the tasks table has 2 task", p)
        for p in report.problems
    ), report.problems


def test_streaming_loads_warns_once_over_many_reads(small_root, copy_of, tmp_path):
    root = _dropped(small_root, copy_of)
    want, unknown = _reference_tasks(root), _unknown(root)
    # one episode per read: the rows naming the lacking task come in separate reads, the warning still once
    ds = StreamingLeRobotDataset(
        "x", root=root, tabular_block=1, episode_pool_size=2, chunk_size=4, cache_dir=tmp_path, shuffle=False
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        items = list(ds)
    msgs = _drift_warnings(caught)
    assert len(msgs) == 1 and str(root) in msgs[0], msgs
    assert re.search(r"\b2 \(2\)", msgs[0])  # the first episode read that names it
    assert len(items) == len(want)
    _items_match(
        [i["task"] for i in items], [i["episode_index"] for i in items], [i["frame_index"] for i in items], want
    )
    assert set(unknown) == {2, 5}


def _mixture_spec(good: Path, drifted: Path, **options) -> dict:
    return {"entries": [{"source": str(good), "name": "good"}, {"source": str(drifted), "name": "drifted"}], **options}


def test_mixture_preflights_and_gives_empty_task(small_root, copy_of, tmp_path):
    drifted = _dropped(small_root, copy_of)
    want_good, want = _reference_tasks(small_root), _reference_tasks(drifted)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = preflight(_mixture_spec(small_root, drifted))
        assert report.ok and [e.status for e in report.entries] == ["ok", "ok"]
        assert any(p.entry == 1 and p.field == "roles.task" and p.severity == "warning" for p in report.problems)
        ds = MixtureDataset(report, cache_dir=tmp_path)
        batch = ds.get_batch(np.arange(len(ds)))
    msgs = _drift_warnings(caught)
    assert len(msgs) == 1 and "'drifted'" in msgs[0] and _names_all(msgs[0], _unknown(drifted)), msgs
    mine = np.asarray(batch["dataset_index"]) == 1
    _items_match(
        [t for t, m in zip(batch["task"], mine) if m], batch["episode_index"][mine], batch["frame_index"][mine], want
    )
    _items_match(
        [t for t, m in zip(batch["task"], mine) if not m],
        batch["episode_index"][~mine],
        batch["frame_index"][~mine],
        want_good,
        drifted=False,
    )
    # streaming: the same tasks
    sds = StreamingMixtureDataset(report, cache_dir=tmp_path, episode_pool_size=3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        items = [i for i in sds if int(i["dataset_index"]) == 1]
    assert len(_drift_warnings(caught)) == 1
    _items_match(
        [i["task"] for i in items], [i["episode_index"] for i in items], [i["frame_index"] for i in items], want
    )


def test_mixture_strict_option_refuses(small_root, copy_of, tmp_path):
    drifted = _dropped(small_root, copy_of)
    ds = MixtureDataset(_mixture_spec(small_root, drifted, on_unknown_task="raise"), cache_dir=tmp_path)
    flat = np.arange(len(ds))
    good = flat[ds.sampler.split(flat)[0] == 0]
    assert len(ds.get_batch(good[:4])["task"]) == 4  # the other entry works
    with pytest.raises(DatasetFormatError, match=r"episode 2: column 'task_index' at frame 0 is 2"):
        ds.get_batch(flat)
    shutil.rmtree(tmp_path)
