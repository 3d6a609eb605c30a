"""A fleet run's summary: how many datasets were done, skipped (done and verified before), failed, and pending (a
split dataset whose other parts another array task has still to do), each dataset's line (failed ones with their
error), as a table and as JSON.

`roll_up`: the results of a split dataset's units (its parts, e.g. video files, and its final step) made one
result per dataset: failed when a unit failed (the error names each failed part: the file), pending when its
final step found parts not done yet, done when a unit did something, else skipped; the counts of its units'
facts added up, and each unit's own line under ``units``."""

from __future__ import annotations

from typing import Any

__all__ = ["STATUSES", "roll_up", "summarize", "summary_table"]

STATUSES = ("done", "skipped", "failed", "pending")
ERRORS_SHOWN = 3  # a split dataset's failed parts named in its error (all of them in ``failed_parts``)
TABLE_ROWS = 40  # more datasets than this: the table lists the failed ones (the JSON has every one)


def _label(r: dict) -> str:
    return "final step" if r.get("finish") else str(r["part"])


def _rolled(rs: list[dict]) -> dict[str, Any]:
    files = [r for r in rs if not r.get("finish")]
    final = next((r for r in rs if r.get("finish")), None)
    failed = [r for r in rs if r["status"] == "failed"]
    out: dict[str, Any] = {k: rs[0][k] for k in ("name", "source", "output")}
    facts: dict[str, Any] = {}
    for r in rs:
        for k, v in (r.get("facts") or {}).items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                facts[k] = facts.get(k, 0) + v
    counts = ", ".join(
        f"{sum(r['status'] == s for r in files)} {s}" for s in STATUSES if any(r["status"] == s for r in files)
    )
    if failed:
        shown = "; ".join(f"{_label(r)}: {r.get('error', '')}" for r in failed[:ERRORS_SHOWN])
        more = f" (and {len(failed) - ERRORS_SHOWN} more)" if len(failed) > ERRORS_SHOWN else ""
        out.update(status="failed", error=f"{len(failed)} of {len(rs)} unit(s) failed: {shown}{more}")
        out["failed_parts"] = [_label(r) for r in failed]
    elif final is None:  # never run: only after every part succeeded
        out.update(status="failed", error="its final step did not run")
    else:
        status = final["status"]
        if status != "pending":
            status = "done" if any(r["status"] == "done" for r in rs) else "skipped"
        out.update(status=status, detail=f"{len(files)} part(s) ({counts}); {final.get('detail', '')}")
    units = [
        {k: r[k] for k in ("part", "finish", "status", "detail", "error", "seconds", "host", "pid") if k in r}
        for r in rs
    ]
    out.update(facts=facts, seconds=round(sum(r.get("seconds", 0.0) for r in rs), 3), units=units)
    return out


def roll_up(results: list[dict]) -> list[dict]:
    """One result per dataset (module docstring): a whole dataset's result as it is, a split one's units rolled
    up (in the order of each dataset's first result)."""
    groups: dict[str, list[dict]] = {}
    order: list[tuple[str, dict | None]] = []
    for r in results:
        if "part" in r or r.get("finish"):
            if r["name"] not in groups:
                order.append((r["name"], None))
            groups.setdefault(r["name"], []).append(r)
        else:
            order.append((r["name"], r))
    return [r if r is not None else _rolled(groups[name]) for name, r in order]


def summarize(
    task: str,
    results: list[dict],
    *,
    executor: str,
    shard: tuple[int, int] | None,
    listed: int,
    seconds: float,
    out_root: str,
) -> dict[str, Any]:
    """The summary (JSON values) of `results`: one per unit of this run, rolled up per dataset (`roll_up`), of
    `listed` datasets in the whole list."""
    units = len(results)
    results = roll_up(results)
    counts = {s: sum(1 for r in results if r["status"] == s) for s in STATUSES}
    return {
        "task": task,
        "executor": executor,
        "shard": None if shard is None else f"{shard[0]}/{shard[1]}",
        "output": out_root,
        "listed": listed,
        "datasets": len(results),
        "units": units,
        **counts,
        "seconds": round(seconds, 3),
        "results": sorted(results, key=lambda r: r["name"]),
    }


def _cut(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."


def summary_table(summary: dict[str, Any], width: int = 100) -> str:
    """The summary as text: one line per dataset (only the failed ones past `TABLE_ROWS` datasets), then the
    counts."""
    results = summary["results"]
    shown = results if len(results) <= TABLE_ROWS else [r for r in results if r["status"] == "failed"]
    lines = []
    if shown:
        name_w = min(max(len("dataset"), *(len(r["name"]) for r in shown)), 40)
        lines.append(f"{'dataset':<{name_w}}  {'status':<7}  {'seconds':>7}  detail")
        for r in shown:
            text = r.get("error") if r["status"] == "failed" else r.get("detail", "")
            lines.append(
                f"{_cut(r['name'], name_w):<{name_w}}  {r['status']:<7}  {r.get('seconds', 0):>7.2f}  "
                f"{_cut(text or '', width)}"
            )
        if len(shown) < len(results):
            lines.append(f"(the {len(results) - len(shown)} datasets done or skipped are listed in the JSON summary)")
    where = f", array task {summary['shard']} of a list of {summary['listed']}" if summary["shard"] else ""
    lines.append(
        f"{summary['task']}: {summary['datasets']} dataset(s){where}: {summary['done']} done, "
        f"{summary['skipped']} skipped (done before), {summary['failed']} failed, "
        + (f"{summary['pending']} pending (parts left to other array tasks), " if summary.get("pending") else "")
        + f"in "
        f"{summary['seconds']:.1f} s ({summary['executor']})"
    )
    return "\n".join(lines)
