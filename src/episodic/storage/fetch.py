"""The one fetch policy for remote bytes: time limits, which failures are retried, how long to wait, when
to give up.

Every remote read of episodic goes through `with_retries` (metadata files, whole files into the cache or a
streaming mirror, byte ranges of parquet and mp4 files, file sizes and versions, Hub downloads); local
files are read directly.

- Time limits (`FetchPolicy.connect_timeout_s`, `timeout_s`): every request of a filesystem opened by
  episodic has a connect timeout and a read timeout (the longest wait for the next bytes): HTTP(S) on its
  aiohttp session, S3 through botocore (`timeout_options`); a request for a size or a version (no body)
  is also limited as a whole to connect + read timeout on any asynchronous filesystem (`_call_kwargs`).
  A request past a limit is a transient failure.
- Transient failures are retried with capped exponential backoff and full jitter: timeouts, refused or
  reset connections and other I/O errors, HTTP 5xx, 408 and 429, and bodies shorter than expected
  (`TruncatedRead`, the one length check of `fetch_bytes`).
- Throttling: a 429 or 503 answer with a `Retry-After` header (seconds, or an HTTP date) is retried after
  as long as it asks (capped at `max_retry_after_s`), not earlier; when that is past the end of the retry
  window the fetch fails at once (`FetchError` saying so) instead of asking again too early. The wait holds
  the whole host (scheme and authority of the URL; `storage.hosts`) in this process: every other fetch from
  it, on any thread, waits until then too (`host_delay`), so a pool of downloads answers one 429 with one
  pause, not with a 429 per thread.
- The retry window: no retry starts later than `retry_window_s` after the first attempt (nor after `retries`
  retries, when set), and after a time-out no retry starts that could not end within the window (it may wait
  connect_timeout_s + timeout_s too), so a fetch from a hung server fails within
  max(retry_window_s, connect_timeout_s + timeout_s) of its start (30 s by default), one that keeps failing
  faster within retry_window_s + connect_timeout_s + timeout_s, and a server back within the window costs no
  error at all.
- A dead, unreachable or hung host (`storage.hosts`): failures without any answer (connection refused or
  reset, name not resolved, a connect or read timeout) start the host's silence, shared by every fetch from
  it in this process: no retry of any of them starts later than one window after the host fell silent, so
  fetches that began later, on other threads, give up with the first. A host silent for a whole window is
  down: for one more window every fetch from it fails at once (`FetchError` naming the host, how long it
  was silent and its last failure), so a job over a dead host fails within about one window (a hung one
  within max(retry_window_s, connect_timeout_s + timeout_s) of its first unanswered request), whatever its pools,
  prefetching, concurrency or number of files; any answer from the host ends its silence. Hub calls count
  for the Hub endpoint (`host=`).
- When the retries run out, `FetchError` names the URL (and the host, when the URL does not show it), the
  attempts and the last failure, in plain words when nothing answered: "connection refused", "connection
  reset", "name resolution failed", "timed out", then the exception (the one a wrapper was raised from:
  fsspec's HTTP `info` and huggingface_hub raise FileNotFoundError from whatever failed).
- "Not found" (FileNotFoundError, HTTP 404/410) fails at once: `MissingFileError` (a DatasetFormatError)
  "<url>: file not found".
- Refusals (PermissionError, HTTP 401/403 and other 4xx, a directory) fail at once with `FetchError`.
- Programming errors (TypeError, KeyError, ValueError, ...), episodic's own errors and `RangesIgnored`
  propagate at once, unchanged.
- S3 (s3fs over botocore): the HTTP status of a botocore `ClientError`, or of the one s3fs turned into an
  OSError (its `__cause__`), decides as above (a 416 is refused, not retried); botocore's connection and
  read failures (`EndpointConnectionError`, `ConnectionClosedError`, its timeouts) are transient; its other
  errors (no credentials, bad configuration) are refusals. botocore and s3fs also retry inside each of these
  attempts, under their own settings (`AWS_MAX_ATTEMPTS`, `AWS_RETRY_MODE`, s3fs's `retries`).

Counters: `with_retries` calls `counters.add(retries=1)` before each retry, for any object with an
`add(**counts)` method (`episodic.counters.Counters`).
"""

