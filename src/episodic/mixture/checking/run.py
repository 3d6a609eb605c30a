"""Preflight: every entry's metadata read and checked before any data file is touched; every problem at once.

1. `fetch.fetch_all`: each entry's info.json, episodes, tasks and stats, `concurrency` entries at a time
   (Hub datasets: only their ``meta/`` files).
2. `entry_checks.check_entry` on each entry that loaded: episode selection, role keys (with the closest
   existing keys as suggestions), shapes, dtypes, state/action selections, windows on the entry's fps grid.
3. Mixture-wide: a ``delta_timestamps`` role that no entry has, nothing left to sample.
4. Shares (`weights`): the rule over the entries' selected sizes. With ``on_error="skip"`` entries with an
   error are skipped and their share re-spread (`weights.shares`); with ``"raise"`` (default: the spec's
   ``on_error``) any error raises `MixturePreflightError` listing every problem of every entry, after all were
   checked. The returned `PreflightReport` keeps the sources and metadata for building the mixture.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping
from dataclasses import replace

from .entry_checks import check_entry
from .entry_sources import DEFAULT_CONCURRENCY, fetch_all
from .report import EntryReport, PreflightReport, Problem
from .spec import ON_ERROR, MixtureSpec, load_spec
from .weights import raw_weights, shares

__all__ = ["preflight"]


def _error_text(e: BaseException) -> str:
    from ...format.errors import EpisodicError

    return str(e) if isinstance(e, EpisodicError) else f"unexpected {type(e).__name__}: {e}"


def preflight(
    spec: MixtureSpec | Mapping | str | os.PathLike,
    on_error: str | None = None,
    concurrency: int = DEFAULT_CONCURRENCY,
    progress: bool = False,
    refresh_hub: bool = False,
    cancel: threading.Event | None = None,
    keep_files: bool = False,
) -> PreflightReport:
    """Check every entry of `spec` (a `MixtureSpec`, a dict or a spec file) from its metadata alone. `cancel` (set
    by another thread): entries not read yet are not, and `InterruptedError` is raised once those under way end.
    `keep_files`: the report keeps the metadata files of URL entries as read (`PreflightReport.metadata_files`), for
    the start-up to write local copies from them without asking again."""
    t0 = time.perf_counter()
    spec = load_spec(spec)
    on_error = spec.on_error if on_error is None else on_error
    if on_error not in ON_ERROR:
        raise ValueError(f"on_error must be one of {ON_ERROR}, got {on_error!r}")
    from ...checks import check_number

    check_number("concurrency", concurrency, 1, 256, integer=True)
    fetched = fetch_all(list(spec.entries), concurrency, progress, refresh_hub, cancel, keep_files)
    if cancel is not None and cancel.is_set():
        raise InterruptedError(f"{spec.origin}: preflight cancelled")
    reports: list[EntryReport] = []
    problems: list[Problem] = []
    for i, (entry, got) in enumerate(zip(spec.entries, fetched)):
        if got.meta is None:
            assert got.error is not None, "an entry whose metadata was not read has its error"
            problems.append(Problem(i, entry.label, "source", _error_text(got.error)))
            reports.append(EntryReport(index=i, name=entry.label, source=entry.source))
            continue
        if entry.revision is not None and got.kind != "hub":
            problems.append(
                Problem(
                    i,
                    entry.label,
                    "revision",
                    f"applies to Hub datasets only; ignored for a {got.kind} source",
                    "warning",
                )
            )
        entry_report, found = check_entry(spec, i, entry, got.meta)
        reports.append(entry_report)
        problems += found

    # mixture-wide: windows for roles no entry has
    have = {
        r
        for rep in reports
        for r in (*rep.cameras, *(["state"] if rep.state_key else []), *(["action"] if rep.action_key else []))
    }
    wanted = set(spec.delta_timestamps or {}) | {r for e in spec.entries for r in (e.delta_timestamps or {})}
    loaded = any(f.meta is not None for f in fetched)
    for role in sorted(wanted - have) if loaded else ():
        problems.append(
            Problem(-1, "", f"delta_timestamps.{role}", f"no entry has a role {role!r} (roles: {sorted(have)})")
        )

    shifted = [r for r in reports if r.delta_rounding_s > r.tolerance_s]
    if shifted:
        worst = max(shifted, key=lambda r: r.delta_rounding_s)
        problems.append(
            Problem(
                -1,
                "",
                "delta_timestamps",
                f"{len(shifted)} entr{'y' if len(shifted) == 1 else 'ies'} "
                f"round window times to their fps grid, by up to {worst.delta_rounding_s:.4g} s "
                f"({worst.name}, {worst.fps} fps); delta_rounding='exact' refuses this",
                "warning",
            )
        )

    failed = {p.entry for p in problems if p.severity == "error" and p.entry >= 0}
    skip = on_error == "skip"
    included = [not (skip and i in failed) for i in range(len(reports))]
    raw = raw_weights(spec, [r.frames for r in reports], [r.episodes for r in reports])
    share = shares(raw, included)
    if skip and failed and not any(share > 0):
        problems.append(Problem(-1, "", "entries", "every entry was skipped or has no weight: nothing to sample"))
    elif not any(share > 0) and not failed:
        problems.append(Problem(-1, "", "weights", "every entry has weight 0: nothing to sample"))
    for i, rep in enumerate(reports):
        status = "ok" if i not in failed else ("skipped" if skip else "error")
        if status == "ok" and share[i] == 0:
            problems.append(Problem(i, rep.name, "weight", "weight 0: the entry is never sampled", "warning"))
        reports[i] = replace(rep, status=status, weight=float(raw[i]), share=float(share[i]))

    report = PreflightReport(
        spec=spec,
        entries=tuple(reports),
        problems=tuple(problems),
        on_error=on_error,
        seconds=time.perf_counter() - t0,
        sources=tuple(f.source for f in fetched),
        metadata=tuple(f.meta for f in fetched),
        metadata_files=tuple(f.files for f in fetched) if keep_files else (),
    )
    mixture_errors = [p for p in problems if p.entry < 0 and p.severity == "error"]
    if (not skip and report.errors) or mixture_errors:
        report.raise_for_errors()
    return report
