"""Which episodes a dataset (or a mixture entry) holds out for evaluation: the `EvalSplit` option and
`split_episodes`, the split of one episode list by its rule.

Two rules, each in its own module:

- ``stratified`` (default, `order.split_stratified`): per task, in proportion, keyed by the split's `seed`;
  every entry of two episodes or more is on both sides.
- ``lerobot`` (`order.split_lerobot`): LeRobot 0.6's ``make_train_eval_datasets`` rule, the last
  ``ceil(n * fraction)`` episodes of each task in list order, so that a LeRobot run holds out the same ones.

A split is a pure function of (the option, the episodes in list order, their tasks): nothing of the order
(its seed, epoch, rank, world size or workers) enters it, so every process of every topology computes the same
sides. The task of an episode is its first task (``""`` when it has none), as LeRobot's. numpy only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from episodic.order.split_lerobot import lerobot_split
from episodic.order.split_stratified import stratified_split

__all__ = ["EvalSplit", "SIDES", "SPLIT_RULES", "split_episodes", "split_problems_of"]

SPLIT_RULES = ("stratified", "lerobot")
SIDES = ("train", "eval")
_FIELDS = ("fraction", "rule", "seed")


def split_problems_of(fraction: Any, rule: Any, seed: Any) -> list[str]:
    """Every problem of these option values (empty when they make a valid `EvalSplit`)."""
    out = []
    ok = isinstance(fraction, (int, float)) and not isinstance(fraction, bool) and math.isfinite(fraction)
    if not ok or not 0 < fraction < 1:
        out.append(f"eval_split.fraction must be a number in (0, 1), got {fraction!r}")
    if rule not in SPLIT_RULES:
        out.append(f"eval_split.rule must be one of {', '.join(SPLIT_RULES)}, got {rule!r}")
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2**63:
        out.append(f"eval_split.seed must be an int in [0, 2**63), got {seed!r}")
    return out


@dataclass(frozen=True)
class EvalSplit:
    """Hold out `fraction` of the episodes (per task; see the module docstring) by `rule` ("stratified" or
    "lerobot"); `seed` keys the stratified rule's choice (it is not the order's seed: the held-out episodes stay
    the same whatever order a run draws). Checked when built (ValueError naming every bad field)."""

    fraction: float
    rule: str = "stratified"
    seed: int = 0

    def __post_init__(self):
        problems = split_problems_of(self.fraction, self.rule, self.seed)
        if problems:
            raise ValueError("; ".join(problems))

    @classmethod
    def of(cls, value: Any) -> EvalSplit | None:
        """An option given as an `EvalSplit`, a fraction, a mapping of its fields, or None (no split)."""
        if value is None or isinstance(value, EvalSplit):
            return value
        if isinstance(value, Mapping):
            unknown = sorted(str(k) for k in value if k not in _FIELDS)
            if unknown:
                raise ValueError(f"eval_split: unknown field(s) {unknown} (fields: {', '.join(_FIELDS)})")
            if "fraction" not in value:
                raise ValueError("eval_split: missing field 'fraction'")
            return cls(**dict(value))
        return cls(value)

    def to_dict(self) -> dict:
        return {"fraction": self.fraction, "rule": self.rule, "seed": self.seed}


def split_episodes(split: EvalSplit, episodes: np.ndarray, tasks: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """(train, eval) episodes, each ascending, of `episodes` (in list order, no repeats), `tasks[i]` the first task
    of `episodes[i]`."""
    if split.rule == "lerobot":
        return lerobot_split(episodes, tasks, split.fraction)
    return stratified_split(episodes, tasks, split.fraction, split.seed)
