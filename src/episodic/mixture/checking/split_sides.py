"""The two sides of a mixture's eval split as two checked mixtures: `side_report`.

A spec with an ``eval_split`` holds out episodes of every entry (`entry_checks.entry_sides`, per task). The side
``split`` ("train" or "eval") of a checked mixture is the report of the same mixture without a split whose
entries select exactly that side's episodes (``episodes`` listed, nothing excluded): sizes, raw weights and
shares under the spec's weighting rule over that side's sizes. Everything built from a report (the order, the
entries' rows, the files) then holds that side and nothing else. On the eval side, an entry without held-out
episodes takes no part (status ``skipped``, with a warning) and ``samples_per_epoch`` is dropped (an eval epoch
is one pass over the held-out frames in the mixture's proportions). No data is read.
"""

from __future__ import annotations

from dataclasses import replace

from ...order.eval_split import SIDES
from ...tabular.resample import episode_lengths
from .entry_checks import entry_sides
from .report import PreflightReport, Problem
from .weights import raw_weights, shares

__all__ = ["side_report"]


def side_report(report: PreflightReport, split: str) -> PreflightReport:
    """The report of side `split` of `report`'s eval split (see the module docstring); `report` itself for
    ``"train"`` when its spec has no split."""
    if split not in SIDES:
        raise ValueError(f"split must be one of {', '.join(SIDES)}, got {split!r}")
    spec = report.spec
    if spec.eval_split is None:
        if split == "train":
            return report
        raise ValueError(
            f"{spec.origin}: split='eval' needs the mixture spec's eval_split (which episodes are held out)"
        )
    entries, facts, problems = [], [], list(report.problems)
    for i, (entry, rep) in enumerate(zip(spec.entries, report.entries)):
        meta = report.metadata[i] if i < len(report.metadata) else None
        if rep.status != "ok" or meta is None:
            entries.append(entry)
            facts.append(rep)
            continue
        train, held = entry_sides(spec, entry, meta)
        side = train if split == "train" else held
        if not side.size:
            problems.append(
                Problem(
                    i,
                    rep.name,
                    "eval_split",
                    f"no episode on the {split} side: the entry takes no part in it",
                    "warning",
                )
            )
        entries.append(replace(entry, episodes=tuple(side.tolist()), exclude_episodes=()))
        facts.append(
            replace(
                rep,
                status="ok" if side.size else "skipped",
                episodes=int(side.size),
                frames=int(episode_lengths(meta, spec.target_fps)[side].sum()),
                eval_episodes=0,
                eval_frames=0,
            )
        )
    side_spec = replace(
        spec,
        entries=tuple(entries),
        eval_split=None,
        samples_per_epoch=spec.samples_per_epoch if split == "train" else None,
    )
    raw = raw_weights(side_spec, [r.frames for r in facts], [r.episodes for r in facts])
    share = shares(raw, [r.status == "ok" for r in facts])
    facts = [
        replace(r, weight=float(w), share=float(s)) if r.status != "error" else r for r, w, s in zip(facts, raw, share)
    ]
    return replace(report, spec=side_spec, entries=tuple(facts), problems=tuple(problems))