from __future__ import annotations

import logging
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from fsspec.asyn import AsyncFileSystem
from fsspec.implementations.local import LocalFileSystem

from .. import config
from ..checks import check_number
from ..format.errors import FetchError, MissingFileError
from ..format.meta_files import too_large
from .failures import (
    NOT_FOUND,
    RAISE,
    REFUSED,
    RETRY,
    RangesIgnored,
    TruncatedRead,
    classify,
    describe,
    retry_after,
    status_of,
    timed_out,
    unanswered,
)
from .hosts import HOSTS, host_key

__all__ = [
    "FetchPolicy",
    "RangesIgnored",
    "TruncatedRead",
    "fetch_bytes",
    "fetch_to_file",
    "file_info",
    "file_size",
    "host_delay",
    "is_local",
    "timeout_options",
    "with_retries",
]

T = TypeVar("T")
logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class FetchPolicy:
    """Time limits of remote requests and how their transient failures are retried.

    connect_timeout_s: the longest a request may take to connect, (0, 3600] or None for none (default
    `episodic.config.connect_timeout_s()`, 10 s). timeout_s: the read timeout, the longest a request may
    wait for the next bytes (a size or version request: for its whole answer, connect included), (0, 3600]
    or None (default `episodic.config.fetch_timeout_s()`, 20 s). retry_window_s: no retry starts later
    than this many seconds after the first attempt, nor after the host fell silent ([0, 86400], default
    `episodic.config.retry_window_s()`, 30 s; the last wait is shortened to end at the window's end); a host
    silent for a whole window is down for as long again (`storage.hosts`). retries: at most this many retries
    ([0, 100]), or None: as many as the window allows. backoff_s: the first retry waits up to this long
    ([0, 60]); each further retry up to twice as long as the one before, at most max_backoff_s
    ([backoff_s, 600]); the wait is drawn uniformly from [0, that bound] (full jitter). max_retry_after_s:
    the longest wait a server's Retry-After header may ask for ([0, 3600])."""

    retries: int | None = None
    backoff_s: float = 0.05
    max_backoff_s: float = 2.0
    timeout_s: float | None = field(default_factory=config.fetch_timeout_s)
    max_retry_after_s: float = 30.0
    connect_timeout_s: float | None = field(default_factory=config.connect_timeout_s)
    retry_window_s: float = field(default_factory=config.retry_window_s)

    def __post_init__(self):
        if self.retries is not None:
            check_number("retries", self.retries, 0, 100, integer=True)
        check_number("backoff_s", self.backoff_s, 0, 60)
        check_number("max_backoff_s", self.max_backoff_s, self.backoff_s, 600)
        for name in ("timeout_s", "connect_timeout_s"):
            if getattr(self, name) is not None:
                check_number(name, getattr(self, name), 0, 3600, lo_open=True)
        check_number("max_retry_after_s", self.max_retry_after_s, 0, 3600)
        check_number("retry_window_s", self.retry_window_s, 0, 86400)

    def backoff(self, retry: int, rng: random.Random | None = None) -> float:
        """Seconds to wait before retry number `retry` (0 for the first): full jitter under the capped
        exponential bound."""
        return (rng or random).uniform(0, min(self.max_backoff_s, self.backoff_s * (2 ** min(retry, 60))))

    @property
    def request_timeout_s(self) -> float | None:
        """The limit of a whole request without a body (a size or a version): connect + read timeout."""
        if self.timeout_s is None or self.connect_timeout_s is None:
            return None
        return self.timeout_s + self.connect_timeout_s

    @property
    def worst_case_s(self) -> float | None:
        """The longest a fetch may take to fail against a server that never answers (None: no limit): no retry
        after a time-out starts unless it can end within the window."""
        request = self.request_timeout_s
        return None if request is None else max(self.retry_window_s, request)


