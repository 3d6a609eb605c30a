"""The two sides of an eval split as two datasets: `SplitSides`, what every dataset class gets for it.

A dataset built with an ``eval_split`` (single datasets: the argument; mixtures: the spec's field) is one side of
it, ``split="train"`` (default) or ``"eval"``. `SplitSides.eval_dataset` builds the other side's dataset with the
same arguments: its own object, its own order and state (its loader's `state_dict`), so iterating it never moves
the training order. Which episodes each side holds is a pure function of the split option and the dataset's
episodes (`order.eval_split`), so both objects agree in every process.
"""

from __future__ import annotations

from typing import Any

from ..order.eval_split import SIDES, EvalSplit

__all__ = ["SplitSides", "checked_split"]


def checked_split(eval_split: Any, split: Any) -> EvalSplit | None:
    """The `eval_split` option as an `EvalSplit` (or None), `split` checked: ValueError naming what is wrong."""
    if split not in SIDES:
        raise ValueError(f"split must be one of {', '.join(SIDES)}, got {split!r}")
    got = EvalSplit.of(eval_split)
    if got is None and split == "eval":
        raise ValueError("split='eval' needs an eval_split (which episodes are held out)")
    return got


class SplitSides:
    """`split` ("train" or "eval"), `eval_split` (`order.eval_split.EvalSplit` or None) and the side datasets.
    A constructor calls `remember(locals())` first: the outermost constructor's arguments are kept for
    `eval_dataset` / `train_dataset`."""

    split: str = "train"
    eval_split: EvalSplit | None = None

    def remember(self, given: dict[str, Any]) -> None:
        if "_given" not in self.__dict__:  # the outermost constructor's arguments (a subclass calls it first)
            self._given = {k: v for k, v in given.items() if k not in ("self", "__class__")}

    def side(self, split: str, **overrides):
        """This dataset's arguments with side `split` (and `overrides`): a new dataset of this class."""
        if self.eval_split is None:
            raise ValueError(f"{type(self).__name__} was built without an eval_split: it has no {split} side")
        if split == self.split and not overrides:
            return self
        return type(self)(**{**self._given, **overrides, "split": split})

    def eval_dataset(self, **overrides):
        """The held-out side: the same dataset with ``split="eval"`` (its own order and state). `overrides`:
        arguments that differ (e.g. ``shuffle=False``, ``image_transforms=None``)."""
        return self.side("eval", **overrides)

    def train_dataset(self, **overrides):
        """The training side (``split="train"``)."""
        return self.side("train", **overrides)
