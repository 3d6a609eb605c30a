"""One fleet run: a tool over many datasets (`episodic fleet TOOL LIST OUT`, or `episodic convert` / `repack`
given a list): the list read (`worklist`), its units planned (a large dataset split per file where the task
splits: `worklist.plan_units`), this array task's share of the units taken (``--shard``), the task run on each
unit by an executor (`executors`), then the final step of each split dataset whose parts here all succeeded, a
progress bar, and the summary (`summary`, one line per dataset) written as JSON."""

from __future__ import annotations

import json
import os
import time
from typing import Any

from ...progress import bar
from ...storage.atomic import atomic_write_bytes
from .executors import run_items
from .summary import summarize
from .tasks import TASKS, load_task
from .worklist import SPLIT_ABOVE, WorkItem, plan_units, read_worklist, shard as take_shard

__all__ = ["default_summary_path", "run_fleet"]


def default_summary_path(out_root: str, task: str, shard: tuple[int, int] | None) -> str:
    part = "" if shard is None else f"-shard-{shard[0]}-of-{shard[1]}"
    return os.path.join(out_root, f"fleet-{task}{part}.json")


def run_fleet(
    task: str,
    target: Any,
    out_root: str,
    *,
    options: dict | None = None,
    executor: str = "local",
    workers: int | None = None,
    address: str | None = None,
    shard: tuple[int, int] | None = None,
    progress: bool = False,
    summary_path: str | None = None,
    single: bool = False,
    split_above: int | None = SPLIT_ABOVE,
) -> dict[str, Any]:
    """Run `task` (a name of `tasks.TASKS`, or "module:attribute") on every dataset of `target` (a list file, a
    mixture spec, or a list of sources), results under `out_root`; returns the summary (also written as JSON to
    `summary_path`, default ``<out_root>/fleet-<task>[-shard-K-of-N].json``). `single`: `target` is one dataset
    and `out_root` its result (no summary file unless `summary_path`). `split_above`: a dataset with more bytes
    than this in the parts a task splits (reencode: video files) is split, one unit per part (None: never)."""
    spec = TASKS.get(task, task)
    tool = load_task(spec)
    opts = tool.options(dict(options or {}))  # checked once, before any dataset is touched
    json.dumps(opts)  # JSON values only: they travel to other processes and into done records
    out_root = os.path.abspath(os.path.expanduser(out_root))
    if single:
        name = os.path.basename(str(target).rstrip("/")) or "dataset"
        items = [WorkItem(name=name, source=str(target), output=out_root)]
    else:
        items = read_worklist(target, out_root, tool.output)
    if split_above is not None and (isinstance(split_above, bool) or split_above < 0):
        raise ValueError(f"split_above must be a number of bytes >= 0 or None, got {split_above!r}")
    listed = len(items)
    t0 = time.perf_counter()
    units = plan_units(items, tool, opts, split_above)
    if shard is not None:
        units = take_shard(units, *shard)
    split = {u["name"] for u in units if "part" in u}
    results: list[dict] = []
    with bar(total=len(units) + len(split), enabled=progress, desc=getattr(tool, "name", task), unit="task") as pb:

        def on_result(result: dict) -> None:
            results.append(result)
            pb.update(1)
            failed = sum(1 for r in results if r["status"] == "failed")
            if failed:
                pb.set_postfix(failed=failed)

        def go(batch: list[dict]) -> None:
            run_items(spec, batch, opts, on_result, executor=executor, workers=workers, address=address)

        go(units)
        # the final step of each split dataset whose parts here all succeeded (the rest: failed, named per part)
        ok = {n for n in split if all(r["status"] != "failed" for r in results if r["name"] == n)}
        finals = [{**i.to_json(), "finish": True} for i in items if i.name in ok]
        pb.total = len(units) + len(finals)
        if finals:
            go(finals)
    summary = summarize(
        getattr(tool, "name", task),
        results,
        executor=executor,
        shard=shard,
        listed=listed,
        seconds=time.perf_counter() - t0,
        out_root=out_root,
    )
    path = summary_path or (None if single else default_summary_path(out_root, summary["task"], shard))
    if path is not None:
        atomic_write_bytes(path, json.dumps(summary, indent=1).encode())
        summary["summary_path"] = path
    return summary
