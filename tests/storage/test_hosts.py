"""What the process remembers about a remote host (storage/hosts.py, through the fetch policy), against real HTTP
servers on 127.0.0.1: a host silent for a whole retry window is down, and every further fetch from it fails at
once, naming the host and what happened; fetches on other threads give up with the first; an answer ends it; a
forked child knows what its parent knew."""

from __future__ import annotations

import multiprocessing
import threading
import time

import fsspec
import pytest

from episodic.format import FetchError
from episodic.storage import FetchPolicy
from episodic.storage.fetch import fetch_bytes, timeout_options, with_retries
from episodic.storage.hosts import HOSTS, host_key

from support import FaultServer

pytest.importorskip("aiohttp")

POLICY = FetchPolicy(backoff_s=0.01, max_backoff_s=0.05, retry_window_s=1.0, timeout_s=1, connect_timeout_s=1)
PAYLOAD = bytes(range(256)) * 4
FILES = {f"/f{i}.bin": PAYLOAD for i in range(20)}


@pytest.fixture()
def server():
    with FaultServer(files=FILES) as srv:
        yield srv


def _get(server: FaultServer, path: str = "/f0.bin", policy: FetchPolicy = POLICY) -> bytes:
    fs = fsspec.filesystem("http", skip_instance_cache=True, **timeout_options("http", {}, policy))
    url = server.url + path
    return fetch_bytes(fs, url, url, policy)


def test_a_dead_host_costs_one_window_not_one_per_request(server):
    server.kill()
    t0 = time.monotonic()
    with pytest.raises(
        FetchError,
        match=rf"{server.url}/f0\.bin: cannot fetch after \d+ attempts in .*"
        rf"\(last: connection refused \(ClientConnectorError: .*127\.0\.0\.1",
    ):
        _get(server)
    first = time.monotonic() - t0
    assert POLICY.retry_window_s <= first < POLICY.worst_case_s + 2
    t1 = time.monotonic()
    for i in range(1, 20):  # one window each before: 19 s
        with pytest.raises(FetchError) as info:
            _get(server, f"/f{i}.bin")
        assert str(info.value).startswith(
            f"{server.url}/f{i}.bin: not asked: {server.url} is down: no answer for a "
            f"whole retry window (1 s; last: connection refused ("
        )
        assert info.value.url == f"{server.url}/f{i}.bin" and info.value.attempts == 0
    assert time.monotonic() - t1 < POLICY.retry_window_s


def test_a_down_host_is_asked_again_one_window_later_and_an_answer_ends_its_silence(server):
    server.kill()
    with pytest.raises(FetchError, match="cannot fetch"):
        _get(server)
    server.start()  # back: still down for this process until one more window has passed
    n = len(server.requests)
    with pytest.raises(FetchError, match="is down"):
        _get(server, "/f1.bin")
    assert len(server.requests) == n  # not asked
    time.sleep(POLICY.retry_window_s)
    assert _get(server, "/f1.bin") == PAYLOAD and HOSTS.down(host_key(server.url)) is None
    server.kill()  # an answer ended the silence: the next fetch gets a whole window again
    t0 = time.monotonic()
    with pytest.raises(FetchError, match="cannot fetch after"):
        _get(server, "/f2.bin")
    assert time.monotonic() - t0 >= POLICY.retry_window_s


def test_fetches_on_other_threads_give_up_with_the_first(server):
    """A hung server: fetches started one after another within the first one's window all end when it ends
    (one window after the host fell silent), not each a window after its own start."""
    policy = FetchPolicy(backoff_s=0.01, max_backoff_s=0.05, retry_window_s=2.0, timeout_s=0.2, connect_timeout_s=0.2)
    server.hang.set()
    starts, ends, errors = {}, {}, {}

    def fetch(i: int) -> None:
        starts[i] = time.monotonic()
        try:
            _get(server, f"/f{i}.bin", policy)
        except FetchError as e:
            errors[i] = e
        ends[i] = time.monotonic()

    threads = []
    for i in range(4):
        threads.append(threading.Thread(target=fetch, args=(i,), daemon=True))
        threads[-1].start()
        time.sleep(0.5)
    for t in threads:
        t.join(30)
    assert sorted(errors) == [0, 1, 2, 3]
    assert all(server.url in str(e) and "timed out" in str(e) for e in errors.values()), errors
    assert ends[0] - starts[0] >= policy.retry_window_s - policy.request_timeout_s
    # the last began 1.5 s after the first: it ends with it, well before a window of its own
    assert ends[3] - starts[3] < policy.retry_window_s - 0.5
    assert max(ends.values()) - starts[0] < policy.worst_case_s + 1.5


def test_an_answer_of_any_status_is_not_silence(server):
    """503s for a whole window: the host answers, so it is not down (the next fetch is asked)."""
    server.fault_methods = {"GET", "HEAD"}
    server.faults = ["503"] * 1000
    with pytest.raises(FetchError, match=r"cannot fetch after .*503"):
        _get(server)
    server.faults = []
    assert _get(server, "/f1.bin") == PAYLOAD


def _child_fetch(url: str, out) -> None:
    try:
        with_retries(lambda: b"asked", url, POLICY)
        out.put("asked")
    except FetchError as e:
        out.put(str(e))


def test_a_forked_child_knows_its_parent_found_the_host_down(server):
    """A DataLoader worker forked after its parent found a host down fails at once too; a fork while another
    thread holds the hosts' lock leaves the child a lock of its own (no deadlock)."""
    server.kill()
    with pytest.raises(FetchError, match="cannot fetch"):
        _get(server)
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    with HOSTS._lock:  # held by "another thread" of the parent when it forks
        child = ctx.Process(target=_child_fetch, args=(server.url + "/f3.bin", out))
        child.start()
    child.join(20)
    assert child.exitcode == 0
    got = out.get(timeout=5)
    assert f"{server.url} is down" in got, got


def test_nothing_new_is_asked_of_a_host_silent_for_a_whole_window():
    """A fetch that starts one window after the host fell silent is refused at once, though the fetch that
    found the silence is still waiting on its last attempt (a hung request): every fetch over a dead host ends
    within a window and one request of the first unanswered one."""
    window = 0.5
    # a silence lasts a request's limits (4 s) without news: ample for a loaded machine to start the second
    policy = FetchPolicy(backoff_s=0.01, max_backoff_s=0.01, retry_window_s=window, timeout_s=2, connect_timeout_s=2)
    release = threading.Event()
    first_calls = []

    def first():  # refused at once, then a last attempt that hangs until released
        first_calls.append(time.monotonic())
        if len(first_calls) == 1:
            raise ConnectionRefusedError(111, "Connection refused")
        release.wait(10)
        raise TimeoutError()

    def waiting() -> None:
        with pytest.raises(FetchError):
            with_retries(first, "http://h.test/a", policy)

    t = threading.Thread(target=waiting, daemon=True)
    t.start()
    while len(first_calls) < 2:
        time.sleep(0.01)
    time.sleep(window + 0.1)  # silent for a whole window; the first fetch still waits
    later = []
    with pytest.raises(FetchError) as info:
        with_retries(lambda: later.append(1), "http://h.test/b", policy)
    release.set()
    t.join(10)
    assert later == [] and info.value.attempts == 0
    said = "http://h.test is down: no answer for a whole retry window (0.5 s; last: connection refused"
    assert said in str(info.value)
