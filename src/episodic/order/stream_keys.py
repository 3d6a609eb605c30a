"""The random keys of the streaming order, derived from ``(seed, epoch, segment, consumer)``.

A "segment" is one stretch of an epoch consumed under one topology (world size,
DataLoader workers, batch size); segment 0 is the epoch's first. These keys are part
of the saved-state format: changing them changes the order that a saved resume state
refers to.
"""

from __future__ import annotations

import numpy as np

from episodic.order.permutation import GOLDEN, MASK64, MIX1

__all__ = ["consumer_rng", "segment_seed"]


def segment_seed(seed: int, segment: int) -> int:
    """The permutation seed of ``segment``: ``seed`` itself for segment 0 (so a run that never changes
    topology splits episodes by ``permute(seed, epoch)``), else a 64-bit mix of ``(seed, segment)``."""
    return int(seed) if segment == 0 else (int(seed) * GOLDEN + segment * MIX1) & MASK64


def consumer_rng(seed: int, epoch: int, segment: int, consumer: int) -> np.random.Generator:
    """A fresh generator for one consumer's pool order: a pure function of its four arguments (the seed
    taken modulo 2**64), independent across consumers, segments and epochs."""
    return np.random.default_rng([int(seed) & MASK64, int(epoch), int(segment), int(consumer), 0x5EED])
