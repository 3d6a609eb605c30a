"""OpenTau's mixture configs load as they are: datasets + weights, $ref includes, standard-name mappings."""

import json

import numpy as np
import pytest

from episodic.format.errors import MixturePreflightError, MixtureSpecError
from episodic.mixture import MixtureSpec, preflight
from episodic.testing.synthetic import mixture_spec


def test_training_config_with_ref_mapping_and_weights(tmp_path, synthetic):
    mix = mixture_spec(synthetic[:4], style="opentau")
    for d in mix["datasets"]:
        d["data_features_name_mapping"]["response"] = "response"
        d.update(image_transforms={"enable": False}, use_imagenet_stats=True, val_split_ratio=0.05)
    mix.update(weights=[1.0, 2.0, 3.0, 4.0], action_freq=30.0)
    (tmp_path / "refs").mkdir()
    (tmp_path / "refs/mixture.json").write_text(json.dumps(mix))
    (tmp_path / "train.json").write_text(
        json.dumps({"dataset_mixture": {"$ref": "refs/mixture.json"}, "batch_size": 8, "policy": {"type": "pi05"}})
    )
    spec = MixtureSpec.from_file(tmp_path / "train.json")
    assert spec.weighting.rule == "explicit" and [e.weight for e in spec.entries] == [1.0, 2.0, 3.0, 4.0]
    first = synthetic[0]
    e = spec.entries[0]
    assert e.name == e.source == first.name and e.root == first.path  # root: the Hub dataset's local copy
    assert spec.entry_roles(e) == {**first.slots, "state": first.state_key, "action": "action", "task": "task"}
    assert any("response" in x for x in spec.ignored) and any("action_freq" in x for x in spec.ignored)
    assert any("batch_size" in x for x in spec.ignored)
    report = preflight(spec)
    assert report.ok, report.message()
    assert np.allclose(report.shares, np.array([1, 2, 3, 4]) / 10)
    assert report.entries[0].cameras == first.slots  # camera0..N stay slot roles, mapped as the config says


def test_without_weights_or_mapping(synthetic):
    spec = MixtureSpec.from_dict({"datasets": [{"repo_id": d.name, "root": d.path} for d in synthetic[:3]]})
    assert spec.weighting.rule == "frames" and spec.camera_role_style == "slots"
    report = preflight(spec)
    for d, rep in zip(synthetic, report.entries):
        assert rep.cameras == {f"camera{i}": k for i, k in enumerate(d.cameras)}  # info.json order
        assert rep.state_key == ("observation.state" if d.state_key == "observation.state" else None)
    frames = np.array([d.frames for d in synthetic[:3]])
    assert np.allclose(report.shares, frames / frames.sum())  # OpenTau infers weights from dataset lengths


def test_a_stray_quote_in_a_camera_key_is_reported_with_the_key_it_meant(synthetic):
    mix = mixture_spec(synthetic[:5], style="opentau")
    mapping = mix["datasets"][3]["data_features_name_mapping"]
    meant = mapping["camera0"]
    mapping["camera0"] = meant + '"'  # the typo of the public SO-101 mixture
    mix["datasets"][1]["episodes"] = [0, 99]
    with pytest.raises(MixturePreflightError) as err:
        preflight(MixtureSpec.from_dict(mix))
    problems = err.value.report.errors
    typo = [p for p in problems if p.entry == 3]
    assert len(typo) == 1 and typo[0].field == "roles.camera0" and typo[0].suggestions[0] == meant
    assert any(p.entry == 1 and p.field == "episodes" for p in problems)  # reported together
    assert f'{meant}"' in str(err.value) and "closest" in str(err.value)


def test_opentau_problems():
    bad = {
        "datasets": [
            {"vqa": "clevr"},
            {"repo_id": "a/b", "data_features_name_mapping": {"camra0": "x"}},
            {"repo_id": "a/c", "episode": [1]},
            {},
        ],
        "weights": [1, 2],
        "acton_freq": 3,
    }
    with pytest.raises(MixtureSpecError) as err:
        MixtureSpec.from_dict(bad)
    text = "\n".join(err.value.problems)
    for want in [
        "'vqa' datasets are not LeRobot datasets",
        "'camra0' is not one of OpenTau's standard names",
        "did you mean 'camera0'",
        "unknown field 'episode' (did you mean 'episodes'",
        "datasets[3]: field 'repo_id' must be a non-empty string",
        "one weight per dataset (4)",
        "unknown field 'acton_freq' (did you mean 'action_freq'",
    ]:
        assert want in text, want


def test_a_root_without_a_copy_fetches_the_hub_metadata_there(synthetic, tmp_path, monkeypatch):
    import shutil

    calls = []

    def download(repo_id, local_dir, revision=None, episodes=None, **kw):  # the Hub, as far as metadata goes
        calls.append((repo_id, str(local_dir), revision, episodes))
        shutil.copytree(f"{synthetic[0].path}/meta", f"{local_dir}/meta")

    monkeypatch.setattr("episodic.storage.hub.download", download)
    root = tmp_path / "copy"
    spec = MixtureSpec.from_dict({"datasets": [{"repo_id": "org/ds", "root": str(root), "revision": "v3.0"}]})
    report = preflight(spec)
    assert report.ok and report.entries[0].frames == synthetic[0].frames
    assert calls == [("org/ds", str(root), "v3.0", [])]
    preflight(spec)
    assert len(calls) == 1  # the copy now has meta/info.json: no request at all
    with pytest.raises(MixturePreflightError, match="applies to Hub repo ids only"):
        preflight(MixtureSpec.from_dict({"entries": [{"source": synthetic[0].path, "root": str(root)}]}))


