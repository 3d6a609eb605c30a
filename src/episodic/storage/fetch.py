"""The one fetch policy for remote bytes: which failures are retried, how long to wait, when to give up.

Every remote read of episodic goes through `with_retries` (metadata files, whole files into the cache or a
streaming mirror, byte ranges of parquet and mp4 files, file sizes); local files are read directly.

- Transient failures are retried with capped exponential backoff and full jitter (`FetchPolicy`): timeouts,
  refused or reset connections and other I/O errors, HTTP 5xx, 408 and 429 (waiting as long as a
  `Retry-After` header asks, capped), and bodies shorter than expected (`TruncatedRead`, the one length
  check of `fetch_bytes`). When the retries run out, `FetchError` names the URL, the attempts and the last
  failure.
- "Not found" (FileNotFoundError, HTTP 404/410) fails at once: `MissingFileError` (a DatasetFormatError)
  "<url>: file not found".
- Refusals (PermissionError, HTTP 401/403 and other 4xx, a directory) fail at once with `FetchError`.
- Programming errors (TypeError, KeyError, ValueError, ...), episodic's own errors and `RangesIgnored`
  propagate at once, unchanged.

Counters: `with_retries` calls `counters.add(retries=1)` before each retry, for any object with an
`add(**counts)` method (`episodic.counters.Counters`).
"""

from __future__ import annotations

import email.utils
import logging
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from fsspec.asyn import AsyncFileSystem
from fsspec.implementations.local import LocalFileSystem

from .. import config
from ..checks import check_number
from ..format.errors import EpisodicError, FetchError, MissingFileError

__all__ = ["FetchPolicy", "RangesIgnored", "TruncatedRead", "fetch_bytes", "file_size", "is_local",
           "with_retries"]

T = TypeVar("T")
logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class FetchPolicy:
    """How remote reads are retried.

    retries: retries after the first attempt ([0, 100]). backoff_s: the first retry waits up to this long
    ([0, 60]); each further retry up to twice as long as the one before, at most max_backoff_s
    ([backoff_s, 600]); the wait is drawn uniformly from [0, that bound] (full jitter). timeout_s: one
    request's time limit, (0, 3600] or None for none (default `episodic.config.fetch_timeout_s()`);
    applied to fsspec's asynchronous filesystems (HTTP, S3, GCS, ...). max_retry_after_s: the longest wait
    a server's Retry-After header may ask for ([0, 3600])."""

    retries: int = 8
    backoff_s: float = 0.05
    max_backoff_s: float = 2.0
    timeout_s: float | None = field(default_factory=config.fetch_timeout_s)
    max_retry_after_s: float = 30.0

    def __post_init__(self):
        check_number("retries", self.retries, 0, 100, integer=True)
        check_number("backoff_s", self.backoff_s, 0, 60)
        check_number("max_backoff_s", self.max_backoff_s, self.backoff_s, 600)
        if self.timeout_s is not None:
            check_number("timeout_s", self.timeout_s, 0, 3600, lo_open=True)
        check_number("max_retry_after_s", self.max_retry_after_s, 0, 3600)

    def backoff(self, retry: int, rng: random.Random | None = None) -> float:
        """Seconds to wait before retry number `retry` (0 for the first): full jitter under the capped
        exponential bound."""
        return (rng or random).uniform(0, min(self.max_backoff_s, self.backoff_s * (2 ** retry)))


class RangesIgnored(Exception):
    """The server answered a range request with more bytes than asked for (it ignores Range headers, like
    Python's http.server): not retried; readers fall back to whole files."""


class TruncatedRead(OSError):
    """A body shorter than the file's size or the range asked for (a dropped connection): retried."""


# ---------------------------------------------------------------------------------------------- classifying
_RETRY, _NOT_FOUND, _REFUSED, _RAISE = "retry", "not found", "refused", "raise"


def _status(e: BaseException) -> int | None:
    """The HTTP status an exception carries: aiohttp's ClientResponseError.status, or requests' (an
    OSError) response.status_code."""
    status = getattr(e, "status", None)
    if status is None:
        status = getattr(getattr(e, "response", None), "status_code", None)
    return status if isinstance(status, int) and not isinstance(status, bool) else None


def _classify(e: BaseException) -> str:
    if isinstance(e, (EpisodicError, RangesIgnored)):
        return _RAISE
    if isinstance(e, TruncatedRead):
        return _RETRY
    aiohttp = sys.modules.get("aiohttp")  # not imported: no aiohttp error can exist
    is_response = aiohttp is not None and isinstance(e, aiohttp.ClientResponseError)
    status = _status(e) if is_response or isinstance(e, OSError) else None
    if status is not None:
        if status in (404, 410):
            return _NOT_FOUND
        if status in (408, 429) or status >= 500:
            return _RETRY
        return _REFUSED
    if isinstance(e, FileNotFoundError):
        # fsspec's HTTP `info` raises FileNotFoundError from whatever failed (a 503, a reset): judge that
        cause = e.__cause__
        return _RETRY if cause is not None and _classify(cause) == _RETRY else _NOT_FOUND
    if isinstance(e, (PermissionError, IsADirectoryError, NotADirectoryError)):
        return _REFUSED
    if isinstance(e, OSError):  # timeouts (asyncio's too), refused and reset connections, other I/O errors
        return _RETRY
    if aiohttp is not None and isinstance(e, (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError)):
        return _RETRY
    return _RAISE


