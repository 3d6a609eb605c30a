"""The one fetch policy, against a real HTTP server on 127.0.0.1: transient failures (5xx, 429 with
Retry-After, resets, truncated bodies, timeouts) are retried and counted; "not found" and refusals fail at
once; programming errors are never retried; exhausted retries raise FetchError naming the URL."""

from __future__ import annotations

import email.utils
import os
import re
import socket
import time

import fsspec
import numpy as np
import pytest

from episodic.counters import Counters
from episodic.demo import write_demo_dataset
from episodic.format import DatasetFormatError, EpisodicError, FetchError, MissingFileError, load_metadata
from episodic.storage import FetchPolicy, open_source, reopen, with_retries
from episodic.storage.cache import FileCache
from episodic.storage.fetch import (
    RangesIgnored,
    fetch_bytes,
    fetch_to_file,
    file_size,
    host_delay,
    timeout_options,
)
from episodic.storage.hosts import HOSTS
from episodic.tabular import load_columns

from support import FaultServer

pytest.importorskip("aiohttp")

FAST = FetchPolicy(retries=4, backoff_s=0.001, max_backoff_s=0.005, timeout_s=10)
PAYLOAD = bytes(range(256)) * 40  # 10240 bytes


@pytest.fixture()
def server():
    with FaultServer(files={"/f.bin": PAYLOAD}) as srv:
        yield srv


def _http(policy=FAST):
    """fsspec's HTTP filesystem as `open_source` makes it: with the policy's connect and read timeouts."""
    return fsspec.filesystem("http", **timeout_options("http", {}, policy))


def _gets(srv) -> int:
    return srv.gets()


def _fetch(srv, policy=FAST, stats=None, **kw) -> bytes:
    url = srv.url + "/f.bin"
    return fetch_bytes(_http(policy), url, url, policy, stats, **kw)


# ------------------------------------------------------------------------------------------ transient
@pytest.mark.parametrize("fault", ["500", "503", "reset", "truncate", "short"])
def test_transient_failures_are_retried_and_counted(server, fault):
    server.faults = [fault, fault]
    stats = Counters()
    assert _fetch(server, stats=stats) == PAYLOAD
    assert not server.faults and _gets(server) == 3
    if fault == "reset":  # aiohttp itself may retry a reset idempotent request once: counted or not
        assert 1 <= stats.retries <= 2
    else:
        assert stats.retries == 2


@pytest.mark.parametrize("fault", ["503", "reset", "truncate", "short"])
def test_transient_range_failures_are_retried(server, fault):
    server.faults = [fault, fault]
    stats = Counters()
    assert _fetch(server, stats=stats, start=100, end=5000) == PAYLOAD[100:5000]
    assert not server.faults and _gets(server) == 3
    assert 1 <= stats.retries <= 2 if fault == "reset" else stats.retries == 2


def test_429_waits_as_long_as_retry_after_asks_capped(server):
    server.faults, server.retry_after = ["429"], "3"
    stats = Counters()
    policy = FetchPolicy(retries=2, backoff_s=0.001, max_backoff_s=0.001, max_retry_after_s=0.3, timeout_s=10)
    t0 = time.perf_counter()
    assert _fetch(server, policy, stats) == PAYLOAD
    waited = time.perf_counter() - t0
    assert stats.retries == 1 and 0.3 <= waited < 2.5  # the header's 3 s, capped at 0.3 s (jitter: 1 ms)


def test_retry_after_as_an_http_date(server):
    server.faults = ["429"]
    server.retry_after = email.utils.formatdate(time.time() + 2, usegmt=True)  # whole seconds: 1-2 s from now
    stats = Counters()
    t0 = time.perf_counter()
    assert _fetch(server, stats=stats) == PAYLOAD
    ((t429, *_),) = server.answered(429)
    t200 = min(t for t, *_ in server.answered(200))
    assert stats.retries == 1 and 0.9 <= t200 - t429 and time.perf_counter() - t0 < 3.5


