"""One measurement in a child process, for the benchmark scripts (imported by them; not a benchmark itself)."""

from __future__ import annotations

import json
import subprocess


def measured(cmd: list[str]) -> dict:
    """Run `cmd` (a Python child that prints its result as a JSON line, last), sampling the peak PSS and RSS of
    its process tree from outside (RSS every 0.1 s, PSS every 2 s: see `PeakRSS`); its JSON plus
    ``peak_pss_tree_mb`` and ``peak_rss_tree_mb``."""
    from episodic.tools.rss import PeakRSS

    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with PeakRSS(pid=proc.pid, interval_s=0.1, pss=True) as mem:
        out, err = proc.communicate()
    if proc.returncode:
        raise RuntimeError(f"{cmd[:4]}... exited {proc.returncode}: {err[-3000:]}")
    lines = [line for line in out.splitlines() if line.startswith("{")]
    return {**json.loads(lines[-1]), "peak_pss_tree_mb": mem.peak_pss / 2**20, "peak_rss_tree_mb": mem.peak / 2**20}