def host_delay(url: str) -> float:
    """Seconds this process still waits before asking the host of `url` anything (a Retry-After it was given)."""
    return HOSTS.delay(host_key(url))


# ---------------------------------------------------------------------------------------------- retrying
def _fresh_s(policy: FetchPolicy) -> float:
    """How long a host's silence lasts without a new failure seen: a fetch may still be waiting on it (the
    longest request, or a window when requests have no limit, and a backoff)."""
    return max(policy.retry_window_s, policy.request_timeout_s or 0.0) + policy.max_backoff_s


def _refuse_if_down(
    key: str | None, url: str, where: str, attempt: int, cause: BaseException | None, policy: FetchPolicy | None = None
) -> None:
    """FetchError at once when the host is down (`hosts`): it stayed silent for a whole retry window (with
    `policy`, before a first attempt: or it has been silent for that long)."""
    down = HOSTS.down(key, policy.retry_window_s, _fresh_s(policy)) if policy is not None else HOSTS.down(key)
    if down is not None:
        verb = "not asked" if attempt == 0 else f"not asked again after attempt {attempt}"
        raise FetchError(f"{where}: {verb}: {down.message()}", url, attempt) from cause


def with_retries(
    call: Callable[[], T],
    url: str,
    policy: FetchPolicy | None = None,
    counters: Any = None,
    *,
    rng: random.Random | None = None,
    host: str | None = None,
) -> T:
    """`call()`, retried on transient failures under `policy` (default `FetchPolicy()`); see the module
    docstring for what is retried. `counters.add(retries=1)` is called before each retry. A first attempt
    waits while the host is held by a Retry-After (at most `max_retry_after_s`); a host found down fails
    at once. `host`: the host `call` asks (default: scheme://authority of `url`; the Hub endpoint for
    huggingface_hub's calls, whose `url` is a description), named in errors when `url` does not show it."""
    policy = policy or FetchPolicy()
    key = host_key(host) if host is not None else host_key(url)
    where = url if key is None or url.startswith(key) else f"{url} (host {key})"
    _refuse_if_down(key, url, where, 0, None, policy)
    held = min(HOSTS.delay(key), policy.max_retry_after_s)
    if held > 0:
        logger.debug("%s: the host asked to wait; first attempt in %.3f s", url, held)
        time.sleep(held)
    start = time.monotonic()
    attempt = 0
    while True:
        attempt += 1
        began = time.monotonic()
        try:
            result = call()
        except Exception as e:  # noqa: BLE001 -- classified below; anything unexpected is re-raised as is
            kind = classify(e)
            if kind == RAISE:
                raise
            silent = kind == RETRY and unanswered(e)
            if not silent:
                HOSTS.answered(key)
            if kind == NOT_FOUND:
                raise MissingFileError(f"{url}: file not found") from None
            if kind == REFUSED:
                raise FetchError(
                    f"{where}: refused, not retried (attempt {attempt}: {describe(e)})", url, attempt
                ) from e
            now = time.monotonic()
            end = start + policy.retry_window_s
            if silent:  # the window closes one window after the host fell silent, for every fetch from it
                _refuse_if_down(key, url, where, attempt, e)  # another fetch found it down meanwhile
                waited_from = max(began, now - policy.timeout_s) if policy.timeout_s else began
                since = HOSTS.silent_since(key, waited_from, _fresh_s(policy), describe(e))
                end = min(end, since + policy.retry_window_s)
            left = end - now
            if silent and timed_out(e) and policy.request_timeout_s:
                # a host that hangs may hang the next attempt as long: start one only if it can end within the window
                left -= policy.request_timeout_s
            if left <= 0 or (policy.retries is not None and attempt > policy.retries):
                if silent and left <= 0:
                    HOSTS.mark_down(key, policy.retry_window_s, describe(e))
                raise FetchError(
                    f"{where}: cannot fetch after {attempt} attempt{'s' if attempt > 1 else ''} in "
                    f"{now - start:.1f} s (last: {describe(e)})",
                    url,
                    attempt,
                ) from e
            asked = retry_after(e)
            if asked is not None:
                asked = min(asked, policy.max_retry_after_s)
                HOSTS.hold(key, asked)
                if asked > left:
                    raise FetchError(
                        f"{where}: the server asks to retry after {asked:.1f} s, past the end of the "
                        f"retry window ({left:.1f} s left of {policy.retry_window_s:g} s; attempt "
                        f"{attempt}: {describe(e)})",
                        url,
                        attempt,
                    ) from e
                wait = asked
            else:
                wait = policy.backoff(attempt - 1, rng)
            wait = min(max(wait, HOSTS.delay(key)), left)  # another thread may have been told to wait longer
            if counters is not None:
                counters.add(retries=1)
            logger.debug("%s: attempt %d failed (%s); retrying in %.3f s", url, attempt, describe(e), wait)
            time.sleep(wait)
        else:
            HOSTS.answered(key)
            return result


