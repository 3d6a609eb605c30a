"""Mixture specs from JSON, YAML and objects: fields, defaults, names, and every problem reported at once."""

import json
import sys

import pytest

from episodic.format.errors import EpisodicError, MixtureSpecError
from episodic.mixture import MixtureEntry, MixtureSpec, Weighting, load_spec

FULL = {
    "weighting": {"rule": "temperature", "alpha": 0.5},
    "tolerance_s": 0.001,
    "delta_timestamps": {"action": [0.0, 0.1], "state": [0.0]},
    "roles": {"state": "observation.state", "action": "action"},
    "samples_per_epoch": 1000,
    "max_state_dim": 14,
    "entries": [
        {
            "source": "lerobot/svla_so101_pickplace",
            "revision": "3c8e1d0a9b5f4e2a1c0d9e8f7a6b5c4d3e2f1a0b",
            "roles": {"front": "observation.images.up", "wrist": "observation.images.side"},
            "exclude_episodes": [3, 7],
            "weight": 2.0,
        },
        {
            "source": "s3://bucket/koch",
            "name": "koch",
            "episodes": [0, 1, 2],
            "state_indices": [0, 1, 2],
            "tolerance_s": 0.01,
            "delta_timestamps": {"action": [0.0, 0.05]},
            "group": "koch",
            "storage_options": {"anon": True},
        },
        "lerobot/svla_so101_pickplace",
        {"source": "/data/local_ds", "roles": {"state": None, "task": "task"}},
    ],
}


def test_full_spec_from_json_and_yaml(tmp_path):
    (tmp_path / "m.json").write_text(json.dumps(FULL))
    spec = MixtureSpec.from_file(tmp_path / "m.json")
    yaml = pytest.importorskip("yaml")
    (tmp_path / "m.yaml").write_text(yaml.safe_dump(FULL))
    assert MixtureSpec.from_file(tmp_path / "m.yaml").entries == spec.entries
    a, b, c, d = spec.entries
    assert spec.weighting == Weighting("temperature", 0.5, "frames") and spec.samples_per_epoch == 1000
    assert a.name == "lerobot/svla_so101_pickplace" and c.name == "lerobot/svla_so101_pickplace#2"  # same repo twice
    assert a.revision.startswith("3c8e") and a.exclude_episodes == (3, 7) and a.weight == 2.0
    assert b.name == "koch" and b.episodes == (0, 1, 2) and b.state_indices == (0, 1, 2)
    assert spec.entry_roles(a) == {
        "state": "observation.state",
        "action": "action",
        "front": "observation.images.up",
        "wrist": "observation.images.side",
    }
    assert spec.entry_roles(d) == {"action": "action", "task": "task"}  # null removes a default role
    assert spec.entry_delta_timestamps(b) == {"action": (0.0, 0.05)} and spec.entry_tolerance_s(b) == 0.01
    assert spec.entry_delta_timestamps(a) == {"action": (0.0, 0.1), "state": (0.0,)}
    again = MixtureSpec.from_dict(json.loads(json.dumps(spec.to_dict())))
    assert again.entries == spec.entries and again.weighting == spec.weighting


def test_objects_and_load_spec():
    spec = MixtureSpec.build(
        [
            MixtureEntry("org/a", weight=1),
            MixtureEntry("org/a", episodes=[2, 0], weight=2),
            MixtureEntry("org/b", name="org/a#2", weight=0),
        ],
        weighting=Weighting("explicit"),
        delta_timestamps={"action": [0, 0.1]},
    )
    assert [e.name for e in spec.entries] == ["org/a", "org/a#3", "org/a#2"]
    assert spec.entries[1].episodes == (2, 0)
    assert load_spec(spec) is spec
    assert load_spec({"entries": ["x/y"]}).entries[0].source == "x/y"


def test_every_problem_is_reported_at_once(tmp_path):
    raw = {
        "weighting": {"rule": "temprature", "alpha": 2},
        "on_error": "ignore",
        "tolerance": 1,
        "entries": [
            {"source": "a/b", "weigth": 1},
            {"source": "a/c", "episodes": [1, -2], "roles": {"3d": "x", "wrist": ""}},
            {"name": "nameless"},
            {"source": "a/d", "delta_timestamps": {"action": [0, float("nan")]}, "state_indices": [1, 1]},
            {"source": "a/e", "name": "dup"},
            {"source": "a/f", "name": "dup"},
            7,
        ],
    }
    (tmp_path / "bad.json").write_text(json.dumps(raw).replace("NaN", "NaN"))
    with pytest.raises(MixtureSpecError) as err:
        MixtureSpec.from_file(tmp_path / "bad.json")
    msg, problems = str(err.value), err.value.problems
    assert str(tmp_path / "bad.json") in msg
    expected = [
        "'temprature' is not one of",
        "did you mean 'temperature'",
        "'on_error' must be one of",
        "unknown field 'tolerance' (did you mean 'tolerance_s'",
        "entries[0] (a/b): unknown field 'weigth' (did you mean 'weight'",
        "entries[1] (a/c): field 'episodes'",
        "role '3d'",
        "role 'wrist' must map",
        "entries[2] (nameless): missing field 'source'",
        "delta_timestamps['action']",
        "'state_indices' repeats",
        "repeated: 'dup'",
        "entries[6]: an entry must be an object",
    ]
    for text in expected:
        assert any(text in p for p in problems), (text, problems)
    assert isinstance(err.value, EpisodicError) and len(problems) == 12