def test_retry_after_past_the_retry_window_fails_at_once(server):
    """Asking again before the server's time would only earn another 429: the fetch gives up, saying why."""
    server.faults, server.retry_after = ["429"], "10"
    policy = FetchPolicy(backoff_s=0.001, max_backoff_s=0.001, retry_window_s=2, timeout_s=10)
    t0 = time.perf_counter()
    with pytest.raises(
        FetchError,
        match=r"/f\.bin: the server asks to retry after 10\.0 s, past the end of the "
        r"retry window \(\d\.\d s left of 2 s; attempt 1: .*429",
    ) as info:
        _fetch(server, policy)
    assert time.perf_counter() - t0 < 1.0 and info.value.attempts == 1 and len(server.requests) == 1
    assert host_delay(server.url + "/other") > 9  # the host stays held: the next fetch from it waits
    HOSTS.forget()  # a later test's server might get this port


@pytest.mark.parametrize("method", ["GET", "HEAD"])
def test_retry_after_holds_the_whole_host_for_every_thread(method):
    """A 429 on one file makes every other fetch from that host, on any thread, wait as long as asked: one pause,
    not a 429 per thread. A size request's 429 counts too (fsspec's HTTP `info` tries HEAD, then GET, and reports
    the failure as FileNotFoundError from the answer's error)."""
    import threading

    with FaultServer(files={"/f.bin": PAYLOAD, "/g.bin": PAYLOAD[:100]}) as srv:
        srv.faults = ["429"] if method == "GET" else ["429", "429"]
        srv.retry_after, srv.fault_paths, srv.fault_methods = "1", {"/f.bin"}, {"GET", method}
        url = srv.url + "/f.bin"
        fs = _http()
        if method == "GET":
            first = threading.Thread(target=lambda: fetch_bytes(fs, url, url, FAST, size=len(PAYLOAD)))
        else:
            first = threading.Thread(target=lambda: file_size(fs, url, url, FAST))
        first.start()
        deadline = time.monotonic() + 10
        while srv.faults and time.monotonic() < deadline:  # until every 429 went out
            time.sleep(0.01)
        time.sleep(0.05)
        other = srv.url + "/g.bin"
        assert 0.5 < host_delay(other) <= 1.0 and host_delay("http://127.0.0.2:1/x") == 0
        assert fetch_bytes(_http(), other, other, FAST) == PAYLOAD[:100]
        first.join()
        t429 = max(t for t, *_ in srv.answered(429))
        asked = [t for t, m, p, _ in srv.answers if p == "/g.bin"]
        assert asked and min(asked) - t429 >= 0.9  # the other file waited for the host


def test_fetch_to_file_streams_and_checks_the_length(server, tmp_path):
    url = server.url + "/f.bin"
    local = tmp_path / "sub" / "f.bin"
    local.parent.mkdir()
    server.faults = ["truncate", "short"]
    stats = Counters()
    assert fetch_to_file(_http(), url, url, local, FAST, stats, size=len(PAYLOAD)) == len(PAYLOAD)
    assert local.read_bytes() == PAYLOAD and stats.retries == 2 and os.listdir(local.parent) == ["f.bin"]
    with pytest.raises(MissingFileError, match=re.escape(f"{server.url}/none.bin: file not found")):
        fetch_to_file(_http(), server.url + "/none.bin", server.url + "/none.bin", tmp_path / "sub" / "none.bin", FAST)
    assert os.listdir(local.parent) == ["f.bin"]  # nothing left behind


def test_a_request_past_the_timeout_is_retried(server):
    server.faults, server.sleep_s = ["sleep"], 5.0
    stats = Counters()
    policy = FetchPolicy(retries=2, backoff_s=0.001, max_backoff_s=0.001, timeout_s=0.3)
    t0 = time.perf_counter()
    assert _fetch(server, policy, stats, start=0, end=100) == PAYLOAD[:100]
    assert stats.retries == 1 and time.perf_counter() - t0 < 4.0  # gave up on the first after 0.3 s


