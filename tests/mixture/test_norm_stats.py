"""Normalisation statistics under the mixture's keys: per entry (mapped, index-selected, padded) and pooled per
group, checked against statistics computed directly from the entries' data."""

import numpy as np

from episodic import EpisodicDataset
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
        sel = np.asarray(e.state_indices if e.state_indices is not None else range(meta.info.features[e.state_key].shape[0]))
        s = stats["observation.state"]
        for name in ("mean", "std", "min", "max", "q01", "q99"):
            assert s[name].shape == (D,)
            assert np.array_equal(s[name][:len(sel)], np.asarray(raw[name], dtype=np.float64)[sel]), (e.name, name)
            assert (s[name][len(sel):] == PAD_STATS[name]).all()
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
            parts = [(pe["observation.state"], int(pe["observation.state"]["count"][0])) for e, pe in
                     zip(layout.entries, per_entry) if e.group == g and e.state_dim > j]
            want = sum(p["q50"][j] * n for p, n in parts) / sum(n for _, n in parts)
            assert np.isclose(s["q50"][j], want)
        # cameras: pooled over the entries that have the role, count-weighted means
        for role in layout.cameras:
            have = [(pe[camera_key(role)], int(pe[camera_key(role)]["count"][0])) for e, pe in
                    zip(layout.entries, per_entry) if e.group == g and role in e.cameras]
            if have:
                want = sum(p["mean"] * n for p, n in have) / sum(n for _, n in have)
                assert np.allclose(pooled[g][camera_key(role)]["mean"], want)
            else:
                assert camera_key(role) not in pooled[g]
    everything = pooled_stats(layout, per_entry, group_of=lambda e: "all")["all"]["action"]
    x = np.concatenate([_column(d, "action")[:, 0] for d in synthetic])
    assert np.isclose(everything["mean"][0], x.mean()) and np.isclose(everything["std"][0], x.std(), rtol=1e-5)
