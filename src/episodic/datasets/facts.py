"""What every dataset class says about its data the way LeRobot's datasets do (from `self.meta`), and what both
mixture datasets say about theirs (from `self.layout`, `self.sampler`, `self.report`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ..mixture.norm_stats import EntryStats, entry_stats, pooled_stats
from ..mixture.shares import share_table
from .item_layout import features

if TYPE_CHECKING:
    import numpy as np

    from ..counters import Counters, Tally
    from ..format.metadata import DatasetMetadata
    from ..mixture.checking.report import PreflightReport
    from ..mixture.layout import MixtureLayout
    from ..order.eval_split import EvalSplit
    from ..order.mixture_sampler import MixtureSampler
    from .item_layout import ItemLayout
    from .item_spec import ItemSpec


class DatasetFacts:
    """`fps` and `features` (LeRobot's feature dicts) of a dataset with a `meta` (DatasetMetadata) and a `spec`
    (ItemSpec)."""

    meta: DatasetMetadata
    spec: ItemSpec

    @property
    def fps(self) -> int:
        """The items' frame rate: the dataset's, or the `target_fps` its rows are resampled to."""
        target = self.spec.target_fps
        return self.meta.fps if target is None else target

    @property
    def features(self) -> dict:
        return self.meta.features


class MixtureFacts:
    """Sizes, features, statistics and realised shares of a mixture dataset (map-style or streaming) with a
    `layout` (MixtureLayout), its `item_layout` (item_layout.ItemLayout), a `sampler` (MixtureSampler), a `report`
    (PreflightReport: the side of an eval split it holds), a `stats_report` (the training side's), `split` and
    `eval_split`, `target_shares`, `items_per_entry` (counters.Tally) and `counters`."""

    layout: MixtureLayout
    item_layout: ItemLayout
    sampler: MixtureSampler
    report: PreflightReport
    stats_report: PreflightReport
    split: str
    eval_split: EvalSplit | None
    target_shares: np.ndarray
    items_per_entry: Tally
    counters: Counters

    @property
    def features(self) -> dict:
        return features(self.item_layout)

    @property
    def fps(self) -> int | None:
        """The mixture's control rate (``target_fps``: every entry's rows resampled to it); None without one
        (each entry keeps its own)."""
        return self.report.spec.target_fps

    @property
    def num_entries(self) -> int:
        return len(self.layout.entries)

    @property
    def num_frames(self) -> int:
        """Frames of the entries' selected episodes."""
        return int(self.sampler.frames.sum())

    @property
    def num_episodes(self) -> int:
        return int(sum(len(f.episodes) for f in self.sampler.entries))

    def entry_stats(self) -> list[EntryStats]:
        """Each entry's normalisation statistics under the shared keys, entry order: stats.json where it describes the
        entry's selection, else computed from the data, once (cached by content; `mixture.norm_stats`). With an
        eval split, both sides give the training side's statistics (a model is normalised by what it trained on)."""
        return entry_stats(self.layout, self.stats_report)

    def pooled_stats(self, group_of: Callable | None = None) -> dict:
        """Statistics pooled over the entries of each group (default: the entry's group / robot type)."""
        return pooled_stats(self.layout, self.entry_stats(), group_of)

    def shares(self) -> dict:
        """Target vs realised share per entry and per group, from the items built so far by this process and
        its DataLoader workers (`mixture.shares.share_table`), with the episodes and frames each entry holds in
        this dataset; ``"split"``: the side of the spec's eval split it is (None without one), ``"eval_split"``
        the split. Workers build ahead of the training loop (the DataLoader's prefetch), so counts lead what the
        loop consumed by up to that many batches."""
        facts = [self.report.entries[e.index] for e in self.layout.entries]
        table = share_table(
            self.layout.names,
            self.layout.groups,
            self.target_shares,
            self.items_per_entry.totals(),
            [(f.episodes, f.frames) for f in facts],
        )
        table["split"] = self.split if self.eval_split is not None else None
        table["eval_split"] = self.eval_split.to_dict() if self.eval_split is not None else None
        return table

    def stats(self) -> dict:
        """Counters summed over this process and its workers (`episodic.counters`), plus ``"shares"``."""
        return {**self.counters.snapshot(), "shares": self.shares()}
