"""Where a fleet run's tasks run: a pool of local processes (the default), or a Ray cluster.

Each task is `run_one(task, item, options)`: it imports the task (`tasks.load_task`), runs it on one dataset (or
one unit of a split dataset: a part, or its final step) and returns what happened as JSON values (status
``done``, ``skipped``, ``pending`` or ``failed`` with the error; seconds; the task's facts); it never raises for a
dataset's error, so one broken dataset never stops the others.

- ``local``: `workers` processes (default: the usable cores; 1: in this process). At most `workers` tasks are in
  flight; a worker process that dies (a crash in native code, the OOM killer) takes only the tasks it was
  running: they are run again one at a time in a fresh process, and a task whose process dies again fails with
  that as its error.
- ``ray``: one Ray task per dataset or unit (1 CPU each), on the cluster at `address` (``auto``, ``ray://host:10001``,
  ``host:6379``) or, without one, on a local Ray started with `workers` CPUs and stopped at the end. Ray is an
  optional dependency (``pip install "episodic[ray]"``); episodic must be installed on every node. A Ray worker
  that dies is retried once by Ray, then the task fails with Ray's error.

Results come back as they finish (`on_result`), in any order.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing as mp
import os
import socket
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from ...runtime import usable_cores
from .tasks import load_task

__all__ = ["EXECUTORS", "RAY_MISSING", "ExecutorUnavailable", "run_items", "run_one"]

EXECUTORS = ("local", "ray")
RAY_MISSING = 'the ray executor needs Ray: pip install "episodic[ray]"'

Result = dict[str, Any]


class ExecutorUnavailable(RuntimeError):
    """The executor asked for cannot run here (its optional dependency is missing); the message says what to
    install."""


def _base(item: dict) -> Result:
    """What names a unit's result: its dataset, and the part (file) of a split one, or its final step."""
    out = {"name": item["name"], "source": item["source"], "output": item["output"]}
    if item.get("part") is not None:
        out["part"] = item["part"]
    if item.get("finish"):
        out["finish"] = True
    return out


def run_one(task: str, item: dict, options: dict) -> Result:
    """Run task `task` ("module:attribute" or a registered name) on one work item; never raises for its error."""
    t0 = time.perf_counter()
    out = _base(item)
    try:
        res = dict(load_task(task).run(item, options, progress=False))
        status = res.pop("status", "done")
        res.pop("seconds", None)
        out.update(status=status, detail=str(res.pop("detail", "")), facts=res)
    except Exception as e:  # noqa: BLE001  the dataset's failure, recorded (one never stops the others)
        text = str(e).strip() or repr(e)
        out.update(status="failed", error=f"{type(e).__name__}: {text}")
    out.update(seconds=round(time.perf_counter() - t0, 3), host=socket.gethostname(), pid=os.getpid())
    return out


def _died(item: dict, why: str) -> Result:
    return {**_base(item), "status": "failed", "error": why, "seconds": 0.0}


def run_items(
    task: str,
    items: list[dict],
    options: dict,
    on_result: Callable[[Result], None],
    *,
    executor: str = "local",
    workers: int | None = None,
    address: str | None = None,
) -> None:
    """Run `task` on every item (dicts of `worklist.WorkItem`), handing each result to `on_result`."""
    if executor not in EXECUTORS:
        raise ValueError(f"executor must be one of {', '.join(EXECUTORS)}, got {executor!r}")
    workers = workers or usable_cores()
    if executor == "ray":
        _run_ray(task, items, options, on_result, workers, address)
    elif workers == 1 or len(items) <= 1 or mp.current_process().daemon:
        for item in items:
            on_result(run_one(task, item, options))
    else:
        _run_pool(task, items, options, on_result, workers)


def _run_pool(task: str, items: list[dict], options: dict, on_result, workers: int) -> None:
    todo = deque(items)
    while todo:
        struck = _pool_pass(task, todo, options, on_result, min(workers, len(todo)))
        for item in struck:  # alone in a fresh process each: only the task whose process dies again fails
            if not _pool_pass(task, deque([item]), options, on_result, 1):
                continue
            on_result(
                _died(
                    item,
                    "the worker process running it died, twice (a crash in native code or the "
                    "out-of-memory killer; see the log)",
                )
            )


def _pool_pass(task: str, todo: deque, options: dict, on_result, workers: int) -> list[dict]:
    """Run items from `todo` in one pool until it is empty or a worker dies; returns the items that were in
    flight when one did (the rest stay in `todo`)."""
    inflight: dict[cf.Future, dict] = {}
    with cf.ProcessPoolExecutor(max_workers=workers) as pool:
        while todo or inflight:
            try:
                while todo and len(inflight) < workers:
                    item = todo.popleft()
                    inflight[pool.submit(run_one, task, item, options)] = item
            except BrokenProcessPool:
                todo.appendleft(item)
                return list(inflight.values())
            done, _ = cf.wait(inflight, return_when=cf.FIRST_COMPLETED)
            for fut in done:
                item = inflight.pop(fut)
                try:
                    on_result(fut.result())
                except BrokenProcessPool:
                    return [item, *inflight.values()]
    return []


def _run_ray(task: str, items: list[dict], options: dict, on_result, workers: int, address: str | None) -> None:
    try:
        import ray
    except ImportError:
        raise ExecutorUnavailable(RAY_MISSING) from None
    started = not ray.is_initialized()
    if started:
        where = {"address": address} if address else {"num_cpus": workers}
        ray.init(include_dashboard=False, **where)
    try:
        remote = ray.remote(run_one).options(num_cpus=1, max_retries=1)
        refs = {remote.remote(task, item, options): item for item in items}
        while refs:
            done, _ = ray.wait(list(refs), num_returns=1)
            for ref in done:
                item = refs.pop(ref)
                try:
                    result = ray.get(ref)
                except Exception as e:  # noqa: BLE001  Ray's own failure (a worker or node that died)
                    result = _died(
                        item, f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else e!r}"
                    )
                on_result(result)
    finally:
        if started:
            ray.shutdown()