def test_size_is_retried_when_fsspec_reports_a_failed_head_as_not_found(server):
    server.faults, server.fault_methods = (
        ["503", "503"],
        {"GET", "HEAD"},
    )  # fsspec: HEAD 503, GET 503 -> FileNotFoundError
    stats = Counters()
    url = server.url + "/f.bin"
    assert file_size(_http(), url, url, FAST, stats) == len(PAYLOAD)
    assert stats.retries == 1


# ------------------------------------------------------------------------------------------ permanent
def test_not_found_fails_at_once_naming_the_url(server):
    url = server.url + "/missing.bin"
    stats = Counters()
    with pytest.raises(DatasetFormatError, match=re.escape(f"{url}: file not found")) as info:
        fetch_bytes(_http(), url, url, FAST, stats)
    assert isinstance(info.value, MissingFileError)
    assert server.requests == [("GET", "/missing.bin", None)] and stats.retries == 0


def test_forbidden_fails_at_once_naming_the_url(server):
    server.faults = ["403", "403"]
    with pytest.raises(FetchError, match=re.escape(server.url + "/f.bin") + ".*403") as info:
        _fetch(server)
    assert isinstance(info.value, OSError) and info.value.attempts == 1 and len(server.requests) == 1


def test_exhausted_retries_raise_fetch_error(server):
    server.faults = ["503"] * 10
    stats = Counters()
    policy = FetchPolicy(retries=3, backoff_s=0.001, max_backoff_s=0.002, timeout_s=10)
    with pytest.raises(FetchError) as info:
        _fetch(server, policy, stats)
    e = info.value
    assert isinstance(e, OSError) and isinstance(e, EpisodicError)
    assert server.url + "/f.bin" in str(e) and "after 4 attempts" in str(e) and "503" in str(e)
    assert e.url == server.url + "/f.bin" and e.attempts == 4
    assert _gets(server) == 4 and stats.retries == 3


def test_a_server_that_ignores_ranges_is_not_retried(server):
    server.faults = ["norange"]
    with pytest.raises(RangesIgnored):
        _fetch(server, start=0, end=10)
    assert len(server.requests) == 1


@pytest.mark.parametrize("error", [TypeError("bug"), AttributeError("bug"), KeyError("bug"), ValueError("bug")])
def test_programming_errors_are_never_retried(error):
    calls = []

    def call():
        calls.append(1)
        raise error

    with pytest.raises(type(error)) as info:
        with_retries(call, "http://x/y", FAST, Counters())
    assert info.value is error and len(calls) == 1


@pytest.mark.parametrize(
    "error, retried",
    [
        (TimeoutError(), True),
        (ConnectionRefusedError(), True),
        (ConnectionResetError(), True),
        (OSError(5, "EIO"), True),
        (PermissionError(13, "denied"), False),
        (IsADirectoryError(21, "dir"), False),
    ],
)
def test_which_os_errors_are_transient(error, retried):
    calls, stats = [], Counters()

    def call():
        calls.append(1)
        if len(calls) == 1:
            raise error
        return b"ok"

    if retried:
        assert with_retries(call, "s3://b/k", FAST, stats) == b"ok" and stats.retries == 1
    else:
        with pytest.raises(FetchError, match=r"s3://b/k: refused"):
            with_retries(call, "s3://b/k", FAST, stats)
        assert len(calls) == 1


def test_policy_is_validated(monkeypatch):
    with pytest.raises(ValueError, match=re.escape("retries must be an int in [0, 100], got -1")):
        FetchPolicy(retries=-1)
    with pytest.raises(ValueError, match=r"retries must be an int in \[0, 100\], got 2\.5"):
        FetchPolicy(retries=2.5)
    with pytest.raises(ValueError, match=r"max_backoff_s must be a number in \[1, 600\], got 0\.5"):
        FetchPolicy(backoff_s=1, max_backoff_s=0.5)
    with pytest.raises(ValueError, match=r"timeout_s must be a number in \(0, 3600\], got 0"):
        FetchPolicy(timeout_s=0)
    monkeypatch.setenv("EPISODIC_FETCH_TIMEOUT", "7.5")
    assert FetchPolicy().timeout_s == 7.5
    monkeypatch.setenv("EPISODIC_FETCH_TIMEOUT", "0")
    assert FetchPolicy().timeout_s is None
    monkeypatch.setenv("EPISODIC_FETCH_TIMEOUT", "soon")
    with pytest.raises(ValueError, match="EPISODIC_FETCH_TIMEOUT"):
        FetchPolicy()


