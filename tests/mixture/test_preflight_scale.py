"""Preflight of 400 tiny datasets (v2.1 and v3.0, 1-4 cameras, dims 6-14, fps 10-50) in OpenTau's config format:
under 10 s on the 2-core CI machine, with a typo in entry 377 reported together with every other error."""

import json
import time

import pytest

from episodic.format.errors import MixturePreflightError
from episodic.mixture import MixtureSpec, build_sampler, preflight
from episodic.testing.synthetic import mixture_spec, write_synthetic_datasets

pytestmark = pytest.mark.slow


def test_preflight_of_400_entries(tmp_path):
    datasets = write_synthetic_datasets(tmp_path / "data", 400, seed=7)
    mix = mixture_spec(datasets, style="opentau")
    mapping = mix["datasets"][377]["data_features_name_mapping"]
    mapping["camera0"] += '"'  # the stray quote of the public SO-101 mixture
    mix["datasets"][12]["episodes"] = [0, 1000]
    mix["datasets"][250]["data_features_name_mapping"]["state"] = "observation.stat"
    (tmp_path / "mix.json").write_text(json.dumps(mix))
    t0 = time.perf_counter()
    with pytest.raises(MixturePreflightError) as err:
        preflight(tmp_path / "mix.json")
    seconds = time.perf_counter() - t0
    errors = err.value.report.errors
    assert sorted((p.entry, p.field) for p in errors) == [
        (12, "episodes"),
        (250, "roles.state"),
        (377, "roles.camera0"),
    ]
    print(f"\npreflight of 400 entries: {seconds:.2f} s")
    assert seconds < 10
    mix["datasets"][377]["data_features_name_mapping"]["camera0"] = mapping["camera0"][:-1]
    del mix["datasets"][12]["episodes"]
    mix["datasets"][250]["data_features_name_mapping"]["state"] = datasets[250].state_key
    t0 = time.perf_counter()
    report = preflight(MixtureSpec.from_dict(mix))
    sampler, _ = build_sampler(report)
    seconds = time.perf_counter() - t0
    assert report.ok and len(report.entries) == 400 and {e.version for e in report.entries} == {"v2.1", "v3.0"}
    assert len(sampler) == sum(d.frames for d in datasets)
    print(f"preflight + order of 400 entries: {seconds:.2f} s")