def test_commit_sha_revisions_are_kept():
    sha = "3c8e1d0a9b5f4e2a1c0d9e8f7a6b5c4d3e2f1a0b"
    spec = MixtureSpec.from_dict(
        {"datasets": [{"repo_id": "org/ds", "revision": sha}, {"repo_id": "org/ds", "revision": "v3.0"}]}
    )
    assert [e.revision for e in spec.entries] == [sha, "v3.0"]


# ------------------------------------------------------------------------------------------ roots that are URLs
BROKEN = {3: "no info.json", 11: "info.json not JSON", 19: "no episodes table", 27: "a camera key that is not there"}


def _served_config(synthetic, www, server, n: int):
    """An OpenTau config of `n` datasets whose roots are URLs on `server` (which serves `www`): dataset i is
    synthetic dataset i % 12 (a link), except the BROKEN ones (copies of its meta/ only, broken as said). Returns
    (config, the synthetic dataset of each entry)."""
    import os
    import shutil
    from pathlib import Path

    www.mkdir(parents=True, exist_ok=True)
    config = mixture_spec([synthetic[i % len(synthetic)] for i in range(n)], style="opentau")
    used = []
    for i, d in enumerate(config["datasets"]):
        src = synthetic[i % len(synthetic)]
        used.append(src)
        where = www / f"ds{i:03d}"
        d.update(repo_id=f"org/ds{i:03d}", root=f"{server.url}/ds{i:03d}")
        if i not in BROKEN:
            os.symlink(src.path, where)
            continue
        shutil.copytree(Path(src.path) / "meta", where / "meta")  # the check reads nothing else
        if i == 3:
            (where / "meta/info.json").unlink()
        elif i == 11:
            (where / "meta/info.json").write_text('{"codebase_version": "v3.0", ')
        elif i == 19:
            for f in [*where.glob("meta/episodes/**/*.parquet"), *where.glob("meta/episodes.jsonl")]:
                f.unlink()
        else:
            d["data_features_name_mapping"]["camera0"] = "observation.images.nowhere"
    return config, used


def _check_report(report: dict, used, server, n: int) -> None:
    errors = {}
    for p in report["problems"]:
        if p["severity"] == "error":
            errors.setdefault(p["entry"], []).append(p)
    assert sorted(errors) == sorted(BROKEN), errors
    for i, problems in errors.items():
        assert all(p["name"] == f"org/ds{i:03d}" for p in problems)
        text = " ".join(p["message"] for p in problems)
        if i == 27:
            assert problems[0]["field"] == "roles.camera0" and "observation.images.nowhere" in text
        else:
            assert f"{server.url}/ds{i:03d}/meta/" in text, text
    for i, entry in enumerate(report["entries"]):
        if i not in BROKEN:
            assert entry["name"] == f"org/ds{i:03d}" and entry["frames"] == used[i].frames
    paths = [path for _, path, _ in server.requests]
    assert all(p.startswith("/ds") and p.split("/")[2] == "meta" for p in paths), sorted(
        {p for p in paths if p.split("/")[2:3] != ["meta"]}
    )[:10]  # no data/, no videos/, no Hub API
    assert {p.split("/")[1] for p in paths} == {f"ds{i:03d}" for i in range(n)}


def test_url_roots_are_read_from_there_never_from_the_hub(synthetic, tmp_path, monkeypatch):
    """An OpenTau config whose roots are URLs (HTTP on 127.0.0.1): each entry read from its URL, named after its
    repo id; broken entries named; no data or video file fetched, no Hub request (the Hub endpoint is the same
    server, so a Hub request would show)."""
    import huggingface_hub.constants

    from episodic.cli import main

    from support import FaultServer

    monkeypatch.setenv("EPISODIC_RETRY_WINDOW", "1")  # the old code asked the Hub: fail fast there
    with FaultServer(tmp_path / "www") as server:
        monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", server.url)
        config, used = _served_config(synthetic, tmp_path / "www", server, 40)
        (tmp_path / "opentau.json").write_text(json.dumps(config))
        spec = MixtureSpec.from_file(tmp_path / "opentau.json")
        assert spec.entries[5].source == f"{server.url}/ds005" and spec.entries[5].name == "org/ds005"
        assert spec.entries[5].root is None
        assert main(["mixture", "check", str(tmp_path / "opentau.json"), "-q", "--json", str(tmp_path / "r.json")]) == 1
    _check_report(json.loads((tmp_path / "r.json").read_text()), used, server, 40)


@pytest.mark.slow
def test_400_url_roots_are_checked_within_10_s(synthetic, tmp_path):
    """`episodic mixture check` of a 400-entry OpenTau config served over HTTP from 127.0.0.1: within 10 s,
    every broken entry named, no data or video file fetched (the issue's bar, in a fresh interpreter)."""
    import os
    import subprocess
    import sys
    import time

    from support import FaultServer

    with FaultServer(tmp_path / "www") as server:
        config, used = _served_config(synthetic, tmp_path / "www", server, 400)
        (tmp_path / "opentau.json").write_text(json.dumps(config))
        env = dict(
            os.environ,
            HF_ENDPOINT=server.url,
            HF_HOME=str(tmp_path / "hf"),
            EPISODIC_CACHE=str(tmp_path / "c"),
            PYTHONPATH=os.pathsep.join(sys.path),
        )
        t0 = time.monotonic()
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "episodic.cli",
                "mixture",
                "check",
                str(tmp_path / "opentau.json"),
                "-q",
                "--json",
                str(tmp_path / "r.json"),
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        took = time.monotonic() - t0
    assert out.returncode == 1, out.stderr[-3000:]
    _check_report(json.loads((tmp_path / "r.json").read_text()), used, server, 400)
    assert took < 10, took
