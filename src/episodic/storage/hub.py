"""Fetch datasets from the Hugging Face Hub into a local directory with huggingface_hub.

Whole datasets come in one snapshot download; episode subsets fetch exactly the files they need in a
bounded thread pool, skipping files already on disk.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Sequence

from fsspec.implementations.local import LocalFileSystem

from .. import config
from ..checks import episode_list
from ..format.errors import DatasetFormatError
from ..format.metadata import load_metadata
from ..format.paths import check_repo_id, check_revision, inside
from ..progress import bar
from .cache import default_cache_dir


def hub_root(repo_id: str, revision: str | None = None) -> Path:
    """Where a Hub dataset lives locally: $HF_LEROBOT_HOME/<repo_id> when set (LeRobot's place), else the
    episodic cache. The repo id and revision must be ones (format.paths.check_repo_id, check_revision:
    UnsafePathError otherwise), so the directory is below its base (the user's own links there are kept)."""
    check_repo_id(repo_id)
    base = config.hub_home()
    if base is not None:
        return base / repo_id
    root = default_cache_dir() / "hub" / repo_id
    return root / check_revision(revision) if revision else root


def files_for_episodes(local_dir: str | os.PathLike, episodes: Sequence[int], video_keys: Sequence[str] | None = None) -> list[str]:
    meta = load_metadata(LocalFileSystem(), str(local_dir))
    files: list[str] = []
    for ep in sorted(set(episode_list(episodes).tolist())):
        if not 0 <= ep < len(meta.episodes):
            raise DatasetFormatError(f"{local_dir}: episode {ep} out of range: the dataset has {len(meta.episodes)} episodes")
        files.append(meta.data_file_of(ep))
        for key in meta.video_keys:
            if video_keys is None or key in video_keys:
                files.append(meta.video_file_of(ep, key))
    return list(dict.fromkeys(files))


def download(repo_id: str, local_dir: str | os.PathLike, revision: str | None = None, episodes: Sequence[int] | None = None,
             video_keys: Sequence[str] | None = None, max_workers: int = 8, progress: bool = True) -> Path:
    import huggingface_hub

    local_dir = Path(local_dir)
    local_dir.mkdir(parents=True, exist_ok=True)
    try:
        if episodes is None and video_keys is None:
            huggingface_hub.snapshot_download(repo_id, repo_type="dataset", revision=revision, local_dir=str(local_dir))
            return local_dir
        huggingface_hub.snapshot_download(repo_id, repo_type="dataset", revision=revision, local_dir=str(local_dir),
                                          allow_patterns=["meta/**"])
        if episodes is None:
            episodes = range(len(load_metadata(LocalFileSystem(), str(local_dir)).episodes))
        needed = [f for f in files_for_episodes(local_dir, episodes, video_keys)
                  if not os.path.exists(inside(local_dir, f, f"{local_dir}: file of {repo_id!r}"))]

        def fetch(rel: str) -> None:
            huggingface_hub.hf_hub_download(repo_id, filename=rel, repo_type="dataset", revision=revision, local_dir=str(local_dir))

        with ThreadPoolExecutor(max_workers=max(1, min(max_workers, len(needed) or 1))) as pool:
            for _ in bar(pool.map(fetch, needed), enabled=progress, total=len(needed), desc=f"downloading {repo_id}",
                         unit="file"):
                pass
    except DatasetFormatError:
        raise
    except Exception as e:  # huggingface_hub's errors: repository/revision not found, network
        raise DatasetFormatError(f"hub dataset {repo_id!r} (revision {revision or 'main'}): download failed ({type(e).__name__}: {e})") from e
    return local_dir
