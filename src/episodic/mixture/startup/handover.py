"""A checked mixture handed from the process that preflighted it to the other ranks of its node (or to every rank,
on a shared cache) through a file, so that the mixture's metadata is fetched and checked once per node, not once
per rank.

- `spec_digest(spec, on_error)`: a digest of what a parsed spec means, the same on every rank given the same
  mixture: the spec's own fields (`MixtureSpec.to_dict`, so ``$ref`` includes already resolved; the file it came
  from and the foreign fields it ignored play no part), with `on_error` the one preflight applies. Key order does
  not matter, except among camera roles (their order is the order of the mixture's cameras); ``1`` and ``1.0``
  are the same number.
- `handover_dir(copies_dir)`: where the files go: ``<copies_dir>/.startup`` when the copies have a directory of
  their own, else ``<episodic cache>/startup`` (where the copies go by default), so a shared cache shares them.
- `write_report(report, digest, directory)`: the report written atomically (`storage.atomic`) as JSON,
  ``<digest[:16]>-<token>.json``, the token random (one name per start-up); returns (path, token). Files of this
  naming older than two days (a start-up whose writer died before deleting its file) are deleted first.
- `read_report(directory, digest, token, spec, copies_dir)`: the report, rebuilt on this rank from the file and
  the local copies; anything unexpected raises `MixtureStartupError` naming the file (and the entry and field).
- `remove_report(path)`: the writer deletes it once every rank has loaded it.

The file is data, never code (no pickle: whoever can write the directory must not run code on every rank). It
holds the spec digest and the token, ``on_error``, preflight's seconds, every entry's facts (`EntryReport.to_dict`)
and every problem, and per entry the local directory it is read from (or null) with the fingerprint of the
metadata preflight checked (`storage.copies.metadata_fingerprint`). The reader checks it field by field: the file's
size (at most `MAX_BYTES`), exactly the expected fields, the digest and token of this start-up (and the digest of
its own spec with that ``on_error``), each entry's facts (`EntryReport.from_dict`: types and ranges; its index, name
and source those of its spec entry), each problem (`Problem.from_dict`, its entry one of the spec's). Each directory
must be the one this rank finds for that entry from its own spec (`downloads.local_root`: a local entry's
directory, a Hub entry's, a URL entry's copy under `copies_dir`), so no file sends a rank elsewhere; there it opens
the entry (`open_source`, local) and reads its metadata (`load_metadata`: every value checked, every path kept
inside the root), which must have the fingerprint preflight saw. The spec is this rank's own.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ... import config
from ...format.errors import EpisodicError, MixtureStartupError
from ...format.paths import inside
from ...storage.atomic import atomic_write_bytes
from ...storage.copies import metadata_fingerprint
from ...storage.source import open_source
from ..checking.report import EntryReport, PreflightReport, Problem
from ..checking.spec import ON_ERROR, RESERVED_ROLES, MixtureSpec
from .downloads import local_root

__all__ = ["MAX_BYTES", "handover_dir", "read_report", "remove_report", "spec_digest", "write_report"]

logger = logging.getLogger(__name__)

STALE_S = 2 * 86400.0  # a start-up's collectives wait at most a day (timeout_s): older files were left behind
MAX_BYTES = 256 << 20  # a hand-over file's bound: about 100,000 entries of a few cameras each
KIND = "episodic mixture start-up hand-over"
VERSION = 1
_NAME = re.compile(r"^[0-9a-f]{16}-[0-9a-f]{16}\.json$")
_HEX = re.compile(r"^[0-9a-f]+$")
_FIELDS = ("kind", "version", "digest", "token", "on_error", "seconds", "entries", "problems", "roots", "fingerprints")


def _canonical(value: Any, roles: bool = False) -> Any:
    """JSON-ready `value` with mappings sorted by key and integral floats as ints; `roles`: a roles mapping, its
    camera roles kept in their order (as pairs)."""
    if isinstance(value, Mapping):
        items = [(str(k), _canonical(v)) for k, v in value.items()]
        if roles:
            return [
                dict(sorted(kv for kv in items if kv[0] in RESERVED_ROLES)),
                [list(kv) for kv in items if kv[0] not in RESERVED_ROLES],
            ]
        return dict(sorted(items))
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def spec_digest(spec: MixtureSpec, on_error: str | None = None) -> str:
    """The hex SHA-256 of `spec`'s meaning (see the module docstring); `on_error` overrides the spec's."""
    raw = spec.to_dict()
    if on_error is not None:
        raw["on_error"] = on_error
    canon = {k: _canonical(v) for k, v in raw.items() if k not in ("roles", "entries")}
    canon["roles"] = _canonical(raw.get("roles", {}), roles=True)
    canon["entries"] = [{k: _canonical(v, roles=k == "roles") for k, v in e.items()} for e in raw["entries"]]
    text = json.dumps(canon, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def handover_dir(copies_dir: str | os.PathLike | None = None) -> Path:
    """The directory of the hand-over files (see the module docstring)."""
    return Path(copies_dir) / ".startup" if copies_dir is not None else config.cache_dir() / "startup"


def _file_name(digest: str, token: str) -> str:
    return f"{digest[:16]}-{token}.json"


def _remove_stale(directory: Path) -> None:
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return
    now = time.time()
    for name in names:
        path = directory / name
        try:
            if _NAME.match(name) and now - path.stat().st_mtime > STALE_S:
                path.unlink()
                logger.info("removed a mixture start-up hand-over file left behind: %s", path)
        except OSError:  # another process removed it, or it is not ours to remove
            continue


def _local(report: PreflightReport, i: int) -> tuple[str | None, str | None]:
    """(root, metadata fingerprint) of entry `i` when it is read from a local directory, else (None, None)."""
    source = report.sources[i] if i < len(report.sources) else None
    meta = report.metadata[i] if i < len(report.metadata) else None
    if source is None or meta is None or not source.is_local:
        return None, None
    return source.root, metadata_fingerprint(meta)


def write_report(report: PreflightReport, digest: str, directory: str | os.PathLike) -> tuple[str, str]:
    """Write `report` (its entries read from local directories: `startup` localises it first) for the other
    ranks; returns (path, token)."""
    directory = Path(directory)
    token = os.urandom(8).hex()
    path = directory / _file_name(digest, token)
    _remove_stale(directory)
    local = [_local(report, i) for i in range(len(report.entries))]
    held = {
        "kind": KIND,
        "version": VERSION,
        "digest": digest,
        "token": token,
        "on_error": report.on_error,
        "seconds": report.seconds,
        "entries": [e.to_dict() for e in report.entries],
        "problems": [p.to_dict() for p in report.problems],
        "roots": [r for r, _ in local],
        "fingerprints": [f for _, f in local],
    }
    data = json.dumps(held, separators=(",", ":"), allow_nan=False).encode()
    atomic_write_bytes(path, data)
    logger.debug("mixture start-up: report handed over in %s (%d bytes)", path, len(data))
    return str(path), token


def _refused(path: Any, message: str, cause: BaseException | None = None) -> MixtureStartupError:
    error_type = type(cause).__name__ if cause is not None else "HandoverError"
    return MixtureStartupError(f"{path}: the checked mixture handed over is refused: {message}", error_type=error_type)


def _load(path: str) -> dict:
    """The file's JSON object, at most MAX_BYTES, with exactly the hand-over's fields."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_BYTES + 1)
    except OSError as e:  # missing or unreadable: named with the file
        raise MixtureStartupError(
            f"{path}: the checked mixture handed over could not be read: {type(e).__name__}: {e}",
            error_type=type(e).__name__,
        ) from e
    if len(data) > MAX_BYTES:
        raise _refused(path, f"more than {MAX_BYTES} bytes (the bound of a hand-over file)")
    try:
        held = json.loads(data)
    except (ValueError, RecursionError) as e:  # not JSON (a pickle, a torn file), or absurdly nested
        raise _refused(path, f"not JSON ({type(e).__name__}: {str(e)[:200]})", e) from None
    if not isinstance(held, dict):
        raise _refused(path, f"expected a JSON object, got {type(held).__name__}")
    if held.get("kind") != KIND or held.get("version") != VERSION:
        raise _refused(
            path,
            f"not a hand-over file of version {VERSION} (kind {held.get('kind')!r}, version {held.get('version')!r})",
        )
    if set(held) != set(_FIELDS):
        raise _refused(path, f"fields {sorted(held)}, expected {sorted(_FIELDS)}")
    return held


