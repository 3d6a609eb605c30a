"""The content cache of computed statistics (`tabular.column_stats`): one JSON file per (dataset, episode selection)
under ``<episodic cache>/stats/`` (`config.cache_dir`), holding the statistics of each key computed for it (with the
key's feature description: dtype and shape, checked when read), named by the SHA-256 of what decides the result:

- the code's version (`STATS_CODE_VERSION`) and the quantile sketch's size;
- the dataset (its root: the local directory or the URL);
- the selection: the selected episodes, their lengths and global index ranges;
- every data file holding a selected episode: its path in the dataset and, for a local file, its size and
  modification time (ns); for a remote one, the version token its server gives (`storage.versions.version_token`:
  size, ETag, Last-Modified, ...; asked with one metadata request per file, never a data read).

So a re-run with nothing changed opens no data file, and a changed data file (or selection, or feature)
invalidates the statistics of the selections that read it, and only those. Index selections (``state_indices``)
are applied to the cached statistics afterwards: they are not part of the key. Keys computed later for the same
selection are added to its file. Files are JSON (never a pickle: `format.stats.KeyStats.to_json`), written
atomically (`storage.atomic`); a file that cannot be read back (damaged, of another version) is a miss, recomputed
and replaced.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any

import numpy as np

from .. import config
from ..format.errors import MissingFileError
from ..format.metadata import DatasetMetadata
from ..format.quantiles import SKETCH_SIZE
from ..format.stats import KeyStats
from ..storage.atomic import atomic_write_bytes
from ..storage.versions import file_identity

__all__ = ["STATS_CODE_VERSION", "StatsCache", "data_file_identities", "selection_digest"]

logger = logging.getLogger(__name__)

STATS_CODE_VERSION = 1  # raise when what the statistics are, or how they are computed, changes


def data_file_identities(meta: DatasetMetadata, episodes: np.ndarray, policy: Any = None) -> list[list]:
    """What identifies each data file holding `episodes` (module docstring), in file order: no data read."""
    table = meta.episodes
    out: list[list] = []
    for fid in np.unique(table.data_file_id[episodes]):
        rel = table.data_files[int(fid)]
        path = meta.path(rel)
        try:
            out.append([rel, *file_identity(meta.fs, path, policy)])
        except FileNotFoundError:
            hint = "a Hub dataset's data files must be on disk: episodic.mixture.prepare or storage.hub.download"
            raise MissingFileError(f"{path}: data file not found ({hint})") from None
    return out


def selection_digest(meta: DatasetMetadata, episodes: np.ndarray, files: list[list]) -> str:
    """The key-independent part of the cache key of `episodes` of `meta` (hex SHA-256)."""
    table = meta.episodes
    h = hashlib.sha256()
    for part in (f"episodic-stats/{STATS_CODE_VERSION}/{SKETCH_SIZE}", meta.root, json.dumps(files)):
        h.update(part.encode())
        h.update(b"\0")
    for arr in (episodes, table.length[episodes], table.dataset_from_index[episodes]):
        h.update(np.ascontiguousarray(arr, dtype="<i8").tobytes())
        h.update(b"\0")
    return h.hexdigest()


def _feature(meta: DatasetMetadata, key: str) -> list:
    feature = meta.info.features[key]
    return [feature.dtype, list(feature.shape)]


class StatsCache:
    """The cache's directory (default ``<episodic cache>/stats``); `get` and `put` by selection digest."""

    def __init__(self, root: str | os.PathLike | None = None):
        self.root = Path(root) if root is not None else config.cache_dir() / "stats"

    def path(self, digest: str) -> Path:
        return self.root / digest[:2] / f"{digest}.json"

    def _read(self, digest: str) -> dict:
        """The file's keys (key -> its JSON object), {} when there is none or it is not usable (logged)."""
        path = self.path(digest)
        try:
            raw = json.loads(path.read_bytes())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as e:
            logger.warning("%s: statistics cache file not readable (%s): computing again", path, e)
            return {}
        if not (
            isinstance(raw, dict) and raw.get("version") == STATS_CODE_VERSION and isinstance(raw.get("keys"), dict)
        ):
            logger.warning("%s: not a statistics cache file of version %d: computing again", path, STATS_CODE_VERSION)
            return {}
        return raw["keys"]

    def get(self, digest: str, meta: DatasetMetadata, keys) -> dict[str, KeyStats]:
        """The statistics of `keys` of `meta` stored under `digest` (those present and usable)."""
        stored = self._read(digest)
        out: dict[str, KeyStats] = {}
        for key in keys:
            raw = stored.get(key)
            if raw is None or key not in meta.info.features:
                continue
            try:
                if not isinstance(raw, dict) or raw.get("feature") != _feature(meta, key):
                    raise ValueError(f"another feature description than {_feature(meta, key)}")
                out[key] = KeyStats.from_json(raw)
            except (ValueError, TypeError) as e:
                logger.warning("%s: statistics of %r not usable (%s): computing again", self.path(digest), key, e)
        return out

    def put(self, digest: str, meta: DatasetMetadata, stats: dict[str, KeyStats]) -> None:
        """Store `stats` under `digest`, with the keys the file holds already (atomically: a reader sees the old
        file or the new one)."""
        keys = self._read(digest)
        keys.update({key: {"feature": _feature(meta, key), **ks.to_json()} for key, ks in stats.items()})
        body = {"version": STATS_CODE_VERSION, "dataset": str(meta.root), "keys": keys}
        atomic_write_bytes(self.path(digest), json.dumps(body, separators=(",", ":")).encode())
