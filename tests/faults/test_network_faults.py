"""Network faults against real HTTP servers on 127.0.0.1 (tests/support.py FaultServer): killed, hung,
restarted, answering 5xx/429/403/404, truncating, re-publishing changed files. Each case asserts its
outcome: a named error within the policy's stated time, or the right items. Every request loop is bounded
by a small policy (short timeouts and retry window)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from episodic import LeRobotDataset
from episodic.datasets.streaming import StreamingLeRobotDataset
from episodic.demo import write_demo_dataset
from episodic.format import DatasetFormatError, FetchError, MissingFileError
from episodic.format.errors import MixturePreflightError
from episodic.storage import FetchPolicy

from support import FaultServer, assert_items_equal

pytest.importorskip("aiohttp")

# short limits: a hung server fails in at most 1 + 0.4 + 0.4 = 1.8 s
POLICY = FetchPolicy(backoff_s=0.01, max_backoff_s=0.1, retry_window_s=1.0, timeout_s=0.4, connect_timeout_s=0.4)
RESTART_POLICY = FetchPolicy(backoff_s=0.01, max_backoff_s=0.1, retry_window_s=5.0, timeout_s=1, connect_timeout_s=1)
RESTART_S = 0.5  # a server back after this long is within RESTART_POLICY's window, even on a loaded machine
SLACK_S = 2.5  # a loaded 2-core machine
# retries after a time-out start only when they can end within the window: room for a few here
HUNG_POLICY = FetchPolicy(backoff_s=0.01, max_backoff_s=0.1, retry_window_s=2.0, timeout_s=0.3, connect_timeout_s=0.3)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    """3 short episodes, two 32x32 cameras: small enough to fetch whole many times."""
    return write_demo_dataset(
        tmp_path_factory.mktemp("net") / "ds",
        num_episodes=3,
        min_length=8,
        max_length=12,
        height=32,
        width=32,
        progress=False,
    )


@pytest.fixture(scope="module")
def republished(tmp_path_factory) -> Path:
    """Another dataset at the same paths (other lengths, other pixels): the first one re-published."""
    return write_demo_dataset(
        tmp_path_factory.mktemp("net2") / "ds",
        num_episodes=3,
        min_length=8,
        max_length=12,
        height=32,
        width=32,
        progress=False,
        seed=7,
    )


@pytest.fixture()
def served(dataset, tmp_path):
    """A writable copy of `dataset` at <server>/ds on a FaultServer with Range support."""
    shutil.copytree(dataset, tmp_path / "www" / "ds")
    with FaultServer(tmp_path / "www") as server:
        yield server


def _map(server, tmp_path, policy=POLICY, **kw) -> LeRobotDataset:
    return LeRobotDataset("x", root=server.url + "/ds", cache_dir=str(tmp_path / "cache"), fetch_policy=policy, **kw)


def _all_items_equal(remote, local) -> None:
    assert len(remote) == len(local)
    for i in range(len(local)):
        assert_items_equal(local[i], remote[i])


def _restart_later(server: FaultServer, after_s: float) -> threading.Thread:
    t = threading.Thread(target=lambda: (time.sleep(after_s), server.start()), daemon=True)
    t.start()
    return t


# ------------------------------------------------------------------------------------------ the stated limits
def test_default_policy_fails_a_hung_server_within_30_s(monkeypatch):
    for name in ("EPISODIC_FETCH_TIMEOUT", "EPISODIC_CONNECT_TIMEOUT", "EPISODIC_RETRY_WINDOW"):
        monkeypatch.delenv(name, raising=False)
    policy = FetchPolicy()
    assert (policy.connect_timeout_s, policy.timeout_s, policy.retry_window_s) == (10, 20, 30)
    assert policy.worst_case_s == 30
    monkeypatch.setenv("EPISODIC_RETRY_WINDOW", "5")
    monkeypatch.setenv("EPISODIC_CONNECT_TIMEOUT", "1")
    assert FetchPolicy().worst_case_s == 21


# ------------------------------------------------------------------------------------------ killed, restarted
def test_killed_server_gives_a_named_error_after_the_retry_window(served, tmp_path):
    served.kill()
    t0 = time.monotonic()
    with pytest.raises(FetchError) as info:
        _map(served, tmp_path)
    took = time.monotonic() - t0
    e = info.value
    assert e.url == served.url + "/ds/meta/info.json" and e.attempts >= 2
    assert f"{e.url}: cannot fetch after {e.attempts} attempts" in str(e) and "Connect" in str(e)
    assert POLICY.retry_window_s <= took < POLICY.worst_case_s + SLACK_S


def test_server_restarted_within_the_window_costs_no_error(served, dataset, tmp_path):
    local = LeRobotDataset("x", root=dataset)
    served.kill()
    restart = _restart_later(served, RESTART_S)
    remote = _map(served, tmp_path, RESTART_POLICY)  # metadata and parquet reads wait for the server
    restart.join()
    served.kill()
    restart = _restart_later(served, RESTART_S)
    _all_items_equal(remote, local)  # the mp4 fetches too
    restart.join()
    assert remote.stats()["retries"] >= 2


def test_server_killed_and_restarted_while_streaming(served, dataset, tmp_path):
    ref = LeRobotDataset("x", root=dataset)
    ds = StreamingLeRobotDataset(
        None,
        root=served.url + "/ds",
        cache_dir=tmp_path,
        episode_pool_size=1,
        fetch_policy=RESTART_POLICY,
        shuffle=False,
    )
    served.kill()  # after the metadata: rows and frames are fetched while the server is down, then back
    restart = _restart_later(served, RESTART_S)
    seen = []
    for item in ds:
        seen.append(int(item["index"]))
        assert_items_equal(ref[seen[-1]], item)
    restart.join()
    assert sorted(seen) == list(range(len(ref)))
    assert ds.timing_stats()["retries"] >= 1


# ------------------------------------------------------------------------------------------ hung
@pytest.mark.parametrize("when", ["metadata", "video"])
def test_hung_server_gives_a_named_error_within_the_stated_time(served, tmp_path, when):
    if when == "metadata":
        served.hang.set()
        t0 = time.monotonic()
        with pytest.raises(FetchError) as info:
            _map(served, tmp_path, HUNG_POLICY)
    else:
        ds = _map(served, tmp_path, HUNG_POLICY)
        served.hang.set()
        t0 = time.monotonic()
        with pytest.raises(FetchError) as info:
            ds[0]
    took = time.monotonic() - t0
    assert served.url in str(info.value) and "time" in str(info.value) and info.value.attempts >= 2
    assert took < HUNG_POLICY.worst_case_s + SLACK_S


def test_hung_server_while_streaming_gives_a_named_error(served, tmp_path):
    ds = StreamingLeRobotDataset(
        None, root=served.url + "/ds", cache_dir=tmp_path, episode_pool_size=1, fetch_policy=POLICY, shuffle=False
    )
    served.hang.set()  # after the metadata
    t0 = time.monotonic()
    with pytest.raises(FetchError, match=r"127\.0\.0\.1"):
        for _ in ds:
            pass
    assert time.monotonic() - t0 < POLICY.worst_case_s + SLACK_S


@pytest.mark.parametrize("fault", ["killed", "hung"])
def test_streaming_over_a_dead_host_fails_within_one_window(multifile_root, tmp_path, fault):
    """A pool of 1 fetches rows, sizes and mp4s one after another: each used to wait a whole window of its own
    (two windows before the error reached the loop); now the host is down after the first."""
    policy = FetchPolicy(backoff_s=0.01, max_backoff_s=0.05, retry_window_s=3.0, timeout_s=1.0, connect_timeout_s=1.0)
    shutil.copytree(multifile_root, tmp_path / "www" / "ds")
    with FaultServer(tmp_path / "www") as server:
        ds = StreamingLeRobotDataset(
            None,
            root=server.url + "/ds",
            cache_dir=tmp_path / "c",
            episode_pool_size=1,
            fetch_policy=policy,
            shuffle=False,
        )
        server.kill() if fault == "killed" else server.hang.set()
        t0 = time.monotonic()
        with pytest.raises(FetchError) as info:
            for _ in ds:
                pass
        took = time.monotonic() - t0
    assert server.url in str(info.value)
    assert ("connection refused" if fault == "killed" else "timed out") in str(info.value)
    # a window (a hung host: no retry after a time-out that could not end within it), not two: 6 s
    assert policy.retry_window_s - policy.request_timeout_s <= took < policy.worst_case_s + 1.5


def test_mixture_check_over_a_dead_host_reports_within_one_window(tmp_path, monkeypatch):
    """24 URL entries on a killed server, 4 at a time: one window in all, not one per entry (6 windows)."""
    from episodic.mixture import preflight

    monkeypatch.setenv("EPISODIC_RETRY_WINDOW", "1")
    monkeypatch.setenv("EPISODIC_CONNECT_TIMEOUT", "0.3")
    monkeypatch.setenv("EPISODIC_FETCH_TIMEOUT", "0.3")
    with FaultServer(tmp_path) as server:
        server.kill()
        spec = {"entries": [{"source": f"{server.url}/ds{i:03d}", "name": f"e{i}"} for i in range(24)]}
        t0 = time.monotonic()
        with pytest.raises(MixturePreflightError) as info:
            preflight(spec, concurrency=4)
        took = time.monotonic() - t0
    report = info.value.report
    assert [p.entry for p in report.errors] == list(range(24))
    for p in report.errors:
        assert f"{server.url}/ds{p.entry:03d}/meta/info.json" in p.message and "connection refused" in p.message
    assert sum("is down" in p.message for p in report.errors) >= 20
    assert took < 1.0 + 0.6 + 2.5  # a window, a request, slack; one window per 4 entries: 6 s


def test_mixture_check_of_hub_entries_with_the_hub_down_reports_within_one_window(tmp_path):
    """`episodic mixture check` of 24 Hub repo ids with the Hub unreachable (HF_ENDPOINT at a closed port of
    127.0.0.1, HF_HUB_OFFLINE unset): every entry named, in about one window (1 s), not one window per entry."""
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    endpoint = f"http://127.0.0.1:{closed.getsockname()[1]}"
    closed.close()  # nothing listens there: connection refused
    spec = tmp_path / "hub.json"
    spec.write_text(json.dumps({"entries": [{"source": f"someone/ds{i:03d}"} for i in range(24)]}))
    env = dict(
        os.environ,
        HF_ENDPOINT=endpoint,
        HF_HUB_DISABLE_IMPLICIT_TOKEN="1",
        HF_HUB_DISABLE_TELEMETRY="1",
        HF_HOME=str(tmp_path / "hf"),
        HF_LEROBOT_HOME=str(tmp_path / "lerobot"),
        EPISODIC_CACHE=str(tmp_path / "cache"),
        EPISODIC_RETRY_WINDOW="1",
        PYTHONPATH=os.pathsep.join(sys.path),
    )
    for name in ("HF_TOKEN", "HF_HUB_OFFLINE"):
        env.pop(name, None)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "episodic.cli",
            "mixture",
            "check",
            str(spec),
            "-q",
            "--concurrency",
            "4",
            "--json",
            str(tmp_path / "report.json"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 1, out.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    problems = report["problems"]
    assert sorted(p["entry"] for p in problems) == list(range(24))
    for p in problems:
        assert f"someone/ds{p['entry']:03d}" in p["message"] and endpoint in p["message"], p["message"]
        assert "connection refused" in p["message"], p["message"]
    assert report["seconds"] < 1.0 + 2.5  # a window and slack; one window per 4 entries: 6 s


# ------------------------------------------------------------------------------------------ answers
@pytest.mark.parametrize("fault", ["500", "502", "503", "429", "reset", "truncate", "short"])
def test_transient_answers_are_retried_for_every_kind_of_request(served, dataset, tmp_path, fault):
    """A fault on each of the first requests: metadata (GET, and HEAD for the size: except a short body,
    which a HEAD announcing the same short size would make the truth), parquet ranges, whole mp4s."""
    served.retry_after = "0.05"
    served.fault_methods = {"GET"} if fault == "short" else {"GET", "HEAD"}
    served.faults = [fault] * 6
    remote = _map(served, tmp_path)
    served.faults = [fault] * 3
    _all_items_equal(remote, LeRobotDataset("x", root=dataset))
    assert not served.faults and served.failures == 9
    assert remote.stats()["retries"] >= 3


def test_5xx_on_head_requests(served, dataset, tmp_path):
    served.fault_methods = {"HEAD"}
    served.faults = ["503"] * 4
    remote = _map(served, tmp_path)
    served.faults = ["503"] * 2  # the size and version of an mp4 before it is fetched
    _all_items_equal(remote, LeRobotDataset("x", root=dataset))
    assert not served.faults and served.failures == 6


def test_retry_after_is_honoured(served, tmp_path):
    served.faults, served.retry_after = ["429"], "0.8"
    t0 = time.monotonic()
    _map(served, tmp_path)
    assert time.monotonic() - t0 >= 0.8


@pytest.mark.parametrize("fault, error", [("403", FetchError), ("404", MissingFileError)])
def test_permanent_answers_fail_at_once(served, tmp_path, fault, error):
    ds = _map(served, tmp_path)
    served.faults = [fault] * 5
    n = len(served.requests)
    t0 = time.monotonic()
    with pytest.raises(error) as info:
        ds[0]
    # one HEAD (the file's size and version), one GET
    assert time.monotonic() - t0 < SLACK_S and len(served.requests) == n + 2 and len(served.faults) == 4
    assert served.url + "/ds/videos/" in str(info.value)
    if error is FetchError:
        assert info.value.attempts == 1 and "refused, not retried" in str(info.value) and "403" in str(info.value)
    else:
        assert isinstance(info.value, DatasetFormatError) and "file not found" in str(info.value)


# ------------------------------------------------------------------------------------------ changed content
def test_republished_dataset_is_never_mixed_with_the_old_cache(served, dataset, republished, tmp_path):
    old = _map(served, tmp_path)
    _all_items_equal(old, LeRobotDataset("x", root=dataset))  # every mp4 of the old version is cached
    www = tmp_path / "www" / "ds"
    shutil.rmtree(www)
    shutil.copytree(republished, www)  # same URLs, new files
    new = _map(served, tmp_path)
    _all_items_equal(new, LeRobotDataset("x", root=republished))
    cached = sorted((tmp_path / "cache" / "files").rglob("*.mp4"))
    assert len(cached) == 4  # two versions of two files, under different keys


# ------------------------------------------------------------------------------------------ DataLoader workers
@pytest.mark.parametrize("method", ["fork", pytest.param("spawn", marks=pytest.mark.slow)])
def test_map_style_over_http_with_two_workers(served, dataset, tmp_path, method):
    remote = _map(served, tmp_path, delta_timestamps={"action": [0, 1 / 30]})
    local = LeRobotDataset("x", root=dataset, delta_timestamps={"action": [0, 1 / 30]})
    remote[0]  # the parent's HTTP session is live when the workers start
    loader = torch.utils.data.DataLoader(remote, batch_size=5, num_workers=2, multiprocessing_context=method)
    got = [b for b in loader]
    idx = torch.cat([b["index"] for b in got])
    assert idx.tolist() == list(range(len(local)))
    want = [local[i] for i in range(len(local))]
    for key in ("observation.images.top", "action", "action_is_pad"):
        assert torch.equal(torch.cat([b[key] for b in got]), torch.stack([w[key] for w in want])), key


# ------------------------------------------------------------------------------------------ exit
_CHILD = """
import sys
from episodic import LeRobotDataset
from episodic.storage import FetchPolicy
policy = FetchPolicy(backoff_s=0.01, max_backoff_s=0.05, retry_window_s=1.0, timeout_s=1, connect_timeout_s=1)
kept = []
for root in sys.argv[2:]:
    try:
        LeRobotDataset("x", root=root, cache_dir=sys.argv[1], fetch_policy=policy)
    except Exception as e:
        kept.append(e)  # held until exit, frames and all
        print("caught", type(e).__name__, flush=True)