def read_report(
    directory: str | os.PathLike,
    digest: str,
    token: str,
    spec: MixtureSpec,
    copies_dir: str | os.PathLike | None = None,
) -> PreflightReport:
    """The report that the start-up with `digest` and `token` handed over in `directory`, rebuilt for this rank's
    `spec` (see the module docstring for what is checked)."""
    if not (isinstance(token, str) and len(token) == 16 and _HEX.match(token)):
        raise MixtureStartupError(
            f"mixture start-up: the hand-over token {token!r} is not 16 hex digits", error_type="HandoverError"
        )
    path = inside(directory, _file_name(digest, token), "mixture start-up hand-over file")
    held = _load(path)
    if held["token"] != token or held["digest"] != digest:
        raise MixtureStartupError(
            f"{path}: not the checked mixture of this start-up (expected spec digest {digest[:16]} and token {token})",
            error_type="HandoverError",
        )
    on_error = held["on_error"]
    if on_error not in ON_ERROR:
        raise _refused(path, f"field 'on_error' must be one of {ON_ERROR}, got {on_error!r}")
    if spec_digest(spec, on_error) != digest:
        raise _refused(path, f"this rank's spec with on_error={on_error!r} does not have the digest {digest[:16]}")
    seconds = held["seconds"]
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 <= seconds < 1e9:
        raise _refused(path, f"field 'seconds' must be a number of seconds >= 0, got {seconds!r}")
    n = len(spec.entries)
    for name in ("entries", "roots", "fingerprints"):
        if not isinstance(held[name], list) or len(held[name]) != n:
            raise _refused(path, f"field {name!r} must be a list of {n} items (one per entry of the spec)")
    if not isinstance(held["problems"], list):
        raise _refused(path, "field 'problems' must be a list")
    entries, problems = [], []
    try:
        for i, (raw, mine) in enumerate(zip(held["entries"], spec.entries)):
            entry = EntryReport.from_dict(raw, f"entries[{i}]")
            if (entry.index, entry.name, entry.source) != (i, mine.name, mine.source):
                raise ValueError(
                    f"entries[{i}]: index, name and source are ({entry.index}, {entry.name!r}, "
                    f"{entry.source!r}), not those of the spec's entry {i} ({i}, {mine.name!r}, "
                    f"{mine.source!r})"
                )
            entries.append(entry)
        for k, raw in enumerate(held["problems"]):
            problem = Problem.from_dict(raw, f"problems[{k}]")
            if problem.entry >= n:
                raise ValueError(f"problems[{k}]: field 'entry' is {problem.entry}, the spec has {n} entries")
            problems.append(problem)
    except ValueError as e:
        raise _refused(path, str(e), e) from None
    sources, metadata = [], []
    for i, (root, fingerprint, spec_entry) in enumerate(zip(held["roots"], held["fingerprints"], spec.entries)):
        source, meta = _entry(path, i, spec_entry, root, fingerprint, copies_dir)
        sources.append(source)
        metadata.append(meta)
    return PreflightReport(
        spec=spec,
        entries=tuple(entries),
        problems=tuple(problems),
        on_error=on_error,
        seconds=float(seconds),
        sources=tuple(sources),
        metadata=tuple(metadata),
    )