def _retry_after(e: BaseException) -> float | None:
    """Seconds a 429/503 answer's Retry-After header asks to wait, when the exception carries headers."""
    if _status(e) not in (429, 503):
        return None
    headers = getattr(e, "headers", None) or getattr(getattr(e, "response", None), "headers", None)
    value = headers.get("Retry-After") if headers else None
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, email.utils.parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError, IndexError):
        return None


def _describe(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__


# ---------------------------------------------------------------------------------------------- retrying
def with_retries(call: Callable[[], T], url: str, policy: FetchPolicy | None = None, counters: Any = None,
                 *, rng: random.Random | None = None) -> T:
    """`call()`, retried on transient failures under `policy` (default `FetchPolicy()`); see the module
    docstring for what is retried. `counters.add(retries=1)` is called before each retry."""
    policy = policy or FetchPolicy()
    for attempt in range(1, policy.retries + 2):
        try:
            return call()
        except Exception as e:  # noqa: BLE001 -- classified below; anything unexpected is re-raised as is
            kind = _classify(e)
            if kind == _RAISE:
                raise
            if kind == _NOT_FOUND:
                raise MissingFileError(f"{url}: file not found") from None
            if kind == _REFUSED:
                raise FetchError(f"{url}: refused, not retried (attempt {attempt}: {_describe(e)})", url,
                                 attempt) from e
            if attempt > policy.retries:
                raise FetchError(f"{url}: cannot fetch after {attempt} attempts (last: {_describe(e)})", url,
                                 attempt) from e
            wait = _retry_after(e)
            wait = policy.backoff(attempt - 1, rng) if wait is None else min(wait, policy.max_retry_after_s)
            if counters is not None:
                counters.add(retries=1)
            logger.debug("%s: attempt %d failed (%s); retrying in %.3f s", url, attempt, _describe(e), wait)
            time.sleep(wait)
    raise AssertionError("unreachable")


def is_local(fs) -> bool:
    """True for the local filesystem: read directly, never retried."""
    return isinstance(fs, LocalFileSystem)


def _call_kwargs(fs, policy: FetchPolicy) -> dict:
    """Keyword arguments that put `policy.timeout_s` on one call of `fs` (fsspec's asynchronous
    filesystems take `timeout=` on every synchronous call)."""
    return {"timeout": policy.timeout_s} if policy.timeout_s and isinstance(fs, AsyncFileSystem) else {}


def _check_length(data: bytes, expected: int | None, url: str, what: str) -> bytes:
    """The one truncation check: `data` must be `expected` bytes long (when known)."""
    if expected is not None and len(data) != expected:
        raise TruncatedRead(f"{url}: {what}: got {len(data)} of {expected} bytes")
    return data


def fetch_bytes(fs, path: str, url: str, policy: FetchPolicy | None = None, counters: Any = None,
                start: int | None = None, end: int | None = None, *, rng: random.Random | None = None) -> bytes:
    """The whole file `path` of `fs` (checked against the size the filesystem reports, when it reports
    one), or with `start`/`end` the byte range [start, end) (checked to be exactly that long; longer:
    `RangesIgnored`). Retried under `policy`; errors name `url`."""
    policy = policy or FetchPolicy()
    kw = _call_kwargs(fs, policy)

    def whole() -> bytes:
        data = fs.cat_file(path, **kw)  # first: a missing file costs one request
        return _check_length(data, fs.info(path, **kw).get("size"), url, "whole file")

    def ranged() -> bytes:
        data = fs.cat_file(path, start=start, end=end, **kw)
        if len(data) > end - start:
            raise RangesIgnored(f"{url}: asked for bytes {start}-{end}, got {len(data)} bytes")
        return _check_length(data, end - start, url, f"bytes {start}-{end}")

    return with_retries(whole if start is None else ranged, url, policy, counters, rng=rng)


def file_size(fs, path: str, url: str, policy: FetchPolicy | None = None, counters: Any = None,
              *, rng: random.Random | None = None) -> int | None:
    """The size of `path` as `fs` reports it (None when it does not), retried under `policy`."""
    policy = policy or FetchPolicy()
    kw = _call_kwargs(fs, policy)
    size = with_retries(lambda: fs.info(path, **kw).get("size"), url, policy, counters, rng=rng)
    return int(size) if size is not None else None
