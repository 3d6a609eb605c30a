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
  it again (a whole window). An answer from the host ends both.

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
        return (f"{self.host} is down: no answer for a whole retry window ({self.window_s:g} s; last: {self.last}); "
                f"not asked again for {max(0.0, self.until - now):.1f} s")


class Hosts:
    """The per-host facts of this process (see the module docstring). Every method takes a key of `host_key`
    (or the Hub endpoint); a None key has no facts."""

    def __init__(self):
        self._lock = threading.Lock()
        self._held: dict[str, float] = {}
        self._silent: dict[str, tuple[float, float]] = {}  # key -> (silent since, last seen silent)
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

    def silent_since(self, key: str | None, since: float, window_s: float) -> float:
        """Record that the host gave no answer from `since` (monotonic) until now; returns the start of its
        silence: the earliest such moment since it last answered, unless nothing was seen of it for more than
        `window_s` before now (no sign of silence in between: a new silence begins at `since`)."""
        if key is None:
            return since
        now = time.monotonic()
        with self._lock:
            first, last = self._silent.get(key, (since, now))
            if now - last > window_s:
                first = since
            first = min(first, since)
            self._silent[key] = (first, now)
        return first

    def mark_down(self, key: str | None, window_s: float, last: str) -> None:
        """The host stayed silent for a whole window of `window_s`: down for `window_s` from now (0: not at
        all), described by `last`; its silence is over (the next fetch after that gets a whole window)."""
        if key is None or window_s <= 0:
            return
        now = time.monotonic()
        with self._lock:
            since = self._silent.pop(key, (now, now))[0]
            self._down[key] = Down(key, since, now + window_s, window_s, last)

    def down(self, key: str | None) -> Down | None:
        """The host's `Down` while it lasts, else None."""
        if key is None or key not in self._down:
            return None
        with self._lock:
            found = self._down.get(key)
            if found is not None and found.until <= time.monotonic():
                del self._down[key]
                found = None
        return found


HOSTS = Hosts()
