"""The streaming position: where a trainer is in a streaming epoch, as a small frozen value.

A streaming epoch is consumed in *segments*: a segment is a stretch of training under one topology
(world size, DataLoader workers, batch size). `batches_consumed` counts the batches every rank's loader
handed out in the open segment; `history` lists the closed segments of the same epoch, each
`(world_size, num_workers, batch_size, batches_consumed)`. Together with `(seed, epoch)` this determines
exactly which frames were consumed (`order.stream_plan.remaining_after`), so a resume on any topology
re-splits exactly the rest. Identical on every rank of a synchronous job; JSON-serialisable as the dict
`to_dict` gives (the format `StreamingLeRobotDataset.state_dict()` has always returned).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

__all__ = ["StreamState", "Segment"]

Segment = tuple[int, int, int]  # (world_size, num_workers, batch_size) of a stretch of training


def _int(state: Mapping, key: str, default: Any = ..., low: int | None = 0) -> int:
    value = state.get(key, default)
    if value is ...:
        raise ValueError(f"stream state: missing field {key!r}")
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"stream state: field {key!r} must be an int, got {value!r}")
    if low is not None and value < low:
        raise ValueError(f"stream state: field {key!r} must be >= {low}, got {value}")
    return value


@dataclass(frozen=True)
class StreamState:
    seed: int = 0
    epoch: int = 0
    batches_consumed: int = 0
    segment: Segment | None = None  # the open segment; None before the first loader of the epoch
    history: tuple[tuple[int, int, int, int], ...] = ()
    episode_pool_size: int | None = None  # the order depends on these: a resume must use the same
    shuffle: bool | None = None

    # ------------------------------------------------------------------ transitions
    def open_segment(self, world_size: int, num_workers: int, batch_size: int) -> StreamState:
        """The state a loader of this topology starts from: a different topology after consumed batches
        closes the open segment into `history`."""
        topo = (int(world_size), int(num_workers), int(batch_size))
        if self.segment is not None and self.batches_consumed > 0 and self.segment != topo:
            return replace(
                self, segment=topo, batches_consumed=0, history=(*self.history, (*self.segment, self.batches_consumed))
            )
        return replace(self, segment=topo)

    def direct(self, world_size: int, num_workers: int) -> tuple[tuple[tuple[int, int, int, int], ...], Segment, int]:
        """(history, segment, batches consumed) for an iteration that does not go through a loader (a
        dataset iterated as it is, or by a plain DataLoader): it continues the open segment when the
        topology matches, else closes it, and counts nothing."""
        seg, history, consumed = self.segment, self.history, self.batches_consumed
        if seg is not None and consumed > 0 and (seg[0], seg[1]) != (world_size, num_workers):
            history, consumed = (*history, (*seg, consumed)), 0
        if not consumed:
            seg = (world_size, num_workers, 1)
        assert seg is not None, "batches consumed outside a segment"
        return history, seg, consumed

    def advanced(self, batches: int = 1) -> StreamState:
        return replace(self, batches_consumed=self.batches_consumed + int(batches))

    def at_epoch(self, epoch: int) -> StreamState:
        """The start of epoch `epoch` (the open segment's topology is kept, nothing consumed)."""
        return replace(self, epoch=int(epoch), batches_consumed=0, history=())

    # ------------------------------------------------------------------ serialisation
    def to_dict(self, world_size: int = 1) -> dict:
        """{"seed", "epoch", "batches_consumed", "batch_size", "world_size", "num_workers", "history",
        "episode_pool_size", "shuffle"}; with no open segment, `world_size` (the current one) and 0s."""
        ws, nw, bs = self.segment if self.segment is not None else (int(world_size), 0, 0)
        return {
            "seed": self.seed,
            "epoch": self.epoch,
            "batches_consumed": self.batches_consumed,
            "batch_size": bs,
            "world_size": ws,
            "num_workers": nw,
            "history": [list(h) for h in self.history],
            "episode_pool_size": self.episode_pool_size,
            "shuffle": self.shuffle,
        }

    @classmethod
    def from_dict(cls, state: Mapping) -> StreamState:
        """Validates every field; the error names the field and what it must be."""
        if not isinstance(state, Mapping):
            raise ValueError(f"stream state must be a dict, got {type(state).__name__}")
        seed = _int(state, "seed", low=None)
        epoch = _int(state, "epoch")
        consumed = _int(state, "batches_consumed", 0)
        history = state.get("history", [])
        if not isinstance(history, (list, tuple)):
            raise ValueError(f"stream state: field 'history' must be a list, got {history!r}")
        hist: list[tuple[int, int, int, int]] = []
        for i, h in enumerate(history):
            if not isinstance(h, (list, tuple)) or len(h) != 4:
                raise ValueError(
                    f"stream state: history[{i}] must be [world_size, num_workers, batch_size, "
                    f"batches_consumed], got {h!r}"
                )
            names = ("world_size", "num_workers", "batch_size", "batches_consumed")
            lows = (1, 0, 1, 0)
            ws, nw, bs, k = (_int(dict(zip(names, h)), n, low=lo) for n, lo in zip(names, lows))
            hist.append((ws, nw, bs, k))
        segment = None
        if consumed:
            segment = (
                _int(state, "world_size", 1, low=1),
                _int(state, "num_workers", 0),
                _int(state, "batch_size", low=1),
            )
        pool = state.get("episode_pool_size")
        if pool is not None:
            pool = _int(state, "episode_pool_size", low=1)
        shuffle = state.get("shuffle")
        if shuffle is not None and not isinstance(shuffle, bool):
            raise ValueError(f"stream state: field 'shuffle' must be true or false, got {shuffle!r}")
        return cls(
            seed=seed,
            epoch=epoch,
            batches_consumed=consumed,
            segment=segment,
            history=tuple(hist),
            episode_pool_size=pool,
            shuffle=shuffle,
        )

    def check_compatible(self, episode_pool_size: int, shuffle: bool) -> None:
        """Raise ValueError when this state was saved under another pool size or shuffle setting."""
        for key, mine in (("episode_pool_size", episode_pool_size), ("shuffle", shuffle)):
            saved = getattr(self, key)
            if saved is not None and saved != mine:
                raise ValueError(
                    f"stream state was saved with {key}={saved!r}, this dataset has {mine!r}: the order would differ"
                )
