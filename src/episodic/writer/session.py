"""A writing session on disk: what makes every episode durable once `add_episode` returns.

While a dataset is being written its directory holds, next to the final files already joined, a hidden
session directory:

    .episodic-writer/
        lock                 the writers' lock (writer/lock.py)
        session.json         the writer's settings (fps, features, codec, file sizes), written first
        episodes.jsonl       the journal: one line per complete episode (its meta/episodes row, its stats,
                             its segment sizes), appended and flushed last: the episode's commit point
        segments/data/chunk-CCC/file-FFF/episode-EEEEEEEEE.parquet
        segments/videos/<camera>/chunk-CCC/file-FFF/episode-EEEEEEEEE.mp4

An episode's segments (its rows; each camera's frames, encoded) are written under temporary names, renamed,
then its journal line is appended: an episode is complete exactly when its line is. Segments of a final file
are joined into it (temporary name, rename) when the file is full and at `finalize`, and deleted after that;
`finalize` writes the metadata (meta/info.json last) and removes the session directory, leaving exactly
LeRobot's v3.0 layout. After a kill at any point, reopening the session (resume or `episodic repair`) drops
the partial episode (segments without a journal line, a torn last line, temporary files) and keeps every
complete one.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from typing import Any

from ..format.errors import ExistingDirectoryError, WriterSessionError
from ..format.metadata import INFO_PATH
from ..storage.atomic import atomic_write_bytes, fsync_directory, temp_files
from .groups import Group
from .lock import DirectoryLock

log = logging.getLogger(__name__)

SESSION_DIR = ".episodic-writer"
SETTINGS = "session.json"
JOURNAL = "episodes.jsonl"
SEGMENTS = "segments"
LOCK = "lock"
SESSION_FORMAT = 1

# What a target directory holds, as far as opening a writer on it is concerned.
ABSENT, EMPTY, FILE, FOREIGN, DATASET, SESSION = "absent", "empty", "file", "foreign", "dataset", "session"


def session_dir(root: str) -> str:
    return os.path.join(root, SESSION_DIR)


def directory_state(root: str) -> str:
    """ABSENT, FILE (not a directory), SESSION (an interrupted or unfinished session), DATASET (a finished
    dataset: meta/info.json and no session), FOREIGN (other files), or EMPTY (nothing, or only a session
    directory that never got its settings: a writer killed while opening)."""
    if not os.path.lexists(root):
        return ABSENT
    if not os.path.isdir(root):
        return FILE
    if os.path.isfile(os.path.join(session_dir(root), SETTINGS)):
        return SESSION
    if os.path.isfile(os.path.join(root, INFO_PATH)):
        return DATASET
    if [e for e in os.listdir(root) if e != SESSION_DIR]:
        return FOREIGN
    return EMPTY


def read_settings(root: str) -> dict[str, Any]:
    """The settings of the session in `root`."""
    path = os.path.join(session_dir(root), SETTINGS)
    try:
        with open(path, "rb") as f:
            raw = json.loads(f.read())
    except FileNotFoundError:
        what = "a finished dataset" if directory_state(root) == DATASET else "no writing session"
        raise WriterSessionError(f"{root}: {what} to reopen ({SESSION_DIR}/{SETTINGS} not found)") from None
    except (OSError, ValueError) as e:
        raise WriterSessionError(f"{path}: unreadable session settings ({e})") from None
    if not isinstance(raw, dict) or raw.get("session_format") != SESSION_FORMAT:
        raise WriterSessionError(f"{path}: not a session settings file of format {SESSION_FORMAT}")
    return raw


def _refuse(root: str, state: str, overwrite: bool, resume: bool) -> None:
    if state == FILE:
        raise ExistingDirectoryError(f"{root}: exists and is not a directory")
    if state == FOREIGN:
        raise ExistingDirectoryError(
            f"{root}: not empty and not a LeRobot dataset (no {INFO_PATH}); the writer "
            f"neither writes into it nor deletes it, even with overwrite=True: choose a "
            f"new or empty directory"
        )
    if state == DATASET and not overwrite:
        if resume:
            raise ExistingDirectoryError(
                f"{root}: holds a finished dataset; resume=True continues an interrupted "
                f"session only (appending to a finished dataset is not supported)"
            )
        raise ExistingDirectoryError(f"{root}: holds a dataset (pass overwrite=True to replace it)")
    if state == SESSION and not (overwrite or resume):
        raise ExistingDirectoryError(
            f"{root}: holds an interrupted writing session: continue it with "
            f"DatasetWriter.reopen(root) (or DatasetWriter(..., resume=True)), finalize its "
            f"complete episodes with `episodic repair {root}`, or pass overwrite=True to "
            f"start over"
        )


class Session:
    """An open (locked) writing session in `root`. Use `Session.open`."""

    def __init__(self, root: str, lock: DirectoryLock, fsync: bool):
        self.root, self.lock, self.fsync = root, lock, fsync
        self.dir = session_dir(root)
        self.journal = os.path.join(self.dir, JOURNAL)
        self.segments = os.path.join(self.dir, SEGMENTS)
        self.resumed = False
        self._journal_size = 0

    # ------------------------------------------------------------------ opening
    @classmethod
    def open(cls, root: str, settings: dict[str, Any], overwrite: bool, resume: bool, fsync: bool) -> Session:
        """Lock `root` and start a session there (a new one, or the interrupted one when `resume` and its
        settings equal `settings`). Refuses, before changing anything, a directory it must not write into."""
        _refuse(root, directory_state(root), overwrite, resume)
        made_root = not os.path.lexists(root)
        sdir = session_dir(root)
        made_dir = not os.path.lexists(sdir)
        os.makedirs(sdir, exist_ok=True)
        lock = DirectoryLock.acquire(os.path.join(sdir, LOCK), root)
        if lock.previous:
            log.info("%s: took over the lock of a writer that no longer runs (%s)", root, lock.previous)
        session = cls(root, lock, fsync)
        try:
            state = directory_state(root)  # again, now that no other writer can change it
            _refuse(root, state, overwrite, resume)
            if state == SESSION and resume:
                session._resume(settings)
            else:
                if state in (SESSION, DATASET):
                    session.wipe()
                session._start(settings)
        except BaseException:
            lock.release(remove=made_dir)
            if made_dir:
                _rmdir(sdir)
            if made_root:
                _rmdir(root)
            raise
        return session

    def wipe(self) -> None:
        """Delete the dataset or session being replaced (overwrite=True): everything but the lock."""
        for name in os.listdir(self.root):
            if name != SESSION_DIR:
                _remove(os.path.join(self.root, name))
        self._clear()

    def _clear(self) -> None:
        for name in os.listdir(self.dir):
            if name != LOCK:
                _remove(os.path.join(self.dir, name))

    def _start(self, settings: dict[str, Any]) -> None:
        self._clear()
        with open(self.journal, "wb"):
            pass
        atomic_write_bytes(os.path.join(self.dir, SETTINGS), json.dumps(settings, indent=1).encode(), fsync=self.fsync)
        if self.fsync:
            fsync_directory(self.dir)
            fsync_directory(self.root)
            fsync_directory(os.path.dirname(self.root) or ".")

    def _resume(self, settings: dict[str, Any]) -> None:
        old = read_settings(self.root)
        diff = [k for k in sorted(set(old) | set(settings)) if old.get(k) != settings.get(k)]
        if diff:
            shown = "; ".join(f"{k}: session {old.get(k)!r}, now {settings.get(k)!r}" for k in diff)
            raise WriterSessionError(
                f"{self.root}: the interrupted session was written with other settings ({shown}); "
                f"reopen it with DatasetWriter.reopen(root) to use its own"
            )
        self.resumed = True

    # ------------------------------------------------------------------ journal
    def read_journal(self) -> tuple[list[dict[str, Any]], int]:
        """The complete episodes' records, and the number of bytes of a torn last line (dropped here: the
        journal is cut back to its complete lines)."""
        try:
            with open(self.journal, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            data = b""
        end = data.rfind(b"\n") + 1
        torn = len(data) - end
        records = []
        for n, line in enumerate(data[:end].splitlines(), 1):
            try:
                rec = json.loads(line)
            except ValueError as e:
                raise WriterSessionError(f"{self.journal}:{n}: not a valid episode record ({e})") from None
            if not isinstance(rec, dict) or not isinstance(rec.get("episode"), dict):
                raise WriterSessionError(f"{self.journal}:{n}: not an episode record")
            records.append(rec)
        if torn:
            with open(self.journal, "r+b") as f:
                f.truncate(end)
        self._journal_size = end
        return records, torn

    def append(self, record: dict[str, Any]) -> None:
        """Append one episode's record: the episode's commit point. A failed append (e.g. a full disk) leaves
        the journal as it was."""
        line = (json.dumps(record, separators=(",", ":")) + "\n").encode()
        fd = os.open(self.journal, os.O_WRONLY | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o666)
        try:
            if os.fstat(fd).st_size != self._journal_size:  # a failed append left a partial line
                os.ftruncate(fd, self._journal_size)
            done = 0
            try:
                while done < len(line):
                    done += os.pwrite(fd, line[done:], self._journal_size + done)
                if self.fsync:
                    os.fsync(fd)
            except BaseException:
                try:
                    os.ftruncate(fd, self._journal_size)
                except OSError as e:  # the next append cuts it; a reopen ignores a torn last line
                    log.warning("%s: could not cut back a failed append (%s)", self.journal, e)
                raise
            self._journal_size += len(line)
        finally:
            os.close(fd)

    # ------------------------------------------------------------------ segments
    def group_dir(self, group: Group) -> str:
        if group.camera is None:
            base = os.path.join(self.segments, "data")
        else:
            base = os.path.join(self.segments, "videos", group.camera)
        return os.path.join(base, f"chunk-{group.chunk:03d}", f"file-{group.file:03d}")

    def segment_path(self, group: Group, episode: int) -> str:
        ext = "parquet" if group.camera is None else "mp4"
        return os.path.join(self.group_dir(group), f"episode-{episode:09d}.{ext}")  # read by `segment_episode`

    def remove_group(self, group: Group) -> None:
        """Delete a group's segments (its final file is written)."""
        shutil.rmtree(self.group_dir(group), ignore_errors=True)

    def remove_orphans(self, keep: set[str]) -> list[str]:
        """Delete every file under segments/ not in `keep` (a partial episode's segments, or those of a file
        already joined); returns them."""
        removed = []
        for directory, _, files in os.walk(self.segments, topdown=False):
            for name in files:
                path = os.path.join(directory, name)
                if path not in keep:
                    os.unlink(path)
                    removed.append(path)
            if directory != self.segments and not os.listdir(directory):
                os.rmdir(directory)
        return sorted(removed)

    # ------------------------------------------------------------------ closing
    def finish(self) -> None:
        """The dataset is finalized: delete the session directory, then give the lock back."""
        for name in (SETTINGS, JOURNAL):  # the settings first: from then on this is a finished dataset
            try:
                os.unlink(os.path.join(self.dir, name))
            except FileNotFoundError:
                pass
        self._clear()
        self.lock.release(remove=True)
        _rmdir(self.dir)
        if self.fsync:
            fsync_directory(self.root)

    def release(self) -> None:
        """Give the lock back and keep everything (the session can be reopened or repaired)."""
        self.lock.release()


