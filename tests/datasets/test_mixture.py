"""MixtureDataset over real tiny heterogeneous datasets: every entry's items equal its single dataset's items
after the documented mapping, resize and padding; default collate across entries; a real DataLoader with 2 workers;
exact and elastic resume; realised shares; unmapped cameras never opened."""

from __future__ import annotations

import re
from collections import Counter

import numpy as np
import pytest
import torch

from episodic import EpisodicDataset
from episodic.datasets.mixture import MixtureDataset
from episodic.format.errors import EpisodeIndexError, MissingFileError
from episodic.mixture import MixtureSpec, preflight
from episodic.mixture.layout import camera_key
from episodic.testing.synthetic import mixture_spec
from episodic.video.decoder_cache import default_cache_size

SIZE = (24, 40)  # the synthetic cameras are 16x32, 24x32, 32x32 and 32x48


@pytest.fixture(scope="module")
def spec(synthetic):
    spec = mixture_spec(
        synthetic,
        delta_timestamps={"action": [0.0, 0.1, 0.2], "state": [-0.1, 0.0]},
        weighting={"rule": "temperature", "alpha": 0.5},
    )
    e = spec["entries"]
    e[6]["roles"] = {
        "front": synthetic[6].cameras[2],
        "wrist": synthetic[6].cameras[0],
        "state": synthetic[6].state_key,
        "action": "action",
    }  # 2 of its 4 cameras, under other roles
    e[0]["state_indices"] = [4, 0, 2]
    e[1]["action_indices"] = [1]
    e[1]["tolerance_s"] = 0.001
    e[2]["exclude_episodes"] = [0]
    e[3]["delta_timestamps"] = {"action": [0.0, 0.05, 0.1], "state": [-0.05, 0.0]}  # its own windows, same lengths
    roles = Counter(r for x in e for r in x["roles"] if r not in ("state", "action"))
    spec["delta_timestamps"][roles.most_common(1)[0][0]] = [-0.1, 0.0]  # a windowed camera role
    e[3]["delta_timestamps"][roles.most_common(1)[0][0]] = [-0.1, 0.0]
    return MixtureSpec.from_dict(spec)


@pytest.fixture(scope="module")
def report(spec):
    return preflight(spec)


@pytest.mark.parametrize("resize_mode", ["stretch", "letterbox"])
def test_items_equal_each_entrys_single_dataset_items(report, synthetic, tmp_path, resize_mode):
    ds = MixtureDataset(report, image_size=SIZE, resize_mode=resize_mode, cache_dir=tmp_path)
    layout = ds.layout
    refs, flats = [], []
    for e in layout.entries:
        entry = report.spec.entries[e.index]
        d = next(x for x in synthetic if x.path == entry.source)
        episodes = [k for k in range(d.episodes) if k not in entry.exclude_episodes]
        ref = EpisodicDataset(
            d.path,
            episodes=episodes,
            delta_timestamps=e.delta_timestamps(),
            tolerance_s=e.tolerance_s,
            video_keys=list(e.cameras.values()),
            image_size=SIZE,
            resize_mode=resize_mode,
        )
        want = ref.get_batch(np.arange(len(ref)))
        refs.append((e, d, want))
        flats.append(ds.sampler.flat_index(e.slot, want["index"].numpy()))
    rng = np.random.default_rng(0)
    allflat = np.concatenate(flats)
    perm = rng.permutation(len(allflat))  # entries mixed in one batch, in any order
    got_all = ds.get_batch(allflat[perm])
    inverse = np.argsort(perm)
    start = 0
    for (e, _d, want), flat in zip(refs, flats):
        sel = inverse[start : start + len(flat)]
        start += len(flat)
        got = {k: (v[sel] if torch.is_tensor(v) else [v[i] for i in sel]) for k, v in got_all.items()}
        n = len(flat)
        for role in layout.cameras:
            key, pad = camera_key(role), f"{camera_key(role)}_is_pad"
            if role in e.cameras:
                src = e.cameras[role]
                assert torch.equal(got[key], want[src]), (e.name, role)
                want_pad = want[f"{src}_is_pad"] if role in layout.windows else torch.zeros(n, dtype=torch.bool)
                assert torch.equal(got[pad], want_pad), (e.name, role)
            else:
                assert not got[key].any() and got[pad].all(), (e.name, role)
        for key, src, indices, dim in (
            ("observation.state", e.state_key, e.state_indices, e.state_dim),
            ("action", e.action_key, e.action_indices, e.action_dim),
        ):
            values = want[src] if indices is None else want[src][..., list(indices)]
            assert torch.equal(got[key][..., :dim], values.float()), (e.name, key)
            assert not got[key][..., dim:].any()
            mask = torch.zeros(n, got[key].shape[-1], dtype=torch.bool)
            mask[:, :dim] = True
            assert torch.equal(got[f"{key}_mask"], mask)
            assert torch.equal(got[f"{key}_is_pad"], want[f"{src}_is_pad"])
        for key in ("timestamp", "frame_index", "episode_index", "index"):
            assert torch.equal(got[key], want[key]), (e.name, key)
        assert got["task"] == want["task"] and got["dataset_name"] == [e.name] * n
        assert (got["dataset_index"] == e.index).all()
    assert start == len(allflat)


