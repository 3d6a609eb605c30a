"""`$ref` includes: inlined, merged with siblings, relative to their file, and contained in the spec's directory."""

import json
import os

import pytest

from episodic.format.errors import MixtureSpecError
from episodic.mixture.checking.refs import MAX_NESTING, MAX_NODES, resolve_refs


def write(path, obj):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj) if not isinstance(obj, str) else obj)
    return path


def test_includes_chain_merge_and_resolve_relative_to_their_file(tmp_path):
    write(tmp_path / "parts/datasets.json", [{"repo_id": "a/b"}, {"$ref": "more/one.json", "revision": "v1"}])
    write(tmp_path / "parts/more/one.json", {"repo_id": "c/d", "episodes": [1]})
    write(tmp_path / "mix.json", {"datasets": {"$ref": "parts/datasets.json"}, "weights": [1, 2]})
    top = write(
        tmp_path / "train.json", {"dataset_mixture": {"$ref": "mix.json", "weights": [3, 4], "x": {"y": 1}}, "seed": 0}
    )
    assert resolve_refs(top) == {
        "dataset_mixture": {
            "datasets": [{"repo_id": "a/b"}, {"repo_id": "c/d", "episodes": [1], "revision": "v1"}],
            "weights": [3, 4],
            "x": {"y": 1},
        },
        "seed": 0,
    }


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


# ------------------------------------------------------------------------------------------ bounds
def alias_bomb(levels: int = 9, fan: int = 10) -> str:
    """A small YAML spec whose one entry's storage_options hold `levels` levels of `fan` aliases each: fan**levels
    values once expanded (10**9 for the defaults, from about 500 bytes)."""
    lines = [
        "entries:",
        "  - source: /tmp/nowhere",
        "    storage_options:",
        "      l0: &l0 [" + ",".join(["lol"] * fan) + "]",
    ]
    for k in range(1, levels):
        lines.append(f"      l{k}: &l{k} [" + ",".join([f"*l{k - 1}"] * fan) + "]")
    return "\n".join(lines) + "\n"


LOAD_BOUNDED = """
import resource, sys, time
resource.setrlimit(resource.RLIMIT_AS, (1 << 31, 1 << 31))  # 2 GiB: the bomb expanded needs far more
from episodic.format.errors import MixtureSpecError
from episodic.mixture import load_spec
t0 = time.perf_counter()
try:
    load_spec(sys.argv[1])
except MixtureSpecError as e:
    print(f"refused in {time.perf_counter() - t0:.2f} s: {e}")
"""


def test_a_yaml_alias_bomb_is_refused_at_once_in_bounded_memory(tmp_path):
    """About 500 bytes of nine levels of aliases (10**9 values expanded): refused by the size bound, naming it, at
    once and within 2 GiB of address space (rebuilding every aliased node grew past 1.5 GB and ran for minutes)."""
    pytest.importorskip("yaml")
    import subprocess
    import sys

    spec = tmp_path / "bomb.yaml"
    spec.write_text(alias_bomb())
    assert len(spec.read_bytes()) < 600
    out = subprocess.run([sys.executable, "-c", LOAD_BOUNDED, str(spec)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.startswith("refused in "), (out.stdout + out.stderr)[-2000:]
    assert f"{spec}: the spec expands to" in out.stdout and f"more than the {MAX_NODES:,}" in out.stdout
    print(out.stdout)
    assert float(out.stdout.split()[2]) < 10


def test_repeated_yaml_nodes_stay_shared(tmp_path):
    """Aliases (and a file included twice) resolve once and stay one object; a spec just under the bound (4.4
    million values expanded, from aliases) loads without being rebuilt value by value."""
    pytest.importorskip("yaml")
    write(tmp_path / "opts.json", {"anon": True})
    spec = write(
        tmp_path / "mix.yaml",
        "roles: &r {front: observation.images.top}\n"
        "entries:\n"
        "  - {source: /tmp/a, roles: *r, storage_options: {$ref: opts.json}}\n"
        "  - {source: /tmp/b, roles: *r, storage_options: {$ref: opts.json}}\n"
        "  - {source: /tmp/c, roles: *r}\n",
    )
    got = resolve_refs(spec)
    assert got["entries"][0]["roles"] == {"front": "observation.images.top"}
    assert got["entries"][0]["roles"] is got["entries"][1]["roles"] is got["entries"][2]["roles"] is got["roles"]
    assert got["entries"][0]["storage_options"] is got["entries"][1]["storage_options"]
    big = write(tmp_path / "big.yaml", alias_bomb(levels=4, fan=44))
    loaded = resolve_refs(big)
    shared = loaded["entries"][0]["storage_options"]
    assert len(shared["l3"]) == 44 and all(x is shared["l2"] for x in shared["l3"])


def test_a_spec_nested_too_deep_is_a_spec_error_not_a_recursion_error(tmp_path):
    """100,000 levels (past what the parsers follow) and 150 (past the bound), in JSON and YAML, in the spec or in
    an include: MixtureSpecError naming the file and the bound."""
    for levels in (100_000, 150):
        deep = "[" * levels + "]" * levels
        for name, text in (
            (f"deep{levels}.json", '{"entries": [{"source": "/x", "storage_options": {"a": %s}}]}'),
            (f"deep{levels}.yaml", "entries: [{source: /x, storage_options: {a: %s}}]\n"),
        ):
            spec = write(tmp_path / name, text % deep)
            with pytest.raises(MixtureSpecError, match=f"{spec}: nested deeper than {MAX_NESTING} levels"):
                resolve_refs(spec)
    write(tmp_path / "part.json", json.loads("[" * 60 + "]" * 60))
    top = write(
        tmp_path / "top.json",
        {
            "entries": [
                {"source": "/x", "storage_options": {"a": json.loads("[" * 50 + '{"$ref": "part.json"}' + "]" * 50)}}
            ]
        },
    )
    with pytest.raises(MixtureSpecError, match=f"nested deeper than {MAX_NESTING} levels"):
        resolve_refs(top)
