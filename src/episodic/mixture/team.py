"""The processes of a mixture's start-up, which of them downloads for which, and the few collectives they run,
each with a time limit.

- `Team.open(group, timeout_s)`: without torch.distributed initialised, or with a group of one process, a team of
  one whose collectives return at once (torch is never imported here). Otherwise a gloo group over the ranks of
  `group` (default: the world), made for the start-up whatever the backend of `group` (NCCL's collectives have no
  time limit unless its async error handling is on; gloo's have `timeout_s`), closed by `close()`.
- A collective that fails raises `MixtureStartupError` naming the step, on that rank: a rank that died (gloo
  sees its connections close) or did not arrive within `timeout_s`. The other ranks fail the same way at their
  next collective, so no rank waits for ever.
- `leaders`: which rank downloads for each rank: per node (host name + torchrun's node rank,
  `config.node_name`) the one rank that claims it (LOCAL_RANK 0), else the node's lowest rank; with a shared
  cache, rank 0 of the team for everyone. Pure.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from .. import config
from ..format.errors import MixtureStartupError

__all__ = ["Team", "claims_download", "leaders"]

logger = logging.getLogger(__name__)


def _dist() -> Any:
    """torch.distributed when it is initialised in this process (never imported here: a process that did not
    import it has no process group)."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    return dist


def claims_download(group: Any = None, shared_cache: bool = False) -> bool | None:
    """Whether this process downloads, as far as it can tell alone: True without a process group; with a shared
    cache, rank 0 of `group`; else LOCAL_RANK == 0 when the launcher set it; None when it cannot tell (the team
    decides by host name, `leaders`)."""
    dist = _dist()
    if dist is None:
        return True
    if shared_cache:
        return dist.get_rank(group) == 0 if group is not None else dist.get_rank() == 0
    local = config.local_rank()
    return None if local is None else local == 0


def leaders(nodes: Sequence[tuple[str, bool | None]], shared_cache: bool = False) -> list[int]:
    """For each rank (`nodes[rank]` = (its node name, its claim)), the rank that downloads for it."""
    if shared_cache:
        return [0] * len(nodes)
    members: dict[str, list[int]] = {}
    for rank, (node, _) in enumerate(nodes):
        members.setdefault(node, []).append(rank)
    out = [0] * len(nodes)
    for node, ranks in members.items():
        claimants = [r for r in ranks if nodes[r][1]]
        leader = claimants[0] if len(claimants) == 1 else min(ranks)
        if len(claimants) > 1:
            logger.warning("node %s: ranks %s all claim the download (LOCAL_RANK 0); rank %d downloads", node,
                           claimants, leader)
        for r in ranks:
            out[r] = leader
    return out


class Team:
    """The ranks of a start-up: `rank` and `size` within it, and its collectives (see the module docstring)."""

    def __init__(self, dist: Any = None, group: Any = None, rank: int = 0, size: int = 1, timeout_s: float = 0.0):
        self._dist, self._group = dist, group
        self.rank, self.size, self.timeout_s = rank, size, timeout_s

    @classmethod
    def open(cls, group: Any = None, timeout_s: float = 600.0) -> "Team":
        dist = _dist()
        if dist is None:
            if group is not None:
                raise ValueError("a process group was given, but torch.distributed is not initialised")
            return cls()
        ranks = list(dist.get_process_group_ranks(group)) if group is not None else list(range(dist.get_world_size()))
        if len(ranks) == 1:
            return cls()
        try:
            pg = dist.new_group(ranks=ranks, timeout=timedelta(seconds=timeout_s), backend="gloo",
                                use_local_synchronization=True)
        except Exception as e:  # noqa: BLE001 -- a rank that never came, or a broken store
            raise MixtureStartupError(f"mixture start-up: rank {dist.get_rank()} could not form the start-up group "
                                      f"of ranks {_ranks_text(ranks)} within {timeout_s:g} s ({type(e).__name__}: "
                                      f"{e})", rank=dist.get_rank()) from e
        return cls(dist, pg, dist.get_rank(pg), len(ranks), timeout_s)

    def _failed(self, step: str, e: BaseException) -> MixtureStartupError:
        return MixtureStartupError(
            f"mixture start-up: rank {self.rank} of {self.size}: the collective '{step}' failed: a rank died or did "
            f"not arrive within {self.timeout_s:g} s ({type(e).__name__}: {e})", rank=self.rank)

    def gather(self, obj: Any, step: str) -> list[Any]:
        """`obj` of every rank, in rank order (picklable objects)."""
        if self._dist is None:
            return [obj]
        out: list[Any] = [None] * self.size
        try:
            self._dist.all_gather_object(out, obj, group=self._group)
        except Exception as e:  # noqa: BLE001
            raise self._failed(step, e) from e
        return out

    def any(self, flag: bool, step: str) -> bool:
        """True when `flag` is true on some rank."""
        if self._dist is None:
            return bool(flag)
        import torch

        t = torch.tensor([1 if flag else 0], dtype=torch.int32)
        try:
            self._dist.all_reduce(t, op=self._dist.ReduceOp.MAX, group=self._group)
        except Exception as e:  # noqa: BLE001
            raise self._failed(step, e) from e
        return bool(t.item())

    def close(self) -> None:
        if self._dist is not None and self._group is not None:
            group, self._group = self._group, None
            try:
                self._dist.destroy_process_group(group)
            except Exception as e:  # noqa: BLE001 -- a group broken by a dead rank: nothing more to free
                logger.debug("destroying the start-up group: %s", e)


def _ranks_text(ranks: list[int]) -> str:
    return f"{ranks[0]}..{ranks[-1]}" if ranks == list(range(ranks[0], ranks[-1] + 1)) else str(ranks)
