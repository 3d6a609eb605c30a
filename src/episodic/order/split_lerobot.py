"""LeRobot 0.6's eval split (``make_train_eval_datasets``, ``--dataset.eval_split``), so that a LeRobot run and an
episodic run hold out the same episodes.

The episodes, in the order the dataset's ``episodes`` list gives them (all episodes ascending when there is no
list), are grouped by their first task (``""`` for an episode without one); each group keeps its episodes in
that order and holds out its last ``ceil(n * fraction)`` (the product in float64, as Python's ``math.ceil(len(eps)
* eval_split)``). A group of one episode is held out whole at any fraction > 0. numpy only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

__all__ = ["lerobot_split"]


def lerobot_split(episodes: np.ndarray, first_tasks: Sequence[str], fraction: float) -> tuple[np.ndarray, np.ndarray]:
    """(kept, held out) episodes, each ascending: `episodes` in list order, `first_tasks[i]` the first task of
    `episodes[i]`, split by LeRobot 0.6's rule (see the module docstring)."""
    episodes = np.asarray(episodes, dtype=np.int64).reshape(-1)
    if len(first_tasks) != episodes.size:
        raise ValueError(f"one task per episode: {episodes.size} episodes, {len(first_tasks)} tasks")
    groups: dict[str, list[int]] = {}
    for e, t in zip(episodes.tolist(), first_tasks):
        groups.setdefault(str(t), []).append(e)
    kept, held = [], []
    for members in groups.values():
        k = math.ceil(len(members) * float(fraction))
        kept += members[: len(members) - k]
        held += members[len(members) - k :]
    return np.sort(np.asarray(kept, dtype=np.int64)), np.sort(np.asarray(held, dtype=np.int64))
