"""String features (`{"dtype": "string", "shape": [1]}`, written by DatasetWriter) come back as LeRobot 0.4.4
returns them: a `str` in each item (its `hf_transform_to_torch` / `item_to_torch` leave strings as they are), a
list of `str` in a DataLoader batch (what `default_collate` makes of strings) -- map-style, with and without
DataLoader workers, `get_batch`, and streaming. Windows over a string key are refused (LeRobot's
`torch.stack` cannot stack strings). The reference is the strings written."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from episodic import LeRobotDataset
from episodic.datasets.streaming import StreamingLeRobotDataset
from episodic.format.errors import DatasetFormatError
from episodic.writer import DatasetWriter

LENGTHS = (7, 11, 5, 9)
FPS = 10


def _note(ep: int, frame: int) -> str:
    # not ASCII, of varying length, one empty value: every string must come back exactly
    return "" if (ep, frame) == (1, 3) else f"ep{ep} f{frame} {'✓' * (frame % 3)} grüß {'x' * (ep * frame % 7)}"


@pytest.fixture(scope="module")
def text_root(tmp_path_factory) -> Path:
    """4 episodes with a string feature, a state vector and one small camera, several data files."""
    root = tmp_path_factory.mktemp("strings") / "ds"
    w = DatasetWriter(
        root,
        fps=FPS,
        features={
            "observation.state": {"dtype": "float32", "shape": [3]},
            "note": {"dtype": "string", "shape": [1]},
            "observation.images.top": {"dtype": "video", "shape": [32, 32, 3]},
        },
        data_files_size_in_mb=0.001,
    )
    rng = np.random.default_rng(0)
    for ep, n in enumerate(LENGTHS):
        w.add_episode(
            {
                "observation.state": rng.random((n, 3), dtype=np.float32),
                "note": np.array([_note(ep, f) for f in range(n)], dtype=object),
                "observation.images.top": rng.integers(0, 255, (n, 32, 32, 3), dtype=np.uint8),
            },
            task=f"task {ep}",
        )
    w.finalize()
    return root


def _expected() -> list[str]:
    return [_note(ep, f) for ep, n in enumerate(LENGTHS) for f in range(n)]


def test_map_style_items_hold_str(text_root):
    ds = LeRobotDataset("x", root=text_root)
    want = _expected()
    assert len(ds) == len(want)
    for i in range(len(ds)):
        item = ds[i]
        assert type(item["note"]) is str and item["note"] == want[i], i
    keys = list(ds[0])
    assert keys.index("note") == keys.index("observation.state") + 1  # in its place: info order
    batch = ds.get_batch(np.array([9, 2, 20]))
    assert batch["note"] == [want[9], want[2], want[20]]


def test_episode_subset(text_root):
    ds = LeRobotDataset("x", root=text_root, episodes=[2, 0], video_keys=[])
    want = [_note(ep, f) for ep in (0, 2) for f in range(LENGTHS[ep])]
    assert [ds[i]["note"] for i in range(len(ds))] == want


@pytest.mark.parametrize("workers", [0, 2])
def test_dataloader_batches_are_lists_of_str(text_root, workers):
    ds = LeRobotDataset("x", root=text_root, delta_timestamps={"observation.state": [-1 / FPS, 0.0]})
    want = _expected()
    loader = torch.utils.data.DataLoader(ds, batch_size=4, shuffle=False, num_workers=workers)
    got = []
    for batch in loader:
        assert isinstance(batch["note"], list) and all(type(s) is str for s in batch["note"])
        assert batch["observation.images.top"].shape[0] == len(batch["note"])
        got += batch["note"]
        assert [want[int(i)] for i in batch["index"]] == batch["note"]
    assert got == want


def test_batches_of_other_items_collate_strings_like_default_collate(text_root):
    # items that are not exactly one batch's (a sampler's own order) go through torch's own collate
    ds = LeRobotDataset("x", root=text_root, video_keys=[])
    want = _expected()
    order = [5, 30, 0, 17, 8]
    loader = torch.utils.data.DataLoader(ds, batch_size=5, sampler=order)
    (batch,) = list(loader)
    assert batch["note"] == [want[i] for i in order]


@pytest.mark.parametrize("workers", [0, 2])
def test_streaming_items_and_batches(text_root, workers):
    want = _expected()
    ds = StreamingLeRobotDataset("x", root=text_root, episode_pool_size=2, chunk_size=3)
    if workers == 0:
        items = list(ds)
        assert all(type(it["note"]) is str for it in items)
        assert sorted((int(it["index"]), it["note"]) for it in items) == list(enumerate(want))
    got = []
    for batch in ds.loader(batch_size=4, num_workers=workers):
        assert isinstance(batch["note"], list) and all(type(s) is str for s in batch["note"])
        got += zip(batch["index"].tolist(), batch["note"])
    assert sorted(got) == list(enumerate(want))


@pytest.mark.parametrize("cls", [LeRobotDataset, StreamingLeRobotDataset])
def test_windows_over_a_string_key_are_refused(text_root, cls):
    with pytest.raises(ValueError, match=r"delta_timestamps for string feature\(s\) \['note'\]"):
        cls("x", root=text_root, delta_timestamps={"note": [-1 / FPS, 0.0]})


def test_a_string_feature_of_another_shape_is_refused_by_name(text_root, copy_of):
    root = copy_of(text_root)
    info = json.loads((root / "meta/info.json").read_text())
    info["features"]["note"]["shape"] = [2]
    (root / "meta/info.json").write_text(json.dumps(info))
    with pytest.raises(
        DatasetFormatError,
        match=r"info.json: string feature 'note' has shape \[2\]; only shape "
        r"\[1\]",
    ):
        LeRobotDataset("x", root=root)


def _mixture_report(root: Path, **roles):
    from episodic.mixture import preflight

    return preflight(
        {
            "entries": [
                {
                    "source": str(root),
                    "name": "a",
                    "roles": {"state": "observation.state", "action": None, "top": "observation.images.top", **roles},
                }
            ]
        }
    )


def test_a_mixture_reads_a_string_feature_only_as_its_task_role(text_root, tmp_path):
    from episodic.datasets.mixture import MixtureDataset
    from episodic.datasets.streaming_mixture import StreamingMixtureDataset

    want = _expected()
    plain = MixtureDataset(_mixture_report(text_root), image_size=(32, 32), cache_dir=tmp_path / "a")
    batch = plain.get_batch(np.arange(len(want)))
    assert "note" not in batch and batch["task"] == [f"task {int(e)}" for e in batch["episode_index"]]
    report = _mixture_report(text_root, task="note")
    batch = MixtureDataset(report, image_size=(32, 32), cache_dir=tmp_path / "b").get_batch(np.arange(len(want)))
    assert batch["task"] == [want[int(i)] for i in batch["index"]]
    got = []
    for b in StreamingMixtureDataset(report, image_size=(32, 32), cache_dir=tmp_path / "c").loader(batch_size=4):
        got += zip(b["index"].tolist(), b["task"])
    assert sorted(got) == list(enumerate(want))


def test_a_mixture_entry_never_reads_an_unmapped_string_feature(text_root, copy_of, tmp_path):
    # a string feature items could not hold (shape [2]) does not stop an entry that does not map it
    from episodic.datasets.mixture import MixtureDataset

    root = copy_of(text_root)
    info = json.loads((root / "meta/info.json").read_text())
    info["features"]["note"]["shape"] = [2]
    (root / "meta/info.json").write_text(json.dumps(info))
    batch = MixtureDataset(_mixture_report(root), image_size=(32, 32), cache_dir=tmp_path).get_batch(np.arange(3))
    assert batch["observation.state"].shape[0] == 3
