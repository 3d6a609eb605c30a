"""Peak memory of a process tree (the process and all its descendants, e.g. DataLoader workers): RSS, and PSS
(proportional set size: each shared page divided among the processes that map it, so shared memory -- the
batches workers hand over, pages inherited over fork -- counts once for the tree, where RSS counts it in
every process)."""

from __future__ import annotations

import os
import threading
import time


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


def _pss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _tree(pid: int | None) -> list[int]:
    stack, seen = [pid or os.getpid()], []
    while stack:
        p = stack.pop()
        if p not in seen:
            seen.append(p)
            stack.extend(_children(p))
    return seen


def tree_rss_bytes(pid: int | None = None) -> int:
    """Sum of RSS over `pid` (default: this process) and its descendants."""
    return sum(_rss_bytes(p) for p in _tree(pid))


def tree_pss_bytes(pid: int | None = None) -> int:
    """Sum of PSS over `pid` (default: this process) and its descendants (0 where the kernel has no
    smaps_rollup)."""
    return sum(_pss_bytes(p) for p in _tree(pid))


class PeakRSS:
    """Samples the tree's RSS every `interval_s` (and with `pss=True` its PSS, at most every `pss_interval_s`) in a
    background thread; `peak` / `peak_pss` are the maxima seen (bytes). PSS costs the kernel a walk of every
    page table of the tree: ~40 ms of CPU per sample for 2 workers holding 800 open decoders, which at 0.1 s
    would take a third of a core from what is measured, more from a loader that holds more memory."""

    def __init__(
        self, pid: int | None = None, interval_s: float = 0.05, pss: bool = False, pss_interval_s: float = 2.0
    ):
        self.pid, self.interval_s, self.peak, self.peak_pss, self.pss = pid, interval_s, 0, 0, pss
        self.pss_interval_s = pss_interval_s
        self._pss_at = -float("inf")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self, final: bool = False) -> None:
        self.peak = max(self.peak, tree_rss_bytes(self.pid))
        now = time.monotonic()
        if self.pss and (final or now - self._pss_at >= self.pss_interval_s):
            self._pss_at = now
            self.peak_pss = max(self.peak_pss, tree_pss_bytes(self.pid))

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.interval_s)

    def __enter__(self) -> PeakRSS:
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._sample(final=True)
