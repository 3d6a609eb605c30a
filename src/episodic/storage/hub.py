"""Fetch datasets from the Hugging Face Hub into a local directory with huggingface_hub.

Whole datasets come in one snapshot download; episode subsets fetch exactly the files they need in a
bounded thread pool. A copy already on disk is synced every time (`resolve.resolve_source`). Every call goes
through the fetch policy (`storage.fetch.with_retries`: transient failures retried within the retry window, a
missing repository, revision or file at once; a Hub endpoint that answers nothing for a whole window is down
for every Hub call of the process, and errors name it) with the policy's request timeout as huggingface_hub's
`etag_timeout` (huggingface_hub's own download read timeout, `HF_HUB_DOWNLOAD_TIMEOUT`, applies to the bodies;
`hf_hub_download` also retries a file's HEAD request by itself, up to 5 times 1-8 s apart, inside one of
these attempts). Files already on disk are not skipped blindly: huggingface_hub compares each with the Hub
(its commit, else its ETag) and downloads it again when the dataset was re-published, so the metadata and the
files of a subset come from one version.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeGuard

from fsspec.implementations.local import LocalFileSystem

from .. import config
from ..checks import episode_list
from ..format.errors import DatasetFormatError, EpisodicError, MissingFileError
from ..format.metadata import load_metadata
from ..format.paths import check_repo_id, inside, revision_dirname
from ..progress import bar
from .cache import default_cache_dir
from .fetch import FetchPolicy, with_retries


def hub_root(repo_id: str, revision: str | None = None) -> Path:
    """Where a Hub dataset lives locally, under $HF_LEROBOT_HOME when set (LeRobot's place), else under
    `<episodic cache>/hub`: `<base>/<repo_id>` without a revision (where LeRobot puts it), `<base>/<repo_id>@<rev>`
    with one (`format.paths.revision_dirname`: a tag, branch or commit SHA as it is, other revisions made safe),
    so two revisions of a dataset never share a directory ('@' is not part of repo ids) and no revision names a
    directory inside another revision's dataset. The repo id and revision must be ones (UnsafePathError
    otherwise), so the directory is below its base (the user's own links there are kept)."""
    check_repo_id(repo_id)
    base = config.hub_home()
    if base is None:
        base = default_cache_dir() / "hub"
    return base / (f"{repo_id}@{revision_dirname(revision)}" if revision else repo_id)


def files_for_episodes(
    local_dir: str | os.PathLike, episodes: Sequence[int], video_keys: Sequence[str] | None = None
) -> list[str]:
    meta = load_metadata(LocalFileSystem(), str(local_dir))
    files: list[str] = []
    for ep in sorted(set(episode_list(episodes).tolist())):
        if not 0 <= ep < len(meta.episodes):
            raise DatasetFormatError(
                f"{local_dir}: episode {ep} out of range: the dataset has {len(meta.episodes)} episodes"
            )
        files.append(meta.data_file_of(ep))
        for key in meta.video_keys:
            if video_keys is None or key in video_keys:
                files.append(meta.video_file_of(ep, key))
    return list(dict.fromkeys(files))


def _offline_mode() -> bool:
    """huggingface_hub's HF_HUB_OFFLINE, as it read it (its own constants, not our environment)."""
    from huggingface_hub import constants

    return bool(getattr(constants, "HF_HUB_OFFLINE", False))


def _hub_call(call, what: str, policy: FetchPolicy):
    """`call()` under the fetch policy, for the Hub endpoint's host (a Hub that does not answer is down for
    every Hub call of the process, `storage.hosts`); huggingface_hub's "this does not exist" errors fail at
    once."""
    import huggingface_hub.errors as hf_errors
    from huggingface_hub import constants

    # gated repositories (a RepositoryNotFoundError) included; EntryNotFoundError: the remote one before
    # huggingface_hub 1.0, the base of both since (LocalEntryNotFoundError, "cannot reach the Hub", is not one)
    names = (
        "RepositoryNotFoundError",
        "RevisionNotFoundError",
        "DisabledRepoError",
        "RemoteEntryNotFoundError",
        "EntryNotFoundError",
    )
    permanent = tuple(c for c in (getattr(hf_errors, n, None) for n in names) if c is not None)
    offline = getattr(hf_errors, "LocalEntryNotFoundError", ())

    def attempt():
        try:
            return call()
        except permanent as e:
            if offline and isinstance(e, offline):
                if _offline_mode():  # nothing to wait for
                    raise MissingFileError(
                        f"{what}: not on disk, and huggingface_hub is offline (HF_HUB_OFFLINE)"
                    ) from None
                raise  # the Hub could not be reached: retried
            raise MissingFileError(f"{what}: not found on the Hub ({type(e).__name__}: {e})") from None

    return with_retries(attempt, what, policy, host=constants.ENDPOINT)


def _keep_bars_lock() -> None:
    """Give huggingface_hub's progress bar class its lock now, once and for all. Its `snapshot_download` runs tqdm's
    `thread_map`, whose `ensure_lock` deletes the class's lock on the way out when it had to make it: two snapshots
    at once (a mixture's Hub entries, downloaded on threads) then race, and a bar of the other one fails closing
    ("type object 'tqdm' has no attribute '_lock'", seen in CI; huggingface_hub issue 1994). A lock that exists
    before is put back, never deleted."""
    try:
        from huggingface_hub.utils import tqdm as hub_bar
    except ImportError:  # pragma: no cover - every huggingface_hub we support has it
        return
    hub_bar.get_lock()


def download(
    repo_id: str,
    local_dir: str | os.PathLike,
    revision: str | None = None,
    episodes: Sequence[int] | None = None,
    video_keys: Sequence[str] | None = None,
    max_workers: int = 8,
    progress: bool = True,
    policy: FetchPolicy | None = None,
) -> Path:
    import huggingface_hub

    policy = policy or FetchPolicy()
    timeout = policy.request_timeout_s or 3600.0
    _keep_bars_lock()
    local_dir = Path(local_dir)
    local_dir.mkdir(parents=True, exist_ok=True)
    where = f"hub dataset {repo_id!r} (revision {revision or 'main'})"

    def snapshot(patterns: list[str] | None) -> None:
        _hub_call(
            lambda: huggingface_hub.snapshot_download(
                repo_id,
                repo_type="dataset",
                revision=revision,
                local_dir=str(local_dir),
                allow_patterns=patterns,
                etag_timeout=timeout,
            ),
            where,
            policy,
        )

    try:
        if episodes is None and video_keys is None:
            snapshot(None)
            return local_dir
        snapshot(["meta/**"])
        if episodes is None:
            episodes = range(len(load_metadata(LocalFileSystem(), str(local_dir)).episodes))
        needed = files_for_episodes(local_dir, episodes, video_keys)
        for f in needed:  # paths from the dataset's metadata: contained before any download
            inside(local_dir, f, f"{local_dir}: file of {repo_id!r}")
        # the commit the metadata came from (huggingface_hub's record): the files come from the same one, and
        # a file already downloaded from it is not asked about again (with a branch name, every file is)
        commit = local_commit(local_dir) or revision

        def fetch(rel: str) -> int:
            return fetch_file(repo_id, local_dir, commit or "main", rel, policy)

        with ThreadPoolExecutor(max_workers=max(1, min(max_workers, len(needed) or 1))) as pool:
            for _ in bar(
                pool.map(fetch, needed), enabled=progress, total=len(needed), desc=f"downloading {repo_id}", unit="file"
            ):
                pass
    except EpisodicError:  # MissingFileError, FetchError (naming the attempts), a bad episode
        raise
    except Exception as e:  # other errors of huggingface_hub
        raise DatasetFormatError(f"{where}: download failed ({type(e).__name__}: {e})") from e
    return local_dir


# ------------------------------------------------------------------------------ chosen files, at one commit
_COMMIT = re.compile(r"[0-9a-f]{40}")


def is_commit(revision: str | None) -> TypeGuard[str]:
    """`revision` is a full commit SHA (40 lowercase hex digits)."""
    return revision is not None and _COMMIT.fullmatch(revision) is not None


def local_commit(local_dir: str | os.PathLike, rel: str = "meta/info.json") -> str | None:
    """The commit huggingface_hub recorded when it downloaded `rel` into `local_dir` (its local-folder metadata),
    or None when it recorded none (a copy made otherwise, or a huggingface_hub without that record). No request."""
    try:
        from huggingface_hub._local_folder import read_download_metadata
    except ImportError:  # pragma: no cover - huggingface_hub >= 0.23 has it
        return None
    try:
        found = read_download_metadata(Path(local_dir), rel)
    except (OSError, ValueError):
        return None
    commit = getattr(found, "commit_hash", None)
    return commit if is_commit(commit) else None


def resolve_commit(repo_id: str, revision: str | None, policy: FetchPolicy | None = None) -> str:
    """The commit SHA that `revision` (tag, branch, commit; None: main) of dataset `repo_id` names now: a commit
    SHA as it is (no request), else one request to the Hub under the fetch policy."""
    if is_commit(revision):
        return revision
    import huggingface_hub

    policy = policy or FetchPolicy()
    where = f"hub dataset {repo_id!r} (revision {revision or 'main'})"
    info = _hub_call(
        lambda: huggingface_hub.HfApi().dataset_info(repo_id, revision=revision, timeout=policy.request_timeout_s),
        where,
        policy,
    )
    if not is_commit(getattr(info, "sha", None)):
        raise DatasetFormatError(f"{where}: the Hub gave no commit for it (got {getattr(info, 'sha', None)!r})")
    return info.sha


def missing_files(local_dir: str | os.PathLike, rels: Sequence[str], commit: str) -> list[str]:
    """The files of `rels` that `local_dir` lacks at `commit`: absent, or recorded by huggingface_hub as
    downloaded from another commit (a file without such a record counts as present). Only the local disk is
    looked at: no request."""
    local_dir = Path(local_dir)
    out = []
    for rel in rels:
        path = Path(inside(local_dir, rel, f"{local_dir}: file"))
        if not path.is_file():
            out.append(rel)
            continue
        recorded = local_commit(local_dir, rel)
        if recorded is not None and recorded != commit:
            out.append(rel)
    return out


def fetch_file(
    repo_id: str, local_dir: str | os.PathLike, commit: str, rel: str, policy: FetchPolicy | None = None
) -> int:
    """Download `rel` (a path inside the repo) of dataset `repo_id` at `commit` (a commit SHA, or a branch or tag
    name) into `local_dir` under the fetch policy; its size in bytes. (Callers run several in a pool.)"""
    import huggingface_hub

    policy = policy or FetchPolicy()
    local_dir = Path(local_dir)
    inside(local_dir, rel, f"{local_dir}: file of {repo_id!r}")
    where = f"hub dataset {repo_id!r} ({'commit' if is_commit(commit) else 'revision'} {commit}): {rel}"
    path = _hub_call(
        lambda: huggingface_hub.hf_hub_download(
            repo_id,
            filename=rel,
            repo_type="dataset",
            revision=commit,
            local_dir=str(local_dir),
            etag_timeout=policy.request_timeout_s or 3600.0,
        ),
        where,
        policy,
    )
    return os.path.getsize(path)