def test_default_collate_across_entries(report, tmp_path):
    ds = MixtureDataset(report, image_size=SIZE, cache_dir=tmp_path)
    flats = ds.sampler.indices_at(np.arange(12), 0)
    items = [ds[int(i)] for i in flats]
    assert len({int(x["dataset_index"]) for x in items}) > 3
    collated = torch.utils.data.default_collate(items)
    batch = ds.get_batch(flats)
    assert collated.keys() == batch.keys()
    for k, v in batch.items():
        assert torch.equal(collated[k], v) if torch.is_tensor(v) else collated[k] == v, k
    assert batch["observation.images." + ds.layout.cameras[0]].dtype == torch.float32
    u8 = MixtureDataset(report, image_size=SIZE, cache_dir=tmp_path, return_uint8=True).get_batch(flats)
    key = camera_key(ds.layout.cameras[0])
    assert u8[key].dtype == torch.uint8 and torch.equal(u8[key].float() / 255, batch[key])


def _ids(batches) -> list[tuple[int, int]]:
    return [(int(d), int(i)) for b in batches for d, i in zip(b["dataset_index"], b["index"])]


def test_loader_with_two_workers_resumes_exactly_and_counts_shares(report, tmp_path):
    ds = MixtureDataset(report, seed=5, image_size=SIZE, cache_dir=tmp_path)
    loader = ds.loader(batch_size=16, num_workers=2)
    full = list(loader)  # one epoch
    assert loader.state_dict()["epoch"] == 1 and loader.state_dict()["consumed"] == 0
    flat = np.concatenate(list(ds.batch_sampler(16)))  # the epoch, its last batch padded from its start
    slot, rows = ds.sampler.split(flat)
    index_of = np.asarray([e.index for e in ds.layout.entries])
    assert _ids(full) == list(zip(index_of[slot].tolist(), rows.tolist()))  # the order, exactly
    # realised shares: the workers' counts reach the parent; one whole epoch is within the quota of the targets
    shares = ds.stats()["shares"]
    seen = Counter(d for d, _ in _ids(full))
    assert [x["items"] for x in shares["entries"]] == [seen[e.index] for e in ds.layout.entries]
    assert shares["items"] == len(flat) < len(ds.sampler) + 16
    head_counts = np.bincount(slot[: len(ds.sampler)], minlength=len(ds.layout.entries))  # the epoch without padding
    assert (np.abs(head_counts - len(ds.sampler) * ds.target_shares) < 3).all()
    assert abs(sum(g["realised"] for g in shares["groups"]) - 1) < 1e-9
    # stop after 7 batches, resume in a new dataset and loader (2 workers): the rest of the epoch, exactly
    ds2 = MixtureDataset(report, seed=5, image_size=SIZE, cache_dir=tmp_path)
    first = ds2.loader(batch_size=16, num_workers=2)
    head = []
    for batch in first:
        head.append(batch)
        if len(head) == 7:
            break
    state = first.state_dict()
    assert state["consumed"] == 7 * 16 and "mixture" in state
    ds3 = MixtureDataset(report, seed=5, image_size=SIZE, cache_dir=tmp_path)
    resumed = ds3.loader(batch_size=16, num_workers=2)
    resumed.load_state_dict(state)
    tail = list(resumed)
    assert _ids(head) + _ids(tail) == _ids(full)
    key = camera_key(ds.layout.cameras[0])
    assert torch.equal(tail[0][key], full[7][key])
    # elastic: the same state on 2 ranks; each global step is rank 0's batch then rank 1's
    ranks = [
        MixtureDataset(report, seed=5, image_size=SIZE, cache_dir=tmp_path).loader(batch_size=8, rank=r, world_size=2)
        for r in range(2)
    ]
    for r in ranks:
        r.load_state_dict(state)
    steps = [list(r) for r in ranks]
    assert len(steps[0]) == len(steps[1])
    merged = [x for a, b in zip(*steps) for x in _ids([a]) + _ids([b])]
    rest = _ids(full)[7 * 16 :]
    assert merged[: len(rest)] == rest


