"""The per-dataset tasks that `episodic fleet` (and `convert` / `repack` given a list) runs over many datasets, and
their registry.

A task is an object with

- ``name``: its name on the command line;
- ``options(raw: dict) -> dict``: its options checked and completed (JSON values), once, before any dataset is
  touched (a bad option fails the whole run at once, not 400 times);
- ``output(out_root: str, name: str) -> str``: where its result for the dataset `name` goes under `out_root`;
- ``run(item: dict, options: dict, progress: bool) -> dict``: do the work for one dataset. `item` has
  ``source`` (a directory, an fsspec URL or a Hub repo id), ``revision`` and ``root`` (a Hub dataset's local
  copy, or None), ``name`` and ``output``. It must be crash-safe (only complete results are ever taken for
  results: temporary names, then renames; the source is never written), resumable, and idempotent: when the
  result is already there and verified (its done record still stands: `provenance.check_record`) it returns
  ``{"status": "skipped", ...}`` without redoing anything. Otherwise ``{"status": "done", "detail": "...",
  ...}`` (JSON values: they go into the summary). A failure raises: the executor records the error.

Tasks are named by an import path ``"module:attribute"`` (`TASKS`): a worker process (a pool worker, a Ray task
on another machine) imports the task itself, so a task registered with `register_task` works with every
executor as long as its module is importable there.

A task may also split a large dataset into parts (``units(item, options, split_above) -> list[str] | None``: the
parts, e.g. its files, or None for one task): each part is then run as ``run({**item, "part": part}, ...)``, and,
once every part of the dataset succeeded, the dataset's final step as ``run({**item, "finish": True}, ...)``, which
may return ``{"status": "pending", ...}`` while parts run elsewhere (another array task) are not done. `driver`
plans the units and rolls their results up per dataset (`summary.roll_up`).

A new tool joins with one line in `TASKS` (or ``register_task(name, "module:attribute")``) naming an object that
follows the protocol: `ReencodeTask` is how ``reencode`` (`tools.reencode`, which keeps its own verification of a
finished copy) plugged in.
"""

from __future__ import annotations

import importlib
import json
import os
from typing import Any

from ...storage.atomic import atomic_write_bytes
from .provenance import check_record, make_record, read_record, source_fingerprint
from .relayout_plan import RelayoutOptions

__all__ = [
    "TASKS",
    "ReencodeTask",
    "RelayoutTask",
    "StatsTask",
    "ValidateTask",
    "load_task",
    "open_item_source",
    "register_task",
]

#: name -> "module:attribute" of the task object
TASKS: dict[str, str] = {
    "convert": "episodic.tools.fleet.tasks:CONVERT",
    "repack": "episodic.tools.fleet.tasks:REPACK",
    "validate": "episodic.tools.fleet.tasks:VALIDATE",
    "stats": "episodic.tools.fleet.tasks:STATS",
    "reencode": "episodic.tools.fleet.tasks:REENCODE",
}


def register_task(name: str, spec: str) -> None:
    """Make the task at `spec` ("module:attribute") available as `name` (checked: it must import)."""
    load_task(spec)
    TASKS[name] = spec


def load_task(spec: str) -> Any:
    """The task object at `spec` ("module:attribute", or a name of `TASKS`)."""
    spec = TASKS.get(spec, spec)
    module, _, attr = spec.partition(":")
    if not attr:
        raise ValueError(f"a task is named 'module:attribute', got {spec!r} (known: {', '.join(sorted(TASKS))})")
    return getattr(importlib.import_module(module), attr)


def open_item_source(item: dict) -> Any:
    """The `storage.source.Source` of a work item: a directory or URL as it is; a Hub repo id downloaded whole
    (into the item's ``root``, else the Hub cache)."""
    from ...mixture.checking.entry_sources import source_kind
    from ...storage.resolve import resolve_source
    from ...storage.source import open_source

    if source_kind(item["source"]) == "hub":
        return resolve_source(item["source"], item.get("root"), revision=item.get("revision"))
    return open_source(item["source"])