def test_explicit_rule_needs_every_weight_and_ranges_are_stated():
    with pytest.raises(MixtureSpecError, match=r"entries\[1\] \(b/c\): weighting rule 'explicit' needs a 'weight'"):
        MixtureSpec.build([MixtureEntry("a/b", weight=1.0), MixtureEntry("b/c")], weighting=Weighting("explicit"))
    with pytest.raises(MixtureSpecError, match=r"'weight' must be a number in \[0, 1e\+12\], got -1"):
        MixtureSpec.build([MixtureEntry("a/b", weight=-1)])
    with pytest.raises(MixtureSpecError, match=r"'weighting.alpha' must be a number in \[0, 1\]"):
        MixtureSpec.build([MixtureEntry("a/b")], weighting=Weighting("temperature", alpha=1.5))
    with pytest.raises(MixtureSpecError, match="must be a MixtureEntry"):
        MixtureSpec.build([{"source": "a/b"}])


def test_yaml_without_pyyaml_is_a_clear_error(tmp_path, monkeypatch):
    (tmp_path / "m.yaml").write_text("entries: [a/b]\n")
    monkeypatch.setitem(sys.modules, "yaml", None)  # import yaml -> ImportError
    with pytest.raises(MixtureSpecError, match="needs PyYAML"):
        MixtureSpec.from_file(tmp_path / "m.yaml")
    (tmp_path / "m.json").write_text('{"entries": ["a/b"]}')
    assert MixtureSpec.from_file(tmp_path / "m.json").entries[0].name == "a/b"  # JSON needs nothing


def test_unreadable_and_malformed_files(tmp_path):
    with pytest.raises(MixtureSpecError, match="file not found"):
        MixtureSpec.from_file(tmp_path / "missing.json")
    (tmp_path / "m.json").write_text("{not json")
    with pytest.raises(MixtureSpecError, match="not valid JSON"):
        MixtureSpec.from_file(tmp_path / "m.json")
    (tmp_path / "l.json").write_text("[1, 2]")
    with pytest.raises(MixtureSpecError, match="must be an object with 'entries'"):
        MixtureSpec.from_file(tmp_path / "l.json")


SHAS = [
    "3c8e1d0a9b5f4e2a1c0d9e8f7a6b5c4d3e2f1a0b",
    "1e10a9b5f4e2a1c0d9e8f7a6b5c4d3e2f1a0b3c8",
    "0" * 40,
    "deadbeef" * 5,
]


def test_commit_sha_revisions_load_from_yaml_written_by_hand(tmp_path):
    """Written unquoted, as people write them: hex SHAs stay text (also '1e10...' and all-letter ones); a SHA that
    is all digits becomes a YAML number, which is named with the fix (quote it), not a crash."""
    pytest.importorskip("yaml")
    text = "entries:\n" + "".join(
        f"  - {{source: org/ds, name: n{i}, revision: {sha}}}\n" for i, sha in enumerate(SHAS[:2])
    )
    text += f'  - {{source: org/ds, name: quoted, revision: "{SHAS[2]}"}}\n'
    text += f"  - {{source: org/ds, name: letters, revision: {SHAS[3]}}}\n"
    (tmp_path / "m.yaml").write_text(text)
    assert [e.revision for e in MixtureSpec.from_file(tmp_path / "m.yaml").entries] == SHAS
    (tmp_path / "n.yaml").write_text(
        "entries:\n  - {source: org/ds, revision: 1234567890123456789012345678901234567890}\n"
    )
    with pytest.raises(
        MixtureSpecError,
        match=r"field 'revision' must be a tag, branch or commit SHA \(text\), got the "
        r"number 1234567890123456789012345678901234567890: quote it",
    ):
        MixtureSpec.from_file(tmp_path / "n.yaml")


