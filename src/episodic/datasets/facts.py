"""What every dataset class says about its data the way LeRobot's datasets do (from `self.meta`)."""

from __future__ import annotations


class DatasetFacts:
    """`fps` and `features` (LeRobot's feature dicts) of a dataset with a `meta` (DatasetMetadata)."""

    @property
    def fps(self) -> int:
        return self.meta.fps

    @property
    def features(self) -> dict:
        return self.meta.features