def remove_leftovers(root: str) -> list[str]:
    """A finished dataset whose session directory outlived `finalize` (a kill at its very end), or with
    temporary files: remove them under the lock; returns them (relative paths)."""
    sdir = session_dir(root)
    if not os.path.isdir(sdir) and not temp_files(root):
        return []
    os.makedirs(sdir, exist_ok=True)
    session = Session(root, DirectoryLock.acquire(os.path.join(sdir, LOCK), root), fsync=False)
    try:
        if directory_state(root) != DATASET:
            raise WriterSessionError(f"{root}: changed while being cleaned up")
        removed = [os.path.join(d, f) for d, _, files in os.walk(sdir) for f in files if f != LOCK]
        for path in temp_files(root):
            os.unlink(path)
            removed.append(path)
        session.finish()
    except BaseException:
        session.release()
        raise
    return sorted({os.path.relpath(p, root) for p in removed})


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    else:
        os.unlink(path)


def _rmdir(path: str) -> None:
    try:
        os.rmdir(path)
    except OSError:
        pass


def segment_episode(path: str) -> int:
    """The episode index in a segment file name (episode-000000012.mp4 -> 12); -1 for another name."""
    name = os.path.basename(path)
    try:
        return int(name.split(".")[0].split("-")[1]) if name.startswith("episode-") else -1
    except (IndexError, ValueError):
        return -1
