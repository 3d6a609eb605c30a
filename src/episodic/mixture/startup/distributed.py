"""Distributed start-up of a checked mixture that cannot hang: the mixture's metadata read and checked, and every
entry's files that training reads made local, exactly once per node (or once in all, on a shared cache), every rank
told the outcome.

`prepare(report_or_spec, group)` on every rank of `group` (default: the world; without torch.distributed
initialised, the one process checks and downloads):

0. What every rank does alone, without a request: a preflight report is taken as it is; a spec is parsed
   (`load_spec`, ``$ref`` includes resolved) and given a digest of what it means (`handover.spec_digest`).
1. Who downloads (`team.leaders`): per node the process with LOCAL_RANK 0 (else the node's lowest rank), or rank 0
   alone with ``shared_cache=True``. A process that knows it downloads (LOCAL_RANK 0; rank 0 on a shared cache)
   starts at once, before any collective: ranks that arrive late do not delay it. The first gather ("who
   downloads") carries each rank's claim, the digest of its spec, or why it could not read it: a spec that could not
   be read, or one that differs from its downloading rank's, makes every rank raise at once (the downloading
   process's work, if begun, is cancelled).
2. The downloading process, on a thread (`downloads.NodeDownload`): preflight when it was given a spec (every
   entry's info.json, episodes, tasks and stats: once per node, not once per rank), then what is missing, decided
   from its disk alone, fetched. No other rank reads metadata or looks at the files. Its main thread, like every
   other rank's, takes part in rounds of one small collective (``any still busy?``) every `poll_s` seconds until
   every node is done, so neither a long preflight nor long downloads trip the collectives' time limit.
3. The downloading process writes its checked report, localised (sources and metadata on the local copies), to a
   file for the ranks it serves that were given a spec (`handover`: JSON, atomically, under episodic's cache or
   `copies_dir`, its name unique to this start-up). Then one gather of the outcomes: each downloading process's
   roots, figures, the seconds of its preflight and the file's path and token, or its error (type, message, entry,
   URL, and whether preflight, a download or the hand-over failed). The other ranks read the file, checked field by
   field, and rebuild the report from it, their own spec and the local copies (each entry's metadata read from its
   local directory and compared with the fingerprint of what preflight checked); one more gather ("report handed
   over") tells every rank whether each load worked; then the downloading process deletes the file. Nothing but
   these small JSON objects travels through collectives.
4. Every rank runs exactly the same collectives on every path, errors included (the thread's exception is caught
   there and travels in the gather), and each collective is limited to `timeout_s` (gloo), so a rank that died or
   never came gives `MixtureStartupError` on the others instead of a hang.
5. An error anywhere raises `MixtureStartupError` on every rank, naming the rank and host, the entry, the URL and
   the original error's type and message (on the rank that failed, chained to the original). Otherwise every rank
   gets a `StartupResult` whose report reads every entry from local files (`PreflightReport.sources`) and says
   which rank ran preflight (`preflight_rank`).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ... import config
from ...checks import check_number
from ...format.errors import EpisodicError
from ...storage.source import open_source
from ..checking import preflight
from ..checking.report import PreflightReport
from ..checking.spec import ON_ERROR, MixtureSpec, load_spec
from .downloads import NodeDownload
from .handover import handover_dir, read_report, remove_report, spec_digest, write_report
from .outcomes import local_cause, outcome, raise_checks, raise_failures, raise_loads, raise_mismatch, told
from .team import Team, claims_download, leaders

__all__ = ["StartupResult", "prepare"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class StartupResult:
    """What `prepare` made available on this rank's node. `report`: the preflight report with every entry's source
    and metadata on local files (the local copies of URL entries; Hub and local entries as they were). `roots`: per
    entry its local root (None for entries that do not take part). `downloader`: the rank that downloaded for this
    one; `preflight_rank`: the rank whose preflight (run in `prepare`) this report comes from, None when the caller
    gave a report; `preflight_seconds`: that preflight's time (0 without one); `files_missing`, `files_fetched`,
    `bytes_fetched`, `download_seconds`: the downloader's figures; `nodes`: how many processes downloaded;
    `seconds`: this rank's time in `prepare`."""

    report: PreflightReport
    roots: tuple[str | None, ...]
    downloader: int
    preflight_rank: int | None
    preflight_seconds: float
    files_needed: int
    files_missing: int
    files_fetched: int
    bytes_fetched: int
    download_seconds: float
    nodes: int
    seconds: float


