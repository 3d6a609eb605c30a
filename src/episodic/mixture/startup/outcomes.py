"""What the ranks of a mixture's start-up tell each other in its gathers (picklable, no exception objects), and the
one `MixtureStartupError` every rank raises from them (the same on every rank; on the rank where it happened,
chained to the original error).

- `told(error)`: a rank's own problem, as (host, type, message), or None.
- `outcome(...)`: what a downloading rank reports after its work: roots and figures, the seconds of the preflight it
  ran, where it handed the checked report over, or its error with the stage that failed (``preflight``,
  ``download`` or ``handover``).
- `raise_checks`, `raise_mismatch`, `raise_failures`, `raise_loads`: one per gather, in the start-up's order: specs
  that could not be read, specs that differ from their downloading rank's, failed downloading ranks, ranks that
  could not load the handed-over report.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from typing import Any

from ...format.errors import MixturePreflightError, MixtureStartupError
from .downloads import DownloadFailure, NodeDownload

__all__ = ["local_cause", "outcome", "raise_checks", "raise_failures", "raise_loads", "raise_mismatch", "told"]

_VERB = {
    "download": "could not fetch",
    "preflight": "could not check the mixture:",
    "handover": "could not hand the checked mixture over:",
}


def told(error: BaseException | None) -> tuple[str, str, str] | None:
    """(host, error type, message) of a rank's own problem, or None."""
    return None if error is None else (socket.gethostname(), type(error).__name__, str(error))


def outcome(
    work: NodeDownload, handover: tuple[str, str] | None, handover_error: BaseException | None = None
) -> dict[str, Any]:
    """What a downloading rank tells the others: see the module docstring. `handover`: (path, token)."""
    plans = work.plans
    out: dict[str, Any] = {
        "host": socket.gethostname(),
        "roots": [p.root for p in plans],
        "needed": sum(p.needed for p in plans),
        "missing": sum(len(p.missing) for p in plans),
        "files": work.files,
        "bytes": work.bytes,
        "seconds": work.seconds,
        "preflight_seconds": work.check_seconds,
        "handover": handover,
        "error": None,
    }
    e = work.error
    if isinstance(e, DownloadFailure):
        out["error"] = {
            "type": type(e.error).__name__,
            "message": str(e.error),
            "entry": f"{e.entry} ({e.name})",
            "url": e.url,
            "stage": "download",
        }
    elif e is not None:
        report = e.report if isinstance(e, MixturePreflightError) else None
        first = [p for p in report.errors if p.entry >= 0] if report is not None else []
        out["error"] = {
            "type": type(e).__name__,
            "message": str(e),
            "url": None,
            "stage": work.stage,
            "entry": f"{first[0].entry} ({first[0].name})" if first else None,
        }
    elif handover_error is not None:
        out["error"] = {
            "type": type(handover_error).__name__,
            "message": str(handover_error),
            "url": None,
            "entry": None,
            "stage": "handover",
        }
    return out


def _others(failed: Sequence[Any], what: str) -> str:
    return f" ({len(failed) - 1} other {what} failed too: {[f[0] for f in failed[1:]]})" if len(failed) > 1 else ""


def _raise(error: MixtureStartupError, cause: BaseException | None):
    if cause is not None:
        raise error from cause
    raise error


def raise_checks(checks: Sequence[Any], rank: int, error: BaseException | None) -> None:
    """A rank could not read its spec (or its report has errors): every rank raises."""
    failed = [(r, c) for r, c in enumerate(checks) if c is not None]
    if not failed:
        return
    r, (host, kind, message) = failed[0]
    _raise(
        MixtureStartupError(
            f"mixture start-up failed: rank {r} ({host}) could not check the mixture: {kind}: "
            f"{message}{_others(failed, 'rank(s)')}",
            rank=r,
            error_type=kind,
        ),
        error if r == rank else None,
    )


def raise_mismatch(digests: Sequence[str | None], leader_of: Sequence[int], places: Sequence[str]) -> None:
    """Ranks given another mixture than their downloading rank (whose report they would get): every rank raises.
    `digests`: each rank's spec digest; `places`: each rank's node."""
    wrong = [r for r, d in enumerate(digests) if d != digests[leader_of[r]]]
    if not wrong:
        return
    r = wrong[0]
    lead = leader_of[r]
    more = f"; so do ranks {wrong[1:]}" if len(wrong) > 1 else ""
    raise MixtureStartupError(
        f"mixture start-up failed: rank {r} ({places[r]}) was given another mixture spec than rank {lead}, which "
        f"checks the mixture and downloads for it (spec digest {str(digests[r])[:12]} against "
        f"{str(digests[lead])[:12]})"
        f"{more}: give every rank the same spec",
        rank=r,
        error_type="MixtureSpecMismatch",
    )


def raise_failures(outcomes: Sequence[Any] | None, rank: int, cause: BaseException | None) -> None:
    """A downloading rank failed (its preflight, a download, or the hand-over): every rank raises. `cause`: this
    rank's own error, if it is the one that failed."""
    failed = [(r, o) for r, o in enumerate(outcomes or ()) if o is not None and o["error"] is not None]
    if not failed:
        return
    r, o = failed[0]
    err = o["error"]
    what = ""
    if err["entry"] is not None and err["stage"] == "download":  # the URL once: most messages name it already
        what = f"entry {err['entry']}: " + (f"{err['url']}: " if err["url"] not in err["message"] else "")
    message = (
        f"mixture start-up failed: rank {r} ({o['host']}) {_VERB[err['stage']]} {what}{err['type']}: "
        f"{err['message']}{_others(failed, 'downloading rank(s)')}"
    )
    _raise(
        MixtureStartupError(message, entry=err["entry"], url=err["url"], rank=r, error_type=err["type"]),
        cause if r == rank else None,
    )


def raise_loads(loads: Sequence[Any] | None, leader_of: Sequence[int], rank: int, error: BaseException | None) -> None:
    """A rank could not load the report its downloading rank handed over: every rank raises."""
    failed = [(r, c) for r, c in enumerate(loads or ()) if c is not None]
    if not failed:
        return
    r, (host, kind, message) = failed[0]
    _raise(
        MixtureStartupError(
            f"mixture start-up failed: rank {r} ({host}) could not load the checked mixture "
            f"that rank {leader_of[r]} handed over: {kind}: {message}"
            f"{_others(failed, 'rank(s)')}",
            rank=r,
            error_type=kind,
        ),
        error if r == rank else None,
    )


def local_cause(work: NodeDownload | None, handover_error: BaseException | None) -> BaseException | None:
    """This rank's own error behind its outcome (the original of a failed download)."""
    if work is not None and work.error is not None:
        return work.error.error if isinstance(work.error, DownloadFailure) else work.error
    return handover_error