"""


def test_no_abort_at_exit_after_caught_metadata_errors(served, tmp_path):
    """The interpreter exits cleanly (no 'terminate called without an active exception') after caught
    errors from corrupt parquet files (episode metadata, data), read over HTTP and from disk."""
    import pyarrow.parquet as pq

    www = tmp_path / "www"
    roots = []
    for broken in ("meta/episodes/chunk-000/file-000.parquet", "data/chunk-000/file-000.parquet"):
        name = broken.split("/")[0]
        shutil.copytree(www / "ds", www / name)
        path = www / name / broken
        chunk = pq.ParquetFile(path).metadata.row_group(0).column(0)  # its first column chunk: garbage
        data = bytearray(path.read_bytes())
        data[chunk.data_page_offset : chunk.data_page_offset + chunk.total_compressed_size] = (
            b"\xff" * chunk.total_compressed_size
        )
        path.write_bytes(bytes(data))
        roots += [f"{served.url}/{name}", str(www / name)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    p = subprocess.run(
        [sys.executable, "-c", _CHILD, str(tmp_path / "c"), *roots],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert p.returncode == 0 and "terminate called" not in p.stderr, p.stderr[-2000:]
    assert p.stdout.splitlines() == ["caught DatasetFormatError"] * 4, (p.stdout, p.stderr[-2000:])


def test_remote_parquet_is_never_read_on_an_arrow_thread(served, dataset, tmp_path, monkeypatch):
    """Why nothing aborts at exit: pyarrow reads a remote data file (a Python file object) only on the
    thread that asked, never on its own threads (which may outlive the interpreter)."""
    from episodic.storage.ranges import RangeFile

    threads = []
    read = RangeFile.read

    def spy(self, n=-1):
        threads.append(threading.current_thread())
        return read(self, n)

    monkeypatch.setattr(RangeFile, "read", spy)
    remote = _map(served, tmp_path, video_keys=[])
    assert len(remote) == len(LeRobotDataset("x", root=dataset)) and threads
    assert all(not isinstance(t, threading._DummyThread) for t in threads), {t.name for t in threads}
