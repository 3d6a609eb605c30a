"""Distributed start-up of a checked mixture that cannot hang: every entry's files that training reads made
local exactly once per node (or once in all, on a shared cache), every rank told the outcome.

`prepare(report_or_spec, group)` on every rank of `group` (default: the world; without torch.distributed
initialised, the one process just downloads):

0. The mixture checked: a preflight report as it is, or a spec preflighted on each rank. A rank whose check
   fails tells the others in the first collective, and every rank raises at once.
1. Who downloads (`team.leaders`): per node the process with LOCAL_RANK 0 (else the node's lowest rank), or rank 0
   alone with ``shared_cache=True``. A process that knows it downloads (LOCAL_RANK 0; rank 0 on a shared cache)
   starts at once, before any collective: ranks that arrive late do not delay it.
2. The downloading process decides what is missing from its disk alone and fetches it on a thread
   (`downloads.NodeDownload`); no other rank looks at the files. Its main thread, like every other rank's, takes
   part in rounds of one small collective (``any still busy?``) every `poll_s` seconds until every node is done,
   then one gather of the outcomes: each node's roots and counts, or its error (type, message, entry, URL).
3. Every rank runs exactly the same collectives on every path, errors included (the download's exception is
   caught on its thread and travels in the gather), and each collective is limited to `timeout_s` (gloo), so a
   rank that died or never came gives `MixtureStartupError` on the others instead of a hang.
4. An error anywhere raises `MixtureStartupError` on every rank, naming the rank and host, the entry, the URL and
   the original error's type and message (on the rank that failed, chained to the original). Otherwise every rank
   gets a `StartupResult` whose report reads every entry from local files (`PreflightReport.sources`).
"""

from __future__ import annotations

import logging
import socket
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from .. import config
from ..checks import check_number
from ..format.errors import EpisodicError, MixtureStartupError
from ..storage.source import open_source
from .downloads import DownloadFailure, NodeDownload
from .preflight import preflight
from .report import PreflightReport
from .team import Team, claims_download, leaders

