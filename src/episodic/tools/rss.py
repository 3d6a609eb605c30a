"""Peak resident memory of a process tree (the process and all its descendants, e.g. DataLoader workers)."""

from __future__ import annotations

import os
import threading


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out.extend(int(c) for c in f.read().split())
    except OSError:
        pass
    return out


def _rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def tree_rss_bytes(pid: int | None = None) -> int:
    """Sum of RSS over `pid` (default: this process) and its descendants."""
    stack, total, seen = [pid or os.getpid()], 0, set()
    while stack:
        p = stack.pop()
        if p in seen:
            continue
        seen.add(p)
        total += _rss_bytes(p)
        stack.extend(_children(p))
    return total


class PeakRSS:
    """Samples the tree's RSS in a background thread; `peak` is the maximum seen (bytes)."""

    def __init__(self, pid: int | None = None, interval_s: float = 0.05):
        self.pid, self.interval_s, self.peak = pid, interval_s, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, tree_rss_bytes(self.pid))
            self._stop.wait(self.interval_s)

    def __enter__(self) -> "PeakRSS":
        self.peak = tree_rss_bytes(self.pid)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, tree_rss_bytes(self.pid))
