"""Effective shares of a mixture's entries from its weighting rule, the entries' sizes and who is left out.

An entry's raw weight is its size under the rule times its own ``weight`` (default 1):
``frames`` -> selected frames, ``episodes`` -> selected episodes, ``uniform`` -> 1,
``temperature`` -> (selected frames or episodes) ** alpha, ``explicit`` -> 1 (the weight alone).
Shares are the raw weights normalised over the entries that take part.

Re-spread rule for skipped entries (preflight's ``on_error="skip"``): a skipped entry's share goes to the
others in proportion to their own shares, i.e. the shares are re-normalised over the remaining entries
(for the size rules this equals applying the rule to the remaining entries alone). numpy only.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from .spec import MixtureSpec

__all__ = ["raw_weights", "shares"]


def raw_weights(spec: MixtureSpec, frames: ArrayLike, episodes: ArrayLike) -> np.ndarray:
    """One raw (unnormalised) weight per entry of `spec`, given each entry's selected frames and episodes."""
    rule, alpha = spec.weighting.rule, spec.weighting.alpha
    f = np.asarray(frames, dtype=np.float64)
    e = np.asarray(episodes, dtype=np.float64)
    mult = np.asarray([1.0 if x.weight is None else float(x.weight) for x in spec.entries])
    if rule == "frames":
        size = f
    elif rule == "episodes":
        size = e
    elif rule == "temperature":
        size = (f if spec.weighting.size == "frames" else e) ** alpha
    else:  # uniform, explicit
        size = np.ones_like(f)
    return size * mult


def shares(raw: ArrayLike, included: ArrayLike | None = None) -> np.ndarray:
    """`raw` weights normalised over the `included` entries (others get 0). All zeros stay zeros."""
    w = np.asarray(raw, dtype=np.float64).copy()
    if included is not None:
        w[~np.asarray(included, dtype=bool)] = 0.0
    total = w.sum()
    return w / total if total > 0 else w
