"""What a failed remote request was, for the fetch policy (`storage.fetch.with_retries`): retried, "not found",
refused, or not the fetch policy's business (`classify`); how long a throttling answer asks to wait
(`retry_after`); whether the host answered at all (`unanswered`); and the failure in words (`describe`).

See `storage.fetch` for the policy these decisions serve.
"""

from __future__ import annotations

import email.utils
import socket
import sys
import time
from typing import TypeGuard

from ..format.errors import EpisodicError

__all__ = [
    "NOT_FOUND",
    "RAISE",
    "REFUSED",
    "RETRY",
    "RangesIgnored",
    "TruncatedRead",
    "classify",
    "describe",
    "retry_after",
    "unanswered",
]


class RangesIgnored(Exception):
    """The server answered a range request with more bytes than asked for (it ignores Range headers, like
    Python's http.server): not retried; readers fall back to whole files."""


class TruncatedRead(OSError):
    """A body shorter than the file's size or the range asked for (a dropped connection): retried."""


RETRY, NOT_FOUND, REFUSED, RAISE = "retry", "not found", "refused", "raise"


def status_of(e: BaseException) -> int | None:
    """The HTTP status an exception carries: aiohttp's ClientResponseError.status, requests' (an OSError)
    or httpx's response.status_code, or a botocore ClientError's
    response["ResponseMetadata"]["HTTPStatusCode"]."""
    status = getattr(e, "status", None)
    response = getattr(e, "response", None)
    if status is None:
        status = getattr(response, "status_code", None)
    if status is None and isinstance(response, dict):
        status = (response.get("ResponseMetadata") or {}).get("HTTPStatusCode")
    return status if isinstance(status, int) and not isinstance(status, bool) else None


def _botocore_kind(e: BaseException) -> str | None:
    """How to treat a botocore error that s3fs let through (None: not one). Connection and read failures
    are transient; the other BotoCoreErrors (no credentials, bad configuration) are refusals. ClientErrors
    are judged by their HTTP status in `classify`."""
    exceptions = sys.modules.get("botocore.exceptions")  # not imported: no botocore error can exist
    if exceptions is None or not isinstance(e, exceptions.BotoCoreError):
        return None
    transient = (exceptions.ConnectionError, exceptions.HTTPClientError, exceptions.IncompleteReadError)
    return RETRY if isinstance(e, transient) else REFUSED


def _client_error(e: BaseException | None) -> TypeGuard[BaseException]:
    """`e` is a botocore ClientError (an S3 answer with an error status)."""
    exceptions = sys.modules.get("botocore.exceptions")
    return exceptions is not None and isinstance(e, exceptions.ClientError)


def _http_client_errors() -> tuple[tuple[type, ...], tuple[type, ...]]:
    """(transport errors, status errors) of the HTTP client libraries loaded in this process (aiohttp for
    fsspec's HTTP, httpx/httpx2 for huggingface_hub); a library that is not imported has no error here."""
    transport: list[type] = []
    status: list[type] = []
    aiohttp = sys.modules.get("aiohttp")
    if aiohttp is not None:
        transport += [aiohttp.ClientConnectionError, aiohttp.ClientPayloadError]
        status.append(aiohttp.ClientResponseError)
    for name in ("httpx", "httpx2"):
        mod = sys.modules.get(name)
        if mod is not None and hasattr(mod, "TransportError"):
            transport.append(mod.TransportError)
            status.append(mod.HTTPStatusError)
    return tuple(transport), tuple(status)