def test_unmapped_cameras_are_never_opened(report, synthetic, tmp_path):
    ds = MixtureDataset(report, image_size=SIZE, cache_dir=tmp_path, decoder_cache_size=1000)  # none closed
    ds.get_batch(np.unique(ds.sampler.indices_at(np.arange(len(ds.sampler)), 0)))  # every frame of the epoch
    opened: dict = {}
    for path in ds.decoders._readers:
        d = next(x for x in synthetic if path.startswith(x.path + "/"))
        opened.setdefault(d.path, set()).add(re.search(r"observation\.images\.[a-z]+", path).group(0))
    for e in ds.layout.entries:
        assert opened[report.spec.entries[e.index].source] == set(e.cameras.values()), e.name
    assert len(ds.layout.entries[6].cameras) == 2 < len(synthetic[6].cameras)  # 2 of its 4 cameras mapped
    spec = ds.engines.spec(0)  # and the entries' columns: only what items need
    assert not any(k.startswith("observation.images") for k in spec.data_keys)


def test_bad_indices(report, tmp_path):
    ds = MixtureDataset(report, image_size=SIZE, cache_dir=tmp_path)
    with pytest.raises(IndexError, match="out of range"):
        ds.get_batch([len(ds)])
    with pytest.raises(TypeError, match="integers"):
        ds.get_batch(np.array([1.5]))
    e = ds.layout.entries[2]  # its episode 0 is excluded: no flat index names its rows
    with pytest.raises(IndexError, match=f"entry '{e.name}': row 0 is not one of its kept frames"):
        ds.sampler.flat_index(e.slot, 0)
    with pytest.raises(EpisodeIndexError, match=f"entry '{e.name}': row 0 is not in a selected episode"):
        ds.engines.positions(e.slot, [0])
    one = np.array([e.slot])  # a row of each of few entries: positions_of's pair-by-pair path says the same
    with pytest.raises(EpisodeIndexError, match=f"entry '{e.name}': row 0 is not in a selected episode"):
        ds.engines.positions_of(one, np.array([0]), one, np.array([0]))


def test_positions_of_equals_positions_per_entry(report, tmp_path):
    """Both of positions_of's paths (pair by pair, and per entry) give each entry's `positions`."""
    ds = MixtureDataset(report, image_size=SIZE, cache_dir=tmp_path)
    rng = np.random.default_rng(0)
    flat = rng.integers(0, len(ds), 40)
    for sample in (flat[:6], np.repeat(flat[:3], 5)):  # distinct entries; few entries, several rows each
        slots, rows = ds.sampler.split(sample)
        used, part = np.unique(slots, return_inverse=True)
        want = [int(ds.engines.positions(int(s), [int(r)])[0]) for s, r in zip(slots, rows)]
        assert ds.engines.positions_of(slots, rows, used, part.reshape(-1)).tolist() == want


