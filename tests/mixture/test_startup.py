"""Distributed start-up of a mixture under torchrun (2 processes, gloo), against a real HTTP server on 127.0.0.1 that
counts requests and injects 429s (Retry-After) and 404s: a rank 5 s late, and a download that fails (the error
raised on every rank), both end without a hang, each file fetched once."""

from __future__ import annotations

import json

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


def test_torchrun_a_rank_whose_preflight_fails_fails_every_rank_at_once(synthetic, served, tmp_path):
    """prepare given the spec: rank 1 reads one with a mistyped camera key; its preflight error reaches rank 0 in the
    first collective, and both raise at once (not after the collective time limit, 60 s here)."""
    spec = http_spec(synthetic, served)
    good = write_spec(tmp_path, spec)
    entry = spec["entries"][2]
    role = next(r for r in entry["roles"] if r not in ("state", "action"))
    entry["roles"][role] += '"'
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(spec))
    output = finish(torchrun(tmp_path / "out", good, tmp_path / "cache", 2, "--spec-in-prepare", "--other-spec",
                             f"1:{bad}"))
    r0, r1 = records(tmp_path / "out", 2)
    assert not r0["ok"] and not r1["ok"], output[-4000:]
    for r in (r0, r1):
        assert r["message"].startswith("mixture start-up failed: rank 1 (") and "could not check the mixture" in r["message"]
        assert r["error_type"] == "MixturePreflightError" and f"roles.{role}" in r["message"]
        assert r["prepare_end"] - r["prepare_start"] < 20
    assert r1["cause"] == "MixturePreflightError" and r0["cause"] is None
