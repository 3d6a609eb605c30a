"""The lock that keeps two writers (or a writer and `repair`) out of one dataset directory.

An exclusive `flock` on a lock file: held by one open file in one live process, released by the kernel
when that process ends in any way (SIGKILL included), so a lock left by a dead writer never blocks anyone:
the next writer, resume or repair takes it over. The file holds the holder's pid, host and start time, for
the error message of whoever finds it taken. Local file systems (and NFS with working locks) only.
"""

from __future__ import annotations

import fcntl
import os
import socket
import time

from ..format.errors import WriterLockedError


class DirectoryLock:
    """A held lock on `path` (see the module docstring); `release()` gives it back."""

    def __init__(self, path: str, fd: int, previous: str):
        self.path = path
        self._fd: int | None = fd
        self.previous = previous  # a holder that died without releasing it (its pid, host, time), or ''

    @classmethod
    def acquire(cls, path: str, what: str) -> DirectoryLock:
        """Take the lock or raise `WriterLockedError` naming the holder; `what` is the directory it guards."""
        while True:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o666)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read(fd) or "another process"
                os.close(fd)
                raise WriterLockedError(
                    f"{what}: another writer is using this directory ({holder}); wait for it to finish or stop it"
                ) from None
            except BaseException:
                os.close(fd)
                raise
            # The previous holder may have removed the file between our open and our flock (a finished
            # session removes its lock file): then we hold a lock on a file nobody else will open. Retry.
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(path))
            except FileNotFoundError:
                same = False
            if not same:
                os.close(fd)
                continue
            previous = _read(fd)
            me = f"pid {os.getpid()} on {socket.gethostname()} since {time.strftime('%Y-%m-%d %H:%M:%S')}"
            os.ftruncate(fd, 0)
            os.pwrite(fd, me.encode(), 0)
            return cls(path, fd, previous)

    def __del__(self) -> None:  # a writer dropped without finalize/abort does not keep its directory locked
        try:
            self.release()
        except Exception:  # noqa: BLE001  never raise from a finalizer
            pass

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self, remove: bool = False) -> None:
        """Give the lock back; `remove` deletes the lock file first (while still holding it)."""
        if self._fd is None:
            return
        try:
            if remove:
                try:
                    os.unlink(self.path)
                except FileNotFoundError:
                    pass
            else:
                os.ftruncate(self._fd, 0)  # a lock released in order names no holder: only a dead one's stays
        except OSError:
            pass
        finally:
            os.close(self._fd)  # closing the only descriptor releases the flock
            self._fd = None


def _read(fd: int) -> str:
    try:
        return os.pread(fd, 200, 0).decode("utf-8", "replace").strip()
    except OSError:
        return ""