def test_backoff_is_capped_exponential_with_full_jitter():
    policy = FetchPolicy(retries=10, backoff_s=0.1, max_backoff_s=1.0)
    import random

    rng = random.Random(0)
    for retry, bound in [(0, 0.1), (1, 0.2), (2, 0.4), (3, 0.8), (4, 1.0), (9, 1.0)]:
        waits = [policy.backoff(retry, rng) for _ in range(200)]
        assert 0 <= min(waits) and max(waits) <= bound and max(waits) > 0.8 * bound


# ------------------------------------------------------------------------------------------ sources
@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return write_demo_dataset(
        tmp_path_factory.mktemp("fetch") / "ds",
        num_episodes=4,
        min_length=10,
        max_length=20,
        height=48,
        width=64,
        progress=False,
        data_files_size_in_mb=0.004,
    )


def _serve_dataset(server, root) -> str:
    server.files = {f"/ds/{p.relative_to(root).as_posix()}": p.read_bytes() for p in root.rglob("*") if p.is_file()}
    return server.url + "/ds"


def test_metadata_reads_are_retried(server, dataset):
    url = _serve_dataset(server, dataset)
    local = load_metadata(fsspec.filesystem("file"), str(dataset))
    server.faults = ["503", "reset", "500"]
    source = open_source(url, policy=FAST)
    meta = source.load_metadata()
    assert meta.info.total_frames == local.info.total_frames and meta.tasks == local.tasks
    assert np.array_equal(meta.episodes.length, local.episodes.length)
    assert not server.faults  # every fault was met and retried
    server.faults = ["503"]
    with pytest.raises(Exception, match="503"):  # the plain reader has no retries
        load_metadata(source.fs, source.root)


def test_missing_remote_metadata_names_the_url(server, dataset):
    url = _serve_dataset(server, dataset) + "-nope"
    with pytest.raises(DatasetFormatError, match=re.escape(f"{url}/meta/info.json: file not found")):
        open_source(url, policy=FAST).load_metadata()
    assert len(server.requests) == 1


def test_map_style_parquet_reads_over_http_are_retried(server, dataset):
    url = _serve_dataset(server, dataset)
    local = open_source(dataset).load_metadata()
    names = ["action", "observation.state", "index"]
    want = load_columns(local, np.arange(4), names)
    source = open_source(url, policy=FetchPolicy(retries=12, backoff_s=0.001, max_backoff_s=0.005))
    remote = source.load_metadata()
    server.faults = ["503", "truncate", "reset", "500", "short"] * 2  # ten failures in a row
    got = load_columns(remote, np.arange(4), names, open_file=source.open_for_read)
    assert all(np.array_equal(want.arrays[n], got.arrays[n]) for n in names)
    assert not server.faults
    server.faults = ["503", "short"]  # the default reader of a remote filesystem: retried too (default policy)
    got = load_columns(remote, np.arange(4), names)
    assert all(np.array_equal(want.arrays[n], got.arrays[n]) for n in names)
    assert not server.faults


def test_reopen_keeps_location_options_and_policy(server, dataset):
    url = _serve_dataset(server, dataset)
    source = open_source(url, storage_options={"headers": {"X-Test": "1"}}, policy=FAST)
    again = reopen(source)
    assert again.location == url and again.storage_options == {"headers": {"X-Test": "1"}}
    assert again.policy is FAST and again.root == source.root
    assert again.read_bytes("meta/info.json") == (dataset / "meta/info.json").read_bytes()
    local = open_source(dataset)
    assert reopen(local) is local


