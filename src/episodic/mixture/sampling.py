"""The map-style order of a checked mixture: a `MixtureSampler` built from a preflight report.

Entries that take part (status ``ok``, share > 0 or not) become the sampler's entries, in spec order, each with the
frames of its selected episodes (`entry_checks.selected_episodes`, minus ``drop_n_first/last_frames`` per episode;
resampled frames at the spec's ``target_fps``, `tabular.resample.episode_bounds`); weights are the report's shares;
skipped entries are recorded in the mixture state. Flat indices are the entries' kept frames side by side, over the
entries that take part (`MixtureSampler.split`). No data file is read.
"""

from __future__ import annotations

from ..order.frames import EpisodeFrames
from ..order.mixture_sampler import MixtureSampler
from ..tabular.resample import episode_bounds
from .checking.entry_checks import selected_episodes
from .checking.report import PreflightReport

__all__ = ["build_sampler"]


def build_sampler(
    report: PreflightReport,
    *,
    seed: int = 0,
    shuffle: bool = True,
    drop_n_first_frames: int = 0,
    drop_n_last_frames: int = 0,
) -> tuple[MixtureSampler, list[int]]:
    """The sampler of `report`'s mixture and, per sampler entry, the index of its spec entry."""
    if report.on_error == "raise":
        report.raise_for_errors()
    used = [rep.index for rep in report.entries if rep.status == "ok"]
    frames, weights, own, names = [], [], [], []
    for i in used:
        meta = report.metadata[i]
        sel = selected_episodes(report.spec.entries[i], len(meta.episodes))
        first, last = episode_bounds(meta, report.spec.target_fps)  # rows at the control rate, when there is one
        frames.append(EpisodeFrames(first, last, sel, drop_n_first_frames, drop_n_last_frames))
        weights.append(report.entries[i].share)
        own.append(report.entries[i].weight)  # its own raw weight: what a resume compares to name re-weighted entries
        names.append(report.entries[i].name)
    sampler = MixtureSampler(
        frames,
        weights,
        names,
        samples_per_epoch=report.spec.samples_per_epoch,
        shuffle=shuffle,
        seed=seed,
        skipped=report.skipped,
        own_weights=own,
    )
    return sampler, used
