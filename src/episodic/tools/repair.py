"""`episodic repair PATH`: finalize an interrupted writing session up to its last complete episode."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from ..format.errors import WriterSessionError
from ..writer import DatasetWriter, Recovery
from ..writer.session import DATASET, SESSION, directory_state, remove_leftovers


@dataclass
class RepairReport:
    root: str
    repaired: bool  # True: a session was finalized; False: already a finished dataset, or nothing to keep
    recovery: Recovery | None = None
    cleaned: list[str] = field(default_factory=list)  # leftovers removed from a finished dataset

    def summary(self) -> str:
        if self.recovery is not None and not self.repaired:
            return (
                f"{self.root}: the interrupted session had no complete episode ({self.recovery.summary()}); "
                f"its files were removed, the directory is empty"
            )
        if self.repaired:
            assert self.recovery is not None, "a repair recovers a session"
            return f"repaired {self.root}: {self.recovery.summary()}; finalized as a LeRobot v3.0 dataset"
        if self.cleaned:
            return (
                f"{self.root}: already a finished dataset; removed {len(self.cleaned)} leftover file(s) of its "
                f"writing session"
            )
        return f"{self.root}: already a finished dataset, nothing to repair"


def repair(path: str | os.PathLike, fsync: bool = True) -> RepairReport:
    """Finalize the interrupted session in `path`: keep every complete episode, drop the partial one, write
    the metadata. A session without any complete episode is removed, not finalized: a dataset of no episode
    is not one LeRobot or episodic loads, and the writer's own `finalize` refuses one too. A finished dataset
    is left as it is (leftovers of its session removed). Raises `WriterSessionError` when `path` holds
    neither, `WriterLockedError` while a writer runs there; an I/O error (e.g. a full disk) leaves the
    session as it was, so repair can run again."""
    root = os.path.abspath(os.fspath(path))
    state = directory_state(root)
    if state == SESSION:
        writer = DatasetWriter.reopen(root, fsync=fsync)
        if writer.num_episodes == 0:
            writer.abort(discard=True)
            return RepairReport(root, repaired=False, recovery=writer.recovery)
        try:
            writer.finalize()
        except BaseException:
            writer.abort()
            raise
        return RepairReport(root, repaired=True, recovery=writer.recovery)
    if state == DATASET:
        return RepairReport(root, repaired=False, cleaned=remove_leftovers(root))
    raise WriterSessionError(
        f"{root}: neither a dataset nor an interrupted writing session ({state}); nothing to repair"
    )