# ------------------------------------------------------------------------------------------ window, timeouts
def test_retries_stop_at_the_window_not_a_count():
    calls = []

    def refused():
        calls.append(time.monotonic())
        raise ConnectionRefusedError(111, "Connection refused")

    policy = FetchPolicy(backoff_s=0.01, max_backoff_s=0.05, retry_window_s=0.4)
    t0 = time.monotonic()
    with pytest.raises(
        FetchError, match=r"http://x/y: cannot fetch after \d+ attempts in (\d+\.\d) s .*refused"
    ) as info:
        with_retries(refused, "http://x/y", policy)
    # the message states the seconds spent: the window, or a little more on a loaded machine
    assert 0.4 <= float(re.search(r"in (\d+\.\d) s", str(info.value)).group(1)) < 3
    assert 0.4 <= time.monotonic() - t0 < 3 and info.value.attempts == len(calls) > 2
    assert calls[-1] - t0 >= 0.4 - 1e-3  # the last wait ends at the window's end: one last attempt there
    # other hosts: x is down now (tests/storage/test_hosts.py)
    with pytest.raises(FetchError, match="after 3 attempts"):
        with_retries(refused, "http://x2/y", FetchPolicy(retries=2, backoff_s=0, retry_window_s=10))
    calls.clear()
    with pytest.raises(FetchError, match="after 1 attempt in"):
        with_retries(refused, "http://x3/y", FetchPolicy(retry_window_s=0))


def test_a_server_back_just_before_the_window_ends_costs_no_error():
    t0 = time.monotonic()

    def back_after_0_4_s():
        if time.monotonic() - t0 < 0.4:
            raise ConnectionRefusedError(111, "Connection refused")
        return b"ok"

    stats = Counters()
    policy = FetchPolicy(backoff_s=5, max_backoff_s=5, retry_window_s=0.5)  # long waits, cut at the window
    assert with_retries(back_after_0_4_s, "http://x/y", policy, stats) == b"ok"
    assert time.monotonic() - t0 < 3 and stats.retries >= 1


def test_timeout_options_per_protocol():
    import aiohttp

    policy = FetchPolicy(timeout_s=7, connect_timeout_s=3)
    http = timeout_options("https", {"headers": {"A": "1"}}, policy)
    t = http["client_kwargs"]["timeout"]
    assert (t.total, t.sock_connect, t.sock_read) == (None, 3, 7) and http["headers"] == {"A": "1"}
    mine = aiohttp.ClientTimeout(total=1)
    assert timeout_options("http", {"client_kwargs": {"timeout": mine}}, policy)["client_kwargs"]["timeout"] is mine
    assert timeout_options("http", {"timeout": 5}, policy) == {"timeout": 5}  # the caller's own request timeout
    s3 = timeout_options(("s3", "s3a"), {"config_kwargs": {"read_timeout": 60}}, policy)
    assert s3 == {"config_kwargs": {"read_timeout": 60, "connect_timeout": 3}}
    assert timeout_options("gcs", {"token": "anon"}, policy) == {"token": "anon"}
    assert policy.request_timeout_s == 10 and policy.worst_case_s == max(policy.retry_window_s, 10)
    assert FetchPolicy(timeout_s=None).worst_case_s is None


def test_after_a_time_out_no_retry_starts_that_could_not_end_within_the_window(server):
    """A hung server: the first attempt waits its read timeout (1.5 s); a second could wait as long again, past
    the 2 s window, so none starts (one used to: 3 s and more, a window plus a request)."""
    policy = FetchPolicy(timeout_s=1.5, connect_timeout_s=0.5, retry_window_s=2.0, backoff_s=0.01)
    fs = fsspec.filesystem("http", skip_instance_cache=True, **timeout_options("http", {}, policy))
    server.hang.set()
    t0 = time.monotonic()
    with pytest.raises(FetchError, match="timed out") as info:
        fetch_bytes(fs, server.url + "/f.bin", server.url + "/f.bin", policy)
    took = time.monotonic() - t0
    assert info.value.attempts == 1 and 1.5 <= took < policy.worst_case_s + 0.5 == 2.5
    quick = FetchPolicy(timeout_s=0.3, connect_timeout_s=0.2, retry_window_s=2.0, backoff_s=0.01)
    fs = fsspec.filesystem("http", skip_instance_cache=True, **timeout_options("http", {}, quick))
    HOSTS.forget()
    t0 = time.monotonic()
    with pytest.raises(FetchError, match="timed out") as info:  # short time limits: retried within the window
        fetch_bytes(fs, server.url + "/f.bin", server.url + "/f.bin", quick)
    assert info.value.attempts >= 2 and time.monotonic() - t0 < quick.worst_case_s + 0.5


