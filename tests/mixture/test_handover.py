"""The digest of a mixture spec (what it means, not how it was written) and the checked report handed over through a
file (JSON): a real report (local and HTTP entries, made local by a start-up) written and read back equal, its
metadata equal to each dataset's own; a hostile file (a pickle payload, wrong types, a directory elsewhere, other
metadata ...) refused with the file named and no code run; files left behind by a dead writer cleaned up."""

from __future__ import annotations

import json
import os
import pickle
import time

import pytest
from fsspec.implementations.local import LocalFileSystem

from episodic.format import load_metadata
from episodic.format.errors import MixtureStartupError
from episodic.mixture import MixtureSpec, load_spec, preflight, prepare
from episodic.mixture.startup import handover
from episodic.mixture.startup.handover import handover_dir, read_report, remove_report, spec_digest, write_report
from episodic.storage.cache import copy_dir
from episodic.storage.copies import metadata_fingerprint
from episodic.testing.synthetic import mixture_spec

SPEC = {
    "weighting": {"rule": "temperature", "alpha": 0.5, "size": "episodes"},
    "tolerance_s": 0.001,
    "delta_timestamps": {"action": [0.0, 0.1], "state": [0.0]},
    "roles": {"state": "observation.state", "action": "action"},
    "entries": [
        {
            "source": "lerobot/a",
            "revision": "v1",
            "roles": {"front": "observation.images.up", "wrist": "observation.images.side"},
            "weight": 2.0,
        },
        {
            "source": "s3://bucket/b",
            "name": "b",
            "episodes": [0, 1],
            "storage_options": {"anon": True, "x": 1},
            "delta_timestamps": {"state": [0.0], "action": [0.0, 0.05]},
        },
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


def checked_and_localised(synthetic, served, tmp_path, monkeypatch):
    """A mixture of 3 local entries and an HTTP one, checked and made local by a start-up of one process (the HTTP
    entry's copy under tmp_path/copies): the report a downloading rank hands over, and its digest."""
    monkeypatch.setenv("EPISODIC_CACHE", str(tmp_path / "cache"))
    raw = mixture_spec(synthetic[:4])
    raw["entries"][1]["source"] = f"{served.url}/{os.path.basename(synthetic[1].path)}"  # an HTTP entry
    report = prepare(raw, copies_dir=tmp_path / "copies").report
    return report, spec_digest(report.spec, report.on_error)


def test_a_report_written_and_read_back(synthetic, served, tmp_path, monkeypatch):
    report, d = checked_and_localised(synthetic, served, tmp_path, monkeypatch)
    copies = tmp_path / "copies"
    directory = handover_dir(copies)
    assert directory == copies / ".startup" and handover_dir() == tmp_path / "cache" / "startup"
    path, token = write_report(report, d, directory)
    assert os.path.dirname(path) == str(directory) and os.path.basename(path) == f"{d[:16]}-{token}.json"
    assert os.listdir(directory) == [os.path.basename(path)]  # no temporary file left
    held = json.loads(open(path).read())  # plain JSON: every entry's facts, its local directory, its fingerprint
    assert held["digest"] == d and held["token"] == token and len(held["entries"]) == 4
    n = len(served.requests)
    spec = load_spec(report.spec.to_dict())  # the same mixture, parsed by another rank
    got = read_report(directory, d, token, spec, copies)
    assert len(served.requests) == n  # nothing asked: every entry is read from its local directory
    assert got.entries == report.entries and got.problems == report.problems and got.spec == spec
    assert got.on_error == report.on_error and got.seconds == report.seconds
    assert [s.root for s in got.sources] == [s.root for s in report.sources] and all(s.is_local for s in got.sources)
    assert got.sources[1].root == str(copy_dir(report.spec.entries[1].source, copies))
    # the metadata equals each dataset's own, read independently from the original directories
    for m, dataset in zip(got.metadata, synthetic[:4]):
        own = load_metadata(LocalFileSystem(), dataset.path)
        assert m.episodes.length.tolist() == own.episodes.length.tolist() and m.tasks == own.tasks
        assert m.info.to_dict() == own.info.to_dict() and metadata_fingerprint(m) == metadata_fingerprint(own)

    with pytest.raises(MixtureStartupError, match="could not be read: FileNotFoundError"):
        read_report(directory, d, "0" * 16, spec, copies)
    with pytest.raises(MixtureStartupError, match="could not be read: FileNotFoundError"):
        read_report(directory, "f" * 64, token, spec, copies)
    remove_report(path)
    remove_report(path)  # gone already: nothing to do
    assert not os.path.exists(path)
    with pytest.raises(MixtureStartupError, match="could not be read: FileNotFoundError"):
        read_report(directory, d, token, spec, copies)


class Payload:
    """A pickle that creates a directory when it is loaded: code run by whoever reads it."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return os.makedirs, (self.marker,)


def tampered(held: dict, change) -> dict:
    out = json.loads(json.dumps(held))
    change(out)
    return out


def test_a_hostile_hand_over_file_is_refused_and_runs_nothing(synthetic, served, tmp_path, monkeypatch):
    """Whoever can write the hand-over directory: a pickle payload, wrong types, unknown or missing fields, a
    directory elsewhere, other metadata, a torn or oversized file -- each refused with MixtureStartupError naming
    the file (and the entry and field), and no code runs."""
    report, d = checked_and_localised(synthetic, served, tmp_path, monkeypatch)
    copies = tmp_path / "copies"
    directory = handover_dir(copies)
    path, token = write_report(report, d, directory)
    held = json.loads(open(path).read())
    spec = report.spec
    marker = tmp_path / "code-ran"

    def refused(content: bytes | dict, match: str) -> None:
        data = content if isinstance(content, bytes) else json.dumps(content).encode()
        with open(path, "wb") as f:
            f.write(data)
        with pytest.raises(MixtureStartupError, match=match) as e:
            read_report(directory, d, token, spec, copies)
        assert str(e.value).startswith(path)
        assert not marker.exists()

    refused(pickle.dumps({"digest": d, "token": token, "report": Payload(marker)}), "refused: not JSON")
    refused(pickle.dumps(Payload(marker), protocol=0), "refused: not JSON")
    refused(json.dumps(held).encode()[:200], "refused: not JSON")  # torn
    refused(b"[" * 100000 + b"]" * 100000, "refused: not JSON")  # nested past the parser's depth
    refused([held], "expected a JSON object, got list")
    refused(tampered(held, lambda h: h.update(kind="something else")), "not a hand-over file of version 1")
    refused(tampered(held, lambda h: h.update(extra=1)), r"fields .*'extra'")
    refused(tampered(held, lambda h: h.pop("problems")), "fields")
    refused(tampered(held, lambda h: h.update(token="0" * 16)), "not the checked mixture of this start-up")
    refused(tampered(held, lambda h: h.update(on_error="explode")), "field 'on_error' must be one of")
    refused(tampered(held, lambda h: h.update(on_error="skip")), "does not have the digest")
    refused(tampered(held, lambda h: h.update(seconds="1")), "field 'seconds' must be a number")
    refused(tampered(held, lambda h: h["entries"].pop()), "field 'entries' must be a list of 4 items")
    refused(tampered(held, lambda h: h["entries"][2].update(fps="30")), r"entries\[2\]: field 'fps' must be an int")
    refused(tampered(held, lambda h: h["entries"][2].update(frames=True)), r"entries\[2\]: field 'frames'")
    refused(tampered(held, lambda h: h["entries"][2].update(share=1.5)), r"field 'share' must be a number in")
    refused(tampered(held, lambda h: h["entries"][2].update(status="fine")), r"field 'status' must be one of")
    refused(tampered(held, lambda h: h["entries"][2]["camera_shapes"].update(x=[1, 2])), "field 'camera_shapes'")
    refused(
        tampered(held, lambda h: h["entries"][2]["cameras"].update(x={"__class__": "os.system"})), "field 'cameras'"
    )
    refused(tampered(held, lambda h: h["entries"][2].update(shell="rm -rf")), r"unknown field\(s\) \['shell'\]")
    refused(tampered(held, lambda h: h["entries"][2].update(name="other")), "not those of the spec's entry 2")
    refused(
        tampered(
            held,
            lambda h: h["problems"].append(
                {"entry": 9, "name": "", "field": "", "message": "", "severity": "error", "suggestions": []}
            ),
        ),
        "field 'entry' is 9, the spec has 4 entries",
    )
    refused(tampered(held, lambda h: h["roots"].__setitem__(0, "/etc")), "entry 0 .*not where this rank finds")
    refused(
        tampered(held, lambda h: h["roots"].__setitem__(1, str(synthetic[1].path))),
        "entry 1 .*not where this rank finds",
    )  # the HTTP entry's data elsewhere than its copy
    refused(tampered(held, lambda h: h["roots"].__setitem__(1, 5)), "entry 1 .*must be a directory and a metadata")
    refused(tampered(held, lambda h: h["fingerprints"].__setitem__(3, "0" * 64)), "entry 3 .*not the metadata that")
    monkeypatch.setattr(handover, "MAX_BYTES", 1000)
    refused(held, "more than 1000 bytes")
    with pytest.raises(MixtureStartupError, match="token '../../x' is not 16 hex digits"):
        read_report(directory, d, "../../x", spec, copies)


def test_files_left_behind_by_a_dead_writer_are_removed_by_the_next(synthetic, tmp_path):
    report = preflight(mixture_spec(synthetic[:1]))
    d = spec_digest(report.spec, report.on_error)
    old, _ = write_report(report, d, tmp_path)
    recent, _ = write_report(report, d, tmp_path)
    other = tmp_path / "notes.json"  # not of the hand-over's naming: never touched
    other.write_bytes(b"x")
    past = time.time() - 3 * 86400
    for p in (old, other):
        os.utime(p, (past, past))
    new, _ = write_report(report, d, tmp_path)
    assert sorted(os.listdir(tmp_path)) == sorted(os.path.basename(p) for p in (recent, new, other))