def is_local(fs) -> bool:
    """True for the local filesystem: read directly, never retried."""
    return isinstance(fs, LocalFileSystem)


def timeout_options(protocol: str | tuple | list, options: dict, policy: FetchPolicy) -> dict:
    """`options` (fsspec storage options for `protocol`) with the policy's connect and read timeouts added
    where the filesystem takes them and the caller set none: HTTP(S) on the aiohttp session
    (`client_kwargs["timeout"]`), S3 through botocore (`config_kwargs`). Other filesystems are returned
    as they are (their libraries' own timeouts apply; sizes and versions are limited by `_call_kwargs`)."""
    protocols = {protocol} if isinstance(protocol, str) else set(protocol)
    out = dict(options)
    if protocols & {"http", "https"} and "timeout" not in out:
        import aiohttp

        client = dict(out.get("client_kwargs") or {})
        if "timeout" not in client:
            client["timeout"] = aiohttp.ClientTimeout(
                total=None, sock_connect=policy.connect_timeout_s, sock_read=policy.timeout_s
            )
        out["client_kwargs"] = client
    elif protocols & {"s3", "s3a"}:
        conf = dict(out.get("config_kwargs") or {})
        if policy.connect_timeout_s is not None:
            conf.setdefault("connect_timeout", policy.connect_timeout_s)
        if policy.timeout_s is not None:
            conf.setdefault("read_timeout", policy.timeout_s)
        out["config_kwargs"] = conf
    return out


def _call_kwargs(fs, policy: FetchPolicy) -> dict:
    """Keyword arguments that limit one call of `fs` without a body (a size or a version) to
    `policy.request_timeout_s` as a whole (fsspec's asynchronous filesystems take `timeout=` on every
    synchronous call; fsspec's HTTP `info` may make two requests, HEAD then GET). Calls that transfer
    data get no such limit: a large file may take long, a stalled one hits the read timeout."""
    limit = policy.request_timeout_s
    return {"timeout": limit} if limit and isinstance(fs, AsyncFileSystem) else {}


def _check_length(data: bytes, expected: int | None, url: str, what: str) -> bytes:
    """The one truncation check: `data` must be `expected` bytes long (when known)."""
    if expected is not None and len(data) != expected:
        raise TruncatedRead(f"{url}: {what}: got {len(data)} of {expected} bytes")
    return data