def test_open_source_puts_the_timeouts_on_the_http_session(server):
    policy = FetchPolicy(timeout_s=0.3, connect_timeout_s=0.3, retry_window_s=0.5, backoff_s=0.01)
    source = open_source(server.url, policy=policy)
    assert source.storage_options == {}  # what it was opened with, not what was added
    server.faults, server.sleep_s = ["sleep"] * 10, 3.0
    t0 = time.perf_counter()
    with pytest.raises(FetchError, match="no answer within the time limit"):
        source.read_bytes("f.bin")
    assert time.perf_counter() - t0 < policy.worst_case_s + 2.5


def test_errors_of_huggingface_hubs_http_client_are_classified():
    httpx = pytest.importorskip("httpx2")
    request = httpx.Request("GET", "https://hub.invalid/f")

    def failing(*errors):
        it = iter(errors)

        def call():
            e = next(it, None)
            if e is not None:
                raise e
            return b"ok"

        return call

    def status(code):
        return httpx.HTTPStatusError(str(code), request=request, response=httpx.Response(code, request=request))

    stats = Counters()
    got = with_retries(
        failing(
            httpx.ConnectError("refused", request=request), httpx.ReadTimeout("slow", request=request), status(503)
        ),
        "hf://x",
        FAST,
        stats,
    )
    assert got == b"ok" and stats.retries == 3
    with pytest.raises(MissingFileError):
        with_retries(failing(status(404)), "hf://x", FAST)
    with pytest.raises(FetchError, match="refused, not retried"):
        with_retries(failing(status(401)), "hf://x", FAST)
    not_found = FileNotFoundError("offline")  # huggingface_hub: the Hub unreachable and no local copy
    not_found.__context__ = httpx.ConnectError("refused", request=request)
    assert with_retries(failing(not_found), "hf://x", FAST) == b"ok"


# ------------------------------------------------------------------------------------------ S3 (s3fs, moto)
def test_s3_range_past_the_end_is_refused_at_once(s3_env):
    stats = Counters()
    source = open_source("s3://data/small", policy=FAST)
    with pytest.raises(FetchError, match=r"s3://data/small/meta/info\.json: refused, not retried") as info:
        fetch_bytes(
            source.fs,
            source.path("meta/info.json"),
            source.url("meta/info.json"),
            FAST,
            stats,
            start=10**6,
            end=10**6 + 10,
        )  # 416, which s3fs turns into OSError(EINVAL)
    assert info.value.attempts == 1 and stats.retries == 0


def test_s3_without_credentials_is_refused_naming_the_url(s3_env, monkeypatch):
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    with pytest.raises(FetchError, match=r"s3://data/small/meta/info\.json: refused.*NoCredentialsError"):
        open_source("s3://data/small", policy=FAST).read_bytes("meta/info.json")


def test_s3_unreachable_endpoint_is_retried_then_names_the_url(s3_env, monkeypatch, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]  # nothing listens there once the socket is closed
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{closed}")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")  # botocore's own retries off: the policy's count alone
    source = open_source("s3://data/small", policy=FAST, cache=FileCache(tmp_path))
    with pytest.raises(
        FetchError,
        match=r"s3://data/small/meta/info\.json: cannot fetch after 5 attempts .*"
        r"\(last: connection refused \(EndpointConnectionError",
    ):
        source.read_bytes("meta/info.json")
    assert source.cache.stats.retries == 4