__all__ = ["StartupResult", "prepare"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class StartupResult:
    """What `prepare` made available on this rank's node. `report`: the preflight report with every entry's source
    and metadata on local files (the local copies of URL entries; Hub and local entries as they were). `roots`: per
    entry its local root (None for entries that do not take part). `downloader`: the rank that downloaded for this
    one; `files_missing`, `files_fetched`, `bytes_fetched`, `download_seconds`: its figures; `nodes`: how many
    processes downloaded; `seconds`: this rank's time in `prepare`."""

    report: PreflightReport
    roots: tuple[str | None, ...]
    downloader: int
    files_needed: int
    files_missing: int
    files_fetched: int
    bytes_fetched: int
    download_seconds: float
    nodes: int
    seconds: float


def _outcome(work: NodeDownload) -> dict[str, Any]:
    """What a downloading rank tells the others (picklable, no exception objects)."""
    plans = work.plans
    out: dict[str, Any] = {"host": socket.gethostname(), "roots": [p.root for p in plans],
                           "needed": sum(p.needed for p in plans), "missing": sum(len(p.missing) for p in plans),
                           "files": work.files, "bytes": work.bytes, "seconds": work.seconds, "error": None}
    e = work.error
    if isinstance(e, DownloadFailure):
        out["error"] = {"type": type(e.error).__name__, "message": str(e.error), "entry": f"{e.entry} ({e.name})",
                        "url": e.url}
    elif e is not None:
        out["error"] = {"type": type(e).__name__, "message": str(e), "entry": None, "url": None}
    return out


def _raise_failures(outcomes: list[Any], rank: int, work: NodeDownload | None) -> None:
    failed = [(r, o) for r, o in enumerate(outcomes) if o is not None and o["error"] is not None]
    if not failed:
        return
    r, o = failed[0]
    err = o["error"]
    what = ""
    if err["entry"] is not None:  # the URL once: most messages name it already
        what = f"entry {err['entry']}: " + (f"{err['url']}: " if err["url"] not in err["message"] else "")
    more = f" ({len(failed) - 1} other downloading rank(s) failed too: {[f[0] for f in failed[1:]]})" \
        if len(failed) > 1 else ""
    message = (f"mixture start-up failed: rank {r} ({o['host']}) could not fetch {what}{err['type']}: {err['message']}"
               f"{more}")
    error = MixtureStartupError(message, entry=err["entry"], url=err["url"], rank=r, error_type=err["type"])
    if r == rank and work is not None and work.error is not None:
        cause = work.error.error if isinstance(work.error, DownloadFailure) else work.error
        raise error from cause
    raise error


def _localised(report: PreflightReport, roots: list[str | None]) -> PreflightReport:
    """`report` with each entry that has a root read from it (a local directory)."""
    sources, metadata = list(report.sources), list(report.metadata)
    for i, root in enumerate(roots):
        src = sources[i] if i < len(sources) else None
        if root is None or src is None or (src.is_local and src.root == root):
            continue
        local = open_source(root, policy=src.policy)
        sources[i] = local
        if metadata[i] is not None:
            metadata[i] = replace(metadata[i], fs=local.fs, root=local.root)
    return replace(report, sources=tuple(sources), metadata=tuple(metadata))


def _checked(mixture: Any, on_error: str | None,
             concurrency: int) -> tuple[PreflightReport | None, BaseException | None]:
    """The preflight report of `mixture` (a report as it is, or a spec: preflight run here), or what stopped it."""
    try:
        if isinstance(mixture, PreflightReport):
            if mixture.on_error == "raise":
                mixture.raise_for_errors()
            return mixture, None
        return preflight(mixture, on_error=on_error, concurrency=concurrency), None
    except (EpisodicError, OSError, ValueError) as e:  # spec or preflight problems: told to the team, raised everywhere
        return None, e


def _raise_preflight(checks: list[Any], rank: int, error: BaseException | None) -> None:
    failed = [(r, c) for r, c in enumerate(checks) if c is not None]
    if not failed:
        return
    r, (host, kind, message) = failed[0]
    more = f" ({len(failed) - 1} other rank(s) failed too: {[f[0] for f in failed[1:]]})" if len(failed) > 1 else ""
    e = MixtureStartupError(f"mixture start-up failed: rank {r} ({host}) could not check the mixture: {kind}: "
                            f"{message}{more}", rank=r, error_type=kind)
    if r == rank and error is not None:
        raise e from error
    raise e


def prepare(mixture: Any, group: Any = None, *, shared_cache: bool = False, concurrency: int = 8,
            timeout_s: float = 600.0, poll_s: float = 0.5, copies_dir: str | Path | None = None,
            on_error: str | None = None, progress: bool = False) -> StartupResult:
    """Make every file that training on a mixture reads local, once per node (``shared_cache=True``: once in all,
    the cache being on storage every node sees), on every rank of `group` (call it on all of them); see the module
    docstring. `mixture`: a `PreflightReport`, or a spec (a file, a dict, a `MixtureSpec`), preflighted here with
    `on_error` (then a rank whose preflight fails makes every rank raise at once, instead of leaving the others
    waiting). `concurrency`: parallel fetches of a downloading process, and entries read at a time by preflight
    ([1, 256]). `timeout_s`: the longest any collective of the start-up waits for the slowest rank ((0, 86400]);
    downloads may take longer (the ranks meet every `poll_s` seconds, (0, 60]). `copies_dir`: where local copies
    of URL entries go (default `<episodic cache>/copies`; on a shared cache, a directory every node sees).
    Raises `MixtureStartupError` on every rank when a check or a download failed anywhere, or a rank died or did
    not come in time."""
    check_number("concurrency", concurrency, 1, 256, integer=True)
    check_number("timeout_s", timeout_s, 0, 86400, lo_open=True)
    check_number("poll_s", poll_s, 0, 60, lo_open=True)
    if poll_s >= timeout_s:
        raise ValueError(f"poll_s ({poll_s:g}) must be below timeout_s ({timeout_s:g})")
    t0 = time.monotonic()
    report, failure = _checked(mixture, on_error, concurrency)
    check = None if failure is None else (socket.gethostname(), type(failure).__name__, str(failure))

    def start() -> NodeDownload:
        return NodeDownload(report, concurrency, copies_dir, progress).start()

    claim = claims_download(group, shared_cache)
    work = start() if claim and report is not None else None  # at once: ranks that come late do not delay it
    team = None
    try:
        team = Team.open(group, timeout_s)
        nodes = team.gather((config.node_name(), claim, check), "who downloads")
        checks = [c for _, _, c in nodes]
        leader_of = leaders([(n, c) for n, c, _ in nodes], shared_cache)
        leader = leader_of[team.rank]
        if work is not None and (leader != team.rank or any(checks)):  # not confirmed, or a rank cannot go on
            work.cancel()
            work = None
        if any(checks):
            outcomes = None
        else:
            if work is None and leader == team.rank:
                work = start()
            if team.size == 1:
                work.join()
            else:
                while True:
                    if work is not None:
                        work.join(poll_s)
                    if not team.any(work is not None and work.alive, "downloads under way"):
                        break
            outcomes = team.gather(_outcome(work) if work is not None else None, "outcomes")
    except BaseException:
        if work is not None:
            work.cancel()
        raise
    finally:
        if team is not None:
            team.close()
    _raise_preflight(checks, team.rank, failure)
    _raise_failures(outcomes, team.rank, work)
    mine = outcomes[leader]
    result = StartupResult(report=_localised(report, mine["roots"]), roots=tuple(mine["roots"]), downloader=leader,
                           files_needed=mine["needed"], files_missing=mine["missing"], files_fetched=mine["files"],
                           bytes_fetched=mine["bytes"], download_seconds=mine["seconds"],
                           nodes=len(set(leader_of)), seconds=time.monotonic() - t0)
    logger.info("mixture start-up: rank %d: %d files needed, %d were missing, %d fetched by rank %d (%d bytes, "
                "%.2f s)", team.rank, result.files_needed, result.files_missing, result.files_fetched, leader,
                result.bytes_fetched, result.download_seconds)
    return result