def test_skipped_entries_never_appear_and_items_keep_spec_indices(report, tmp_path):
    spec = report.spec.to_dict()
    spec["entries"][1]["source"] = str(tmp_path / "no_such_dataset")
    spec["entries"][4]["roles"]["state"] = "observation.nope"
    skipped = preflight(MixtureSpec.from_dict(spec), on_error="skip")
    assert skipped.skipped == [spec["entries"][1]["name"], spec["entries"][4]["name"]]
    ds = MixtureDataset(skipped, image_size=SIZE, cache_dir=tmp_path)
    assert [e.index for e in ds.layout.entries] == [i for i in range(len(spec["entries"])) if i not in (1, 4)]
    batch = ds.get_batch(ds.sampler.indices_at(np.arange(len(ds.sampler)), 0))
    assert set(batch["dataset_index"].tolist()) == {e.index for e in ds.layout.entries}
    assert ds.loader(batch_size=4).state_dict()["mixture"]["skipped"] == skipped.skipped


def test_an_entry_without_its_data_files_is_a_named_error_at_its_first_item(synthetic, tmp_path):
    import shutil

    meta_only = tmp_path / "meta_only"
    shutil.copytree(f"{synthetic[1].path}/meta", meta_only / "meta")  # what preflight downloads of a Hub dataset
    spec = mixture_spec(synthetic[:3])
    spec["entries"][1]["source"] = str(meta_only)
    ds = MixtureDataset(preflight(spec), image_size=SIZE, cache_dir=tmp_path)  # built: no data file read
    ds.get_batch([int(ds.sampler.kept_base[0])])  # the other entries work
    with pytest.raises(MissingFileError, match=r"data file not found \(holds episodes"):
        ds.get_batch([int(ds.sampler.kept_base[1])])


def test_a_camera_in_two_roles_fills_both(synthetic, tmp_path):
    spec = mixture_spec(synthetic[:3], delta_timestamps={"action": [0.0, 0.1]})
    cam = synthetic[1].cameras[0]
    spec["entries"][1]["roles"] = {"front": cam, "wrist": cam, "state": synthetic[1].state_key, "action": "action"}
    ds = MixtureDataset(preflight(spec), image_size=SIZE, cache_dir=tmp_path)
    e = ds.layout.entries[1]
    ref = EpisodicDataset(synthetic[1].path, delta_timestamps=e.delta_timestamps(), video_keys=[cam], image_size=SIZE)
    want = ref.get_batch(np.arange(len(ref)))
    flat = ds.sampler.flat_index(1, want["index"].numpy())
    other = ds.sampler.kept_base[0] + np.arange(3)  # another entry's rows in the same batch
    got = ds.get_batch(np.concatenate([other, flat[::-1]]))
    for role in ("front", "wrist"):
        assert torch.equal(got[camera_key(role)][3:], want[cam].flip(0)), role
        assert not got[f"{camera_key(role)}_is_pad"][3:].any()


def test_map_style_keeps_one_decoder_per_video_file(report, tmp_path):
    """Random access over a mixture touches every entry's files: by default each file is opened once per process
    (within the memory budget), never reopened batch after batch."""
    ds = MixtureDataset(report, image_size=SIZE, cache_dir=tmp_path)
    files = ds.engines.video_files()
    total = sum(n for _, _, n in files)
    assert len(files) == sum(len([k for k in e.cameras.values() if "images" in k]) for e in ds.layout.entries)
    assert ds.decoders.max_open == max(32, total)
    order = ds.sampler.indices_at(np.arange(len(ds.sampler)), 0)
    for start in range(0, len(order), 16):  # an epoch in batches of 16, twice
        ds.get_batch(order[start : start + 16])
    for start in range(0, len(order), 16):
        ds.get_batch(order[start : start + 16])
    s = ds.decoders.stats()
    assert s["misses"] == total and s["evictions"] == 0 and s["open"] == total
    # the budget: as many readers as its estimate allows, at least the minimum
    rule = ds.engines.decoder_cache_rule()
    assert default_cache_size(rule.files, budget_bytes=1) == 32
    assert default_cache_size(rule.files, budget_bytes=1 << 40, minimum=1) == total
    few = default_cache_size(rule.files, budget_bytes=1 << 20, minimum=1)
    assert 1 <= few < total
    assert MixtureDataset(report, image_size=SIZE, cache_dir=tmp_path, decoder_cache_size=7).decoders.max_open == 7


