"""Normalisation statistics under the mixture's keys: per entry (mapped, index-selected, padded) and pooled per
group, checked against statistics computed directly from the entries' data."""

import numpy as np
import pytest

from episodic import EpisodicDataset
from episodic.format.stats import QUANTILES
from episodic.mixture import preflight
from episodic.mixture.layout import MixtureLayout, camera_key
from episodic.mixture.norm_stats import PAD_STATS, entry_stats, pooled_stats
from episodic.testing.synthetic import mixture_spec


def _setup(synthetic):
    spec = mixture_spec(synthetic)
    spec["entries"][1]["state_indices"] = [3, 1, 0]
    report = preflight(spec)
    return report, MixtureLayout.from_report(report, image_size=(32, 32))


def test_entry_stats_are_mapped_selected_and_padded(synthetic):
    report, layout = _setup(synthetic)
    per_entry = entry_stats(layout, report.metadata)
    D = layout.state_dim
    for e, stats in zip(layout.entries, per_entry):
        meta = report.metadata[e.index]
        raw = meta.stats[e.state_key]
        sel = np.asarray(
            e.state_indices if e.state_indices is not None else range(meta.info.features[e.state_key].shape[0])
        )
        s = stats["observation.state"]
        for name in ("mean", "std", "min", "max", "q01", "q99"):
            assert s[name].shape == (D,)
            assert np.array_equal(s[name][: len(sel)], np.asarray(raw[name], dtype=np.float64)[sel]), (e.name, name)
            assert (s[name][len(sel) :] == PAD_STATS[name]).all()
        assert int(s["count"][0]) == meta.total_frames
        for role, key in e.cameras.items():
            assert np.array_equal(stats[camera_key(role)]["mean"], meta.stats[key]["mean"])
        assert set(stats) == {"observation.state", "action", *(camera_key(r) for r in e.cameras)}


def _column(d, key, indices=None):
    values = EpisodicDataset(d.path, video_keys=[]).rows.columns.arrays[key].astype(np.float64)
    return values if indices is None else values[:, indices]


def test_pooled_stats_equal_the_stats_of_the_pooled_data(synthetic):
    report, layout = _setup(synthetic)
    per_entry = entry_stats(layout, report.metadata)
    pooled = pooled_stats(layout, per_entry)
    groups = {e.group for e in layout.entries}
    assert set(pooled) == groups and len(groups) > 1
    for g in groups:
        members = [e for e in layout.entries if e.group == g]
        cols = [_column(synthetic[e.index], e.state_key, e.state_indices) for e in members]
        s = pooled[g]["observation.state"]
        for j in range(layout.state_dim):
            real = [c[:, j] for c in cols if c.shape[1] > j]
            if not real:  # a dimension no entry of the group has: padding values
                assert s["mean"][j] == 0 and s["std"][j] == 1 and s["min"][j] == -1
                continue
            x = np.concatenate(real)
            assert np.isclose(s["mean"][j], x.mean(), rtol=1e-6, atol=1e-7), (g, j)
            assert np.isclose(s["std"][j], x.std(), rtol=1e-5, atol=1e-6), (g, j)
            assert np.isclose(s["min"][j], x.min()) and np.isclose(s["max"][j], x.max())
            # quantiles: the count-weighted mean of the entries' quantiles (the stated approximation)
            parts = [
                (pe["observation.state"], int(pe["observation.state"]["count"][0]))
                for e, pe in zip(layout.entries, per_entry)
                if e.group == g and e.state_dim > j
            ]
            want = sum(p["q50"][j] * n for p, n in parts) / sum(n for _, n in parts)
            assert np.isclose(s["q50"][j], want)
        # cameras: pooled over the entries that have the role, count-weighted means
        for role in layout.cameras:
            have = [
                (pe[camera_key(role)], int(pe[camera_key(role)]["count"][0]))
                for e, pe in zip(layout.entries, per_entry)
                if e.group == g and role in e.cameras
            ]
            if have:
                want = sum(p["mean"] * n for p, n in have) / sum(n for _, n in have)
                assert np.allclose(pooled[g][camera_key(role)]["mean"], want)
            else:
                assert camera_key(role) not in pooled[g]
    everything = pooled_stats(layout, per_entry, group_of=lambda e: "all")["all"]["action"]
    x = np.concatenate([_column(d, "action")[:, 0] for d in synthetic])
    assert np.isclose(everything["mean"][0], x.mean()) and np.isclose(everything["std"][0], x.std(), rtol=1e-5)


# ----------------------------------------------------------------------------- statistics computed from the data
def _rows(d, key, episodes=None, indices=None):
    """`key`'s rows of the selected episodes, read with pyarrow straight from the dataset's parquet files (an
    independent reader), float64, with `indices` applied."""
    from pathlib import Path

    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.concat_tables(
        [
            pq.read_table(p, columns=[key, "episode_index", "index"])
            for p in sorted(Path(d.path, "data").rglob("*.parquet"))
        ]
    )
    eps = table.column("episode_index").to_numpy()
    order = np.argsort(table.column("index").to_numpy(), kind="stable")
    keep = order[np.isin(eps[order], episodes)] if episodes is not None else order
    x = np.stack(table.column(key).to_numpy(zero_copy_only=False)[keep]).astype(np.float64)
    return x if indices is None else x[:, indices]


def _selection_spec(synthetic):
    spec = mixture_spec(synthetic)
    spec["entries"][1]["state_indices"] = [3, 1, 0]
    spec["entries"][2]["episodes"] = [0, 1]
    spec["entries"][3]["exclude_episodes"] = [0]
    spec["entries"][3]["action_indices"] = [5, 0]
    spec["entries"][4]["episodes"] = list(range(synthetic[4].episodes))  # every episode: stats.json applies
    return spec


