"""Who downloads for whom (pure), and the team's collectives with real process groups (gloo) of plain processes
(no torchrun agent, which would kill the other ranks when one dies): a killed downloading rank is an error on the
others within the collective time limit, not a hang; two nodes check the mixture and download once each, or once in
all on a shared cache."""

from __future__ import annotations

import json
import signal
import time

import pytest

from episodic.mixture.startup.team import Team, leaders

from startup_helpers import expected, finish, http_spec, plain_ranks, records, write_spec

pytest.importorskip("aiohttp")
pytest.importorskip("torch.distributed")
pytestmark = pytest.mark.timeout(120)


# ------------------------------------------------------------------------------------------ who downloads
def test_one_leader_per_node_its_claimant_else_its_lowest_rank():
    # node a: rank 2 has LOCAL_RANK 0; node b: nobody could tell (no LOCAL_RANK); node c: two claims
    nodes = [("a", False), ("b", None), ("a", True), ("b", None), ("c", True), ("c", True), ("a", False)]
    assert leaders(nodes) == [2, 1, 2, 1, 4, 4, 2]
    assert leaders(nodes, shared_cache=True) == [0] * 7
    assert leaders([("solo", True)]) == [0]


def test_a_team_of_one_without_torch_distributed():
    team = Team.open()
    assert (team.rank, team.size) == (0, 1)
    assert team.gather({"x": 1}, "step") == [{"x": 1}]
    assert team.gather(("host", None, 2.5), "step") == [["host", None, 2.5]]  # JSON, as between ranks
    assert team.any(True, "step") and not team.any(False, "step")
    team.close()
    with pytest.raises(ValueError, match="not initialised"):
        Team.open(group=object())


# ------------------------------------------------------------------------------------------ real process groups
def test_a_dead_downloading_rank_is_an_error_not_a_hang(synthetic, served, tmp_path):
    """The downloading rank is killed while a fetch hangs: the other rank, waiting in the rounds, gets
    MixtureStartupError within the collective time limit. No LOCAL_RANK: the team picks the downloader after
    both ranks met (so the first data request means both are in the rounds)."""
    spec = http_spec(synthetic, served)
    need, _ = expected(synthetic, spec)
    served.fault_paths, served.faults, served.sleep_s = set(need), ["sleep"] * len(need), 60.0  # data GETs hang
    procs = plain_ranks(
        tmp_path / "out",
        write_spec(tmp_path, spec),
        [tmp_path / "cache"] * 2,
        [0, 0],
        "--timeout-s",
        8,
        local_rank=False,
    )
    try:
        deadline = time.monotonic() + 60
        while not any("/meta/" not in p for m, p, _ in served.requests):  # preflight is done, a data fetch began
            assert time.monotonic() < deadline and procs[0].poll() is None
            time.sleep(0.05)
        time.sleep(0.5)
        procs[0].send_signal(signal.SIGKILL)
        t_kill = time.monotonic()
        finish(procs[1], timeout=60)
        waited = time.monotonic() - t_kill
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.communicate()
    r1 = json.loads((tmp_path / "out" / "rank1.json").read_text())
    assert not r1["ok"] and r1["type"] == "MixtureStartupError" and "rank 1 of 2" in r1["message"]
    assert waited < 8 + 10, waited


def meta_gets(server) -> dict[str, int]:
    """GETs per metadata file requested."""
    out: dict[str, int] = {}
    for method, path, _ in server.requests:
        if "/meta/" in path and method == "GET":
            out[path] = out.get(path, 0) + 1
    return out


def test_two_nodes_download_once_each(synthetic, served, tmp_path):
    """4 ranks, 2 nodes (GROUP_RANK) of 2, each node with its own cache, the spec given to prepare: each node's
    LOCAL_RANK 0 checks the mixture and downloads once for its node (each file twice in all); the other rank of a
    node gets its node's report and copies."""
    spec = http_spec(synthetic, served)
    need, _ = expected(synthetic, spec)
    caches = [tmp_path / "node0"] * 2 + [tmp_path / "node1"] * 2
    procs = plain_ranks(tmp_path / "out", write_spec(tmp_path, spec), caches, [0, 0, 1, 1], "--spec-in-prepare")
    outputs = [finish(p) for p in procs]
    recs = records(tmp_path / "out", 4)
    assert all(r["ok"] for r in recs), outputs[0][-3000:]
    assert all(served.served(p) == 2 for p in need)
    assert set(meta_gets(served).values()) == {2}  # once per node
    assert [r["downloader"] for r in recs] == [r["preflight_rank"] for r in recs] == [0, 0, 2, 2]
    assert {r["nodes"] for r in recs} == {2}
    for r in recs:
        assert all(root.startswith(str(caches[r["rank"]])) for root in r["roots"] + r["sources"])
        assert r["entries"] == recs[0]["entries"]
    assert recs[0]["roots"] == recs[1]["roots"] != recs[2]["roots"] == recs[3]["roots"]