def test_small_entries_columns_in_ram_large_ones_memory_mapped(report, tmp_path):
    """Entries under `mmap_min_bytes` of columns (default 64 KiB) are read into RAM, no file written; mapped
    entries (here: all, with 0) give the same items."""
    ram = MixtureDataset(report, image_size=SIZE, cache_dir=tmp_path / "a")
    mapped = MixtureDataset(report, image_size=SIZE, cache_dir=tmp_path / "b", mmap_min_bytes=0)
    flats = ram.sampler.indices_at(np.arange(64), 0)
    a, b = ram.get_batch(flats), mapped.get_batch(flats)
    assert a.keys() == b.keys() and all(torch.equal(v, b[k]) if torch.is_tensor(v) else v == b[k] for k, v in a.items())
    assert ram.engines.built == mapped.engines.built > 3
    assert not (tmp_path / "a").exists()  # nothing written for the tiny synthetic entries
    assert len(list((tmp_path / "b" / "tabular").rglob("*.npy"))) >= 5 * mapped.engines.built


def test_null_removes_a_role_and_its_default(small_root, tmp_path):
    """``roles: {state: null}`` leaves the entry without state although its dataset has ``observation.state`` (the
    default); ``action: null``, ``task: null`` and every camera role null likewise (no camera defaults then)."""
    spec = {
        "entries": [
            {"source": str(small_root), "name": "full"},
            {"source": str(small_root), "name": "no-state", "roles": {"state": None}},
            {
                "source": str(small_root),
                "name": "bare",
                "roles": {"action": None, "task": None, "top": None, "wrist": None},
            },
        ]
    }
    report = preflight(spec)
    facts = {e.name: e for e in report.entries}
    assert facts["full"].state_key == "observation.state" and facts["full"].state_dim > 0
    assert facts["no-state"].state_key is None and facts["no-state"].state_dim == 0
    assert facts["no-state"].action_key == "action" and set(facts["no-state"].cameras) == {"top", "wrist"}
    assert facts["bare"].action_key is None and facts["bare"].cameras == {} and facts["bare"].task_key is None
    assert facts["bare"].state_key == "observation.state"
    ds = MixtureDataset(report, cache_dir=tmp_path)
    batch = ds.get_batch(np.arange(len(ds)))
    ref = EpisodicDataset(str(small_root)).get_batch(np.arange(len(EpisodicDataset(str(small_root), video_keys=[]))))
    name = np.asarray(batch["dataset_name"])
    for entry, has in (
        ("full", {"state", "action", "task", "top"}),
        ("no-state", {"action", "task", "top"}),
        ("bare", {"state"}),
    ):
        rows = np.flatnonzero(name == entry)
        idx = batch["index"][rows].numpy()
        assert sorted(idx.tolist()) == list(range(len(ref["index"])))
        for role, key, src in (("state", "observation.state", "observation.state"), ("action", "action", "action")):
            if role in has:
                assert torch.equal(batch[key][rows], ref[src][idx]) and batch[f"{key}_mask"][rows].all(), (entry, role)
            else:
                assert not batch[key][rows].any() and not batch[f"{key}_mask"][rows].any(), (entry, role)
        tasks = [batch["task"][r] for r in rows]
        assert tasks == ([ref["task"][i] for i in idx] if "task" in has else [""] * len(rows)), entry
        cam = "observation.images.top"
        if "top" in has:
            assert torch.equal(batch[cam][rows], ref[cam][idx]) and not batch[f"{cam}_is_pad"][rows].any()
        else:
            assert not batch[cam][rows].any() and batch[f"{cam}_is_pad"][rows].all()
    from episodic.datasets.streaming_mixture import StreamingMixtureDataset

    streamed = [i for i in StreamingMixtureDataset(report, cache_dir=tmp_path) if i["dataset_name"] != "full"]
    assert len(streamed) == 2 * len(ref["index"])
    for i in streamed:
        bare = i["dataset_name"] == "bare"
        assert (i["task"] == "") == bare and bool(i["action_mask"].any()) != bare
        assert bool(i["observation.state_mask"].any()) == bare and bool(i["observation.images.top_is_pad"]) == bare
    bad = {"entries": [{"source": str(small_root), "roles": {"state": None}, "state_indices": [0]}]}
    with pytest.raises(Exception, match=r"state_indices: no state role: the entry's roles remove it"):
        preflight(bad)