def _selected(d, entry):
    eps = np.arange(d.episodes)
    if "episodes" in entry:
        eps = np.asarray(entry["episodes"])
    return eps[~np.isin(eps, entry.get("exclude_episodes", []))]


def test_entry_stats_come_from_the_data_where_stats_json_does_not_describe_the_selection(synthetic, tmp_path):
    spec = _selection_spec(synthetic)
    report = preflight(spec)
    layout = MixtureLayout.from_report(report, image_size=(32, 32))
    per_entry = entry_stats(layout, report, cache=tmp_path)
    D, A = layout.state_dim, layout.action_dim
    for e, st, raw in zip(layout.entries, per_entry, spec["entries"]):
        d = synthetic[e.index]
        subset = "episodes" in raw and e.index != 4 or "exclude_episodes" in raw
        assert st.origin == {
            **{camera_key(r): "stats.json" for r in e.cameras},
            "observation.state": "data" if subset else "stats.json",
            "action": "data" if subset else "stats.json",
        }, e.name
        if not subset:  # stats.json, as before (the whole dataset's)
            want = np.asarray(report.metadata[e.index].stats["action"]["mean"], dtype=np.float64)
            sel = e.action_indices if e.action_indices is not None else slice(None)
            assert np.array_equal(st["action"]["mean"][: e.action_dim], want[sel])
            continue
        eps = _selected(d, raw)
        for shared, key, indices, dim in (
            ("observation.state", e.state_key, e.state_indices, D),
            ("action", "action", e.action_indices, A),
        ):
            x = _rows(d, key, eps, indices)
            s = st[shared]
            n = x.shape[1]
            np.testing.assert_allclose(s["mean"][:n], x.mean(0), rtol=1e-12)
            np.testing.assert_allclose(s["std"][:n], x.std(0), rtol=1e-12, atol=1e-15)
            assert np.array_equal(s["min"][:n], x.min(0)) and np.array_equal(s["max"][:n], x.max(0))
            for name, q in QUANTILES.items():
                assert np.array_equal(s[name][:n], np.quantile(x, q, axis=0)), (e.name, shared, name)
                assert (s[name][n:] == PAD_STATS[name]).all()
            assert int(s["count"][0]) == len(x) and s["mean"].shape == (dim,)
            assert st.sketches[shared][1].shape[0] == n
    # stats.json only: the old rule, no data read
    only = entry_stats(layout, report, source="stats.json")
    assert all(set(o.origin.values()) == {"stats.json"} for o in only)
    with pytest.raises(ValueError, match="source must be one of"):
        entry_stats(layout, report, source="parquet")


def test_pooled_stats_from_the_data_equal_numpy_on_the_pooled_rows(synthetic, tmp_path):
    """Every entry from the data (`source="data"`): pooled mean/std/min/max and quantiles equal numpy's on the
    concatenated rows of each group's entries, dimension by dimension over the entries where it is real."""
    spec = _selection_spec(synthetic)
    report = preflight(spec)
    layout = MixtureLayout.from_report(report, image_size=(32, 32))
    per_entry = entry_stats(layout, report, source="data", cache=tmp_path, workers=2)
    for group_of in (None, lambda e: "all"):
        pooled = pooled_stats(layout, per_entry, group_of)
        for g, stats in pooled.items():
            members = [e for e in layout.entries if (group_of or (lambda x: x.group))(e) == g]
            for shared, key_of, idx_of in (
                ("observation.state", lambda e: e.state_key, lambda e: e.state_indices),
                ("action", lambda e: "action", lambda e: e.action_indices),
            ):
                cols = [
                    _rows(
                        synthetic[e.index],
                        key_of(e),
                        _selected(synthetic[e.index], spec["entries"][e.index]),
                        idx_of(e),
                    )
                    for e in members
                ]
                s = stats[shared]
                for j in range(len(s["mean"])):
                    real = [c[:, j] for c in cols if c.shape[1] > j]
                    if not real:
                        assert s["q50"][j] == PAD_STATS["q50"] and s["std"][j] == 1
                        continue
                    x = np.concatenate(real)
                    assert np.isclose(s["mean"][j], x.mean(), rtol=1e-12, atol=1e-12), (g, shared, j)
                    assert np.isclose(s["std"][j], x.std(), rtol=1e-9, atol=1e-12), (g, shared, j)
                    assert s["min"][j] == x.min() and s["max"][j] == x.max()
                    for name, q in QUANTILES.items():  # every entry small: the sketches hold every value
                        assert s[name][j] == np.quantile(x, q), (g, shared, j, name)


def test_mixture_dataset_normalises_with_the_computed_statistics(synthetic, tmp_path, monkeypatch):
    """`MixtureDataset.entry_stats()` / `pooled_stats()` take the data's statistics for an entry that selects
    episodes (stats.json describes the whole dataset), computed once: the second call reads the cache."""
    from episodic import MixtureDataset

    monkeypatch.setenv("EPISODIC_CACHE", str(tmp_path / "cache"))
    spec = _selection_spec(synthetic)
    ds = MixtureDataset(spec, image_size=(32, 32), cache_dir=tmp_path / "mmap")
    first = ds.entry_stats()
    assert first[2].origin["action"] == "data" and not first[2].cached
    x = _rows(synthetic[2], "action", [0, 1])
    assert np.array_equal(first[2]["action"]["q10"][: x.shape[1]], np.quantile(x, 0.1, axis=0))
    second = ds.entry_stats()
    assert second[2].cached == ("observation.state", "action") and second[3].cached
    assert np.array_equal(first[2]["action"]["mean"], second[2]["action"]["mean"])
    assert set(ds.pooled_stats()) == {e.group for e in ds.layout.entries}