def test_a_shared_cache_is_filled_once_in_all(synthetic, served, tmp_path):
    """2 nodes of one rank each on one cache with shared_cache=True, the spec given to prepare: rank 0 alone checks
    the mixture and downloads, each file once, and hands its report to the other node through the shared cache."""
    spec = http_spec(synthetic, served)
    need, _ = expected(synthetic, spec)
    procs = plain_ranks(
        tmp_path / "out",
        write_spec(tmp_path, spec),
        [tmp_path / "shared"] * 2,
        [0, 1],
        "--shared-cache",
        "--spec-in-prepare",
    )
    outputs = [finish(p) for p in procs]
    recs = records(tmp_path / "out", 2)
    assert all(r["ok"] for r in recs), outputs[0][-3000:]
    assert all(served.served(p) == 1 for p in need) and set(meta_gets(served).values()) == {1}
    assert [r["downloader"] for r in recs] == [r["preflight_rank"] for r in recs] == [0, 0]
    assert recs[1]["nodes"] == 1 and recs[1]["fetched"] == len(need)
    assert recs[0]["roots"] == recs[1]["roots"] == recs[1]["sources"] and recs[0]["entries"] == recs[1]["entries"]
    assert not list((tmp_path / "shared" / "startup").iterdir())  # the hand-over file is gone


def test_a_report_that_cannot_be_handed_over_fails_every_rank(synthetic, served, tmp_path):
    """The spec given to prepare, and the downloading rank cannot write the hand-over file (its directory is a
    file): after its preflight and downloads, every rank raises, naming rank 0 and the error, without waiting for a
    time limit; the other rank asked the server nothing."""
    spec = http_spec(synthetic, served)
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "startup").write_text("not a directory")
    procs = plain_ranks(
        tmp_path / "out", write_spec(tmp_path, spec), [tmp_path / "cache"] * 2, [0, 0], "--spec-in-prepare"
    )
    outputs = [finish(p) for p in procs]
    r0, r1 = records(tmp_path / "out", 2)
    assert not r0["ok"] and not r1["ok"], outputs[0][-3000:]
    assert r0["message"] == r1["message"] and r0["failed_rank"] == r1["failed_rank"] == 0
    assert r0["message"].startswith("mixture start-up failed: rank 0 (")
    assert "could not hand the checked mixture over" in r0["message"] and r0["error_type"] in r0["message"]
    assert r0["cause"] == r0["error_type"] and r1["cause"] is None
    assert max(r["prepare_end"] - r["prepare_start"] for r in (r0, r1)) < 20
    assert set(meta_gets(served).values()) == {1}


@pytest.mark.slow
def test_a_rank_that_never_comes_is_an_error_within_the_time_limit(synthetic, served, tmp_path):
    """Rank 1 is alive but 20 s late, the limit 4 s: rank 0 (which downloaded at once) gives up on it after about
    4 s; rank 1, when it comes, finds nobody and fails too. Neither hangs."""
    spec = http_spec(synthetic, served)
    procs = plain_ranks(
        tmp_path / "out",
        write_spec(tmp_path, spec),
        [tmp_path / "cache"] * 2,
        [0, 0],
        "--timeout-s",
        4,
        "--late-rank",
        1,
        "--late-s",
        20,
    )
    outputs = [finish(p) for p in procs]
    r0, r1 = records(tmp_path / "out", 2)
    assert not r0["ok"] and not r1["ok"], outputs[0][-3000:]
    assert "within 4 s" in r0["message"] and r0["prepare_end"] - r0["prepare_start"] < 4 + 6
    assert r1["prepare_end"] - r1["prepare_start"] < 4 + 6