class RelayoutTask:
    """`convert` / `repack`: the dataset written anew in the v3.0 layout (`tools.fleet.relayout`)."""

    def __init__(self, name: str, defaults: dict[str, Any]):
        self.name, self.defaults = name, defaults

    def options(self, raw: dict) -> dict:
        return RelayoutOptions.from_json({**self.defaults, **raw}).to_json()

    def output(self, out_root: str, name: str) -> str:
        return os.path.join(out_root, name)

    def run(self, item: dict, options: dict, progress: bool = False) -> dict:
        from .relayout import relayout

        return relayout(
            open_item_source(item),
            item["output"],
            RelayoutOptions.from_json(options),
            tool=self.name,
            progress=progress,
        )


class _ReportTask:
    """A task whose result is one JSON file (``<out>/<name>.<task>.json``) holding its done record."""

    name = ""

    def options(self, raw: dict) -> dict:
        return self.check(dict(raw))

    def check(self, raw: dict) -> dict:
        return raw

    def output(self, out_root: str, name: str) -> str:
        return os.path.join(out_root, f"{name}.{self.name}.json")

    def run(self, item: dict, options: dict, progress: bool = False) -> dict:
        source = open_item_source(item)
        meta = source.load_metadata()
        fingerprint = source_fingerprint(source, meta)
        out = item["output"]
        record = read_record(out)
        ok_record = check_record(record, self.name, options, fingerprint, os.path.dirname(out)) is None
        if record is not None and ok_record and record.get("ok"):
            return {"status": "skipped", "detail": "done and verified", "episodes": len(meta.episodes)}
        result, ok, detail = self.compute(item, source, meta, options, progress)
        body = make_record(
            self.name, options, item["source"], fingerprint, os.path.dirname(out), [], ok=ok, result=result
        )
        atomic_write_bytes(out, json.dumps(body, indent=1, sort_keys=True).encode(), fsync=True)
        if not ok:
            raise ValueError(detail)
        return {"status": "done", "detail": detail, "episodes": len(meta.episodes)}

    def compute(self, item: dict, source: Any, meta: Any, options: dict, progress: bool) -> tuple[dict, bool, str]:
        raise NotImplementedError


class ValidateTask(_ReportTask):
    """`validate`: `episodic validate` on the dataset (``full``: every frame decoded, page checksums); the report
    (problems, what was checked) in ``<out>/<name>.validate.json``. A dataset with problems is a failure (its
    first problems are the error); a re-run checks it again."""

    name = "validate"

    def check(self, raw: dict) -> dict:
        unknown = sorted(set(raw) - {"full", "decode"})
        if unknown:
            raise ValueError(f"unknown validate option(s) {unknown} (known: decode, full)")
        out = {"full": bool(raw.get("full", False)), "decode": bool(raw.get("decode", True))}
        return out

    def compute(self, item, source, meta, options, progress):
        from ..validate import validate

        report = validate(
            source.location or source.root, progress=progress, decode=options["decode"], full=options["full"]
        )
        checked = ", ".join(f"{n} {what}" for what, n in report.checked.items())
        if report.ok:
            return {"problems": [], "checked": report.checked}, True, f"OK ({checked})"
        shown = "; ".join(report.problems[:3]) + (
            f" (and {len(report.problems) - 3} more)" if len(report.problems) > 3 else ""
        )
        return (
            {"problems": report.problems, "checked": report.checked},
            False,
            f"{len(report.problems)} problem(s): {shown}",
        )


