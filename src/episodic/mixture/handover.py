"""A checked mixture handed from the process that preflighted it to the other ranks of its node (or to every rank,
on a shared cache) through a file, so that the metadata of a mixture is read once per node, not once per rank.

- `spec_digest(spec, on_error)`: a digest of what a parsed spec means, the same on every rank given the same
  mixture: the spec's own fields (`MixtureSpec.to_dict`, so ``$ref`` includes already resolved; the file it came
  from and the foreign fields it ignored play no part), with `on_error` the one preflight applies. Key order does
  not matter, except among camera roles (their order is the order of the mixture's cameras); ``1`` and ``1.0``
  are the same number.
- `handover_dir(copies_dir)`: where the files go: ``<copies_dir>/.startup`` when the copies have a directory of
  their own, else ``<episodic cache>/startup`` (where the copies go by default), so a shared cache shares them.
- `write_report(report, digest, directory)`: the report written atomically (`storage.atomic`) as
  ``<digest[:16]>-<token>.pkl``, the token random (one name per start-up); returns (path, token). Files of this
  naming older than two days (a start-up whose writer died before deleting its file) are deleted first.
- `read_report(path, digest, token)`: the report, after checking that the file holds that digest and token and a
  report of a spec with that digest; anything else raises `MixtureStartupError` naming the file.
- `remove_report(path)`: the writer deletes it once every rank has loaded it.

The file is a pickle (the report holds sources with their fsspec filesystems and each entry's metadata, which
pickle as DataLoader workers need them). Unpickling runs code, so a file is trusted only because of where it comes
from: the start-up's own downloading process writes it under episodic's cache, and the other ranks learn its name
(digest and random token) only through the start-up's collective. Never point `read_report` at a file of unknown
origin.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import pickle
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .. import config
from ..format.errors import MixtureStartupError
from ..storage.atomic import atomic_write_bytes
from .report import PreflightReport
from .spec import RESERVED_ROLES, MixtureSpec

__all__ = ["handover_dir", "read_report", "remove_report", "spec_digest", "write_report"]

logger = logging.getLogger(__name__)

STALE_S = 2 * 86400.0  # a start-up's collectives wait at most a day (timeout_s): older files were left behind
_NAME = re.compile(r"^[0-9a-f]{16}-[0-9a-f]{16}\.pkl$")


def _canonical(value: Any, roles: bool = False) -> Any:
    """JSON-ready `value` with mappings sorted by key and integral floats as ints; `roles`: a roles mapping, its
    camera roles kept in their order (as pairs)."""
    if isinstance(value, Mapping):
        items = [(str(k), _canonical(v)) for k, v in value.items()]
        if roles:
            return [dict(sorted(kv for kv in items if kv[0] in RESERVED_ROLES)),
                    [list(kv) for kv in items if kv[0] not in RESERVED_ROLES]]
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


def write_report(report: PreflightReport, digest: str, directory: str | os.PathLike) -> tuple[str, str]:
    """Write `report` for the other ranks; returns (path, token)."""
    directory = Path(directory)
    token = os.urandom(8).hex()
    path = directory / f"{digest[:16]}-{token}.pkl"
    _remove_stale(directory)
    data = pickle.dumps({"digest": digest, "token": token, "report": report}, protocol=pickle.HIGHEST_PROTOCOL)
    atomic_write_bytes(path, data)
    logger.debug("mixture start-up: report handed over in %s (%d bytes)", path, len(data))
    return str(path), token


def read_report(path: str | os.PathLike, digest: str, token: str) -> PreflightReport:
    """The report in `path`, checked (see the module docstring)."""
    try:
        with open(path, "rb") as f:
            held = pickle.load(f)
    except Exception as e:  # noqa: BLE001 -- missing, unreadable or truncated: named with the file
        raise MixtureStartupError(f"{path}: the checked mixture handed over could not be read: "
                                  f"{type(e).__name__}: {e}", error_type=type(e).__name__) from e
    if not isinstance(held, dict) or held.get("token") != token or held.get("digest") != digest:
        raise MixtureStartupError(f"{path}: not the checked mixture of this start-up (expected spec digest "
                                  f"{digest[:16]} and token {token})")
    report = held.get("report")
    if not isinstance(report, PreflightReport) or spec_digest(report.spec, report.on_error) != digest:
        raise MixtureStartupError(f"{path}: the report it holds is not one of a mixture spec with digest {digest[:16]}")
    return report


def remove_report(path: str | os.PathLike) -> None:
    """Delete a hand-over file (gone already: nothing to do)."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as e:
        logger.warning("mixture start-up: could not delete the hand-over file %s: %s", path, e)
