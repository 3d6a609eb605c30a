"""A mixture dataset of 400 tiny heterogeneous datasets (v2.1 and v3.0, 1-4 cameras of 4 sizes, dims 6-14, fps
10-50, OpenTau's config format): constructing it (preflight included) takes < 10 s and < 500 MB added RSS on the
2-core CI machine, and holds no entry's data until the entry is used."""

import gc
import json
import time

import pytest

from episodic.datasets.mixture import MixtureDataset
from episodic.mixture import preflight
from episodic.testing.synthetic import mixture_spec, write_synthetic_datasets
from episodic.tools.rss import PeakRSS, tree_rss_bytes

pytestmark = pytest.mark.slow


def test_construction_of_400_entries(tmp_path):
    datasets = write_synthetic_datasets(tmp_path / "data", 400, seed=7)
    (tmp_path / "mix.json").write_text(json.dumps(mixture_spec(datasets, style="opentau")))
    gc.collect()
    before = tree_rss_bytes()
    t0 = time.perf_counter()
    with PeakRSS() as peak:
        ds = MixtureDataset(tmp_path / "mix.json", image_size=(32, 32), cache_dir=tmp_path / "cache")
    seconds = time.perf_counter() - t0
    added = (peak.peak - before) / 2**20
    print(
        f"\nMixtureDataset of 400 entries (preflight included): {seconds:.2f} s, peak RSS +{added:.0f} MB "
        f"(preflight alone: {ds.report.seconds:.2f} s)"
    )
    assert ds.num_entries == 400 and ds.num_frames == sum(d.frames for d in datasets)
    assert ds.engines.built == 0  # nothing read yet
    assert seconds < 10 and added < 500
    report = preflight(tmp_path / "mix.json")
    t0 = time.perf_counter()
    ds = MixtureDataset(report, image_size=(32, 32), cache_dir=tmp_path / "cache")
    print(f"from a preflight report: {time.perf_counter() - t0:.2f} s")
    # one item of every entry: each entry's engine built (columns memory-mapped), frames decoded and resized
    flats = ds.sampler.kept_base[:-1]  # each entry's first kept frame
    t0 = time.perf_counter()
    with PeakRSS() as peak:
        batch = ds.get_batch(flats)
    print(
        f"one item of each of the 400 entries: {time.perf_counter() - t0:.2f} s, peak RSS "
        f"{(peak.peak - before) / 2**20:+.0f} MB over the start"
    )
    assert batch["dataset_index"].tolist() == list(range(400)) and ds.engines.built == 400