def test_on_unknown_task_is_checked_and_kept():
    spec = MixtureSpec.from_dict({"entries": ["a/b"], "on_unknown_task": "raise"})
    assert spec.on_unknown_task == "raise"
    assert MixtureSpec.from_dict(json.loads(json.dumps(spec.to_dict()))).on_unknown_task == "raise"
    assert MixtureSpec.from_dict({"entries": ["a/b"]}).on_unknown_task == "warn"
    with pytest.raises(MixtureSpecError, match=r"field 'on_unknown_task' must be one of warn, raise, got 'ignore'"):
        MixtureSpec.from_dict({"entries": ["a/b"], "on_unknown_task": "ignore"})


@pytest.mark.parametrize(
    "raw, pattern",
    [
        (
            {"entries": [{"source": "a/b", "episodes": [0, 2**70]}]},
            r"entries\[0\] \(a/b\): field 'episodes' holds 1 value\(s\) above 2\*\*62 - 1"
            r".*first: 1180591620717411303424",
        ),
        (
            {"entries": [{"source": "a/b", "exclude_episodes": [2**64]}]},
            r"entries\[0\] \(a/b\): field 'exclude_episodes' holds 1 value\(s\) above 2\*\*62 - 1",
        ),
        ({"entries": [{"source": "a/b", "state_indices": [0, 2**63]}]}, r"entries\[0\] \(a/b\): field 'state_indices'"),
        (
            {"entries": [{"source": "a/b", "delta_timestamps": {"action": [0.0, 1e300]}}]},
            r"entries\[0\] \(a/b\): delta_timestamps\['action'\] holds 1e\+300 s: "
            r"window times must lie within \+-1e\+06 s",
        ),
        (
            {"entries": ["a/b"], "delta_timestamps": {"state": [-1e300]}},
            r"<dict>: delta_timestamps\['state'\] holds -1e\+300 s",
        ),
    ],
)
def test_huge_indices_and_windows_are_refused_by_the_spec_checks(raw, pattern):
    """Values that pass 'an int >= 0' / 'a finite number' but overflow int64 frame arithmetic later (an
    OverflowError in preflight) are refused here, naming the entry and the field."""
    with pytest.raises(MixtureSpecError, match=pattern):
        MixtureSpec.from_dict(raw)
    # the largest values allowed still load
    MixtureSpec.from_dict(
        {
            "entries": [
                {
                    "source": "a/b",
                    "episodes": [2**62 - 1],
                    "exclude_episodes": [2**62 - 1],
                    "delta_timestamps": {"action": [-1e6, 1e6]},
                }
            ]
        }
    )


def test_a_url_root_is_refused_naming_the_field():
    """`root` is a Hub dataset's local copy; a URL there (once taken for a missing local folder, with a Hub download
    into a directory named after it) is a problem of the entry (OpenTau configs read such a root as the source)."""
    with pytest.raises(MixtureSpecError) as err:
        MixtureSpec.from_dict({"entries": [{"source": "org/ds", "root": "http://127.0.0.1:1/ds"}]})
    assert err.value.problems == [
        "<dict>: entries[0] (org/ds): field 'root' is a local copy of a Hub dataset, got the "
        "URL 'http://127.0.0.1:1/ds': a dataset read from a URL is the entry's 'source'"
    ]


@pytest.mark.timeout(60)
def test_200000_entries_without_a_quadratic_blow_up():
    """Names are made unique in linear time: 200,000 entries (unnamed ones sharing sources, named ones taking the
    names that would be generated) load in well under 20 s (about 2.5 s on the 2-core CI machine; the quadratic
    check took minutes), and a repeated name is still reported."""
    import time

    n = 200_000
    entries = [{"source": f"/data/d{i % (n // 2)}"} for i in range(n - 2)]
    entries += [{"source": "/data/x", "name": "/data/d0#2"}, {"source": "/data/y", "name": "/data/d1#2"}]
    t0 = time.perf_counter()
    spec = MixtureSpec.from_dict({"entries": entries})
    seconds = time.perf_counter() - t0
    print(f"\n{n} entries: {seconds:.2f} s")
    names = [e.name for e in spec.entries]
    assert len(set(names)) == n and names[0] == "/data/d0" and names[n // 2] == "/data/d0#3"  # #2 is taken
    assert names[n // 2 + 1] == "/data/d1#3" and names[-1] == "/data/d1#2"
    assert seconds < 20
    with pytest.raises(MixtureSpecError, match="entry names must be unique, repeated: 'twice'"):
        MixtureSpec.from_dict(
            {"entries": entries[:10] + [{"source": "/z", "name": "twice"}, {"source": "/w", "name": "twice"}]}
        )
    with pytest.raises(MixtureSpecError, match=r"'state_indices' repeats indices \[3\]"):
        MixtureSpec.from_dict({"entries": [{"source": "/z", "state_indices": list(range(n)) + [3]}]})
