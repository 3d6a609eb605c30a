"""The digest of a mixture spec (what it means, not how it was written) and the checked report handed over through a
file: a real preflight report (local and HTTP entries) written and read back equal, refused when it is not the one
expected, and hand-over files left behind by a dead writer cleaned up."""

from __future__ import annotations

import json
import os
import time

import pytest

from episodic.format.errors import MixtureStartupError
from episodic.mixture import MixtureSpec, load_spec, preflight
from episodic.mixture.handover import handover_dir, read_report, remove_report, spec_digest, write_report
from episodic.mixture.synthetic import mixture_spec

SPEC = {
    "weighting": {"rule": "temperature", "alpha": 0.5, "size": "episodes"},
    "tolerance_s": 0.001,
    "delta_timestamps": {"action": [0.0, 0.1], "state": [0.0]},
    "roles": {"state": "observation.state", "action": "action"},
    "entries": [
        {"source": "lerobot/a", "revision": "v1", "roles": {"front": "observation.images.up",
                                                             "wrist": "observation.images.side"}, "weight": 2.0},
        {"source": "s3://bucket/b", "name": "b", "episodes": [0, 1], "storage_options": {"anon": True, "x": 1},
         "delta_timestamps": {"state": [0.0], "action": [0.0, 0.05]}},
    ],
}


def reordered(obj):
    """`obj` with every mapping's keys in reverse order (lists as they are)."""
    if isinstance(obj, dict):
        return {k: reordered(obj[k]) for k in reversed(list(obj))}
    if isinstance(obj, list):
        return [reordered(v) for v in obj]
    return obj


def digest(raw, on_error=None):
    return spec_digest(MixtureSpec.from_dict(json.loads(json.dumps(raw))), on_error)


def test_the_digest_is_of_what_the_spec_means(tmp_path):
    d = digest(SPEC)
    assert len(d) == 64 and d == digest(SPEC)
    flipped = reordered(SPEC)
    flipped["entries"] = [reordered(e) for e in SPEC["entries"]]
    flipped["entries"][0]["roles"] = SPEC["entries"][0]["roles"]  # camera roles keep their order (see below)
    assert list(flipped["roles"]) == ["action", "state"]
    assert list(flipped) != list(SPEC) and digest(flipped) == d
    # the same spec through a $ref include, from a file elsewhere: the same digest
    (tmp_path / "entries.json").write_text(json.dumps(SPEC["entries"]))
    (tmp_path / "mix.json").write_text(json.dumps({**SPEC, "entries": {"$ref": "entries.json"}}))
    assert spec_digest(load_spec(tmp_path / "mix.json")) == d
    # 2 and 2.0 are one weight; a changed weight, episode list or option is another mixture
    ints = json.loads(json.dumps(SPEC))
    ints["entries"][0]["weight"] = 2
    assert digest(ints) == d
    for change in (("weight", 2.5), ("episodes", [0, 2]), ("revision", "v2")):
        other = json.loads(json.dumps(SPEC))
        other["entries"][1 if change[0] == "episodes" else 0][change[0]] = change[1]
        assert digest(other) != d, change
    assert digest({**SPEC, "tolerance_s": 0.002}) != d
    # the camera roles' order is the cameras' order in every item: it is part of the meaning
    swapped = json.loads(json.dumps(SPEC))
    swapped["entries"][0]["roles"] = dict(reversed(list(SPEC["entries"][0]["roles"].items())))
    assert digest(swapped) != d
    # on_error: the one preflight applies
    assert digest(SPEC, "skip") != d and digest(SPEC, "raise") == d == digest({**SPEC, "on_error": "raise"})


def test_a_report_written_and_read_back(synthetic, served, tmp_path, monkeypatch):
    monkeypatch.setenv("EPISODIC_CACHE", str(tmp_path / "cache"))
    raw = mixture_spec(synthetic[:4])
    raw["entries"][1]["source"] = f"{served.url}/{os.path.basename(synthetic[1].path)}"  # an HTTP entry
    report = preflight(raw, keep_files=True)
    assert report.metadata_files[1] and report.metadata_files[0] is None  # kept for the URL entry only
    d = spec_digest(report.spec, report.on_error)
    directory = handover_dir()
    assert directory == tmp_path / "cache" / "startup" and handover_dir(tmp_path / "c") == tmp_path / "c" / ".startup"
    path, token = write_report(report, d, directory)
    assert os.path.dirname(path) == str(directory) and os.path.basename(path).startswith(d[:16])
    assert os.listdir(directory) == [os.path.basename(path)]  # no temporary file left
    n = len(served.requests)
    got = read_report(path, d, token)
    assert got.entries == report.entries and got.problems == report.problems and got.spec == report.spec
    assert [m.episodes.length.tolist() for m in got.metadata] == [m.episodes.length.tolist() for m in report.metadata]
    assert got.sources[1].location == report.sources[1].location and len(served.requests) == n  # nothing asked
    assert got.sources[1].read_bytes("meta/info.json") == report.metadata_files[1]["meta/info.json"]

    with pytest.raises(MixtureStartupError, match="not the checked mixture of this start-up"):
        read_report(path, d, "0" * 16)
    with pytest.raises(MixtureStartupError, match="not the checked mixture of this start-up"):
        read_report(path, "f" * 64, token)
    with open(path, "rb") as f:
        head = f.read(100)
    torn = tmp_path / "torn.pkl"
    torn.write_bytes(head)
    with pytest.raises(MixtureStartupError, match=f"{torn}: the checked mixture handed over could not be read"):
        read_report(torn, d, token)
    remove_report(path)
    remove_report(path)  # gone already: nothing to do
    assert not os.path.exists(path)
    with pytest.raises(MixtureStartupError, match="could not be read: FileNotFoundError"):
        read_report(path, d, token)


def test_files_left_behind_by_a_dead_writer_are_removed_by_the_next(synthetic, tmp_path):
    report = preflight(mixture_spec(synthetic[:1]))
    d = spec_digest(report.spec, report.on_error)
    old, _ = write_report(report, d, tmp_path)
    recent, _ = write_report(report, d, tmp_path)
    other = tmp_path / "notes.pkl"  # not of the hand-over's naming: never touched
    other.write_bytes(b"x")
    past = time.time() - 3 * 86400
    for p in (old, other):
        os.utime(p, (past, past))
    new, _ = write_report(report, d, tmp_path)
    assert sorted(os.listdir(tmp_path)) == sorted(os.path.basename(p) for p in (recent, new, other))
