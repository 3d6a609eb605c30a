"""A fleet run's summary: how many datasets were done, skipped (done and verified before) and failed, each
dataset's line (failed ones with their error), as a table and as JSON."""

from __future__ import annotations

from typing import Any

__all__ = ["STATUSES", "summarize", "summary_table"]

STATUSES = ("done", "skipped", "failed")
TABLE_ROWS = 40  # more datasets than this: the table lists the failed ones (the JSON has every one)


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
    """The summary (JSON values) of `results`: one per dataset of this run (of `listed` in the whole list)."""
    counts = {s: sum(1 for r in results if r["status"] == s) for s in STATUSES}
    return {
        "task": task,
        "executor": executor,
        "shard": None if shard is None else f"{shard[0]}/{shard[1]}",
        "output": out_root,
        "listed": listed,
        "datasets": len(results),
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
        f"{summary['skipped']} skipped (done before), {summary['failed']} failed, in "
        f"{summary['seconds']:.1f} s ({summary['executor']})"
    )
    return "\n".join(lines)