def _entry(path: str, i: int, entry, root: Any, fingerprint: Any, copies_dir) -> tuple[Any, Any]:
    """(source, metadata) of entry `i`, from the directory this rank finds for it, checked against `root` and the
    fingerprint of the metadata preflight checked; (None, None) when the file names no directory."""
    where = f"entry {i} ({entry.name})"
    if root is None and fingerprint is None:
        return None, None
    if not isinstance(root, str) or not (
        isinstance(fingerprint, str) and len(fingerprint) == 64 and _HEX.match(fingerprint)
    ):
        raise _refused(
            path,
            f"{where}: fields 'roots' and 'fingerprints' must be a directory and a metadata "
            f"fingerprint (64 hex digits), or both null; got {root!r} and {fingerprint!r}",
        )
    try:
        expected = local_root(entry, copies_dir)
    except EpisodicError as e:
        raise _refused(path, f"{where}: {e}", e) from None
    if root != expected:
        raise _refused(path, f"{where}: the directory {root!r} is not where this rank finds the entry ({expected})")
    try:
        source = open_source(root)
        meta = source.load_metadata()
    except (EpisodicError, OSError) as e:
        raise MixtureStartupError(
            f"{path}: {where}: the metadata of its local copy {root} could not be read: {type(e).__name__}: {e}",
            entry=where,
            error_type=type(e).__name__,
        ) from e
    if metadata_fingerprint(meta) != fingerprint:
        raise MixtureStartupError(
            f"{path}: {where}: the metadata in {root} is not the metadata that was checked "
            f"(its fingerprint differs): was the copy changed during the start-up?",
            entry=where,
            error_type="HandoverError",
        )
    return source, meta


def remove_report(path: str | os.PathLike) -> None:
    """Delete a hand-over file (gone already: nothing to do)."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as e:
        logger.warning("mixture start-up: could not delete the hand-over file %s: %s", path, e)
