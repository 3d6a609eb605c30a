"""A node's downloads for a checked mixture in one process (`prepare` without torch.distributed): datasets written
by episodic's writer, served over HTTP by a real server on 127.0.0.1 that counts requests and injects 429s
(Retry-After) and 404s. Each needed file is fetched once, unneeded ones (cameras without a role, episodes not
selected) never, nothing at all is asked again for files on disk, and the local copies are datasets with the
original's items."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from episodic import EpisodicDataset
from episodic.format.errors import MissingFileError, MixtureStartupError
from episodic.mixture import preflight
from episodic.mixture.startup.distributed import prepare
from episodic.testing.synthetic import mixture_spec

from startup_helpers import data_gets, expected, http_spec
from support import assert_items_equal

pytest.importorskip("aiohttp")


def test_one_process_fetches_each_needed_file_once_then_asks_nothing(synthetic, served, tmp_path, monkeypatch):
    monkeypatch.setenv("EPISODIC_CACHE", str(tmp_path / "cache"))
    spec = http_spec(synthetic, served)
    need, never = expected(synthetic, spec)
    report = preflight(spec)
    before = len(served.requests)
    result = prepare(report, concurrency=4)
    assert sorted(data_gets(served)) == sorted(need)  # each once, nothing else
    assert all(served.served(p) == 1 for p in need) and not any(served.gets(p) for p in never)
    assert (result.files_needed, result.files_missing, result.files_fetched) == (len(need), len(need), len(need))
    assert result.downloader == 0 and result.nodes == 1
    assert all(root.startswith(str(tmp_path / "cache" / "copies")) for root in result.roots)

    # the local copies are datasets: items of the selected episodes and mapped cameras equal the originals'
    for i, (entry, d) in enumerate(zip(spec["entries"], synthetic)):
        src = result.report.sources[i]
        assert src.is_local and src.root == result.roots[i] and result.report.metadata[i].root == src.root
        cams = [k for role, k in entry["roles"].items() if role not in ("state", "action")]
        episodes = entry.get("episodes")
        got = EpisodicDataset(src.root, video_keys=cams, episodes=episodes)
        want = EpisodicDataset(d.path, video_keys=cams, episodes=episodes)
        assert len(got) == len(want)
        for j in (0, len(want) - 1):
            assert_items_equal(want[j], got[j])
    # a size and version (HEAD), then the bytes (GET): two requests per file, and the metadata files
    assert sorted(p for m, p, _ in served.requests[before:] if "/meta/" not in p) == sorted(list(need) * 2)

    # again, with a new report: every file is on disk, nothing is asked (not even a size or a version)
    report = preflight(spec)
    n = len(served.requests)
    again = prepare(report, concurrency=4)
    assert len(served.requests) == n and again.files_missing == 0 and again.files_fetched == 0
    assert again.roots == result.roots


def test_429_answers_are_waited_out_as_retry_after_asks(synthetic, served, tmp_path, monkeypatch):
    monkeypatch.setenv("EPISODIC_CACHE", str(tmp_path / "cache"))
    spec = http_spec(synthetic, served)
    need, _ = expected(synthetic, spec)
    served.fault_paths, served.faults, served.retry_after = set(need), ["429"] * 4, "1"  # GETs (a HEAD's 429
    # would not count: fsspec's HTTP `info` falls back to a GET on its own)
    t0 = time.monotonic()
    result = prepare(spec, concurrency=4)  # the spec: preflighted by prepare
    assert time.monotonic() - t0 >= 1.0 and result.files_fetched == len(need)
    assert [e.name for e in result.report.entries] == [e["name"] for e in spec["entries"]]
    throttled = served.answered(429)
    assert len(throttled) == 4 and not served.faults
    first = min(t for t, *_ in throttled)
    # the host was held: no request of the data files reached the server within the second after the first 429
    # that was not already under way (answered within 0.1 s of it)
    later = [a for a in served.answers if a[2] in need and first + 0.1 < a[0] < first + 0.95]
    assert not later, later
    assert all(served.served(p) == 1 for p in need)


def test_given_the_spec_each_metadata_file_is_asked_for_once(synthetic, copy_of, tmp_path, monkeypatch):
    """prepare(spec) in one process: the local copies' metadata is written from the files preflight read (also the
    optional files that are not there: each asked for once, answered 404 once), not fetched again; the copies load
    as their datasets."""
    from support import FaultServer

    monkeypatch.setenv("EPISODIC_CACHE", str(tmp_path / "cache"))
    v21, v30 = (next(d for d in synthetic if d.version == v) for v in ("v2.1", "v3.0"))
    roots = [copy_of(v21.path), copy_of(v30.path)]
    (roots[0] / "meta" / "stats.json").unlink()  # v2.1: then episodes_stats.jsonl is asked for (none here either)
    assert not (roots[0] / "meta" / "episodes_stats.jsonl").exists()
    spec = mixture_spec([v21, v30])
    with FaultServer(tmp_path) as server:
        for entry, root in zip(spec["entries"], roots):
            entry["source"] = f"{server.url}/{root.name}"
        result = prepare(spec, concurrency=2)
        meta = [(m, p) for m, p, _ in server.requests if "/meta/" in p]
        missing = server.answered(404)
    gets = [p for m, p in meta if m == "GET"]
    assert sorted(gets) == sorted(set(gets)) and len(gets) >= 8, gets  # each once
    assert sorted(a[2] for a in missing) == [
        f"/{roots[0].name}/meta/{f}" for f in ("episodes_stats.jsonl", "stats.json")
    ]
    assert result.preflight_rank == 0 and result.preflight_seconds > 0 and result.report.metadata_files == ()
    for i, root in enumerate(roots):
        copy = result.report.sources[i]
        assert copy.is_local and copy.root == result.roots[i]
        for rel in ("meta/info.json", "meta/episodes.jsonl" if i == 0 else "meta/stats.json"):
            assert (Path(copy.root) / rel).read_bytes() == (root / rel).read_bytes()
        assert (Path(copy.root) / "meta" / "stats.json").exists() == (i == 1)
        got, want = EpisodicDataset(copy.root), EpisodicDataset(str(root))
        assert len(got) == len(want) and got.meta.stats.keys() == want.meta.stats.keys()
        assert_items_equal(want[len(want) - 1], got[len(got) - 1])


def test_a_missing_file_is_named_with_its_entry(synthetic, served, tmp_path, monkeypatch):
    monkeypatch.setenv("EPISODIC_CACHE", str(tmp_path / "cache"))
    spec = http_spec(synthetic, served)
    need, _ = expected(synthetic, spec)
    report = preflight(spec)
    broken = sorted(p for p in need if p.endswith(".mp4"))[0]
    served.fault_paths, served.faults = {broken}, ["404"] * 10
    with pytest.raises(MixtureStartupError) as info:
        prepare(report, concurrency=2)
    e = info.value
    index = next(i for i, entry in enumerate(spec["entries"]) if entry["source"].endswith(broken.split("/")[1]))
    assert e.url == served.url + broken and e.error_type == "MissingFileError" and e.rank == 0
    assert e.entry == f"{index} ({synthetic[index].name})" and isinstance(e.__cause__, MissingFileError)
    assert f"{served.url}{broken}: file not found" in str(e) and synthetic[index].name in str(e)
    assert served.gets(broken) == 1  # not found: never retried


_HUB_SCRIPT = """
import json, sys
from episodic.mixture import preflight
from episodic.mixture.startup.distributed import prepare
report = preflight(json.loads(sys.argv[1]))
result = prepare(report, concurrency=2)
print(json.dumps({"roots": list(result.roots), "missing": result.files_missing, "fetched": result.files_fetched}))
"""


def test_hub_entries_two_revisions_of_one_repo_by_tag_and_commit_sha(synthetic, tmp_path):
    """A repo at a tag and at a commit SHA in one mixture, HF_LEROBOT_HOME set: two directories (it used to be one
    for every revision), each file downloaded once at the commit its metadata came from; the next start-up asks
    the Hub nothing at all. HF_ENDPOINT is read when huggingface_hub is imported: a fresh interpreter."""
    import subprocess
    import sys
    from pathlib import Path

    from fsspec.implementations.local import LocalFileSystem

    from episodic.format import load_metadata

    from support import HubRepo, HubServer

    v1, main = Path(synthetic[0].path), Path(synthetic[3].path)
    repo = HubRepo({"v1": v1, "main": main})
    sha_main = repo.refs["main"][0]
    spec = {
        "entries": [
            {"source": "user/robot", "revision": "v1", "name": "tagged"},
            {"source": "user/robot", "revision": sha_main, "name": "pinned"},
        ]
    }
    with HubServer({"user/robot": repo}) as hub:
        env = dict(
            os.environ,
            HF_ENDPOINT=hub.endpoint,
            HF_HUB_DISABLE_IMPLICIT_TOKEN="1",
            HF_HUB_DISABLE_TELEMETRY="1",
            HF_HOME=str(tmp_path / "hf"),
            HF_LEROBOT_HOME=str(tmp_path / "lerobot"),
            EPISODIC_CACHE=str(tmp_path / "cache"),
            PYTHONPATH=os.pathsep.join(sys.path),
        )
        for name in ("HF_TOKEN", "HF_HUB_OFFLINE"):
            env.pop(name, None)

        def run() -> dict:
            out = subprocess.run(
                [sys.executable, "-c", _HUB_SCRIPT, json.dumps(spec)],
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert out.returncode == 0, out.stderr[-3000:]
            return json.loads(out.stdout.strip().splitlines()[-1])

        first = run()
        n = len(hub.requests)
        again = run()
        assert len(hub.requests) == n, hub.requests[n:]  # nothing asked: files and commits are on disk
    assert (
        first["roots"]
        == again["roots"]
        == [str(tmp_path / "lerobot" / "user" / "robot@v1"), str(tmp_path / "lerobot" / "user" / f"robot@{sha_main}")]
    )
    assert again["missing"] == again["fetched"] == 0
    wanted = 0
    for root, served, (sha, _) in zip(first["roots"], (v1, main), (repo.refs["v1"], repo.refs["main"])):
        meta = load_metadata(LocalFileSystem(), str(served))
        files = {meta.data_file_of(e) for e in range(meta.total_episodes)} | {
            meta.video_file_of(e, k) for e in range(meta.total_episodes) for k in meta.video_keys
        }
        wanted += len(files)
        for rel in files:
            assert (Path(root) / rel).read_bytes() == (served / rel).read_bytes()
            gets = [p for m, p in hub.requests if m == "GET" and p == f"/datasets/user/robot/resolve/{sha}/{rel}"]
            assert len(gets) == 1, (rel, gets)
    assert first["missing"] == first["fetched"] == wanted