def _localised(report: PreflightReport, roots: list[str | None]) -> PreflightReport:
    """`report` with each entry that has a root read from it (a local directory), without the metadata files
    preflight kept (they are in the copies now)."""
    sources, metadata = list(report.sources), list(report.metadata)
    for i, root in enumerate(roots):
        src = sources[i] if i < len(sources) else None
        if root is None or src is None or (src.is_local and src.root == root):
            continue
        local = open_source(root, policy=src.policy)
        sources[i] = local
        if metadata[i] is not None:
            metadata[i] = replace(metadata[i], fs=local.fs, root=local.root)
    return replace(report, sources=tuple(sources), metadata=tuple(metadata), metadata_files=())


def _parsed(
    mixture: Any, on_error: str | None
) -> tuple[PreflightReport | None, MixtureSpec | None, str | None, BaseException | None]:
    """(the report given, the spec given, the digest of its spec, what stopped it): local work only, no request."""
    try:
        if isinstance(mixture, PreflightReport):
            if mixture.on_error == "raise":
                mixture.raise_for_errors()
            return mixture, None, spec_digest(mixture.spec, mixture.on_error), None
        spec = load_spec(mixture)
        effective = spec.on_error if on_error is None else on_error
        if effective not in ON_ERROR:
            raise ValueError(f"on_error must be one of {ON_ERROR}, got {on_error!r}")
        return None, spec, spec_digest(spec, effective), None
    except (EpisodicError, OSError, ValueError) as e:  # told to the team, raised everywhere
        return None, None, None, e


