"""Where a mixture's sequence stands, and what resuming means after the mixture itself changed.

A mixture's order is one endless sequence (`order.mixture_quota`): global position ``m`` names an entry and
that entry's *draw* (how many times the entry came up before); the draw picks the entry's frame by its own
keyed permutation (a new permutation each time the entry's frames are used up). `MixtureState` is what ties
epochs and positions to that sequence: the epoch it is counted from (``epoch``), the epoch length
(``samples_per_epoch``: position ``p`` of epoch ``t`` is ``m = (t - epoch) * samples_per_epoch + p``) and, per
entry (by name), its units, its number of frames, a draw offset ``base`` (entry ``e``'s draw at ``m`` is
``base[e]`` plus the number of times it came up before ``m``) and its own weight (the raw weight before
normalising: its size under the weighting rule times its ``weight``; what tells which entries were
re-weighted, since changing one entry's weight changes every entry's units). It travels in the order state
under ``"mixture"``; JSON, validated, O(entries).

Resuming after the spec changed (`continued`; the resume point is epoch ``t``, ``consumed`` positions into it):
- the new weights (and epoch length) apply from the resume point on; the new sequence is counted from the
  start of epoch ``t`` (its positions before ``consumed`` are only read again as end-of-epoch padding), so the
  quota bound holds again from the resume point, for differences of prefixes: within ``2 * QUOTA_BOUND``;
- an entry kept with the same number of frames (re-weighted or not) continues its draws where they stopped:
  its current pass over its frames goes on with no frame repeated before all were drawn;
- an added entry, or one whose number of frames changed, starts a new pass at draw 0 from the resume point;
- a retired entry is dropped; so are entries listed in `skipped` (left out by preflight, recorded here);
- with ``consumed`` at or past the new epoch length the epoch is over (the batch sampler moves on).
Nothing else is kept: no history, so a state stays O(entries) whatever happened before.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from episodic.order.mixture_quota import QuotaTree

__all__ = ["MixtureState", "SpecChangeError"]


class SpecChangeError(ValueError):
    """A saved mixture state does not match the mixture being resumed and the caller refused a continuation."""


def _int(raw: Mapping, key: str, low: int = 0) -> int:
    value = raw.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"mixture state: field {key!r} must be an int >= {low}, got {value!r}")
    return value


@dataclass(frozen=True)
class MixtureState:
    epoch: int
    samples_per_epoch: int
    names: tuple[str, ...]
    units: tuple[int, ...]
    frames: tuple[int, ...]
    base: tuple[int, ...]
    skipped: tuple[str, ...] = ()
    weights: tuple[float, ...] = ()  # each entry's own weight; () in states saved before it was recorded

    def __post_init__(self):
        n = len(self.names)
        if not n or any(len(x) != n for x in (self.units, self.frames, self.base)):
            raise ValueError(
                f"mixture state: names, units, frames and base must have one value per entry, got "
                f"{n}, {len(self.units)}, {len(self.frames)}, {len(self.base)}"
            )
        if len(set(self.names)) != n:
            raise ValueError("mixture state: entry names must be unique")
        if self.weights and len(self.weights) != n:
            raise ValueError(f"mixture state: weights must have one value per entry, got {len(self.weights)} for {n}")
        if self.samples_per_epoch < 1:
            raise ValueError(f"mixture state: samples_per_epoch must be >= 1, got {self.samples_per_epoch}")

    @classmethod
    def fresh(
        cls,
        names: Sequence[str],
        units: Sequence[int],
        frames: Sequence[int],
        samples_per_epoch: int,
        skipped: Sequence[str] = (),
        weights: Sequence[float] = (),
    ) -> MixtureState:
        """The state of a mixture that starts at epoch 0, every entry at draw 0."""
        return cls(
            epoch=0,
            samples_per_epoch=int(samples_per_epoch),
            names=tuple(names),
            units=tuple(int(u) for u in units),
            frames=tuple(int(f) for f in frames),
            base=(0,) * len(names),
            skipped=tuple(skipped),
            weights=tuple(float(w) for w in weights),
        )

    def position(self, epoch: int, positions) -> np.ndarray:
        """Global sequence positions of `positions` of epoch `epoch` (int64 array)."""
        if epoch < self.epoch:
            raise ValueError(f"epoch {epoch} lies before the epoch {self.epoch} this mixture state counts from")
        return (epoch - self.epoch) * self.samples_per_epoch + np.asarray(positions, dtype=np.int64)

    # ------------------------------------------------------------------ spec changes
    def same_spec(self, other: MixtureState) -> bool:
        return (self.names, self.units, self.frames, self.samples_per_epoch, self.skipped) == (
            other.names,
            other.units,
            other.frames,
            other.samples_per_epoch,
            other.skipped,
        )

    def changes(self, new: MixtureState) -> list[str]:
        """What differs between this (saved) state's mixture and `new`'s, in words; empty when nothing. Re-weighted:
        the kept entries whose own weight changed (with both states' weights recorded; else whose units changed,
        which changing one entry's weight does to all)."""
        old = dict(zip(self.names, zip(self.units, self.frames)))
        cur = dict(zip(new.names, zip(new.units, new.frames)))
        out = []
        added = [n for n in new.names if n not in old]
        retired = [n for n in self.names if n not in cur]
        if self.weights and new.weights:
            was, now = dict(zip(self.names, self.weights)), dict(zip(new.names, new.weights))
            reweighted = [n for n in new.names if n in old and not math.isclose(was[n], now[n], rel_tol=1e-9)]
        else:
            reweighted = [n for n in new.names if n in old and old[n][0] != cur[n][0]]
        resized = [n for n in new.names if n in old and old[n][1] != cur[n][1]]
        for what, names in (
            ("added", added),
            ("retired", retired),
            ("re-weighted", reweighted),
            ("with another number of frames", resized),
        ):
            if names:
                out.append(f"{len(names)} entr{'y' if len(names) == 1 else 'ies'} {what}: {_short(names)}")
        if self.samples_per_epoch != new.samples_per_epoch:
            out.append(f"samples per epoch {self.samples_per_epoch} -> {new.samples_per_epoch}")
        if [n for n in self.names if n in cur] != [n for n in new.names if n in old]:
            out.append("entries listed in another order")
        if self.skipped != new.skipped:
            out.append(f"skipped entries {_short(self.skipped)} -> {_short(new.skipped)}")
        return out

    def continued(self, new: MixtureState, seed: int | None, epoch: int, consumed: int) -> MixtureState:
        """The state that resumes this one's run at (`epoch`, `consumed`) with `new`'s mixture (see the module
        docstring); `seed` is the quota tree's seed (it shapes the sequence whose counts are carried over)."""
        if self.same_spec(new):
            return replace(self, weights=new.weights)
        m = int(self.position(epoch, [consumed])[0])
        drawn = np.asarray(self.base, dtype=np.int64) + QuotaTree.build(self.units, seed).counts(m)
        old = {n: (f, int(d)) for n, f, d in zip(self.names, self.frames, drawn)}
        ahead = QuotaTree.build(new.units, seed).counts(int(consumed))
        base = []
        for name, frames, c in zip(new.names, new.frames, ahead.tolist()):
            prev = old.get(name)
            start = prev[1] if prev is not None and prev[0] == frames else 0
            base.append(start - c)
        return MixtureState(
            epoch=int(epoch),
            samples_per_epoch=new.samples_per_epoch,
            names=new.names,
            units=new.units,
            frames=new.frames,
            base=tuple(base),
            skipped=new.skipped,
            weights=new.weights,
        )

    # ------------------------------------------------------------------ serialisation
    def to_dict(self) -> dict:
        out = {
            "epoch": self.epoch,
            "samples_per_epoch": self.samples_per_epoch,
            "entries": [[n, u, f, b] for n, u, f, b in zip(self.names, self.units, self.frames, self.base)],
            "skipped": list(self.skipped),
        }
        if self.weights:
            out["weights"] = list(self.weights)
        return out

    @classmethod
    def from_dict(cls, raw: Mapping) -> MixtureState:
        """Validates every field; the error names the field and what it must be."""
        if not isinstance(raw, Mapping):
            raise ValueError(f"mixture state must be a dict, got {type(raw).__name__}")
        epoch = _int(raw, "epoch")
        n = _int(raw, "samples_per_epoch", 1)
        entries = raw.get("entries")
        if not isinstance(entries, (list, tuple)) or not entries:
            raise ValueError(f"mixture state: field 'entries' must be a non-empty list, got {entries!r}")
        cols: list[list] = [[], [], [], []]
        for i, e in enumerate(entries):
            ok = (
                isinstance(e, (list, tuple))
                and len(e) == 4
                and isinstance(e[0], str)
                and all(isinstance(v, int) and not isinstance(v, bool) for v in e[1:])
                and e[1] >= 0
                and e[2] >= 0
            )
            if not ok:
                raise ValueError(
                    f"mixture state: entries[{i}] must be [name, units >= 0, frames >= 0, base], got {e!r}"
                )
            for col, v in zip(cols, e):
                col.append(v)
        skipped = raw.get("skipped", [])
        if not isinstance(skipped, (list, tuple)) or not all(isinstance(s, str) for s in skipped):
            raise ValueError(f"mixture state: field 'skipped' must be a list of entry names, got {skipped!r}")
        weights = raw.get("weights", [])
        if not isinstance(weights, (list, tuple)) or not all(
            isinstance(w, (int, float)) and not isinstance(w, bool) and math.isfinite(w) and w >= 0 for w in weights
        ):
            raise ValueError(f"mixture state: field 'weights' must be a list of finite numbers >= 0, got {weights!r}")
        return cls(
            epoch=epoch,
            samples_per_epoch=n,
            names=tuple(cols[0]),
            units=tuple(cols[1]),
            frames=tuple(cols[2]),
            base=tuple(cols[3]),
            skipped=tuple(skipped),
            weights=tuple(float(w) for w in weights),
        )


def _short(names: Sequence[str], k: int = 5) -> str:
    names = list(names)
    return ", ".join(repr(n) for n in names[:k]) + (f" and {len(names) - k} more" if len(names) > k else "")
