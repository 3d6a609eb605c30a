"""Paths built from dataset content, and the one check that keeps them inside the dataset and the cache.

Everything that turns dataset content into a path comes through here: the path templates of info.json
(`data_path`, `video_path`: `render`, with only the placeholders that template may use, never Python's
attribute or index look-ups), relative paths joined to a dataset root (`dataset_path`: a local root or a
URL prefix) or to a cache directory (`inside`), repo ids and revisions that name a download directory, and
file names made from untrusted text (`cache_name`).

The rules (`relative_problem`): a relative path is non-empty, not absolute (so no `//other-host/...`), has
no empty, `.` or `..` component, no backslash, control character, `%`, `?` or `#` (which a server or URL
parser could turn into another path), and no scheme or drive (`http:`, `C:`). On the local filesystem the
joined path must also resolve, symlinks included, inside the root's resolved path (for a Hugging Face cache
snapshot also inside the repository's `blobs/`, where the snapshot's own links point), and a dataset file that
exists must be a regular file (or a directory), never a FIFO, socket or device, whose open() would block. A
violation raises `UnsafePathError` naming the file and field the path came from, before anything is opened.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import stat
import string
from pathlib import Path

from fsspec.implementations.local import LocalFileSystem

from .errors import DatasetFormatError, UnsafePathError

# placeholders each template may use (v3.0 and the older per-episode layout)
DATA_FIELDS = ("chunk_index", "file_index")
VIDEO_FIELDS = ("video_key", "chunk_index", "file_index")
V21_DATA_FIELDS = ("episode_chunk", "episode_index")
V21_VIDEO_FIELDS = ("episode_chunk", "video_key", "episode_index")
_EXAMPLE = {"chunk_index": 0, "file_index": 0, "video_key": "camera", "episode_chunk": 0, "episode_index": 0}

_FORBIDDEN = re.compile(r"[\x00-\x1f\x7f\\%?#]")
_SCHEME = re.compile(r"^[^/]*:")  # 'http:', 'C:', 's3:' before the first '/'


def relative_problem(rel: object) -> str | None:
    """Why `rel` is not a safe relative path inside a dataset (None when it is)."""
    if not isinstance(rel, str) or not rel:
        return "is empty" if rel == "" else f"is not a string ({type(rel).__name__})"
    if rel.startswith("/"):
        return "is absolute (it would leave the dataset root, or name another host)"
    bad = _FORBIDDEN.search(rel)
    if bad:
        return f"contains the character {bad.group()!r}"
    if _SCHEME.match(rel):
        return "starts with a scheme or drive"
    if any(part in ("", ".", "..") for part in rel.split("/")):
        return "has an empty, '.' or '..' component"
    return None


def check_relative(rel: str, where: str) -> str:
    """`rel` when it is a safe relative path; else UnsafePathError naming `where` (file and field)."""
    problem = relative_problem(rel)
    if problem is not None:
        raise UnsafePathError(f"{where}: path {rel!r} {problem}; dataset paths must stay inside the dataset root")
    return rel


# ---------------------------------------------------------------------------------------------- templates
@functools.lru_cache(maxsize=256)
def _parse(template: str) -> tuple[tuple[str, str | None, str], ...]:
    """(literal, placeholder or None, format spec) pieces of a template; ValueError when it is malformed."""
    out = []
    for literal, name, spec, conversion in string.Formatter().parse(template):
        if name is not None:
            if not name.isidentifier():
                raise ValueError(f"placeholder {{{name}}} is not a plain name")
            if conversion is not None or "{" in (spec or ""):
                raise ValueError(f"placeholder {{{name}}} uses a conversion or a nested field")
        out.append((literal, name, spec or ""))
    return tuple(out)


def template_problems(template: str, allowed: tuple[str, ...]) -> list[tuple[str, type[DatasetFormatError]]]:
    """What is wrong with a path template on its own, as (text, error class): syntax and placeholders outside
    `allowed` (DatasetFormatError), literal parts that already leave the root, rendered with example values
    (UnsafePathError)."""
    try:
        pieces = _parse(template)
    except ValueError as e:
        return [(f"is not a valid path template ({e})", DatasetFormatError)]
    unknown = sorted({n for _, n, _ in pieces if n is not None and n not in allowed})
    if unknown:
        return [
            (
                f"uses unknown placeholder(s) {', '.join('{' + n + '}' for n in unknown)} "
                f"(known: {', '.join('{' + n + '}' for n in allowed)})",
                DatasetFormatError,
            )
        ]
    try:
        rel = _render(pieces, {n: _EXAMPLE[n] for n in allowed})
    except (ValueError, TypeError) as e:
        return [(f"cannot be formatted ({e})", DatasetFormatError)]
    problem = relative_problem(rel)
    return [(f"gives paths like {rel!r}, which {problem}", UnsafePathError)] if problem else []


def _render(pieces, values: dict) -> str:
    out = []
    for literal, name, spec in pieces:
        out.append(literal)
        if name is not None:
            out.append(format(values[name], spec))
    return "".join(out)


def render(template: str, where: str, **values) -> str:
    """The relative path `template` gives for `values` (its placeholders must be among them), checked with
    `check_relative`. Errors are DatasetFormatErrors (UnsafePathError for an unsafe result) that name
    `where` (e.g. '<root>/meta/info.json: field 'video_path'') and the values."""
    described = ", ".join(f"{k}={v!r}" for k, v in values.items())
    try:
        pieces = _parse(template)
    except ValueError as e:
        raise DatasetFormatError(f"{where}: {template!r} is not a valid path template ({e})") from None
    for _, name, _ in pieces:
        if name is not None and name not in values:
            raise DatasetFormatError(
                f"{where}: {template!r} has unknown placeholder {{{name}}} (this path is made from {', '.join(values)})"
            )
    try:
        rel = _render(pieces, values)
    except (ValueError, TypeError) as e:
        raise DatasetFormatError(f"{where}: {template!r} cannot be formatted with {described} ({e})") from None
    return check_relative(rel, f"{where} ({described})")


# ---------------------------------------------------------------------------------------------- joining
def is_local_fs(fs) -> bool:
    return isinstance(fs, LocalFileSystem)


def _bases(root: str, hub_blobs: bool) -> list[str]:
    """The resolved directories a file of `root` may resolve into: `root` resolved, and for a Hugging Face cache
    snapshot (`hub_blobs`) its repository's `blobs/`. Kept for a root that exists (it is resolved once, not for
    every file: ~20 us each)."""
    got = _BASES.get((root, hub_blobs))
    if got is not None:
        return got
    real = os.path.realpath(root)
    bases = [real]
    if hub_blobs:  # a Hugging Face cache snapshot: <repo>/snapshots/<revision>/..., files link into <repo>/blobs
        p = Path(real)
        for anc in [p, *p.parents][:8]:
            if anc.parent.name == "snapshots":
                bases.append(str(anc.parent.parent / "blobs"))
                break
    if os.path.isdir(real):  # (a directory made later, or as a link, is resolved again until it exists)
        if len(_BASES) >= 4096:
            _BASES.clear()
        _BASES[(root, hub_blobs)] = bases
    return bases


_BASES: dict[tuple[str, bool], list[str]] = {}  # (root, hub_blobs) -> `_bases` of a root that exists


def _special_kind(mode: int) -> str:
    kinds = (
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    )
    return next((name for test, name in kinds if test(mode)), "a special file")


def _within(path: str, base: str) -> bool:
    base = base.rstrip(os.sep)
    return path == base or path.startswith(base + os.sep)


def inside(directory: str | os.PathLike, rel: str, where: str | None = None, hub_blobs: bool = False) -> str:
    """`directory/rel` on the local filesystem, after checking that `rel` is a safe relative path and that
    the joined path, symlinks resolved, stays inside `directory` (resolved). For cache and mirror files
    and local dataset files alike; `hub_blobs` also admits a Hugging Face snapshot's `blobs/`. Errors name
    `where` (what the path is for) when given."""
    directory = os.fspath(directory)
    check_relative(rel, where or directory)
    path = os.path.join(directory, rel)
    bases = _bases(directory, hub_blobs)
    real = _below(bases[0], rel)
    if real is None:  # a symbolic link below the directory: where it leads, resolved in full
        real = os.path.realpath(path)
    if not any(_within(real, b) for b in bases):
        raise UnsafePathError(
            f"{where + ': ' if where else ''}{path} resolves to {real}, outside {bases[0]} (a "
            f"symbolic link?); dataset and cache files must stay inside their directory"
        )
    return path


def _below(real_dir: str, rel: str) -> str | None:
    """`real_dir/rel` (`real_dir` resolved, `rel` safe: no `.` or `..` components) when none of its components
    below `real_dir` is a symbolic link; None when one is. Each existing component is looked at (lstat) once,
    from `real_dir` down, rather than every component of the whole path (`os.path.realpath`); from the first
    one that does not exist, the rest is taken as it is, as realpath does."""
    path = real_dir
    for part in rel.split("/"):
        path = os.path.join(path, part)
        try:
            if stat.S_ISLNK(os.lstat(path).st_mode):
                return None
        except OSError:
            return os.path.join(real_dir, rel)
    return path


def dataset_path(fs, root: str, rel: str, where: str | None = None) -> str:
    """`root/rel` on `fs`, checked: a safe relative path, inside the root's resolved path on the local
    filesystem (symlinks included), under the root URL's prefix on a remote one. A local path that exists must
    be a regular file or a directory: opening a FIFO, a socket or a device would block or never end."""
    if is_local_fs(fs):
        path = inside(root, rel, where, hub_blobs=True)
        try:
            mode = os.stat(path).st_mode  # never blocks, unlike open()
        except OSError:
            return path  # missing (or unreadable): opening it says so
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            raise UnsafePathError(
                f"{where + ': ' if where else ''}{path} is {_special_kind(mode)}, not a regular "
                f"file; dataset files must be regular files"
            )
        return path
    check_relative(rel, where or root)
    return f"{root.rstrip('/')}/{rel}"


# ---------------------------------------------------------------------------------------------- names
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9._-]")


def cache_name(text: str, limit: int = 64) -> str:
    """A file name made from untrusted text: letters, digits, '.', '_' and '-' only (others become '_'), no
    leading dot, at most `limit` characters. Not unique on its own: callers prefix a digest."""
    name = _UNSAFE_NAME.sub("_", str(text)).lstrip(".")[:limit]
    return name or "_"


_REPO_PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def check_repo_id(repo_id: str) -> str:
    """A Hub repo id ('name' or 'owner/name': letters, digits, '.', '_', '-'; no '..'), which names a
    download directory; else UnsafePathError."""
    parts = repo_id.split("/") if isinstance(repo_id, str) else []
    if not 1 <= len(parts) <= 2 or not all(_REPO_PART.fullmatch(p) and ".." not in p for p in parts):
        raise UnsafePathError(
            f"repo id {repo_id!r} is not a Hub repo id ('owner/name' of letters, digits, '.', "
            f"'_' and '-'), nor an existing local directory"
        )
    return repo_id


def check_revision(revision: str) -> str:
    """A Hub revision (branch, tag, commit, 'refs/pr/N'), which names a download directory."""
    return check_relative(revision, "revision")


_PLAIN_REVISION = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,95}")


def revision_dirname(revision: str) -> str:
    """One directory name per Hub revision (branch, tag, commit SHA, 'refs/pr/N'): a plain name (letters, digits,
    '.', '_', '-'; a 40-hex commit SHA is one) as it is, any other its safe form + '+' + a digest ('+' never
    appears in a plain name, so two revisions never share a name). The revision is checked first
    (`check_revision`)."""
    check_revision(revision)
    if _PLAIN_REVISION.fullmatch(revision):
        return revision
    return f"{cache_name(revision, 48)}+{hashlib.sha256(revision.encode()).hexdigest()[:16]}"


_ANY_BAD = re.compile(r"[\x00-\x09\x0b-\x1f\x7f\\%?#]|(?:^|\n)/|(?:^|/|\n)\.{0,2}(?:/|\n|$)|(?:^|\n)[^/\n]*:")


def render_many(template: str, where: str, **columns) -> list[str]:
    """`render` for many value tuples at once (`columns`: name -> equal-length sequences), the results
    checked together in one pass (the first unsafe one is then reported as `render` would)."""
    names = list(columns)
    try:
        pieces = _parse(template)
        rels = [_render(pieces, dict(zip(names, vals))) for vals in zip(*columns.values())]
    except (ValueError, TypeError, KeyError):
        rels = None
    if rels is None or _ANY_BAD.search("\n".join(rels)) or any("\n" in r for r in rels):
        rows = zip(*columns.values())
        return [render(template, where, **dict(zip(names, vals))) for vals in rows]  # raises at the first bad one
    return rels
