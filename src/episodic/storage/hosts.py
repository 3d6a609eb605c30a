"""What this process knows about each remote host, for the fetch policy (`storage.fetch.with_retries`, the
only user of this module).

A host is the scheme and authority of a URL (`host_key`: ``http://127.0.0.1:8000``, ``s3://bucket``), or
for huggingface_hub's calls the Hub endpoint. Three facts per host, shared by every thread of the process:

- Held (`hold`, `delay`): a 429/503 answer's `Retry-After` holds the whole host; every fetch from it, on any
  thread, waits until then.
- Silent (`silent_since`, `answered`): when the host stopped answering: the earliest moment an attempt that
  got no answer at all (connection refused or reset, name not resolved, a connect or read timeout) was
  waiting for it, since the host last answered anything (any HTTP status, a body, a "not found"). A fetch
  retries only within one retry window of that moment, so fetches that began later, on other threads, give
  up together with the first instead of each waiting a window of its own.
- Down (`mark_down`, `down`): a host that stayed silent for a whole retry window is down: every fetch from it
  fails at once, naming the host and what happened, for one more window; after that the next fetch asks
  it again (a whole window). A fetch about to start on a host silent since a window ago finds it down too,
  though no fetch gave up on it yet. An answer from the host ends both.

Per process: a forked child (a DataLoader worker) starts with what its parent knew (the monotonic clock is
the same) and a fresh lock; a spawned one starts knowing nothing. `forget()` clears everything.
"""

from __future__ import annotations

import threading
import time
import urllib.parse
from dataclasses import dataclass

from .. import runtime

__all__ = ["Down", "HOSTS", "Hosts", "host_key"]


def host_key(url: str) -> str | None:
    """scheme://authority of `url` (None for text that is not a URL, e.g. a Hub file's description)."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return None
    return f"{parts.scheme}://{parts.netloc}" if parts.scheme and parts.netloc else None


@dataclass(frozen=True)
class Down:
    """A host found down: silent since `since` (monotonic) for a whole retry window of `window_s`; fetches
    from it fail at once until `until`; `last` describes its last failure."""

    host: str
    since: float
    until: float
    window_s: float
    last: str

    def message(self, now: float | None = None) -> str:
        now = time.monotonic() if now is None else now
        return (
            f"{self.host} is down: no answer for a whole retry window ({self.window_s:g} s; last: {self.last}); "
            f"not asked again for {max(0.0, self.until - now):.1f} s"
        )


@dataclass(frozen=True)
class _Silence:
    first: float  # the host gave no answer from then on (monotonic)
    seen: float  # the last failure without an answer ended then
    last: str  # that failure, described


class Hosts:
    """The per-host facts of this process (see the module docstring). Every method takes a key of `host_key`
    (or the Hub endpoint); a None key has no facts."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[str, float] = {}
        self._silent: dict[str, _Silence] = {}
        self._down: dict[str, Down] = {}
        runtime.after_fork(self)

    def _after_fork(self) -> None:
        self._lock = threading.Lock()  # another thread of the parent may have held it when it forked

    def forget(self) -> None:
        """Clear every fact about every host."""
        with self._lock:
            self._held.clear()
            self._silent.clear()
            self._down.clear()

    # ------------------------------------------------------------------ Retry-After
    def hold(self, key: str | None, seconds: float) -> None:
        if key is None or seconds <= 0:
            return
        until = time.monotonic() + seconds
        with self._lock:
            if until > self._held.get(key, 0.0):
                self._held[key] = until

    def delay(self, key: str | None) -> float:
        """Seconds until the host may be asked again (0: now)."""
        if not self._held or key is None:  # the common case: no host is throttled
            return 0.0
        with self._lock:
            until = self._held.get(key, 0.0)
            if until and until <= time.monotonic():
                del self._held[key]
        return max(0.0, until - time.monotonic())

    # ------------------------------------------------------------------ silence
    def answered(self, key: str | None) -> None:
        """The host answered (anything): it is neither silent nor down."""
        if key is None or (key not in self._silent and key not in self._down):  # the common case, no lock
            return
        with self._lock:
            self._silent.pop(key, None)
            self._down.pop(key, None)

    def silent_since(self, key: str | None, since: float, fresh_s: float, last: str) -> float:
        """Record that the host gave no answer from `since` (monotonic) until now (`last` describes the
        failure); returns the start of its silence: the earliest such moment since it last answered, unless
        no failure of it was seen for more than `fresh_s` before now (no sign of silence in between: a new
        silence begins at `since`)."""
        if key is None:
            return since
        now = time.monotonic()
        with self._lock:
            old = self._silent.get(key)
            first = since if old is None or now - old.seen > fresh_s else min(old.first, since)
            self._silent[key] = _Silence(first, now, last)
        return first

    def mark_down(self, key: str | None, window_s: float, last: str) -> None:
        """The host stayed silent for a whole window of `window_s`: down for `window_s` from now (0: not at
        all), described by `last`; its silence is over (the next fetch after that gets a whole window)."""
        if key is None or window_s <= 0:
            return
        now = time.monotonic()
        with self._lock:
            silence = self._silent.pop(key, None)
            if key not in self._down:  # another fetch may have found it down first
                self._down[key] = Down(key, silence.first if silence else now, now + window_s, window_s, last)

    def down(self, key: str | None, window_s: float = 0.0, fresh_s: float = 0.0) -> Down | None:
        """The host's `Down` while it lasts, else None. With `window_s`: a host silent for that long, its last
        failure seen within `fresh_s` (the longest a request may wait, and a backoff: a fetch may be waiting on
        it still), is down from now on, though no fetch gave up on it yet."""
        if key is None or (key not in self._down and key not in self._silent):  # the common case, no lock
            return None
        now = time.monotonic()
        with self._lock:
            found = self._down.get(key)
            if found is not None and found.until <= now:
                del self._down[key]
                found = None
            silence = self._silent.get(key)
            if (
                found is None
                and silence is not None
                and window_s > 0
                and now - silence.seen <= fresh_s
                and now - silence.first >= window_s
            ):
                found = self._down[key] = Down(key, silence.first, now + window_s, window_s, silence.last)
                del self._silent[key]
        return found


HOSTS = Hosts()
