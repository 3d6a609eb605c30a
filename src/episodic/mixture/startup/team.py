"""The processes of a mixture's start-up, which of them downloads for which, and the few collectives they run,
each with a time limit.

- `Team.open(group, timeout_s)`: without torch.distributed initialised, or with a group of one process, a team of
  one whose collectives return at once (torch is never imported here). Otherwise a gloo group over the ranks of
  `group` (default: the world), made for the start-up whatever the backend of `group` (NCCL's collectives have no
  time limit unless its async error handling is on; gloo's have `timeout_s`), closed by `close()`. Only the ranks
  of `group` take part (the others of the world need not call anything).
- Any number of start-ups per job: each group meets in the default group's store (`runtime.default_store`) under
  a prefix of its own, ``episodic/mixture-startup/<digest of the ranks>/<n>/``, `n` counting this process's
  start-ups over those ranks (the same on every rank, as every rank of `group` calls `prepare` as often). Each
  rank first marks its arrival there and waits at most `timeout_s` for the others' marks; only then is the gloo
  group formed (its addresses under the same prefix: never a former start-up's). (torch's `new_group` with
  ``use_local_synchronization=True`` names a group after its ranks alone, so a second group on the same ranks
  read the first one's addresses: "Connection refused" on one rank, a wait far past `timeout_s` on another.)
- A collective that fails raises `MixtureStartupError` naming the step, on that rank: a rank that died (gloo
  sees its connections close) or did not arrive within `timeout_s`. The other ranks fail the same way at their
  next collective, so no rank waits for ever.
- What travels is JSON (`gather`: tuples arrive as lists), never a pickle: a rank decodes nothing that runs code.
- `leaders`: which rank downloads for each rank: per node (host name + torchrun's node rank,
  `config.node_name`) the one rank that claims it (LOCAL_RANK 0), else the node's lowest rank; with a shared
  cache, rank 0 of the team for everyone. Pure.
"""

from __future__ import annotations

import hashlib
import json
import logging
import sys
import threading
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from ... import config, runtime
from ...format.errors import MixtureStartupError

__all__ = ["Team", "claims_download", "leaders"]

logger = logging.getLogger(__name__)

_PREFIX = "episodic/mixture-startup"
_started: dict[tuple[int, ...], int] = {}  # start-ups of this process per team of ranks: each one's own prefix
_started_lock = threading.Lock()


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
            logger.warning(
                "node %s: ranks %s all claim the download (LOCAL_RANK 0); rank %d downloads", node, claimants, leader
            )
        for r in ranks:
            out[r] = leader
    return out


class Team:
    """The ranks of a start-up: `rank` and `size` within it, and its collectives (see the module docstring)."""

    def __init__(self, dist: Any = None, group: Any = None, rank: int = 0, size: int = 1, timeout_s: float = 0.0):
        self._dist, self._group = dist, group
        self.rank, self.size, self.timeout_s = rank, size, timeout_s

    @classmethod
    def open(cls, group: Any = None, timeout_s: float = 600.0) -> Team:
        dist = _dist()
        if dist is None:
            if group is not None:
                raise ValueError("a process group was given, but torch.distributed is not initialised")
            return cls()
        ranks = list(dist.get_process_group_ranks(group)) if group is not None else list(range(dist.get_world_size()))
        if len(ranks) == 1:
            return cls()
        me, rank = dist.get_rank(), ranks.index(dist.get_rank())
        with _started_lock:
            n = _started[tuple(ranks)] = _started.get(tuple(ranks), -1) + 1
        digest = hashlib.sha256(",".join(map(str, ranks)).encode()).hexdigest()[:16]
        prefix = f"{_PREFIX}/{digest}/{n}/"
        timeout = timedelta(seconds=timeout_s)
        step = "arrival"
        try:
            store = dist.PrefixStore(prefix, runtime.default_store())
            store.set(f"arrived/{rank}", "1")
            try:
                store.wait([f"arrived/{r}" for r in range(len(ranks))], timeout)
            except Exception:
                store.delete_key(f"arrived/{rank}")  # a rank that comes later waits for this one, and times out too
                raise
            step = "gloo"
            pg = dist.ProcessGroupGloo(dist.PrefixStore("gloo/", store), rank, len(ranks), timeout)
        except Exception as e:  # noqa: BLE001 -- a rank that never came, or a broken store
            why = "the other ranks did not all arrive" if step == "arrival" else "the gloo group could not connect"
            raise MixtureStartupError(
                f"mixture start-up: rank {me} could not form the start-up group of ranks "
                f"{_ranks_text(ranks)} within {timeout_s:g} s: {why} ({type(e).__name__}: "
                f"{e})",
                rank=me,
            ) from e
        logger.debug("mixture start-up %d of ranks %s: group formed under %s", n, _ranks_text(ranks), prefix)
        return cls(dist, pg, rank, len(ranks), timeout_s)

    def _failed(self, step: str, e: BaseException) -> MixtureStartupError:
        return MixtureStartupError(
            f"mixture start-up: rank {self.rank} of {self.size}: the collective '{step}' failed: a rank died or did "
            f"not arrive within {self.timeout_s:g} s ({type(e).__name__}: {e})",
            rank=self.rank,
        )

    def gather(self, obj: Any, step: str) -> list[Any]:
        """`obj` of every rank, in rank order: JSON values (tuples arrive as lists, also in a team of one)."""
        data = json.dumps(obj, separators=(",", ":")).encode()
        if self._dist is None:
            return [json.loads(data)]
        import torch

        try:
            sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(self.size)]
            self._group.allgather([sizes], [torch.tensor([len(data)], dtype=torch.int64)]).wait()
            longest = max(int(t.item()) for t in sizes)
            mine = torch.zeros(longest, dtype=torch.uint8)
            mine[: len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
            out = [torch.empty(longest, dtype=torch.uint8) for _ in range(self.size)]
            self._group.allgather([out], [mine]).wait()
        except Exception as e:  # noqa: BLE001
            raise self._failed(step, e) from e
        try:
            return [json.loads(t[: int(n.item())].numpy().tobytes()) for t, n in zip(out, sizes)]
        except ValueError as e:  # not what a rank of this start-up sends
            raise MixtureStartupError(
                f"mixture start-up: rank {self.rank} of {self.size}: the collective '{step}' "
                f"brought something that is not JSON ({e})",
                rank=self.rank,
            ) from e

    def any(self, flag: bool, step: str) -> bool:
        """True when `flag` is true on some rank."""
        if self._dist is None:
            return bool(flag)
        import torch

        t = torch.tensor([1 if flag else 0], dtype=torch.int32)
        options = self._dist.AllreduceOptions()
        options.reduceOp = self._dist.ReduceOp.MAX
        try:
            self._group.allreduce([t], options).wait()
        except Exception as e:  # noqa: BLE001
            raise self._failed(step, e) from e
        return bool(t.item())

    def close(self) -> None:
        if self._dist is not None and self._group is not None:
            group, self._group = self._group, None
            try:
                group.shutdown()
            except Exception as e:  # noqa: BLE001 -- a group broken by a dead rank: nothing more to free
                logger.debug("shutting the start-up group down: %s", e)


def _ranks_text(ranks: list[int]) -> str:
    return f"{ranks[0]}..{ranks[-1]}" if ranks == list(range(ranks[0], ranks[-1] + 1)) else str(ranks)