def fetch_bytes(
    fs,
    path: str,
    url: str,
    policy: FetchPolicy | None = None,
    counters: Any = None,
    start: int | None = None,
    end: int | None = None,
    *,
    size: int | None = None,
    max_bytes: int | None = None,
    rng: random.Random | None = None,
) -> bytes:
    """The whole file `path` of `fs` (checked against `size` when given, else against the size the
    filesystem reports, when it reports one), or with `start`/`end` the byte range [start, end) (checked
    to be exactly that long; longer: `RangesIgnored`). Retried under `policy`; errors name `url`.
    `max_bytes` (a metadata file's bound, `format.meta_files.max_bytes`): the file is asked for as the range of its
    first `max_bytes` + 1 bytes (one request, as before; a server that honours ranges sends no more), and a longer
    one is refused (`format.meta_files.too_large`, not retried)."""
    policy = policy or FetchPolicy()
    kw = _call_kwargs(fs, policy)

    def whole() -> bytes:  # first the bytes: a missing file costs one request
        data = fs.cat_file(path) if max_bytes is None else _head_of(fs, path, max_bytes + 1)
        expected = size if size is not None else fs.info(path, **kw).get("size")
        if max_bytes is not None and len(data) > max_bytes:
            raise too_large(url, expected, max_bytes)
        return _check_length(data, expected, url, "whole file")

    def ranged() -> bytes:
        assert start is not None and end is not None, "a range has both ends"
        data = fs.cat_file(path, start=start, end=end)
        if len(data) > end - start:
            raise RangesIgnored(f"{url}: asked for bytes {start}-{end}, got {len(data)} bytes")
        return _check_length(data, end - start, url, f"bytes {start}-{end}")

    return with_retries(whole if start is None else ranged, url, policy, counters, rng=rng)


def _head_of(fs, path: str, n: int) -> bytes:
    """The first `n` bytes of `path` (all of it when shorter; an empty file's range is unsatisfiable: b"")."""
    try:
        return fs.cat_file(path, start=0, end=n)
    except Exception as e:  # noqa: BLE001 -- anything but a 416 is judged by the caller's retries
        if status_of(e) == 416 or (e.__cause__ is not None and status_of(e.__cause__) == 416):
            return b""
        raise


def fetch_to_file(
    fs,
    path: str,
    url: str,
    local: str | os.PathLike,
    policy: FetchPolicy | None = None,
    counters: Any = None,
    *,
    size: int | None = None,
    rng: random.Random | None = None,
) -> int:
    """The whole file `path` of `fs` written to the local file `local`, streamed (never held in memory) under a
    temporary name and renamed when complete (`storage.atomic`), its length checked against `size` when given.
    Retried under `policy`; errors name `url`; nothing is left at `local` when it fails. Returns the length."""
    from .atomic import atomic_path

    def attempt() -> int:
        with atomic_path(local) as tmp:
            fs.get_file(path, tmp)
            n = os.path.getsize(tmp)
            if size is not None and n != size:
                raise TruncatedRead(f"{url}: whole file: got {n} of {size} bytes")
        return n

    return with_retries(attempt, url, policy, counters, rng=rng)


def file_info(
    fs,
    path: str,
    url: str,
    policy: FetchPolicy | None = None,
    counters: Any = None,
    *,
    rng: random.Random | None = None,
) -> dict:
    """What `fs` reports about `path` (its size, and for remote files what identifies the version: ETag,
    Last-Modified, ...), retried under `policy`."""
    policy = policy or FetchPolicy()
    kw = _call_kwargs(fs, policy)
    return dict(with_retries(lambda: fs.info(path, **kw), url, policy, counters, rng=rng))


def file_size(
    fs,
    path: str,
    url: str,
    policy: FetchPolicy | None = None,
    counters: Any = None,
    *,
    rng: random.Random | None = None,
) -> int | None:
    """The size of `path` as `fs` reports it (None when it does not), retried under `policy`."""
    size = file_info(fs, path, url, policy, counters, rng=rng).get("size")
    return int(size) if size is not None else None
