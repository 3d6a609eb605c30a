"""Distributed start-up of a mixture under torchrun (2 processes, gloo), against a real HTTP server on 127.0.0.1 that
counts requests and injects 429s (Retry-After) and 404s: a rank 5 s late, and a download that fails (the error
raised on every rank), both end without a hang, each file fetched once. Given the spec, prepare reads each
metadata file once on the node (rank 0's preflight, handed over to rank 1); a rank given another spec, or a
preflight that fails, fails every rank at once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from startup_helpers import data_gets, expected, finish, http_spec, records, torchrun, write_spec

pytest.importorskip("aiohttp")
pytest.importorskip("torch.distributed")
pytestmark = pytest.mark.timeout(120)


def test_torchrun_rank_one_five_seconds_late_with_429s(synthetic, served, tmp_path):
    """torchrun, 2 processes: rank 1 calls prepare 5 s after rank 0, and the server throttles the first data
    requests; rank 0 (LOCAL_RANK 0) downloads at once, without waiting for rank 1, each file once."""
    spec = http_spec(synthetic, served)
    need, never = expected(synthetic, spec)
    spec_path = write_spec(tmp_path, spec)
    served.fault_paths, served.faults, served.retry_after = set(need), ["429"] * 3, "1"
    output = finish(torchrun(tmp_path / "out", spec_path, tmp_path / "cache", 2, "--late-rank", 1, "--late-s", 5))
    r0, r1 = records(tmp_path / "out", 2)
    assert r0["ok"] and r1["ok"], output[-4000:]
    assert sorted(data_gets(served)) == sorted(list(need) + [a[2] for a in served.answered(429)])
    assert all(served.served(p) == 1 for p in need) and not any(served.gets(p) for p in never)
    assert len(served.answered(429)) == 3
    assert r0["downloader"] == r1["downloader"] == 0 and r0["roots"] == r1["roots"] and all(r1["local"])
    assert r0["fetched"] == r1["fetched"] == len(need) and r0["nodes"] == 1
    assert r1["prepare_start"] - r0["prepare_start"] >= 4.5
    last = max(t for t, m, p, status in served.answers if p in need and status == 200)
    assert last < r1["prepare_start"], "the download waited for the late rank"


def test_torchrun_failed_download_raises_on_every_rank(synthetic, served, tmp_path):
    spec = http_spec(synthetic, served)
    need, _ = expected(synthetic, spec)
    broken = sorted(p for p in need if "/data/" in p)[-1]
    served.fault_paths, served.faults = {broken}, ["404"] * 10
    output = finish(torchrun(tmp_path / "out", write_spec(tmp_path, spec), tmp_path / "cache", 2))
    r0, r1 = records(tmp_path / "out", 2)
    assert not r0["ok"] and not r1["ok"], output[-4000:]
    for r in (r0, r1):
        assert r["type"] == "MixtureStartupError" and r["error_type"] == "MissingFileError"
        assert r["url"] == served.url + broken and r["failed_rank"] == 0
        assert f"{served.url}{broken}: file not found" in r["message"] and "rank 0" in r["message"]
    assert r0["message"] == r1["message"] and r0["cause"] == "MissingFileError" and r1["cause"] is None
    assert served.gets(broken) == 1
    # no rank waited for a time limit (60 s): both ended as soon as the error was known
    assert max(r0["prepare_end"], r1["prepare_end"]) - min(r0["prepare_start"], r1["prepare_start"]) < 30


def meta_requests(server) -> dict[str, list[str]]:
    """Per metadata file requested, the methods of its requests."""
    out: dict[str, list[str]] = {}
    for method, path, _ in server.requests:
        if "/meta/" in path:
            out.setdefault(path, []).append(method)
    return out


def test_torchrun_spec_given_to_prepare_metadata_read_once_per_node(synthetic, served, tmp_path):
    """prepare given the spec, rank 1 3 s late: rank 0 (LOCAL_RANK 0) alone runs preflight, at once, and hands the
    checked report over; each metadata file is asked for once on the node (one GET, and the size check's HEAD; the
    local copy is written from the bytes preflight read); both ranks get the same report, read from local files."""
    spec = http_spec(synthetic, served)
    need, never = expected(synthetic, spec)
    output = finish(
        torchrun(
            tmp_path / "out",
            write_spec(tmp_path, spec),
            tmp_path / "cache",
            2,
            "--spec-in-prepare",
            "--late-rank",
            1,
            "--late-s",
            3,
        )
    )
    r0, r1 = records(tmp_path / "out", 2)
    assert r0["ok"] and r1["ok"], output[-4000:]
    meta = meta_requests(served)
    assert len(meta) >= 4 * len(spec["entries"])  # info, episodes, tasks, stats of each entry
    for path, methods in meta.items():
        assert methods.count("GET") == 1 and methods.count("HEAD") <= 1, (path, methods)
    assert all(served.served(p) == 1 for p in need) and not any(served.gets(p) for p in never)
    # rank 0 checked and downloaded before rank 1 came; rank 1 asked the server nothing
    last = max(t for t, m, p, status in served.answers)
    assert last < r1["prepare_start"], "the start-up waited for the late rank"
    assert r0["preflight_rank"] == r1["preflight_rank"] == 0 and r0["preflight_seconds"] > 0
    assert r0["preflight_seconds"] == r1["preflight_seconds"] and r0["downloader"] == r1["downloader"] == 0
    # the same report on both ranks, every entry read from the local copies
    assert r0["entries"] == r1["entries"] and r0["episode_lengths"] == r1["episode_lengths"]
    assert [e["name"] for e in r0["entries"]] == [e["name"] for e in spec["entries"]]
    assert all(e["status"] == "ok" and e["frames"] > 0 and e["share"] > 0 for e in r0["entries"])
    for r in (r0, r1):
        assert all(r["local"]) and r["sources"] == r["meta_roots"] == r["roots"] == r0["roots"]
    # the copies' metadata files are the server's, byte for byte
    for root, d in zip(r0["roots"], synthetic):
        for rel in ("meta/info.json", "meta/stats.json"):
            assert (Path(root) / rel).read_bytes() == (Path(d.path) / rel).read_bytes()
    assert not list((tmp_path / "cache" / "startup").iterdir())  # the hand-over file is gone
    print(
        f"prepare seconds: rank 0 {r0['seconds']:.2f} (preflight {r0['preflight_seconds']:.2f}), "
        f"rank 1 {r1['seconds']:.2f}"
    )


def mistyped(spec: dict) -> tuple[dict, str]:
    """A copy of `spec` whose third entry maps a camera role to a key its dataset does not have, and that role."""
    bad = json.loads(json.dumps(spec))
    entry = bad["entries"][2]
    role = next(r for r in entry["roles"] if r not in ("state", "action"))
    entry["roles"][role] += '"'
    return bad, role


def test_torchrun_a_rank_given_another_spec_fails_every_rank_at_once(synthetic, served, tmp_path):
    """prepare given the spec: rank 1 reads one with a mistyped camera key. Only rank 0 would check it, so the
    difference is found by the digests in the first collective: both raise at once (not after the collective time
    limit, 60 s here), naming both ranks, and rank 1 asks the server nothing."""
    spec = http_spec(synthetic, served)
    good = write_spec(tmp_path, spec)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(mistyped(spec)[0]))
    output = finish(
        torchrun(tmp_path / "out", good, tmp_path / "cache", 2, "--spec-in-prepare", "--other-spec", f"1:{bad}")
    )
    r0, r1 = records(tmp_path / "out", 2)
    assert not r0["ok"] and not r1["ok"], output[-4000:]
    assert r0["message"] == r1["message"]
    for r in (r0, r1):
        assert r["message"].startswith("mixture start-up failed: rank 1 (") and "than rank 0" in r["message"]
        assert "another mixture spec" in r["message"] and "give every rank the same spec" in r["message"]
        assert r["error_type"] == "MixtureSpecMismatch" and r["failed_rank"] == 1 and r["cause"] is None
        assert r["prepare_end"] - r["prepare_start"] < 20
    assert all(methods.count("GET") <= 1 for methods in meta_requests(served).values())  # rank 0's preflight only


def test_torchrun_a_failing_preflight_fails_every_rank_at_once(synthetic, served, tmp_path):
    """prepare given the spec, the same on both ranks, with a mistyped camera key: rank 0's preflight (on its
    download thread) fails; the error reaches rank 1 in the outcomes and both raise at once, naming rank 0, the
    entry and the role."""
    spec, role = mistyped(http_spec(synthetic, served))
    output = finish(torchrun(tmp_path / "out", write_spec(tmp_path, spec), tmp_path / "cache", 2, "--spec-in-prepare"))
    r0, r1 = records(tmp_path / "out", 2)
    assert not r0["ok"] and not r1["ok"], output[-4000:]
    assert r0["message"] == r1["message"]
    name = spec["entries"][2]["name"]
    for r in (r0, r1):
        assert r["message"].startswith("mixture start-up failed: rank 0 (")
        assert "could not check the mixture" in r["message"]
        assert r["error_type"] == "MixturePreflightError" and f"roles.{role}" in r["message"]
        assert r["failed_rank"] == 0 and r["entry"] == f"2 ({name})" and name in r["message"]
        assert r["prepare_end"] - r["prepare_start"] < 20
    assert r0["cause"] == "MixturePreflightError" and r1["cause"] is None
    assert not data_gets(served)  # nothing downloaded
    assert all(methods.count("GET") == 1 for methods in meta_requests(served).values())  # checked once


def test_torchrun_several_start_ups_in_one_job_one_rank_late(synthetic, served, tmp_path):
    """A training mixture then validation mixtures: prepare four times in one job (given the spec, so the report is
    handed over each time), rank 1 arriving 1.5 s late to each start-up after the first. Each start-up meets under
    its own prefix: every one works on both ranks, none waits for a time limit (15 s here), and the later ones
    fetch nothing (the copies are there)."""
    spec = http_spec(synthetic, served)
    output = finish(
        torchrun(
            tmp_path / "out",
            write_spec(tmp_path, spec),
            tmp_path / "cache",
            2,
            "--spec-in-prepare",
            "--timeout-s",
            15,
            "--again",
            3,
            "--late-rank",
            1,
            "--again-late-s",
            1.5,
        ),
        timeout=110,
    )
    r0, r1 = records(tmp_path / "out", 2)
    assert r0["ok"] and r1["ok"], output[-4000:]
    for k, (a, b) in enumerate(zip(r0["again"], r1["again"])):
        assert a["ok"] and b["ok"], (k, a, b, output[-4000:])
        assert a["roots"] == b["roots"] == r0["roots"] and a["entries"] == b["entries"] == r0["entries"]
        assert b["seconds"] < 10 and a["seconds"] < 1.5 + 10, (k, a["seconds"], b["seconds"])  # no time limit hit
    assert len(r0["again"]) == 3
    assert not list((tmp_path / "cache" / "startup").iterdir())


def test_torchrun_a_tampered_hand_over_file_fails_every_rank_and_runs_no_code(synthetic, served, tmp_path):
    """prepare given the spec: before rank 1 reads the report rank 0 handed over, the file is replaced by a pickle
    that would create a file when loaded (whoever can write the hand-over directory). Rank 1 refuses it (the
    hand-over is JSON, checked field by field): both ranks raise, naming rank 1 and the file, and no code ran."""
    spec = http_spec(synthetic, served)
    output = finish(
        torchrun(
            tmp_path / "out",
            write_spec(tmp_path, spec),
            tmp_path / "cache",
            2,
            "--spec-in-prepare",
            "--tamper-handover",
        )
    )
    r0, r1 = records(tmp_path / "out", 2)
    assert not list((tmp_path / "out").glob("code-ran-*")), "the payload ran"
    assert not r0["ok"] and not r1["ok"], output[-4000:]
    assert r0["message"] == r1["message"]
    for r in (r0, r1):
        assert r["message"].startswith("mixture start-up failed: rank 1 (") and "could not load" in r["message"]
        assert "refused: not JSON" in r["message"] and str(tmp_path / "cache" / "startup") in r["message"]
        assert r["type"] == "MixtureStartupError" and r["failed_rank"] == 1
    assert not list((tmp_path / "cache" / "startup").iterdir())  # the writer removed the file


def test_torchrun_a_rank_past_the_time_limit_for_a_later_start_up_fails_both_in_time(synthetic, served, tmp_path):
    """A second start-up that rank 1 reaches 8 s late, with a 3 s time limit: rank 0 gives up waiting for it after
    3 s (not a wait for the store's own 30-minute limit), and rank 1, coming later, finds rank 0 gone and gives up
    after 3 s too; both name the group and the time limit."""
    spec = http_spec(synthetic, served)
    output = finish(
        torchrun(
            tmp_path / "out",
            write_spec(tmp_path, spec),
            tmp_path / "cache",
            2,
            "--spec-in-prepare",
            "--timeout-s",
            3,
            "--poll-s",
            0.2,
            "--again",
            1,
            "--late-rank",
            1,
            "--again-late-s",
            8,
        )
    )
    r0, r1 = records(tmp_path / "out", 2)
    assert r0["ok"] and r1["ok"], output[-4000:]
    for r in (r0, r1):
        (again,) = r["again"]
        assert not again["ok"] and "could not form the start-up group of ranks 0..1 within 3 s" in again["message"]
        assert "the other ranks did not all arrive" in again["message"]
        assert again["seconds"] < 3 + 5, again