def prepare(
    mixture: Any,
    group: Any = None,
    *,
    shared_cache: bool = False,
    concurrency: int = 8,
    timeout_s: float = 600.0,
    poll_s: float = 0.5,
    copies_dir: str | Path | None = None,
    on_error: str | None = None,
    progress: bool = False,
) -> StartupResult:
    """Make every file that training on a mixture reads local, once per node (``shared_cache=True``: once in all,
    the cache being on storage every node sees), on every rank of `group` (call it on all of them); see the module
    docstring. `mixture`: a `PreflightReport`, or a spec (a file, a dict, a `MixtureSpec`) that every rank parses
    and only the downloading process preflights, with `on_error`, handing the checked report to the others (every
    rank must be given the same spec). `concurrency`: parallel fetches of a downloading process, and entries read at
    a time by preflight ([1, 256]). `timeout_s`: the longest any collective of the start-up waits for the slowest
    rank ((0, 86400]); preflight and downloads may take longer (the ranks meet every `poll_s` seconds, (0, 60]).
    `copies_dir`: where local copies of URL entries go (default `<episodic cache>/copies`; on a shared cache, a
    directory every node sees). Raises `MixtureStartupError` on every rank when a spec could not be read or differs
    from its downloading rank's, or a preflight, a download or the hand-over failed anywhere, or a rank died or did
    not come in time."""
    check_number("concurrency", concurrency, 1, 256, integer=True)
    check_number("timeout_s", timeout_s, 0, 86400, lo_open=True)
    check_number("poll_s", poll_s, 0, 60, lo_open=True)
    if poll_s >= timeout_s:
        raise ValueError(f"poll_s ({poll_s:g}) must be below timeout_s ({timeout_s:g})")
    t0 = time.monotonic()
    given, spec, digest, failure = _parsed(mixture, on_error)

    def check(cancel) -> PreflightReport:
        assert spec is not None, "a rank preflights the spec it was given"
        return preflight(
            spec, on_error=on_error, concurrency=concurrency, progress=progress, cancel=cancel, keep_files=True
        )

    def start() -> NodeDownload:  # preflight first, on the thread, when given a spec
        return NodeDownload(given, concurrency, copies_dir, progress, check=check if given is None else None).start()

    claim = claims_download(group, shared_cache)
    work = start() if claim and failure is None else None  # at once: ranks that come late do not delay it
    team = own = handover = handover_error = outcomes = loads = loaded = load_error = None
    try:
        team = Team.open(group, timeout_s)
        nodes = team.gather((config.node_name(), claim, told(failure), digest, given is None), "who downloads")
        checks, digests = [n[2] for n in nodes], [n[3] for n in nodes]
        leader_of = leaders([(n[0], n[1]) for n in nodes], shared_cache)
        leader = leader_of[team.rank]
        stop = any(checks) or any(d != digests[leader_of[r]] for r, d in enumerate(digests))
        if work is not None and (leader != team.rank or stop):  # not confirmed, or a rank cannot go on
            work.cancel()
            work = None
        if not stop:
            assert digest is not None, "every rank read its spec (else stop)"
            if work is None and leader == team.rank:
                work = start()
            if team.size == 1:
                assert work is not None, "a rank alone downloads"
                work.join()
            else:
                while True:
                    if work is not None:
                        work.join(poll_s)
                    if not team.any(work is not None and work.alive, "downloads under way"):
                        break
            if work is not None and work.error is None:
                assert work.report is not None, "a download that ended without an error has its report"
                own = _localised(work.report, [p.root for p in work.plans])
                if any(nodes[r][4] for r, lead in enumerate(leader_of) if lead == team.rank != r):
                    try:  # to the ranks of this node (every rank, on a shared cache) that were given the spec
                        handover = write_report(own, digest, handover_dir(copies_dir))
                    except Exception as e:  # noqa: BLE001 -- told to the team, raised everywhere
                        handover_error = e
            outcomes = team.gather(outcome(work, handover, handover_error) if work is not None else None, "outcomes")
            if given is None and leader != team.rank and all(o is None or o["error"] is None for o in outcomes):
                try:
                    assert spec is not None, "a rank given no report was given a spec"
                    _, token = outcomes[leader]["handover"]
                    loaded = read_report(handover_dir(copies_dir), digest, token, spec, copies_dir)
                except Exception as e:  # noqa: BLE001 -- told to the team, raised everywhere
                    load_error = e
            loads = team.gather(told(load_error), "report handed over")
    except BaseException:
        if work is not None:
            work.cancel()
        raise
    finally:
        if handover is not None:  # every rank has loaded it (or the start-up failed): no longer needed
            remove_report(handover[0])
        if team is not None:
            team.close()
    raise_checks(checks, team.rank, failure)
    raise_mismatch(digests, leader_of, [n[0] for n in nodes])
    raise_failures(outcomes, team.rank, local_cause(work, handover_error))
    raise_loads(loads, leader_of, team.rank, load_error)
    assert outcomes is not None, "raised above when the ranks stopped before the outcomes"
    mine = outcomes[leader]
    report = own if leader == team.rank else _localised(given, mine["roots"]) if given is not None else loaded
    assert report is not None, "the downloading rank's report, or one handed over"
    checked_by = leader if given is None and mine["preflight_seconds"] is not None else None
    result = StartupResult(
        report=report,
        roots=tuple(mine["roots"]),
        downloader=leader,
        preflight_rank=checked_by,
        preflight_seconds=mine["preflight_seconds"] or 0.0,
        files_needed=mine["needed"],
        files_missing=mine["missing"],
        files_fetched=mine["files"],
        bytes_fetched=mine["bytes"],
        download_seconds=mine["seconds"],
        nodes=len(set(leader_of)),
        seconds=time.monotonic() - t0,
    )
    logger.info(
        "mixture start-up: rank %d: %d files needed, %d were missing, %d fetched by rank %d (%d bytes, %.2f s); %s",
        team.rank,
        result.files_needed,
        result.files_missing,
        result.files_fetched,
        leader,
        result.bytes_fetched,
        result.download_seconds,
        "checked by the caller"
        if checked_by is None
        else f"checked by rank {checked_by} in {result.preflight_seconds:.2f} s",
    )
    return result