def test_resume_names_only_the_entry_whose_weight_changed(report, tmp_path):
    ds = MixtureDataset(report, image_size=SIZE, cache_dir=tmp_path)
    bs = ds.batch_sampler(8)
    next(iter(bs))
    bs.advance(1)
    state = bs.state_dict()
    spec = report.spec.to_dict()
    spec["entries"][2]["weight"] = 3.0
    changed = MixtureDataset(preflight(MixtureSpec.from_dict(spec)), image_size=SIZE, cache_dir=tmp_path).batch_sampler(
        8
    )
    changed.load_state_dict(state)
    assert changed.changes == [f"1 entry re-weighted: {report.entries[2].name!r}"]
    assert changed.state_dict()["mixture"]["weights"][2] == 3 * state["mixture"]["weights"][2]


@pytest.mark.parametrize("shuffle, workers", [(False, 0), (True, 2)])
def test_a_plain_dataloader_over_a_mixture_that_selects_episodes(synthetic, tmp_path, shuffle, workers):
    """len(ds) counts the selected (kept) frames only, so torch's own samplers give valid indices; every frame comes
    once per epoch with its own dataset's values (selection by `episodes`, by `exclude_episodes`, drops)."""
    spec = mixture_spec(synthetic[:3])
    spec["entries"][0]["episodes"] = [1]
    spec["entries"][1]["exclude_episodes"] = [0]
    report = preflight(spec)
    ds = MixtureDataset(report, image_size=SIZE, cache_dir=tmp_path, drop_n_first_frames=1)
    want = []
    for e in ds.layout.entries:
        entry = report.spec.entries[e.index]
        d = next(x for x in synthetic if x.path == entry.source)
        episodes = [k for k in (entry.episodes or range(d.episodes)) if k not in entry.exclude_episodes]
        ref = EpisodicDataset(d.path, episodes=episodes, video_keys=list(e.cameras.values()), image_size=SIZE)
        b = ref.get_batch(np.arange(len(ref)))
        keep = (b["frame_index"] >= 1).numpy()  # drop_n_first_frames=1
        assert not keep.all() and keep.any()
        for i in np.flatnonzero(keep):
            want.append(
                (
                    (e.index, int(b["index"][i])),
                    b["action"][i],
                    b["task"][i],
                    {role: b[key][i] for role, key in e.cameras.items()},
                )
            )
    assert len(ds) == len(want) < sum(report.entries[e.index].frames for e in ds.layout.entries)
    want_by = {k: (a, t, c) for k, a, t, c in want}
    got = []
    for batch in torch.utils.data.DataLoader(ds, batch_size=16, shuffle=shuffle, num_workers=workers):
        for i in range(len(batch["index"])):
            key = (int(batch["dataset_index"][i]), int(batch["index"][i]))
            got.append(key)
            action, task, cams = want_by[key]
            assert torch.equal(batch["action"][i][: len(action)], action) and batch["task"][i] == task, key
            for role, frame in cams.items():
                assert torch.equal(batch[camera_key(role)][i], frame), (key, role)
    assert (got == [k for k, *_ in want]) if not shuffle else (sorted(got) == sorted(want_by))