class StatsTask(_ReportTask):
    """`stats`: `episodic stats` on the dataset (every numeric feature, or ``keys``); LeRobot's stats layout in
    ``<out>/<name>.stats.json`` (computed once per process here: ``workers`` 1)."""

    name = "stats"

    def check(self, raw: dict) -> dict:
        unknown = sorted(set(raw) - {"keys"})
        if unknown:
            raise ValueError(f"unknown stats option(s) {unknown} (known: keys)")
        keys = raw.get("keys")
        if keys is not None and (not isinstance(keys, list) or not all(isinstance(k, str) for k in keys)):
            raise ValueError(f"stats option 'keys' must be a list of feature names, got {keys!r}")
        return {"keys": keys}

    def compute(self, item, source, meta, options, progress):
        from ..stats_command import dataset_stats, to_json

        result = to_json(dataset_stats(source.location or source.root, keys=options["keys"], workers=1))
        return result, True, f"{result['frames']:,} frames, {len(result['keys'])} keys"


class ReencodeTask:
    """`reencode`: a copy of the dataset with its videos encoded again (`tools.reencode.reencode`: crash-safe,
    resumable, a verified copy skipped). Options: ``vcodec`` (h264, hevc; default h264), ``gop``, ``crf``,
    ``pix_fmt``, ``preset`` (the writer's meanings) and ``workers`` (files encoded side by side in one dataset's
    task; default 1: the fleet's processes are the parallelism). A local dataset or a Hub one (downloaded); a
    URL is refused by `reencode` (download it first). A large local dataset is split: one unit per video file,
    then its final step (`units`, `tools.reencode_units`)."""

    name = "reencode"
    KEYS = ("vcodec", "gop", "crf", "pix_fmt", "preset", "workers")

    def options(self, raw: dict) -> dict:
        from ..reencode import REENCODE_CODECS

        unknown = sorted(set(raw) - set(self.KEYS))
        if unknown:
            raise ValueError(f"unknown reencode option(s) {unknown} (known: {', '.join(self.KEYS)})")
        out = {"vcodec": "h264", "gop": 2, "crf": 30, "pix_fmt": "yuv420p", "preset": None, "workers": 1, **raw}
        if out["vcodec"] not in REENCODE_CODECS:
            raise ValueError(
                f"reencode option vcodec must be one of {', '.join(REENCODE_CODECS)}, got {out['vcodec']!r}"
            )
        for key, lo in (("gop", 1), ("workers", 1)):
            if isinstance(out[key], bool) or not isinstance(out[key], int) or out[key] < lo:
                raise ValueError(f"reencode option {key} must be an int >= {lo}, got {out[key]!r}")
        return out

    def output(self, out_root: str, name: str) -> str:
        return os.path.join(out_root, name)

    def units(self, item: dict, options: dict, split_above: int) -> list[str] | None:
        """The parts of a large dataset, each a unit of its own: its video files, when it is a local directory
        with at least two whose bytes add up to more than `split_above` (`tools.reencode_units`); else None
        (one task)."""
        from ..reencode_units import video_files

        if not os.path.isdir(item["source"]):
            return None
        files = video_files(item["source"])
        return sorted(files) if len(files) > 1 and sum(files.values()) > split_above else None

    def run(self, item: dict, options: dict, progress: bool = False) -> dict:
        from ..reencode import reencode

        if item.get("part") is not None or item.get("finish"):
            from ..reencode_units import encode_file, finish_copy

            settings = {k: v for k, v in options.items() if k != "workers"}
            if item.get("finish"):
                return finish_copy(item["source"], item["output"], fsync=True, **settings)
            return encode_file(item["source"], item["output"], item["part"], fsync=True, **settings)
        source = open_item_source(item)
        result = reencode(source.root, item["output"], progress=progress, fsync=True, **options)
        facts = {
            k: v
            for k, v in result.to_json().items()
            if k in ("files_encoded", "files_kept", "frames", "bytes_before", "bytes_after")
        }
        return {"status": "skipped" if result.skipped else "done", "detail": result.summary(), **facts}


CONVERT = RelayoutTask("convert", {})
REPACK = RelayoutTask("repack", {})
VALIDATE = ValidateTask()
STATS = StatsTask()
REENCODE = ReencodeTask()
