"""One node's downloads for a checked mixture: what is missing (decided from the disk alone), then the missing
files fetched in a bounded thread pool. Runs on a thread of the one process that downloads for its node
(`startup`); given a spec rather than a report (`check`), that thread runs preflight first (cancellable).

Per entry that takes part (status ``ok``), by its kind of source:

- a local directory: nothing to fetch; its root is the directory.
- an fsspec URL (``http(s)://``, ``s3://``, ``hf://`` ...): a local copy in episodic's cache
  (`storage.copies.DatasetCopy`): the metadata, when the copy does not hold the metadata preflight read
  (compared by fingerprint, no request), written from the files preflight kept (``keep_files``: no request)
  or else fetched; then the files of `files.entry_files` that the copy lacks. The root is the copy.
- a Hub repo id: the local directory preflight read its metadata from; the files of `files.entry_files` it lacks
  at the commit its metadata came from (huggingface_hub's record of ``meta/info.json``, else the entry's
  revision resolved once: one request per entry, none per file), downloaded at that commit.

Files already present cost no request at all. Fetches follow the fetch policy (retries, Retry-After). The first
failure stops the rest (`cancel`); it is kept with the entry, its name and the file's URL (`DownloadFailure`).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

from ...progress import bar
from ...storage import hub
from ...storage.copies import DatasetCopy, metadata_fingerprint
from ..checking.entry_sources import hub_dir, source_kind
from ..checking.report import PreflightReport
from ..checking.spec import MixtureEntry
from .files import entry_files

__all__ = ["DownloadFailure", "EntryPlan", "NodeDownload", "local_root", "plan_entry"]

logger = logging.getLogger(__name__)


class DownloadFailure(Exception):
    """A fetch of one entry failed: `entry` (index), `name`, `url` (the file, or the dataset for its metadata)
    and the original exception as `__cause__`."""

    def __init__(self, entry: int, name: str, url: str, error: BaseException):
        super().__init__(f"entry {entry} ({name}): {url}: {type(error).__name__}: {error}")
        self.entry, self.name, self.url, self.error = entry, name, url, error


@dataclass
class EntryPlan:
    """What one entry needs on this node: its local root, how many files training reads, which are missing, and
    the jobs that fetch them (metadata first)."""

    index: int
    name: str
    kind: str
    root: str | None
    needed: int = 0
    missing: list[str] = field(default_factory=list)
    meta: Callable[[], object] | None = None  # fetch the metadata (URL entries whose copy lacks it)
    fetch: Callable[[str], int] | None = None  # fetch one file, return its size
    url: Callable[[str], str] = str  # a file's URL, for errors


def plan_entry(report: PreflightReport, index: int, copies_dir: str | Path | None = None) -> EntryPlan:
    """The plan of entry `index` (see the module docstring). Reads the local disk only, except for a Hub entry
    whose local copy has no record of its commit (one request to resolve the revision)."""
    facts, spec_entry = report.entries[index], report.spec.entries[index]
    source = report.sources[index] if index < len(report.sources) else None
    kind = source_kind(spec_entry.source)
    if facts.status != "ok" or source is None:
        return EntryPlan(index, facts.name, kind, None)
    rels = entry_files(report, index)
    if source.is_local and kind != "hub":
        return EntryPlan(index, facts.name, "local", source.root, needed=len(rels))
    if kind == "hub":
        root = source.root
        commit = hub.local_commit(root) or hub.resolve_commit(spec_entry.source, spec_entry.revision, source.policy)
        repo = spec_entry.source
        return EntryPlan(
            index,
            facts.name,
            kind,
            root,
            needed=len(rels),
            missing=hub.missing_files(root, rels, commit),
            fetch=lambda rel: hub.fetch_file(repo, root, commit, rel, source.policy),
            url=lambda rel: f"hub dataset {repo!r} (commit {commit}): {rel}",
        )
    copy = DatasetCopy(source, _copy_dir(copies_dir, source))
    fingerprint = metadata_fingerprint(report.metadata[index])
    current = copy.meta_current(fingerprint)
    read = report.metadata_files[index] if index < len(report.metadata_files) else None
    return EntryPlan(
        index,
        facts.name,
        "url",
        str(copy.directory),
        needed=len(rels),
        missing=copy.missing(rels) if current else list(dict.fromkeys(rels)),
        meta=None if current else (lambda: copy.fetch_meta(fingerprint, read)),
        fetch=copy.fetch_file,
        url=source.url,
    )


def local_root(entry: MixtureEntry, copies_dir: str | Path | None = None) -> str:
    """The absolute local directory an entry is read from once its files are local (what `plan_entry` gives as
    its root): a local entry's directory, a Hub entry's `fetch.hub_dir`, a URL entry's copy
    (`storage.cache.copy_dir` under `copies_dir`). Works from the spec alone: no request, nothing read."""
    kind = source_kind(entry.source)
    if kind == "url":
        from ...storage.cache import copy_dir

        path = copy_dir(entry.source, copies_dir)
    else:
        path = hub_dir(entry) if kind == "hub" else Path(entry.source).expanduser()
    return os.path.abspath(path)


def _copy_dir(base: str | Path | None, source) -> Path | None:
    if base is None:
        return None
    from ...storage.cache import copy_dir

    return copy_dir((source.location or source.url("")), base)


class NodeDownload:
    """The downloads of one node, run on a thread (`start`): `report`, or when it is None the report `check(cancel)`
    returns (preflight, on this thread); then plan every entry, fetch the metadata that is missing, then the files,
    `concurrency` at a time. `cancel()` stops it between entries of preflight and between files. After it ends:
    `report`, `check_seconds` (None when `check` did not run), `plans`, `files`, `bytes`, `seconds` (of the
    downloads), `error` (a `DownloadFailure`, or whatever else stopped it) and `stage` (``"preflight"`` or
    ``"download"``: where it stopped)."""

    def __init__(
        self,
        report: PreflightReport | None,
        concurrency: int = 8,
        copies_dir: str | Path | None = None,
        progress: bool = False,
        check: Callable[[threading.Event], PreflightReport] | None = None,
    ):
        if report is None and check is None:
            raise ValueError("NodeDownload needs a report or a check that makes one")
        self.report, self.concurrency, self.copies_dir, self.progress = report, concurrency, copies_dir, progress
        self.check = check
        self.check_seconds: float | None = None
        self.stage = "download"
        self.plans: list[EntryPlan] = []
        self.files = 0
        self.bytes = 0
        self.seconds = 0.0
        self.error: BaseException | None = None
        self._cancel = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ thread
    def start(self) -> NodeDownload:
        self._thread = threading.Thread(target=self.run, name="episodic-mixture-download", daemon=True)
        self._thread.start()
        return self

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def cancel(self) -> None:
        """Stop between files, or between entries of preflight (fetches under way finish or fail under the fetch
        policy), and wait for the thread."""
        self._cancel.set()
        self.join()

    # ------------------------------------------------------------------ work
    def run(self) -> None:
        t0 = time.monotonic()
        try:
            if self.report is None:
                assert self.check is not None, "the constructor took a report or a check"
                self.stage = "preflight"
                self.report = self.check(self._cancel)
                self.check_seconds = time.monotonic() - t0
                self.stage = "download"
                t0 = time.monotonic()
            self.plans = [plan_entry(self.report, i, self.copies_dir) for i in range(len(self.report.entries))]
            missing = sum(len(p.missing) for p in self.plans)
            logger.info(
                "mixture start-up: %d entries, %d files needed, %d missing",
                len(self.plans),
                sum(p.needed for p in self.plans),
                missing,
            )
            self._pool([(p, None) for p in self.plans if p.meta is not None], "metadata")
            self._pool([(p, rel) for p in self.plans for rel in p.missing], "files")
        except BaseException as e:  # noqa: BLE001 -- kept for the team; the thread ends either way
            self.error = e
        finally:
            self.seconds = time.monotonic() - t0

    def _one(self, plan: EntryPlan, rel: str | None) -> None:
        if self._cancel.is_set():
            return
        report = self.report
        assert report is not None, "files are fetched once the report is there"
        try:
            if rel is None:
                assert plan.meta is not None, "a metadata job is queued for a plan that fetches metadata"
                plan.meta()
                return
            assert plan.fetch is not None, "a file job is queued for a plan with missing files"
            n = plan.fetch(rel)
        except BaseException as e:  # noqa: BLE001
            where = plan.url(rel) if rel is not None else (report.spec.entries[plan.index].source + " (metadata)")
            raise DownloadFailure(plan.index, plan.name, where, e) from e
        with self._lock:
            self.files += 1
            self.bytes += n

    def _pool(self, jobs: list, what: str) -> None:
        if not jobs:
            return
        workers = max(1, min(self.concurrency, len(jobs)))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="episodic-fetch") as pool:
            futures = [pool.submit(self._one, plan, rel) for plan, rel in jobs]
            try:
                for done in bar(
                    as_completed(futures),
                    enabled=self.progress,
                    total=len(futures),
                    desc=f"mixture {what}",
                    unit="file",
                ):
                    done.result()  # the first failure, at once
            except BaseException:
                self._cancel.set()  # the jobs not started yet return at once
                pool.shutdown(wait=True, cancel_futures=True)
                raise
        if self._cancel.is_set():
            raise InterruptedError("mixture start-up: downloads cancelled")
