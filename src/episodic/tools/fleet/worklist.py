"""The datasets a fleet run works on, each with its result's place, and a SLURM array task's share of them.

A list is a mixture spec (JSON or YAML: its entries' sources, names, revisions, Hub roots, read as a mixture reads them;
the episode selections and roles play no part: a tool works on whole datasets), or a text file of sources (one per line;
blank lines and ``#`` comments skipped), or sources given directly. A source that appears twice is worked on once (its
first entry). Each dataset's result goes under the output directory at its *name*: the entry's name, else the source's
last path part (a Hub repo id stays ``owner/name``), made a safe relative path (letters, digits, ``._-``; anything else
becomes ``_``), and unique (``-2``, ``-3``, ... in list order).

`plan_units(items, task, options, split_above)`: the units a run runs: each dataset one unit, but a dataset the
task splits (a task with ``units``: `tasks`; `reencode`: a local dataset whose video files add up to more than
`split_above` bytes) one unit per part (file), in the list's order, the parts in theirs (sorted paths). A pure
function of the list and the datasets' file lists.

`shard(units, k, n)`: the units of array task `k` of `n`: those at positions ``k, k + n, k + 2n, ...`` of the
planned list. A pure function of that list: every task of the array computes the same list, the tasks' shares
are disjoint and together they are the whole list, whatever runs when; the files of a large dataset are spread
over the array's tasks.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar

from ... import config

__all__ = ["SPLIT_ABOVE", "WorkItem", "parse_shard", "plan_units", "read_worklist", "shard"]

log = logging.getLogger(__name__)
T = TypeVar("T")
SPLIT_ABOVE = 2 << 30  # a dataset is split into units (per file) above this many bytes (of the files split)

SPEC_SUFFIXES = (".json", ".yaml", ".yml")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


@dataclass(frozen=True)
class WorkItem:
    name: str
    source: str
    output: str
    revision: str | None = None
    root: str | None = None  # a Hub dataset's local copy

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _safe_name(name: str) -> str:
    parts = [_UNSAFE.sub("_", p) for p in name.replace("\\", "/").split("/") if p not in ("", ".", "..")]
    parts = [p if p.strip(".") else p.replace(".", "_") for p in parts]
    return "/".join(parts) or "dataset"


def _default_name(source: str) -> str:
    from ...mixture.checking.entry_sources import source_kind

    if source_kind(source) == "hub":
        return source
    return source.rstrip("/").rsplit("/", 1)[-1] or source


def _entries(target: str | os.PathLike | list) -> list[tuple[str, str | None, str | None, str | None]]:
    """(source, name, revision, root) of every entry of `target`."""
    if isinstance(target, (list, tuple)):
        return [(str(s), None, None, None) for s in target]
    path = Path(target).expanduser()
    if path.suffix.lower() in SPEC_SUFFIXES:
        from ...mixture.checking.spec import load_spec

        return [(e.source, e.name, e.revision, e.root) for e in load_spec(path).entries]
    out: list[tuple[str, str | None, str | None, str | None]] = []
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            out.append((line, None, None, None))
    return out


def read_worklist(target: str | os.PathLike | list, out_root: str, output_of) -> list[WorkItem]:
    """The work items of `target` (module docstring); `output_of(out_root, name)` places each result."""
    items: list[WorkItem] = []
    seen_sources: set[tuple[str, str | None]] = set()
    seen_names: set[str] = set()
    for source, name, revision, root in _entries(target):
        key = (source.rstrip("/"), revision)
        if key in seen_sources:
            continue
        seen_sources.add(key)
        base = _safe_name(name if name else _default_name(source))
        unique, k = base, 1
        while unique in seen_names:
            k += 1
            unique = f"{base}-{k}"
        seen_names.add(unique)
        items.append(
            WorkItem(name=unique, source=source, output=output_of(out_root, unique), revision=revision, root=root)
        )
    if not items:
        raise ValueError(f"{target}: no dataset listed")
    return items


def parse_shard(text: str | None) -> tuple[int, int] | None:
    """``"K/N"`` (array task K of N, counted from 0) -> (K, N); ``"slurm"``: this SLURM array task's
    (`config.slurm_array_task`); None -> None (everything)."""
    if text is None:
        return None
    if text == "slurm":
        got = config.slurm_array_task()
        if got is None:
            raise ValueError(
                "--shard slurm: SLURM_ARRAY_TASK_ID and SLURM_ARRAY_TASK_COUNT are not set (not in a "
                "SLURM array job); give --shard K/N"
            )
        return got
    k, sep, n = text.partition("/")
    try:
        kk, nn = int(k), int(n)
    except ValueError:
        kk = nn = -1
    if not sep or nn < 1 or not 0 <= kk < nn:
        raise ValueError(f"--shard takes K/N with 0 <= K < N (array task K of N), or 'slurm'; got {text!r}")
    return kk, nn


def plan_units(items: list[WorkItem], task: Any, options: dict, split_above: int | None) -> list[dict]:
    """The units of `items` (module docstring): an item's dict, or one per part with ``part`` added; `split_above`
    None: no dataset split."""
    out: list[dict] = []
    for item in items:
        parts = None
        if split_above is not None and hasattr(task, "units"):
            try:
                parts = task.units(item.to_json(), options, split_above)
            except Exception as e:  # noqa: BLE001  one that cannot be listed is one task: its error is reported there
                log.debug("%s: not split (%s)", item.source, e)
        if parts:
            out.extend({**item.to_json(), "part": part} for part in parts)
        else:
            out.append(item.to_json())
    return out


def shard(items: list[T], k: int, n: int) -> list[T]:
    """The items (units) of array task `k` of `n` (module docstring)."""
    return items[k::n]
