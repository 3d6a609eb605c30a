"""`$ref` includes: inlined, merged with siblings, relative to their file, and contained in the spec's directory."""

import json
import os

import pytest

from episodic.format.errors import MixtureSpecError
from episodic.mixture.refs import resolve_refs


def write(path, obj):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj) if not isinstance(obj, str) else obj)
    return path


def test_includes_chain_merge_and_resolve_relative_to_their_file(tmp_path):
    write(tmp_path / "parts/datasets.json", [{"repo_id": "a/b"}, {"$ref": "more/one.json", "revision": "v1"}])
    write(tmp_path / "parts/more/one.json", {"repo_id": "c/d", "episodes": [1]})
    write(tmp_path / "mix.json", {"datasets": {"$ref": "parts/datasets.json"}, "weights": [1, 2]})
    top = write(tmp_path / "train.json", {"dataset_mixture": {"$ref": "mix.json", "weights": [3, 4], "x": {"y": 1}},
                                          "seed": 0})
    assert resolve_refs(top) == {"dataset_mixture": {"datasets": [{"repo_id": "a/b"},
                                                                  {"repo_id": "c/d", "episodes": [1], "revision": "v1"}],
                                                     "weights": [3, 4], "x": {"y": 1}}, "seed": 0}


def test_yaml_includes(tmp_path):
    pytest.importorskip("yaml")
    write(tmp_path / "entries.yaml", "- source: a/b\n- source: c/d\n")
    top = write(tmp_path / "m.yaml", "entries: {$ref: entries.yaml}\n")
    assert resolve_refs(top) == {"entries": [{"source": "a/b"}, {"source": "c/d"}]}


@pytest.mark.parametrize("ref", ["../outside.json", "/etc/hostname", "sub/../../outside.json", "link/outside.json"])
def test_includes_cannot_leave_the_spec_directory(tmp_path, ref):
    spec_dir = tmp_path / "spec"
    write(tmp_path / "outside.json", {"secret": 1})
    (spec_dir / "sub").mkdir(parents=True)
    os.symlink(tmp_path, spec_dir / "link")  # a symlink out of the directory does not help either
    top = write(spec_dir / "m.json", {"entries": {"$ref": ref}})
    with pytest.raises(MixtureSpecError, match="outside the spec's directory") as err:
        resolve_refs(top)
    assert "secret" not in str(err.value)


def test_cycles_missing_files_bad_refs_and_bad_merges(tmp_path):
    write(tmp_path / "a.json", {"x": {"$ref": "b.json"}})
    write(tmp_path / "b.json", {"y": {"$ref": "a.json"}})
    with pytest.raises(MixtureSpecError, match=r"\$ref cycle: .*a.json -> .*b.json -> .*a.json"):
        resolve_refs(tmp_path / "a.json")
    write(tmp_path / "m.json", {"x": {"$ref": "nope.json"}})
    with pytest.raises(MixtureSpecError, match=r"m.json: \$ref target .*nope.json: file not found"):
        resolve_refs(tmp_path / "m.json")
    write(tmp_path / "n.json", {"x": {"$ref": 3}})
    with pytest.raises(MixtureSpecError, match="must be a non-empty path string"):
        resolve_refs(tmp_path / "n.json")
    write(tmp_path / "list.json", [1, 2])
    write(tmp_path / "o.json", {"x": {"$ref": "list.json", "k": 1}})
    with pytest.raises(MixtureSpecError, match=r"keys \['k'\] next to \$ref 'list.json' need an object"):
        resolve_refs(tmp_path / "o.json")
    write(tmp_path / "bad.json", "{oops")
    write(tmp_path / "p.json", {"x": {"$ref": "bad.json"}})
    with pytest.raises(MixtureSpecError, match="bad.json: not valid JSON"):
        resolve_refs(tmp_path / "p.json")