def classify(e: BaseException) -> str:
    """RETRY (transient), NOT_FOUND, REFUSED, or RAISE (not a fetch failure: propagate unchanged); see
    `storage.fetch` for which failure is which."""
    if isinstance(e, (EpisodicError, RangesIgnored)):
        return RAISE
    if isinstance(e, TruncatedRead):
        return RETRY
    botocore_kind = _botocore_kind(e)
    if botocore_kind is not None:
        return botocore_kind
    transport, status_errors = _http_client_errors()
    status = status_of(e) if isinstance(e, status_errors) or isinstance(e, OSError) or _client_error(e) else None
    if status is None and isinstance(e, OSError) and _client_error(e.__cause__):
        status = status_of(e.__cause__)  # s3fs's translation of a ClientError (a 416 is OSError(EINVAL))
    if status is not None:
        if status in (404, 410):
            return NOT_FOUND
        if status in (408, 429) or status >= 500:
            return RETRY
        return REFUSED
    if isinstance(e, FileNotFoundError):
        # fsspec's HTTP `info` raises FileNotFoundError from whatever failed (a 503, a reset), and so does
        # huggingface_hub when it cannot reach the Hub (LocalEntryNotFoundError): judge that
        cause = e.__cause__ or e.__context__
        return RETRY if cause is not None and classify(cause) == RETRY else NOT_FOUND
    if isinstance(e, (PermissionError, IsADirectoryError, NotADirectoryError)):
        return REFUSED
    if isinstance(e, OSError):  # timeouts (asyncio's too), refused and reset connections, other I/O errors
        return RETRY
    if isinstance(e, transport):  # connection, timeout and protocol errors of aiohttp and httpx
        return RETRY
    return RAISE


def retry_after(e: BaseException) -> float | None:
    """Seconds a 429/503 answer's Retry-After header asks to wait (a number of seconds or an HTTP date), when
    the exception carries headers (or its cause does: fsspec's HTTP `info` raises FileNotFoundError from the
    answer's error)."""
    if status_of(e) not in (429, 503):
        cause = e.__cause__ or e.__context__
        return retry_after(cause) if isinstance(e, FileNotFoundError) and cause is not None else None
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


def _chain(e: BaseException | None):
    """`e`, then what caused it (`__cause__`, else `__context__`), and so on (at most 16, no cycle)."""
    seen: set[int] = set()
    while e is not None and id(e) not in seen and len(seen) < 16:
        seen.add(id(e))
        yield e
        e = e.__cause__ or e.__context__


_SHORT_BODY = ("ClientPayloadError", "IncompleteReadError")  # aiohttp's, botocore's: the server answered, then cut


def unanswered(e: BaseException) -> bool:
    """A transient failure in which the host answered nothing: no HTTP status anywhere in its chain, and no
    body cut short (connection refused or reset, name not resolved, a connect or read timeout)."""
    for x in _chain(e):
        if status_of(x) is not None or isinstance(x, TruncatedRead) or type(x).__name__ in _SHORT_BODY:
            return False
    return True


def _what_happened(e: BaseException) -> str | None:
    """In plain words, what a failure without an answer was (None when none of these)."""
    for x in _chain(e):
        name = type(x).__name__
        if isinstance(x, socket.gaierror) or "DNS" in name:
            return "name resolution failed"
        if isinstance(x, ConnectionRefusedError):
            return "connection refused"
        if isinstance(x, ConnectionResetError):
            return "connection reset"
        if isinstance(x, ConnectionAbortedError) or name in ("ServerDisconnectedError", "ConnectionClosedError"):
            return "connection closed without an answer"
        if isinstance(x, (TimeoutError, socket.timeout)) or "Timeout" in name:
            return "timed out"
    return None


def timed_out(e: BaseException) -> bool:
    """A failure in which a request waited its whole time limit (the host hangs rather than refuses)."""
    return _what_happened(e) == "timed out"


def describe(e: BaseException) -> str:
    """What a failure was: in plain words when it got no answer (connection refused or reset, name resolution,
    timed out), then the exception that says most: `e`, or what caused it when `e` only wraps it (fsspec's
    HTTP `info` and huggingface_hub raise a FileNotFoundError from whatever failed)."""
    shown = e
    if isinstance(e, FileNotFoundError) and status_of(e) is None:
        shown = next((x for x in _chain(e) if not isinstance(x, FileNotFoundError)), e)
    if not str(shown) and isinstance(shown, TimeoutError):  # asyncio's and fsspec's timeouts say nothing
        text = f"{type(shown).__name__}: no answer within the time limit"
    else:
        text = f"{type(shown).__name__}: {shown}" if str(shown) else type(shown).__name__
    plain = _what_happened(e)
    return f"{plain} ({text})" if plain else text
